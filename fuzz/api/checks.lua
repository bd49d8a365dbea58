-- The invariants the API fuzzer checks after each statement: clear errors, a canary, failed in-place ops, .grad.
--
-- Each check returns nil when the invariant holds, or a sentence describing the violation (a finding).
local Checks = {}
Checks.__index = Checks

--- Checks.new(tl, env, {pool =, cap =})
function Checks.new(tl, env, opts)
  return setmetatable({ tl = tl, env = env, pool = opts.pool, cap = opts.cap }, Checks)
end

-- ---- error messages ------------------------------------------------------------------------------
-- text that a message for a Lua user must not hold: C-level leftovers and Lua's own runtime errors,
-- which say that a check is missing somewhere (each pattern with the reason it is a finding)
local BAD_MESSAGES = {
  { "%(null%)", "a NULL string was formatted" },
  { "[Aa]ssert", "a C assertion" },
  { "attempt to ", "a Lua runtime error inside tlua, not an argument check" },
  { "stack overflow", "a stack overflow" },
  { "not enough memory", "Lua ran out of memory (an unbounded allocation in the binding?)" },
  { "unknown error", "the engine set no message" },
  { "error object is not a string", "a non-string error object" },
  { "to '%?'", "an unnamed function's argument error" },
  { "%%[a-z]", "an unexpanded format directive" },
  { "argument %-%d", "a negative stack index instead of the argument's name" },
}

--- the message without "chunk:line: " prefixes
function Checks.strip_position(message)
  local text = message
  repeat
    local before = text
    text = text:gsub("^[^:\n]*:%d+: ", "")
  until text == before
  return text
end

--- checks an error raised by a statement: a string that names something, with no C-level leftovers
function Checks:message(err)
  if type(err) ~= "string" then
    return string.format("the error is a %s, not a message: %s", type(err), tostring(err))
  end
  local text = Checks.strip_position(err)
  if not text:find("%a%a%a") then return "the error message names nothing: " .. string.format("%q", err) end
  for _, bad in ipairs(BAD_MESSAGES) do
    if text:find(bad[1]) then return string.format("bad error message (%s): %s", bad[2], err) end
  end
  return nil
end

-- ---- the canary ----------------------------------------------------------------------------------
local function expect_list(got, want, what)
  if #got ~= #want then error(string.format("%s: %d values, expected %d", what, #got, #want), 0) end
  for i = 1, #want do
    if got[i] ~= want[i] then
      error(string.format("%s: value %d is %s, expected %s", what, i, tostring(got[i]), tostring(want[i])), 0)
    end
  end
end

--- a small computation with exactly known results: the engine still computes after whatever happened
function Checks:canary()
  local tl = self.tl
  if not tl.is_grad_enabled() then return "grad mode is off after the statement (it was on before)" end
  local ok, why = pcall(function()
    local a = tl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
    local b = tl.tensor({ { 5, 6 }, { 7, 8 } }, { dtype = "float64" })
    local c = a:matmul(b):totable()
    expect_list({ c[1][1], c[1][2], c[2][1], c[2][2] }, { 19, 22, 43, 50 }, "float64 matmul")
    expect_list({ (a + b):sum():item() }, { 36 }, "float64 sum")
    expect_list((tl.ones(3) * 2.5):totable(), { 2.5, 2.5, 2.5 }, "float32 mul")
    expect_list(tl.arange(1, 5):totable(), { 1, 2, 3, 4 }, "int64 arange")
    local x = tl.tensor({ 1, 2, 3 }, { dtype = "float64", requires_grad = true })
    local y = (x * x):sum()
    y:backward()
    expect_list(x.grad:totable(), { 2, 4, 6 }, "gradient of sum(x*x)")
  end)
  if not ok then return "the canary computation failed after the statement: " .. tostring(why) end
  if not tl.is_grad_enabled() then return "grad mode is off after the canary" end
  return nil
end

