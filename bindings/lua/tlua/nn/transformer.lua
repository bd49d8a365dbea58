-- tl.nn transformer modules (merged into tl.nn by nn/init.lua): MultiheadAttention, TransformerEncoderLayer, TransformerEncoder, with PyTorch's parameters, masks and shapes.
local tl = require("tlua")
local base = require("tlua.nn.module")
local layers = require("tlua.nn.layers")
local containers = require("tlua.nn.containers")
local init = require("tlua.nn.init_weights")
local F = require("tlua.nn.functional")
local shape_str = require("tlua.nn.state_dict").shape_str
local options = require("tlua.options")

local Module, is_module = base.Module, base.is_module

local classes = {}

-- each class's options and forward's (tlua.options); init is level 1, Module.new 2, the user 3; forward
-- is level 1, the user 2 (Module.__call calls it in a tail call)
local ACCEPTED = {
  MultiheadAttention = { dropout = "number", bias = "boolean", add_bias_kv = "boolean", add_zero_attn = "boolean",
    kdim = "integer", vdim = "integer", batch_first = "boolean", dtype = "string", device = "string" },
  MultiheadAttention_forward = { key_padding_mask = "tensor", need_weights = "boolean", attn_mask = "tensor",
    average_attn_weights = "boolean", is_causal = "boolean" },
  TransformerEncoderLayer = { dim_feedforward = "integer", dropout = "number", activation = "string|callable",
    layer_norm_eps = "number", batch_first = "boolean", norm_first = "boolean", bias = "boolean", dtype = "string",
    device = "string" },
  TransformerEncoderLayer_forward = { src_mask = "tensor", src_key_padding_mask = "tensor", is_causal = "boolean" },
  TransformerEncoder = { norm = "table" },
  TransformerEncoder_forward = { mask = "tensor", src_key_padding_mask = "tensor", is_causal = "boolean" },
}

local function fail(msg) options.error(msg, 3) end

local function check_size(v, what, who)
  if math.type(v) ~= "integer" or v < 1 then
    fail(string.format("%s: %s must be a positive integer, got %s", who, what, tostring(v)))
  end
end

local function check_probability(p, who)
  if not (p >= 0 and p <= 1) then fail(string.format("%s: dropout must be a probability in [0, 1], got %s", who, p)) end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- ---- MultiheadAttention ------------------------------------------------------------------------
--- MultiheadAttention(embed_dim, num_heads, {dropout = 0, bias = true, add_bias_kv = false,
-- add_zero_attn = false, kdim = embed_dim, vdim = embed_dim, batch_first = false, dtype, device}):
-- PyTorch's multi-head attention. Parameters in_proj_weight [3E, E] (or q_proj_weight [E, E],
-- k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim differ from E), in_proj_bias
-- [3E], bias_k and bias_v [1, 1, E] with add_bias_kv, out_proj (a Linear: out_proj.weight,
-- out_proj.bias); init as torch (xavier_uniform_ projections, zero biases).
local MHA = Module:extend("MultiheadAttention")
classes.MultiheadAttention = MHA

function MHA:init(embed_dim, num_heads, opts)
  local who = "nn.MultiheadAttention"
  opts = options.check(opts, who, ACCEPTED.MultiheadAttention, 3)
  check_size(embed_dim, "embed_dim", who)
  check_size(num_heads, "num_heads", who)
  if embed_dim % num_heads ~= 0 then
    fail(string.format("%s: embed_dim (%d) must be divisible by num_heads (%d)", who, embed_dim, num_heads))
  end
  local kdim, vdim = opts.kdim or embed_dim, opts.vdim or embed_dim
  check_size(kdim, "kdim", who)
  check_size(vdim, "vdim", who)
  local dropout = opts.dropout or 0
  check_probability(dropout, who)
  self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
  self.kdim, self.vdim = kdim, vdim
  self.dropout = dropout
  self.batch_first = opts.batch_first == true
  self.add_zero_attn = opts.add_zero_attn == true
  self.same_embed_dim = kdim == embed_dim and vdim == embed_dim
  local bias = opts.bias ~= false
  local o = tensor_opts(opts)
  if self.same_embed_dim then
    self:register_parameter("in_proj_weight", tl.empty(3 * embed_dim, embed_dim, o))
  else
    self:register_parameter("q_proj_weight", tl.empty(embed_dim, embed_dim, o))
    self:register_parameter("k_proj_weight", tl.empty(embed_dim, kdim, o))
    self:register_parameter("v_proj_weight", tl.empty(embed_dim, vdim, o))
  end
  if bias then self:register_parameter("in_proj_bias", tl.empty(3 * embed_dim, o)) end
  if opts.add_bias_kv then
    self:register_parameter("bias_k", tl.empty(1, 1, embed_dim, o))
    self:register_parameter("bias_v", tl.empty(1, 1, embed_dim, o))
  end
  self.out_proj = layers.Linear(embed_dim, embed_dim, { bias = bias, dtype = o.dtype, device = o.device })
  self:reset_parameters()
