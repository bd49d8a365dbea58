-- tl.optim's shared checks, and the base of the optimizers whose step is composed of tensor ops (RMSprop, Adagrad, Adamax, NAdam, RAdam).
--
-- A composed optimizer is made by composed.subclass(name, defaults, check, spec):
--   spec.tensors(group) -> the keys of the state tensors a step uses (made at the first step by
--     spec.init(group, p, key), zeros of p by default, in p's dtype and on p's device)
--   spec.scalars        -> {key = initial value}: the numbers of the state (step: an integer)
--   spec.step(group, p, g, s): the update, run under tl.no_grad with s.step already counted; it
--     changes p and the tensors of s in place and may set s's numbers
-- Every check runs before anything changes (Optimizer:_validate): the gradient's shape, dtype and
-- device, the state tensors' and the step count. The state is torch.optim's, under its names.
local tl = require("tlua")
local Optimizer = require("tlua.optim.optimizer")

local composed = {}
local is_tensor, no_grad, zeros_like = tl.is_tensor, tl.no_grad, tl.zeros_like

-- ---- checks of options: each returns an error message, or nil when the group is fine --------
--- nonnegative(group, key, name): group[key] is a finite number >= 0
function composed.nonnegative(group, key, name)
  local v = group[key]
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    return string.format("optim.%s: %s must be a finite number >= 0, got %s", name, key, tostring(v))
  end
end

--- boolean(group, key, name): group[key] is true or false
function composed.boolean(group, key, name)
  if type(group[key]) ~= "boolean" then
    return string.format("optim.%s: %s must be true or false, got %s", name, key, tostring(group[key]))
  end
end

--- betas(group, name): group.betas is {beta1, beta2}, each in [0, 1)
function composed.betas(group, name)
  local b = group.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or
     not (b[1] >= 0 and b[1] < 1 and b[2] >= 0 and b[2] < 1) then
    return string.format("optim.%s: betas must be {beta1, beta2} with each in [0, 1), got %s", name,
      type(b) == "table" and string.format("{%s, %s}", tostring(b[1]), tostring(b[2])) or tostring(b))
  end
end

--- all(group, name, check, ...): the first message of check(group, key, name) over the keys
function composed.all(group, name, check, ...)
  for i = 1, select("#", ...) do
    local bad = check(group, select(i, ...), name)
    if bad then return bad end
  end
end

-- ---- checks of a parameter's gradient and state (errors with level 0: _validate places them) ----
local function shape_str(t) return "[" .. table.concat(t.shape, ", ") .. "]" end
composed.shape_str = shape_str

--- check_state(s, key, p, dtype): s[key] is a contiguous tensor of p's shape and device, of dtype
function composed.check_state(s, key, p, dtype)
  local t = s[key]
  if not is_tensor(t) then error(string.format("%s expected a tensor, got %s", key, type(t)), 0) end
  if shape_str(t) ~= shape_str(p) then
    error(string.format("%s has shape %s but the parameter has %s", key, shape_str(t), shape_str(p)), 0)
  end
  if t.dtype ~= dtype then error(string.format("%s is %s but must be %s", key, t.dtype, dtype), 0) end
  if tostring(t.device) ~= tostring(p.device) then
    error(string.format("%s is on %s but the parameter is on %s", key, tostring(t.device), tostring(p.device)), 0)
  end
  if not t:is_contiguous() then error(string.format("%s must be contiguous (it is updated in place)", key), 0) end
end

--- check_grad(p, g): g is a tensor of p's shape, dtype and device
function composed.check_grad(p, g)
  if not is_tensor(g) then error("its grad expected a tensor, got " .. type(g), 0) end
  if shape_str(g) ~= shape_str(p) then
    error(string.format("grad has shape %s but the parameter has %s", shape_str(g), shape_str(p)), 0)
  end
  if g.dtype ~= p.dtype then error(string.format("grad is %s but the parameter is %s", g.dtype, p.dtype), 0) end
  if tostring(g.device) ~= tostring(p.device) then
    error(string.format("grad is on %s but the parameter is on %s", tostring(g.device), tostring(p.device)), 0)
  end
end

--- check_step(s): s.step, when s exists, is an integer >= 0
function composed.check_step(s)
  if s == nil then return end
  local step = type(s.step) == "number" and math.tointeger(s.step)
  if not step or step < 0 then
    error(string.format("its step count must be an integer >= 0, got %s", tostring(s.step)), 0)
  end
end

--- addcdiv_(x, t1, t2, value): x <- x + value * t1 / t2 in place (torch's Tensor.addcdiv_)
function composed.addcdiv_(x, t1, t2, value)
  return x:add_((t1 * value):div_(t2))
end

--- addcmul_(x, t1, t2, value): x <- x + value * t1 * t2 in place (torch's Tensor.addcmul_)
function composed.addcmul_(x, t1, t2, value)
  return x:add_((t1 * value):mul_(t2))
end

-- ---- the composed optimizers -----------------------------------------------------------------
local Composed = {}

-- the step's checks alone: the gradient, the step count, the numbers and the state tensors there are
function Composed:_check(group, p, g, s)
  composed.check_grad(p, g)
  composed.check_step(s)
  if s == nil then return end
  local spec = self._spec
  for key in pairs(spec.scalars) do
    if key ~= "step" and s[key] ~= nil and type(s[key]) ~= "number" then
      error(string.format("%s expected a number, got %s", key, type(s[key])), 0)
    end
  end
  for _, key in ipairs(spec.tensors(group)) do
    if s[key] ~= nil then composed.check_state(s, key, p, p.dtype) end
  end
end

-- (checked by _validate) p's state is made where missing, counted and kept once the step has run
function Composed:_update(group)
  local spec, state = self._spec, self.state
  for _, p in ipairs(group.params) do
    local g = p.grad
    if g ~= nil then
      local old = state[p]
      local s = {}
      if old then for k, v in pairs(old) do s[k] = v end end
      for key, value in pairs(spec.scalars) do if s[key] == nil then s[key] = value end end
      s.step = math.tointeger(s.step) + 1
      for _, key in ipairs(spec.tensors(group)) do
        if s[key] == nil then s[key] = spec.init and spec.init(group, p, key) or zeros_like(p) end
      end
      no_grad(spec.step, group, p, g:detach(), s)
      state[p] = s
    end
  end
end

--- subclass(name, defaults, check, spec) -> optim.<name> (see the top of this file)
function composed.subclass(name, defaults, check, spec)
  local cls = Optimizer.subclass(name, defaults, check)
  cls._spec, cls._check, cls._update = spec, Composed._check, Composed._update
  return cls
end

return composed
