-- tl.nn.functional's pooling and interpolate forms (merged into tl.nn.functional by functional.lua).
local tl = require("tlua")
local options = require("tlua.options")

local part = {}

local INT1 = "integer|table"
local MAX1 = { stride = INT1, padding = INT1, dilation = INT1, ceil_mode = "boolean", return_indices = "boolean" }
local AVG1 = { stride = INT1, padding = INT1, ceil_mode = "boolean", count_include_pad = "boolean" }
local ADAPTIVE_MAX = { return_indices = "boolean" }
local INTERPOLATE = { size = "integer|table", scale_factor = "number|table", mode = "string",
  align_corners = "boolean", antialias = "boolean" }

-- A 1-d size argument: an integer or {n}; an error naming who and what otherwise.
local function one(v, who, what, level)
  if type(v) == "table" and #v == 1 then v = v[1] end
  if math.type(v) ~= "integer" then
    options.error(string.format("%s: %s must be an integer or {n}, got %s", who, what,
      type(v) == "table" and "a table of " .. #v or tostring(v)), level + 1)
  end
  return v
end

-- x [N, C, L] or [C, L] as [.., 1, L] for a 2-d op, run by fn, and its results back as [.., L]
-- (errors of the 2-d op renamed to who's).
local function as_2d(who, x, fn)
  if not tl.is_tensor(x) then
    options.error(string.format("%s: argument 1 expected a tensor, got %s", who, type(x)), 3)
  end
  if x:dim() ~= 2 and x:dim() ~= 3 then
    options.error(string.format("%s: input must be [N, C, L] or [C, L], got shape [%s]", who,
      table.concat(x.shape, ", ")), 3)
  end
  local ok, y, i = pcall(fn, x:unsqueeze(-2))
  if not ok then
    local message = tostring(y):gsub("^[^\n]-:%d+: ", "", 1) -- the position inside this file
    options.error((message:gsub("^[%w_]*pool2d:", who .. ":", 1)), 3)
  end
  if i then return y:squeeze(-2), i:squeeze(-2) end
  return y:squeeze(-2)
end

--- max_pool1d(x [N, C, L] or [C, L], kernel_size, {stride = kernel_size, padding = 0, dilation = 1,
-- ceil_mode = false, return_indices = false}): window maxima [.., OL] (and their 1-based positions in L)
function part.max_pool1d(x, kernel_size, opts)
  opts = options.check(opts, "max_pool1d", MAX1, 2)
  local k = one(kernel_size, "max_pool1d", "kernel_size", 2)
  local s = opts.stride and one(opts.stride, "max_pool1d", "stride", 2) or k
  local p = opts.padding and one(opts.padding, "max_pool1d", "padding", 2) or 0
  local d = opts.dilation and one(opts.dilation, "max_pool1d", "dilation", 2) or 1
  return as_2d("max_pool1d", x, function(x2)
    return tl.max_pool2d(x2, { 1, k }, { stride = { 1, s }, padding = { 0, p }, dilation = { 1, d },
      ceil_mode = opts.ceil_mode, return_indices = opts.return_indices })
  end)
end

--- max_pool2d(x [N, C, H, W] or [C, H, W], kernel_size, {stride = kernel_size, padding = 0, dilation = 1,
-- ceil_mode = false, return_indices = false}): window maxima (and their 1-based flat positions in H x W)
part.max_pool2d = tl.max_pool2d

--- avg_pool1d(x [N, C, L] or [C, L], kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
-- count_include_pad = true}): window means [.., OL]
function part.avg_pool1d(x, kernel_size, opts)
  opts = options.check(opts, "avg_pool1d", AVG1, 2)
  local k = one(kernel_size, "avg_pool1d", "kernel_size", 2)
  local s = opts.stride and one(opts.stride, "avg_pool1d", "stride", 2) or k
  local p = opts.padding and one(opts.padding, "avg_pool1d", "padding", 2) or 0
  return as_2d("avg_pool1d", x, function(x2)
    return tl.avg_pool2d(x2, { 1, k }, { stride = { 1, s }, padding = { 0, p }, ceil_mode = opts.ceil_mode,
      count_include_pad = opts.count_include_pad })
  end)
end

--- avg_pool2d(x [N, C, H, W] or [C, H, W], kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
-- count_include_pad = true, divisor_override = nil}): window means
part.avg_pool2d = tl.avg_pool2d

--- adaptive_avg_pool1d(x [N, C, L] or [C, L], output_size): means over windows
-- floor(i L / O) .. ceil((i + 1) L / O) - 1 (0-based i)
function part.adaptive_avg_pool1d(x, output_size)
  local o = one(output_size, "adaptive_avg_pool1d", "output_size", 2)
  return as_2d("adaptive_avg_pool1d", x, function(x2) return tl.adaptive_avg_pool2d(x2, { 1, o }) end)
end

--- adaptive_avg_pool2d(x [N, C, H, W] or [C, H, W], output_size): an integer or {h, w}
part.adaptive_avg_pool2d = tl.adaptive_avg_pool2d

--- adaptive_max_pool1d(x [N, C, L] or [C, L], output_size, {return_indices = false})
function part.adaptive_max_pool1d(x, output_size, opts)
  opts = options.check(opts, "adaptive_max_pool1d", ADAPTIVE_MAX, 2)
  local o = one(output_size, "adaptive_max_pool1d", "output_size", 2)
  return as_2d("adaptive_max_pool1d", x, function(x2)
    return tl.adaptive_max_pool2d(x2, { 1, o }, { return_indices = opts.return_indices })
  end)
end

--- adaptive_max_pool2d(x [N, C, H, W] or [C, H, W], output_size, {return_indices = false})
part.adaptive_max_pool2d = tl.adaptive_max_pool2d

-- interpolate's modes by input rank: the 2-d kernel each one runs
local MODES = {
  [3] = { nearest = "nearest", linear = "bilinear" },
  [4] = { nearest = "nearest", bilinear = "bilinear" },
}

-- size or scale_factor as a list of n entries (a single value repeated)
local function per_dim(v, n, what, kind, level)
  local list = type(v) == "table" and v or {}
  if type(v) ~= "table" then for i = 1, n do list[i] = v end end
  if #list ~= n then
    options.error(string.format("interpolate: %s must have %d %s for a %dD input, got %d", what, n,
      n == 1 and "entry" or "entries", n + 2, #list), level + 1)
  end
  for i = 1, n do
    local e = list[i]
    local good = kind == "integer" and math.type(e) == "integer" and e >= 1
      or kind == "number" and type(e) == "number" and e > 0 and e < math.huge
    if not good then
      options.error(string.format("interpolate: %s[%d] must be %s, got %s", what, i,
        kind == "integer" and "an integer >= 1" or "a finite number > 0", tostring(e)), level + 1)
    end
  end
  return list
end

-- tl._interpolate, its errors raised at the caller of interpolate
local function resample(...)
  local ok, y = pcall(tl._interpolate, ...)
  if not ok then options.error((tostring(y):gsub("^[^\n]-:%d+: ", "", 1)), 3) end
  return y
end

--- interpolate(x [N, C, L] or [N, C, H, W], {size = nil, scale_factor = nil, mode = "nearest",
-- align_corners = nil}): resampled to size (an integer or one per spatial dim) or to
-- floor(in * scale_factor); modes "nearest" (PyTorch's: source floor(o * in / out), with a scale
-- factor floor(o / scale)), "linear" (3-D) and "bilinear" (4-D), whose align_corners (default false)
-- maps the corner pixels onto each other
function part.interpolate(x, opts)
  opts = options.check(opts, "interpolate", INTERPOLATE, 2)
  if not tl.is_tensor(x) then
    options.error("interpolate: argument 1 expected a tensor, got " .. type(x), 2)
  end
  local rank = x:dim()
  local mode = opts.mode or "nearest"
  local modes = MODES[rank]
  if not modes then
    options.error(string.format("interpolate: input must be 3-D [N, C, L] or 4-D [N, C, H, W], got shape [%s]",
      table.concat(x.shape, ", ")), 2)
  end
  local kernel = modes[mode]
  if not kernel then
    local names = {}
    for name in pairs(modes) do names[#names + 1] = name end
    table.sort(names)
    options.error(string.format("interpolate: mode '%s' does not take a %dD input (expected %s)", mode, rank,
      table.concat(names, " or ")), 2)
  end
  if opts.align_corners ~= nil and kernel == "nearest" then
    options.error("interpolate: align_corners can only be set with the modes linear and bilinear", 2)
  end
  if opts.antialias then options.error("interpolate: antialias = true is not supported", 2) end
  if (opts.size == nil) == (opts.scale_factor == nil) then
    options.error("interpolate: give exactly one of size and scale_factor", 2)
  end
  local n = rank - 2
  local size = opts.size and per_dim(opts.size, n, "size", "integer", 2)
  local scale = opts.scale_factor and per_dim(opts.scale_factor, n, "scale_factor", "number", 2)
  local sh, sw, fh, fw
  if n == 1 then
    sh, fh = 1, 0
    sw, fw = size and size[1] or 0, scale and scale[1] or 0
    return resample(x:unsqueeze(3), kernel, sh, sw, fh, fw, opts.align_corners or false):squeeze(3)
  end
  sh, sw = size and size[1] or 0, size and size[2] or 0
  fh, fw = scale and scale[1] or 0, scale and scale[2] or 0
  return resample(x, kernel, sh, sw, fh, fw, opts.align_corners or false)
end

return part
