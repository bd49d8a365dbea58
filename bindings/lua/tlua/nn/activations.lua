-- tl.nn activations: a module class for each one-tensor op of the op table (tl.ops(): families unary and pointwise), and Identity.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module

local activations = {}

-- class names where PyTorch's are not the op's name capitalised
local class_names = { relu = "ReLU", gelu = "GELU", silu = "SiLU" }
-- ops of these families that take more than the tensor (tl.clamp(t, min, max)) have no class
local with_arguments = { clamp = true, pow_scalar = true }

local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  activations[name] = cls
  return cls
end

-- nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Exp, ...: forward(x) is tl.<op>(x)
for _, op in ipairs(tl.ops()) do
  local fn = tl[op.name]
  if (op.family == "unary" or op.family == "pointwise") and not with_arguments[op.name] and type(fn) == "function" then
    activation(class_names[op.name] or (op.name:sub(1, 1):upper() .. op.name:sub(2)), fn)
  end
end

--- Identity()
activation("Identity", function(x) return x end)

return activations
