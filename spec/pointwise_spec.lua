-- Every pointwise op of the op table against its Lua reference
-- (helpers/pointwise_cases.lua): values in each floating dtype, integer and bool
-- inputs (computed in float32), strided inputs, the method form, bad arguments.
local tl = require("tlua")
local ref = require("helpers.reference")
local cases = require("helpers.pointwise_cases")

local FLOAT_DTYPES = { "float32", "float64", "bfloat16", "float16" }
-- results in dtype against a float64 reference from the stored inputs: float32 to a
-- few ulp, bf16/f16 one rounding (plus the float32 compute) away
local TOL = {
  float32 = { rtol = 1e-5, atol = 1e-6 },
  float64 = { rtol = 1e-12, atol = 1e-14 },
  bfloat16 = { rtol = 2 ^ -7, atol = 1e-3 },
  float16 = { rtol = 2 ^ -10, atol = 1e-4 },
}

local pointwise = {}
for _, op in ipairs(tl.ops()) do
  if op.family == "pointwise" then pointwise[#pointwise + 1] = op end
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
