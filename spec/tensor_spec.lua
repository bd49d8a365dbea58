-- Constructors, fields, item/totable types, casts between the 7 dtypes, many dims.
local tl = require("tlua")
local ref = require("helpers.reference")

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }
local FLOAT = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local INT = { int32 = true, int64 = true }

-- every element of a nested table (or a single value), in row-major order
local function leaves(v)
  if type(v) ~= "table" then return { v } end
  return (ref.flatten(v))
end

describe("tl.tensor", function()
  it("builds a 2-D tensor from nested tables with the same values and shape", function()
    local data = { { 1.5, -2.25, 3 }, { 4, 5.125, -6.5 } }
    local t = tl.tensor(data)
    assert.same({ 2, 3 }, t.shape)
    assert.equal("float32", t.dtype)
    assert.same(data, t:totable()) -- all values exact in float32
  end)

  it("infers int64 from Lua integers, float32 from any float, bool from booleans", function()
    assert.equal("int64", tl.tensor({ 1, 2, 3 }).dtype)
    assert.equal("int64", tl.tensor({ { 1 }, { -2 } }).dtype)
    assert.equal("float32", tl.tensor({ 1, 2.0, 3 }).dtype)
    assert.equal("float32", tl.tensor({ { 1, 2 }, { 3, 4.5 } }).dtype)
    assert.equal("bool", tl.tensor({ true, false }).dtype)
    assert.equal("int64", tl.tensor(7).dtype)
    assert.equal("float32", tl.tensor(7.5).dtype)
    assert.equal("bool", tl.tensor(true).dtype)
  end)

  it("makes a 0-dim tensor from a number", function()
    local t = tl.tensor(2.5)
    assert.same({}, t.shape)
    assert.equal(0, t:dim())
    assert.equal(1, t:numel())
    assert.equal(2.5, t:item())
    assert.equal(2.5, t:totable())
  end)

  it("honours opts.dtype", function()
    for _, dt in ipairs(DTYPES) do
      local t = tl.tensor({ 0, 1, 2 }, { dtype = dt })
      assert.equal(dt, t.dtype)
      if dt == "bool" then
        assert.same({ false, true, true }, t:totable())
      else
        assert.same({ 0, 1, 2 }, t:totable())
      end
    end
  end)

  it("stores large int64 values exactly (no float round trip)", function()
    local big = { 9007199254740993, -9007199254740993, math.maxinteger, math.mininteger }
    local t = tl.tensor(big)
    assert.equal("int64", t.dtype)
    local back = t:totable()
    for i = 1, #big do
      assert.equal(big[i], back[i])
      assert.equal("integer", math.type(back[i]))
    end
  end)

  it("rounds float64 data to float32 when the dtype is float32", function()
    local xs = { 0.1, 1 / 3, math.pi, -2.7182818284590451, 1e-30, 3e38 }
    local t = tl.tensor(xs)
    local expected = {}
    for i, x in ipairs(xs) do expected[i] = ref.round_f32(x) end
    assert.tensor_equal(expected, t)
    assert.tensor_equal(xs, tl.tensor(xs, { dtype = "float64" }))
  end)

  it("builds 3-D and empty tensors", function()
    local data = ref.build({ 2, 3, 4 }, function(i, j, k) return i * 100 + j * 10 + k end)
    local t = tl.tensor(data)
    assert.same({ 2, 3, 4 }, t.shape)
    assert.same(data, t:totable())
    local e = tl.tensor({})
    assert.same({ 0 }, e.shape)
    assert.equal(0, e:numel())
    assert.same({}, e:totable())
  end)
end)

