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
  self.dropout = nn.Dropout(c.dropout)
end

function MLP:forward(x)
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

function Block:init(c)
  local o = { bias = c.bias, dtype = c.dtype, device = c.device }
  self.ln_1 = nn.LayerNorm(c.dim, o)
  self.attn = CausalSelfAttention(c)
  self.ln_2 = nn.LayerNorm(c.dim, o)
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
  self.ln_f = nn.LayerNorm(c.dim, { bias = c.bias, dtype = c.dtype, device = c.device })
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
  for _, block in ipairs(self.h) do x, pending = block:forward_pending(x, pending) end
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

--- num_parameters() counts the tied embedding once
return M
