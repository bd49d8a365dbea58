-- tl.nn layers: Linear, MaxPool2d, Flatten, Dropout, LayerNorm, Embedding, and the losses CrossEntropyLoss, MSELoss.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local init = require("tlua.nn.init_weights")
local F = require("tlua.nn.functional")
local shape_str = require("tlua.nn.state_dict").shape_str
local options = require("tlua.options")

local layers = {}

-- each layer's options and their kinds (tlua.options), checked by its init: errors point at the
-- caller of the constructor (init is level 1, Module.new 2, the user 3)
local PAIR = "integer|table"
local ACCEPTED = {
  Linear = { bias = "boolean", dtype = "string", device = "string" },
  MaxPool2d = { stride = PAIR, padding = PAIR },
  LayerNorm = { eps = "number", elementwise_affine = "boolean", bias = "boolean", dtype = "string",
    device = "string" },
  Embedding = { dtype = "string", device = "string" },
  CrossEntropyLoss = { label_smoothing = "number" },
  MSELoss = {},
}

local function check_size(v, what, cls)
  if math.type(v) ~= "integer" or v < 1 then
    error(string.format("nn.%s: %s must be a positive integer, got %s", cls, what, tostring(v)), 4)
  end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

local function pair_str(v)
  if type(v) == "table" then return "(" .. v[1] .. ", " .. v[2] .. ")" end
  return tostring(v)
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

--- MaxPool2d(kernel_size, {stride = kernel_size, padding = 0})
local MaxPool2d = Module:extend("MaxPool2d")
layers.MaxPool2d = MaxPool2d

function MaxPool2d:init(kernel_size, opts)
  opts = options.check(opts, "nn.MaxPool2d", ACCEPTED.MaxPool2d, 3)
  self.kernel_size = kernel_size
  self.stride = opts.stride
  self.padding = opts.padding or 0
end

function MaxPool2d:forward(x)
  return tl.max_pool2d(x, self.kernel_size, { stride = self.stride, padding = self.padding })
end

function MaxPool2d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s", pair_str(self.kernel_size),
    pair_str(self.stride or self.kernel_size), pair_str(self.padding))
end

--- Flatten(start_dim = 2, end_dim = -1): keeps the batch dim
local Flatten = Module:extend("Flatten")
layers.Flatten = Flatten

function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end

function Flatten:forward(x)
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim)
end

--- Dropout(p = 0.5): tl.dropout (one kernel draws the mask) when training, the identity in eval mode
local Dropout = Module:extend("Dropout")
layers.Dropout = Dropout

function Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("nn.Dropout: p must be a probability in [0, 1], got " .. tostring(p), 3)
  end
  self.p = p
end

function Dropout:forward(x)
  return F.dropout(x, self.p, self.training)
end

function Dropout:extra_repr()
  return string.format("p=%g", self.p)
end

--- LayerNorm(normalized_shape, {eps = 1e-5, elementwise_affine = true, bias = true, dtype, device}):
-- over the last dims (normalized_shape: an integer or a table of sizes); bias = false keeps
-- the weight only (as PyTorch's bias=False)
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
  if opts.elementwise_affine ~= false then
    local o = tensor_opts(opts)
    self:register_parameter("weight", tl.ones(shape, o))
    if opts.bias ~= false then self:register_parameter("bias", tl.zeros(shape, o)) end
  end
end

function LayerNorm:forward(x)
  local k = #self.normalized_shape
  if k == 1 then return tl.layer_norm(x, self.weight, self.bias, self.eps) end
  local shape = x.shape
  local lead = {}
  for d = 1, #shape - k do lead[d] = shape[d] end
  lead[#lead + 1] = self.size
  local w = self.weight and self.weight:reshape(self.size)
  local b = self.bias and self.bias:reshape(self.size)
  return tl.layer_norm(x:reshape(lead), w, b, self.eps):reshape(shape)
end

function LayerNorm:extra_repr()
  return string.format("%s, eps=%g, elementwise_affine=%s", shape_str(self.normalized_shape), self.eps,
    tostring(self.weight ~= nil))
end

--- Embedding(num_embeddings, embedding_dim, {dtype, device}): weight N(0, 1); indices count from 1
local Embedding = Module:extend("Embedding")
layers.Embedding = Embedding

function Embedding:init(num_embeddings, embedding_dim, opts)
  opts = options.check(opts, "nn.Embedding", ACCEPTED.Embedding, 3)
  check_size(num_embeddings, "num_embeddings", "Embedding")
  check_size(embedding_dim, "embedding_dim", "Embedding")
  self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
  local w = tl.randn(num_embeddings, embedding_dim, tensor_opts(opts))
  self:register_parameter("weight", w)
end

function Embedding:forward(indices)
  return tl.embedding(indices, self.weight)
end

function Embedding:extra_repr()
  return string.format("%d, %d", self.num_embeddings, self.embedding_dim)
end

-- ---- losses ----------------------------------------------------------------------------------
--- CrossEntropyLoss({label_smoothing = 0}): (logits [N, C], target [N] of classes 1..C) -> mean loss
local CrossEntropyLoss = Module:extend("CrossEntropyLoss")
layers.CrossEntropyLoss = CrossEntropyLoss

function CrossEntropyLoss:init(opts)
  opts = options.check(opts, "nn.CrossEntropyLoss", ACCEPTED.CrossEntropyLoss, 3)
  self.label_smoothing = opts.label_smoothing or 0
end

function CrossEntropyLoss:forward(logits, target)
  return tl.cross_entropy(logits, target, self.label_smoothing)
end

function CrossEntropyLoss:extra_repr()
  return self.label_smoothing ~= 0 and string.format("label_smoothing=%g", self.label_smoothing) or ""
end

--- MSELoss(): mean squared error (an options table, if given, must be empty)
local MSELoss = Module:extend("MSELoss")
layers.MSELoss = MSELoss

function MSELoss:init(opts)
  options.check(opts, "nn.MSELoss", ACCEPTED.MSELoss, 3)
end

function MSELoss:forward(input, target)
  return F.mse_loss(input, target)
end

return layers

