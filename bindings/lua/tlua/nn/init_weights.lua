-- tl.nn.init: in-place weight initialisers (uniform_, normal_, kaiming_*, xavier_*, ...) with torch.nn.init's rules.
local tl = require("tlua")
local floating = require("tlua.nn.module").floating
local options = require("tlua.options")

local init = {}

local function fans(t, fn_name)
  local shape = t.shape
  if #shape < 2 then
    error(string.format("nn.init.%s: fan in and fan out need a tensor with at least 2 dims, got %d", fn_name, #shape), 3)
  end
  local receptive = 1
  for d = 3, #shape do receptive = receptive * shape[d] end
  return shape[2] * receptive, shape[1] * receptive
end

--- calculate_gain(nonlinearity, param?) as torch.nn.init.calculate_gain
function init.calculate_gain(nonlinearity, param)
  local linear = { linear = true, conv1d = true, conv2d = true, conv3d = true, sigmoid = true,
    conv_transpose1d = true, conv_transpose2d = true, conv_transpose3d = true }
  if linear[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    return math.sqrt(2 / (1 + slope * slope))
  end
  error("nn.init.calculate_gain: unsupported nonlinearity '" .. tostring(nonlinearity) .. "'", 2)
end

local function fill_with(t, values)
  tl.no_grad(function() t:copy_(values) end)
  return t
end

local function like(t)
  return { dtype = floating[t.dtype] and t.dtype or "float32", device = t.device }
end

--- uniform_(t, a = 0, b = 1), normal_(t, mean = 0, std = 1), constant_, zeros_, ones_: in place
function init.uniform_(t, a, b)
  a, b = a or 0, b or 1
  return fill_with(t, tl.rand(t.shape, like(t)) * (b - a) + a)
end

function init.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  return fill_with(t, tl.randn(t.shape, like(t)) * std + mean)
end

function init.constant_(t, value)
  tl.no_grad(function() t:fill_(value) end)
  return t
end

function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end

local function fan_for(t, mode, fn_name)
  local fan_in, fan_out = fans(t, fn_name)
  mode = mode or "fan_in"
  if mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  error(string.format("nn.init.%s: mode must be 'fan_in' or 'fan_out', got '%s'", fn_name, tostring(mode)), 3)
end

-- kaiming_*'s options (tlua.options); mode and nonlinearity are checked by fan_for and calculate_gain
local KAIMING = { a = "number", mode = "string", nonlinearity = "string" }

--- kaiming_uniform_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"})
function init.kaiming_uniform_(t, opts)
  opts = options.check(opts, "nn.init.kaiming_uniform_", KAIMING)
  local fan = fan_for(t, opts.mode, "kaiming_uniform_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  local bound = math.sqrt(3) * gain / math.sqrt(fan)
  return init.uniform_(t, -bound, bound)
end

--- kaiming_normal_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"})
function init.kaiming_normal_(t, opts)
  opts = options.check(opts, "nn.init.kaiming_normal_", KAIMING)
  local fan = fan_for(t, opts.mode, "kaiming_normal_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return init.normal_(t, 0, gain / math.sqrt(fan))
end

--- xavier_uniform_(t, gain = 1), xavier_normal_(t, gain = 1)
function init.xavier_uniform_(t, gain)
  local fan_in, fan_out = fans(t, "xavier_uniform_")
  local bound = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -bound, bound)
end

function init.xavier_normal_(t, gain)
  local fan_in, fan_out = fans(t, "xavier_normal_")
  return init.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fan_in + fan_out)))
end

return init
