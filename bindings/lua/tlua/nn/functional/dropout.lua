-- tl.nn.functional's channel and alpha dropouts (merged into tl.nn.functional by functional.lua): dropout1d, dropout2d, alpha_dropout, feature_alpha_dropout, from a tl.rand mask.
local tl = require("tlua")
local options = require("tlua.options")

local part = {}

-- SELU's alpha * scale: alpha dropout sets dropped elements to SELU's negative saturation value
local SELU_ALPHA = 1.7580993408473766

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end

local function check_p(p, who)
  if p == nil then return 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    options.error(string.format("%s: p must be a probability in [0, 1], got %s", who, tostring(p)), 3)
  end
  return p
end

local function check_training(training, who)
  if training ~= nil and type(training) ~= "boolean" then
    options.error(string.format("%s: training must be a boolean, got %s", who, type(training)), 3)
  end
  return training ~= false
end

local function check_floating(x, who)
  if not tl.is_tensor(x) then options.error(string.format("%s: input must be a tensor, got %s", who, type(x)), 3) end
  if not require("tlua.nn.module").floating[x.dtype] then
    options.error(string.format("%s: input must be a floating tensor, got %s", who, x.dtype), 3)
  end
end

-- the mask shape of a channel dropout: x's shape with the dims after the channel dim 1
-- (channel: x's channel dim, 1 for an unbatched input)
local function channel_mask_shape(x, channel)
  local shape = {}
  for d, s in ipairs(x.shape) do shape[d] = d <= channel and s or 1 end
  return shape
end

-- keep mask (true with probability 1 - p) of shape in x's dtype and device
local function keep(shape, p, x)
  return tl.rand(shape, { device = x.device }):ge(p):to(x.dtype)
end

-- x with whole channels zeroed (probability p) and the rest scaled by 1 / (1 - p); ranks maps an
-- accepted rank to its channel dim
local function channel_dropout(x, p, training, who, ranks, expected)
  check_floating(x, who)
  p = check_p(p, who)
  training = check_training(training, who)
  local channel = ranks[#x.shape]
  if not channel then
    options.error(string.format("%s: expected %s input, got shape %s", who, expected, shape_str(x.shape)), 3)
  end
  if not training or p == 0 then return x end
  if p == 1 then return x * 0 end
  return x * (keep(channel_mask_shape(x, channel), p, x) * (1 / (1 - p)))
end

--- dropout1d(x [N, C, L] or [C, L], p = 0.5, training = true): zeroes whole channels (each with
-- probability p) and scales the others by 1 / (1 - p) when training; the identity otherwise
function part.dropout1d(x, p, training)
  return channel_dropout(x, p, training, "dropout1d", { [2] = 1, [3] = 2 }, "2D [C, L] or 3D [N, C, L]")
end

--- dropout2d(x [N, C, H, W] or [C, H, W], p = 0.5, training = true): dropout1d's rule over
-- channels of two dims
function part.dropout2d(x, p, training)
  return channel_dropout(x, p, training, "dropout2d", { [3] = 1, [4] = 2 }, "3D [C, H, W] or 4D [N, C, H, W]")
end

-- alpha dropout with a keep mask of mask_shape: kept elements a x + a alpha p, dropped ones
-- a alpha (p - 1), a = 1 / sqrt((alpha^2 p + 1) (1 - p)), which keep a zero mean and unit variance
local function alpha(x, p, training, who, mask_shape)
  if not training or p == 0 then return x end
  if p == 1 then return x * 0 end
  local a = 1 / math.sqrt((SELU_ALPHA * SELU_ALPHA * p + 1) * (1 - p))
  local noise = keep(mask_shape(x), p, x)
  return x * (noise * a) + (noise * (SELU_ALPHA * a) + SELU_ALPHA * a * (p - 1))
end

--- alpha_dropout(x, p = 0.5, training = true): when training, each element is set with probability
-- p to SELU's saturation value and the result is rescaled to keep a standard normal input's mean
-- and variance (for SELU networks); the identity otherwise
function part.alpha_dropout(x, p, training)
  local who = "alpha_dropout"
  check_floating(x, who)
  return alpha(x, check_p(p, who), check_training(training, who), who, function(t) return t.shape end)
end

--- feature_alpha_dropout(x [N, C, ...], p = 0.5, training = true): alpha_dropout of whole channels
function part.feature_alpha_dropout(x, p, training)
  local who = "feature_alpha_dropout"
  check_floating(x, who)
  p, training = check_p(p, who), check_training(training, who)
  if #x.shape < 2 then
    options.error(string.format("%s: expected an input of at least 2 dims [N, C, ...], got shape %s", who,
      shape_str(x.shape)), 2)
  end
  return alpha(x, p, training, who, function(t) return channel_mask_shape(t, 2) end)
end

return part
