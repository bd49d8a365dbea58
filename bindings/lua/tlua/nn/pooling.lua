-- tl.nn pooling and resampling modules: MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d, Upsample, UpsamplingNearest2d, UpsamplingBilinear2d.
local Module = require("tlua.nn.module").Module
local F = require("tlua.nn.functional")
local options = require("tlua.options")

local pooling = {}

-- each module's options and their kinds (tlua.options), checked by its init: errors point at the
-- caller of the constructor (init is level 1, Module.new 2, the user 3)
local PAIR = "integer|table"
local ACCEPTED = {
  MaxPool = { stride = PAIR, padding = PAIR, dilation = PAIR, ceil_mode = "boolean", return_indices = "boolean" },
  AvgPool1d = { stride = PAIR, padding = PAIR, ceil_mode = "boolean", count_include_pad = "boolean" },
  AvgPool2d = { stride = PAIR, padding = PAIR, ceil_mode = "boolean", count_include_pad = "boolean",
    divisor_override = "integer" },
  AdaptiveMax = { return_indices = "boolean" },
  Upsample = { size = "integer|table", scale_factor = "number|table", mode = "string", align_corners = "boolean" },
  Upsampling = { size = "integer|table", scale_factor = "number|table" },
}

local function str(v)
  if type(v) == "table" then
    local parts = {}
    for i, e in ipairs(v) do parts[i] = tostring(e) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  return tostring(v)
end

local function check_size(v, cls, what)
  local ok = math.type(v) == "integer" or type(v) == "table" and #v >= 1
  if not ok then
    options.error(string.format("nn.%s: %s must be an integer or a table, got %s", cls, what, tostring(v)), 4)
  end
end

-- copies of the options a pooling module passes on, each kept as a field of the module
local function keep(self, opts, names)
  for _, name in ipairs(names) do self[name] = opts[name] end
end

-- MaxPool1d and MaxPool2d: (kernel_size, opts) -> F.max_pool1d / F.max_pool2d
local function max_pool(name, fn)
  local cls = Module:extend(name)
  function cls:init(kernel_size, opts)
    opts = options.check(opts, "nn." .. name, ACCEPTED.MaxPool, 3)
    check_size(kernel_size, name, "kernel_size")
    self.kernel_size = kernel_size
    keep(self, opts, { "stride", "padding", "dilation", "ceil_mode", "return_indices" })
  end
  function cls:forward(x)
    return fn(x, self.kernel_size, { stride = self.stride, padding = self.padding, dilation = self.dilation,
      ceil_mode = self.ceil_mode, return_indices = self.return_indices })
  end
  function cls:extra_repr()
    local s = string.format("kernel_size=%s, stride=%s, padding=%s", str(self.kernel_size),
      str(self.stride or self.kernel_size), str(self.padding or 0))
    if self.dilation then s = s .. ", dilation=" .. str(self.dilation) end
    if self.ceil_mode then s = s .. ", ceil_mode=true" end
    return s
  end
  return cls
end

--- MaxPool1d(kernel_size, {stride = kernel_size, padding = 0, dilation = 1, ceil_mode = false,
-- return_indices = false}): [N, C, L] or [C, L]; forward returns values (and 1-based indices)
pooling.MaxPool1d = max_pool("MaxPool1d", F.max_pool1d)
--- MaxPool2d(kernel_size, {stride = kernel_size, padding = 0, dilation = 1, ceil_mode = false,
-- return_indices = false}): [N, C, H, W] or [C, H, W]; forward returns values (and 1-based indices)
pooling.MaxPool2d = max_pool("MaxPool2d", F.max_pool2d)

-- AvgPool1d and AvgPool2d: (kernel_size, opts) -> F.avg_pool1d / F.avg_pool2d
local function avg_pool(name, fn, names)
  local cls = Module:extend(name)
  function cls:init(kernel_size, opts)
    opts = options.check(opts, "nn." .. name, ACCEPTED[name], 3)
    check_size(kernel_size, name, "kernel_size")
    self.kernel_size = kernel_size
    keep(self, opts, names)
  end
  function cls:forward(x)
    local o = {}
    for _, key in ipairs(names) do o[key] = self[key] end
    return fn(x, self.kernel_size, o)
  end
  function cls:extra_repr()
    return string.format("kernel_size=%s, stride=%s, padding=%s", str(self.kernel_size),
      str(self.stride or self.kernel_size), str(self.padding or 0))
  end
  return cls
end

--- AvgPool1d(kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false, count_include_pad = true})
pooling.AvgPool1d = avg_pool("AvgPool1d", F.avg_pool1d, { "stride", "padding", "ceil_mode", "count_include_pad" })
--- AvgPool2d(kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false, count_include_pad = true,
-- divisor_override = nil})
pooling.AvgPool2d = avg_pool("AvgPool2d", F.avg_pool2d,
  { "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" })

-- the adaptive modules: (output_size[, opts]) -> fn
local function adaptive(name, fn, accepted)
  local cls = Module:extend(name)
  function cls:init(output_size, opts)
    if accepted then
      opts = options.check(opts, "nn." .. name, accepted, 3)
      self.return_indices = opts.return_indices
    elseif opts ~= nil then
      options.error(string.format("nn.%s: expected one argument (output_size), got a second", name), 3)
    end
    check_size(output_size, name, "output_size")
    self.output_size = output_size
  end
  function cls:forward(x)
    if accepted then return fn(x, self.output_size, { return_indices = self.return_indices }) end
    return fn(x, self.output_size)
  end
  function cls:extra_repr() return "output_size=" .. str(self.output_size) end
  return cls