describe("zeros / ones / full / empty", function()
  it("accept shapes as varargs and as a table", function()
    for _, make in ipairs({ tl.zeros, tl.ones, tl.empty }) do
      assert.same({ 2, 3 }, make(2, 3).shape)
      assert.same({ 2, 3 }, make({ 2, 3 }).shape)
      assert.same({ 4 }, make(4).shape)
      assert.same({ 1, 1, 5 }, make({ 1, 1, 5 }).shape)
      assert.same({}, make({}).shape)
      assert.equal("float32", make(2).dtype)
    end
  end)

  it("fill with 0 and 1 for every dtype", function()
    for _, dt in ipairs(DTYPES) do
      local z, o = tl.zeros(2, 3, { dtype = dt }), tl.ones({ 3, 2 }, { dtype = dt })
      assert.equal(dt, z.dtype)
      assert.equal(dt, o.dtype)
      local zero, one = 0, 1
      if dt == "bool" then zero, one = false, true end
      for _, v in ipairs(leaves(z:totable())) do assert.equal(zero, v) end
      for _, v in ipairs(leaves(o:totable())) do assert.equal(one, v) end
      assert.equal(6, #leaves(o:totable()))
    end
  end)

  it("empty has the requested shape, dtype and element count", function()
    local t = tl.empty(3, 4, { dtype = "int32" })
    assert.same({ 3, 4 }, t.shape)
    assert.equal("int32", t.dtype)
    assert.equal(12, t:numel())
    t:fill_(7) -- writable
    for _, v in ipairs(leaves(t:totable())) do assert.equal(7, v) end
  end)

  it("full fills with the value, in the dtype asked for", function()
    local t = tl.full({ 2, 2 }, 2.5)
    assert.same({ { 2.5, 2.5 }, { 2.5, 2.5 } }, t:totable())
    local i = tl.full({ 3 }, -4, { dtype = "int32" })
    assert.equal("int32", i.dtype)
    assert.same({ -4, -4, -4 }, i:totable())
    local d = tl.full({ 2 }, 0.1, { dtype = "float64" })
    assert.same({ 0.1, 0.1 }, d:totable())
    local f = tl.full({ 1 }, 0.1)
    assert.equal(ref.round_f32(0.1), f:totable()[1])
  end)

  it("allow zero-size dims", function()
    local t = tl.zeros(2, 0, 3)
    assert.same({ 2, 0, 3 }, t.shape)
    assert.equal(0, t:numel())
  end)
end)

describe("arange / linspace / eye", function()
  local function lua_arange(start, stop, step)
    local out, i = {}, 0
    while true do
      local v = start + i * step
      if (step > 0 and v >= stop) or (step < 0 and v <= stop) then break end
      out[#out + 1] = v
      i = i + 1
    end
    return out
  end

  it("arange(stop) gives 0 .. stop-1 as int64", function()
    local t = tl.arange(5)
    assert.equal("int64", t.dtype)
    assert.same({ 0, 1, 2, 3, 4 }, t:totable())
  end)

  it("arange(start, stop, step) matches a Lua loop for integer steps", function()
    for _, c in ipairs({ { 2, 11, 3 }, { -5, 5, 1 }, { 10, 0, -2 }, { 3, 4, 5 }, { 4, 4, 1 } }) do
      local t = tl.arange(c[1], c[2], c[3])
      assert.equal("int64", t.dtype)
      local expected = lua_arange(c[1], c[2], c[3])
      if #expected == 0 then
        assert.equal(0, t:numel())
      else
        assert.same(expected, t:totable())
      end
    end
  end)

  it("arange with a float argument gives float32 values of the Lua loop", function()
    local t = tl.arange(0, 1, 0.1)
    assert.equal("float32", t.dtype)
    local expected = lua_arange(0, 1, 0.1)
    assert.equal(#expected, t:numel()) -- 10 values
    assert.tensor_near(expected, t, 1e-6, 1e-6)
    local u = tl.arange(-1.5, 2)
    assert.equal("float32", u.dtype)
    assert.tensor_equal({ -1.5, -0.5, 0.5, 1.5 }, u)
  end)

  it("arange takes an options table", function()
    local t = tl.arange(1, 4, 1, { dtype = "float64" })
    assert.equal("float64", t.dtype)
    assert.same({ 1, 2, 3 }, t:totable())
    assert.equal("float", math.type(t:totable()[1]))
  end)

  it("linspace matches start + i*(stop-start)/(steps-1)", function()
    for _, c in ipairs({ { 0, 1, 11 }, { -2, 3, 7 }, { 5, -5, 4 }, { 1, 1, 3 } }) do
      local start, stop, steps = c[1], c[2], c[3]
      local t = tl.linspace(start, stop, steps)
      assert.equal("float32", t.dtype)
      local expected = {}
      for i = 0, steps - 1 do expected[i + 1] = start + i * (stop - start) / (steps - 1) end
      assert.tensor_near(expected, t, 1e-6, 1e-6)
      assert.equal(stop, t:totable()[steps]) -- the end point is exact
    end
    assert.same({ 2 }, tl.linspace(2, 9, 1):totable())
    local d = tl.linspace(0, 1, 5, { dtype = "float64" })
    assert.equal("float64", d.dtype)
    assert.tensor_near({ 0, 0.25, 0.5, 0.75, 1 }, d, 0, 1e-15)
  end)

  it("eye(n) and eye(n, m) have ones exactly on the diagonal", function()
    for _, c in ipairs({ { 3 }, { 2, 4 }, { 4, 2 }, { 1 } }) do
      local n, m = c[1], c[2] or c[1]
      local t = c[2] and tl.eye(n, m) or tl.eye(n)
      assert.same({ n, m }, t.shape)
      local expected = ref.build({ n, m }, function(i, j) return i == j and 1 or 0 end)
      assert.same(expected, t:totable())
    end
    local e = tl.eye(2, { dtype = "int32" })
    assert.equal("int32", e.dtype)
    assert.same({ { 1, 0 }, { 0, 1 } }, e:totable())
  end)
end)

describe("fields and queries", function()
  it("shape, dtype, device, size, dim, numel and #t", function()
    local t = tl.zeros(2, 3, 4)
    assert.same({ 2, 3, 4 }, t.shape)
    assert.equal("float32", t.dtype)
    assert.equal("cpu", t.device)
    assert.same({ 2, 3, 4 }, t:size())
    assert.equal(2, t:size(1))
    assert.equal(3, t:size(2))
    assert.equal(4, t:size(3))
    assert.equal(4, t:size(-1))
    assert.equal(2, t:size(-3))
    assert.equal(3, t:dim())
    assert.equal(24, t:numel())
    assert.equal(2, #t)
    assert.equal(5, #tl.ones(5))
  end)

  it("t.shape is a new table each time (editing it changes nothing)", function()
    local t = tl.zeros(2, 3)
    local s = t.shape
    s[1] = 99
    assert.same({ 2, 3 }, t.shape)
    assert.are_not.equal(t.shape, t.shape)
  end)

  it("dtype constants and aliases name the canonical dtypes", function()
    for _, dt in ipairs(DTYPES) do
      assert.equal(dt, tl[dt])
      assert.equal(dt, tl.zeros(1, { dtype = tl[dt] }).dtype)
    end
    local aliases = { float = "float32", double = "float64", half = "float16", int = "int32", long = "int64" }
    for alias, dt in pairs(aliases) do
      assert.equal(dt, tl.zeros(1, { dtype = alias }).dtype)
      assert.equal(dt, tl.zeros(1):to(alias).dtype)
    end
  end)

  it("tostring shows values, dtype and shape, and elides large tensors", function()
    local s = tostring(tl.tensor({ { 1.5, -2.25 }, { 3.75, 4 } }))
    for _, part in ipairs({ "1.5", "-2.25", "3.75", "float32" }) do
      assert.truthy(s:find(part, 1, true), ("'%s' not in %q"):format(part, s))
    end
    local big = tostring(tl.arange(100000))
    assert.truthy(big:find("int64", 1, true))
    assert.truthy(big:find("100000", 1, true), "the shape of the elided tensor is printed")
    assert.truthy(#big < 3000, "a 100000-element tensor prints elided, got " .. #big .. " characters")
    assert.truthy(big:find("99999", 1, true), "the last value is shown")
    assert.falsy(big:find("50000", 1, true), "a middle value is elided")
  end)

  it("__close and __gc release a tensor and are safe to run twice", function()
    local mt = getmetatable(tl.ones(1))
    assert.is_function(mt.__close)
    assert.is_function(mt.__gc)
    do
      local t <close> = tl.ones(3)
      assert.equal(3, t:numel())
    end
    local t = tl.ones(2)
    mt.__close(t)
    mt.__close(t)
    mt.__gc(t)
    assert.is_false(pcall(function() return t:sum() end), "a closed tensor is not usable")
    collectgarbage()
    collectgarbage()
    assert.equal(4, (tl.ones(2) + tl.ones(2)):sum():item())
  end)
end)

describe("item and totable", function()
  it("give Lua integers for int dtypes, floats for float dtypes, booleans for bool", function()
    for _, dt in ipairs(DTYPES) do
      local t = tl.tensor({ { 1, 0 }, { 3, 4 } }, { dtype = dt })
      local v = t:select(1, 1):select(1, 1):item()
      local tbl = t:totable()
      if FLOAT[dt] then
        assert.equal("float", math.type(v), dt)
        assert.equal(1.0, v)
        assert.equal("float", math.type(tbl[2][1]), dt)
        assert.equal(3.0, tbl[2][1])
      elseif INT[dt] then
        assert.equal("integer", math.type(v), dt)
        assert.equal(1, v)
        assert.equal("integer", math.type(tbl[2][2]), dt)
        assert.equal(4, tbl[2][2])
      else
        assert.equal(true, v)
        assert.same({ { true, false }, { true, true } }, tbl)
      end
    end
  end)

  it("item of a 0-dim and a 1-element tensor", function()
    assert.equal(6, tl.tensor({ 1, 2, 3 }):sum():item())
    assert.equal("integer", math.type(tl.tensor({ 1, 2, 3 }):sum():item()))
    assert.equal(-3.5, tl.tensor({ { -3.5 } }):item())
    assert.equal(false, tl.tensor({ false }):item())
  end)
end)

describe("casts", function()
  -- small integers are exact in every dtype (bool: 0 and 1)
  local function values_for(dt)
    if dt == "bool" then return { 0, 1, 1, 0, 1 } end
    return { 0, 1, -2, 7, 100, -128, 255 }
  end

  local function as_lua(v, dt)
    if dt == "bool" then return v ~= 0 end
    return v
  end

  it("round trip between every pair of the 7 dtypes keeps the values", function()
    for _, src in ipairs(DTYPES) do
      for _, dst in ipairs(DTYPES) do
        local vals = (src == "bool" or dst == "bool") and values_for("bool") or values_for(src)
        local expected_src, expected_dst = {}, {}
        for i, v in ipairs(vals) do
          expected_src[i] = as_lua(v, src)
          expected_dst[i] = as_lua(v, dst)
        end
        local a = tl.tensor(vals, { dtype = src })
        local b = a:to(dst)
        assert.equal(dst, b.dtype, src .. " -> " .. dst)
        assert.same(expected_dst, b:totable(), src .. " -> " .. dst)
        local c = b:to(src)
        assert.equal(src, c.dtype)
        assert.same(expected_src, c:totable(), src .. " -> " .. dst .. " -> " .. src)
      end
    end
  end)

  it("the named cast methods give their dtypes", function()
    local t = tl.tensor({ 1, 2 })
    assert.equal("float32", t:float().dtype)
    assert.equal("float64", t:double().dtype)
    assert.equal("bfloat16", t:bfloat16().dtype)
    assert.equal("float16", t:half().dtype)
    assert.equal("int32", t:int().dtype)
    assert.equal("int64", t:float():long().dtype)
    assert.equal("bool", t:bool().dtype)
    assert.same({ 1.0, 2.0 }, t:double():totable())
  end)

  it("float to int truncates toward zero (as C and torch do)", function()
    local t = tl.tensor({ 1.5, -1.5, 2.99, -2.99, 0.4 }, { dtype = "float64" })
    assert.same({ 1, -1, 2, -2, 0 }, t:int():totable())
    assert.same({ 1, -1, 2, -2, 0 }, t:long():totable())
  end)

  it("any nonzero value casts to true, zero to false; bool casts to 1 and 0", function()
    local t = tl.tensor({ 0.0, -0.5, 3, 0, 1e-30 }, { dtype = "float64" })
    assert.same({ false, true, true, false, true }, t:bool():totable())
    assert.same({ false, true, true, false }, tl.tensor({ 0, -7, 1, 0 }, { dtype = "int32" }):bool():totable())
    local b = tl.tensor({ true, false, true })
    assert.same({ 1.0, 0.0, 1.0 }, b:float():totable())
    assert.same({ 1, 0, 1 }, b:long():totable())
  end)

  it("float64 to float32/bfloat16/float16 rounds as the IEEE reference does", function()
    local rng = ref.rng(11)
    local xs = {}
    for i = 1, 200 do xs[i] = rng:uniform(-1000, 1000) end
    local t = tl.tensor(xs, { dtype = "float64" })
    for _, dt in ipairs({ "float32", "bfloat16", "float16" }) do
      local expected = {}
      for i, x in ipairs(xs) do expected[i] = ref.round_to(x, dt) end
      assert.tensor_equal(expected, t:to(dt))
    end
  end)

  it("to(dtype) on the same dtype and to('cpu') keep the values", function()
    local t = tl.tensor({ 1.25, 2.5 })
    assert.same({ 1.25, 2.5 }, t:to("float32"):totable())
    local c = t:to("cpu")
    assert.equal("cpu", c.device)
    assert.same({ 1.25, 2.5 }, c:totable())
  end)
end)

describe("many dims", function()
  it("an 8-dim tensor from nested tables keeps every element in place", function()
    local shape = { 2, 1, 2, 1, 3, 1, 2, 2 }
    local data = ref.build(shape, function(...)
      local v = 0
      for _, i in ipairs({ ... }) do v = v * 10 + i end
      return v
    end)
    local t = tl.tensor(data)
    assert.same(shape, t.shape)
    assert.equal(8, t:dim())
    assert.same(data, t:totable())
    -- a read through select on every dim
    assert.equal(ref.get(data, { 2, 1, 1, 1, 3, 1, 2, 1 }),
      t[2][1][1][1][3][1][2][1])
  end)

  it("9 to 16 dims work for zeros, sums and views", function()
    for nd = 9, 16 do
      local shape = {}
      for d = 1, nd do shape[d] = (d % 3 == 0) and 2 or 1 end
      local t = tl.ones(shape)
      assert.equal(nd, t:dim())
      assert.same(shape, t.shape)
      assert.equal(ref.numel(shape), t:sum():item())
      assert.same({ ref.numel(shape) }, t:view(-1).shape)
    end
  end)

  it("sums a 9-dim tensor over one dim like a Lua loop", function()
    local shape = { 2, 1, 2, 1, 2, 1, 2, 1, 3 }
    local rng = ref.rng(5)
    local data = ref.random_int_table(rng, shape, -9, 9)
    local t = tl.tensor(data)
    for _, dim in ipairs({ 1, 5, 9, -1 }) do
      assert.same(ref.reduce(data, "sum", dim), t:sum(dim):totable())
    end
  end)
end)
