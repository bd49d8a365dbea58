-- tl.nn convolution layers: Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d (stride, padding with "same"/"valid" and padding modes, dilation, groups).
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local init = require("tlua.nn.init_weights")
local conv = require("tlua.nn.functional.convolution")
local options = require("tlua.options")

local classes = {}

local TABLE = "integer|table"
local CONV = { stride = TABLE, padding = "integer|table|string", dilation = TABLE, groups = "integer",
  bias = "boolean", padding_mode = "string", dtype = "string", device = "string" }
local CONV_TRANSPOSE = { stride = TABLE, padding = TABLE, output_padding = TABLE, dilation = TABLE,
  groups = "integer", bias = "boolean", padding_mode = "string", dtype = "string", device = "string" }
local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }

local function check_size(v, what, who)
  if math.type(v) ~= "integer" or v < 1 then
    options.error(string.format("%s: %s must be a positive integer, got %s", who, what, tostring(v)), 4)
  end
end

local function tuple_str(t)
  if #t == 1 then return "(" .. t[1] .. ",)" end
  return "(" .. table.concat(t, ", ") .. ")"
end

-- PyTorch's default: weight kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in))
-- with fan_in = weight.shape[2] * the kernel's size, bias the same bound
local function reset(self)
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local fan_in = self.weight.shape[2]
    for d = 3, #self.weight.shape do fan_in = fan_in * self.weight.shape[d] end
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end

