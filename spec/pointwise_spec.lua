-- Every pointwise op of the op table (families pointwise and pointwise_binary)
-- against its Lua reference (helpers/pointwise_cases.lua): values in each floating
-- dtype, integer and bool inputs (computed in float32), strided inputs, broadcasting
-- and Lua numbers (binary ops), the method form, bad arguments.
local tl = require("tlua")
local ref = require("helpers.reference")
local cases = require("helpers.pointwise_cases")

local FLOAT_DTYPES, TOL = ref.FLOAT_DTYPES, ref.ELEMENTWISE_TOL

local pointwise, binary = {}, {}
for _, op in ipairs(tl.ops()) do
  if op.family == "pointwise" then pointwise[#pointwise + 1] = op end
  if op.family == "pointwise_binary" then binary[#binary + 1] = op end
end

-- a [rows, cols] tensor of dtype drawn from [lo, hi], and its stored values
local function draw(rng, shape, lo, hi, dtype)
  local t = tl.tensor(ref.random_table(rng, shape, lo, hi), { dtype = dtype })
  return t, t:totable()
end

describe("pointwise ops", function()
  it("are listed in the op table (family pointwise), each differentiable", function()
    assert.is_true(#pointwise >= 6)
    for _, op in ipairs(pointwise) do
      assert.is_true(op.differentiable, op.name)
      assert.is_function(tl[op.name], op.name)
    end
  end)

  for _, op in ipairs(pointwise) do
    local name, case = op.name, cases[op.name]
    describe(name, function()
      it("has a case in helpers/pointwise_cases.lua", function()
        assert(case, "pointwise op '" .. name .. "' has no line in spec/helpers/pointwise_cases.lua")
      end)
      if not case then return end

      for _, dt in ipairs(FLOAT_DTYPES) do
        it(("in %s matches the Lua reference, as tl.%s(t) and t:%s()"):format(dt, name, name), function()
          local rng = ref.rng(#name * 31 + #dt)
          local t = tl.tensor(ref.random_table(rng, { 7, 9 }, case.lo, case.hi), { dtype = dt })
          local a, b = tl[name](t), t[name](t)
          assert.equal(dt, a.dtype)
          assert.same({ 7, 9 }, a.shape)
          local tol = TOL[dt]
          assert.tensor_near(ref.map(t:totable(), case.reference), a, tol.rtol, tol.atol)
          assert.tensor_equal(a, b)
        end)
      end

      it("computes integer and bool inputs in float32", function()
        local lo, hi = math.ceil(case.lo), math.floor(case.hi)
        local ints = {}
        for i = 1, 6 do ints[i] = lo + (i - 1) * (hi - lo) // 5 end
        for _, dt in ipairs({ "int32", "int64" }) do
          local out = tl[name](tl.tensor(ints, { dtype = dt }))
          assert.equal("float32", out.dtype)
          assert.tensor_near(ref.map(ints, case.reference), out, TOL.float32.rtol, TOL.float32.atol)
        end
        if case.lo <= 0 and case.hi >= 1 then
          local out = tl[name](tl.tensor({ true, false }))
          assert.equal("float32", out.dtype)
          assert.tensor_near({ case.reference(1), case.reference(0) }, out, 1e-5, 1e-6)
        end
      end)

      it("reads strided and broadcast inputs", function()
        local rng = ref.rng(#name)
        local t = tl.tensor(ref.random_table(rng, { 5, 4 }, case.lo, case.hi), { dtype = "float64" })
        local tt = t:transpose(1, 2)
        assert.is_false(tt:is_contiguous())
        assert.tensor_near(ref.map(tt:totable(), case.reference), tl[name](tt), 1e-12, 1e-14)
        local row = t[1]:view(1, 4):expand(3, 4)
        assert.tensor_near(ref.map(row:totable(), case.reference), tl[name](row), 1e-12, 1e-14)
      end)

      it("rejects a non-tensor argument with a message naming the op", function()
        assert.error_matches(function() tl[name]("x") end, name .. ": argument 1")
        assert.error_matches(function() tl[name]() end, name .. ": argument 1")
      end)
    end)
  end
end)

describe("pointwise binary ops", function()
  it("are listed in the op table (family pointwise_binary), each differentiable", function()
    assert.is_true(#binary >= 2)
    for _, op in ipairs(binary) do
      assert.is_true(op.differentiable, op.name)
      assert.is_function(tl[op.name], op.name)
    end
  end)

  for _, op in ipairs(binary) do
    local name, case = op.name, cases[op.name]
    describe(name, function()
      it("has a case with two input ranges in helpers/pointwise_cases.lua", function()
        assert(case and case.ranges, "pointwise binary op '" .. name .. "' has no line with ranges in spec/helpers/pointwise_cases.lua")
      end)
      if not (case and case.ranges) then return end
      local ra, rb = case.ranges[1], case.ranges[2]

      for _, dt in ipairs(FLOAT_DTYPES) do
        it(("in %s broadcasts [7, 1] with [1, 9] and matches the Lua reference"):format(dt), function()
          local rng = ref.rng(#name * 17 + #dt)
          local a, av = draw(rng, { 7, 1 }, ra[1], ra[2], dt)
          local b, bv = draw(rng, { 1, 9 }, rb[1], rb[2], dt)
          local expected = {}
          for i = 1, 7 do
            expected[i] = {}
            for j = 1, 9 do expected[i][j] = case.reference(av[i][1], bv[1][j]) end
          end
          local out = tl[name](a, b)
          assert.equal(dt, out.dtype)
          assert.same({ 7, 9 }, out.shape)
          local tol = TOL[dt]
          assert.tensor_near(expected, out, tol.rtol, tol.atol)
          assert.tensor_equal(out, a[name](a, b))
        end)
      end

      it("takes a Lua number on either side, in the tensor's dtype", function()
        local rng = ref.rng(#name)
        local a, av = draw(rng, { 6 }, ra[1], ra[2], "float64")
        local b, bv = draw(rng, { 6 }, rb[1], rb[2], "float64")
        local x, y = (ra[1] + ra[2]) / 2 + 0.25, (rb[1] + rb[2]) / 2 + 0.25
        local left, right = tl[name](x, b), tl[name](a, y)
        assert.equal("float64", left.dtype)
        assert.tensor_near(ref.map(bv, function(v) return case.reference(x, v) end), left, 1e-12, 1e-14)
        assert.tensor_near(ref.map(av, function(v) return case.reference(v, y) end), right, 1e-12, 1e-14)
      end)

      it("computes integer inputs in float32, and promotes mixed float dtypes", function()
        local a = { math.ceil(ra[1]), math.floor(ra[2]), math.ceil(ra[1] + 1) }
        local b = { math.ceil(rb[1]), math.floor(rb[2]), math.floor(rb[2]) }
        local out = tl[name](tl.tensor(a, { dtype = "int32" }), tl.tensor(b, { dtype = "int64" }))
        assert.equal("float32", out.dtype)
        local expected = {}
        for i = 1, 3 do expected[i] = case.reference(a[i], b[i]) end
        assert.tensor_near(expected, out, 1e-6, 1e-6)
        local mixed = tl[name](tl.tensor(a, { dtype = "float32" }), tl.tensor(b, { dtype = "float64" }))
        assert.equal("float64", mixed.dtype)
      end)

      it("reads strided inputs", function()
        local rng = ref.rng(#name + 5)
        local a = draw(rng, { 4, 3 }, ra[1], ra[2], "float64")
        local b = draw(rng, { 3, 4 }, rb[1], rb[2], "float64")
        local at, bt = a:transpose(1, 2), b
        local av, bv = at:totable(), bt:totable()
        local expected = {}
        for i = 1, 3 do
          expected[i] = {}
          for j = 1, 4 do expected[i][j] = case.reference(av[i][j], bv[i][j]) end
        end
        assert.tensor_near(expected, tl[name](at, bt), 1e-12, 1e-14)
      end)

      it("rejects shapes that do not broadcast and non-tensor arguments, naming the op", function()
        assert.error_matches(function() tl[name](tl.ones(3), tl.ones(4)) end, name)
        assert.error_matches(function() tl[name]("x", tl.ones(2)) end, name)
        assert.error_matches(function() tl[name](1, 2) end, name .. ": expected a tensor")
      end)
    end)
  end
end)
