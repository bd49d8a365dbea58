-- tl.nn.init: in-place weight initialisers (uniform_, normal_, trunc_normal_, constant_, eye_, dirac_, xavier_*, kaiming_*, orthogonal_) and calculate_gain, with torch.nn.init's rules.
local tl = require("tlua")
local floating = require("tlua.nn.module").floating
local options = require("tlua.options")

local init = {}

local function check_tensor(t, fn_name)
  if not tl.is_tensor(t) then
    options.error(string.format("nn.init.%s: expected a tensor, got %s", fn_name, type(t)), 3)
  end
  if not floating[t.dtype] then
    options.error(string.format("nn.init.%s: expected a floating tensor, got %s", fn_name, t.dtype), 3)
  end
end

-- v as a number (nil: default); what names it in the error
local function number(v, default, fn_name, what)
  if v == nil then return default end
  if type(v) ~= "number" then
    options.error(string.format("nn.init.%s: %s must be a number, got %s", fn_name, what, type(v)), 3)
  end
  return v
end

local function fans(t, fn_name)
  local shape = t.shape
  if #shape < 2 then
    options.error(string.format("nn.init.%s: fan in and fan out need a tensor with at least 2 dims, got %d", fn_name,
      #shape), 3)
  end
  local receptive = 1
  for d = 3, #shape do receptive = receptive * shape[d] end
  return shape[2] * receptive, shape[1] * receptive
end

-- gain 1 for these
local LINEAR = { linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
  conv_transpose2d = true, conv_transpose3d = true, sigmoid = true }

--- calculate_gain(nonlinearity, param = nil): torch.nn.init.calculate_gain's recommended gain: 1 for
-- linear, conv1d/2d/3d, conv_transpose1d/2d/3d and sigmoid; 5/3 for tanh; sqrt(2) for relu;
-- sqrt(2 / (1 + slope^2)) for leaky_relu (param: the negative slope, default 0.01); 3/4 for selu
function init.calculate_gain(nonlinearity, param)
  if LINEAR[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    if param ~= nil and type(param) ~= "number" then
      options.error("nn.init.calculate_gain: leaky_relu's negative slope must be a number, got " .. type(param), 2)
    end
    local slope = param == nil and 0.01 or param
    return math.sqrt(2 / (1 + slope * slope))
  end
  options.error("nn.init.calculate_gain: unsupported nonlinearity '" .. tostring(nonlinearity) .. "' (linear, "
    .. "conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, sigmoid, tanh, relu, "
    .. "leaky_relu, selu)", 2)
end

local function fill_with(t, values)
  tl.no_grad(function() t:copy_(values) end)
  return t
end

local function like(t)
  return { dtype = t.dtype, device = t.device }
end

-- 16-bit tensors draw in float32 and are cast by copy_
local function draw_like(t)
  local o = like(t)
  if o.dtype == "bfloat16" or o.dtype == "float16" then o.dtype = "float32" end
  return o
end

--- uniform_(t, a = 0, b = 1): fills t in place from U(a, b); returns t
function init.uniform_(t, a, b)
  check_tensor(t, "uniform_")
  a, b = number(a, 0, "uniform_", "a"), number(b, 1, "uniform_", "b")
  if not (a <= b) then
    options.error(string.format("nn.init.uniform_: expected a <= b, got a = %g, b = %g", a, b), 2)
  end
  return fill_with(t, tl.rand(t.shape, draw_like(t)) * (b - a) + a)
end

--- normal_(t, mean = 0, std = 1): fills t in place from N(mean, std^2); returns t
function init.normal_(t, mean, std)
  check_tensor(t, "normal_")
  mean, std = number(mean, 0, "normal_", "mean"), number(std, 1, "normal_", "std")
  if not (std >= 0) then options.error("nn.init.normal_: std must be >= 0, got " .. tostring(std), 2) end
  return fill_with(t, tl.randn(t.shape, draw_like(t)) * std + mean)
end

-- the standard normal's cumulative distribution function, through tl.erf in float64
local function norm_cdf(x)
  return (1 + tl.erf(tl.tensor(x / math.sqrt(2), { dtype = "float64" })):item()) / 2
end

--- trunc_normal_(t, mean = 0, std = 1, a = -2, b = 2): fills t in place from N(mean, std^2)
-- truncated to [a, b] (a and b absolute bounds, as torch's), by the inverse CDF of a uniform draw
-- between the bounds' CDFs (computed in float64); returns t
function init.trunc_normal_(t, mean, std, a, b)
  local fn = "trunc_normal_"
  check_tensor(t, fn)
  mean, std = number(mean, 0, fn, "mean"), number(std, 1, fn, "std")
  a, b = number(a, -2, fn, "a"), number(b, 2, fn, "b")
  if not (std > 0) then options.error("nn.init.trunc_normal_: std must be > 0, got " .. tostring(std), 2) end
  if not (a < b) then
    options.error(string.format("nn.init.trunc_normal_: expected a < b, got a = %g, b = %g", a, b), 2)
  end
  local lo, hi = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
  local u = tl.rand(t.shape, { dtype = "float64", device = t.device }) * (2 * hi - 2 * lo) + (2 * lo - 1)
  local v = tl.clamp(tl.erfinv(u) * (std * math.sqrt(2)) + mean, a, b)
  return fill_with(t, v)
end

--- constant_(t, value): fills t with value in place; zeros_(t), ones_(t): with 0 and 1
function init.constant_(t, value)
  check_tensor(t, "constant_")
  if type(value) ~= "number" then
    options.error("nn.init.constant_: value must be a number, got " .. type(value), 2)
  end
  tl.no_grad(function() t:fill_(value) end)
  return t
end

function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end

--- eye_(t): a 2-dim t becomes the identity (ones on the diagonal of a rectangular t), in place
function init.eye_(t)
  check_tensor(t, "eye_")
  if #t.shape ~= 2 then
    options.error(string.format("nn.init.eye_: expected a 2-dim tensor, got %d dims", #t.shape), 2)
  end
  return fill_with(t, tl.eye(t.shape[1], t.shape[2], like(t)))
end

--- dirac_(t, groups = 1): a 3-, 4- or 5-dim convolution weight [out, in, k...] becomes the
-- identity convolution (a 1 at the kernel's centre for out channel d of each group and in channel
-- d, for d up to min(out / groups, in)), in place
function init.dirac_(t, groups)
  check_tensor(t, "dirac_")
  local shape = t.shape
  if #shape < 3 or #shape > 5 then
    options.error(string.format("nn.init.dirac_: expected a 3-, 4- or 5-dim tensor, got %d dims", #shape), 2)
  end
  groups = groups == nil and 1 or groups
  if math.type(groups) ~= "integer" or groups < 1 or shape[1] % groups ~= 0 then
    options.error(string.format("nn.init.dirac_: groups must be a positive integer dividing the %d out channels, "
      .. "got %s", shape[1], tostring(groups)), 2)
  end
  local out_per = shape[1] // groups
  tl.no_grad(function()
    t:zero_()
    for g = 0, groups - 1 do
      for d = 1, math.min(out_per, shape[2]) do
        local v = t:select(1, g * out_per + d):select(1, d)
        for k = 3, #shape do v = v:select(1, shape[k] // 2 + 1) end
        v:fill_(1)
      end
    end
  end)
  return t
end

-- the fan mode asks for (nil: fan_in)
local function fan_for(t, mode, fn_name)
  local fan_in, fan_out = fans(t, fn_name)
  mode = mode or "fan_in"
  if mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  options.error(string.format("nn.init.%s: mode must be 'fan_in' or 'fan_out', got '%s'", fn_name, tostring(mode)), 3)
end

-- kaiming_*'s options (tlua.options); mode and nonlinearity are checked by fan_for and calculate_gain
local KAIMING = { a = "number", mode = "string", nonlinearity = "string" }

-- kaiming_*'s arguments: (t, {a, mode, nonlinearity}) or torch's positional (t, a, mode, nonlinearity)
local function kaiming_args(fn_name, a, mode, nonlinearity)
  if type(a) == "table" then
    if mode ~= nil or nonlinearity ~= nil then
      options.error(string.format("nn.init.%s: an options table comes alone after the tensor", fn_name), 3)
    end
    local opts = options.check(a, "nn.init." .. fn_name, KAIMING, 3)
    return opts -- not a tail call: the fallback level counts this frame
  end
  local opts = { a = a, mode = mode, nonlinearity = nonlinearity }
  for key, kind in pairs({ a = "number", mode = "string", nonlinearity = "string" }) do
    if opts[key] ~= nil and type(opts[key]) ~= kind then
      options.error(string.format("nn.init.%s: %s must be a %s, got %s", fn_name, key, kind, type(opts[key])), 3)
    end
  end
  return opts
end

--- kaiming_uniform_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"}) (or torch's positional
-- (t, a, mode, nonlinearity)): U(-bound, bound), bound = gain * sqrt(3 / fan), gain =
-- calculate_gain(nonlinearity, a), fan the fan_in or fan_out of t
function init.kaiming_uniform_(t, a, mode, nonlinearity)
  check_tensor(t, "kaiming_uniform_")
  local opts = kaiming_args("kaiming_uniform_", a, mode, nonlinearity)
  local fan = fan_for(t, opts.mode, "kaiming_uniform_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  local bound = math.sqrt(3) * gain / math.sqrt(fan)
  return init.uniform_(t, -bound, bound)
end

--- kaiming_normal_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"}) (or positional):
-- N(0, std^2), std = gain / sqrt(fan)
function init.kaiming_normal_(t, a, mode, nonlinearity)
  check_tensor(t, "kaiming_normal_")
  local opts = kaiming_args("kaiming_normal_", a, mode, nonlinearity)
  local fan = fan_for(t, opts.mode, "kaiming_normal_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return init.normal_(t, 0, gain / math.sqrt(fan))
end

--- xavier_uniform_(t, gain = 1): U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out));
-- xavier_normal_(t, gain = 1): N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))
function init.xavier_uniform_(t, gain)
  check_tensor(t, "xavier_uniform_")
  gain = number(gain, 1, "xavier_uniform_", "gain")
  local fan_in, fan_out = fans(t, "xavier_uniform_")
  local bound = gain * math.sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -bound, bound)
end

function init.xavier_normal_(t, gain)
  check_tensor(t, "xavier_normal_")
  gain = number(gain, 1, "xavier_normal_", "gain")
  local fan_in, fan_out = fans(t, "xavier_normal_")
  return init.normal_(t, 0, gain * math.sqrt(2 / (fan_in + fan_out)))
end

-- The Q of a's QR decomposition with R's diagonal positive (torch's orthogonal_: q * sign(diag(r))),
-- a float64 [n, m] with n >= m: classical Gram-Schmidt with reorthogonalisation ("twice is enough"),
-- one column at a time with tensor ops
local function gram_schmidt(a)
  local n, m = a.shape[1], a.shape[2]
  local q = tl.zeros(n, m, { dtype = "float64", device = a.device })
  for j = 1, m do
    local v = a:narrow(2, j, 1)
    if j > 1 then
      local prev = q:narrow(2, 1, j - 1)
      for _ = 1, 2 do v = v - prev:matmul(prev:t():matmul(v)) end
    end
    local r = v:norm():item()
    if not (r > 0) then
      options.error("nn.init.orthogonal_: the random matrix drawn is rank deficient; draw again", 4)
    end
    q:narrow(2, j, 1):copy_(v / r)
  end
  return q
end

-- the orthogonal matrix orthogonal_ makes from a drawn float64 matrix a [rows, cols]: the Q factor
-- of a (of a^T when rows < cols, then transposed back), R's diagonal made positive
function init._orthogonal_matrix(a)
  local rows, cols = a.shape[1], a.shape[2]
  if rows < cols then return gram_schmidt(a:t():contiguous()):t():contiguous() end
  return gram_schmidt(a)
end

--- orthogonal_(t, gain = 1): t (at least 2 dims, seen as [shape[1], the rest]) becomes a (semi-)
-- orthogonal matrix times gain: the Q of the QR decomposition of a N(0, 1) draw, as torch's (rows
-- orthonormal when rows <= columns, columns otherwise); computed in float64
function init.orthogonal_(t, gain)
  check_tensor(t, "orthogonal_")
  gain = number(gain, 1, "orthogonal_", "gain")
  if #t.shape < 2 then
    options.error(string.format("nn.init.orthogonal_: expected a tensor with at least 2 dims, got %d", #t.shape), 2)
  end
  local rows = t.shape[1]
  local cols = t:numel() // math.max(rows, 1)
  if t:numel() == 0 then return t end
  local a = tl.randn(rows, cols, { dtype = "float64", device = t.device })
  local q = init._orthogonal_matrix(a) * gain
  return fill_with(t, q:view(t.shape))
end

return init
