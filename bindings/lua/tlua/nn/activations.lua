-- tl.nn activations: a module class for each one-tensor op of the op table (tl.ops(): families unary and pointwise), GELU's approximate option, and Identity.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local F = require("tlua.nn.functional")
local options = require("tlua.options")

local activations = {}

-- class names where PyTorch's are not the op's name capitalised
local class_names = { relu = "ReLU", gelu = "GELU", gelu_tanh = "GELU_tanh", silu = "SiLU" }
-- ops of these families that take more than the tensor (tl.clamp(t, min, max)) have no class
local with_arguments = { clamp = true, pow_scalar = true }

local NO_OPTIONS = {}

-- a class whose forward is fn(x); it takes no options: nn.ReLU{inplace = true} is an error
-- (tlua.options; init is level 1, Module.new 2, the user 3)
local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  cls.init = function(_, opts) options.check(opts, "nn." .. name, NO_OPTIONS, 3) end
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
