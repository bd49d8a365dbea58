-- Reductions (sum, mean, max, min, argmax, argmin; over all or one dim, 1-based
-- and negative dims, keepdim) and softmax/log_softmax against Lua loops.
local tl = require("tlua")
local ref = require("helpers.reference")

local function random(rng, shape, dtype, lo, hi)
  local t = tl.tensor(ref.random_table(rng, shape, lo or -1, hi or 1), { dtype = dtype or "float32" })
  return t, t:totable()
end

-- a Lua value out of a 0-dim result (a tensor or already a number)
local function value(x)
  if type(x) == "userdata" then
    assert.same({}, x.shape)
    return x:item()
  end
  return x
end

local SHAPE = { 3, 4, 5 }
local DIMS = { 1, 2, 3, -1, -2, -3 }

local function reduced_shape(shape, dim, keepdim)
  if dim < 0 then dim = dim + #shape + 1 end
  local out = {}
  for d = 1, #shape do
    if d ~= dim then out[#out + 1] = shape[d] elseif keepdim then out[#out + 1] = 1 end
  end
  return out
end

describe("sum and mean", function()
  for _, dt in ipairs({ "float32", "float64" }) do
    local rtol, atol = 1e-5, 1e-5
    if dt == "float64" then rtol, atol = 1e-13, 1e-13 end

    it("over all elements (" .. dt .. ")", function()
      local rng = ref.rng(1)
      local t, v = random(rng, SHAPE, dt)
      local s = t:sum()
      assert.same({}, s.shape)
      assert.equal(dt, s.dtype)
      assert.near(ref.reduce(v, "sum"), s:item(), atol)
      assert.near(ref.reduce(v, "mean"), t:mean():item(), atol)
      assert.near(ref.reduce(v, "sum"), tl.sum(t):item(), atol)
      assert.near(ref.reduce(v, "mean"), tl.mean(t):item(), atol)
    end)

    it("over each dim, 1-based and negative, with and without keepdim (" .. dt .. ")", function()
      local rng = ref.rng(2)
      local t, v = random(rng, SHAPE, dt)
      for _, dim in ipairs(DIMS) do
        for _, keep in ipairs({ false, true }) do
          local s = t:sum(dim, keep)
          assert.same(reduced_shape(SHAPE, dim, keep), s.shape)
          assert.tensor_near(ref.reduce(v, "sum", dim, keep), s, rtol, atol)
          assert.tensor_near(ref.reduce(v, "mean", dim, keep), t:mean(dim, keep), rtol, atol)
          assert.tensor_near(ref.reduce(v, "sum", dim, keep), tl.sum(t, dim, keep), rtol, atol)
        end
        -- keepdim defaults to false
        assert.same(reduced_shape(SHAPE, dim, false), t:sum(dim).shape)
      end
    end)
  end

  it("of a non-contiguous (transposed) tensor", function()
    local rng = ref.rng(3)
    local t, v = random(rng, { 4, 6 }, "float64")
    local tt = t:transpose(1, 2) -- [6, 4]
    local tv = ref.build({ 6, 4 }, function(i, j) return v[j][i] end)
    for _, dim in ipairs({ 1, 2 }) do
      assert.tensor_near(ref.reduce(tv, "sum", dim), tt:sum(dim), 1e-13, 1e-13)
      assert.tensor_near(ref.reduce(tv, "mean", dim, true), tt:mean(dim, true), 1e-13, 1e-13)
    end
    assert.near(ref.reduce(tv, "sum"), tt:sum():item(), 1e-12)
  end)

  it("sum of integer tensors is exact and integer", function()
    local rng = ref.rng(4)
    for _, dt in ipairs({ "int32", "int64" }) do
      local v = ref.random_int_table(rng, SHAPE, -1000, 1000)
      local t = tl.tensor(v, { dtype = dt })
      local total = t:sum():item()
      assert.equal("integer", math.type(total))
      local expected = 0
      for _, x in ipairs((ref.flatten(v))) do expected = expected + x end
      assert.equal(expected, total)
      for _, dim in ipairs({ 1, -1 }) do
        assert.same(ref.reduce(v, "sum", dim), t:sum(dim):totable())
      end
    end
    -- int64 sums beyond 2^53 stay exact
    assert.equal(9007199254740993, tl.tensor({ 9007199254740992, 1 }):sum():item())
  end)

  it("of a large float32 tensor stays accurate (100000 elements)", function()
    local n = 100000
    local t = tl.ones(n):mul(0.1) -- float32(0.1) each
    local expected = n * ref.round_f32(0.1)
    -- float32 accumulation done naively drifts by ~1e-3 here; pairwise or wider accumulators do not
    assert.near(expected, t:sum():item(), expected * 1e-4)
    assert.near(ref.round_f32(0.1), t:mean():item(), 1e-7)
  end)

  it("bfloat16 and float16 sums are near the exact sum", function()
    local rng = ref.rng(5)
    for _, dt in ipairs({ "bfloat16", "float16" }) do
      local t, v = random(rng, { 4, 8 }, dt, 0, 1)
      assert.tensor_near(ref.reduce(v, "sum", 2), t:sum(2), 1e-2, 1e-2)
      assert.near(ref.reduce(v, "sum"), t:sum():item(), 0.2)
      assert.equal(dt, t:sum(2).dtype)
    end
  end)
end)

describe("max, min, argmax, argmin", function()
  it("over all elements: a 0-dim value and a 1-based flat index", function()
    local rng = ref.rng(6)
    for _, dt in ipairs({ "float32", "float64", "int32", "int64" }) do
      local t, v
      if dt:sub(1, 3) == "int" then
        v = ref.random_int_table(rng, SHAPE, -50, 50)
        t = tl.tensor(v, { dtype = dt })
      else
        t, v = random(rng, SHAPE, dt)
      end
      assert.equal(ref.reduce(v, "max"), value(t:max()))
      assert.equal(ref.reduce(v, "min"), value(t:min()))
      assert.equal(dt, t:max().dtype)
      assert.equal(ref.reduce(v, "argmax"), value(t:argmax()))
      assert.equal(ref.reduce(v, "argmin"), value(t:argmin()))
      assert.equal(ref.reduce(v, "argmax"), value(tl.argmax(t)))
      -- the flat index reads the max back through a flat view
      assert.equal(value(t:max()), t:reshape(-1)[value(t:argmax())])
    end
  end)

  it("max(dim)/min(dim) return values and 1-based indices", function()
    local rng = ref.rng(7)
    local t, v = random(rng, SHAPE, "float64")
    for _, dim in ipairs(DIMS) do
      for _, keep in ipairs({ false, true }) do
        local vals, idx = t:max(dim, keep)
        assert.same(reduced_shape(SHAPE, dim, keep), vals.shape)
        assert.same(reduced_shape(SHAPE, dim, keep), idx.shape)
        assert.tensor_equal(ref.reduce(v, "max", dim, keep), vals)
        assert.tensor_equal(ref.reduce(v, "maxidx", dim, keep), idx)
        local mvals, midx = tl.min(t, dim, keep)
        assert.tensor_equal(ref.reduce(v, "min", dim, keep), mvals)
        assert.tensor_equal(ref.reduce(v, "minidx", dim, keep), midx)
        assert.tensor_equal(ref.reduce(v, "argmax", dim, keep), t:argmax(dim, keep))
        assert.tensor_equal(ref.reduce(v, "argmin", dim, keep), t:argmin(dim, keep))
      end
    end
  end)

  it("indices are integers that index the tensor directly", function()
    local t = tl.tensor({ { 3, 9, 1 }, { 7, 2, 8 } }, { dtype = "float32" })
    local vals, idx = t:max(2)
    assert.same({ 9, 8 }, vals:totable())
    assert.same({ 2, 3 }, idx:totable())
    local lidx = idx:totable()
    assert.equal("integer", math.type(lidx[1]))
    for i = 1, 2 do assert.equal(vals[i], t[i][lidx[i]]) end
    local _, cidx = t:min(1)
    assert.same({ 1, 2, 1 }, cidx:totable())
  end)

  it("ties give the first index", function()
    local rng = ref.rng(8)
    -- small integers: many ties in every slice
    local v = ref.random_int_table(rng, { 6, 7, 5 }, 0, 2)
    local t = tl.tensor(v, { dtype = "float32" })
    for _, dim in ipairs({ 1, 2, 3 }) do
      local _, imax = t:max(dim)
      local _, imin = t:min(dim)
      assert.tensor_equal(ref.reduce(v, "maxidx", dim), imax)
      assert.tensor_equal(ref.reduce(v, "minidx", dim), imin)
      assert.tensor_equal(ref.reduce(v, "argmax", dim), t:argmax(dim))
      assert.tensor_equal(ref.reduce(v, "argmin", dim), t:argmin(dim))
    end
    local flat = tl.tensor({ 1, 5, 2, 5, 0, 0 })
    assert.equal(2, value(flat:argmax()))
    assert.equal(5, value(flat:argmin()))
  end)

  it("on a non-contiguous tensor", function()
    local rng = ref.rng(9)
    local t, v = random(rng, { 5, 3 }, "float32")
    local tt = t:transpose(1, 2)
    local tv = ref.build({ 3, 5 }, function(i, j) return v[j][i] end)
    local vals, idx = tt:max(2)
    assert.tensor_equal(ref.reduce(tv, "max", 2), vals)
    assert.tensor_equal(ref.reduce(tv, "maxidx", 2), idx)
    assert.equal(ref.reduce(tv, "argmin"), value(tt:argmin()))
  end)
end)

describe("softmax and log_softmax", function()
  it("match the Lua formula along every dim", function()
    local rng = ref.rng(10)
    for _, dt in ipairs({ "float32", "float64" }) do
      local rtol, atol = 1e-5, 1e-6
      if dt == "float64" then rtol, atol = 1e-12, 1e-14 end
      local t, v = random(rng, SHAPE, dt, -4, 4)
      for _, dim in ipairs(DIMS) do
        local s = t:softmax(dim)
        assert.equal(dt, s.dtype)
        assert.same(SHAPE, s.shape)
        assert.tensor_near(ref.softmax(v, dim), s, rtol, atol)
        assert.tensor_near(ref.softmax(v, dim, true), t:log_softmax(dim), rtol, atol)
        assert.tensor_near(ref.softmax(v, dim), tl.softmax(t, dim), rtol, atol)
        -- sums to 1 along dim
        local ones = ref.reduce(ref.softmax(v, dim), "sum", dim)
        assert.tensor_near(ones, s:sum(dim), 0, 1e-5)
        assert.tensor_near(ref.map(ones, function() return 1 end), s:sum(dim), 0, 1e-5)
      end
    end
  end)

  it("is stable for large inputs such as {1000, 1001, 1002}", function()
    local expected = ref.softmax_list({ 0, 1, 2 }) -- shift invariance
    local big = tl.tensor({ 1000, 1001, 1002 }, { dtype = "float32" })
    assert.tensor_near(expected, big:softmax(1), 1e-6, 1e-7)
    assert.tensor_near(ref.log_softmax_list({ 0, 1, 2 }), big:log_softmax(1), 1e-6, 1e-6)
    local neg = tl.tensor({ -1000, -1001, -1002 }, { dtype = "float32" })
    assert.tensor_near(ref.softmax_list({ 0, -1, -2 }), neg:softmax(1), 1e-6, 1e-7)
    local mixed = tl.tensor({ { 1e4, 0 }, { -1e4, 0 } }, { dtype = "float64" })
    assert.tensor_near({ { 1, 0 }, { 0, 1 } }, mixed:softmax(2), 0, 1e-300)
    assert.tensor_near({ { 0, -1e4 }, { -1e4, 0 } }, mixed:log_softmax(2), 1e-15, 0)
  end)

  it("on a non-contiguous tensor and in bfloat16", function()
    local rng = ref.rng(11)
    local t, v = random(rng, { 4, 3 }, "float32", -2, 2)
    local tt = t:transpose(1, 2)
    local tv = ref.build({ 3, 4 }, function(i, j) return v[j][i] end)
    assert.tensor_near(ref.softmax(tv, 2), tt:softmax(2))
    assert.tensor_near(ref.softmax(tv, 1), tt:softmax(-2))
    local b, bv = random(rng, { 2, 8 }, "bfloat16", -2, 2)
    assert.tensor_near(ref.softmax(bv, 2), b:softmax(2), 1e-2, 1e-3)
    assert.equal("bfloat16", b:softmax(2).dtype)
  end)
end)