end

function MHA:reset_parameters()
  if self.in_proj_weight then
    init.xavier_uniform_(self.in_proj_weight)
  else
    init.xavier_uniform_(self.q_proj_weight)
    init.xavier_uniform_(self.k_proj_weight)
    init.xavier_uniform_(self.v_proj_weight)
  end
  if self.in_proj_bias then
    init.zeros_(self.in_proj_bias)
    init.zeros_(self.out_proj.bias)
  end
  if self.bias_k then
    init.xavier_normal_(self.bias_k)
    init.xavier_normal_(self.bias_v)
  end
end

function MHA:extra_repr()
  local parts = { string.format("embed_dim=%d, num_heads=%d", self.embed_dim, self.num_heads) }
  if not self.same_embed_dim then parts[#parts + 1] = string.format("kdim=%d, vdim=%d", self.kdim, self.vdim) end
  if self.dropout ~= 0 then parts[#parts + 1] = string.format("dropout=%g", self.dropout) end
  if self.batch_first then parts[#parts + 1] = "batch_first=true" end
  return table.concat(parts, ", ")
end

-- the projection weight and bias of q (1), k (2) or v (3)
function MHA:_projection(i)
  local E = self.embed_dim
  local b = self.in_proj_bias and self.in_proj_bias:narrow(1, (i - 1) * E + 1, E)
  if self.in_proj_weight then return self.in_proj_weight:narrow(1, (i - 1) * E + 1, E), b end
  return self[({ "q_proj_weight", "k_proj_weight", "v_proj_weight" })[i]], b
end

-- a checked mask of `what` as an additive float mask in dtype (bool: -inf where true), viewed as
-- `view`; `wants` lists the shapes accepted
local function additive(mask, what, wants, view, dtype, device, who)
  local ok = false
  for _, want in ipairs(wants) do if same_shape(mask.shape, want) then ok = true end end
  if not ok then
    local list = {}
    for i, want in ipairs(wants) do list[i] = shape_str(want) end
    fail(string.format("%s: %s expected shape %s, got %s", who, what, table.concat(list, " or "),
      shape_str(mask.shape)))
  end
  if mask.device ~= device then
    fail(string.format("%s: %s expected to be on %s (the query's), got %s", who, what, device, mask.device))
  end
  if mask.dtype == "bool" then
    return tl.zeros(mask.shape, { dtype = dtype, device = device }):masked_fill(mask, -math.huge):view(view)
  end
  if mask.dtype ~= "float32" and mask.dtype ~= "float64" and mask.dtype ~= "bfloat16" and mask.dtype ~= "float16" then
    fail(string.format("%s: %s expected a bool or floating mask, got %s", who, what, mask.dtype))
  end
  return mask:to(dtype):view(view)
end

-- the causal mask [L, S] (-inf above the diagonal: query i sees keys j <= i)
local function causal_mask(L, S, dtype, device)
  local o = { dtype = dtype, device = device }
  local above = tl.arange(S, o):view(1, S):gt(tl.arange(L, o):view(L, 1))
  return tl.zeros(L, S, o):masked_fill(above, -math.huge)
end

local function check_input(t, what, dims, size, w, who)
  if not tl.is_tensor(t) then fail(string.format("%s: %s expected a tensor, got %s", who, what, type(t))) end
  if t:dim() ~= dims then
    fail(string.format("%s: %s expected %d dims (as the query), got shape %s", who, what, dims, shape_str(t.shape)))
  end
  if t:size(-1) ~= size then
    fail(string.format("%s: %s expected size %d in its last dim, got shape %s", who, what, size, shape_str(t.shape)))
  end
  if t.dtype ~= w.dtype or t.device ~= w.device then
    fail(string.format("%s: %s expected %s on %s (the weights'), got %s on %s", who, what, w.dtype, w.device, t.dtype,
      t.device))
  end
end

--- MultiheadAttention:forward(query, key, value, {key_padding_mask, need_weights = true, attn_mask,
-- average_attn_weights = true, is_causal = false}) -> output, weights. query [L, N, E], key [S, N,
-- kdim], value [S, N, vdim] ([N, L, E] ... with batch_first; unbatched [L, E], [S, kdim], [S, vdim]);
-- output as query. Masks as torch's: bool (true = not allowed) or float (added to the scores);
-- key_padding_mask [N, S] ([S] unbatched); attn_mask [L, S] or [N * num_heads, L, S]
-- ([num_heads, L, S] unbatched); is_causal adds the causal mask (query i sees keys j <= i).
-- weights: [N, L, S] averaged over the heads, or [N, num_heads, L, S] with average_attn_weights =
-- false (after dropout, as torch's); nil when need_weights = false, which runs the fused
-- tl.scaled_dot_product_attention when no mask but is_causal is given.
function MHA:forward(query, key, value, opts)
  local who = "nn.MultiheadAttention"
  opts = options.check(opts, who, ACCEPTED.MultiheadAttention_forward, 2)
  local w = self.out_proj.weight
  if not tl.is_tensor(query) then fail(string.format("%s: query expected a tensor, got %s", who, type(query))) end
  local dims = query:dim()
  if dims ~= 2 and dims ~= 3 then
    fail(string.format("%s: query expected 2 (unbatched) or 3 dims, got shape %s", who, shape_str(query.shape)))
  end
  check_input(query, "query", dims, self.embed_dim, w, who)
  check_input(key, "key", dims, self.kdim, w, who)
  check_input(value, "value", dims, self.vdim, w, who)
  local self_attention = rawequal(query, key) and rawequal(key, value)
  local batched = dims == 3
  local q, k, v = query, key, value
  if not batched then
    q, k, v = q:unsqueeze(2), k:unsqueeze(2), v:unsqueeze(2)
  elseif self.batch_first then
    q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2)
  end
  local L, N, S = q:size(1), q:size(2), k:size(1)
  if k:size(2) ~= N or v:size(2) ~= N or v:size(1) ~= S then
    fail(string.format("%s: key and value expected the query's batch %d and one length, got key %s, value %s", who,
      N, shape_str(key.shape), shape_str(value.shape)))
  end
  local E, H, hd = self.embed_dim, self.num_heads, self.head_dim

  -- the projections: one matmul for self-attention with in_proj_weight
  if self_attention and self.in_proj_weight then
    q, k, v = table.unpack(tl.linear(q, self.in_proj_weight, self.in_proj_bias):chunk(3, -1))
  else
    q = tl.linear(q, self:_projection(1))
    k = tl.linear(k, self:_projection(2))
    v = tl.linear(v, self:_projection(3))
  end

  -- the masks as one additive float mask broadcasting to [N, H, L, S']
  local mask
  local function add(m) mask = mask and mask + m or m end
  local dtype, device = q.dtype, q.device
  if opts.attn_mask then
    local am = opts.attn_mask
    local view = am:dim() == 2 and { 1, 1, L, S } or { N, H, L, S }
    add(additive(am, "attn_mask", { { L, S }, { batched and N * H or H, L, S } }, view, dtype, device, who))
  end
  if opts.key_padding_mask then
    add(additive(opts.key_padding_mask, "key_padding_mask", { batched and { N, S } or { S } }, { N, 1, 1, S }, dtype,
      device, who))
  end
  if opts.is_causal then add(causal_mask(L, S, dtype, device):view(1, 1, L, S)) end

  -- bias_k / bias_v and the zero attention: one more key each, never masked
  local extra = 0
  if self.bias_k then
    k = tl.cat({ k, self.bias_k:expand(1, N, E) }, 1)
    v = tl.cat({ v, self.bias_v:expand(1, N, E) }, 1)
    extra = extra + 1
  end
  -- heads: [S, N, E] -> [N, H, S, hd]
  local function heads(t) return t:reshape(t:size(1), N, H, hd):permute(2, 3, 1, 4) end
  q, k, v = heads(q), heads(k), heads(v)
  if self.add_zero_attn then
    local zeros = tl.zeros(N, H, 1, hd, { dtype = dtype, device = device })
    k, v = tl.cat({ k, zeros }, 3), tl.cat({ v, zeros }, 3)
    extra = extra + 1
  end
  if mask and extra > 0 then mask = F.pad(mask, { 0, extra }) end

  local p = self.training and self.dropout or 0
  local need_weights = opts.need_weights ~= false
  local out, weights
  if not need_weights and (mask == nil or (extra == 0 and opts.is_causal and not opts.attn_mask
      and not opts.key_padding_mask)) then
    out = tl.scaled_dot_product_attention(q, k, v, { causal = opts.is_causal == true, dropout = p })
  else
    local scores = tl.matmul(q * (1 / math.sqrt(hd)), k:transpose(3, 4))
    if mask then scores = scores + mask end
    weights = scores:softmax(-1)
    if p > 0 then weights = F.dropout(weights, p, true) end
    out = tl.matmul(weights, v)
  end
  -- [N, H, L, hd] -> [L, N, E]
  out = self.out_proj(out:permute(3, 1, 2, 4):reshape(L, N, E))
  if not batched then
    out = out:squeeze(2)
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  if not need_weights then return out, nil end
  if opts.average_attn_weights ~= false then weights = weights:mean(2) end
  if not batched then weights = weights:squeeze(1) end
  return out, weights
end

-- ---- TransformerEncoderLayer --------------------------------------------------------------------
local ACTIVATIONS = { relu = tl.relu, gelu = tl.gelu }

--- TransformerEncoderLayer(d_model, nhead, {dim_feedforward = 2048, dropout = 0.1, activation =
-- "relu" | "gelu" | a function or module, layer_norm_eps = 1e-5, batch_first = false, norm_first =
-- false, bias = true, dtype, device}): PyTorch's encoder layer (self_attn, linear1, dropout,
-- linear2, norm1, norm2, dropout1, dropout2). forward(src [S, N, E] ([N, S, E] batch_first, or
-- [S, E]), {src_mask, src_key_padding_mask, is_causal}) -> as src. norm_first: x + sa(norm1(x)),
-- then x + ff(norm2(x)); otherwise norm1(x + sa(x)), then norm2(x + ff(x))
local EncoderLayer = Module:extend("TransformerEncoderLayer")
classes.TransformerEncoderLayer = EncoderLayer

function EncoderLayer:init(d_model, nhead, opts)
  local who = "nn.TransformerEncoderLayer"
  opts = options.check(opts, who, ACCEPTED.TransformerEncoderLayer, 3)
  check_size(d_model, "d_model", who)
  check_size(nhead, "nhead", who)
  local dff = opts.dim_feedforward or 2048
  check_size(dff, "dim_feedforward", who)
  local dropout = opts.dropout or 0.1
  check_probability(dropout, who)
  if d_model % nhead ~= 0 then
    fail(string.format("%s: d_model (%d) must be divisible by nhead (%d)", who, d_model, nhead))
  end
  local activation = opts.activation or "relu"
  if type(activation) == "string" then
    local fn = ACTIVATIONS[activation]
    if not fn then
      fail(string.format("%s: activation must be 'relu', 'gelu' or a function, got '%s'", who, activation))
    end
    self.activation_name = activation
    activation = fn
  end
  local bias = opts.bias ~= false
  -- before the sublayers, which would name themselves
  if opts.dtype ~= nil then self:_check_parameter_dtype(opts.dtype, 3) end
  local t = { dtype = opts.dtype, device = opts.device }
  local eps = opts.layer_norm_eps or 1e-5
  self.norm_first = opts.norm_first == true
  self.batch_first = opts.batch_first == true
  self.self_attn = MHA(d_model, nhead, { dropout = dropout, bias = bias, batch_first = self.batch_first,
    dtype = t.dtype, device = t.device })
  self.linear1 = layers.Linear(d_model, dff, { bias = bias, dtype = t.dtype, device = t.device })
  self.dropout = layers.Dropout(dropout)
  self.linear2 = layers.Linear(dff, d_model, { bias = bias, dtype = t.dtype, device = t.device })
  self.norm1 = layers.LayerNorm(d_model, { eps = eps, bias = bias, dtype = t.dtype, device = t.device })
  self.norm2 = layers.LayerNorm(d_model, { eps = eps, bias = bias, dtype = t.dtype, device = t.device })
  self.dropout1 = layers.Dropout(dropout)
  self.dropout2 = layers.Dropout(dropout)
  self.activation = activation
end

function EncoderLayer:_sa(x, opts)
  local out = self.self_attn(x, x, x, { attn_mask = opts.src_mask, key_padding_mask = opts.src_key_padding_mask,
    is_causal = opts.is_causal, need_weights = false })
  return self.dropout1(out)
end

function EncoderLayer:_ff(x)
  return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
end

function EncoderLayer:forward(src, opts)
  opts = options.check(opts, "nn.TransformerEncoderLayer", ACCEPTED.TransformerEncoderLayer_forward, 2)
  local x = src
  if self.norm_first then
    x = x + self:_sa(self.norm1(x), opts)
    return x + self:_ff(self.norm2(x))
  end
  x = self.norm1(x + self:_sa(x, opts))
  return self.norm2(x + self:_ff(x))
end

function EncoderLayer:extra_repr()
  local parts = {}
  if self.activation_name and self.activation_name ~= "relu" then
    parts[#parts + 1] = "activation=" .. self.activation_name
  end
  if self.norm_first then parts[#parts + 1] = "norm_first=true" end
  if self.batch_first then parts[#parts + 1] = "batch_first=true" end
  return table.concat(parts, ", ")
end

-- ---- TransformerEncoder -------------------------------------------------------------------------
-- a deep copy of v: tables (modules) field by field with their metatables, tensors cloned (a
-- parameter stays a leaf that requires grad), functions shared
local function deep_copy(v, memo)
  if memo[v] ~= nil then return memo[v] end
  if tl.is_tensor(v) then
    local c = v:detach():clone()
    if v.requires_grad then c:requires_grad_(true) end
    memo[v] = c
    return c
  end
  if type(v) ~= "table" then return v end
  local c = {}
  memo[v] = c
  for key, x in next, v do rawset(c, deep_copy(key, memo), deep_copy(x, memo)) end
  return setmetatable(c, getmetatable(v))
end

--- TransformerEncoder(encoder_layer, num_layers, {norm}): num_layers deep copies of encoder_layer
-- (layers.1 ... layers.num_layers, each its own parameters, copies of the layer's), then norm
-- (a module) if given. forward(src, {mask, src_key_padding_mask, is_causal}) -> as src
local Encoder = Module:extend("TransformerEncoder")
classes.TransformerEncoder = Encoder

function Encoder:init(encoder_layer, num_layers, opts)
  local who = "nn.TransformerEncoder"
  opts = options.check(opts, who, ACCEPTED.TransformerEncoder, 3)
  if not is_module(encoder_layer) then
    fail(string.format("%s: encoder_layer expected a module, got %s", who, type(encoder_layer)))
  end
  check_size(num_layers, "num_layers", who)
  if opts.norm ~= nil and not is_module(opts.norm) then fail(who .. ": option norm expected a module") end
  local list = {}
  for i = 1, num_layers do list[i] = deep_copy(encoder_layer, {}) end
  self.layers = containers.ModuleList(list)
  self.num_layers = num_layers
  if opts.norm then self.norm = opts.norm end
end

function Encoder:forward(src, opts)
  opts = options.check(opts, "nn.TransformerEncoder", ACCEPTED.TransformerEncoder_forward, 2)
  local layer_opts = { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
    is_causal = opts.is_causal }
  local x = src
  for _, layer in ipairs(self.layers:children()) do x = layer(x, layer_opts) end
  if self.norm then x = self.norm(x) end
  return x
end

return classes
