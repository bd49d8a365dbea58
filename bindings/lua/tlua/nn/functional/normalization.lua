-- tl.nn.functional's normalization forms (merged into tl.nn.functional by functional.lua): batch_norm and add_layer_norm (the engine's fused ops), group_norm and rms_norm (composed from tensor ops; autograd differentiates them).
local tl = require("tlua")
local options = require("tlua.options")

local part = {}

local is_tensor = tl.is_tensor

-- 16-bit inputs compute their statistics in float32 and return their own dtype (as torch's CPU
-- kernels accumulate in float)
local LOW = { bfloat16 = true, float16 = true }

-- the machine epsilon of each floating dtype (torch.finfo(dtype).eps): RMSNorm's default eps
local FINFO_EPS = { float32 = 2 ^ -23, float64 = 2 ^ -52, bfloat16 = 2 ^ -7, float16 = 2 ^ -10 }
part._finfo_eps = FINFO_EPS

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- {1, C, 1, ...} of x's rank: a per-channel vector broadcast against [N, C, ...]
local function channel_shape(x, c)
  local shape = { 1, c }
  for d = 3, #x.shape do shape[d] = 1 end
  return shape
end

-- x in its compute dtype (float32 for 16-bit floats)
local function compute_form(x)
  if LOW[x.dtype] then return x:float() end
  return x
end

-- a per-channel tensor t ([C]) checked (who, what) and viewed as {1, C, 1, ...} in dtype
local function per_channel(t, x, c, who, what, dtype)
  if not is_tensor(t) then
    options.error(string.format("%s: %s must be a tensor, got %s", who, what, type(t)), 3)
  end
  if #t.shape ~= 1 or t.shape[1] ~= c then
    options.error(string.format("%s: %s must have shape [%d] (the input's channels), got %s", who, what, c,
      shape_str(t.shape)), 3)
  end
  if t.dtype ~= dtype then t = t:to(dtype) end
  return t:view(channel_shape(x, c))
end

-- a per-channel tensor t ([C]) checked (who, what), as it is
local function check_channel(t, c, who, what)
  if not is_tensor(t) then
    options.error(string.format("%s: %s must be a tensor, got %s", who, what, type(t)), 3)
  end
  if #t.shape ~= 1 or t.shape[1] ~= c then
    options.error(string.format("%s: %s must have shape [%d] (the input's channels), got %s", who, what, c,
      shape_str(t.shape)), 3)
  end
  return t
end

local function check_floating(x, who)
  if not is_tensor(x) then
    options.error(string.format("%s: input must be a tensor, got %s", who, type(x)), 3)
  end
  if not FINFO_EPS[x.dtype] then
    options.error(string.format("%s: input must be a floating tensor, got %s", who, x.dtype), 3)
  end
end

local function check_eps(eps, who)
  if not (eps >= 0) then options.error(string.format("%s: eps must be >= 0, got %s", who, tostring(eps)), 3) end
end

local BATCH_NORM = { weight = "tensor", bias = "tensor", training = "boolean", momentum = "number",
  eps = "number" }

