-- tl.nn normalization modules (merged into tl.nn by nn/init.lua): BatchNorm1d, BatchNorm2d, GroupNorm, RMSNorm (LayerNorm lives in layers.lua).
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local F = require("tlua.nn.functional")
local shape_str = require("tlua.nn.state_dict").shape_str
local options = require("tlua.options")

local classes = {}

local function check_size(v, what, who)
  if math.type(v) ~= "integer" or v < 1 then
    options.error(string.format("nn.%s: %s must be a positive integer, got %s", who, what, tostring(v)), 4)
  end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

-- ---- BatchNorm1d / BatchNorm2d ---------------------------------------------------------------
local BATCH_NORM = { eps = "number", momentum = "number|boolean", affine = "boolean",
  track_running_stats = "boolean", dtype = "string", device = "string" }

-- the base of BatchNorm1d and BatchNorm2d; ranks: the input ranks the class takes
local function batch_norm_class(name, ranks, expected)
  local cls = Module:extend(name)
  classes[name] = cls

  function cls:init(num_features, opts)
    local who = "nn." .. name
    opts = options.check(opts, who, BATCH_NORM, 3)
    check_size(num_features, "num_features", name)
    if opts.momentum == true then
      options.error(who .. ": momentum must be a number in [0, 1], or false for a cumulative moving average", 3)
    end
    if opts.momentum and not (opts.momentum >= 0 and opts.momentum <= 1) then
      options.error(string.format("%s: momentum must be in [0, 1], got %s", who, tostring(opts.momentum)), 3)
    end
    local eps = opts.eps or 1e-5
    if not (eps >= 0) then options.error(string.format("%s: eps must be >= 0, got %s", who, tostring(eps)), 3) end
    self.num_features = num_features
    self.eps = eps
    -- false: a cumulative moving average (torch's momentum=None)
    if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
    self.affine = opts.affine ~= false
    self.track_running_stats = opts.track_running_stats ~= false
    local o = tensor_opts(opts)
    if self.affine then
      self:register_parameter("weight", tl.ones(num_features, o))
      self:register_parameter("bias", tl.zeros(num_features, o))
    end
    if self.track_running_stats then
      self:register_buffer("running_mean", tl.zeros(num_features, o))
      self:register_buffer("running_var", tl.ones(num_features, o))
      self:register_buffer("num_batches_tracked", tl.zeros({}, { dtype = "int64", device = o.device }))
    end
  end

  --- reset_running_stats(): running_mean 0, running_var 1, num_batches_tracked 0
  function cls:reset_running_stats()
    if not self.track_running_stats then return self end
    tl.no_grad(function()
      self.running_mean:fill_(0)
      self.running_var:fill_(1)
      self.num_batches_tracked:fill_(0)
    end)
    return self
  end

  --- reset_parameters(): the running statistics, and weight 1, bias 0
  function cls:reset_parameters()
    self:reset_running_stats()
    if self.affine then
      tl.no_grad(function()
        self.weight:fill_(1)
        self.bias:fill_(0)
      end)
    end
    return self
  end

  function cls:forward(x)
    local who = "nn." .. name
    if not tl.is_tensor(x) then options.error(string.format("%s: expected a tensor, got %s", who, type(x)), 2) end
    local shape = x.shape
    if not ranks[#shape] then
      options.error(string.format("%s: expected %s input, got shape %s", who, expected, shape_str(shape)), 2)
    end
    if not F._finfo_eps[x.dtype] then
      options.error(string.format("%s: expected a floating input, got %s", who, x.dtype), 2)
    end
    if shape[2] ~= self.num_features then
      options.error(string.format("%s: expected %d channels (dim 2), got shape %s", who, self.num_features,
        shape_str(shape)), 2)
    end
    local per = 1
    for d, s in ipairs(shape) do if d ~= 2 then per = per * s end end
    if self.training and per <= 1 then
      options.error(string.format("%s: expected more than 1 value per channel when training, got input of shape %s",
        who, shape_str(shape)), 2)
    end
    local factor = 0
    if self.training and self.track_running_stats then
      tl.no_grad(function() self.num_batches_tracked:add_(1) end)
      if self.momentum == false then
        factor = 1 / self.num_batches_tracked:item()
      else
        factor = self.momentum
      end
    end
    -- batch statistics when training or without running ones; the running ones move only when
    -- training
    local batch_stats = self.training or not self.track_running_stats
    local use_running = not self.training or self.track_running_stats
    return F.batch_norm(x, use_running and self.running_mean or nil, use_running and self.running_var or nil,
      { weight = self.weight, bias = self.bias, training = batch_stats, momentum = factor, eps = self.eps })
  end

  function cls:extra_repr()
    return string.format("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s", self.num_features, self.eps,
      self.momentum == false and "None" or string.format("%g", self.momentum), tostring(self.affine),
      tostring(self.track_running_stats))
  end

  return cls
end

--- BatchNorm1d(num_features, {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats = true,
-- dtype, device}): batch normalization of [N, C] or [N, C, L] over every dim but C. Training: the
-- batch's mean and biased variance normalize; running_mean and running_var (buffers) move towards
-- the batch's mean and unbiased variance by momentum (momentum = false: a cumulative moving average,
-- torch's momentum=None, by num_batches_tracked). Eval: the running statistics normalize
-- (track_running_stats = false: none are kept, and the batch's statistics serve in eval too).
-- affine: a learnable weight (1) and bias (0) of [C].
batch_norm_class("BatchNorm1d", { [2] = true, [3] = true }, "2D [N, C] or 3D [N, C, L]")

--- BatchNorm2d(num_features, {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats = true,
-- dtype, device}): BatchNorm1d's rules over [N, C, H, W] (statistics over N, H and W)
batch_norm_class("BatchNorm2d", { [4] = true }, "4D [N, C, H, W]")

-- ---- GroupNorm -----------------------------------------------------------------------------
local GROUP_NORM = { eps = "number", affine = "boolean", dtype = "string", device = "string" }

--- GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true, dtype, device}): x [N, C, ...]
-- with C = num_channels split into num_groups groups, each sample's group normalized by its mean and
-- biased variance; affine: a learnable weight (1) and bias (0) of [C] per channel
local GroupNorm = Module:extend("GroupNorm")
classes.GroupNorm = GroupNorm

function GroupNorm:init(num_groups, num_channels, opts)
  opts = options.check(opts, "nn.GroupNorm", GROUP_NORM, 3)
  check_size(num_groups, "num_groups", "GroupNorm")
  check_size(num_channels, "num_channels", "GroupNorm")
  if num_channels % num_groups ~= 0 then
    options.error(string.format("nn.GroupNorm: num_channels (%d) must be divisible by num_groups (%d)", num_channels,
      num_groups), 3)
  end
  local eps = opts.eps or 1e-5
  if not (eps >= 0) then options.error("nn.GroupNorm: eps must be >= 0, got " .. tostring(eps), 3) end
  self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
  self.affine = opts.affine ~= false
  if self.affine then
    local o = tensor_opts(opts)
    self:register_parameter("weight", tl.ones(num_channels, o))
    self:register_parameter("bias", tl.zeros(num_channels, o))
  end
end

function GroupNorm:forward(x)
  if tl.is_tensor(x) and (#x.shape < 2 or x.shape[2] ~= self.num_channels) then
    options.error(string.format("nn.GroupNorm: expected input [N, %d, ...], got shape %s", self.num_channels,
      shape_str(x.shape)), 2)
  end
  return F.group_norm(x, self.num_groups, { weight = self.weight, bias = self.bias, eps = self.eps })
end

function GroupNorm:extra_repr()
  return string.format("%d, %d, eps=%g, affine=%s", self.num_groups, self.num_channels, self.eps,
    tostring(self.affine))
end

-- ---- RMSNorm -------------------------------------------------------------------------------
local RMS_NORM = { eps = "number", elementwise_affine = "boolean", dtype = "string", device = "string" }

--- RMSNorm(normalized_shape, {eps = nil, elementwise_affine = true, dtype, device}): x / sqrt(mean(x^2)
-- + eps) * weight over the last dims (normalized_shape: an integer or a table of sizes); eps nil: the
-- input dtype's machine epsilon (torch.finfo(dtype).eps); elementwise_affine: a learnable weight (1)
-- of normalized_shape
local RMSNorm = Module:extend("RMSNorm")
classes.RMSNorm = RMSNorm

function RMSNorm:init(normalized_shape, opts)
  opts = options.check(opts, "nn.RMSNorm", RMS_NORM, 3)
  local shape = type(normalized_shape) == "table" and normalized_shape or { normalized_shape }
  if #shape == 0 then options.error("nn.RMSNorm: normalized_shape must name at least one dim", 3) end
  local copy = {}
  for i, s in ipairs(shape) do
    check_size(s, "normalized_shape", "RMSNorm")
    copy[i] = s
  end
  if opts.eps ~= nil and not (opts.eps >= 0) then
    options.error("nn.RMSNorm: eps must be >= 0, got " .. tostring(opts.eps), 3)
  end
  self.normalized_shape, self.eps = copy, opts.eps
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then self:register_parameter("weight", tl.ones(copy, tensor_opts(opts))) end
end

function RMSNorm:forward(x)
  return F.rms_norm(x, self.normalized_shape, { weight = self.weight, eps = self.eps })
end

function RMSNorm:reset_parameters()
  if self.weight then tl.no_grad(function() self.weight:fill_(1) end) end
  return self
end

function RMSNorm:extra_repr()
  return string.format("%s, eps=%s, elementwise_affine=%s", shape_str(self.normalized_shape),
    self.eps and string.format("%g", self.eps) or "None", tostring(self.elementwise_affine))
end

return classes
