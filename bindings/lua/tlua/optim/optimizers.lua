-- tl.optim SGD, Adam, AdamW (torch.optim's rules): a fused C step per SGD parameter, one for all of an Adam group.
local tl = require("tlua")
local Optimizer = require("tlua.optim.optimizer")

local optimizers = {}

-- The options checks return an error message, or nil when the group is fine.
local function check_nonnegative(group, key, name)
  local v = group[key]
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    return string.format("optim.%s: %s must be a finite number >= 0, got %s", name, key, tostring(v))
  end
end

-- ---- SGD -------------------------------------------------------------------------------
--- SGD(params, {lr, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false})
optimizers.SGD = Optimizer.subclass("SGD", { lr = false, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false },
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
function optimizers.SGD:_check(group, p, g, s)
  sgd_step(p, g, s and s.momentum_buffer, group.lr, group.momentum, group.dampening, group.weight_decay,
    group.nesterov and true or false, false, true)
end

-- (checked by _validate) new state is kept only once its step has run
function optimizers.SGD:_update(group)
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
-- fused (default): one tl._adam_step_multi call (one kernel) per (device, step count) of a group's
-- parameters that have grads; moments float32 for bfloat16/float16 parameters. master_weights
-- (default): a bfloat16/float16 parameter keeps a float32 master copy (state.master, made from the
-- parameter at its first step) on which the step runs, the parameter being the master rounded;
-- without it, fused still computes in float32 from the parameter's value. fused = false: one
-- tl._adam_step per parameter (on the master when there is one), moments in the parameter's dtype
-- when there is no master.
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
  for _, key in ipairs({ "fused", "master_weights" }) do
    if type(group[key]) ~= "boolean" then
      return string.format("optim.%s: %s must be true or false, got %s", name, key, tostring(group[key]))
    end
  end
end

local HALF = { bfloat16 = true, float16 = true }

-- whether p keeps a float32 master copy, and the dtype of its moments
local function adam_layout(group, p)
  local master = group.master_weights and HALF[p.dtype] or false
  local moments = p.dtype
  if HALF[p.dtype] and (master or group.fused) then moments = "float32" end
  return master, moments
end

local function shape_str(t) return "[" .. table.concat(t.shape, ", ") .. "]" end

-- state tensor s[key] suits parameter p: its shape, dtype and device, contiguous
local function check_state(s, key, p, dtype)
  local t = s[key]
  if not tl.is_tensor(t) then error(string.format("%s expected a tensor, got %s", key, type(t)), 0) end
  if shape_str(t) ~= shape_str(p) then
    error(string.format("%s has shape %s but the parameter has %s", key, shape_str(t), shape_str(p)), 0)
  end
  if t.dtype ~= dtype then error(string.format("%s is %s but must be %s", key, t.dtype, dtype), 0) end
  if tostring(t.device) ~= tostring(p.device) then
    error(string.format("%s is on %s but the parameter is on %s", key, tostring(t.device), tostring(p.device)), 0)
  end
  if not t:is_contiguous() then error(string.format("%s must be contiguous (it is updated in place)", key), 0) end
end

-- the step's checks alone: the step count (an integer >= 0) here, the tensors by the C step's own
-- checks (missing moments are ones the step creates), the state of the fused and master paths here
local function adam_check(group, p, g, s, decoupled)
  local step = 0
  if s ~= nil then
    step = type(s.step) == "number" and math.tointeger(s.step)
    if not step or step < 0 then
      error(string.format("its step count must be an integer >= 0, got %s", tostring(s.step)), 0)
    end
  end
  local master, moments = adam_layout(group, p)
  if not group.fused and not master then
    adam_step(p, g, s and s.exp_avg, s and s.exp_avg_sq, step + 1, group.lr, group.betas[1], group.betas[2],
      group.eps, group.weight_decay, decoupled, true)
    return
  end
  adam_step(p, g, nil, nil, step + 1, group.lr, group.betas[1], group.betas[2], group.eps, group.weight_decay,
    decoupled, true)
  if s ~= nil then
    check_state(s, "exp_avg", p, moments)
    check_state(s, "exp_avg_sq", p, moments)
    if master and s.master ~= nil then check_state(s, "master", p, "float32") end
  end
end

-- p's state as the step will use it (new tensors where it has none yet), not yet kept
local function adam_state(group, p, s)
  local master, moments = adam_layout(group, p)
  local out = { step = s and math.tointeger(s.step) or 0 }
  local function zeros() return zeros_like(p, { dtype = moments }) end
  out.exp_avg = s and s.exp_avg or zeros()
  out.exp_avg_sq = s and s.exp_avg_sq or zeros()
  if master then out.master = s and s.master or p:detach():to("float32") end
  return out
end

local function keep(state, p, s, new)
  s = s or {}
  for k in pairs(s) do if new[k] == nil then s[k] = nil end end
  for k, v in pairs(new) do s[k] = v end
  state[p] = s
end

local adam_step_multi, no_grad = tl._adam_step_multi, tl.no_grad

-- (checked by _validate) one call per (device, step count); the step counts and new state are
-- kept only once the step has run
local function adam_update_fused(self, group, decoupled)
  local state, buckets, order = self.state, {}, {}
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      local new = adam_state(group, p, state[p])
      local key = tostring(p.device) .. "#" .. new.step
      local b = buckets[key]
      if not b then
        b = { step = new.step + 1, params = {}, grads = {}, m = {}, v = {}, masters = {}, states = {} }
        buckets[key] = b
        order[#order + 1] = b
      end
      local i = #b.params + 1
      b.params[i], b.grads[i], b.m[i], b.v[i] = p, g, new.exp_avg, new.exp_avg_sq
      b.masters[i] = new.master or false
      b.states[i] = new
    end
  end
  for _, b in ipairs(order) do
    adam_step_multi(b.params, b.grads, b.m, b.v, b.masters, group.lr, group.betas[1], group.betas[2], group.eps,
      group.weight_decay, b.step, decoupled)
    for i, p in ipairs(b.params) do
      b.states[i].step = b.step
      keep(state, p, state[p], b.states[i])
    end
  end
end

-- (checked by _validate) the step count and new state are kept only once the step has run
local function adam_update(self, group, decoupled)
  if group.fused then return adam_update_fused(self, group, decoupled) end
  local lr, eps, weight_decay = group.lr, group.eps, group.weight_decay
  local beta1, beta2 = group.betas[1], group.betas[2]
  local state = self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      local new = adam_state(group, p, state[p])
      local step = new.step + 1
      if new.master then
        adam_step(new.master, g:detach():to("float32"), new.exp_avg, new.exp_avg_sq, step, lr, beta1, beta2, eps,
          weight_decay, decoupled)
        no_grad(function() p:copy_(new.master) end)
      else
        adam_step(p, g, new.exp_avg, new.exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay, decoupled)
      end
      new.step = step
      keep(state, p, state[p], new)
    end
  end
end

-- the dtype of state tensor key of p (load_state_dict casts to it); nil drops it
local function adam_state_dtype(_, group, p, key)
  local master, moments = adam_layout(group, p)
  if key == "master" then return master and "float32" or nil end
  if key == "exp_avg" or key == "exp_avg_sq" then return moments end
  return p.dtype
end

local ADAM_DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, amsgrad = false, fused = true,
  master_weights = true }
local function adam_defaults(weight_decay)
  local d = { weight_decay = weight_decay }
  for k, v in pairs(ADAM_DEFAULTS) do d[k] = v end
  return d
end

--- Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, fused = true,
-- master_weights = true}): L2 weight decay added to the gradient
optimizers.Adam = Optimizer.subclass("Adam", adam_defaults(0), check_adam)
function optimizers.Adam:_check(group, p, g, s) adam_check(group, p, g, s, false) end
function optimizers.Adam:_update(group) adam_update(self, group, false) end
optimizers.Adam._state_dtype = adam_state_dtype

--- AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2, fused = true,
-- master_weights = true}): decoupled weight decay
optimizers.AdamW = Optimizer.subclass("AdamW", adam_defaults(1e-2), check_adam)
function optimizers.AdamW:_check(group, p, g, s) adam_check(group, p, g, s, true) end
function optimizers.AdamW:_update(group) adam_update(self, group, true) end
optimizers.AdamW._state_dtype = adam_state_dtype

return optimizers
