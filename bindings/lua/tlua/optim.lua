-- tl.optim: SGD, Adam, AdamW (one fused C step per parameter: tl._sgd_step, tl._adam_step, with
-- torch.optim's update rules), learning-rate schedulers and clip_grad_norm.
--
--   local opt = tl.optim.Adam(model:parameters(), { lr = 1e-3 })
--   opt:zero_grad(); loss:backward(); opt:step()
--
-- params: an array of tensors, or an array of parameter groups {params = {...}, lr = ...} whose
-- options override the optimizer's. opt.param_groups[i].lr is what schedulers change.
--
-- step() is all or nothing for bad input: every group's options, every parameter with a gradient,
-- its gradient and its state are checked before any parameter or state changes, so an error
-- leaves the parameters, the step counts and the moments as they were.
local tl = require("tlua")

local optim = {}

local is_tensor = tl.is_tensor

-- ---- Optimizer base ------------------------------------------------------------------
local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

local function class(name, defaults, check)
  local cls = setmetatable({}, { __index = Optimizer })
  cls.__index = cls
  cls.__name = "optim." .. name
  cls.name = name
  cls.defaults = defaults
  cls.check = check
  setmetatable(cls, {
    __index = Optimizer,
    __call = function(c, params, opts) return Optimizer.new(c, params, opts) end,
    __tostring = function() return "optim." .. name end,
  })
  return cls
end

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

function Optimizer.new(cls, params, opts)
  local name = cls.name
  if type(params) ~= "table" then
    error(string.format("optim.%s: expected a list of parameters (tensors) or of parameter groups, got %s", name,
      type(params)), 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("optim.%s: expected an options table, got %s", name, type(opts)), 3)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if cls.defaults[k] == nil then
      local known = {}
      for key in pairs(cls.defaults) do known[#known + 1] = key end
      table.sort(known)
      error(string.format("optim.%s: unknown option '%s' (expected %s)", name, tostring(k), table.concat(known, ", ")), 3)
    end
  end
  local self = setmetatable({ param_groups = {}, state = {} }, cls)
  local groups = params
  if #params > 0 and is_tensor(params[1]) then groups = { { params = params } } end
  if #groups == 0 then error(string.format("optim.%s: got an empty parameter list", name), 3) end
  local seen = {}
  for gi, g in ipairs(groups) do
    if type(g) ~= "table" or type(g.params) ~= "table" then
      error(string.format("optim.%s: parameter group %d expected a table {params = {...}, ...}", name, gi), 3)
    end
    local group = {}
    for k, v in pairs(cls.defaults) do group[k] = v end
    for k, v in pairs(opts) do group[k] = v end
    for k, v in pairs(g) do if k ~= "params" then group[k] = v end end
    if type(group.betas) == "table" then group.betas = { group.betas[1], group.betas[2] } end
    group.params = {}
    for pi, p in ipairs(g.params) do
      if not is_tensor(p) then
        error(string.format("optim.%s: parameter %d of group %d expected a tensor, got %s", name, pi, gi, type(p)), 3)
      end
      if seen[p] then
        error(string.format("optim.%s: parameter %d of group %d appears more than once", name, pi, gi), 3)
      end
      if not p.requires_grad then
        error(string.format("optim.%s: parameter %d of group %d does not require grad", name, pi, gi), 3)
      end
      seen[p] = true
      group.params[pi] = p
    end
    if group.lr == nil then error(string.format("optim.%s: lr is required", name), 3) end
    local bad = cls.check(group, name)
    if bad then error(bad, 3) end
    self.param_groups[gi] = group
  end
  return self
end

-- The options checks return an error message, or nil when the group is fine.
local function check_nonnegative(group, key, name)
  local v = group[key]
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    return string.format("optim.%s: %s must be a finite number >= 0, got %s", name, key, tostring(v))
  end
end

-- Checks every group's options, then every parameter that has a gradient with its state, by the
-- checks of the step itself run alone (tl._sgd_step / tl._adam_step with check_only: one C call
-- per parameter, the step's own messages), before step() changes anything; raises the first
-- problem at the caller of step().
function Optimizer:_validate()
  local name = self.name
  for gi, group in ipairs(self.param_groups) do
    local bad = self.check and self.check(group, name)
    if bad then error(string.format("%s (parameter group %d)", bad, gi), 3) end
    for pi, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        local ok, message = pcall(self._check, self, group, p, g, self.state[p])
        if not ok then
          message = tostring(message):gsub("^[^:]*:%d+: ", "") -- the check's position says nothing here
          error(string.format("optim.%s: parameter %d of group %d: %s", name, pi, gi, message), 3)
        end
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
  for _, group in ipairs(self.param_groups) do self:_update(group) end
  return loss
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

--- load_state_dict(sd): hyperparameters and state (tensors copied, cast to each parameter's
-- dtype and device); the groups must have the same sizes
function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    error("load_state_dict: expected {state = ..., param_groups = ...} from Optimizer:state_dict()", 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    error(string.format("load_state_dict: the state dict has %d parameter groups, the optimizer %d",
      #sd.param_groups, #self.param_groups), 2)
  end
  for gi, g in ipairs(sd.param_groups) do
    local n, m = #(g.params or {}), #self.param_groups[gi].params
    if n ~= m then
      error(string.format("load_state_dict: parameter group %d has %d parameters in the state dict, %d in the optimizer",
        gi, n, m), 2)
    end
  end
  local new_state = {}
  for gi, g in ipairs(sd.param_groups) do
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
              error(string.format("load_state_dict: state '%s' of parameter %d has shape [%s], the parameter [%s]",
                k, index, table.concat(v.shape, ", "), table.concat(p.shape, ", ")), 2)
            end
            ps[k] = v:detach():to(p.dtype):to(p.device):clone()
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

-- ---- SGD -------------------------------------------------------------------------------
--- SGD(params, {lr, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false})
optim.SGD = class("SGD", { lr = false, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false },
  function(group, name)
    if group.lr == false then return "optim.SGD: lr is required" end
    local bad = check_nonnegative(group, "lr", name) or check_nonnegative(group, "momentum", name) or
        check_nonnegative(group, "weight_decay", name)
    if bad then return bad end
    local d = group.dampening
    if type(d) ~= "number" or not (d > -math.huge and d < math.huge) then
      return "optim.SGD: dampening must be a finite number, got " .. tostring(d)
    end
    if group.nesterov and (group.momentum <= 0 or group.dampening ~= 0) then
      return "optim.SGD: nesterov momentum requires a momentum > 0 and zero dampening"
    end
  end)

local sgd_step, adam_step, zeros_like = tl._sgd_step, tl._adam_step, tl.zeros_like

-- the step's checks alone (a missing momentum buffer is one the step creates)
function optim.SGD:_check(group, p, g, s)
  sgd_step(p, g, s and s.momentum_buffer, group.lr, group.momentum, group.dampening, group.weight_decay,
    group.nesterov and true or false, false, true)
end

-- (checked by _validate) new state is kept only once its step has run
function optim.SGD:_update(group)
  local lr, momentum, dampening = group.lr, group.momentum, group.dampening
  local weight_decay, nesterov = group.weight_decay, group.nesterov and true or false
  local state = self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      local s, buf, first = state[p], nil, false
      if momentum ~= 0 then
        buf = s and s.momentum_buffer
        if buf == nil then
          buf = zeros_like(p)
          first = true
        end
      end
      sgd_step(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first)
      if first then
        if not s then
          s = {}
          state[p] = s
        end
        s.momentum_buffer = buf
      end
    end
  end
end

-- ---- Adam, AdamW -------------------------------------------------------------------------
local function check_adam(group, name)
  local bad = check_nonnegative(group, "lr", name) or check_nonnegative(group, "eps", name) or
      check_nonnegative(group, "weight_decay", name)
  if bad then return bad end
  local b = group.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or
     not (b[1] >= 0 and b[1] < 1 and b[2] >= 0 and b[2] < 1) then
    return string.format("optim.%s: betas must be {beta1, beta2} with each in [0, 1)", name)
  end
  if group.amsgrad then return string.format("optim.%s: amsgrad is not supported", name) end
end

-- the step's checks alone: the step count (an integer >= 0) here, the tensors by the C step's own
-- checks (missing moments are ones the step creates)
local function adam_check(group, p, g, s, decoupled)
  local step = 0
  if s ~= nil then
    step = type(s.step) == "number" and math.tointeger(s.step)
    if not step or step < 0 then
      error(string.format("its step count must be an integer >= 0, got %s", tostring(s.step)), 0)
    end
  end
  adam_step(p, g, s and s.exp_avg, s and s.exp_avg_sq, step + 1, group.lr, group.betas[1], group.betas[2],
    group.eps, group.weight_decay, decoupled, true)
end

-- (checked by _validate) the step count and new state are kept only once the step has run
local function adam_update(self, group, decoupled)
  local lr, eps, weight_decay = group.lr, group.eps, group.weight_decay
  local beta1, beta2 = group.betas[1], group.betas[2]
  local state = self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      local s = state[p] or { step = 0, exp_avg = zeros_like(p), exp_avg_sq = zeros_like(p) }
      local step = math.tointeger(s.step) + 1
      adam_step(p, g, s.exp_avg, s.exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay, decoupled)
      s.step = step
      state[p] = s
    end
  end
end

--- Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0}): L2 weight
-- decay added to the gradient
optim.Adam = class("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false },
  check_adam)
function optim.Adam:_check(group, p, g, s) adam_check(group, p, g, s, false) end
function optim.Adam:_update(group) adam_update(self, group, false) end

--- AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2}): decoupled
-- weight decay
optim.AdamW = class("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false },
  check_adam)
function optim.AdamW:_check(group, p, g, s) adam_check(group, p, g, s, true) end
function optim.AdamW:_update(group) adam_update(self, group, true) end

-- ---- learning-rate schedulers ---------------------------------------------------------------
-- A scheduler sets group.lr = factor(epoch) applied to each group's initial lr. It starts at
-- epoch 0 (the lrs of epoch 0 are set when it is made); step() moves to the next epoch (call it
-- once per epoch, or once per batch for per-step schedules).
local Scheduler = {}
Scheduler.__index = Scheduler
optim.Scheduler = Scheduler

local function scheduler(name, lr_at)
  local cls = setmetatable({}, { __index = Scheduler })
  cls.__index = cls
  cls.name = name
  cls.lr_at = lr_at
  return cls
end

local function new_scheduler(cls, optimizer, fields)
  if getmetatable(optimizer) == nil or type(optimizer.param_groups) ~= "table" then
    error(string.format("optim.%s: argument 1 expected an optimizer", cls.name), 3)
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

local function positional(opts, ...)
  if type(opts) == "table" then return opts end
  return nil, opts, ...
end

--- StepLR(optimizer, step_size, gamma = 0.1) or StepLR(optimizer, {step_size =, gamma =}):
-- lr = base * gamma ^ floor(epoch / step_size)
optim.StepLR = scheduler("StepLR", function(self, base, epoch)
  return base * self.gamma ^ (epoch // self.step_size)
end)
setmetatable(optim.StepLR, { __index = Scheduler, __call = function(cls, optimizer, ...)
  local opts, step_size, gamma = positional(...)
  if opts then step_size, gamma = opts.step_size, opts.gamma end
  if math.type(step_size) ~= "integer" or step_size < 1 then
    error("optim.StepLR: step_size must be a positive integer, got " .. tostring(step_size), 2)
  end
  return new_scheduler(cls, optimizer, { step_size = step_size, gamma = gamma or 0.1 })
end })

--- LambdaLR(optimizer, fn): lr = base * fn(epoch)
optim.LambdaLR = scheduler("LambdaLR", function(self, base, epoch)
  return base * self.fn(epoch)
end)
setmetatable(optim.LambdaLR, { __index = Scheduler, __call = function(cls, optimizer, fn)
  if type(fn) ~= "function" then error("optim.LambdaLR: argument 2 expected a function of the epoch", 2) end
  return new_scheduler(cls, optimizer, { fn = fn })
end })

--- CosineAnnealingLR(optimizer, T_max, eta_min = 0) or (optimizer, {T_max =, eta_min =}):
-- lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2 (the closed form of PyTorch's)
optim.CosineAnnealingLR = scheduler("CosineAnnealingLR", function(self, base, epoch)
  return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
end)
setmetatable(optim.CosineAnnealingLR, { __index = Scheduler, __call = function(cls, optimizer, ...)
  local opts, T_max, eta_min = positional(...)
  if opts then T_max, eta_min = opts.T_max, opts.eta_min end
  if type(T_max) ~= "number" or T_max <= 0 then
    error("optim.CosineAnnealingLR: T_max must be a number > 0, got " .. tostring(T_max), 2)
  end
  return new_scheduler(cls, optimizer, { T_max = T_max, eta_min = eta_min or 0 })
end })

--- cosine_with_warmup(warmup_steps, total_steps, min_ratio = 0) -> fn(step) for LambdaLR:
-- step / warmup_steps during the warmup, then a cosine from 1 down to min_ratio at total_steps
-- (held there after)
function optim.cosine_with_warmup(warmup_steps, total_steps, min_ratio)
  min_ratio = min_ratio or 0
  return function(step)
    if step < warmup_steps then return step / math.max(1, warmup_steps) end
    local progress = math.min(1, (step - warmup_steps) / math.max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
  end
end

--- WarmupCosineLR(optimizer, {warmup_steps = 0, total_steps, min_ratio = 0}): LambdaLR with
-- cosine_with_warmup (step it once per batch)
function optim.WarmupCosineLR(optimizer, opts)
  if type(opts) ~= "table" or math.type(opts.total_steps) ~= "integer" then
    error("optim.WarmupCosineLR: expected {warmup_steps =, total_steps = (an integer), min_ratio =}", 2)
  end
  local warmup = opts.warmup_steps or 0
  if math.type(warmup) ~= "integer" or warmup < 0 or warmup > opts.total_steps then
    error("optim.WarmupCosineLR: warmup_steps must be an integer in [0, total_steps], got " .. tostring(warmup), 2)
  end
  return optim.LambdaLR(optimizer, optim.cosine_with_warmup(warmup, opts.total_steps, opts.min_ratio))
end

-- ---- gradient clipping -------------------------------------------------------------------------
--- clip_grad_norm(parameters, max_norm, norm_type = 2) -> the total norm (a number) of all the
-- gradients together, as torch.nn.utils.clip_grad_norm_: when it exceeds max_norm, every
-- gradient is scaled in place by max_norm / (total + 1e-6). norm_type: a number >= 1 or math.huge.
function optim.clip_grad_norm(parameters, max_norm, norm_type)
  if is_tensor(parameters) then parameters = { parameters } end
  if type(parameters) ~= "table" then
    error("clip_grad_norm: argument 1 expected a tensor or a list of tensors, got " .. type(parameters), 2)
  end
  if type(max_norm) ~= "number" then
    error("clip_grad_norm: argument 2 (max_norm) expected a number, got " .. type(max_norm), 2)
  end
  norm_type = norm_type or 2
  if type(norm_type) ~= "number" or not (norm_type >= 1) then
    error("clip_grad_norm: norm_type must be a number >= 1 or math.huge, got " .. tostring(norm_type), 2)
  end
  local grads = {}
  for _, p in ipairs(parameters) do
    local g = p.grad
    if g ~= nil then grads[#grads + 1] = g end
  end
  if #grads == 0 then return 0.0 end
  local total
  tl.no_grad(function()
    if norm_type == math.huge then
      total = 0
      for _, g in ipairs(grads) do total = math.max(total, g:abs():max():item()) end
    else
      local acc
      for _, g in ipairs(grads) do
        local s = norm_type == 2 and (g * g):sum() or (g:abs() ^ norm_type):sum()
        s = s:double()
        acc = acc and acc + s or s
      end
      total = acc:item() ^ (1 / norm_type)
    end
    local coef = max_norm / (total + 1e-6)
    if coef < 1 then
      for _, g in ipairs(grads) do g:copy_(g * coef) end
    end
  end)
  return total
end

return optim
