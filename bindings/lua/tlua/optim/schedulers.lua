-- tl.optim's chainable learning-rate schedulers as torch 1.13 defines them: StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, LambdaLR, CosineAnnealingLR, WarmupCosineLR.
--
-- A scheduler sets each group's lr when it is made (epoch 0) and at each step() (call it once per
-- epoch, or once per batch for per-step schedules). The chainable ones compute the next lr from
-- the group's current one, as torch's get_lr() does, so two schedulers may act on one optimizer;
-- step(epoch) (deprecated in torch) jumps by the closed form. state_dict()/load_state_dict()
-- resume them (optim/scheduler.lua).
local options = require("tlua.options")
local Scheduler = require("tlua.optim.scheduler")

local schedulers = { Scheduler = Scheduler }
local each = Scheduler.each

-- raises message at the user's line (depth: the fallback level, 4 from configure, 5 from a check it calls)
local function fail(message, depth) options.error(message, depth or 4) end

local function check_number(who, key, v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    fail(string.format("%s: %s must be a finite number, got %s", who, key, tostring(v)), 5)
  end
  return v
end

local function check_integer(who, key, v, min)
  if math.type(v) ~= "integer" or v < min then
    fail(string.format("%s: %s must be an integer >= %d, got %s", who, key, min, tostring(v)), 5)
  end
  return v
end

local function check_range(who, key, v, low, high, low_open)
  check_number(who, key, v)
  if v > high or v < low or (low_open and v == low) then
    fail(string.format("%s: %s must be in %s%s, %s], got %s", who, key, low_open and "(" or "[", low, high,
      tostring(v)), 5)
  end
  return v
end
schedulers._checks = { number = check_number, integer = check_integer, range = check_range }

-- the lr each group has now
local function current(self)
  return each(self, function(group) return group.lr end)
end

--- StepLR(optimizer, step_size, {gamma = 0.1}) (or gamma positionally, or {step_size =, gamma =}):
-- the lr times gamma every step_size epochs (base * gamma ^ floor(epoch / step_size))
schedulers.StepLR = Scheduler.define("StepLR", {
  names = { "step_size", "gamma" }, accepted = { step_size = "any", gamma = "any" },
  configure = function(self, args)
    self.step_size = check_integer("optim.StepLR", "step_size", args.step_size, 1)
    self.gamma = args.gamma == nil and 0.1 or check_number("optim.StepLR", "gamma", args.gamma)
  end,
  get_lr = function(self)
    if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then return current(self) end
    return each(self, function(group) return group.lr * self.gamma end)
  end,
  closed_form = function(self)
    return each(self, function(_, base) return base * self.gamma ^ (self.last_epoch // self.step_size) end)
  end,
})

--- MultiStepLR(optimizer, milestones, {gamma = 0.1}) (or gamma positionally, or {milestones =,
-- gamma =}): the lr times gamma at each milestone epoch (a list of integers; one repeated k
-- times multiplies by gamma^k)
schedulers.MultiStepLR = Scheduler.define("MultiStepLR", {
  names = { "milestones", "gamma" }, accepted = { milestones = "table", gamma = "any" },
  configure = function(self, args)
    local milestones = args.milestones
    if type(milestones) ~= "table" then fail("optim.MultiStepLR: milestones expected a list of integers") end
    self.milestones = {}
    for i, m in ipairs(milestones) do
      self.milestones[i] = check_integer("optim.MultiStepLR", "milestones[" .. i .. "]", m, 0)
    end
    if #self.milestones == 0 and next(milestones) ~= nil then
      fail("optim.MultiStepLR: milestones expected a list of integers")
    end
    table.sort(self.milestones)
    self.gamma = args.gamma == nil and 0.1 or check_number("optim.MultiStepLR", "gamma", args.gamma)
  end,
  get_lr = function(self)
    local count = 0
    for _, m in ipairs(self.milestones) do if m == self.last_epoch then count = count + 1 end end
    if count == 0 then return current(self) end
    return each(self, function(group) return group.lr * self.gamma ^ count end)
  end,
  closed_form = function(self)
    local passed = 0
    for _, m in ipairs(self.milestones) do if m <= self.last_epoch then passed = passed + 1 end end
    return each(self, function(_, base) return base * self.gamma ^ passed end)
  end,
})

--- ExponentialLR(optimizer, gamma) (or {gamma =}): the lr times gamma every epoch
schedulers.ExponentialLR = Scheduler.define("ExponentialLR", {
  names = { "gamma" }, accepted = { gamma = "any" },
  configure = function(self, args)
    self.gamma = check_number("optim.ExponentialLR", "gamma", args.gamma)
  end,
  get_lr = function(self)
    if self.last_epoch == 0 then return current(self) end
    return each(self, function(group) return group.lr * self.gamma end)
  end,
  closed_form = function(self)
    return each(self, function(_, base) return base * self.gamma ^ self.last_epoch end)
  end,
})

--- ConstantLR(optimizer, {factor = 1/3, total_iters = 5}) (or positionally): the lr times factor
-- (in (0, 1]) until epoch total_iters, then the lr itself
schedulers.ConstantLR = Scheduler.define("ConstantLR", {
  names = { "factor", "total_iters" }, accepted = { factor = "any", total_iters = "any" },
  configure = function(self, args)
    self.factor = args.factor == nil and 1.0 / 3 or check_range("optim.ConstantLR", "factor", args.factor, 0, 1, true)
    self.total_iters = args.total_iters == nil and 5 or
        check_integer("optim.ConstantLR", "total_iters", args.total_iters, 0)
  end,
  get_lr = function(self)
    if self.last_epoch == 0 then return each(self, function(group) return group.lr * self.factor end) end
    if self.last_epoch ~= self.total_iters then return current(self) end
    return each(self, function(group) return group.lr * (1.0 / self.factor) end)
  end,
  closed_form = function(self)
    local done = self.last_epoch >= self.total_iters and 1 or 0
    return each(self, function(_, base) return base * (self.factor + done * (1 - self.factor)) end)
  end,
})

--- LinearLR(optimizer, {start_factor = 1/3, end_factor = 1, total_iters = 5}) (or positionally):
-- the lr times a factor going linearly from start_factor (in (0, 1]) to end_factor (in [0, 1])
-- over total_iters epochs, then held
schedulers.LinearLR = Scheduler.define("LinearLR", {
  names = { "start_factor", "end_factor", "total_iters" },
  accepted = { start_factor = "any", end_factor = "any", total_iters = "any" },
  configure = function(self, args)
    local who = "optim.LinearLR"
    self.start_factor = args.start_factor == nil and 1.0 / 3 or
        check_range(who, "start_factor", args.start_factor, 0, 1, true)
    self.end_factor = args.end_factor == nil and 1.0 or check_range(who, "end_factor", args.end_factor, 0, 1)
    self.total_iters = args.total_iters == nil and 5 or check_integer(who, "total_iters", args.total_iters, 1)
  end,
  get_lr = function(self)
    local e, s, t = self.end_factor, self.start_factor, self.total_iters
    if self.last_epoch == 0 then return each(self, function(group) return group.lr * s end) end
    if self.last_epoch > t then return current(self) end
    return each(self, function(group)
      return group.lr * (1. + (e - s) / (t * s + (self.last_epoch - 1) * (e - s)))
    end)
  end,
  closed_form = function(self)
    local e, s, t = self.end_factor, self.start_factor, self.total_iters
    return each(self, function(_, base) return base * (s + (e - s) * math.min(t, self.last_epoch) / t) end)
  end,
})

local function is_callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

--- LambdaLR(optimizer, lr_lambda): lr = base * lr_lambda(epoch); lr_lambda a function of the
-- epoch, or a list of them, one per parameter group (not saved by state_dict)
schedulers.LambdaLR = Scheduler.define("LambdaLR", {
  names = { "lr_lambda" }, accepted = { lr_lambda = "callable|table" },
  configure = function(self, args, optimizer)
    local fn, n = args.lr_lambda, #optimizer.param_groups
    if is_callable(fn) then
      self.lr_lambdas = {}
      for i = 1, n do self.lr_lambdas[i] = fn end
    elseif type(fn) == "table" and #fn == n then
      for i = 1, n do
        if not is_callable(fn[i]) then fail("optim.LambdaLR: lr_lambda[" .. i .. "] expected a function") end
      end
      self.lr_lambdas = { table.unpack(fn, 1, n) }
    elseif type(fn) == "table" then
      fail(string.format("optim.LambdaLR: expected %d lr_lambdas (one per parameter group), got %d", n, #fn))
    else
      fail("optim.LambdaLR: argument 2 expected a function of the epoch (or a list of them), got " .. type(fn))
    end
  end,
  get_lr = function(self)
    return each(self, function(_, base, i) return base * self.lr_lambdas[i](self.last_epoch) end)
  end,
})
schedulers.LambdaLR._not_state = { lr_lambdas = true }

--- CosineAnnealingLR(optimizer, T_max, {eta_min = 0}) (or eta_min positionally, or {T_max =,
-- eta_min =}): eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2, by torch's recursive
-- form (which continues past T_max as a cosine of period 2 T_max)
schedulers.CosineAnnealingLR = Scheduler.define("CosineAnnealingLR", {
  names = { "T_max", "eta_min" }, accepted = { T_max = "any", eta_min = "any" },
  configure = function(self, args)
    if type(args.T_max) ~= "number" or not (args.T_max > 0 and args.T_max < math.huge) then
      fail("optim.CosineAnnealingLR: T_max must be a number > 0, got " .. tostring(args.T_max))
    end
    self.T_max = args.T_max
    self.eta_min = args.eta_min == nil and 0 or check_number("optim.CosineAnnealingLR", "eta_min", args.eta_min)
  end,
  get_lr = function(self)
    local e, T, eta_min = self.last_epoch, self.T_max, self.eta_min
    if e == 0 then return current(self) end
    if self._step_count == 1 and e > 0 then
      return each(self, function(_, base) return eta_min + (base - eta_min) * (1 + math.cos(e * math.pi / T)) / 2 end)
    end
    if (e - 1 - T) % (2 * T) == 0 then
      return each(self, function(group, base)
        return group.lr + (base - eta_min) * (1 - math.cos(math.pi / T)) / 2
      end)
    end
    return each(self, function(group)
      return (1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (group.lr - eta_min) + eta_min
    end)
  end,
  closed_form = function(self)
    return each(self, function(_, base)
      return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
    end)
  end,
})

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
  if not Scheduler.is_optimizer(optimizer) then
    options.error("optim.WarmupCosineLR: argument 1 expected an optimizer, got " .. type(optimizer), 2)
  end
  return schedulers.LambdaLR(optimizer, schedulers.cosine_with_warmup(warmup, opts.total_steps, opts.min_ratio))
end

return schedulers
