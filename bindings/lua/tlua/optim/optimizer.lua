-- tl.optim.Optimizer: the base class of the optimizers: parameter groups, all-or-nothing step(), zero_grad(), state dicts.
--
-- params: an array of tensors, or an array of parameter groups {params = {...}, lr = ...} whose
-- options override the optimizer's. opt.param_groups[i].lr is what schedulers change.
--
-- step() is all or nothing for bad input: every group's options, every parameter with a gradient,
-- its gradient and its state are checked before any parameter or state changes, so an error
-- leaves the parameters, the step counts and the moments as they were. A subclass (made by
-- Optimizer.subclass) gives its defaults and options check, and defines _check(group, p, g, s)
-- (the step's checks alone) and _update(group) (the step).
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")

local replaced = require("tlua.nn.replaced")
local zero = require("tlua.nn.zero")

local is_tensor = tl.is_tensor

local Optimizer = class("optim.Optimizer")

--- Optimizer.subclass(name, defaults, check) -> optim.<name>: defaults holds every option
-- (false where there is no default); check(group, name) returns an error message or nil
function Optimizer.subclass(name, defaults, check)
  local cls = class("optim." .. name, Optimizer)
  cls.name, cls.defaults, cls.check = name, defaults, check
  -- the keys an options table and a parameter group accept (tlua.options; check judges values)
  -- (a group also carries initial_lr once a scheduler has run, and OneCycleLR's max_lr, min_lr,
  -- max_momentum, base_momentum: opt.param_groups pass as groups)
  cls.accepted, cls.group_accepted = {}, { params = "table", initial_lr = "number", max_lr = "number",
    min_lr = "number", max_momentum = "number", base_momentum = "number" }
  for key in pairs(defaults) do cls.accepted[key], cls.group_accepted[key] = "any", "any" end
  return cls
end

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

-- cls(params, opts): errors point at the caller (cls(...) tail-calls new)
function Optimizer.new(cls, params, opts)
  local name = cls.name
  if cls.defaults == nil or name == nil then
    options.error(string.format("%s: the base class of the optimizers is not built directly; use a concrete " ..
      "optimizer (optim.SGD, optim.Adam, ...) or make a class with optim.Optimizer.subclass(name, defaults, check)",
      tostring(rawget(cls, "__name") or "optim.Optimizer")), 2)
  end
  if type(params) ~= "table" then
    options.error(string.format("optim.%s: expected a list of parameters (tensors) or of parameter groups, got %s", name,
      type(params)), 2)
  end
  if require("tlua.nn").is_module(params) then
    local mt = getmetatable(params)
    options.error(string.format("optim.%s: got a module (%s); pass its parameters: optim.%s(model:parameters(), {...})",
      name, tostring(mt and mt.__name or "nn.Module"), name), 2)
  end
  opts = options.check(opts, "optim." .. name, cls.accepted, 2)
  local self = setmetatable({ param_groups = {}, state = {} }, cls)
  local groups = params
  if #params > 0 and is_tensor(params[1]) then groups = { { params = params } } end
  if #groups == 0 then options.error(string.format("optim.%s: got an empty parameter list", name), 2) end
  local seen = {}
  for gi, g in ipairs(groups) do
    if type(g) ~= "table" or type(g.params) ~= "table" then
      options.error(string.format("optim.%s: parameter group %d expected a table {params = {...}, ...}", name, gi), 2)
    end
    options.check(g, string.format("optim.%s: parameter group %d", name, gi), cls.group_accepted, 2)
    local group = {}
    for k, v in pairs(cls.defaults) do group[k] = v end
    for k, v in pairs(opts) do group[k] = v end
    for k, v in pairs(g) do if k ~= "params" then group[k] = v end end
    if type(group.betas) == "table" then group.betas = { group.betas[1], group.betas[2] } end
    group.params = {}
    for pi, p in ipairs(g.params) do
      if not is_tensor(p) then
        options.error(string.format("optim.%s: parameter %d of group %d expected a tensor, got %s", name, pi, gi, type(p)), 2)
      end
      if seen[p] then
        options.error(string.format("optim.%s: parameter %d of group %d appears more than once", name, pi, gi), 2)
      end
      if not p.requires_grad then
        options.error(string.format("optim.%s: parameter %d of group %d does not require grad", name, pi, gi), 2)
      end
      seen[p] = true
      group.params[pi] = p
    end
    if group.lr == nil then options.error(string.format("optim.%s: lr is required", name), 2) end
    local bad = cls.check(group, name)
    if bad then options.error(bad, 2) end
    self.param_groups[gi] = group
  end
  -- the parameters of an nn.DataParallel {shard_optimizer = true}: this rank's shards (ZeRO-1)
  for p in pairs(seen) do
    if zero.owner_of(p) then return zero.shard(self, 2) end
  end
  return self
end

-- Checks every group's options, then every parameter that has a gradient with its state, by the
-- checks of the step itself run alone (tl._sgd_step / tl._adam_step with check_only: one C call
-- per parameter, the step's own messages), before step() changes anything; raises the first
-- problem at the caller of step().
function Optimizer:_validate()
  local name = self.name
  for gi, group in ipairs(self.param_groups) do
    for pi, p in ipairs(group.params) do
      local moved = replaced[p]
      if moved then
        options.error(string.format("optim.%s: parameter %d of group %d was replaced (moved to %s) after the optimizer was "
          .. "built; build the optimizer after model:to(...) and nn.DataParallel(...)", name, pi, gi, moved), 3)
      end
    end
  end
  for gi, group in ipairs(self.param_groups) do
    local bad = self.check and self.check(group, name)
    if bad then options.error(string.format("%s (parameter group %d)", bad, gi), 3) end
    for pi, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        local ok, message = pcall(self._check, self, group, p, g, self.state[p])
        if not ok then
          message = tostring(message):gsub("^[^:]*:%d+: ", "") -- the check's position says nothing here
          options.error(string.format("optim.%s: parameter %d of group %d: %s", name, pi, gi, message), 3)
        end
      end
    end
  end
end

-- Inside a CUDA graph's capture (tl.cuda.graph) a step reads its options as they were then at every
-- replay: an optimizer whose class cannot keep its step counts and lr on the device refuses it.
-- _capturable(group): true where the class's step can be captured (Adam and AdamW fused, SGD).
function Optimizer:_capturable() return false end

function Optimizer:_check_capture()
  for gi, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      if p.grad ~= nil and p.device ~= "cpu" and tl._cuda_is_capturing(p.device) then
        if not self:_capturable(group) then
          options.error(string.format("optim.%s: its step cannot be captured in a CUDA graph (parameter group %d: its step "
            .. "count and options would be frozen at capture); use Adam or AdamW (fused, no amsgrad) or SGD, or "
            .. "step it outside the captured function", self.name, gi), 3)
        end
        break
      end
    end
  end
end

function Optimizer:zero_grad()
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do p.grad = nil end
  end
end

--- step(closure?): one update of every parameter that has a grad; returns closure()'s result.
-- Everything is checked first: on an error nothing has changed.
function Optimizer:step(closure)
  local loss
  if closure then loss = tl.enable_grad(closure) end
  self:_validate()
  self:_check_capture()
  for _, group in ipairs(self.param_groups) do self:_update(group) end
  return loss
end

--- state_bytes() -> the bytes of the state tensors this optimizer keeps (on this rank: a sharded
-- optimizer of nn.DataParallel {shard_optimizer = true} keeps its shard's)
function Optimizer:state_bytes()
  local bytes = 0
  for _, s in pairs(self.state) do
    for _, v in pairs(s) do
      if is_tensor(v) then bytes = bytes + v:numel() * v:element_size() end
    end
  end
  return bytes
end

--- state_dict() -> {state = {[i] = {...}}, param_groups = {{lr =, ..., params = {i, ...}}}}: the
-- parameters numbered from 1 over the groups in order; state tensors are referenced, not copied
function Optimizer:state_dict()
  local state, groups, index = {}, {}, 0
  for gi, group in ipairs(self.param_groups) do
    local g = {}
    for k, v in pairs(group) do
      if k ~= "params" then g[k] = type(v) == "table" and copy(v) or v end
    end
    g.params = {}
    for _, p in ipairs(group.params) do
      index = index + 1
      g.params[#g.params + 1] = index
      if self.state[p] then state[index] = copy(self.state[p]) end
    end
    groups[gi] = g
  end
  return { state = state, param_groups = groups }
end

--- the dtype of state tensor `key` of parameter p in group (load_state_dict casts to it; nil
-- drops the tensor): the parameter's; Adam keeps float32 moments and masters for 16-bit ones
function Optimizer:_state_dtype(_, p)
  return p.dtype
end

--- load_state_dict(sd): hyperparameters and state (tensors copied, cast to the dtype the optimizer
-- keeps them in, on each parameter's device); the groups must have the same sizes
function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    options.error("load_state_dict: expected {state = ..., param_groups = ...} from Optimizer:state_dict()", 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    options.error(string.format("load_state_dict: the state dict has %d parameter groups, the optimizer %d",
      #sd.param_groups, #self.param_groups), 2)
  end
  for gi, g in ipairs(sd.param_groups) do
    local unknown = {}
    for k in pairs(g) do
      if self.group_accepted[k] == nil then unknown[#unknown + 1] = "'" .. tostring(k) .. "'" end
    end
    if #unknown > 0 then
      table.sort(unknown)
      options.error(string.format("load_state_dict: parameter group %d has the options %s, which optim.%s does not take "
        .. "(a state dict of another optimizer?)", gi, table.concat(unknown, ", "), self.name), 2)
    end
    local n, m = #(g.params or {}), #self.param_groups[gi].params
    if n ~= m then
      options.error(string.format("load_state_dict: parameter group %d has %d parameters in the state dict, %d in the optimizer",
        gi, n, m), 2)
    end
  end
  local new_state = {}
  for gi, g in ipairs(sd.param_groups) do
    local group = copy(self.param_groups[gi]) -- the group's options as they will be once loaded
    for k, v in pairs(g) do if k ~= "params" then group[k] = v end end
    local bad = self.check(group, self.name)
    if bad then options.error(string.format("load_state_dict: %s (parameter group %d)", bad, gi), 2) end
    for pi, index in ipairs(g.params) do
      local p = self.param_groups[gi].params[pi]
      local s = sd.state[index]
      if s then
        local ps = {}
        for k, v in pairs(s) do
          if is_tensor(v) then
            local ok = #v.shape == #p.shape
            for d = 1, #p.shape do ok = ok and v.shape[d] == p.shape[d] end
            if not ok then
              options.error(string.format("load_state_dict: state '%s' of parameter %d has shape [%s], the parameter [%s]",
                k, index, table.concat(v.shape, ", "), table.concat(p.shape, ", ")), 2)
            end
            local dtype = self:_state_dtype(group, p, k)
            if dtype then ps[k] = v:detach():to(dtype):to(p.device):clone() end
          else
            ps[k] = v
          end
        end
        new_state[p] = ps
      end
    end
  end
  for gi, g in ipairs(sd.param_groups) do
    local group = self.param_groups[gi]
    for k, v in pairs(g) do
      if k ~= "params" then group[k] = type(v) == "table" and copy(v) or v end
    end
  end
  self.state = new_state
end

return Optimizer
