-- Integer and bool edge cases (wrapping arithmetic without undefined behaviour, bool bytes read as
-- byte != 0), ops on empty tensors with huge other dims (no loop may scale with them), and exact
-- integer aranges. References are computed in Lua: Lua integers wrap as two's complement
-- (math.maxinteger + 1 == math.mininteger), so they are the reference of int64 arithmetic.
local tl = require("tlua")

local MAX, MIN = math.maxinteger, math.mininteger

-- x wrapped to int32 (two's complement), for a Lua integer x
local function wrap32(x)
  return ((x + 0x80000000) & 0xffffffff) - 0x80000000
end

-- x ^ e for an integer e >= 0 by repeated wrapping multiplication
local function ipow(x, e)
  local r = 1
  for _ = 1, e do r = r * x end
  return r
end

describe("bool storage", function()
  it("tl.empty gives bool tensors that read as false (sum 0), whatever their size", function()
    for _, n in ipairs({ 1, 7, 4096, 70001 }) do
      local t = tl.empty({ n }, { dtype = "bool" })
      assert.are.equal(0, t:sum():item(), "empty bool of " .. n)
      assert.are.equal(0, t:long():sum():item(), "cast of empty bool of " .. n)
      assert.are.equal(0, tl.empty_like(t):sum():item())
    end
    local m = tl.empty({ 3, 129 }, { dtype = "bool" })
    assert.tensor_equal(tl.zeros(3, { dtype = "int64" }), m:sum(2))
  end)

  it("a bool made from integers is value != 0, and sums, compares and selects that way", function()
    local values, expected, count = {}, {}, 0
    for i = 1, 1000 do
      local v = ({ 0, 5, -3, 0, 1, -2147483647, 255, 256 })[i % 8 + 1] * (i % 3 == 0 and 1 or -1)
      values[i] = v
      expected[i] = v ~= 0
      if v ~= 0 then count = count + 1 end
    end
    for _, dtype in ipairs({ "int32", "int64" }) do
      local b = tl.tensor(values, { dtype = dtype }):bool()
      assert.are.same(expected, b:totable(), dtype)
      assert.are.equal(count, b:sum():item(), dtype)
      local back = b:long():totable()
      for i = 1, #values do assert.are.equal(expected[i] and 1 or 0, back[i]) end
      assert.are.equal(count, b:eq(tl.full({ #values }, true)):sum():item())
      assert.are.equal(#values - count, b:eq(tl.full({ #values }, false)):sum():item())
      local picked = tl.where(b, tl.ones(#values, { dtype = "float64" }), tl.zeros(#values, { dtype = "float64" }))
      assert.are.equal(count, picked:sum():item())
      assert.is_true(b:max():item())
      assert.is_false(b:min():item())
    end
  end)

  it("bool copies and clones hold only 0 and 1 (read back through an int cast)", function()
    local b = tl.tensor({ 0, 7, -1, 0, 2 }, { dtype = "int64" }):bool()
    local c = b:clone()
    assert.are.same({ 0, 1, 1, 0, 1 }, c:long():totable())
    local strided = tl.tensor({ { 0, 3 }, { -9, 0 } }, { dtype = "int32" }):bool():transpose(1, 2):contiguous()
    assert.are.same({ { 0, 1 }, { 1, 0 } }, strided:long():totable())
    local upper = tl.tensor({ { 0, 3 }, { 0, 0 } }, { dtype = "int32" }):bool():transpose(1, 2):contiguous()
    assert.are.same({ { 0, 0 }, { 1, 0 } }, upper:long():totable())
    assert.are.same({ 0, 2, 2, 0, 2 }, (b + b):totable()) -- bool + bool computes in int64
  end)
end)

describe("integer sums wrap as two's complement", function()
  -- the Lua sum (wrapping like int64)
  local function lua_sum(values)
    local s = 0
    for _, v in ipairs(values) do s = s + v end
    return s
  end

  it("int64 sums past the int64 range, over all elements and along dims", function()
    for _, n in ipairs({ 3, 100, 40000 }) do -- 40000: a long dim reduced in chunks
      local values = {}
      for i = 1, n do values[i] = (i % 2 == 0) and (MAX - i * 7) or (MAX // 3 + i * 1000003) end
      local t = tl.tensor(values, { dtype = "int64" })
      local expected = lua_sum(values)
      assert.are.equal(expected, t:sum():item(), "sum of " .. n)
      assert.are.equal(expected, t:view(1, n):sum(2):totable()[1], "sum along dim 2 of " .. n)
    end
    -- along dim 1 of a [rows, 70] tensor: several lanes reduced side by side
    local rows, cols = 9, 70
    local grid, columns = {}, {}
    for r = 1, rows do
      grid[r] = {}
      for c = 1, cols do
        local v = (r * c % 5 == 0) and (MIN + r * c) or (MAX - r * 1234567 * c)
        grid[r][c] = v
        columns[c] = (columns[c] or 0) + v
      end
    end
    assert.are.same(columns, tl.tensor(grid, { dtype = "int64" }):sum(1):totable())
  end)

  it("the wrapped results match Lua's own overflow", function()
    assert.are.equal(MIN, tl.tensor({ MAX, 1 }, { dtype = "int64" }):sum():item())
    assert.are.equal(MAX, tl.tensor({ MIN, -1 }, { dtype = "int64" }):sum():item())
    assert.are.equal(MAX + MAX + MAX, tl.tensor({ MAX, MAX, MAX }, { dtype = "int64" }):sum():item())
  end)

  it("int32 sums are int64 and exact past the int32 range", function()
    local values = {}
    for i = 1, 5000 do values[i] = (i % 3 == 0) and -2147483648 or (2147483647 - i) end
    local t = tl.tensor(values, { dtype = "int32" })
    local s = t:sum()
    assert.are.equal("int64", s.dtype)
    assert.are.equal(lua_sum(values), s:item())
  end)

  it("bool sums count the true elements", function()
    local values, count = {}, 0
    for i = 1, 33333 do
      values[i] = i % 7 == 2 or i % 11 == 0
      if values[i] then count = count + 1 end
    end
    assert.are.equal(count, tl.tensor(values):sum():item())
  end)
end)

describe("integer elementwise ops wrap as two's complement", function()
  local function i64(values) return tl.tensor(values, { dtype = "int64" }) end
  local function i32(values) return tl.tensor(values, { dtype = "int32" }) end

  it("int64 add, sub, mul, neg, abs, pow", function()
    local a = { MAX, MIN, MAX - 5, MIN + 9, 4611686018427387904, -3 }
    local b = { 3, -7, MAX, MIN, 4611686018427387904, MIN }
    local add, sub, mul = {}, {}, {}
    for i = 1, #a do
      add[i], sub[i], mul[i] = a[i] + b[i], a[i] - b[i], a[i] * b[i]
    end
    assert.are.same(add, (i64(a) + i64(b)):totable())
    assert.are.same(sub, (i64(a) - i64(b)):totable())
    assert.are.same(mul, (i64(a) * i64(b)):totable())
    assert.are.same({ MIN, MAX, -(MAX - 5), -(MIN + 9) }, (-i64({ MIN, -MAX, MAX - 5, MIN + 9 })):totable())
    assert.are.same({ MIN, MAX, 17 }, i64({ MIN, -MAX, -17 }):abs():totable())
    -- 3^41 and -7^29 wrap; the reference multiplies in Lua
    assert.are.same({ ipow(3, 41), ipow(-7, 29), ipow(2, 63), ipow(2, 64) },
      i64({ 3, -7, 2, 2 }):pow(i64({ 41, 29, 63, 64 })):totable())
    assert.are.same({ ipow(3, 41), ipow(-5, 41) }, i64({ 3, -5 }):pow(41):totable())
    -- with a Lua integer on the other side
    assert.are.same({ MAX + 1, MIN + 1 }, (i64({ MAX, MIN }) + 1):totable())
    assert.are.same({ MIN - 2, MAX - 2 }, (i64({ MIN, MAX }) - 2):totable())
    assert.are.same({ MAX * 2, MIN * 3 }, (i64({ MAX, MIN }) * i64({ 2, 3 })):totable())
  end)

  it("int32 add, sub, mul, neg, abs, pow", function()
    local a = { 2147483647, -2147483648, 65536, -46341, 12345 }
    local b = { 1, -1, 65536, 46341, -2147483648 }
    local add, sub, mul = {}, {}, {}
    for i = 1, #a do
      add[i], sub[i], mul[i] = wrap32(a[i] + b[i]), wrap32(a[i] - b[i]), wrap32(a[i] * b[i])
    end
    assert.are.same(add, (i32(a) + i32(b)):totable())
    assert.are.same(sub, (i32(a) - i32(b)):totable())
    assert.are.same(mul, (i32(a) * i32(b)):totable())
    assert.are.same({ -2147483648, 2147483647 }, (-i32({ -2147483648, -2147483647 })):totable())
    assert.are.same({ -2147483648, 5 }, i32({ -2147483648, -5 }):abs():totable())
    assert.are.same({ wrap32(ipow(3, 25)), wrap32(ipow(2, 31)), wrap32(ipow(-3, 21)) },
      i32({ 3, 2, -3 }):pow(i32({ 25, 31, 21 })):totable())
    assert.are.same({ wrap32(ipow(7, 13)), wrap32(ipow(-7, 13)) }, i32({ 7, -7 }):pow(13):totable())
  end)
end)

describe("ops on empty tensors with a huge other dim return at once", function()
  local H = 1 << 40

  -- runs fn, checks it took under a second of CPU time and returns its result
  local function quick(what, fn)
    local t0 = os.clock()
    local result = fn()
    local took = os.clock() - t0
    assert.is_true(took < 1, string.format("%s took %.2f s", what, took))
    return result
  end

  local empties = { { 0, H }, { H, 0 }, { 1 << 20, 0, 1 << 20 } }

  it("softmax and log_softmax over every dim", function()
    for _, shape in ipairs(empties) do
      for dim = 1, #shape do
        for _, op in ipairs({ "softmax", "log_softmax" }) do
          local what = string.format("%s of [%s] over dim %d", op, table.concat(shape, ", "), dim)
          local y = quick(what, function() return tl[op](tl.empty(shape), dim) end)
          assert.are.same(shape, y.shape, what)
        end
      end
    end
  end)

  it("reductions whose result is empty", function()
    local cases = {
      { { 0, H }, 2, { 0 } }, { { H, 0 }, 1, { 0 } }, { { 1 << 20, 0, 1 << 20 }, 1, { 0, 1 << 20 } },
      { { 1 << 20, 0, 1 << 20 }, 3, { 1 << 20, 0 } },
    }
    for _, c in ipairs(cases) do
      local shape, dim, out = c[1], c[2], c[3]
      local what = string.format("[%s] over dim %d", table.concat(shape, ", "), dim)
      local x = tl.empty(shape)
      for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin" }) do
        local y = quick(op .. " " .. what, function() return (x[op](x, dim)) end)
        assert.are.same(out, y.shape, op .. " " .. what)
      end
      local k = quick("keepdim sum " .. what, function() return x:sum(dim, true) end)
      local kept = {}
      for d = 1, #shape do kept[d] = d == dim and 1 or shape[d] end
      assert.are.same(kept, k.shape)
    end
    -- an empty input with a non-empty result: zeros
    assert.tensor_equal(tl.zeros(3, { dtype = "int64" }), tl.empty({ 3, 0 }, { dtype = "int64" }):sum(2))
    assert.error_matches(function() tl.empty({ 3, 0 }):max(2) end, { "max", "size 0" })
  end)

  it("casts, copies, elementwise ops, fills and random tensors", function()
    for _, shape in ipairs(empties) do
      local name = "[" .. table.concat(shape, ", ") .. "]"
      local x = tl.empty(shape)
      local results = quick("elementwise " .. name, function()
        return {
          x:double(), x:bool(), x:long(), x:clone(), x:transpose(1, 2):contiguous():transpose(1, 2),
          x + x, x:exp(), -x, x:fill_(2), x:eq(x), tl.where(x:bool(), x, x),
          tl.zeros(shape), tl.ones(shape, { dtype = "int32" }), tl.full(shape, true),
          tl.rand(shape), tl.randn(shape, { dtype = "float64" }), tl.randint(0, 9, shape),
        }
      end)
      for i, y in ipairs(results) do assert.are.same(shape, y.shape, name .. " result " .. i) end
    end
  end)

  it("layer_norm, embedding and cross_entropy, forward and backward", function()
    local x = tl.empty({ 0, H }):requires_grad_()
    local y = quick("layer_norm [0, 2^40]", function() return tl.layer_norm(x) end)
    assert.are.same({ 0, H }, y.shape)
    quick("layer_norm backward", function() y:sum():backward() end)
    assert.are.same({ 0, H }, x.grad.shape)

    local rows = tl.empty({ 5, 0 }):requires_grad_() -- rows of no elements
    assert.are.same({ 5, 0 }, quick("layer_norm [5, 0]", function() return tl.layer_norm(rows) end).shape)

    -- a weight of 2^40 rows of size 0: the gradient [2^40, 0] has nothing to write
    local w = tl.empty({ H, 0 }):requires_grad_()
    local e = quick("embedding", function() return tl.embedding(tl.tensor({ 1, 7, H }), w) end)
    assert.are.same({ 3, 0 }, e.shape)
    quick("embedding backward", function() e:sum():backward() end)
    assert.are.same({ H, 0 }, w.grad.shape)
    local v = tl.randn(4, 3):requires_grad_()
    local none = quick("embedding of no indices", function() return tl.embedding(tl.empty({ H, 0 }, { dtype = "int64" }), v) end)
    assert.are.same({ H, 0, 3 }, none.shape)
    quick("its backward", function() none:sum():backward() end)
    assert.tensor_equal(tl.zeros(4, 3), v.grad)

    local logits = tl.empty({ 0, H }):requires_grad_()
    local loss = quick("cross_entropy", function() return tl.cross_entropy(logits, tl.empty({ 0 }, { dtype = "int64" })) end)
    assert.is_true(loss:item() ~= loss:item()) -- the mean over no rows is NaN
    quick("cross_entropy backward", function() loss:backward() end)
    assert.are.same({ 0, H }, logits.grad.shape)
  end)
end)

describe("integer aranges are exact in int64", function()
  -- start, start + step, ... while before stop; stops where the next value would leave int64
  local function lua_arange(start, stop, step)
    local out, v = {}, start
    while (step > 0 and v < stop) or (step < 0 and v > stop) do
      out[#out + 1] = v
      local next_v = v + step
      if (step > 0) ~= (next_v > v) then break end -- wrapped past the end of int64
      v = next_v
    end
    return out
  end

  local cases = {
    { 1 << 53, (1 << 53) + 3, 1 }, { (1 << 53) + 1, (1 << 53) - 6, -2 }, { -(1 << 53) - 2, -(1 << 53) + 2, 1 },
    { (1 << 62) - 3, (1 << 62) + 4, 2 }, { -(1 << 62) + 5, -(1 << 62) - 5, -3 },
    { MAX - 2, MAX, 1 }, { MAX - 5, MAX, 2 }, { MAX - 7, MAX - 1, 3 }, { MIN, MIN + 3, 1 }, { MIN + 4, MIN, -1 },
    { MIN, MAX, 1 << 62 }, { MAX, MIN, -(1 << 61) }, { MAX, MIN, MIN }, { MIN, MAX, MAX }, { MIN + 1, MIN, -1 },
    { -7, 7, 3 }, { 7, -7, -3 }, { 5, 5, 1 }, { 5, 5, -1 },
  }

  it("matches a Lua loop near 2^53, 2^62, math.maxinteger and math.mininteger", function()
    for _, c in ipairs(cases) do
      local t = tl.arange(c[1], c[2], c[3])
      local what = string.format("arange(%d, %d, %d)", c[1], c[2], c[3])
      assert.are.equal("int64", t.dtype, what)
      local expected = lua_arange(c[1], c[2], c[3])
      assert.are.equal(#expected, t:numel(), what)
      if #expected > 0 then assert.are.same(expected, t:totable(), what) end
    end
    assert.are.same({ 0, 1, 2 }, tl.arange(3):totable())
    assert.are.equal(0, tl.arange(0):numel())
  end)

  it("takes integral floats exactly when the dtype is an integer", function()
    assert.are.same(lua_arange(1 << 53, (1 << 53) + 4, 1), tl.arange(2.0 ^ 53, 2.0 ^ 53 + 4, 1.0, { dtype = "int64" }):totable())
    assert.are.same({ -4, -1, 2 }, tl.arange(-4.0, 5, 3.0, { dtype = "int32" }):totable())
    assert.are.equal("float32", tl.arange(0, 2.5).dtype)
  end)

  it("casts the exact values once for other dtypes", function()
    local base = (1 << 53) + 1
    local t = tl.arange(base, base + 4, 1, { dtype = "float64" })
    local expected = {}
    for i = 0, 3 do expected[i + 1] = (base + i) + 0.0 end -- Lua rounds the integer to nearest
    assert.are.same(expected, t:totable())
    assert.are.same({ 10, 7, 4, 1 }, tl.arange(10, 0, -3, { dtype = "int32" }):totable())
  end)

  it("reports steps going the wrong way, zero steps and ranges that do not fit", function()
    assert.error_matches(function() tl.arange(1, MAX, 0) end, { "arange", "non-zero step" })
    assert.error_matches(function() tl.arange(MAX, MIN, 1) end, { "arange", "goes away from end" })
    assert.error_matches(function() tl.arange(MIN, MAX) end, { "arange", "18446744073709551615 elements", "limit" })
    assert.error_matches(function() tl.arange(-1, 1 << 62, 1) end, { "arange", "4611686018427387905 elements", "limit" })
    assert.error_matches(function() tl.arange(2147483640, 2147483649, 1, { dtype = "int32" }) end,
      { "arange", "2147483648", "do not fit int32" })
    assert.error_matches(function() tl.arange(-2147483650, 0, 1, { dtype = "int32" }) end, { "arange", "int32" })
    assert.error_matches(function() tl.arange(0, 3, { dtype = "bool" }) end, { "arange", "bool" })
    assert.error_matches(function() tl.arange(0.5, 3e19, 1e18, { dtype = "int64" }) end, { "arange", "do not fit int64" })
    assert.error_matches(function() tl.arange(0, 1e300, 1e-300) end, { "arange", "limit" })
  end)
end)
