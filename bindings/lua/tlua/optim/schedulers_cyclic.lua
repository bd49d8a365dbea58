-- tl.optim's cyclic and composite learning-rate schedulers as torch 1.13 defines them: CosineAnnealingWarmRestarts, OneCycleLR, SequentialLR.
local options = require("tlua.options")
local Scheduler = require("tlua.optim.scheduler")
local checks = require("tlua.optim.schedulers")._checks

local schedulers = {}
local each, copy = Scheduler.each, Scheduler._copy

local function fail(message, depth) options.error(message, depth or 4) end

-- ---- CosineAnnealingWarmRestarts -----------------------------------------------------------
--- CosineAnnealingWarmRestarts(optimizer, T_0, {T_mult = 1, eta_min = 0}) (or positionally, or
-- {T_0 =, ...}): SGDR's cosine from the base lr down to eta_min over T_i epochs, restarting with
-- T_i multiplied by T_mult; step(epoch) takes fractional epochs (once per batch: epoch + i / n)
local CAWR = Scheduler.define("CosineAnnealingWarmRestarts", {
  names = { "T_0", "T_mult", "eta_min" }, accepted = { T_0 = "any", T_mult = "any", eta_min = "any" },
  configure = function(self, args)
    local who = "optim.CosineAnnealingWarmRestarts"
    self.T_0 = checks.integer(who, "T_0", args.T_0, 1)
    self.T_i = self.T_0
    self.T_mult = args.T_mult == nil and 1 or checks.integer(who, "T_mult", args.T_mult, 1)
    self.eta_min = args.eta_min == nil and 0 or checks.number(who, "eta_min", args.eta_min)
    self.T_cur = -1
  end,
  get_lr = function(self)
    return each(self, function(_, base)
      return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
    end)
  end,
})
schedulers.CosineAnnealingWarmRestarts = CAWR

