-- Views (view, reshape, transpose, permute, narrow, select, squeeze, unsqueeze,
-- expand, flatten, contiguous, clone) against element-by-element reads of the
-- base with 1-based Lua loops; shared storage checked by writing through views.
local tl = require("tlua")
local ref = require("helpers.reference")

-- a base tensor whose elements all differ: value = 1000*i + 100*j + 10*k + l (1-based)
local function base(shape, dtype)
  local data = ref.build(shape, function(...)
    local v = 0
    for _, i in ipairs({ ... }) do v = v * 10 + i end
    return v
  end)
  return tl.tensor(data, { dtype = dtype or "float64" }), data
end

-- element of tensor t at a 1-based multi-index, read with t[i] chains
local function read(t, idx)
  local v = t
  for _, i in ipairs(idx) do v = v[i] end
  return v
end

-- checks view v (of shape `shape`) element by element: v[idx] == base_data[map(idx)]
local function check(v, shape, base_data, map)
  assert.same(shape, v.shape)
  local vt = v:totable()
  local n = 0
  ref.each_index(shape, function(idx)
    local expected = ref.get(base_data, map(idx))
    local got_chain = read(v, idx)
    local got_table = ref.get(vt, idx)
    if got_chain ~= expected or got_table ~= expected then
      error(("at %s: expected %s, got %s (t[i] reads) / %s (totable)"):format(
        ref.shape_str(idx), tostring(expected), tostring(got_chain), tostring(got_table)), 2)
    end
    n = n + 1
  end)
  assert.equal(ref.numel(shape), n)
end

describe("view", function()
  it("views a 2x3x4 tensor as 6x4, 4x-1 and -1 in row-major order", function()
    local t, data = base({ 2, 3, 4 })
    local flat = ref.flatten(data)
    local function from_flat(shape)
      return function(idx)
        local st, off = ref.strides(shape), 0
        for d = 1, #idx do off = off + (idx[d] - 1) * st[d] end
        -- flat offset -> base index
        local b, rem = {}, off
        for d, s in ipairs(ref.strides({ 2, 3, 4 })) do
          b[d] = rem // s + 1
          rem = rem % s
        end
        return b
      end
    end
    check(t:view(6, 4), { 6, 4 }, data, from_flat({ 6, 4 }))
    check(t:view(4, -1), { 4, 6 }, data, from_flat({ 4, 6 }))
    check(t:view({ -1, 2 }), { 12, 2 }, data, from_flat({ 12, 2 }))
    local v = t:view(-1)
    assert.same({ 24 }, v.shape)
    assert.same(flat, v:totable())
  end)

  it("shares storage with its base both ways", function()
    local t = base({ 2, 3 })
    local v = t:view(3, 2)
    v[3][2] = -1 -- flat element 6 = t[2][3]
    assert.equal(-1, t[2][3])
    t[1][2] = -2 -- flat element 2 = v[1][2]
    assert.equal(-2, v[1][2])
  end)

  it("keeps the dtype", function()
    local t = base({ 2, 2 }, "int32")
    assert.equal("int32", t:view(4).dtype)
    assert.equal("int32", t:transpose(1, 2).dtype)
  end)
end)

