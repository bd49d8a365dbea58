-- tl.nn.functional: the ops of the op table that map a tensor to a tensor (tl.ops(): families unary, pointwise, softmax), the nn ops, losses and dropout.
local tl = require("tlua")
local options = require("tlua.options")

local F = {}

-- every op of these families that tlua binds as tl.<name>: F.relu, F.gelu, F.exp, F.softmax, ...
local families = { unary = true, pointwise = true, softmax = true }
for _, op in ipairs(tl.ops()) do
  if families[op.family] and type(rawget(tl, op.name)) == "function" then F[op.name] = rawget(tl, op.name) end
end

-- nn ops whose rows in the op table name their kernels (linear_forward, conv2d_forward, ...)
F.linear = tl.linear
--- gelu_linear(pre, weight, bias?, {approximate = "none" | "tanh"}): linear(gelu(pre), weight, bias) as one
-- node that keeps pre and not gelu(pre), made again in backward (a feed-forward's activation memory once)
F.gelu_linear = tl.gelu_linear
--- linear_gelu_linear(x, weight1, bias1?, weight2, bias2?, {approximate = "none" | "tanh", gelu_epilogue = false}):
-- a feed-forward, linear(gelu(linear(x, weight1, bias1)), weight2, bias2), as one node keeping only the first
-- linear's output; in the tanh form GELU's derivative and the bias gradients come from the GEMMs' epilogues (and
-- GELU too with gelu_epilogue)
F.linear_gelu_linear = tl.linear_gelu_linear
F.conv2d = tl.conv2d
F.max_pool2d = tl.max_pool2d
F.embedding = tl.embedding
F.layer_norm = tl.layer_norm
--- scaled_dot_product_attention(q [..., T, D], k [..., S, D], v [..., S, D],
-- {causal = false, scale = 1 / sqrt(D), dropout = 0}): softmax(scale q k^T) v, fused
F.scaled_dot_product_attention = tl.scaled_dot_product_attention

--- pad(x, pads, {mode = "constant", value = 0}): pads in torch's order (the last dim first:
-- {before, after, before, after, ...}); modes constant, reflect, replicate, circular
F.pad = tl.pad
--- one_hot(index, classes = -1): int64 [..., classes], 1 at each (1-based) index
F.one_hot = tl.one_hot

--- dropout(x, p = 0.5, training = true): when training, tl.dropout(x, p) (one kernel zeroes
-- elements with probability p and scales the rest by 1 / (1 - p); p = 0 returns x); the
-- identity otherwise
function F.dropout(x, p, training)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    options.error("dropout: p must be a probability in [0, 1], got " .. tostring(p), 2)
  end
  if training ~= nil and type(training) ~= "boolean" then
    options.error("dropout: training must be a boolean, got " .. type(training), 2)
  end
  if training == false then return x end
  return tl.dropout(x, p)
end

-- gelu's forms by approximate: the exact (erf) one and PyTorch's tanh approximation
local GELU_FORMS = { none = tl.gelu, tanh = tl.gelu_tanh }

local GELU_OPTIONS = { approximate = "string" }

-- The gelu op for opts ({approximate = "none" | "tanh"}, the string alone, or nil: "none"),
-- or an error naming who, at error level `level` counted (as options.error() counts) from the caller of
-- _gelu_form (the user's line when the stack can be read: tlua.options).
function F._gelu_form(opts, who, level)
  local approximate = opts
  if type(opts) == "table" then approximate = options.check(opts, who, GELU_OPTIONS, level + 1).approximate end
  if approximate == nil then return tl.gelu end
  local fn = type(approximate) == "string" and GELU_FORMS[approximate]
  if not fn then
    local got = type(approximate) == "string" and ("'" .. approximate .. "'") or type(approximate)
    options.error(string.format("%s: approximate must be 'none' or 'tanh', got %s", who, got), level + 1)
  end
  return fn
end

--- gelu(x, {approximate = "none"}): x Phi(x) (tl.gelu), or with approximate = "tanh" PyTorch's
-- 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (tl.gelu_tanh)
function F.gelu(x, opts) return F._gelu_form(opts, "gelu", 2)(x) end

-- the forms kept in tlua/nn/functional/ (losses, normalization, recurrent, convolution, the
-- composed activations, the channel and alpha dropouts, pooling), one file per concern
for _, part in ipairs({ "losses", "normalization", "recurrent", "convolution", "activations", "dropout", "pooling" }) do
  for name, fn in pairs(require("tlua.nn.functional." .. part)) do F[name] = fn end
end

return F
