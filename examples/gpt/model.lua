-- examples/gpt/model.lua: a GPT (nanoGPT's architecture: pre-norm blocks, causal self-attention, tanh-GELU MLP, tied token embedding and output head) in tlua nn modules.
local tl = require("tlua")
local nn = tl.nn

local M = {}

--- The defaults: nanoGPT's shakespeare-char shape.
M.defaults = {
  vocab = 65, -- tokens (the data sets it)
  context = 256, -- the longest sequence (position embeddings)
  layers = 6,
  dim = 384,
  heads = 6,
  dropout = 0.0, -- on embeddings, attention probabilities, residual branches
  bias = false, -- biases in Linear and LayerNorm (nanoGPT's default is false)
  gelu = "tanh", -- "tanh" (GPT-2) or "none" (exact erf)
  attention = "fused", -- "fused" (tl.scaled_dot_product_attention) or "composed" (matmul, softmax)
  fused_loss = true, -- the head and loss as one tl.linear_cross_entropy (no [B*T, vocab] logits)
  fused_norm = true, -- each residual add fused into the next layer norm (tl.add_layer_norm)
  fused_mlp = true, -- the MLP as one tl.linear_gelu_linear (GELU's output not kept; GELU's derivative and
  -- the bias gradients in the GEMMs' epilogues)
  gelu_epilogue = false, -- with fused_mlp: GELU in the first GEMM's epilogue too (faster; see linear_gelu_linear)
  moe = 0, -- E > 0: the feed-forward is a mixture of E experts (nn.MoE over grouped_mm), top 2
  top_k = 2,
  sparse_ffn = 0, -- d in (0, 1): the feed-forward's Linears are BlockSparseLinear at density d
  block = 32, -- the block size of sparse_ffn
  dtype = "float32",
  device = "cpu",
}

--- config(overrides): the defaults with the given fields replaced; checks the shape
function M.config(overrides)
  local c = {}
  for k, v in pairs(M.defaults) do c[k] = v end
  for k, v in pairs(overrides or {}) do
    if M.defaults[k] == nil then error("gpt: unknown config field '" .. tostring(k) .. "'", 2) end
    c[k] = v
  end
  if c.dim % c.heads ~= 0 then
    error(string.format("gpt: dim (%d) must be a multiple of heads (%d)", c.dim, c.heads), 2)
  end
  return c
end

local function tensor_opts(c) return { dtype = c.dtype, device = c.device } end

-- ---- attention ----------------------------------------------------------------------------
-- softmax(q k^T / sqrt(D) + causal mask) v by separate ops: the reference the fused op is
-- checked against, and a fallback (it holds the T x T matrix)
local function composed_attention(q, k, v, dropout)
  local T, D = q.shape[3], q.shape[4]
  local scores = tl.matmul(q, k:transpose(3, 4)) * (1 / math.sqrt(D))
  local rows = tl.arange(T, { device = q.device }):view(T, 1)
  local cols = tl.arange(T, { device = q.device }):view(1, T)
  local masked = tl.where(cols:gt(rows), tl.full({ 1 }, -math.huge, { dtype = scores.dtype, device = q.device }), scores)
  local p = tl.softmax(masked, -1)
  if dropout > 0 then p = nn.functional.dropout(p, dropout, true) end
  return tl.matmul(p, v)
end

local CausalSelfAttention = nn.Module:extend("CausalSelfAttention")
M.CausalSelfAttention = CausalSelfAttention

function CausalSelfAttention:init(c)
  self.heads, self.dim, self.dropout, self.fused = c.heads, c.dim, c.dropout, c.attention ~= "composed"
  self.c_attn = nn.Linear(c.dim, 3 * c.dim, { bias = c.bias, dtype = c.dtype, device = c.device })
  self.c_proj = nn.Linear(c.dim, c.dim, { bias = c.bias, dtype = c.dtype, device = c.device })
  self.resid_dropout = nn.Dropout(c.dropout)
end

function CausalSelfAttention:forward(x)
  local B, T, C = x.shape[1], x.shape[2], x.shape[3]
  local H = self.heads
  -- [B, T, 3C] -> [3, B, H, T, D] unbound into q, k, v: strided views the kernel reads in place;
  -- its backward writes their gradients side by side, which unbind's takes without a copy
  local qkv = self.c_attn(x):view(B, T, 3, H, C // H):permute(3, 1, 4, 2, 5)
  local q, k, v = table.unpack(qkv:unbind(1))
  local p = self.training and self.dropout or 0
  local y
  if self.fused then
    y = tl.scaled_dot_product_attention(q, k, v, { causal = true, dropout = p })
  else
    y = composed_attention(q, k, v, p)
  end
  y = y:transpose(2, 3):contiguous():view(B, T, C)
  return self.resid_dropout(self.c_proj(y))
end

--- forward_cached(x [B, T, C], layer_cache, pos) -> [B, T, C]: the attention of x's tokens, which
--- sit at positions pos + 1 .. pos + T, over the keys and values the layer's cache holds for
--- positions 1 .. pos and their own. Their keys and values are written into the cache in place:
--- layer_cache.k and .v are [B, H, capacity, D] tensors allocated at the first call (in k's dtype,
--- so under autocast in bf16). pos = 0 is one causal pass (a prompt: query i sees keys j <= i,
--- the square case of scaled_dot_product_attention's causal); pos > 0 takes one token (T = 1),
--- which sees every cached key, so no mask. The fused kernel runs whatever config.attention says
--- (the same math as the composed path).
function CausalSelfAttention:forward_cached(x, layer_cache, pos)
  local B, T, C = x.shape[1], x.shape[2], x.shape[3]
  local H = self.heads
  local qkv = self.c_attn(x):view(B, T, 3, H, C // H):permute(3, 1, 4, 2, 5)
  local q, k, v = table.unpack(qkv:unbind(1))
  local cached_k, cached_v = layer_cache.k, layer_cache.v
  if not cached_k or cached_k.dtype ~= k.dtype then
    local shape = { B, H, layer_cache.capacity, C // H }
    cached_k = tl.empty(shape, { dtype = k.dtype, device = k.device })
    cached_v = tl.empty(shape, { dtype = v.dtype, device = v.device })
    layer_cache.k, layer_cache.v = cached_k, cached_v
  end
  cached_k:narrow(3, pos + 1, T):copy_(k)
  cached_v:narrow(3, pos + 1, T):copy_(v)
  local keys, values = cached_k:narrow(3, 1, pos + T), cached_v:narrow(3, 1, pos + T)
  local y = tl.scaled_dot_product_attention(q, keys, values, { causal = pos == 0 and T > 1 })
  y = y:transpose(2, 3):contiguous():view(B, T, C)
  return self.c_proj(y)
end

-- ---- feed-forward -------------------------------------------------------------------------
local MLP = nn.Module:extend("MLP")
M.MLP = MLP

function MLP:init(c)
  local o = { bias = c.bias, dtype = c.dtype, device = c.device }
  if c.sparse_ffn > 0 then
    local s = { block = c.block, density = c.sparse_ffn, bias = c.bias, dtype = c.dtype, device = c.device }
    self.c_fc = nn.BlockSparseLinear(c.dim, 4 * c.dim, s)
    self.c_proj = nn.BlockSparseLinear(4 * c.dim, c.dim, s)
  else
    self.c_fc = nn.Linear(c.dim, 4 * c.dim, o)
    self.c_proj = nn.Linear(4 * c.dim, c.dim, o)
  end
  self.gelu = c.gelu
  self.fused = c.fused_mlp and c.sparse_ffn == 0
  self.gelu_epilogue = c.gelu_epilogue
  self.dropout = nn.Dropout(c.dropout)
end

function MLP:forward(x)
  if self.fused then
    return self.dropout(tl.linear_gelu_linear(x, self.c_fc.weight, self.c_fc.bias, self.c_proj.weight,
      self.c_proj.bias, { approximate = self.gelu == "tanh" and "tanh" or "none", gelu_epilogue = self.gelu_epilogue }))
  end
  local h = self.c_fc(x)
  h = self.gelu == "tanh" and tl.gelu_tanh(h) or tl.gelu(h)
  return self.dropout(self.c_proj(h))
end

local MoEFeedForward = nn.Module:extend("MoEFeedForward")
M.MoEFeedForward = MoEFeedForward

function MoEFeedForward:init(c)
  self.moe = nn.MoE{ dim = c.dim, hidden = 4 * c.dim, experts = c.moe, top_k = c.top_k, bias = c.bias,
    activation = c.gelu == "tanh" and "gelu_tanh" or "gelu", dtype = c.dtype, device = c.device }
  self.dropout = nn.Dropout(c.dropout)
end

function MoEFeedForward:forward(x) return self.dropout(self.moe(x)) end

-- ---- the model ------------------------------------------------------------------------------
local Block = nn.Module:extend("Block")
M.Block = Block

-- the layer norms' options: under autocast their outputs (which only GEMMs read) come out in the
-- autocast dtype, computed in float32 and rounded once, as a cast after them would give
local function norm_opts(c)
  return { bias = c.bias, dtype = c.dtype, device = c.device, output_dtype = "autocast" }
end

function Block:init(c)
  self.ln_1 = nn.LayerNorm(c.dim, norm_opts(c))
  self.attn = CausalSelfAttention(c)
  self.ln_2 = nn.LayerNorm(c.dim, norm_opts(c))
  self.mlp = c.moe > 0 and MoEFeedForward(c) or MLP(c)
end

--- forward(x) -> x + attn(ln_1(x)) + mlp(ln_2(...)), the block's output
function Block:forward(x)
  local h, m = self:forward_pending(x)
  return h + m
end

--- forward_pending(x, pending?) -> h, m: the block with each residual add fused into the layer
--- norm after it (LayerNorm:add_forward, one pass over the stream instead of two). Its input is
--- x + pending (pending: the previous block's last branch, not added yet; nil when x is the
--- whole stream); it returns its output as the stream h and its last branch m, not added yet
--- (h + m is forward's result): the next block's ln_1, or the model's ln_f, adds them.
function Block:forward_pending(x, pending)
  local h
  if pending == nil then
    h = self.ln_1(x)
  else
    h, x = self.ln_1:add_forward(x, pending)
  end
  local n
  n, x = self.ln_2:add_forward(x, self.attn(h))
  return x, self.mlp(n)
end

--- forward_cached(x, layer_cache, pos): forward with the attention over the layer's cache
--- (CausalSelfAttention:forward_cached); for generation in eval mode (no dropout)
function Block:forward_cached(x, layer_cache, pos)
  x = x + self.attn:forward_cached(self.ln_1(x), layer_cache, pos)
  return x + self.mlp(self.ln_2(x))
end

local GPT = nn.Module:extend("GPT")
M.GPT = GPT

--- GPT(config): config from M.config (a table of overrides is taken too)
function GPT:init(c)
  c = c.vocab and c.heads and c or M.config(c)
  self.config = c
  local o = tensor_opts(c)
  self.wte = nn.Embedding(c.vocab, c.dim, o)
  self.wpe = nn.Embedding(c.context, c.dim, o)
  self.drop = nn.Dropout(c.dropout)
  local blocks = {}
  for i = 1, c.layers do blocks[i] = Block(c) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(c.dim, norm_opts(c))
  self.lm_head = nn.Linear(c.dim, c.vocab, { bias = false, dtype = c.dtype, device = c.device })
  self.lm_head.weight = self.wte.weight -- tied: one tensor, gradients from both uses add up
  self:reset_parameters()
end

--- reset_parameters(): nanoGPT's init: N(0, 0.02) for Linear and Embedding weights, zero
--- biases, N(0, 0.02 / sqrt(2 layers)) for the projections into the residual stream
function GPT:reset_parameters()
  local init, std = nn.init, 0.02
  local proj_std = std / math.sqrt(2 * self.config.layers)
  tl.no_grad(function()
    for name, p in self:named_parameters() do
      if name:match("bias$") or name:match("^h%.%d+%.moe%.b%d$") then
        init.zeros_(p)
      elseif name:match("ln_%d%.weight$") or name:match("ln_f%.weight$") then
        init.ones_(p)
      elseif name:match("c_proj%.weight$") or name:match("c_proj%.blocks$") or name:match("moe%.w2$") then
        init.normal_(p, 0, proj_std)
      else
        init.normal_(p, 0, std)
      end
    end
  end)
end

--- forward(idx [B, T] token ids 1..vocab, targets [B, T]?) -> logits [B, T, vocab], loss?
--- (without targets only the last position's logits, [B, 1, vocab], as generation needs; with
--- targets and config.fused_loss the logits are never made and come back nil: the head and the
--- loss are one tl.linear_cross_entropy)
function GPT:forward(idx, targets)
  local B, T = idx.shape[1], idx.shape[2]
  local c = self.config
  if T > c.context then
    error(string.format("gpt: a sequence of %d tokens is longer than the context (%d)", T, c.context), 2)
  end
  local pos = tl.arange(1, T + 1, { device = idx.device })
  local x = self.drop(self.wte(idx) + self.wpe(pos))
  -- each residual add is fused into the next layer norm: a block hands its last branch on
  local pending
  if c.fused_norm then
    for _, block in ipairs(self.h) do x, pending = block:forward_pending(x, pending) end
  else
    for _, block in ipairs(self.h) do x = block(x) end
  end
  if pending then x = self.ln_f:add_forward(x, pending) else x = self.ln_f(x) end
  if targets == nil then
    return self.lm_head(x:narrow(2, T, 1))
  end
  if c.fused_loss then
    return nil, tl.linear_cross_entropy(x, self.lm_head.weight, targets)
  end
  local logits = self.lm_head(x)
  local loss = tl.cross_entropy(logits:view(B * T, c.vocab), targets:reshape(B * T))
  return logits, loss
end

-- ---- generation with a KV cache ---------------------------------------------------------------
-- A cache holds, per layer, the keys and values of the tokens at positions 1 .. length of a
-- window of the sequence that starts at the sequence's token `first`: [B, H, context, D] tensors
-- written in place, so each new token costs one token's forward (its q, k, v, and its attention
-- over the cached keys) instead of the whole window's.

--- new_cache(batch) -> an empty cache for sequences of `batch` rows
function GPT:new_cache(batch)
  local layers = {}
  for i = 1, #self.h do layers[i] = { capacity = self.config.context } end
  return { batch = batch, capacity = self.config.context, first = 1, length = 0, layers = layers }
end

--- forward_cached(idx [B, T], cache) -> logits [B, vocab] of the last of idx's tokens, which
--- follow the cache's `length` tokens (positions length + 1 .. length + T; the cache then holds
--- them too). An empty cache takes a prompt of T <= context tokens in one causal pass; a filled
--- one takes T = 1 token while it has room.
function GPT:forward_cached(idx, cache)
  local B, T = idx.shape[1], idx.shape[2]
  local pos = cache.length
  if B ~= cache.batch then
    error(string.format("gpt: forward_cached: idx has %d rows, the cache %d", B, cache.batch), 2)
  end
  if pos > 0 and T ~= 1 then
    error(string.format("gpt: forward_cached: a filled cache takes 1 token at a time, got %d", T), 2)
  end
  if pos + T > cache.capacity then
    error(string.format("gpt: forward_cached: %d + %d tokens are more than the context (%d)", pos, T,
      cache.capacity), 2)
  end
  local x = self.wte(idx) + self.wpe(tl.arange(pos + 1, pos + T + 1, { device = idx.device }))
  for i, block in ipairs(self.h) do x = block:forward_cached(x, cache.layers[i], pos) end
  cache.length = pos + T
  -- the layer norm and the head are per position: only the last one's logits are needed
  return self.lm_head(self.ln_f(x:narrow(2, T, 1))):view(B, self.config.vocab)
end

--- generate_step(ids [B, N], t, cache) -> logits [B, vocab] of the token after ids' column t,
--- given the window of columns cache.first .. t that the cache holds afterwards:
---   * the cache holds columns first .. t - 1: one token's step (column t);
---   * it is full (context tokens) there: it slides: it is recomputed from the last
---     max(1, context // 2) columns up to t in one causal pass (first moves), then fills again;
---   * anything else (an empty cache, a t that does not follow it): a causal pass over the last
---     min(t, context) columns (a prompt longer than the context keeps its end).
--- The cache knows positions, not ids: another sequence needs a new cache (new_cache).
--- So a window never holds more than context tokens, as GPT:forward's input must not, and the
--- logits are GPT:forward's over ids' columns first .. t (spec/gpt_spec.lua checks it).
function GPT:generate_step(ids, t, cache)
  local context = cache.capacity
  local first
  if cache.length > 0 and cache.first + cache.length == t then
    if cache.length < context then return self:forward_cached(ids:narrow(2, t, 1), cache) end
    first = t - math.max(1, context // 2) + 1
  else
    first = math.max(1, t - context + 1)
  end
  cache.first, cache.length = first, 0
  return self:forward_cached(ids:narrow(2, first, t - first + 1), cache)
end

-- ---- model FLOPs ------------------------------------------------------------------------------
--- active_parameters(config) -> the weights a token goes through: every parameter, the tied
--- embedding once, the position embedding left out (nanoGPT's count for its FLOPs); a mixture of
--- experts counts the router and top_k experts, a block-sparse feed-forward its share of blocks
function M.active_parameters(c)
  c = M.config(c)
  local d, b = c.dim, c.bias and 1 or 0
  local norm = d + b * d
  local attention = 3 * d * d + b * 3 * d + d * d + b * d
  local ffn
  if c.moe > 0 then
    ffn = d * c.moe + c.top_k * (8 * d * d + b * 5 * d)
  else
    ffn = 8 * d * d * (c.sparse_ffn > 0 and c.sparse_ffn or 1) + b * 5 * d
  end
  return c.vocab * d + c.layers * (2 * norm + attention + ffn) + norm
end

--- flops_per_token(config) -> the FLOPs of one training token (forward and backward), as nanoGPT
--- and PaLM count them: 6 per active parameter (2 forward, 4 backward: a multiply-add per weight)
--- plus the attention's two products over the context, 12 * layers * context * dim
function M.flops_per_token(c)
  c = M.config(c)
  return 6 * M.active_parameters(c) + 12 * c.layers * c.context * c.dim
end

--- Dense peak TFLOP/s by device and dtype, for MFU: the first row whose pattern the CUDA device
--- name matches (Lua patterns, plain text here). bfloat16 and float16 are tensor-core peaks;
--- float32 is the plain fp32 peak (train.lua does not turn TF32 on).
M.peaks = {
  { pattern = "H100.*PCIe", bfloat16 = 756, float16 = 756, float32 = 51 },
  { pattern = "H100", bfloat16 = 989.4, float16 = 989.4, float32 = 67 },
  { pattern = "H200", bfloat16 = 989.4, float16 = 989.4, float32 = 67 },
  { pattern = "A100", bfloat16 = 312, float16 = 312, float32 = 19.5 },
}

--- peak_tflops(device_name, dtype) -> the table's peak, or nil for a device or dtype it lacks
function M.peak_tflops(name, dtype)
  for _, row in ipairs(M.peaks) do
    if name and name:match(row.pattern) then return row[dtype] end
  end
  return nil
end

--- num_parameters() counts the tied embedding once
return M
