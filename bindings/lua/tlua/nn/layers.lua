-- tl.nn layers: Linear, Flatten, Dropout, LayerNorm, Embedding (the losses are in losses.lua).
local tl = require("tlua")
local module = require("tlua.nn.module")
local Module, floating = module.Module, module.floating
local init = require("tlua.nn.init_weights")
local F = require("tlua.nn.functional")
local shape_str = require("tlua.nn.state_dict").shape_str
local options = require("tlua.options")

local layers = {}

-- each layer's options and their kinds (tlua.options), checked by its init: errors point at the
-- caller of the constructor (init is level 1, Module.new 2, the user 3)
local ACCEPTED = {
  Linear = { bias = "boolean", dtype = "string", device = "string" },
  LayerNorm = { eps = "number", elementwise_affine = "boolean", bias = "boolean", dtype = "string",
    device = "string", output_dtype = "string" },
  Embedding = { dtype = "string", device = "string" },
}

local function check_size(v, what, cls)
  if math.type(v) ~= "integer" or v < 1 then
    options.error(string.format("nn.%s: %s must be a positive integer, got %s", cls, what, tostring(v)), 4)
  end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

--- Linear(in_features, out_features, {bias = true, dtype =, device =}): y = x W^T + b
local Linear = Module:extend("Linear")
layers.Linear = Linear

function Linear:init(in_features, out_features, opts)
  opts = options.check(opts, "nn.Linear", ACCEPTED.Linear, 3)
  check_size(in_features, "in_features", "Linear")
  check_size(out_features, "out_features", "Linear")
  self.in_features, self.out_features = in_features, out_features
  local o = tensor_opts(opts)
  self:register_parameter("weight", tl.empty(out_features, in_features, o))
  if opts.bias ~= false then self:register_parameter("bias", tl.empty(out_features, o)) end
  self:reset_parameters()
end

-- PyTorch's default: weight kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
-- bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
local function reset_weight_and_bias(self, fan_in)
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local bound = 1 / math.sqrt(fan_in)
    init.uniform_(self.bias, -bound, bound)
  end
end

function Linear:reset_parameters()
  reset_weight_and_bias(self, self.in_features)
end

function Linear:forward(x)
  return tl.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end

--- Flatten(start_dim = 2, end_dim = -1): flattens dims start_dim..end_dim into one (1-based,
-- negative from the end); the defaults keep the batch dim
local Flatten = Module:extend("Flatten")
layers.Flatten = Flatten

local function check_dim(v, what, cls)
  if math.type(v) ~= "integer" or v == 0 then
    options.error(string.format("nn.%s: %s must be a nonzero integer (1-based, negative from the end), got %s", cls,
      what, tostring(v)), 4)
  end
end

function Flatten:init(start_dim, end_dim, ...)
  if select("#", ...) > 0 then options.error("nn.Flatten: expected at most 2 arguments (start_dim, end_dim)", 3) end
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
  check_dim(self.start_dim, "start_dim", "Flatten")
  check_dim(self.end_dim, "end_dim", "Flatten")
end

function Flatten:forward(x)
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim)
end

--- Unflatten(dim, sizes): splits dim (1-based, negative from the end) into sizes (a table of
-- positive sizes, one of them may be -1), the inverse of Flatten: Unflatten(2, {2, 3}) maps
-- [N, 6] to [N, 2, 3]
local Unflatten = Module:extend("Unflatten")
layers.Unflatten = Unflatten

function Unflatten:init(dim, sizes, ...)
  if select("#", ...) > 0 then options.error("nn.Unflatten: expected 2 arguments (dim, sizes)", 3) end
  check_dim(dim, "dim", "Unflatten")
  if type(sizes) ~= "table" or #sizes == 0 then
    options.error("nn.Unflatten: sizes must be a table of sizes, got " .. tostring(sizes), 3)
  end
  local copy, free = {}, 0
  for i, s in ipairs(sizes) do
    if math.type(s) ~= "integer" or (s < 1 and s ~= -1) then
      options.error(string.format("nn.Unflatten: sizes must be positive integers or -1, got %s", tostring(s)), 3)
    end
    if s == -1 then free = free + 1 end
    copy[i] = s
  end
  if free > 1 then options.error("nn.Unflatten: only one size may be -1", 3) end
  self.dim, self.sizes = dim, copy
