-- tl.optim learning-rate schedulers: StepLR, LambdaLR, CosineAnnealingLR, WarmupCosineLR (classes of tlua.class).
--
-- A scheduler sets group.lr = factor(epoch) applied to each group's initial lr. It starts at
-- epoch 0 (the lrs of epoch 0 are set when it is made); step() moves to the next epoch (call it
-- once per epoch, or once per batch for per-step schedules).
local class = require("tlua.class")
local options = require("tlua.options")

local schedulers = {}

local Scheduler = class("optim.Scheduler")
schedulers.Scheduler = Scheduler

-- a scheduler class: lr_at(self, base, epoch) gives the lr; configure(...) checks the arguments
-- after the optimizer and returns the scheduler's fields
local function scheduler(name, lr_at, configure)
  local cls = class("optim." .. name, Scheduler)
  cls.name, cls.lr_at, cls.configure = name, lr_at, configure
  schedulers[name] = cls
  return cls
end

-- cls(optimizer, ...): errors point at the caller (cls(...) tail-calls new; configure's at level 3)
function Scheduler.new(cls, optimizer, ...)
  local fields = cls.configure(...)
  if getmetatable(optimizer) == nil or type(optimizer.param_groups) ~= "table" then
    error(string.format("optim.%s: argument 1 expected an optimizer", cls.name), 2)
  end
  local self = setmetatable(fields, cls)
  self.optimizer = optimizer
  self.base_lrs = {}
  for i, group in ipairs(optimizer.param_groups) do
    if group.initial_lr == nil then group.initial_lr = group.lr end
    self.base_lrs[i] = group.initial_lr
  end
  self.last_epoch = -1
  self:step()
  return self
end

--- step(): advances one epoch and sets each group's lr
function Scheduler:step()
  self.last_epoch = self.last_epoch + 1
  self._last_lr = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    group.lr = self:lr_at(self.base_lrs[i], self.last_epoch)
    self._last_lr[i] = group.lr
  end
end

--- get_last_lr() -> the lr of each group, as last set
function Scheduler:get_last_lr()
  return { table.unpack(self._last_lr) }
end

function Scheduler:state_dict()
  return { last_epoch = self.last_epoch, base_lrs = { table.unpack(self.base_lrs) } }
end

function Scheduler:load_state_dict(sd)
  self.last_epoch = sd.last_epoch - 1
  self.base_lrs = { table.unpack(sd.base_lrs) }
  self:step()
end

-- (opts) or positional arguments: opts (checked against accepted, tlua.options), or nil followed by
-- the positional ones (called by configure: errors at level 4, the user; the parentheses keep this
-- frame, a tail call would not)
local function positional(who, accepted, opts, ...)
  if type(opts) == "table" then return (options.check(opts, who, accepted, 4)) end
  return nil, opts, ...
end

--- StepLR(optimizer, step_size, gamma = 0.1) or StepLR(optimizer, {step_size =, gamma =}):
-- lr = base * gamma ^ floor(epoch / step_size)
scheduler("StepLR", function(self, base, epoch)
  return base * self.gamma ^ (epoch // self.step_size)
end, function(...)
  local opts, step_size, gamma = positional("optim.StepLR", { step_size = "any", gamma = "number" }, ...)
  if opts then step_size, gamma = opts.step_size, opts.gamma end
  if math.type(step_size) ~= "integer" or step_size < 1 then
    error("optim.StepLR: step_size must be a positive integer, got " .. tostring(step_size), 3)
  end
  return { step_size = step_size, gamma = gamma or 0.1 }
end)

--- LambdaLR(optimizer, fn): lr = base * fn(epoch)
scheduler("LambdaLR", function(self, base, epoch)
  return base * self.fn(epoch)
end, function(fn)
  if type(fn) ~= "function" then error("optim.LambdaLR: argument 2 expected a function of the epoch", 3) end
  return { fn = fn }
end)

--- CosineAnnealingLR(optimizer, T_max, eta_min = 0) or (optimizer, {T_max =, eta_min =}):
-- lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2 (the closed form of PyTorch's)
scheduler("CosineAnnealingLR", function(self, base, epoch)
  return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
end, function(...)
  local opts, T_max, eta_min = positional("optim.CosineAnnealingLR", { T_max = "any", eta_min = "number" }, ...)
  if opts then T_max, eta_min = opts.T_max, opts.eta_min end
  if type(T_max) ~= "number" or T_max <= 0 then
    error("optim.CosineAnnealingLR: T_max must be a number > 0, got " .. tostring(T_max), 3)
  end
  return { T_max = T_max, eta_min = eta_min or 0 }
end)

--- cosine_with_warmup(warmup_steps, total_steps, min_ratio = 0) -> fn(step) for LambdaLR:
-- step / warmup_steps during the warmup, then a cosine from 1 down to min_ratio at total_steps
-- (held there after)
function schedulers.cosine_with_warmup(warmup_steps, total_steps, min_ratio)
  min_ratio = min_ratio or 0
  return function(step)
    if step < warmup_steps then return step / math.max(1, warmup_steps) end
    local progress = math.min(1, (step - warmup_steps) / math.max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
  end
end

--- WarmupCosineLR(optimizer, {warmup_steps = 0, total_steps, min_ratio = 0}): LambdaLR with
-- cosine_with_warmup (step it once per batch)
local WARMUP_COSINE = { warmup_steps = "any", total_steps = "any", min_ratio = "number" }
function schedulers.WarmupCosineLR(optimizer, opts)
  if type(opts) == "table" then options.check(opts, "optim.WarmupCosineLR", WARMUP_COSINE, 2) end
  if type(opts) ~= "table" or math.type(opts.total_steps) ~= "integer" then
    options.error("optim.WarmupCosineLR: expected {warmup_steps =, total_steps = (an integer), min_ratio =}", 2)
  end
  local warmup = opts.warmup_steps or 0
  if math.type(warmup) ~= "integer" or warmup < 0 or warmup > opts.total_steps then
    options.error("optim.WarmupCosineLR: warmup_steps must be an integer in [0, total_steps], got " ..
      tostring(warmup), 2)
  end
  return schedulers.LambdaLR(optimizer, schedulers.cosine_with_warmup(warmup, opts.total_steps, opts.min_ratio))
end

return schedulers