describe("reshape", function()
  it("does not copy a contiguous tensor (writes reach the base)", function()
    local t, data = base({ 2, 6 })
    local r = t:reshape(3, 4)
    check(r, { 3, 4 }, data, function(idx)
      local off = (idx[1] - 1) * 4 + idx[2] - 1
      return { off // 6 + 1, off % 6 + 1 }
    end)
    r[2][1] = 555 -- flat offset 4 = t[1][5]
    assert.equal(555, t[1][5])
  end)

  it("copies a transposed tensor (row-major order of the view, writes do not reach the base)", function()
    local t, data = base({ 2, 3 })
    local tt = t:transpose(1, 2) -- 3x2
    local r = tt:reshape(6)
    local expected = {}
    for i = 1, 3 do for j = 1, 2 do expected[#expected + 1] = data[j][i] end end
    assert.same(expected, r:totable())
    r[1] = 777
    assert.equal(data[1][1], t[1][1])
    assert.same(data, t:totable())
  end)

  it("accepts -1", function()
    local t = base({ 4, 6 })
    assert.same({ 3, 8 }, t:reshape(3, -1).shape)
    assert.same({ 2, 2, 6 }, t:reshape({ 2, -1, 6 }).shape)
  end)
end)

describe("transpose", function()
  it("swaps two dims: out[i][j][k] == base[k][j][i]", function()
    local t, data = base({ 2, 3, 4 })
    local v = t:transpose(1, 3)
    check(v, { 4, 3, 2 }, data, function(idx) return { idx[3], idx[2], idx[1] } end)
    assert.is_false(v:is_contiguous())
  end)

  it("takes negative dims", function()
    local t, data = base({ 2, 3, 4 })
    check(t:transpose(-1, -2), { 2, 4, 3 }, data, function(idx) return { idx[1], idx[3], idx[2] } end)
  end)

  it("shares storage", function()
    local t = base({ 2, 3 })
    local v = t:transpose(1, 2)
    v[3][1] = 42
    assert.equal(42, t[1][3])
  end)
end)

describe("t", function()
  it("transposes a matrix (a view), keeps a vector and a 0-dim tensor, and refuses more dims", function()
    local t, data = base({ 2, 3 })
    local v = t:t()
    check(v, { 3, 2 }, data, function(idx) return { idx[2], idx[1] } end)
    v[1][2] = 42
    assert.equal(42, t[2][1])
    local x = tl.tensor({ 1.0, 2.0, 3.0 }, { requires_grad = true })
    assert.are.same({ 3 }, x:t().shape)
    x:t():sum():backward()
    assert.tensor_equal({ 1.0, 1.0, 1.0 }, x.grad)
    assert.are.same({}, tl.tensor(5.0):t().shape)
    local ok, err = pcall(function() return tl.zeros(2, 2, 2):t() end)
    assert.is_false(ok)
    assert.matches("t: expected a tensor of at most 2 dims, got 3 (use transpose)", err, 1, true)
  end)
end)

describe("permute", function()
  it("reorders dims: permute(3, 1, 2) reads base[j][k][i] at [i][j][k]", function()
    local t, data = base({ 2, 3, 4 })
    local v = t:permute(3, 1, 2)
    check(v, { 4, 2, 3 }, data, function(idx) return { idx[2], idx[3], idx[1] } end)
  end)

  it("accepts a table and negative dims", function()
    local t, data = base({ 2, 3, 4 })
    local v = t:permute({ -1, -3, 2 })
    check(v, { 4, 2, 3 }, data, function(idx) return { idx[2], idx[3], idx[1] } end)
  end)

  it("of a 4-D tensor, written through", function()
    local t, data = base({ 2, 3, 2, 3 })
    local v = t:permute(2, 4, 1, 3)
    check(v, { 3, 3, 2, 2 }, data, function(idx) return { idx[3], idx[1], idx[4], idx[2] } end)
    v[3][1][2][2] = -5
    assert.equal(-5, t[2][3][2][1])
  end)
end)

describe("narrow", function()
  it("takes length elements from start (1-based) along a dim", function()
    local t, data = base({ 3, 5 })
    check(t:narrow(2, 2, 3), { 3, 3 }, data, function(idx) return { idx[1], idx[2] + 1 } end)
    check(t:narrow(1, 3, 1), { 1, 5 }, data, function(idx) return { idx[1] + 2, idx[2] } end)
    check(t:narrow(-1, 1, 5), { 3, 5 }, data, function(idx) return idx end)
  end)

  it("is contiguous along dim 1, not along dim 2, and shares storage", function()
    local t = base({ 4, 5 })
    assert.is_true(t:narrow(1, 2, 2):is_contiguous())
    local v = t:narrow(2, 2, 3)
    assert.is_false(v:is_contiguous())
    v[2][3] = 99
    assert.equal(99, t[2][4])
  end)
end)

describe("select", function()
  it("removes a dim at a 1-based index", function()
    local t, data = base({ 2, 3, 4 })
    check(t:select(1, 2), { 3, 4 }, data, function(idx) return { 2, idx[1], idx[2] } end)
    check(t:select(2, 3), { 2, 4 }, data, function(idx) return { idx[1], 3, idx[2] } end)
    check(t:select(3, 1), { 2, 3 }, data, function(idx) return { idx[1], idx[2], 1 } end)
  end)

  it("takes negative dims and indices", function()
    local t, data = base({ 2, 3, 4 })
    check(t:select(-1, -1), { 2, 3 }, data, function(idx) return { idx[1], idx[2], 4 } end)
    check(t:select(2, -3), { 2, 4 }, data, function(idx) return { idx[1], 1, idx[2] } end)
  end)

  it("of a 1-D tensor gives a 0-dim tensor; writes go to the base", function()
    local t = base({ 4 })
    local s = t:select(1, 3)
    assert.same({}, s.shape)
    assert.equal(3, s:item())
    s:fill_(-8)
    assert.equal(-8, t[3])
  end)
end)

describe("squeeze / unsqueeze", function()
  it("squeeze() drops every size-1 dim", function()
    local t, data = base({ 1, 3, 1, 2 })
    check(t:squeeze(), { 3, 2 }, data, function(idx) return { 1, idx[1], 1, idx[2] } end)
    assert.same({}, tl.ones(1, 1):squeeze().shape)
  end)

  it("squeeze(dim) drops that dim if its size is 1, else keeps the shape", function()
    local t, data = base({ 1, 3, 1, 2 })
    check(t:squeeze(3), { 1, 3, 2 }, data, function(idx) return { idx[1], idx[2], 1, idx[3] } end)
    check(t:squeeze(1), { 3, 1, 2 }, data, function(idx) return { 1, idx[1], idx[2], idx[3] } end)
    assert.same({ 1, 3, 1, 2 }, t:squeeze(2).shape)
    assert.same({ 1, 3, 2 }, t:squeeze(-2).shape)
  end)

  it("unsqueeze inserts a size-1 dim at a 1-based position (negative from the end)", function()
    local t, data = base({ 2, 3 })
    check(t:unsqueeze(1), { 1, 2, 3 }, data, function(idx) return { idx[2], idx[3] } end)
    check(t:unsqueeze(2), { 2, 1, 3 }, data, function(idx) return { idx[1], idx[3] } end)
    check(t:unsqueeze(3), { 2, 3, 1 }, data, function(idx) return { idx[1], idx[2] } end)
    check(t:unsqueeze(-1), { 2, 3, 1 }, data, function(idx) return { idx[1], idx[2] } end)
    check(t:unsqueeze(-3), { 1, 2, 3 }, data, function(idx) return { idx[2], idx[3] } end)
  end)

  it("share storage", function()
    local t = base({ 1, 3 })
    t:squeeze()[2] = 31
    assert.equal(31, t[1][2])
    t:unsqueeze(1)[1][1][3] = 32
    assert.equal(32, t[1][3])
  end)
end)

describe("expand", function()
  it("repeats size-1 dims without copying", function()
    local t, data = base({ 3, 1 })
    local v = t:expand(3, 4)
    check(v, { 3, 4 }, data, function(idx) return { idx[1], 1 } end)
    assert.is_false(v:is_contiguous())
    t[2][1] = -7 -- seen through every expanded column
    for j = 1, 4 do assert.equal(-7, v[2][j]) end
  end)

  it("keeps a size with -1 and adds leading dims", function()
    local t, data = base({ 3, 1 })
    check(t:expand(-1, 2), { 3, 2 }, data, function(idx) return { idx[1], 1 } end)
    local u, udata = base({ 3 })
    check(u:expand(2, 3), { 2, 3 }, udata, function(idx) return { idx[2] } end)
    check(u:expand({ 2, 2, 3 }), { 2, 2, 3 }, udata, function(idx) return { idx[3] } end)
  end)
end)

describe("flatten", function()
  it("flattens all dims, or a range of dims (1-based, inclusive)", function()
    local t, data = base({ 2, 3, 4 })
    assert.same(ref.flatten(data), t:flatten():totable())
    check(t:flatten(2), { 2, 12 }, data, function(idx)
      return { idx[1], (idx[2] - 1) // 4 + 1, (idx[2] - 1) % 4 + 1 }
    end)
    check(t:flatten(1, 2), { 6, 4 }, data, function(idx)
      return { (idx[1] - 1) // 3 + 1, (idx[1] - 1) % 3 + 1, idx[2] }
    end)
    check(t:flatten(2, -1), { 2, 12 }, data, function(idx)
      return { idx[1], (idx[2] - 1) // 4 + 1, (idx[2] - 1) % 4 + 1 }
    end)
  end)

  it("of a permuted tensor follows the view's order", function()
    local t, data = base({ 2, 3 })
    local f = t:transpose(1, 2):flatten()
    local expected = {}
    for j = 1, 3 do for i = 1, 2 do expected[#expected + 1] = data[i][j] end end
    assert.same(expected, f:totable())
  end)

  it("of a contiguous tensor shares storage", function()
    local t = base({ 2, 3 })
    t:flatten()[5] = 123
    assert.equal(123, t[2][2])
  end)
end)

describe("contiguous / is_contiguous / clone", function()
  it("contiguous of a transposed tensor is a contiguous copy with the same values", function()
    local t, data = base({ 3, 4 })
    local v = t:transpose(1, 2)
    local c = v:contiguous()
    assert.is_true(c:is_contiguous())
    check(c, { 4, 3 }, data, function(idx) return { idx[2], idx[1] } end)
    c[1][1] = -1
    assert.equal(data[1][1], t[1][1])
  end)

  it("contiguous of a contiguous tensor shares its storage", function()
    local t = base({ 2, 2 })
    assert.is_true(t:is_contiguous())
    t:contiguous()[2][2] = 66
    assert.equal(66, t[2][2])
  end)

  it("clone is an independent copy with the same dtype and values", function()
    local t, data = base({ 2, 3 }, "int64")
    local c = t:clone()
    assert.equal("int64", c.dtype)
    assert.same(data, c:totable())
    c[1][1] = 0
    assert.equal(data[1][1], t[1][1])
    local tc = t:transpose(1, 2):clone()
    check(tc, { 3, 2 }, data, function(idx) return { idx[2], idx[1] } end)
  end)

  it("is_contiguous for common layouts", function()
    local t = base({ 2, 3, 4 })
    assert.is_true(t:is_contiguous())
    assert.is_false(t:permute(2, 1, 3):is_contiguous())
    assert.is_true(t:select(1, 2):is_contiguous())
    assert.is_false(t:select(3, 2):is_contiguous())
    assert.is_true(t:view(6, 4):is_contiguous())
  end)
end)

describe("views of views", function()
  it("narrow of a transpose of a select reads the right elements", function()
    local t, data = base({ 3, 4, 5 })
    local v = t:select(1, 2):transpose(1, 2):narrow(1, 2, 3) -- [5,4] -> [3,4]
    check(v, { 3, 4 }, data, function(idx) return { 2, idx[2], idx[1] + 1 } end)
    v[3][4] = 1e6
    assert.equal(1e6, t[2][4][4])
  end)

  it("expand of an unsqueezed narrow", function()
    local t, data = base({ 4 })
    local v = t:narrow(1, 2, 2):unsqueeze(1):expand(3, 2)
    check(v, { 3, 2 }, data, function(idx) return { idx[2] + 1 } end)
  end)
end)

describe("t[i]", function()
  it("reads a number from a 1-D tensor, negative from the end", function()
    local t = tl.tensor({ 10, 20, 30, 40 })
    assert.equal(10, t[1])
    assert.equal(40, t[4])
    assert.equal(40, t[-1])
    assert.equal(10, t[-4])
    assert.equal("integer", math.type(t[2]))
  end)

  it("reads a row (select on dim 1) of an N-D tensor", function()
    local t, data = base({ 3, 4 })
    for i = 1, 3 do
      local row = t[i]
      assert.same({ 4 }, row.shape)
      assert.same(data[i], row:totable())
    end
    assert.same(data[3], t[-1]:totable())
  end)

  it("writes a number into a 1-D tensor element", function()
    local t = tl.zeros(4, { dtype = "float64" })
    t[2] = 2.5
    t[-1] = -1
    assert.same({ 0, 2.5, 0, -1 }, t:totable())
  end)

  it("fills a row with a number, copies a tensor, broadcasts a 1-element tensor", function()
    local t = tl.zeros(3, 4, { dtype = "float64" })
    t[1] = 7
    t[2] = tl.tensor({ 1, 2, 3, 4 }, { dtype = "float64" })
    t[3] = tl.tensor({ 9 }) -- float32 source, cast and broadcast
    assert.same({ { 7, 7, 7, 7 }, { 1, 2, 3, 4 }, { 9, 9, 9, 9 } }, t:totable())
  end)

  it("writes through a transposed view land in the base's columns", function()
    local t = tl.zeros(2, 3, { dtype = "int64" })
    local v = t:transpose(1, 2)
    v[2] = tl.tensor({ 5, 6 })
    assert.same({ { 0, 5, 0 }, { 0, 6, 0 } }, t:totable())
  end)
end)
