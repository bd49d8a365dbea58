-- What the in-place specs share (spec/inplace_spec.lua, spec/inplace_autograd_spec.lua): dtypes,
-- seeded draws, device moves and the assertions "like the twin" and "fails, x unchanged".
local tl = require("tlua")
local ref = require("helpers.reference")
local assert = require("luassert")

local H = {}

local FLOAT_DTYPES, TOL = ref.FLOAT_DTYPES, ref.ELEMENTWISE_TOL
local NUMERIC_DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64" }
local MiB = 1024 * 1024

local function is_floating(dtype)
  return dtype ~= "int32" and dtype ~= "int64" and dtype ~= "bool"
end

local function is_tensor(v) return type(v) == "userdata" end

local function seed_of(s)
  local h = 7
  for i = 1, #s do h = (h * 31 + s:byte(i)) % 2147483647 end
  return h
end

-- a tensor of shape and dtype: floating values drawn from [lo, hi), integers from [ceil lo, floor hi]
local function draw(rng, shape, dtype, lo, hi)
  if is_floating(dtype) then
    return tl.tensor(ref.random_table(rng, shape, lo, hi), { dtype = dtype })
  end
  return tl.tensor(ref.random_int_table(rng, shape, math.ceil(lo), math.floor(hi)), { dtype = dtype })
end

local function on(t, device)
  if is_tensor(t) and device ~= "cpu" then return t:cuda() end
  return t
end

local function host(t)
  if t.device == "cpu" then return t end
  return t:cpu()
end

-- actual (an in-place result) holds expected's values cast to actual's dtype: exact for integers,
-- within the elementwise tolerance of the dtype for floating ones
local function assert_like(expected, actual, message)
  local dtype = actual.dtype
  expected, actual = host(expected):to(dtype), host(actual)
  if is_floating(dtype) then
    local tol = TOL[dtype]
    assert.tensor_near(expected, actual, tol.rtol, tol.atol, message)
  else
    assert.tensor_equal(expected, actual, message)
  end
end

-- fn must fail with a message containing every string of wants, leaving x's values as they were
local function assert_fails_unchanged(x, fn, wants)
  local before = host(x):clone()
  assert.error_matches(fn, wants)
  assert.tensor_equal(before, host(x))
end

-- broadcast shapes of an operand: one row ([1, ..., n]) or one column ([..., m, 1])
local function row_of(shape)
  local s = { table.unpack(shape) }
  for d = 1, #s - 1 do s[d] = 1 end
  return s
end
local function column_of(shape)
  local s = { table.unpack(shape) }
  s[#s] = 1
  return s
end

-- the pointwise ops of the op table (exp, gelu, ...), each with an in-place form, whose result
-- on a floating x is floating (not the predicates nor the bits: pointwise_spec has those)
-- (pointwise_float_names: those of them whose result on an integer x is floating or refused)
local pointwise_names, pointwise_float_names = {}, {}
local floating_rules = { float = true, float_only = true, int = true }
for _, op in ipairs(tl.ops()) do
  if op.family == "pointwise" and floating_rules[op.dtypes] then pointwise_names[#pointwise_names + 1] = op.name end
  if op.family == "pointwise" and op.dtypes:match("^float") then
    pointwise_float_names[#pointwise_float_names + 1] = op.name
  end
end

H.FLOAT_DTYPES, H.TOL, H.NUMERIC_DTYPES, H.MiB = FLOAT_DTYPES, TOL, NUMERIC_DTYPES, MiB
H.is_floating, H.is_tensor, H.seed_of, H.draw = is_floating, is_tensor, seed_of, draw
H.on, H.host, H.assert_like, H.assert_fails_unchanged = on, host, assert_like, assert_fails_unchanged
H.row_of, H.column_of, H.pointwise_names = row_of, column_of, pointwise_names
H.pointwise_float_names = pointwise_float_names
return H