end

--- AdaptiveAvgPool1d(output_size): [N, C, L] or [C, L] -> [.., output_size]
pooling.AdaptiveAvgPool1d = adaptive("AdaptiveAvgPool1d", F.adaptive_avg_pool1d)
--- AdaptiveAvgPool2d(output_size): an integer or {h, w}
pooling.AdaptiveAvgPool2d = adaptive("AdaptiveAvgPool2d", F.adaptive_avg_pool2d)
--- AdaptiveMaxPool1d(output_size, {return_indices = false})
pooling.AdaptiveMaxPool1d = adaptive("AdaptiveMaxPool1d", F.adaptive_max_pool1d, ACCEPTED.AdaptiveMax)
--- AdaptiveMaxPool2d(output_size, {return_indices = false})
pooling.AdaptiveMaxPool2d = adaptive("AdaptiveMaxPool2d", F.adaptive_max_pool2d, ACCEPTED.AdaptiveMax)

-- interpolate's modes and how many spatial dims each takes (nearest: 1 or 2)
local RESAMPLE_DIMS = { nearest = { 1, 2 }, linear = { 1, 1 }, bilinear = { 2, 2 } }

-- an upsampling module's mode, align_corners, size and scale_factor, checked when it is built
-- (forward's interpolate checks them against the input's rank); called by init: this function is
-- level 1, init 2, Module.new 3, the user 4
local function check_resampling(who, opts, mode)
  local dims = RESAMPLE_DIMS[mode]
  if not dims then
    options.error(string.format("%s: mode must be 'nearest', 'linear' or 'bilinear', got '%s'", who, mode), 4)
  end
  if opts.align_corners ~= nil and mode == "nearest" then
    options.error(who .. ": align_corners can only be set with the modes linear and bilinear", 4)
  end
  if (opts.size == nil) == (opts.scale_factor == nil) then
    options.error(who .. ": give exactly one of size and scale_factor", 4)
  end
  local what = opts.size ~= nil and "size" or "scale_factor"
  local value = opts[what]
  local want = what == "size" and "an integer >= 1" or "a finite number > 0"
  local function good(e)
    if what == "size" then return math.type(e) == "integer" and e >= 1 end
    return type(e) == "number" and e > 0 and e < math.huge
  end
  if type(value) ~= "table" then
    if not good(value) then
      options.error(string.format("%s: %s must be %s (or a table of them), got %s", who, what, want, tostring(value)),
        4)
    end
    return
  end
  if #value < dims[1] or #value > dims[2] then
    local count = dims[1] == dims[2] and tostring(dims[1]) or dims[1] .. " or " .. dims[2]
    options.error(string.format("%s: %s must have %s %s for mode %s, got %d", who, what, count,
      dims[2] == 1 and "entry" or "entries", mode, #value), 4)
  end
  for i = 1, #value do
    if not good(value[i]) then
      options.error(string.format("%s: %s[%d] must be %s, got %s", who, what, i, want, tostring(value[i])), 4)
    end
  end
end

--- Upsample({size = nil, scale_factor = nil, mode = "nearest", align_corners = nil}): F.interpolate
local Upsample = Module:extend("Upsample")
pooling.Upsample = Upsample

function Upsample:init(opts)
  opts = options.check(opts, "nn.Upsample", ACCEPTED.Upsample, 3)
  check_resampling("nn.Upsample", opts, opts.mode or "nearest")
  keep(self, opts, { "size", "scale_factor", "align_corners" })
  self.mode = opts.mode or "nearest"
end

function Upsample:forward(x)
  return F.interpolate(x, { size = self.size, scale_factor = self.scale_factor, mode = self.mode,
    align_corners = self.align_corners })
end

function Upsample:extra_repr()
  if self.size then return string.format("size=%s, mode=%s", str(self.size), self.mode) end
  return string.format("scale_factor=%s, mode=%s", str(self.scale_factor), self.mode)
end

--- UpsamplingNearest2d({size = nil, scale_factor = nil}): Upsample with mode "nearest"
local UpsamplingNearest2d = Upsample:extend("UpsamplingNearest2d")
pooling.UpsamplingNearest2d = UpsamplingNearest2d

function UpsamplingNearest2d:init(opts)
  opts = options.check(opts, "nn.UpsamplingNearest2d", ACCEPTED.Upsampling, 3)
  check_resampling("nn.UpsamplingNearest2d", opts, "nearest")
  keep(self, opts, { "size", "scale_factor" })
  self.mode = "nearest"
end

--- UpsamplingBilinear2d({size = nil, scale_factor = nil}): Upsample with mode "bilinear" and
-- align_corners = true (as PyTorch's)
local UpsamplingBilinear2d = Upsample:extend("UpsamplingBilinear2d")
pooling.UpsamplingBilinear2d = UpsamplingBilinear2d

function UpsamplingBilinear2d:init(opts)
  opts = options.check(opts, "nn.UpsamplingBilinear2d", ACCEPTED.Upsampling, 3)
  check_resampling("nn.UpsamplingBilinear2d", opts, "bilinear")
  keep(self, opts, { "size", "scale_factor" })
  self.mode, self.align_corners = "bilinear", true
end

return pooling
