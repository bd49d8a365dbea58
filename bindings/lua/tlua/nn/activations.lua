-- tl.nn activations: a module class for each one-tensor op of the op table with a gradient (tl.ops(): families unary and pointwise), taking the op's numbers (nn.LeakyReLU(0.2), nn.Hardtanh{min_val = 0, max_val = 6}), GELU's approximate option, the composed ones (ReLU6, PReLU, Threshold, Softsign, Tanhshrink, Hardshrink, Softshrink, LogSigmoid, GLU), Softmax, LogSoftmax, Softmin, and Identity.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local F = require("tlua.nn.functional")
local composed = require("tlua.nn.functional.activations")
local options = require("tlua.options")

local activations = {}

-- class names where PyTorch's are not the op's name capitalised
local class_names = { relu = "ReLU", gelu = "GELU", gelu_tanh = "GELU_tanh", silu = "SiLU",
  leaky_relu = "LeakyReLU", elu = "ELU", selu = "SELU", celu = "CELU", nan_to_num = "NanToNum" }
-- ops of these families that take more than the tensor (tl.clamp(t, min, max)) have no class
local with_arguments = { clamp = true, pow_scalar = true }

local NO_OPTIONS = {}

-- a class whose forward is fn(x, numbers...); it takes the op's numbers (numbers: their names)
-- positionally or as an options table, and nothing else: nn.ReLU{inplace = true} is an error
-- (tlua.options; init is level 1, Module.new 2, the user 3)
local function activation(name, fn, numbers)
  numbers = numbers or {}
  local accepted = {}
  for _, key in ipairs(numbers) do accepted[key] = "number" end
  local cls = Module:extend(name)
  cls.forward = function(self, x) return fn(x, table.unpack(self.numbers, 1, #numbers)) end
  cls.init = function(self, first, ...)
    self.numbers = {}
    if type(first) == "table" or #numbers == 0 then
      local opts = options.check(first, "nn." .. name, #numbers == 0 and NO_OPTIONS or accepted, 3)
      for i, key in ipairs(numbers) do self.numbers[i] = opts and opts[key] end
    else
      local given = table.pack(first, ...)
      if given.n > #numbers then
        options.error(string.format("nn.%s: expected at most %d number%s (%s) or an options table, got %d arguments",
          name, #numbers, #numbers == 1 and "" or "s", table.concat(numbers, ", "), given.n), 3)
      end
      for i = 1, given.n do
        if given[i] ~= nil and type(given[i]) ~= "number" then
          options.error(string.format("nn.%s: %s must be a number, got %s", name, numbers[i], type(given[i])), 3)
        end
        self.numbers[i] = given[i]
      end
    end
    if cls._check_numbers then cls._check_numbers(self, "nn." .. name) end
  end
  cls.extra_repr = function(self)
    local parts = {}
    for i, key in ipairs(numbers) do
      if self.numbers[i] ~= nil then parts[#parts + 1] = key .. "=" .. tostring(self.numbers[i]) end
    end
    return table.concat(parts, ", ")
  end
  activations[name] = cls
  return cls
end

-- nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Exp, nn.LeakyReLU, ...: forward(x) is
-- tl.<op>(x, numbers...); the ops without a gradient (isnan, bitwise_not, ...) have no class
for _, op in ipairs(tl.ops()) do
  local fn = rawget(tl, op.name)
  if (op.family == "unary" or op.family == "pointwise") and op.differentiable and not with_arguments[op.name]
    and type(fn) == "function" then
    activation(class_names[op.name] or (op.name:sub(1, 1):upper() .. op.name:sub(2)), fn, op.numbers)
  end
end

-- The generated classes, each elementwise (input of any shape -> output of its shape and dtype),
-- its numbers positional or in an options table (an unknown key is an error), as torch's:
--- ReLU(), Sigmoid(), Tanh(), SiLU(), Mish(), Hardswish(), Hardsigmoid(), SELU(), GELU_tanh():
--- the op of the same name (tl.relu, ...); no argument.
--- LeakyReLU(negative_slope = 0.01): x for x >= 0, negative_slope * x below.
--- ELU(alpha = 1.0): x for x > 0, alpha (exp(x) - 1) below. CELU(alpha = 1.0): max(0, x) +
--- min(0, alpha (exp(x / alpha) - 1)).
--- Softplus(beta = 1, threshold = 20): log(1 + exp(beta x)) / beta, x where beta x > threshold.
--- Hardtanh(min_val = -1, max_val = 1): x clamped to [min_val, max_val].
--- Logit(eps = nil): log(p / (1 - p)) of p = x clamped to [eps, 1 - eps] when eps is given.
--- Round(decimals = 0), NanToNum(nan = 0, posinf = dtype's max, neginf = dtype's lowest).
--- Neg(), Abs(), Exp(), Exp2(), Expm1(), Log(), Log2(), Log10(), Log1p(), Sqrt(), Rsqrt(),
--- Square(), Reciprocal(), Sin(), Cos(), Tan(), Asin(), Acos(), Atan(), Sinh(), Cosh(), Asinh(),
--- Acosh(), Atanh(), Erf(), Erfc(), Erfinv(), Floor(), Ceil(), Trunc(), Frac(), Sign(), Sgn():
--- the elementwise op as a module (tl.<op>), no argument.

--- GELU({approximate = "none"}): tl.gelu, or tl.gelu_tanh with approximate = "tanh"
local GELU = activations.GELU
function GELU:init(opts)
  self.approximate = F._gelu_form(opts, "nn.GELU", 3) == tl.gelu_tanh and "tanh" or "none"
end
function GELU:forward(x)
  if self.approximate == "tanh" then return tl.gelu_tanh(x) end
  return tl.gelu(x)
end
function GELU:extra_repr()
  return self.approximate == "tanh" and "approximate='tanh'" or ""
end

--- Hardtanh(min_val = -1, max_val = 1): clamps to [min_val, max_val] (max_val > min_val)
activations.Hardtanh._check_numbers = function(self, who)
  local lo, hi = self.numbers[1] or -1, self.numbers[2] or 1
  if not (hi > lo) then
    options.error(string.format("%s: max_val (%s) must be greater than min_val (%s)", who, tostring(hi), tostring(lo)),
      4)
  end
end

-- the composed activations (nn/functional/activations.lua), with their numbers as the generated ones
--- ReLU6(): min(max(x, 0), 6)
activation("ReLU6", composed.relu6)
--- Softsign(): x / (1 + |x|)
activation("Softsign", composed.softsign)
--- Tanhshrink(): x - tanh(x)
activation("Tanhshrink", composed.tanhshrink)
--- LogSigmoid(): log(sigmoid(x))
activation("LogSigmoid", composed.logsigmoid)
--- Hardshrink(lambd = 0.5): x where |x| > lambd, else 0
activation("Hardshrink", composed.hardshrink, { "lambd" })
--- Softshrink(lambd = 0.5): x -+ lambd outside [-lambd, lambd], else 0 (lambd >= 0)
local Softshrink = activation("Softshrink", composed.softshrink, { "lambd" })
Softshrink._check_numbers = function(self, who)
  local l = self.numbers[1]
  if l ~= nil and not (l >= 0) then options.error(string.format("%s: lambd must be >= 0, got %s", who, l), 4) end
end

--- Threshold(threshold, value): x where x > threshold, else value (both required)
local Threshold = activation("Threshold", composed.threshold, { "threshold", "value" })
Threshold._check_numbers = function(self, who)
  for i, key in ipairs({ "threshold", "value" }) do
    if self.numbers[i] == nil then options.error(string.format("%s: %s is required", who, key), 4) end
  end
end

-- classes taking one dim (positional or {dim = d}); required: whether it must be given (else dflt)
local function dim_class(name, fn, required, dflt)
  local cls = Module:extend(name)
  local accepted = { dim = "integer" }
  cls.init = function(self, dim, ...)
    local who = "nn." .. name
    if select("#", ...) > 0 then options.error(who .. ": expected one argument (dim or {dim = d})", 3) end
    if type(dim) == "table" then dim = options.check(dim, who, accepted, 3).dim end
    if dim == nil then
      if required then options.error(who .. ": dim is required (the dim to normalize over, from 1)", 3) end
      dim = dflt
    end
    if math.type(dim) ~= "integer" or dim == 0 then
      options.error(string.format("%s: dim must be a nonzero integer (1-based, negative from the end), got %s", who,
        tostring(dim)), 3)
    end
    self.dim = dim
  end
  cls.forward = function(self, x) return fn(x, self.dim) end
  cls.extra_repr = function(self) return "dim=" .. self.dim end
  activations[name] = cls
  return cls
end

--- Softmax(dim): exp(x) / sum(exp(x)) along dim (1-based, negative from the end; required)
dim_class("Softmax", tl.softmax, true)
--- LogSoftmax(dim): log(softmax(x, dim))
dim_class("LogSoftmax", tl.log_softmax, true)
--- Softmin(dim): softmax(-x, dim)
dim_class("Softmin", composed.softmin, true)
--- GLU(dim = -1): a * sigmoid(b), a and b the halves of x along dim
dim_class("GLU", composed.glu, false, -1)

local PRELU = { num_parameters = "integer", init = "number", dtype = "string", device = "string" }

--- PReLU(num_parameters = 1, init = 0.25, {dtype, device}) or PReLU{num_parameters, init, dtype,
-- device}: max(0, x) + weight * min(0, x), a learnable weight of num_parameters (1, or the input's
-- channels: dim 2) filled with init (kept as self.num_weights: num_parameters() counts elements)
local PReLU = Module:extend("PReLU")
activations.PReLU = PReLU

function PReLU:init(num_parameters, init, opts)
  if type(num_parameters) == "table" then
    if init ~= nil or opts ~= nil then options.error("nn.PReLU: an options table comes alone", 3) end
    opts = options.check(num_parameters, "nn.PReLU", PRELU, 3)
    num_parameters, init = opts.num_parameters, opts.init
  else
    if type(init) == "table" then init, opts = nil, init end
    opts = options.check(opts, "nn.PReLU", { dtype = "string", device = "string" }, 3)
  end
  num_parameters = num_parameters == nil and 1 or num_parameters
  if math.type(num_parameters) ~= "integer" or num_parameters < 1 then
    options.error("nn.PReLU: num_parameters must be a positive integer, got " .. tostring(num_parameters), 3)
  end
  if init ~= nil and type(init) ~= "number" then
    options.error("nn.PReLU: init must be a number, got " .. type(init), 3)
  end
  self.num_weights, self.init_value = num_parameters, init or 0.25
  self:register_parameter("weight", tl.full({ num_parameters }, self.init_value,
    { dtype = opts.dtype or "float32", device = opts.device or "cpu" }))
end

function PReLU:reset_parameters()
  tl.no_grad(function() self.weight:fill_(self.init_value) end)
  return self
end

function PReLU:forward(x) return composed.prelu(x, self.weight) end

function PReLU:extra_repr() return "num_parameters=" .. self.num_weights end

--- Identity(...): takes any arguments and ignores them, as PyTorch's (a drop-in for a layer)
local Identity = activation("Identity", function(x) return x end)
Identity.init = function() end

return activations
