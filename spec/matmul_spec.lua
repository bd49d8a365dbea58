-- matmul (torch.matmul semantics) against a float64 triple loop in Lua:
-- 2-D, vector cases, batched, broadcast batch dims, transposed inputs, odd sizes, dtypes.
local tl = require("tlua")
local ref = require("helpers.reference")

-- tolerances against the float64 reference (inputs in [-1, 1], sums of k products)
local TOL = {
  float32 = { 1e-5, 1e-5 },
  float64 = { 1e-12, 1e-12 },
  bfloat16 = { 1e-2, 1e-2 }, -- one bf16 rounding of an f32-accumulated result
  float16 = { 2e-3, 2e-3 },
}

local function random(rng, shape, dtype)
  local t = tl.tensor(ref.random_table(rng, shape, -1, 1), { dtype = dtype or "float32" })
  return t, t:totable()
end

local function check(a, b, av, bv, dtype, out_shape)
  local expected = ref.matmul(av, bv)
  local r = a:matmul(b)
  assert.same(out_shape, r.shape)
  assert.equal(dtype, r.dtype)
  local tol = TOL[dtype]
  assert.tensor_near(expected, r, tol[1], tol[2])
  assert.tensor_near(expected, tl.matmul(a, b), tol[1], tol[2])
end

