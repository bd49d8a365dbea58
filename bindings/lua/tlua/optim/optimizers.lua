-- tl.optim SGD, Adam, AdamW (torch.optim's rules): a fused C step per SGD parameter, one for all of an Adam group.
local tl = require("tlua")
local Optimizer = require("tlua.optim.optimizer")
local composed = require("tlua.optim.composed")

local optimizers = {}

-- the error of a replay after load_state_dict: a captured step reads the state tensors of capture time
local function replaced_state(name)
  return string.format("optim.%s: the optimizer's state was replaced (load_state_dict) after its step was captured "
    .. "in a CUDA graph, whose replays read the old state: capture the step again (the graph's reset())", name)
end

-- The options checks return an error message, or nil when the group is fine.
local check_nonnegative, check_boolean = composed.nonnegative, composed.boolean

-- ---- SGD -------------------------------------------------------------------------------
--- SGD(params, {lr, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false}):
-- torch.optim.SGD's rule (maximize: the gradient negated); state per parameter: momentum_buffer
optimizers.SGD = Optimizer.subclass("SGD",
  { lr = false, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false },
  function(group, name)
    if group.lr == false then return "optim.SGD: lr is required" end
    local bad = check_nonnegative(group, "lr", name) or check_nonnegative(group, "momentum", name) or
        check_nonnegative(group, "weight_decay", name) or check_boolean(group, "maximize", name)
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

-- SGD reads no step count: a captured step replays with the options of capture, which must not
-- change, and the momentum buffers an eager step made
function optimizers.SGD:_capturable() return true end

local function sgd_options(group)
  return string.format("lr %s, momentum %s, dampening %s, weight_decay %s, nesterov %s, maximize %s",
    tostring(group.lr), tostring(group.momentum), tostring(group.dampening), tostring(group.weight_decay),
    tostring(group.nesterov), tostring(group.maximize))
end

local function sgd_capture(self, group)
  for _, p in ipairs(group.params) do
    if p.grad ~= nil and group.momentum ~= 0 and not (self.state[p] and self.state[p].momentum_buffer) then
      error("optim.SGD: a parameter without a momentum buffer cannot be captured in a CUDA graph (its new buffer "
        .. "would be made again at every replay): run one step eagerly first (tl.cuda.graph's warmup)", 0)
    end
  end
  local captured, state = sgd_options(group), self.state
  tl.cuda.on_replay(function()
    if self.state ~= state then error(replaced_state("SGD"), 0) end
    local now = sgd_options(group)
    if now ~= captured then
      error(string.format("optim.SGD: the options of a step captured in a CUDA graph changed (captured with %s, now "
        .. "%s); a captured SGD step replays with them", captured, now), 0)
    end
  end)
end

-- (checked by _validate) new state is kept only once its step has run
function optimizers.SGD:_update(group)
  local first_param = group.params[1]
  if first_param and first_param.device ~= "cpu" and tl._cuda_is_capturing(first_param.device) then
    sgd_capture(self, group)
  end
  local lr, momentum, dampening = group.lr, group.momentum, group.dampening
  local weight_decay, nesterov = group.weight_decay, group.nesterov and true or false
  local state = self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      if group.maximize then g = -g:detach() end
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
      check_nonnegative(group, "weight_decay", name) or composed.betas(group, name)
  if bad then return bad end
  for _, key in ipairs({ "fused", "master_weights", "amsgrad", "maximize" }) do
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

-- state tensor s[key] suits parameter p: its shape, dtype and device, contiguous
local check_state = composed.check_state

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

local function adam_check_all(group, p, g, s, decoupled)
  adam_check(group, p, g, s, decoupled)
  if s ~= nil and s.max_exp_avg_sq ~= nil then
    local _, moments = adam_layout(group, p)
    check_state(s, "max_exp_avg_sq", p, moments)
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
  -- amsgrad's running maximum of exp_avg_sq (kept while amsgrad is off)
  out.max_exp_avg_sq = s and s.max_exp_avg_sq or (group.amsgrad and zeros() or nil)
  return out
end

-- amsgrad (not in the fused C steps): torch.optim.Adam's single-tensor step composed of tensor ops
-- on the master (or p), in the moments' dtype; g already negated by maximize
local function adam_composed_step(group, p, g, new, decoupled)
  local lr, weight_decay, beta1, beta2 = group.lr, group.weight_decay, group.betas[1], group.betas[2]
  local work_dtype = new.exp_avg.dtype
  local target = new.master or p
  local x = target.dtype == work_dtype and target or target:to(work_dtype)
  if g.dtype ~= work_dtype then g = g:to(work_dtype) end
  if decoupled then
    x:mul_(1 - lr * weight_decay)
  elseif weight_decay ~= 0 then
    g = g + x * weight_decay
  end
  new.exp_avg:mul_(beta1):add_(g * (1 - beta1))
  composed.addcmul_(new.exp_avg_sq:mul_(beta2), g, g, 1 - beta2)
  local step = new.step
  local bias_correction1, bias_correction2 = 1 - beta1 ^ step, 1 - beta2 ^ step
  new.max_exp_avg_sq:maximum_(new.exp_avg_sq)
  local denom = (new.max_exp_avg_sq:sqrt() / math.sqrt(bias_correction2)):add_(group.eps)
  composed.addcdiv_(x, new.exp_avg, denom, -(lr / bias_correction1))
  if x ~= target then target:copy_(x) end
  if new.master then p:copy_(new.master) end
end

local function keep(state, p, s, new)
  s = s or {}
  for k in pairs(s) do if new[k] == nil then s[k] = nil end end
  for k, v in pairs(new) do s[k] = v end
  state[p] = s
end

local adam_step_multi, no_grad = tl._adam_step_multi, tl.no_grad
local is_capturing = tl._cuda_is_capturing

-- The device tensor {lr, step} of a group's parameters on a GPU, which a captured step reads
-- (tl._adam_step_multi's hyper form); made by an eager step, since one made during a capture
-- would be written by every replay.
local function adam_hyper(self, group, device)
  self._hyper = self._hyper or setmetatable({}, { __mode = "k" })
  local per_group = self._hyper[group] or {}
  self._hyper[group] = per_group
  local key = tostring(device)
  if not per_group[key] then per_group[key] = tl.empty({ 2 }, { dtype = "float64", device = device }) end
  return per_group[key]
end

-- the options a captured step reads as they were at capture (all but lr)
local function frozen_options(group)
  return string.format("betas {%s, %s}, eps %s, weight_decay %s, maximize %s", tostring(group.betas[1]),
    tostring(group.betas[2]), tostring(group.eps), tostring(group.weight_decay), tostring(group.maximize))
end

-- A fused step inside a CUDA graph's capture: every parameter must have its state already (new
-- state would be made again at every replay); the lr and step counts go to the device before each
-- replay (tl.cuda.on_replay), where the kernel reads them, and the step counts move on then.
local function adam_capture(self, group, b, decoupled, name)
  local state, device = self.state, b.params[1].device
  for i, p in ipairs(b.params) do
    if state[p] == nil or (b.masters[i] and state[p].master == nil) then
      error(string.format("optim.%s: a parameter without optimizer state cannot be captured in a CUDA graph (its new "
        .. "state would be made again at every replay): run one step eagerly first (tl.cuda.graph's warmup)", name), 0)
    end
  end
  local hyper = self._hyper and self._hyper[group] and self._hyper[group][tostring(device)]
  if not hyper then
    error(string.format("optim.%s: run one step eagerly before capturing a step in a CUDA graph "
      .. "(tl.cuda.graph's warmup)", name), 0)
  end
  adam_step_multi(b.params, b.grads, b.m, b.v, b.masters, hyper, group.betas[1], group.betas[2], group.eps,
    group.weight_decay, nil, decoupled)
  local params, captured = b.params, frozen_options(group)
  tl.cuda.on_replay(function()
    if self.state ~= state then error(replaced_state(name), 0) end
    local now = frozen_options(group)
    if now ~= captured then
      error(string.format("optim.%s: the options of a step captured in a CUDA graph changed (captured with %s, "
        .. "now %s); only lr may change between replays", name, captured, now), 0)
    end
    local step = state[params[1]].step + 1
    hyper:copy_(tl.tensor({ group.lr, step }, { dtype = "float64", device = hyper.device }))
    for _, p in ipairs(params) do state[p].step = step end
  end)
end

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
      if group.maximize then g = -g:detach() end
      b.params[i], b.grads[i], b.m[i], b.v[i] = p, g, new.exp_avg, new.exp_avg_sq
      b.masters[i] = new.master or false
      b.states[i] = new
    end
  end
  for _, b in ipairs(order) do
    local device = b.params[1].device
    local on_gpu = device ~= "cpu"
    if on_gpu and is_capturing(device) then
      adam_capture(self, group, b, decoupled, self.name)
      goto next_bucket
    end
    if on_gpu then adam_hyper(self, group, device) end
    adam_step_multi(b.params, b.grads, b.m, b.v, b.masters, group.lr, group.betas[1], group.betas[2], group.eps,
      group.weight_decay, b.step, decoupled)
    for i, p in ipairs(b.params) do
      b.states[i].step = b.step
      keep(state, p, state[p], b.states[i])
    end
    ::next_bucket::
  end
end

-- (checked by _validate) the step count and new state are kept only once the step has run
local function adam_update(self, group, decoupled)
  if group.fused and not group.amsgrad then return adam_update_fused(self, group, decoupled) end
  local lr, eps, weight_decay = group.lr, group.eps, group.weight_decay
  local beta1, beta2 = group.betas[1], group.betas[2]
  local state = self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      if group.maximize then g = -g:detach() end
      local new = adam_state(group, p, state[p])
      local step = new.step + 1
      if group.amsgrad then
        new.step = step
        no_grad(adam_composed_step, group, p, g:detach(), new, decoupled)
      elseif new.master then
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
  if key == "exp_avg" or key == "exp_avg_sq" or key == "max_exp_avg_sq" then return moments end
  return p.dtype
end

local ADAM_DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, amsgrad = false, maximize = false,
  fused = true, master_weights = true }
local function adam_defaults(weight_decay)
  local d = { weight_decay = weight_decay }
  for k, v in pairs(ADAM_DEFAULTS) do d[k] = v end
  return d
end

--- Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, amsgrad = false,
-- maximize = false, fused = true, master_weights = true}): L2 weight decay added to the gradient;
-- amsgrad divides by the running maximum of exp_avg_sq (state max_exp_avg_sq; a step composed of
-- tensor ops, not fused); maximize negates the gradient. State per parameter: step, exp_avg,
-- exp_avg_sq, max_exp_avg_sq (amsgrad), master (16-bit parameters with master_weights)
-- the fused step keeps lr and the step count on the device (adam_capture); the others cannot
local function adam_capturable(_, group) return group.fused and not group.amsgrad end

optimizers.Adam = Optimizer.subclass("Adam", adam_defaults(0), check_adam)
optimizers.Adam._capturable = adam_capturable
function optimizers.Adam:_check(group, p, g, s) adam_check_all(group, p, g, s, false) end
function optimizers.Adam:_update(group) adam_update(self, group, false) end
optimizers.Adam._state_dtype = adam_state_dtype

--- AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
-- maximize = false, fused = true, master_weights = true}): Adam with decoupled weight decay
optimizers.AdamW = Optimizer.subclass("AdamW", adam_defaults(1e-2), check_adam)
optimizers.AdamW._capturable = adam_capturable
function optimizers.AdamW:_check(group, p, g, s) adam_check_all(group, p, g, s, true) end
function optimizers.AdamW:_update(group) adam_update(self, group, true) end
optimizers.AdamW._state_dtype = adam_state_dtype

return optimizers