-- builds a conv layer of n spatial dims (transposed: the weight is [in, out / groups, k...])
local function setup(self, n, transposed, in_channels, out_channels, kernel_size, opts)
  local who = "nn." .. self._class_name
  opts = options.check(opts, who, transposed and CONV_TRANSPOSE or CONV, 4)
  check_size(in_channels, "in_channels", who)
  check_size(out_channels, "out_channels", who)
  local groups = opts.groups or 1
  check_size(groups, "groups", who)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    options.error(string.format("%s: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", who,
      in_channels, out_channels, groups), 4)
  end
  local mode = opts.padding_mode or "zeros"
  if not PADDING_MODES[mode] then
    options.error(string.format("%s: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got '%s'",
      who, tostring(mode)), 4)
  end
  if transposed and mode ~= "zeros" then
    options.error(who .. ": only padding_mode 'zeros' is supported for transposed convolutions (as PyTorch)", 4)
  end
  local kernel = conv._tuple(kernel_size, n, "kernel_size", who)
  for _, k in ipairs(kernel) do check_size(k, "kernel_size", who) end
  self.in_channels, self.out_channels, self.kernel_size, self.groups = in_channels, out_channels, kernel, groups
  self.stride = conv._tuple(opts.stride or 1, n, "stride", who)
  self.dilation = conv._tuple(opts.dilation or 1, n, "dilation", who)
  self.padding_mode = mode
  if transposed then
    self.padding = conv._tuple(opts.padding or 0, n, "padding", who)
    self.output_padding = conv._tuple(opts.output_padding or 0, n, "output_padding", who)
    -- torch's rule: output_padding < max(stride, dilation) per dim
    local most, bad = {}, false
    for i = 1, n do
      most[i] = math.max(self.stride[i], self.dilation[i])
      bad = bad or self.output_padding[i] < 0 or self.output_padding[i] >= most[i]
    end
    if bad then
      options.error(string.format("%s: output_padding must be >= 0 and smaller than max(stride, dilation) = %s, "
        .. "got %s", who, tuple_str(most), tuple_str(self.output_padding)), 4)
    end
  else
    local padding = opts.padding or 0
    self.padding = type(padding) == "string" and padding or conv._tuple(padding, n, "padding", who)
    -- the padding as F.pad takes it (the last dim first), for a padding_mode other than zeros
    local sym, extra = conv._resolve_padding(self.padding, kernel, self.stride, self.dilation, n, who)
    self._pads = {}
    for i = n, 1, -1 do
      local e = extra and extra[2 * (n - i) + 2] or 0
      self._pads[#self._pads + 1] = sym[i]
      self._pads[#self._pads + 1] = sym[i] + e
    end
  end
  local o = { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
  local shape = transposed and { in_channels, out_channels // groups } or { out_channels, in_channels // groups }
  for _, k in ipairs(kernel) do shape[#shape + 1] = k end
  self:register_parameter("weight", tl.empty(shape, o))
  if opts.bias ~= false then self:register_parameter("bias", tl.empty(out_channels, o)) end
  self._n, self._transposed = n, transposed
  reset(self)
end

local function forward(self, x)
  local n = self._n
  if self._transposed then
    local fn = n == 1 and conv.conv_transpose1d or conv.conv_transpose2d
    return fn(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
      output_padding = self.output_padding, dilation = self.dilation, groups = self.groups })
  end
  local fn = n == 1 and conv.conv1d or conv.conv2d
  local padding = self.padding
  if self.padding_mode ~= "zeros" then
    x = tl.pad(x, self._pads, { mode = self.padding_mode })
    padding = 0
  end
  return fn(x, self.weight, self.bias, { stride = self.stride, padding = padding, dilation = self.dilation,
    groups = self.groups })
end

local function extra_repr(self)
  local parts = { string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    tuple_str(self.kernel_size), tuple_str(self.stride)) }
  local padding = type(self.padding) == "string" and ("'" .. self.padding .. "'") or tuple_str(self.padding)
  parts[#parts + 1] = "padding=" .. padding
  if self.output_padding then parts[#parts + 1] = "output_padding=" .. tuple_str(self.output_padding) end
  local ones = true
  for _, d in ipairs(self.dilation) do ones = ones and d == 1 end
  if not ones then parts[#parts + 1] = "dilation=" .. tuple_str(self.dilation) end
  if self.groups ~= 1 then parts[#parts + 1] = "groups=" .. self.groups end
  if not self.bias then parts[#parts + 1] = "bias=false" end
  if self.padding_mode ~= "zeros" then parts[#parts + 1] = "padding_mode='" .. self.padding_mode .. "'" end
  return table.concat(parts, ", ")
end

local function layer(name, n, transposed)
  local cls = Module:extend(name)
  cls.init = function(self, in_channels, out_channels, kernel_size, opts)
    setup(self, n, transposed, in_channels, out_channels, kernel_size, opts)
  end
  cls.reset_parameters, cls.forward, cls.extra_repr = reset, forward, extra_repr
  classes[name] = cls
  return cls
end

--- Conv1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0 (an integer, "same" or
-- "valid"), dilation = 1, groups = 1, bias = true, padding_mode = "zeros" ("reflect", "replicate",
-- "circular"), dtype, device}): [N, C, L] or [C, L] -> [N, O, OL]; weight [O, C / groups, k]
layer("Conv1d", 1, false)
--- Conv2d(in_channels, out_channels, kernel_size (an integer or {kh, kw}), {stride = 1, padding = 0
-- (an integer, {h, w}, "same" or "valid"), dilation = 1, groups = 1, bias = true, padding_mode =
-- "zeros" ("reflect", "replicate", "circular"), dtype, device}): [N, C, H, W] or [C, H, W] ->
-- [N, O, OH, OW]; weight [O, C / groups, kh, kw]; groups = C is a depthwise convolution
layer("Conv2d", 2, false)
--- ConvTranspose1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0,
-- output_padding = 0, dilation = 1, groups = 1, bias = true, dtype, device}): weight
-- [C, O / groups, k]; OL = (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1
layer("ConvTranspose1d", 1, true)
--- ConvTranspose2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0,
-- output_padding = 0, dilation = 1, groups = 1, bias = true, dtype, device}): weight
-- [C, O / groups, kh, kw]; the gradient of Conv2d with respect to its input, as a layer
layer("ConvTranspose2d", 2, true)

return classes