describe("matmul shapes", function()
  local cases = {
    { "2-D x 2-D", { 3, 4 }, { 4, 5 }, { 3, 5 } },
    { "1-D . 1-D (a 0-dim result)", { 7 }, { 7 }, {} },
    { "1-D x 2-D", { 4 }, { 4, 5 }, { 5 } },
    { "2-D x 1-D", { 3, 4 }, { 4 }, { 3 } },
    { "batched 3-D", { 2, 3, 4 }, { 2, 4, 5 }, { 2, 3, 5 } },
    { "3-D x 2-D (broadcast)", { 2, 3, 4 }, { 4, 5 }, { 2, 3, 5 } },
    { "2-D x 3-D (broadcast)", { 3, 4 }, { 2, 4, 5 }, { 2, 3, 5 } },
    { "1-D x 3-D", { 4 }, { 2, 4, 5 }, { 2, 5 } },
    { "3-D x 1-D", { 2, 3, 4 }, { 4 }, { 2, 3 } },
    { "broadcast batch [2,1,3,4] @ [5,4,2]", { 2, 1, 3, 4 }, { 5, 4, 2 }, { 2, 5, 3, 2 } },
    { "broadcast batch [1,3,2,4] @ [2,1,4,3]", { 1, 3, 2, 4 }, { 2, 1, 4, 3 }, { 2, 3, 2, 3 } },
    { "1x1 matrices", { 1, 1 }, { 1, 1 }, { 1, 1 } },
    { "outer product shape [5,1] @ [1,3]", { 5, 1 }, { 1, 3 }, { 5, 3 } },
  }
  for ci, c in ipairs(cases) do
    for _, dt in ipairs({ "float32", "float64" }) do
      it(c[1] .. " (" .. dt .. ")", function()
        local rng = ref.rng(ci * 10 + #dt)
        local a, av = random(rng, c[2], dt)
        local b, bv = random(rng, c[3], dt)
        check(a, b, av, bv, dt, c[4])
      end)
    end
  end
end)

describe("matmul layouts", function()
  it("transposed inputs (a^T b, a b^T, a^T b^T)", function()
    local rng = ref.rng(100)
    local a, av = random(rng, { 6, 4 }) -- used as [4, 6]
    local b, bv = random(rng, { 5, 6 }) -- used as [6, 5]
    local at = a:transpose(1, 2)
    local bt = b:transpose(1, 2)
    local atv = ref.build({ 4, 6 }, function(i, j) return av[j][i] end)
    local btv = ref.build({ 6, 5 }, function(i, j) return bv[j][i] end)
    check(at, bt, atv, btv, "float32", { 4, 5 })
    local c, cv = random(rng, { 6, 5 })
    check(at, c, atv, cv, "float32", { 4, 5 })
    local d, dv = random(rng, { 4, 6 })
    check(d, bt, dv, btv, "float32", { 4, 5 })
  end)

  it("batched transposed and permuted inputs", function()
    local rng = ref.rng(101)
    local a, av = random(rng, { 3, 2, 4 }, "float64") -- permute to [2, 4, 3]
    local b, bv = random(rng, { 2, 5, 3 }, "float64") -- transpose to [2, 3, 5]
    local ap = a:permute(2, 3, 1)
    local bt = b:transpose(2, 3)
    local apv = ref.build({ 2, 4, 3 }, function(i, j, k) return av[k][i][j] end)
    local btv = ref.build({ 2, 3, 5 }, function(i, j, k) return bv[i][k][j] end)
    check(ap, bt, apv, btv, "float64", { 2, 4, 5 })
  end)

  it("narrowed and expanded inputs", function()
    local rng = ref.rng(102)
    local a, av = random(rng, { 5, 8 })
    local an = a:narrow(2, 3, 4) -- [5, 4], row stride 8
    local anv = ref.build({ 5, 4 }, function(i, j) return av[i][j + 2] end)
    local b, bv = random(rng, { 4, 3 })
    check(an, b, anv, bv, "float32", { 5, 3 })
    local be = b:unsqueeze(1):expand(2, 4, 3) -- batch of the same matrix
    local bev = { bv, bv }
    local c, cv = random(rng, { 2, 5, 4 })
    check(c, be, cv, bev, "float32", { 2, 5, 3 })
  end)

  it("a vector from a strided view", function()
    local rng = ref.rng(103)
    local m, mv = random(rng, { 4, 3 }, "float64")
    local col = m:select(2, 2) -- [4], stride 3
    local colv = { mv[1][2], mv[2][2], mv[3][2], mv[4][2] }
    local b, bv = random(rng, { 4, 6 }, "float64")
    check(col, b, colv, bv, "float64", { 6 })
    check(col, col, colv, colv, "float64", {})
  end)
end)

-- random a [a_shape] @ b [b_shape] in dtype, checked as check does
local function check_random(rng, a_shape, b_shape, dtype, out_shape)
  local a, av = random(rng, a_shape, dtype)
  local b, bv = random(rng, b_shape, dtype)
  check(a, b, av, bv, dtype, out_shape)
end

describe("matmul sizes and dtypes", function()
  it("33x17 @ 17x65 in float32 and float64", function()
    local rng = ref.rng(200)
    for _, dt in ipairs({ "float32", "float64" }) do check_random(rng, { 33, 17 }, { 17, 65 }, dt, { 33, 65 }) end
  end)

  it("a long inner dim (k = 300) in float32", function()
    local rng = ref.rng(201)
    local a, av = random(rng, { 20, 300 })
    local b, bv = random(rng, { 300, 9 })
    local expected = ref.matmul(av, bv)
    assert.tensor_near(expected, a:matmul(b), 1e-5, 1e-4)
  end)

  it("bfloat16 and float16 inputs give their own dtype, near the float64 result", function()
    local rng = ref.rng(202)
    for _, dt in ipairs({ "bfloat16", "float16" }) do
      check_random(rng, { 9, 17 }, { 17, 11 }, dt, { 9, 11 })
      check_random(rng, { 3, 5, 8 }, { 8, 4 }, dt, { 3, 5, 4 })
    end
  end)

  it("an empty inner dim gives zeros", function()
    local r = tl.zeros(3, 0):matmul(tl.zeros(0, 4))
    assert.same({ 3, 4 }, r.shape)
    assert.tensor_equal(ref.build({ 3, 4 }, function() return 0 end), r)
  end)

  it("does not change its inputs", function()
    local rng = ref.rng(203)
    local a, av = random(rng, { 4, 4 }, "float64")
    local b, bv = random(rng, { 4, 4 }, "float64")
    local _ = a:matmul(b)
    assert.tensor_equal(av, a)
    assert.tensor_equal(bv, b)
  end)
end)