-- ---- snapshots of in-place targets -----------------------------------------------------------------
local function flatten(nested, shape)
  local out = {}
  local function walk(x, depth)
    if depth == #shape then
      out[#out + 1] = x
    else
      for i = 1, shape[depth + 1] do walk(x[i], depth + 1) end
    end
  end
  walk(nested, 0)
  return out
end
Checks.flatten = flatten

--- true when t:totable() makes a bounded number of Lua tables (an empty tensor of shape [2^40, 0] would
-- need 2^40 of them)
function Checks.readable(shape)
  local tables, level = 1, 1
  for d = 1, #shape - 1 do
    level = level * (shape[d] + 0.0)
    tables = tables + level
  end
  return tables <= 1e6
end

--- {shape, dtype, values} of t, or nil when t cannot be read (released, not a tensor, too many tables)
function Checks:snapshot(t)
  local tl = self.tl
  if not tl.is_tensor(t) or tl.is_released(t) or not Checks.readable(t.shape) then return nil end
  local ok, snap = pcall(function()
    local shape = t.shape
    local grad = t.grad
    return { shape = shape, dtype = t.dtype, values = flatten(t:detach():totable(), shape),
      grad = grad and flatten(grad:totable(), grad.shape) or nil }
  end)
  return ok and snap or nil
end

local function same_value(a, b)
  if a ~= a then return b ~= b end
  if a == 0 and b == 0 and math.type(a) == "float" and math.type(b) == "float" then return 1 / a == 1 / b end
  return a == b
end

local function first_difference(a, b)
  if #a ~= #b then return string.format("%d values, then %d", #a, #b) end
  for i = 1, #a do
    if not same_value(a[i], b[i]) then
      return string.format("element %d was %s, is now %s", i, tostring(a[i]), tostring(b[i]))
    end
  end
  return nil
end

--- compares a snapshot taken before a failed statement with the tensor now
function Checks:unchanged(name, before, t)
  if not before then return nil end
  local after = self:snapshot(t)
  if not after then return nil end -- released by the statement: nothing to compare
  if #before.shape ~= #after.shape or first_difference(before.shape, after.shape) then
    return string.format("a failed in-place statement changed the shape of %s: [%s] -> [%s]", name,
      table.concat(before.shape, ", "), table.concat(after.shape, ", "))
  end
  if before.dtype ~= after.dtype then
    return string.format("a failed in-place statement changed the dtype of %s: %s -> %s", name, before.dtype,
      after.dtype)
  end
  local diff = first_difference(before.values, after.values)
  if diff then return string.format("a failed in-place statement changed %s: %s", name, diff) end
  if (before.grad == nil) ~= (after.grad == nil) then
    return string.format("a failed in-place statement %s the .grad of %s", before.grad and "dropped" or "set",
      name)
  end
  diff = before.grad and first_difference(before.grad, after.grad)
  if diff then return string.format("a failed in-place statement changed %s.grad: %s", name, diff) end
  return nil
end

--- snapshots of what a statement changes in place: targets are pool slots (k: V[k]) or modules ("Mk": the
-- parameters and buffers of M[k], by name)
function Checks:snapshot_target(target)
  if type(target) == "number" then return self:snapshot(self.env.V[target]) end
  local m = self.env.M[tonumber(target:match("^M(%d+)$"))]
  if type(m) ~= "table" then return nil end
  local ok, list = pcall(function()
    local out = {}
    for name, t in m:named_parameters() do out[#out + 1] = { name, t, self:snapshot(t) } end
    for name, t in m:named_buffers() do out[#out + 1] = { name, t, self:snapshot(t) } end
    return out
  end)
  return ok and list or nil
end

--- compares a target's snapshot with its state after a failed statement
function Checks:target_unchanged(target, before)
  if type(target) == "number" then return self:unchanged("V[" .. target .. "]", before, self.env.V[target]) end
  local now = self:snapshot_target(target)
  if not before or not now then return nil end
  local name = target:gsub("^M(%d+)$", "M[%1]")
  if #before ~= #now then
    return string.format("a failed statement changed the parameters of %s: %d, then %d", name, #before, #now)
  end
  for i, entry in ipairs(before) do
    local what = name .. "." .. entry[1]
    if now[i][1] ~= entry[1] then
      return string.format("a failed statement renamed a parameter of %s: %s, now %s", name, entry[1], now[i][1])
    end
    if not rawequal(now[i][2], entry[2]) then return "a failed statement replaced the tensor " .. what end
    local finding = self:unchanged(what, entry[3], now[i][2])
    if finding then return finding end
  end
  return nil
end

-- ---- .grad of live tensors ---------------------------------------------------------------------------
local same_shape = require("helpers.reference").same_shape

--- checks t.grad (if any): its shape, dtype and device are t's
function Checks:grad_of(name, t)
  local tl = self.tl
  if not tl.is_tensor(t) or tl.is_released(t) then return nil end
  local ok, g = pcall(function() return t.grad end)
  if not ok then return string.format("reading %s.grad raised: %s", name, tostring(g)) end
  if g == nil then return nil end
  if tl.is_released(g) then return string.format("%s.grad is a released tensor", name) end
  if not same_shape(g.shape, t.shape) then
    return string.format("%s.grad has shape [%s], %s has [%s]", name, table.concat(g.shape, ", "), name,
      table.concat(t.shape, ", "))
  end
  if g.dtype ~= t.dtype then return string.format("%s.grad is %s, %s is %s", name, g.dtype, name, t.dtype) end
  if g.device ~= t.device then return string.format("%s.grad is on %s, %s on %s", name, g.device, name, t.device) end
  return nil
end

--- the tensors whose .grad is checked: the pool, the optimizers' and the modules' parameters
function Checks:live_tensors()
  local env, list = self.env, {}
  for k = 1, self.pool do
    if env.V[k] ~= nil then list[#list + 1] = { "V[" .. k .. "]", env.V[k] } end
  end
  for k = 1, self.pool do
    local o = env.O[k]
    if type(o) == "table" and type(o.param_groups) == "table" then
      for gi, group in ipairs(o.param_groups) do
        for pi, p in ipairs(group.params or {}) do
          list[#list + 1] = { string.format("O[%d].param_groups[%d].params[%d]", k, gi, pi), p }
        end
      end
    end
    local m = env.M[k]
    if type(m) == "table" then
      pcall(function()
        for name, p in m:named_parameters() do list[#list + 1] = { string.format("M[%d].%s", k, name), p } end
      end)
    end
  end
  return list
end

function Checks:grads()
  for _, entry in ipairs(self:live_tensors()) do
    local finding = self:grad_of(entry[1], entry[2])
    if finding then return finding end
  end
  return nil
end

-- ---- tensors of the pool -----------------------------------------------------------------------------------
local DTYPES = { float32 = true, float64 = true, bfloat16 = true, float16 = true, int32 = true, int64 = true,
  bool = true }

--- V[k]'s metadata is sane (sizes >= 0, numel their product and within 2^62 with zeros counted as 1, a known
-- dtype) and, when it is small, two read paths agree: totable() (walks the strides) and contiguous() (copies)
function Checks:tensor_sane(k)
  local tl, t = self.tl, self.env.V[k]
  if not tl.is_tensor(t) or tl.is_released(t) then return nil end
  local name = "V[" .. k .. "]"
  local shape = t.shape
  local product, bound = 1.0, 1.0
  for d, size in ipairs(shape) do
    if math.type(size) ~= "integer" or size < 0 then
      return string.format("%s has size %s at dim %d", name, tostring(size), d)
    end
    product, bound = product * size, bound * math.max(size, 1)
  end
  local shape_text = "[" .. table.concat(shape, ", ") .. "]"
  if bound > 2.0 ^ 62 then return string.format("%s has shape %s: more than 2^62 elements", name, shape_text) end
  if t:numel() + 0.0 ~= product then
    return string.format("%s has shape %s but numel() %d", name, shape_text, t:numel())
  end
  if not DTYPES[t.dtype] then return string.format("%s has dtype %s", name, tostring(t.dtype)) end
  if product > 64 or not Checks.readable(shape) then return nil end
  local ok, direct, copied = pcall(function()
    return flatten(t:detach():totable(), shape), flatten(t:detach():contiguous():totable(), shape)
  end)
  if not ok then return string.format("reading %s (shape %s) raised: %s", name, shape_text, tostring(direct)) end
  local diff = first_difference(direct, copied)
  if diff then
    return string.format("%s (shape %s): totable() and contiguous() disagree: %s", name, shape_text, diff)
  end
  return nil
end

function Checks:tensors()
  for k = 1, self.pool do
    local finding = self:tensor_sane(k)
    if finding then return finding end
  end
  return nil
end

-- ---- the pool --------------------------------------------------------------------------------------
--- keeps the pool to tensors of at most cap elements in slots 1..pool (the same in a replay)
function Checks:prune()
  local tl, env = self.tl, self.env
  for _, name in ipairs { "V", "O", "M" } do
    if type(env[name]) ~= "table" then env[name] = {} end
  end
  local V = env.V
  for k, v in pairs(V) do
    if math.type(k) ~= "integer" or k < 1 or k > self.pool or not tl.is_tensor(v) then V[k] = nil end
  end
  for k = 1, self.pool do
    local v = V[k]
    if v ~= nil and not tl.is_released(v) and v:numel() > self.cap then V[k] = nil end
  end
end

return Checks