--- step(epoch?): the next epoch, or epoch (a number >= 0, fractional allowed)
function CAWR:step(epoch)
  if epoch == nil and self.last_epoch < 0 then epoch = 0 end
  if epoch == nil then
    epoch = self.last_epoch + 1
    self.T_cur = self.T_cur + 1
    if self.T_cur >= self.T_i then
      self.T_cur = self.T_cur - self.T_i
      self.T_i = self.T_i * self.T_mult
    end
  else
    if type(epoch) ~= "number" or not (epoch >= 0) then
      options.error("optim.CosineAnnealingWarmRestarts:step: epoch must be a number >= 0, got " .. tostring(epoch), 2)
    end
    if epoch >= self.T_0 then
      if self.T_mult == 1 then
        self.T_cur = epoch % self.T_0
      else
        local n = math.floor(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
        self.T_cur = epoch - self.T_0 * (self.T_mult ^ n - 1) / (self.T_mult - 1)
        self.T_i = self.T_0 * self.T_mult ^ n
      end
    else
      self.T_i = self.T_0
      self.T_cur = epoch
    end
  end
  self.last_epoch = math.floor(epoch)
  self._step_count = self._step_count + 1
  self:_set(self:get_lr())
end

-- ---- OneCycleLR ----------------------------------------------------------------------------
local function per_group(who, key, v, n)
  if type(v) == "number" then
    local out = {}
    for i = 1, n do out[i] = v end
    return out
  end
  if type(v) ~= "table" or #v ~= n then
    fail(string.format("%s: %s expected a number or a list of %d numbers (one per parameter group)", who, key, n), 5)
  end
  for i = 1, n do checks.number(who, key .. "[" .. i .. "]", v[i]) end
  return { table.unpack(v, 1, n) }
end

local function anneal(strategy, start, finish, pct)
  if strategy == "cos" then return finish + (start - finish) / 2.0 * (math.cos(math.pi * pct) + 1) end
  return (finish - start) * pct + start
end

--- OneCycleLR(optimizer, max_lr, {total_steps | epochs and steps_per_epoch, pct_start = 0.3,
-- anneal_strategy = "cos", cycle_momentum = true, base_momentum = 0.85, max_momentum = 0.95,
-- div_factor = 25, final_div_factor = 1e4, three_phase = false}) (or {max_lr =, ...}): the 1cycle
-- policy, stepped once per batch: from max_lr / div_factor up to max_lr, then down to
-- initial_lr / final_div_factor; with cycle_momentum the group's momentum (or beta1) goes the other
-- way. max_lr, base_momentum, max_momentum: a number or one per group. Stepping past total_steps
-- is an error.
schedulers.OneCycleLR = Scheduler.define("OneCycleLR", {
  names = { "max_lr" },
  accepted = { max_lr = "number|table", total_steps = "any", epochs = "any", steps_per_epoch = "any",
    pct_start = "any", anneal_strategy = "string", cycle_momentum = "boolean", base_momentum = "number|table",
    max_momentum = "number|table", div_factor = "any", final_div_factor = "any", three_phase = "boolean" },
  configure = function(self, args, optimizer)
    local who, n = "optim.OneCycleLR", #optimizer.param_groups
    if args.total_steps ~= nil then
      self.total_steps = checks.integer(who, "total_steps", args.total_steps, 1)
    elseif args.epochs ~= nil or args.steps_per_epoch ~= nil then
      self.total_steps = checks.integer(who, "epochs", args.epochs, 1) *
          checks.integer(who, "steps_per_epoch", args.steps_per_epoch, 1)
    else
      fail(who .. ": expected total_steps, or epochs and steps_per_epoch")
    end
    local pct = args.pct_start == nil and 0.3 or checks.range(who, "pct_start", args.pct_start, 0, 1)
    local strategy = args.anneal_strategy or "cos"
    if strategy ~= "cos" and strategy ~= "linear" then
      fail(who .. ": anneal_strategy must be \"cos\" or \"linear\", got \"" .. strategy .. "\"")
    end
    self.anneal_strategy = strategy
    local total = self.total_steps
    if args.three_phase then
      self._schedule_phases = {
        { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
          end_momentum = "base_momentum" },
        { end_step = 2 * pct * total - 2, start_lr = "max_lr", end_lr = "initial_lr",
          start_momentum = "base_momentum", end_momentum = "max_momentum" },
        { end_step = total - 1, start_lr = "initial_lr", end_lr = "min_lr", start_momentum = "max_momentum",
          end_momentum = "max_momentum" },
      }
    else
      self._schedule_phases = {
        { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
          end_momentum = "base_momentum" },
        { end_step = total - 1, start_lr = "max_lr", end_lr = "min_lr", start_momentum = "base_momentum",
          end_momentum = "max_momentum" },
      }
    end
    local div = args.div_factor == nil and 25.0 or checks.number(who, "div_factor", args.div_factor)
    local final_div = args.final_div_factor == nil and 1e4 or
        checks.number(who, "final_div_factor", args.final_div_factor)
    local max_lrs = per_group(who, "max_lr", args.max_lr, n)
    self.cycle_momentum = args.cycle_momentum ~= false
    local max_m, base_m
    if self.cycle_momentum then
      local defaults = optimizer.defaults or {}
      if defaults.momentum == nil and defaults.betas == nil then
        fail(string.format("%s: optim.%s has no momentum nor betas to cycle (cycle_momentum = false)", who,
          optimizer.name))
      end
      self.use_beta1 = defaults.betas ~= nil
      max_m = per_group(who, "max_momentum", args.max_momentum == nil and 0.95 or args.max_momentum, n)
      base_m = per_group(who, "base_momentum", args.base_momentum == nil and 0.85 or args.base_momentum, n)
    end
    -- every check passed: the groups get their bounds
    for i, group in ipairs(optimizer.param_groups) do
      group.initial_lr = max_lrs[i] / div
      group.max_lr = max_lrs[i]
      group.min_lr = group.initial_lr / final_div
      if self.cycle_momentum then
        if self.use_beta1 then group.betas = { max_m[i], group.betas[2] } else group.momentum = max_m[i] end
        group.max_momentum, group.base_momentum = max_m[i], base_m[i]
      end
    end
  end,
  get_lr = function(self)
    local step_num = self.last_epoch
    if step_num > self.total_steps then
      options.error(string.format("optim.OneCycleLR: tried to step %d times; the total number of steps is %d",
        step_num + 1, self.total_steps), 3)
    end
    local phases = self._schedule_phases
    return each(self, function(group)
      local start_step, lr, momentum = 0, nil, nil
      for i, phase in ipairs(phases) do
        local end_step = phase.end_step
        if step_num <= end_step or i == #phases then
          local pct = (step_num - start_step) / (end_step - start_step)
          lr = anneal(self.anneal_strategy, group[phase.start_lr], group[phase.end_lr], pct)
          if self.cycle_momentum then
            momentum = anneal(self.anneal_strategy, group[phase.start_momentum], group[phase.end_momentum], pct)
          end
          break
        end
        start_step = phase.end_step
      end
      if self.cycle_momentum then
        if self.use_beta1 then group.betas = { momentum, group.betas[2] } else group.momentum = momentum end
      end
      return lr
    end)
  end,
})

-- ---- SequentialLR --------------------------------------------------------------------------
local Sequential = Scheduler.define("SequentialLR", {
  names = { "schedulers", "milestones" }, accepted = { schedulers = "table", milestones = "table" },
})
schedulers.SequentialLR = Sequential

--- SequentialLR(optimizer, schedulers, milestones) (or {schedulers =, milestones =}): the schedulers
-- one after the other, the next taking over (from its epoch 0) at each milestone epoch; every
-- scheduler acts on optimizer; #milestones = #schedulers - 1
function Sequential.new(cls, optimizer, ...)
  local who = "optim.SequentialLR"
  if not Scheduler.is_optimizer(optimizer) then
    options.error(who .. ": argument 1 expected an optimizer, got " .. type(optimizer), 2)
  end
  local args = Scheduler.parse(who, cls._spec.names, cls._spec.accepted, 2, ...)
  local list, milestones = args.schedulers, args.milestones
  if type(list) ~= "table" or #list == 0 then options.error(who .. ": schedulers expected a list of schedulers", 2) end
  for i, s in ipairs(list) do
    if getmetatable(s) == nil or type(s.step) ~= "function" or s.optimizer == nil then
      options.error(string.format("%s: schedulers[%d] is not a scheduler", who, i), 2)
    end
    if s.optimizer ~= optimizer then
      options.error(string.format("%s: schedulers[%d] acts on another optimizer than the one given", who, i), 2)
    end
    if s._schedulers or s.get_lr == nil then
      options.error(string.format("%s: schedulers[%d] (optim.%s) cannot be sequenced", who, i, s.name), 2)
    end
  end
  if type(milestones) ~= "table" or #milestones ~= #list - 1 then
    options.error(string.format("%s: expected %d milestones (one fewer than the schedulers), got %s", who, #list - 1,
      type(milestones) == "table" and tostring(#milestones) or type(milestones)), 2)
  end
  for i, m in ipairs(milestones) do
    if math.type(m) ~= "integer" or m < 1 or (i > 1 and m <= milestones[i - 1]) then
      options.error(string.format("%s: milestones must be increasing integers >= 1, got %s at %d", who, tostring(m),
        i), 2)
    end
  end
  local self = setmetatable({ optimizer = optimizer, _schedulers = { table.unpack(list) },
    _milestones = { table.unpack(milestones) }, last_epoch = 0 }, cls)
  for _, group in ipairs(optimizer.param_groups) do group.lr = group.initial_lr end
  for _, s in ipairs(self._schedulers) do s.last_epoch = s.last_epoch - 1 end
  self._schedulers[1]:_initial_step()
  self._last_lr = self._schedulers[1]:get_last_lr()
  return self
end

--- step(): the next epoch, by the scheduler whose turn it is (restarted at its milestone)
function Sequential:step()
  self.last_epoch = self.last_epoch + 1
  local idx = 0
  for _, m in ipairs(self._milestones) do if m <= self.last_epoch then idx = idx + 1 end end
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then s:step(0) else s:step() end
  self._last_lr = s:get_last_lr()
end

Sequential._not_state = { _schedulers = true }

--- state_dict(): its own epoch and lrs, and each scheduler's state dict
function Sequential:state_dict()
  local sd = Scheduler.state_dict(self)
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end

function Sequential:_load(sd)
  if type(sd._schedulers) ~= "table" or #sd._schedulers ~= #self._schedulers then
    options.error("optim.SequentialLR:load_state_dict: the state dict has another number of schedulers", 3)
  end
  for k, v in pairs(sd) do if k ~= "_schedulers" then self[k] = copy(v) end end
  for i, s in ipairs(self._schedulers) do s:load_state_dict(sd._schedulers[i]) end
end

return schedulers
