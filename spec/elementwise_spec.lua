-- Elementwise ops against Lua's math on the same numbers: unary ops, binary ops
-- with broadcasting and Lua numbers, comparisons, where, fill_, copy_; dtypes,
-- non-contiguous inputs and type promotion.
local tl = require("tlua")
local ref = require("helpers.reference")

local FLOAT_DTYPES, TOL = ref.FLOAT_DTYPES, ref.ELEMENTWISE_TOL

-- a random tensor of dtype and its stored values (read back, so references use
-- exactly what the kernel saw)
local function random(rng, shape, lo, hi, dtype)
  local t = tl.tensor(ref.random_table(rng, shape, lo, hi), { dtype = dtype or "float32" })
  return t, t:totable()
end

local function near(expected, actual, dtype)
  local tol = TOL[dtype]
  assert.tensor_near(expected, actual, tol.rtol, tol.atol)
end

-- (the pointwise ops, exp, log, ..., are walked by pointwise_spec.lua)
describe("unary ops against Lua math", function()
  local cases = {
    { "neg", function(x) return -x end, -5, 5 },
    { "abs", math.abs, -5, 5 },
    { "relu", function(x) return x > 0 and x or 0.0 end, -5, 5 },
  }
  for _, c in ipairs(cases) do
    local name, fn, lo, hi = c[1], c[2], c[3], c[4]
    for _, dt in ipairs(FLOAT_DTYPES) do
      it(("%s in %s, as tl.%s(t) and t:%s()"):format(name, dt, name, name), function()
        local rng = ref.rng(#name * 31 + #dt)
        local t, vals = random(rng, { 7, 9 }, lo, hi, dt)
        local expected = ref.map(vals, fn)
        local a, b = tl[name](t), t[name](t)
        assert.equal(dt, a.dtype)
        near(expected, a, dt)
        assert.tensor_equal(a, b)
      end)
    end
  end

  it("gelu matches PyTorch golden values (exact erf form, not the tanh approximation)", function()
    -- /usr/bin/python3 -c "import torch; x=torch.tensor([-3.,-1.,-0.5,0.,0.5,1.,2.,3.],
    --   dtype=torch.float64); print(torch.nn.functional.gelu(x).tolist())"  (torch 1.13)
    local x = { -3, -1, -0.5, 0, 0.5, 1, 2, 3 }
    local golden = { -0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
      0.34573123063700656, 0.841344746068543, 1.9544997361036416, 2.99595030590511 }
    assert.tensor_near(golden, tl.tensor(x, { dtype = "float64" }):gelu(), 1e-13, 1e-15)
    assert.tensor_near(golden, tl.tensor(x):gelu(), 1e-6, 1e-7)
    -- the tanh approximation differs at x = 1 by about 1.5e-4: make sure that is caught
    local approx = 0.5 * (1 + ref.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715)))
    assert.is_true(math.abs(approx - golden[6]) > 1e-4)
  end)

  it("neg, abs and relu are exact on int32 and int64", function()
    for _, dt in ipairs({ "int32", "int64" }) do
      local vals = { -7, -1, 0, 1, 5, 2147483647, -2147483647 }
      local t = tl.tensor(vals, { dtype = dt })
      local neg, abs, relu = {}, {}, {}
      for i, v in ipairs(vals) do
        neg[i], abs[i], relu[i] = -v, math.abs(v), math.max(v, 0)
      end
      local n = t:neg()
      assert.equal(dt, n.dtype)
      assert.same(neg, n:totable())
      assert.same(abs, t:abs():totable())
      assert.same(relu, t:relu():totable())
      assert.equal(dt, t:relu().dtype)
    end
  end)

  it("follows IEEE at the edges: log(0) = -Inf, sqrt(-1) = NaN, exp(1000) = Inf", function()
    local t = tl.tensor({ 0, -1, 1000, -1000 }, { dtype = "float64" })
    assert.tensor_near({ -math.huge, 0 / 0, math.log(1000), 0 / 0 }, t:log(), 1e-15, 0)
    assert.tensor_near({ 0, 0 / 0, math.sqrt(1000), 0 / 0 }, t:sqrt(), 1e-15, 0)
    assert.tensor_near({ 1, math.exp(-1), math.huge, 0 }, t:exp(), 1e-15, 0)
    assert.tensor_near({ 0.5, ref.sigmoid(-1), 1, 0 }, tl.tensor({ 0, -1, 1000, -1000 }):sigmoid(), 1e-6, 0)
    assert.tensor_near({ 0, ref.tanh(-1), 1, -1 }, tl.tensor({ 0, -1, 1000, -1000 }):tanh(), 1e-6, 0)
  end)

  it("clamp with both bounds, one bound (nil for the other)", function()
    local rng = ref.rng(3)
    for _, dt in ipairs({ "float32", "float64", "int32", "int64" }) do
      local t, vals
      if dt:sub(1, 3) == "int" then
        t = tl.tensor(ref.random_int_table(rng, { 4, 5 }, -10, 10), { dtype = dt })
      else
        t = random(rng, { 4, 5 }, -3, 3, dt)
      end
      vals = t:totable()
      local lo, hi = -1, 2
      local both = ref.map(vals, function(x) return math.min(math.max(x, lo), hi) end)
      local min_only = ref.map(vals, function(x) return math.max(x, lo) end)
      local max_only = ref.map(vals, function(x) return math.min(x, hi) end)
      assert.tensor_equal(both, t:clamp(lo, hi))
      assert.tensor_equal(min_only, t:clamp(lo))
      assert.tensor_equal(min_only, tl.clamp(t, lo, nil))
      assert.tensor_equal(max_only, t:clamp(nil, hi))
      assert.equal(dt, t:clamp(lo, hi).dtype)
    end
  end)

  it("pow with a number exponent", function()
    local rng = ref.rng(17)
    local t, vals = random(rng, { 3, 4 }, 0.1, 3, "float64")
    for _, e in ipairs({ 2, 3, 0.5, -1, 0, 2.5 }) do
      local expected = ref.map(vals, function(x) return x ^ e end)
      assert.tensor_near(expected, t:pow(e), 1e-12, 1e-14)
      assert.tensor_near(expected, tl.pow(t, e), 1e-12, 1e-14)
      assert.tensor_near(expected, t ^ e, 1e-12, 1e-14)
    end
    local s, svals = random(rng, { 5 }, -2, 2, "float32")
    assert.tensor_near(ref.map(svals, function(x) return x * x end), s:pow(2), 1e-6, 1e-7)
    assert.tensor_near(ref.map(svals, function(x) return x * x * x end), s ^ 3, 1e-6, 1e-7)
  end)

  it("works on non-contiguous inputs (transposed, narrowed, expanded)", function()
    local rng = ref.rng(8)
    local t, vals = random(rng, { 4, 6 }, 0.5, 2)
    local tt = t:transpose(1, 2)
    local expected = ref.build({ 6, 4 }, function(i, j) return math.exp(vals[j][i]) end)
    assert.tensor_near(expected, tt:exp())
    local n = t:narrow(2, 2, 3)
    assert.tensor_near(ref.build({ 4, 3 }, function(i, j) return math.sqrt(vals[i][j + 1]) end), n:sqrt())
    local col = t:narrow(2, 1, 1) -- [4, 1]
    local e = col:expand(4, 5)
    assert.tensor_near(ref.build({ 4, 5 }, function(i) return math.log(vals[i][1]) end), e:log())
  end)
