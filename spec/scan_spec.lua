-- cumsum and nonzero against plain Lua loops over the inputs' stored values: every dtype
-- (floating values k/8, whose prefix sums are exact, so results are compared exactly; int32 and
-- int64 values near their limits, int64 sums wrapping as Lua integers do; bool), every dim,
-- positive and negative, strided inputs (transposed, narrowed, expanded, permuted), 0-dim and
-- empty tensors, inputs large enough for the parallel paths, cumsum's gradient (a reverse prefix
-- sum), and clear errors; on the CPU and (tagged #cuda) on CUDA, with CUDA against the CPU too.
-- The kernel sweep and gradcheck check them as well (helpers/scan_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }
local FLOATING = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local WIDE = {
  int32 = { 2147483647, -2147483648, 2147483000, -2147483000, 123456789, 0, 1, -1, 3, 0 },
  int64 = { math.maxinteger, math.mininteger, (1 << 62) + 3, -(1 << 62) - 5, 123456789012345, 0,
            1, -1, 3, 0 },
}

-- a tensor of shape in dtype: k/8 (k in [-16, 16], a quarter zeros) for floating dtypes, values
-- near the limits for integers, true/false for bool
local function make(rng, shape, dtype)
  return tl.tensor(ref.build(shape, function()
    if dtype == "bool" then return rng:int(0, 1) == 1 end
    if WIDE[dtype] then return WIDE[dtype][rng:int(1, #WIDE[dtype])] end
    if rng:int(1, 4) == 1 then return 0.0 end
    return rng:int(-16, 16) / 8
  end), { dtype = dtype })
end

-- the stored values of t (any device) as a flat row-major list and its shape
local function stored(t)
  local shape = t.shape
  local values = t:to("cpu"):totable()
  if #shape == 0 then return { values }, shape end
  return (ref.flatten(values)), shape
end

local function as_number(v)
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end

-- the 1-based, positive form of a Lua dim of a tensor with ndim dims (a 0-dim tensor has one)
local function positive_dim(dim, ndim)
  local size = math.max(ndim, 1)
  return dim < 0 and dim + size + 1 or dim
end

-- cumsum along dim by Lua loops: element j adds the sum before it along dim (row-major order
-- visits that one first); integer sums in Lua integers (wrapping as int64 does), floating ones
-- in float64 then rounded to the dtype; returns the nested values and the result's dtype
local function ref_cumsum(t, dim, reverse)
  local flat, shape = stored(t)
  local d = positive_dim(dim, #shape)
  local stride = #shape > 0 and ref.strides(shape)[d] or 1
  local size = #shape > 0 and shape[d] or 1
  local out, n = {}, #flat
  local first, last, step = 1, n, 1
  if reverse then first, last, step = n, 1, -1 end
  for j = first, last, step do
    local i = ((j - 1) // stride) % size -- 0-based position along dim
    local has_prev = reverse and i < size - 1 or not reverse and i > 0
    local v = as_number(flat[j])
    out[j] = has_prev and out[j + (reverse and stride or -stride)] + v or v
  end
  local dtype = FLOATING[t.dtype] and t.dtype or "int64"
  for j = 1, n do
    if FLOATING[dtype] then out[j] = ref.round_to(out[j] + 0.0, dtype) else out[j] = math.tointeger(out[j]) end
  end
  return ref.unflatten(out, shape), dtype
end

-- the 1-based coordinates of the non-zero elements (NaN is non-zero, -0.0 zero), row-major
local function ref_nonzero(t)
  local flat, shape = stored(t)
  local rows = {}
  local j = 0
  if #shape == 0 then
    if flat[1] ~= 0 and flat[1] ~= false then rows[1] = {} end
    return rows
  end
  ref.each_index(shape, function(idx)
    j = j + 1
    local v = flat[j]
    if v ~= 0 and v ~= false then rows[#rows + 1] = { table.unpack(idx) } end
  end)
  return rows
end

local function check_cumsum(x, dim, what, via_function)
  local expected, dtype = ref_cumsum(x, dim)
  local got = via_function and tl.cumsum(x, dim) or x:cumsum(dim)
  assert.are.equal(dtype, got.dtype, what .. ": dtype")
  assert.are.same(x.shape, got.shape, what .. ": shape")
  assert.are.equal(x.device, got.device, what .. ": device")
  assert.tensor_equal(expected, got:to("cpu"), what)
end

local function check_nonzero(x, what)
  local rows = ref_nonzero(x)
  local got = x:nonzero()
  assert.are.equal("int64", got.dtype, what .. ": dtype")
  assert.are.same({ #rows, #x.shape }, got.shape, what .. ": shape")
  assert.are.equal(x.device, got.device, what .. ": device")
  if #rows > 0 and #x.shape > 0 then assert.tensor_equal(rows, got:to("cpu"), what) end
end

local function specs(device)
  for _, dtype in ipairs(DTYPES) do
    it(("cumsum in %s along every dim, positive and negative"):format(dtype), function()
      local rng = ref.rng(101)
      for _, shape in ipairs({ { 5 }, { 3, 4 }, { 2, 3, 4 } }) do
        local x = make(rng, shape, dtype):to(device)
        for dim = 1, #shape do
          check_cumsum(x, dim, ("cumsum(%d) of %s"):format(dim, ref.shape_str(shape)), dim % 2 == 0)
          check_cumsum(x, dim - #shape - 1, ("cumsum(%d) of %s"):format(dim - #shape - 1, ref.shape_str(shape)),
            dim % 2 == 1)
        end
      end
    end)

    it(("cumsum in %s of strided inputs: transposed, narrowed, expanded, permuted"):format(dtype), function()
      local rng = ref.rng(202)
      local base = make(rng, { 4, 6 }, dtype):to(device)
      local cube = make(rng, { 2, 3, 4 }, dtype):to(device)
      local column = make(rng, { 3, 1 }, dtype):to(device)
      local views = {
        transposed = base:transpose(1, 2),
        narrowed = base:narrow(2, 2, 3),
        expanded = column:expand(3, 5),
        permuted = cube:permute(3, 1, 2),
        stepped = base:transpose(1, 2):narrow(1, 2, 4),
      }
      for name, v in pairs(views) do
        assert.is_false(v:is_contiguous(), name)
        for dim = 1, #v.shape do check_cumsum(v, dim, ("cumsum(%d) of a %s view"):format(dim, name)) end
      end
    end)

    it(("nonzero in %s: coordinates in row-major order, 1-based, strided inputs too"):format(dtype), function()
      local rng = ref.rng(303)
      for _, shape in ipairs({ { 7 }, { 3, 4 }, { 2, 3, 4 } }) do
        local x = make(rng, shape, dtype)
        if FLOATING[dtype] then -- NaN counts, -0.0 does not
          local flat = ref.flatten(x:totable())
          flat[1], flat[#flat] = 0 / 0, -0.0
          x = tl.tensor(ref.unflatten(flat, shape), { dtype = dtype })
        end
        x = x:to(device)
        check_nonzero(x, "nonzero of " .. ref.shape_str(shape))
        assert.tensor_equal(tl.nonzero(x), x:nonzero())
      end
      local base = make(rng, { 4, 5 }, dtype):to(device)
      check_nonzero(base:transpose(1, 2), "nonzero of a transposed view")
      check_nonzero(base:narrow(1, 2, 2), "nonzero of a narrowed view")
      check_nonzero(tl.zeros(3, 4, { dtype = dtype, device = device }), "nonzero of zeros")
    end)
  end

  it("cumsum of 0-dim tensors: dim 1 or -1, a copy (integers and bool as int64)", function()
    for _, dtype in ipairs(DTYPES) do
      local x = tl.tensor(dtype == "bool" and true or 3, { dtype = dtype, device = device })
      for _, dim in ipairs({ 1, -1 }) do
        local y = x:cumsum(dim)
        assert.are.same({}, y.shape)
        assert.are.equal(FLOATING[dtype] and dtype or "int64", y.dtype)
        assert.are.equal(dtype == "bool" and 1 or 3, y:item())
      end
    end
    local x = tl.tensor(2.5, { device = device })
    local y = x:cumsum(1)
    y:fill_(7)
    assert.are.equal(2.5, x:item()) -- a copy, not a view
  end)

  it("cumsum of empty tensors along every dim keeps the shape", function()
    for _, dtype in ipairs({ "float32", "bfloat16", "int32", "bool" }) do
      for _, shape in ipairs({ { 0 }, { 0, 3 }, { 2, 0 }, { 2, 0, 3 } }) do
        local x = tl.zeros(shape, { dtype = dtype, device = device })
        for dim = -#shape, #shape do
          if dim ~= 0 then
            local y = x:cumsum(dim)
            assert.are.same(shape, y.shape)
            assert.are.equal(FLOATING[dtype] and dtype or "int64", y.dtype)
            assert.are.equal(0, y:numel())
          end
        end
      end
    end
  end)

  it("nonzero of 0-dim and empty tensors", function()
    local function shape_of(v, dtype) return tl.tensor(v, { dtype = dtype, device = device }):nonzero().shape end
    assert.are.same({ 1, 0 }, shape_of(true, "bool"))
    assert.are.same({ 0, 0 }, shape_of(false, "bool"))
    assert.are.same({ 1, 0 }, shape_of(0 / 0, "float32"))
    assert.are.same({ 0, 0 }, shape_of(-0.0, "float64"))
    assert.are.same({ 1, 0 }, shape_of(-5, "int32"))
    for _, shape in ipairs({ { 0 }, { 0, 3 }, { 2, 0 }, { 2, 0, 3 } }) do
      local y = tl.ones(shape, { dtype = "int64", device = device }):nonzero()
      assert.are.same({ 0, #shape }, y.shape)
      assert.are.equal("int64", y.dtype)
    end
    -- an empty view whose offset points far past its (empty) storage: nothing is read
    local far = tl.zeros(1 << 62, 0, { device = device })[-757060737482418141]
    assert.are.same({ 0, 1 }, far:nonzero().shape)
    assert.are.same({ 0 }, far:cumsum(1).shape)
  end)

  it("large inputs (parallel and multi-tile paths) match Lua loops", function()
    local rng = ref.rng(404)
    -- long rows, long strided rows, many short rows, many long columns
    for _, case in ipairs({ { { 3, 5000 }, 2 }, { { 5000, 3 }, 1 }, { { 70000, 3 }, 2 },
                            { { 300, 200 }, 1 }, { { 300, 200 }, 2 } }) do
      for _, dtype in ipairs({ "float64", "float32", "int64" }) do
        local x = make(rng, case[1], dtype):to(device)
        check_cumsum(x, case[2], ("cumsum(%d) of %s in %s"):format(case[2], ref.shape_str(case[1]), dtype))
      end
    end
    for _, shape in ipairs({ { 100003 }, { 300, 200 }, { 7, 50, 101 } }) do
      local x = make(rng, shape, "bool"):to(device)
      check_nonzero(x, "nonzero of " .. ref.shape_str(shape))
      local sparse = tl.zeros(shape, { device = device })
      sparse:view(-1)[#sparse:view(-1)] = 1 -- only the last element
      check_nonzero(sparse, "nonzero of one element of " .. ref.shape_str(shape))
    end
    -- over a million elements (CUDA: more tiles than its scan's block has threads), four set
    local big = tl.zeros(1100000, { dtype = "bool", device = device })
    for _, i in ipairs({ 1, 4097, 600000, 1100000 }) do big[i] = true end
    assert.tensor_equal({ { 1 }, { 4097 }, { 600000 }, { 1100000 } }, big:nonzero():to("cpu"))
  end)

  it("cumsum's gradient is the reverse prefix sum of the output's gradient", function()
    local rng = ref.rng(505)
    for _, dtype in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
      for _, shape in ipairs({ { 6 }, { 3, 4 }, { 2, 3, 4 } }) do
        for dim = -#shape, #shape do
          if dim ~= 0 then
            local x = make(rng, shape, dtype):to(device):requires_grad_()
            local g = make(rng, shape, dtype):to(device)
            x:cumsum(dim):backward(g)
            local expected = ref_cumsum(g, dim, true)
            assert.are.equal(dtype, x.grad.dtype)
            assert.tensor_equal(expected, x.grad:to("cpu"),
              ("gradient of cumsum(%d) of %s in %s"):format(dim, ref.shape_str(shape), dtype))
          end
        end
      end
    end
    -- through a strided input and an expanded gradient (sum's backward), and a 0-dim input
    local x = make(rng, { 4, 3 }, "float64"):to(device):requires_grad_()
    x:transpose(1, 2):cumsum(2):sum():backward()
    assert.tensor_equal(ref.build({ 4, 3 }, function(i) return 5.0 - i end), x.grad:to("cpu"))
    local s = tl.tensor(1.5, { dtype = "float64", device = device, requires_grad = true })
    s:cumsum(-1):backward(tl.tensor(2.0, { dtype = "float64", device = device }))
    assert.are.equal(2.0, s.grad:item())
    assert.are.equal("cumsum", make(rng, { 3 }, "float32"):to(device):requires_grad_():cumsum(1).grad_fn)
  end)

  it("nonzero records no gradient", function()
    local x = tl.randn(3, 4, { device = device, requires_grad = true })
    local y = x:nonzero()
    assert.is_false(y.requires_grad)
    assert.is_nil(y.grad_fn)
  end)
end

describe("cumsum and nonzero on the cpu", function()
  specs("cpu")
end)

describe("cumsum and nonzero refuse bad input", function()
  local x = tl.randn(2, 3)
  local cases = {
    { "dim past the last", function() return x:cumsum(3) end,
      { "cumsum: dim 3 is out of range for a tensor with 2 dims", "expected 1 to 2, or -2 to -1" } },
    { "negative dim past the first", function() return tl.cumsum(x, -3) end,
      { "cumsum: dim -3 is out of range for a tensor with 2 dims" } },
    { "dim 0", function() return x:cumsum(0) end, { "cumsum: dim 0 is out of range", "count from 1" } },
    { "dim 2 of a 0-dim tensor", function() return tl.tensor(1.0):cumsum(2) end,
      { "cumsum: dim 2 is out of range for a tensor with 0 dims", "expected 1 to 1" } },
    { "no dim", function() return x:cumsum() end, { "cumsum: argument 1 expected a dim (an integer), got no value" } },
    { "no dim (function form)", function() return tl.cumsum(x) end,
      { "cumsum: argument 2 expected a dim (an integer), got no value" } },
    { "a fractional dim", function() return x:cumsum(1.5) end, { "cumsum", "expected an integer, got 1.5" } },
    { "a string dim", function() return x:cumsum("rows") end, { "cumsum", "expected a dim (an integer), got string" } },
    { "cumsum of a number", function() return tl.cumsum(3, 1) end, { "cumsum: argument 1 expected a tensor, got number" } },
    { "nonzero of a table", function() return tl.nonzero({ 1, 0 }) end, { "nonzero: argument 1 expected a tensor, got table" } },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": a clear error, the input unchanged, the engine usable after", function()
      local before = x:clone()
      assert.error_matches(c[2], c[3])
      assert.tensor_equal(before, x)
      check_cumsum(x, 2, "cumsum after the error")
    end)
  end
end)

describe("cumsum and nonzero on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of cumsum and nonzero did not run")
    return
  end
  specs("cuda")

  it("cuda gives the cpu's results on random inputs", function()
    tl.manual_seed(7)
    for _, dtype in ipairs({ "float32", "float64", "bfloat16", "float16" }) do
      local x = tl.randn(37, 300):to(dtype)
      local tol = ({ float64 = 1e-12, float32 = 1e-5, bfloat16 = 2e-2, float16 = 2e-3 })[dtype]
      for dim = 1, 2 do
        assert.tensor_near(x:cumsum(dim):double(), x:cuda():cumsum(dim):cpu():double(), tol, tol,
          ("cumsum(%d) in %s"):format(dim, dtype))
      end
      local m = tl.randn(4000, 3):gt(0.5):to(dtype)
      assert.tensor_equal(m:nonzero(), m:cuda():nonzero():cpu())
    end
  end)
end)
