-- tl.optim.ReduceLROnPlateau (torch 1.13's): lowers the lr when a metric stops improving.
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")
local Scheduler = require("tlua.optim.scheduler")

local Plateau = class("optim.ReduceLROnPlateau")
Plateau.name = "ReduceLROnPlateau"

local ACCEPTED = { mode = "string", factor = "number", patience = "integer", threshold = "number",
  threshold_mode = "string", cooldown = "integer", min_lr = "number|table", eps = "number" }

--- ReduceLROnPlateau(optimizer, {mode = "min", factor = 0.1, patience = 10, threshold = 1e-4,
-- threshold_mode = "rel", cooldown = 0, min_lr = 0, eps = 1e-8}): step(metric) once per epoch;
-- after more than patience epochs without improvement (in "min" mode a metric below
-- best (1 - threshold) ("rel") or best - threshold ("abs"); "max" the other way) each group's lr
-- becomes max(lr * factor, min_lr) (unless that changes it by eps or less), then cooldown epochs
-- pass before counting again. min_lr: a number or one per group.
function Plateau.new(cls, optimizer, opts)
  local who = "optim.ReduceLROnPlateau"
  if not Scheduler.is_optimizer(optimizer) then
    options.error(who .. ": argument 1 expected an optimizer, got " .. type(optimizer), 2)
  end
  opts = options.check(opts, who, ACCEPTED, 2)
  local function bad(message) options.error(who .. ": " .. message, 3) end
  local self = setmetatable({ factor = 0.1, patience = 10, threshold = 1e-4, threshold_mode = "rel", cooldown = 0,
    mode = "min", eps = 1e-8 }, cls)
  for k, v in pairs(opts) do if k ~= "min_lr" then self[k] = v end end
  if not (self.factor < 1 and self.factor >= 0) then bad("factor must be in [0, 1), got " .. self.factor) end
  if self.mode ~= "min" and self.mode ~= "max" then
    bad("mode must be \"min\" or \"max\", got \"" .. self.mode .. "\"")
  end
  if self.threshold_mode ~= "rel" and self.threshold_mode ~= "abs" then
    bad("threshold_mode must be \"rel\" or \"abs\", got \"" .. self.threshold_mode .. "\"")
  end
  if self.patience < 0 then bad("patience must be >= 0, got " .. self.patience) end
  if self.cooldown < 0 then bad("cooldown must be >= 0, got " .. self.cooldown) end
  local n, min_lr = #optimizer.param_groups, opts.min_lr or 0
  self.min_lrs = {}
  if type(min_lr) == "table" then
    if #min_lr ~= n then bad(string.format("expected %d min_lrs (one per parameter group), got %d", n, #min_lr)) end
    for i = 1, n do
      if type(min_lr[i]) ~= "number" then bad("min_lr[" .. i .. "] expected a number") end
      self.min_lrs[i] = min_lr[i]
    end
  else
    for i = 1, n do self.min_lrs[i] = min_lr end
  end
  self.optimizer = optimizer
  self.mode_worse = self.mode == "min" and math.huge or -math.huge
  self.last_epoch = 0
  self:_reset()
  self._last_lr = {}
  for i, group in ipairs(optimizer.param_groups) do self._last_lr[i] = group.lr end
  return self
end

function Plateau:_reset()
  self.best = self.mode_worse
  self.cooldown_counter = 0
  self.num_bad_epochs = 0
end

-- whether a is an improvement over best
function Plateau:is_better(a, best)
  if self.mode == "min" and self.threshold_mode == "rel" then return a < best * (1 - self.threshold) end
  if self.mode == "min" then return a < best - self.threshold end
  if self.threshold_mode == "rel" then return a > best * (self.threshold + 1) end
  return a > best + self.threshold
end

--- step(metric): metric a number or a one-element tensor (the epoch's validation loss, say)
function Plateau:step(metric, epoch)
  if tl.is_tensor(metric) then
    if metric:numel() ~= 1 then
      options.error("optim.ReduceLROnPlateau:step: metric expected a number or a one-element tensor", 2)
    end
    metric = metric:item()
  end
  if type(metric) ~= "number" then
    options.error("optim.ReduceLROnPlateau:step: metric expected a number, got " .. type(metric), 2)
  end
  self.last_epoch = epoch or self.last_epoch + 1
  if self:is_better(metric, self.best) then
    self.best = metric
    self.num_bad_epochs = 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    for i, group in ipairs(self.optimizer.param_groups) do
      local old = group.lr
      local new = math.max(old * self.factor, self.min_lrs[i])
      if old - new > self.eps then group.lr = new end
    end
    self.cooldown_counter = self.cooldown
    self.num_bad_epochs = 0
  end
  self._last_lr = {}
  for i, group in ipairs(self.optimizer.param_groups) do self._last_lr[i] = group.lr end
end

Plateau.get_last_lr = Scheduler.get_last_lr
Plateau._not_state = {}
--- state_dict() / load_state_dict(sd): its counters (best, num_bad_epochs, cooldown_counter,
-- last_epoch), options and last lrs
Plateau.state_dict = Scheduler.state_dict
Plateau.load_state_dict = Scheduler.load_state_dict
Plateau._load = Scheduler._load

return { ReduceLROnPlateau = Plateau }