end)

describe("binary ops", function()
  local OPS = {
    add = function(a, b) return a + b end,
    sub = function(a, b) return a - b end,
    mul = function(a, b) return a * b end,
    div = function(a, b) return a / b end,
    pow = function(a, b) return a ^ b end,
  }
  local OPERATOR = {
    add = function(a, b) return a + b end,
    sub = function(a, b) return a - b end,
    mul = function(a, b) return a * b end,
    div = function(a, b) return a / b end,
    pow = function(a, b) return a ^ b end,
  }
  local NAMES = { "add", "sub", "mul", "div", "pow" }

  for _, name in ipairs(NAMES) do
    for _, dt in ipairs({ "float32", "float64" }) do
      it(("%s %s with broadcasting [3,1] x [1,4] and [2,3,4] x [4]"):format(name, dt), function()
        local rng = ref.rng(#name + 100)
        local lo = name == "pow" and 0.2 or -3
        local a, av = random(rng, { 3, 1 }, lo, 3, dt)
        local b, bv = random(rng, { 1, 4 }, 0.5, 2, dt)
        local expected = ref.broadcast_map(OPS[name], av, bv)
        local r = tl[name](a, b)
        assert.same({ 3, 4 }, r.shape)
        assert.equal(dt, r.dtype)
        near(expected, r, dt)
        near(expected, a[name](a, b), dt)
        near(expected, OPERATOR[name](a, b), dt)
        -- and the other way round
        near(ref.broadcast_map(OPS[name], bv, av), tl[name](b, a), dt)

        local c, cv = random(rng, { 2, 3, 4 }, lo, 3, dt)
        local d, dv = random(rng, { 4 }, 0.5, 2, dt)
        local r2 = tl[name](c, d)
        assert.same({ 2, 3, 4 }, r2.shape)
        near(ref.broadcast_map(OPS[name], cv, dv), r2, dt)
        near(ref.broadcast_map(OPS[name], dv, cv), tl[name](d, c), dt)
      end)
    end

    it(("%s with a Lua number on either side (operators and functions)"):format(name), function()
      local rng = ref.rng(#name + 7)
      local t, tv = random(rng, { 2, 5 }, 0.5, 3, "float64")
      for _, s in ipairs({ 2, 0.5, -1.5 }) do
        local right = ref.map(tv, function(x) return OPS[name](x, s) end)
        local left = ref.map(tv, function(x) return OPS[name](s, x) end)
        if not (name == "pow" and s < 0) then
          assert.tensor_near(left, OPERATOR[name](s, t), 1e-12, 1e-14)
          assert.tensor_near(left, tl[name](s, t), 1e-12, 1e-14)
        end
        assert.tensor_near(right, OPERATOR[name](t, s), 1e-12, 1e-14)
        assert.tensor_near(right, tl[name](t, s), 1e-12, 1e-14)
        assert.tensor_near(right, t[name](t, s), 1e-12, 1e-14)
        assert.equal("float64", OPERATOR[name](t, s).dtype)
      end
    end)
  end

  it("unary minus operator", function()
    local t = tl.tensor({ { 1.5, -2 }, { 0, 3 } })
    assert.tensor_equal({ { -1.5, 2 }, { 0, -3 } }, -t)
    assert.same({ -1, 2 }, (-tl.tensor({ 1, -2 })):totable())
  end)

  it("add, sub, mul in bf16 and f16 round the exact result to nearest even", function()
    local rng = ref.rng(55)
    for _, dt in ipairs({ "bfloat16", "float16" }) do
      local round = dt == "bfloat16" and ref.round_bf16 or ref.round_f16
      -- values in [1, 4): sums and products of two such values are exact in
      -- float32, so the kernel's result is one rounding of the exact value
      local a, av = random(rng, { 50 }, 1, 4, dt)
      local b, bv = random(rng, { 50 }, 1, 4, dt)
      assert.tensor_equal(ref.broadcast_map(function(x, y) return round(x + y) end, av, bv), a + b)
      assert.tensor_equal(ref.broadcast_map(function(x, y) return round(x - y) end, av, bv), a - b)
      assert.tensor_equal(ref.broadcast_map(function(x, y) return round(x * y) end, av, bv), a * b)
      assert.equal(dt, (a * b).dtype)
      near(ref.broadcast_map(function(x, y) return x / y end, av, bv), a / b, dt)
    end
  end)

  it("int32 and int64 add, sub, mul are exact (beyond 2^53 too)", function()
    local a = tl.tensor({ 9007199254740993, -5, 123456789 })
    local b = tl.tensor({ 1, 7, 1000 })
    assert.same({ 9007199254740994, 2, 123457789 }, (a + b):totable())
    assert.same({ 9007199254740992, -12, 123455789 }, (a - b):totable())
    assert.same({ 9007199254740993, -35, 123456789000 }, (a * b):totable())
    local c = tl.tensor({ 46340, -3, 7 }, { dtype = "int32" })
    local r = c * c
    assert.equal("int32", r.dtype)
    assert.same({ 2147395600, 9, 49 }, r:totable())
    assert.same({ 46342, -1, 9 }, (c + 2):totable())
  end)

  it("int32 and int64 broadcasting [3,1] x [1,4]: add, sub, mul exact; div in float32", function()
    local rng = ref.rng(77)
    for _, dt in ipairs({ "int32", "int64" }) do
      local av = ref.random_int_table(rng, { 3, 1 }, -50, 50)
      local bv = ref.random_int_table(rng, { 1, 4 }, 1, 9)
      local a, b = tl.tensor(av, { dtype = dt }), tl.tensor(bv, { dtype = dt })
      for _, name in ipairs({ "add", "sub", "mul" }) do
        local r = tl[name](a, b)
        assert.equal(dt, r.dtype)
        assert.same(ref.broadcast_map(OPS[name], av, bv), r:totable())
        assert.same(ref.broadcast_map(OPS[name], bv, av), tl[name](b, a):totable())
      end
      local q = a / b
      assert.equal("float32", q.dtype)
      assert.tensor_near(ref.broadcast_map(OPS.div, av, bv), q, 1e-7, 0)
    end
  end)

  it("broadcasts 0-dim tensors and handles empty tensors", function()
    local s = tl.tensor(2.5)
    local v = tl.tensor({ 1, 2, 3 }, { dtype = "float32" })
    assert.same({ 3 }, (s + v).shape)
    assert.same({ 3.5, 4.5, 5.5 }, (s + v):totable())
    assert.same({ 1.5, 0.5, -0.5 }, (s - v):totable())
    assert.same({}, (s * s).shape)
    assert.equal(6.25, (s * s):item())
    local e = tl.zeros(0) + 1
    assert.same({ 0 }, e.shape)
    assert.same({ 2, 0 }, (tl.zeros(2, 1) * tl.zeros(0)).shape)
    assert.same({ 0, 3 }, tl.zeros(0, 3):exp().shape)
  end)

  it("division by zero gives +-Inf and NaN for floats", function()
    local a = tl.tensor({ 1.0, -1.0, 0.0 })
    local r = a / tl.zeros(3)
    assert.tensor_equal({ math.huge, -math.huge, 0 / 0 }, r)
  end)

  it("broadcasts non-contiguous operands (transposed, expanded)", function()
    local rng = ref.rng(21)
    local a, av = random(rng, { 4, 3 }, -2, 2, "float64")
    local b, bv = random(rng, { 3, 4 }, -2, 2, "float64")
    local at = a:transpose(1, 2) -- [3, 4]
    local expected = ref.build({ 3, 4 }, function(i, j) return av[j][i] * bv[i][j] end)
    assert.tensor_near(expected, at * b, 1e-15, 0)
    assert.tensor_near(expected, b * at, 1e-15, 0)
    local col = tl.tensor({ { 1 }, { 2 }, { 3 } }, { dtype = "float64" }):expand(3, 4)
    assert.tensor_near(ref.build({ 3, 4 }, function(i, j) return i + bv[i][j] end), col + b, 1e-15, 0)
    local row = b:select(1, 2):unsqueeze(1):expand(3, 4) -- row 2 of b, three times
    assert.tensor_near(ref.build({ 3, 4 }, function(i, j) return av[j][i] - bv[2][j] end), at - row, 1e-15, 0)
  end)

  it("pow with a tensor exponent, broadcast", function()
    local base = tl.tensor({ { 2 }, { 3 }, { 0.5 } }, { dtype = "float64" })
    local ex = tl.tensor({ 0, 1, 2, -1, 0.5 }, { dtype = "float64" })
    local expected = ref.broadcast_map(function(x, y) return x ^ y end, { { 2 }, { 3 }, { 0.5 } }, { 0, 1, 2, -1, 0.5 })
    assert.tensor_near(expected, base:pow(ex), 1e-15, 0)
    assert.tensor_near(expected, base ^ ex, 1e-15, 0)
    assert.tensor_near(ref.map({ 0, 1, 2, -1, 0.5 }, function(y) return 2 ^ y end), 2 ^ ex, 1e-15, 0)
  end)
end)

describe("type promotion", function()
  it("int64 + float32 -> float32, int32 + int64 -> int64, float32 + float64 -> float64", function()
    local i64 = tl.tensor({ 1, 2 })
    local i32 = tl.tensor({ 3, 4 }, { dtype = "int32" })
    local f32 = tl.tensor({ 0.5, 0.25 })
    local f64 = tl.tensor({ 0.1, 0.2 }, { dtype = "float64" })
    local r = i64 + f32
    assert.equal("float32", r.dtype)
    assert.same({ 1.5, 2.25 }, r:totable())
    assert.equal("float32", (f32 + i64).dtype)
    assert.equal("float32", (i32 * f32).dtype)
    local s = i32 + i64
    assert.equal("int64", s.dtype)
    assert.same({ 4, 6 }, s:totable())
    assert.equal("int64", (i64 - i32).dtype)
    local d = f32 + f64
    assert.equal("float64", d.dtype)
    assert.tensor_near({ 0.6, 0.45 }, d, 1e-15, 0)
  end)

  it("int / int is true division in float32", function()
    local a = tl.tensor({ 7, -7, 1, 6 })
    local b = tl.tensor({ 2, 2, 3, 3 })
    local r = a / b
    assert.equal("float32", r.dtype)
    assert.tensor_near({ 3.5, -3.5, 1 / 3, 2 }, r, 1e-7, 0)
    local h = tl.tensor({ 1, 2 }, { dtype = "int32" }) / 4
    assert.equal("float32", h.dtype)
    assert.same({ 0.25, 0.5 }, h:totable())
  end)

  it("Lua numbers: integers keep an int dtype, floats make an int tensor float32, a float tensor keeps its dtype", function()
    local i32 = tl.tensor({ 1, 2 }, { dtype = "int32" })
    assert.equal("int32", (i32 + 1).dtype)
    assert.equal("int32", (2 * i32).dtype)
    local f = i32 + 1.5
    assert.equal("float32", f.dtype)
    assert.same({ 2.5, 3.5 }, f:totable())
    assert.equal("float32", (0.5 * tl.tensor({ 1, 2 })).dtype)
    assert.equal("float64", (tl.tensor({ 1 }, { dtype = "float64" }) + 1.5).dtype)
    assert.equal("bfloat16", (tl.tensor({ 1 }, { dtype = "bfloat16" }) * 2.0).dtype)
    assert.equal("float16", (1 + tl.tensor({ 1 }, { dtype = "float16" })).dtype)
    -- the float scalar is used at full precision in float64 math
    assert.same({ 1.1 }, (tl.tensor({ 1 }, { dtype = "float64" }) + 0.1):totable())
  end)

  it("comparisons give bool", function()
    for _, dt in ipairs({ "float32", "float64", "int32", "int64", "bfloat16", "float16" }) do
      local a = tl.tensor({ 1, 2, 3 }, { dtype = dt })
      for _, op in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
        assert.equal("bool", a[op](a, a).dtype, dt .. " " .. op)
      end
    end
  end)
end)

describe("comparisons", function()
  local CMP = {
    eq = function(a, b) return a == b end,
    ne = function(a, b) return a ~= b end,
    lt = function(a, b) return a < b end,
    le = function(a, b) return a <= b end,
    gt = function(a, b) return a > b end,
    ge = function(a, b) return a >= b end,
  }
  for _, op in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
    it(op .. " with broadcasting, with numbers, and across dtypes", function()
      local rng = ref.rng(#op)
      local av = ref.random_int_table(rng, { 3, 1 }, -2, 2)
      local bv = ref.random_int_table(rng, { 1, 4 }, -2, 2)
      -- ties are likely with small integers, which is what eq/le/ge need
      for _, dt in ipairs({ "float32", "int64", "int32", "float64", "bfloat16", "float16" }) do
        local a, b = tl.tensor(av, { dtype = dt }), tl.tensor(bv, { dtype = dt })
        local r = tl[op](a, b)
        assert.same(ref.broadcast_map(CMP[op], av, bv), r:totable())
        assert.same(ref.broadcast_map(CMP[op], av, bv), a[op](a, b):totable())
        assert.same(ref.broadcast_map(CMP[op], av, 0), a[op](a, 0):totable())
      end
      -- int64 tensor against float32 tensor compares values
      local fa = tl.tensor({ 1.5, 2, -1 })
      local ib = tl.tensor({ 1, 2, 3 })
      assert.same(ref.broadcast_map(CMP[op], { 1.5, 2, -1 }, { 1, 2, 3 }), tl[op](fa, ib):totable())
    end)
  end

  it("NaN compares unequal to everything, itself included", function()
    local n = tl.tensor({ 0 / 0, 1 })
    assert.same({ false, true }, n:eq(n):totable())
    assert.same({ true, false }, n:ne(n):totable())
    assert.same({ false, false }, n:lt(n):totable())
    assert.same({ false, true }, n:ge(n):totable())
  end)

  it("eq and ne on bool tensors", function()
    local a = tl.tensor({ true, false, true, false })
    local b = tl.tensor({ true, true, false, false })
    assert.same({ true, false, false, true }, a:eq(b):totable())
    assert.same({ false, true, true, false }, a:ne(b):totable())
  end)
end)

describe("where", function()
  it("selects elementwise with broadcasting", function()
    local rng = ref.rng(12)
    local a, av = random(rng, { 3, 4 }, -1, 1, "float64")
    local b, bv = random(rng, { 4 }, -1, 1, "float64")
    local cond = a:gt(0) -- [3, 4]
    local expected = ref.broadcast_map(function(x, y) return x > 0 and x or y end, av, bv)
    local r = tl.where(cond, a, b)
    assert.same({ 3, 4 }, r.shape)
    assert.tensor_equal(expected, r)
    -- cond broadcast too
    local c2 = tl.tensor({ { true }, { false }, { true } })
    assert.tensor_equal(ref.broadcast_map(function(c, x, y) return c and x or y end,
      { { true }, { false }, { true } }, av, bv), tl.where(c2, a, b))
  end)

  it("takes Lua numbers for either branch", function()
    local t = tl.tensor({ -2, -0.5, 0, 1.5 }, { dtype = "float64" })
    local c = t:lt(0)
    assert.tensor_equal({ 0, 0, 0, 1.5 }, tl.where(c, 0, t))
    assert.tensor_equal({ -2, -0.5, 9, 9 }, tl.where(c, t, 9))
    local both = tl.where(c, 1.5, -1.5)
    assert.tensor_equal({ 1.5, 1.5, -1.5, -1.5 }, both)
  end)

  it("keeps an int dtype and works on non-contiguous inputs", function()
    local a = tl.tensor({ { 1, 2 }, { 3, 4 } })
    local b = tl.tensor({ { -1, -2 }, { -3, -4 } })
    local c = tl.tensor({ { true, false }, { false, true } })
    local r = tl.where(c, a:transpose(1, 2), b)
    assert.equal("int64", r.dtype)
    assert.same({ { 1, -2 }, { -3, 4 } }, r:totable())
  end)
end)

describe("fill_ and copy_", function()
  it("fill_ sets every element, also through a non-contiguous view", function()
    for _, dt in ipairs({ "float32", "float64", "int32", "int64", "bfloat16", "float16" }) do
      local t = tl.zeros(2, 3, { dtype = dt })
      t:fill_(5)
      assert.same({ { 5, 5, 5 }, { 5, 5, 5 } }, t:totable())
    end
    local b = tl.zeros(3, { dtype = "bool" })
    b:fill_(true)
    assert.same({ true, true, true }, b:totable())
    local t = tl.zeros(3, 4)
    t:narrow(2, 2, 2):fill_(-1.5) -- columns 2..3
    assert.same({ { 0, -1.5, -1.5, 0 }, { 0, -1.5, -1.5, 0 }, { 0, -1.5, -1.5, 0 } }, t:totable())
    t:transpose(1, 2):select(1, 4):fill_(7) -- column 4
    assert.same({ 0, -1.5, -1.5, 7 }, t[2]:totable())
  end)

  it("fill_ returns the tensor for chaining", function()
    local t = tl.zeros(2)
    assert.equal(t, t:fill_(3))
  end)

  it("copy_ copies values into the destination's dtype, broadcasting the source", function()
    local dst = tl.zeros(2, 3, { dtype = "float64" })
    dst:copy_(tl.tensor({ 1, 2, 3 }, { dtype = "int32" }))
    assert.same({ { 1, 2, 3 }, { 1, 2, 3 } }, dst:totable())
    assert.equal("float64", dst.dtype)
    local i = tl.zeros(3, { dtype = "int64" })
    i:copy_(tl.tensor({ 1.9, -2.5, 3.0 }, { dtype = "float64" }))
    assert.same({ 1, -2, 3 }, i:totable())
    local col = tl.zeros(3, 2)
    col:copy_(tl.tensor({ { 1 }, { 2 }, { 3 } }))
    assert.same({ { 1, 1 }, { 2, 2 }, { 3, 3 } }, col:totable())
  end)

  it("copy_ from and into non-contiguous tensors", function()
    local src = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
    local dst = tl.zeros(3, 2, { dtype = "float64" })
    dst:copy_(src:transpose(1, 2))
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, dst:totable())
    local d2 = tl.zeros(2, 3, { dtype = "float64" })
    d2:transpose(1, 2):copy_(dst) -- d2^T = dst, so d2 = src
    assert.same(src:totable(), d2:totable())
  end)

  it("copy_ between every pair of dtypes keeps small integer values", function()
    local dts = { "float32", "float64", "bfloat16", "float16", "int32", "int64" }
    for _, from in ipairs(dts) do
      for _, to in ipairs(dts) do
        local d = tl.zeros(4, { dtype = to })
        d:copy_(tl.tensor({ -3, 0, 7, 100 }, { dtype = from }))
        assert.same({ -3, 0, 7, 100 }, d:totable(), from .. " -> " .. to)
        assert.equal(to, d.dtype)
      end
    end
  end)
end)
