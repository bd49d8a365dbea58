-- tl.optim SGD, Adam, AdamW: one fused C step per parameter (tl._sgd_step, tl._adam_step) with torch.optim's update rules.
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
optimizers.Adam = Optimizer.subclass("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false },
  check_adam)
function optimizers.Adam:_check(group, p, g, s) adam_check(group, p, g, s, false) end
function optimizers.Adam:_update(group) adam_update(self, group, false) end

--- AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2}): decoupled
-- weight decay
optimizers.AdamW = Optimizer.subclass("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false },
  check_adam)
function optimizers.AdamW:_check(group, p, g, s) adam_check(group, p, g, s, true) end
function optimizers.AdamW:_update(group) adam_update(self, group, true) end

return optimizers