end

function Unflatten:forward(x)
  local shape = x.shape
  local d = self.dim < 0 and #shape + 1 + self.dim or self.dim
  if d < 1 or d > #shape then
    options.error(string.format("nn.Unflatten: dim %d is out of range for input of shape %s", self.dim,
      shape_str(shape)), 2)
  end
  local known, free = 1, nil
  for i, s in ipairs(self.sizes) do
    if s == -1 then free = i else known = known * s end
  end
  local sizes = { table.unpack(self.sizes) }
  if free then
    if shape[d] % known ~= 0 then known = -1 end
    sizes[free] = shape[d] // known
  end
  if known < 0 or (not free and known ~= shape[d]) then
    options.error(string.format("nn.Unflatten: sizes %s do not multiply to dim %d's size %d (input shape %s)",
      shape_str(self.sizes), d, shape[d], shape_str(shape)), 2)
  end
  local out = {}
  for i = 1, d - 1 do out[#out + 1] = shape[i] end
  for _, s in ipairs(sizes) do out[#out + 1] = s end
  for i = d + 1, #shape do out[#out + 1] = shape[i] end
  return x:reshape(out)
end

function Unflatten:extra_repr()
  return string.format("dim=%d, unflattened_size=%s", self.dim, shape_str(self.sizes))
end

-- Dropout's and its kin's argument: p, or {p = 0.5}; checked at the user's line
local DROPOUT = { p = "number" }

local function dropout_p(p, extra, cls)
  if extra > 0 then options.error(string.format("nn.%s: expected one argument (p or {p = 0.5})", cls), 4) end
  if type(p) == "table" then p = options.check(p, "nn." .. cls, DROPOUT, 4).p end
  if p == nil then return 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    options.error(string.format("nn.%s: p must be a probability in [0, 1], got %s", cls, tostring(p)), 4)
  end
  return p
end

-- a dropout class whose forward is fn(x, p, training)
local function dropout_class(name, fn)
  local cls = Module:extend(name)
  layers[name] = cls
  cls.init = function(self, p, ...) self.p = dropout_p(p, select("#", ...), name) end
  cls.forward = function(self, x) return fn(x, self.p, self.training) end
  cls.extra_repr = function(self) return string.format("p=%g", self.p) end
  return cls
end

--- Dropout(p = 0.5) or Dropout{p = 0.5}: tl.dropout (one kernel draws the mask) when training, the
-- identity in eval mode
dropout_class("Dropout", F.dropout)
--- Dropout1d(p = 0.5): zeroes whole channels of [N, C, L] or [C, L] (probability p) and scales the
-- rest by 1 / (1 - p) when training; the identity in eval mode
dropout_class("Dropout1d", F.dropout1d)
--- Dropout2d(p = 0.5): Dropout1d's rule over the channels of [N, C, H, W] or [C, H, W]
dropout_class("Dropout2d", F.dropout2d)
--- AlphaDropout(p = 0.5): F.alpha_dropout (keeps a SELU network's zero mean and unit variance)
dropout_class("AlphaDropout", F.alpha_dropout)
--- FeatureAlphaDropout(p = 0.5): F.feature_alpha_dropout, alpha dropout of whole channels of [N, C, ...]
dropout_class("FeatureAlphaDropout", F.feature_alpha_dropout)

--- LayerNorm(normalized_shape, {eps = 1e-5, elementwise_affine = true, bias = true, dtype, device,
-- output_dtype}): over the last dims (normalized_shape: an integer or a table of sizes); bias =
-- false keeps the weight only (as PyTorch's bias=False). output_dtype: the output's dtype when it
-- is not the input's: bfloat16 or float16 for a float32 input (computed in float32, rounded once),
-- or "autocast", the autocast dtype inside an autocast region (the input's outside): a pre-norm
-- transformer's norms feed GEMMs that take the 16-bit activation without a cast's pass
local LayerNorm = Module:extend("LayerNorm")
layers.LayerNorm = LayerNorm

function LayerNorm:init(normalized_shape, opts)
  opts = options.check(opts, "nn.LayerNorm", ACCEPTED.LayerNorm, 3)
  local shape = type(normalized_shape) == "table" and normalized_shape or { normalized_shape }
  local size = 1
  for _, s in ipairs(shape) do
    check_size(s, "normalized_shape", "LayerNorm")
    size = size * s
  end
  self.normalized_shape, self.size = shape, size
  self.eps = opts.eps or 1e-5
  self.output_dtype = opts.output_dtype
  if opts.elementwise_affine ~= false then
    local o = tensor_opts(opts)
    self:register_parameter("weight", tl.ones(shape, o))
    if opts.bias ~= false then self:register_parameter("bias", tl.zeros(shape, o)) end
  end
end

function LayerNorm:forward(x)
  local k = #self.normalized_shape
  local o = self.output_dtype and { output_dtype = self.output_dtype }
  if k == 1 then return tl.layer_norm(x, self.weight, self.bias, self.eps, o) end
  local shape = x.shape
  local lead = {}
  for d = 1, #shape - k do lead[d] = shape[d] end
  lead[#lead + 1] = self.size
  local w = self.weight and self.weight:reshape(self.size)
  local b = self.bias and self.bias:reshape(self.size)
  return tl.layer_norm(x:reshape(lead), w, b, self.eps, o):reshape(shape)
end

--- ln:add_forward(x, residual) -> y, s: s = x + residual, y = ln(s), one fused op
-- (nn.functional.add_layer_norm): a pre-norm transformer's residual add and its next norm
function LayerNorm:add_forward(x, residual)
  return F.add_layer_norm(x, residual, self.normalized_shape, self.weight, self.bias, self.eps,
    self.output_dtype and { output_dtype = self.output_dtype })
end

function LayerNorm:extra_repr()
  return string.format("%s, eps=%g, elementwise_affine=%s", shape_str(self.normalized_shape), self.eps,
    tostring(self.weight ~= nil))
end

local EMBEDDING = { padding_idx = "integer", max_norm = "number", norm_type = "number", dtype = "string",
  device = "string" }
local FROM_PRETRAINED = { freeze = "boolean", padding_idx = "integer", max_norm = "number", norm_type = "number" }

-- padding_idx (1..n, or -n..-1 from the end) as 1..n; nil stays nil
local function padding_index(padding_idx, n, who)
  if padding_idx == nil then return nil end
  if padding_idx == 0 or padding_idx > n or padding_idx < -n then
    options.error(string.format("%s: padding_idx must be in 1..%d or -%d..-1, got %d", who, n, n, padding_idx), 4)
  end
  return padding_idx < 0 and n + 1 + padding_idx or padding_idx
end

local function check_max_norm(opts, who)
  if opts.max_norm ~= nil and not (opts.max_norm > 0) then
    options.error(string.format("%s: max_norm must be > 0, got %s", who, tostring(opts.max_norm)), 4)
  end
  if opts.norm_type ~= nil and not (opts.norm_type > 0) then
    options.error(string.format("%s: norm_type must be > 0, got %s", who, tostring(opts.norm_type)), 4)
  end
end

--- Embedding(num_embeddings, embedding_dim, {padding_idx = nil, max_norm = nil, norm_type = 2, dtype,
-- device}): a lookup table, weight [num_embeddings, embedding_dim] N(0, 1); indices count from 1.
-- padding_idx (negative from the end): that row starts at zero and gets no gradient (the output at
-- padding positions is the row's value). max_norm: each looked-up row whose norm_type-norm exceeds
-- max_norm is rescaled in place to that norm before the lookup (as torch's)
local Embedding = Module:extend("Embedding")
layers.Embedding = Embedding

function Embedding:init(num_embeddings, embedding_dim, opts)
  opts = options.check(opts, "nn.Embedding", EMBEDDING, 3)
  check_size(num_embeddings, "num_embeddings", "Embedding")
  check_size(embedding_dim, "embedding_dim", "Embedding")
  check_max_norm(opts, "nn.Embedding")
  self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
  self.padding_idx = padding_index(opts.padding_idx, num_embeddings, "nn.Embedding")
  self.max_norm, self.norm_type = opts.max_norm, opts.norm_type or 2
  if opts.dtype ~= nil then self:_check_parameter_dtype(opts.dtype, 3) end -- before randn refuses it
  local w = tl.randn(num_embeddings, embedding_dim, tensor_opts(opts))
  self:register_parameter("weight", w)
  self:_zero_padding_row()
end

function Embedding:_zero_padding_row()
  if self.padding_idx then
    tl.no_grad(function() self.weight:select(1, self.padding_idx):fill_(0) end)
  end
end

--- reset_parameters(): weight N(0, 1), the padding row zero
function Embedding:reset_parameters()
  init.normal_(self.weight)
  self:_zero_padding_row()
  return self
end

--- Embedding.from_pretrained(weight [n, dim], {freeze = true, padding_idx, max_norm, norm_type}):
-- an Embedding whose weight is (a copy of) weight; freeze = true: it requires no gradient
function Embedding.from_pretrained(weight, opts)
  opts = options.check(opts, "nn.Embedding.from_pretrained", FROM_PRETRAINED, 2)
  if not tl.is_tensor(weight) or #weight.shape ~= 2 then
    options.error("nn.Embedding.from_pretrained: weight must be a 2-dim tensor [num_embeddings, embedding_dim], got " ..
      (tl.is_tensor(weight) and shape_str(weight.shape) or type(weight)), 2)
  end
  if not floating[weight.dtype] then
    options.error("nn.Embedding.from_pretrained: weight must be of a floating dtype (float32, float64, bfloat16 or " ..
      "float16), got " .. weight.dtype, 2)
  end
  local m = Embedding(weight.shape[1], weight.shape[2], { padding_idx = opts.padding_idx, max_norm = opts.max_norm,
    norm_type = opts.norm_type, dtype = weight.dtype, device = weight.device })
  tl.no_grad(function() m.weight:copy_(weight) end)
  if opts.freeze ~= false then m.weight:requires_grad_(false) end
  return m
end

-- with max_norm: the rows indices look up, rescaled in place to norm max_norm where above it
function Embedding:_renorm(indices)
  tl.no_grad(function()
    local rows = tl.unique(indices:flatten())
    local w = self.weight:index_select(1, rows)
    local norms = w:norm(self.norm_type, 2, true)
    local scale = tl.where(norms:gt(self.max_norm), self.max_norm / (norms + 1e-7), 1)
    self.weight:index_copy_(1, rows, w * scale)
  end)
end

function Embedding:forward(indices)
  if self.max_norm then self:_renorm(indices) end
  local out = tl.embedding(indices, self.weight)
  if self.padding_idx then
    -- the padding positions' output carries no gradient to the weight
    out = tl.where(indices:eq(self.padding_idx):unsqueeze(-1), out:detach(), out)
  end
  return out
end

function Embedding:extra_repr()
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  if self.max_norm then s = s .. string.format(", max_norm=%g", self.max_norm) end
  if self.norm_type ~= 2 then s = s .. string.format(", norm_type=%g", self.norm_type) end
  return s
end

return layers

