-- tl.optim.Scheduler: the base class of the learning-rate schedulers (torch's _LRScheduler): stepping, get_last_lr, state dicts, argument parsing.
--
-- A scheduler class is made by Scheduler.define(name, spec):
--   spec.names    the arguments after the optimizer that may come positionally, in order
--   spec.accepted {key = kind} of tlua.options: the keys of the options table (positional ones too)
--   spec.configure(self, args, optimizer): checks the arguments (raising with options.error at
--                 level 3) and sets the scheduler's fields; nothing may change the optimizer
--                 before every check has passed
--   spec.get_lr(self) -> {lr of each group}: torch's chainable (recursive) form, from group.lr
--   spec.closed_form(self) -> {lr of each group} (optional): the closed form step(epoch) uses
-- Arguments: Name(optimizer, a, b, {c = ...}) (positional ones, then an options table) or
-- Name(optimizer, {a = ..., b = ..., c = ...}); a plain table is the options table when it is the
-- last argument and has a string key (or its position does not take a table).
local class = require("tlua.class")
local options = require("tlua.options")
local Optimizer = require("tlua.optim.optimizer")

local Scheduler = class("optim.Scheduler")

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end
Scheduler._copy = copy

--- Scheduler.is_optimizer(v): whether v is an optimizer (an instance of a subclass of optim.Optimizer)
function Scheduler.is_optimizer(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  while type(mt) == "table" do
    if mt == Optimizer then return true end
    local parent = getmetatable(mt)
    mt = type(parent) == "table" and parent.__index or nil
  end
  return false
end

local function has_string_key(t)
  for k in pairs(t) do if type(k) == "string" then return true end end
  return false
end

--- Scheduler.parse(who, names, accepted, level, ...) -> args: the positional arguments named by
-- names, then an optional options table, merged into one table checked by tlua.options (level as
-- options.check counts it from the caller of parse)
function Scheduler.parse(who, names, accepted, level, ...)
  local n = select("#", ...)
  local args, given = {}, {}
  for i = 1, n do
    local v = select(i, ...)
    local name = names[i]
    local kind = name and accepted[name] or ""
    if i == n and type(v) == "table" and getmetatable(v) == nil and
       (has_string_key(v) or not (kind:find("table", 1, true) or kind == "any")) then
      options.check(v, who, accepted, level + 1)
      for k, x in pairs(v) do
        if given[k] then options.error(string.format("%s: %s given twice (positionally and as an option)", who, k),
            level + 1) end
        args[k] = x
      end
    elseif name == nil then
      options.error(string.format("%s: too many arguments (%d after the optimizer; the last may be an options " ..
        "table)", who, n), level + 1)
    elseif v ~= nil then
      args[name], given[name] = v, true
    end
  end
  options.check(args, who, accepted, level + 1)
  return args
end

--- Scheduler.define(name, spec) -> optim.<name> (see the top of this file)
function Scheduler.define(name, spec)
  local cls = class("optim." .. name, Scheduler)
  cls.name, cls._spec = name, spec
  cls.get_lr, cls._closed_form = spec.get_lr, spec.closed_form
  return cls
end

-- cls(optimizer, ...): errors point at the caller (cls(...) tail-calls new)
function Scheduler.new(cls, optimizer, ...)
  if cls._spec == nil or cls.name == nil then
    options.error(string.format("%s: the base class of the schedulers is not built directly; use a concrete " ..
      "scheduler (optim.StepLR, optim.CosineAnnealingLR, ...) or make a class with optim.Scheduler.define(name, spec)",
      tostring(rawget(cls, "__name") or "optim.Scheduler")), 2)
  end
  if not Scheduler.is_optimizer(optimizer) then
    options.error(string.format("optim.%s: argument 1 expected an optimizer, got %s", cls.name,
      type(optimizer) == "table" and "a table that is not one" or type(optimizer)), 2)
  end
  local spec = cls._spec
  local args = Scheduler.parse("optim." .. cls.name, spec.names, spec.accepted, 2, ...)
  local self = setmetatable({}, cls)
  spec.configure(self, args, optimizer)
  self.optimizer = optimizer
  self:_init_base()
  self:_initial_step()
  return self
end

-- torch's _LRScheduler.__init__ with last_epoch = -1: each group's initial_lr (kept when a
-- scheduler set it before), the base lrs
function Scheduler:_init_base()
  self.base_lrs = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    if group.initial_lr == nil then group.initial_lr = group.lr end
    self.base_lrs[i] = group.initial_lr
  end
  self.last_epoch = -1
end

function Scheduler:_initial_step()
  self._step_count = 0
  self:step()
end

-- sets each group's lr to values[i]
function Scheduler:_set(values)
  self._last_lr = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    group.lr = values[i]
    self._last_lr[i] = values[i]
  end
end

--- step(epoch?): advances one epoch (or, deprecated as in torch, jumps to epoch by the closed form
-- where there is one) and sets each group's lr
function Scheduler:step(epoch)
  if epoch ~= nil and type(epoch) ~= "number" then
    options.error(string.format("optim.%s:step: epoch expected a number, got %s", self.name, type(epoch)), 2)
  end
  local last_epoch, step_count = self.last_epoch, self._step_count
  self._step_count = step_count + 1
  self.last_epoch = epoch == nil and last_epoch + 1 or epoch
  local ok, values = pcall(function()
    if epoch ~= nil and self._closed_form then return self:_closed_form() end
    return self:get_lr()
  end)
  if not ok then -- (OneCycleLR past its end) nothing changed
    self.last_epoch, self._step_count = last_epoch, step_count
    error(values, 0)
  end
  self:_set(values)
end

--- get_last_lr() -> the lr of each group, as last set
function Scheduler:get_last_lr()
  return { table.unpack(self._last_lr) }
end

-- fields that are not state (functions and the optimizer are never state)
Scheduler._not_state = {}

--- state_dict() -> a table of the scheduler's numbers, strings and tables (copied): everything but
-- the optimizer and functions (LambdaLR's lr_lambdas are not saved, as torch's plain functions)
function Scheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" and type(v) ~= "function" and not self._not_state[k] then sd[k] = copy(v) end
  end
  return sd
end

--- load_state_dict(sd): restores what state_dict() gave (the same scheduler class, the same number
-- of parameter groups) and sets each group's lr to the scheduler's last one
function Scheduler:load_state_dict(sd)
  local who = string.format("optim.%s:load_state_dict", self.name)
  if type(sd) ~= "table" or sd.last_epoch == nil then
    options.error(who .. ": expected a table from a scheduler's state_dict()", 2)
  end
  local mine = self:state_dict()
  local unknown = {}
  for k in pairs(sd) do
    if mine[k] == nil then unknown[#unknown + 1] = "'" .. tostring(k) .. "'" end
  end
  if #unknown > 0 then
    table.sort(unknown)
    options.error(string.format("%s: unknown entries %s (a state dict of another scheduler?)", who,
      table.concat(unknown, ", ")), 2)
  end
  if type(sd._last_lr) == "table" and #sd._last_lr ~= #self.optimizer.param_groups then
    options.error(string.format("%s: the state dict has %d parameter groups, the optimizer %d", who, #sd._last_lr,
      #self.optimizer.param_groups), 2)
  end
  self:_load(sd)
  if self._last_lr then
    for i, group in ipairs(self.optimizer.param_groups) do group.lr = self._last_lr[i] end
  end
end

-- (checked) copies the entries of sd in
function Scheduler:_load(sd)
  for k, v in pairs(sd) do self[k] = copy(v) end
end

--- Scheduler.each(self, fn) -> {fn(group, base_lr, i) for each group}
function Scheduler.each(self, fn)
  local out = {}
  for i, group in ipairs(self.optimizer.param_groups) do out[i] = fn(group, self.base_lrs and self.base_lrs[i], i) end
  return out
end

return Scheduler