--- batch_norm(x [N, C, ...], running_mean [C] or nil, running_var [C] or nil,
-- {weight = nil, bias = nil, training = false, momentum = 0.1, eps = 1e-5}) -> [N, C, ...]:
-- (x - mean) / sqrt(var + eps) * weight + bias per channel (dim 2). Training: the batch's mean and
-- biased variance over every dim but 2, and running_mean / running_var (when given) move in place
-- towards the batch's mean and unbiased variance by momentum (r = (1 - momentum) r + momentum s).
-- Not training: the running statistics (both required).
function part.batch_norm(x, running_mean, running_var, opts)
  local who = "batch_norm"
  opts = options.check(opts, who, BATCH_NORM, 2)
  check_floating(x, who)
  local shape = x.shape
  if #shape < 2 then
    options.error(string.format("%s: input must have at least 2 dims [N, C, ...], got %s", who, shape_str(shape)), 2)
  end
  local c = shape[2]
  local training = opts.training == true
  local momentum, eps = opts.momentum or 0.1, opts.eps or 1e-5
  check_eps(eps, who)
  if not (momentum >= 0 and momentum <= 1) then
    options.error(string.format("%s: momentum must be in [0, 1], got %s", who, tostring(momentum)), 2)
  end
  if (running_mean == nil) ~= (running_var == nil) then
    options.error(who .. ": running_mean and running_var must be both tensors or both nil", 2)
  end
  if not training and running_mean == nil then
    options.error(who .. ": running_mean and running_var are required when not training", 2)
  end
  for _, pair in ipairs({ { running_mean, "running_mean" }, { running_var, "running_var" } }) do
    local t, what = pair[1], pair[2]
    if t ~= nil and (not is_tensor(t) or #t.shape ~= 1 or t.shape[1] ~= c) then
      options.error(string.format("%s: %s must be a tensor of shape [%d] (the input's channels), got %s", who, what,
        c, is_tensor(t) and shape_str(t.shape) or type(t)), 2)
    end
  end
  local per = c > 0 and numel(shape) // c or 0
  if training and per <= 1 then
    options.error(string.format("%s: expected more than 1 value per channel when training, got input of shape %s",
      who, shape_str(shape)), 2)
  end
  local weight = opts.weight and check_channel(opts.weight, c, who, "weight")
  local bias = opts.bias and check_channel(opts.bias, c, who, "bias")
  -- one engine op (tl.batch_norm): the statistics, the running update and the normalization in
  -- fused kernels; 16-bit inputs compute in float32
  return tl.batch_norm(x, running_mean, running_var,
    { weight = weight, bias = bias, training = training, momentum = momentum, eps = eps })
end

local GROUP_NORM = { weight = "tensor", bias = "tensor", eps = "number" }

--- group_norm(x [N, C, ...], num_groups, {weight = nil, bias = nil, eps = 1e-5}) -> [N, C, ...]:
-- the C channels split into num_groups groups of C / num_groups; each sample's group is
-- normalized by its own mean and biased variance (tl.layer_norm over the group), then weight and
-- bias ([C]) scale and shift each channel
function part.group_norm(x, num_groups, opts)
  local who = "group_norm"
  opts = options.check(opts, who, GROUP_NORM, 2)
  check_floating(x, who)
  local shape = x.shape
  if #shape < 2 then
    options.error(string.format("%s: input must have at least 2 dims [N, C, ...], got %s", who, shape_str(shape)), 2)
  end
  local c = shape[2]
  if math.type(num_groups) ~= "integer" or num_groups < 1 then
    options.error(string.format("%s: num_groups must be a positive integer, got %s", who, tostring(num_groups)), 2)
  end
  if c % num_groups ~= 0 then
    options.error(string.format("%s: the input's %d channels are not divisible by num_groups = %d", who, c,
      num_groups), 2)
  end
  local eps = opts.eps or 1e-5
  check_eps(eps, who)
  local n = shape[1]
  local cx = compute_form(x)
  local dtype = cx.dtype
  local weight = opts.weight and per_channel(opts.weight, x, c, who, "weight", dtype)
  local bias = opts.bias and per_channel(opts.bias, x, c, who, "bias", dtype)
  local y
  if n * num_groups == 0 or numel(shape) == 0 then
    y = cx * 1
  else
    y = tl.layer_norm(cx:reshape(n * num_groups, numel(shape) // (n * num_groups)), nil, nil, eps):reshape(shape)
  end
  if weight then y = y * weight end
  if bias then y = y + bias end
  if y.dtype ~= x.dtype then y = y:to(x.dtype) end
  return y
end

local RMS_NORM = { weight = "tensor", eps = "number" }

-- normalized_shape as a table of positive sizes matching x's last dims (who names the caller)
local function trailing_shape(x, normalized_shape, who)
  local ns = type(normalized_shape) == "table" and normalized_shape or { normalized_shape }
  if #ns == 0 then options.error(who .. ": normalized_shape must name at least one dim", 3) end
  for _, s in ipairs(ns) do
    if math.type(s) ~= "integer" or s < 1 then
      options.error(string.format("%s: normalized_shape must be positive integers, got %s", who, tostring(s)), 3)
    end
  end
  local shape = x.shape
  local ok = #shape >= #ns
  for i = 1, #ns do
    if not ok then break end
    ok = shape[#shape - #ns + i] == ns[i]
  end
  if not ok then
    options.error(string.format("%s: the input's last dims must be normalized_shape %s, got input of shape %s", who,
      shape_str(ns), shape_str(shape)), 3)
  end
  return ns
end

--- rms_norm(x [..., *normalized_shape], normalized_shape, {weight = nil, eps = finfo(x.dtype).eps})
-- -> x / sqrt(mean(x^2 over the normalized dims) + eps) * weight (weight of normalized_shape);
-- normalized_shape: an integer (the last dim) or a table of the last dims' sizes
function part.rms_norm(x, normalized_shape, opts)
  local who = "rms_norm"
  opts = options.check(opts, who, RMS_NORM, 2)
  check_floating(x, who)
  local ns = trailing_shape(x, normalized_shape, who)
  local eps = opts.eps or FINFO_EPS[x.dtype]
  check_eps(eps, who)
  local cx = compute_form(x)
  local weight = opts.weight
  if weight ~= nil then
    local same = #weight.shape == #ns
    for i = 1, #ns do same = same and weight.shape[i] == ns[i] end
    if not same then
      options.error(string.format("%s: weight must have shape %s (normalized_shape), got %s", who, shape_str(ns),
        shape_str(weight.shape)), 2)
    end
    if weight.dtype ~= cx.dtype then weight = weight:to(cx.dtype) end
  end
  local dims = {}
  for i = 1, #ns do dims[i] = #x.shape - #ns + i end
  local y = cx * ((cx * cx):mean(dims, true) + eps):rsqrt()
  if weight ~= nil then y = y * weight end
  if y.dtype ~= x.dtype then y = y:to(x.dtype) end
  return y
end

--- add_layer_norm(x, residual, normalized_shape, weight?, bias?, eps = 1e-5, {output_dtype}?) -> y, s:
-- s = x + residual (same shape and device; the sum in the promoted dtype), y = s normalized over
-- the dims of normalized_shape (an integer: the last dim; or a table of the last dims' sizes) *
-- weight + bias (weight and bias of normalized_shape, or nil), as one fused op (tl.add_layer_norm):
-- a pre-norm transformer's residual add and the next layer norm in one pass over the residual
-- stream. output_dtype: y's dtype (a 16-bit type over a float32 sum, or "autocast": the autocast
-- dtype inside an autocast region), as tl.add_layer_norm takes it
function part.add_layer_norm(x, residual, normalized_shape, weight, bias, eps, extra)
  local who = "add_layer_norm"
  check_floating(x, who)
  local ns = trailing_shape(x, normalized_shape, who)
  extra = options.check(extra, who, { output_dtype = "string" }, 3)
  local opts = { eps = eps == nil and 1e-5 or eps, output_dtype = extra.output_dtype }
  if #ns == 1 then return tl.add_layer_norm(x, residual, weight, bias, opts) end
  -- several normalized dims: the rows of their product, as LayerNorm folds them
  local shape = x.shape
  if not is_tensor(residual) or shape_str(residual.shape) ~= shape_str(shape) then
    options.error(string.format("%s: residual must be a tensor of the input's shape %s, got %s", who,
      shape_str(shape), is_tensor(residual) and shape_str(residual.shape) or type(residual)), 2)
  end
  local size = numel(ns)
  local rows = {}
  for d = 1, #shape - #ns do rows[d] = shape[d] end
  rows[#rows + 1] = size
  local flat = function(t) return is_tensor(t) and t:reshape(size) or t end
  local y, s = tl.add_layer_norm(x:reshape(rows), residual:reshape(rows), flat(weight), flat(bias), opts)
  return y:reshape(shape), s:reshape(shape)
end

return part
