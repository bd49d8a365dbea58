-- tl.nn activations: a module class for each one-tensor op of the op table with a gradient (tl.ops(): families unary and pointwise), taking the op's numbers (nn.LeakyReLU(0.2), nn.Hardtanh{min_val = 0, max_val = 6}), GELU's approximate option, and Identity.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local F = require("tlua.nn.functional")
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
      self.numbers = { first, ... }
    end
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
  local fn = tl[op.name]
  if (op.family == "unary" or op.family == "pointwise") and op.differentiable and not with_arguments[op.name]
    and type(fn) == "function" then
    activation(class_names[op.name] or (op.name:sub(1, 1):upper() .. op.name:sub(2)), fn, op.numbers)
  end
end

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

--- Identity(...): takes any arguments and ignores them, as PyTorch's (a drop-in for a layer)
local Identity = activation("Identity", function(x) return x end)
Identity.init = function() end

return activations
