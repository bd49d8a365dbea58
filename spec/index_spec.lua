-- gather and scatter_add along a dim against Lua loops: every dtype with a kernel, each dim of
-- 2-d and 3-d inputs, index smaller than the input, strided operands, duplicate indices adding up;
-- their gradients (each one's is the other); bad input is a clear error naming the op, the
-- argument and what was expected, the inputs unchanged. The same comparisons run on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local C = require("helpers.index_cases")

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

local function dtypes_of(op, device)
  local list = {}
  for _, k in ipairs(tl.kernels()) do
    if k.op == op and k.device == device then list[#list + 1] = k.dtype end
  end
  return list
end

local function values(d, rng, shape)
  return tl.tensor(ref.build(shape, function()
    if floating[d] then return rng:uniform(-2, 2) end
    if d == "bool" then return rng:int(0, 1) == 1 end
    return rng:int(-5, 5)
  end), { dtype = d })
end

local function indices(rng, shape, limit)
  return tl.tensor(ref.build(shape, function() return rng:int(1, limit) end), { dtype = "int64" })
end

local function near(expected, got, d, what)
  if floating[d] then
    local tol = ({ float64 = 1e-12, float32 = 1e-5, bfloat16 = 3e-2, float16 = 4e-3 })[d]
    assert.tensor_near(expected, got, tol, tol, what)
  else
    assert.tensor_equal(expected, got, what)
  end
end

-- {x shape, dim, index shape}: every dim of 2-d and 3-d inputs, index smaller than x
local CASES = {
  { { 3, 4 }, 1, { 5, 4 } }, { { 3, 4 }, 2, { 3, 6 } }, { { 3, 4 }, -1, { 2, 3 } },
  { { 2, 3, 4 }, 1, { 2, 3, 4 } }, { { 2, 3, 4 }, 2, { 2, 5, 3 } }, { { 2, 3, 4 }, 3, { 1, 2, 7 } },
}

local function compare(device)
  for _, d in ipairs(dtypes_of("gather", device)) do
    it("gather in " .. d .. " matches the Lua loops", function()
      local rng = ref.rng(11 + #d)
      for _, c in ipairs(CASES) do
        local xshape, dim, ishape = c[1], c[2], c[3]
        local nd = dim < 0 and #xshape + 1 + dim or dim
        local x = values(d, rng, xshape)
        local index = indices(rng, ishape, xshape[nd])
        local got = x:to(device):gather(dim, index:to(device))
        near(C.gather_ref(x:totable(), nd, index:totable(), ishape), got:to("cpu"), d,
          string.format("gather %s dim %d on %s", d, dim, device))
        -- a transposed x and index read the same values
        local xt = x:transpose(1, 2):contiguous():transpose(1, 2):to(device)
        near(C.gather_ref(x:totable(), nd, index:totable(), ishape), xt:gather(dim, index:to(device)):to("cpu"),
          d, "gather of a strided x")
      end
    end)
  end
  for _, d in ipairs(dtypes_of("scatter_add", device)) do
    it("scatter_add in " .. d .. " matches the Lua loops, duplicates adding up", function()
      local rng = ref.rng(23 + #d)
      local add = floating[d] and function(a, b) return a + b end
        or function(a, b) return K.wrap(d, a + b) end
      for _, c in ipairs(CASES) do
        local xshape, dim, ishape = c[1], c[2], c[3]
        local nd = dim < 0 and #xshape + 1 + dim or dim
        local sshape = { table.unpack(ishape) }
        sshape[1] = sshape[1] + 1 -- src may reach past index
        local x, src = values(d, rng, xshape), values(d, rng, sshape)
        local index = indices(rng, ishape, xshape[nd])
        local got = x:to(device):scatter_add(dim, index:to(device), src:to(device))
        near(C.scatter_add_ref(x:totable(), nd, index:totable(), src:totable(), ishape, add), got:to("cpu"), d,
          string.format("scatter_add %s dim %d on %s", d, dim, device))
      end
    end)
  end
end

-- index_select and masked_fill on device against Lua loops, with their gradients (CPU)
local function select_and_fill(device)
  for _, d in ipairs(dtypes_of("gather", device)) do
    it("index_select and masked_fill in " .. d .. " match the Lua loops", function()
      local rng = ref.rng(41 + #d)
      local x = values(d, rng, { 3, 4 })
      local t = x:totable()
      local pick = tl.tensor({ 4, 1, 4, 2 })
      local got = x:to(device):index_select(2, pick:to(device)):to("cpu")
      near(ref.build({ 3, 4 }, function(i, j) return t[i][({ 4, 1, 4, 2 })[j]] end), got, d, "index_select dim 2")
      got = x:to(device):index_select(-2, tl.tensor({ 3, 3 }):to(device)):to("cpu")
      near({ t[3], t[3] }, got, d, "index_select dim -2")
      local mask = tl.tensor({ { true, false, false, true } })
      local fill = d == "bool" and true or 2
      got = x:to(device):masked_fill(mask:to(device), fill):to("cpu")
      near(ref.build({ 3, 4 }, function(i, j) return (j == 1 or j == 4) and fill or t[i][j] end), got, d, "masked_fill")
    end)
  end
end

describe("gather and scatter_add on the cpu", function()
  compare("cpu")
  select_and_fill("cpu")

  it("index_select's and masked_fill's gradients (against finite differences) and bad input", function()
    local gradcheck = tl.autograd.gradcheck
    local x = tl.randn(3, 4):double():requires_grad_()
    assert.is_true(gradcheck(function(a) return a:index_select(2, tl.tensor({ 2, 2, 4 })) end, { x }))
    assert.is_true(gradcheck(function(a) return a:masked_fill(tl.tensor({ true, false, true, false }), 0.5) end, { x }))
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, err, 1, true)
    end
    local y = tl.zeros(2, 3)
    fails("index_select: index holds 0", function() return y:index_select(2, tl.tensor({ 0 })) end)
    fails("index_select: index must be a 1-d tensor of positions, got 2 dims",
      function() return y:index_select(2, tl.tensor({ { 1 } })) end)
    fails("index_select: dim 3 is out of range", function() return y:index_select(3, tl.tensor({ 1 })) end)
    fails("masked_fill: mask must be a bool tensor, got float32", function() return y:masked_fill(y, 1) end)
    fails("masked_fill: mask of shape [2] does not broadcast to x's shape [2, 3]",
      function() return y:masked_fill(tl.tensor({ true, false }), 1) end)
    fails("expected a number or a boolean, got string", function() return y:masked_fill(y:gt(0), "a") end)
  end)

  it("duplicates add in index order on the cpu: the same bits every run", function()
    local x = tl.zeros({ 1, 3 })
    local src = tl.tensor({ { 1e8, 1, -1e8, 1 } })
    local index = tl.tensor({ { 2, 2, 2, 2 } })
    local y = x:scatter_add(2, index, src)
    -- in index order, rounding to float32 after each add: 1e8 + 1 rounds to 1e8, so 1, not 2
    local f = ref.round_f32
    assert.are.equal(f(f(f(1e8 + 1) - 1e8) + 1), y:totable()[1][2])
    assert.are.equal(1, y:totable()[1][2])
  end)

  it("gradients: gather's is a scatter_add, scatter_add's a gather (against finite differences)", function()
    local gradcheck = tl.autograd.gradcheck
    local index = tl.tensor({ { 3, 1, 1 }, { 2, 2, 4 } })
    local x = tl.randn(2, 4):double():requires_grad_()
    assert.is_true(gradcheck(function(a) return a:gather(2, index) end, { x }))
    local src = tl.randn(3, 3):double():requires_grad_()
    assert.is_true(gradcheck(function(a, s) return a:scatter_add(2, index, s) end, { x, src }))
  end)

  it("rejects bad input with the op, the argument and what was expected; x unchanged", function()
    local x = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float32" })
    local before = x:totable()
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, err, 1, true)
      assert.are.same(before, x:totable())
    end
    local good = tl.tensor({ { 1, 2 }, { 3, 1 } })
    fails("gather: index holds 4 at position 2 (shape [2, 2]), out of range for the size along dim (expected 1 <= index <= 3",
      function() return x:gather(2, tl.tensor({ { 1, 4 }, { 1, 1 } })) end)
    fails("gather: index holds 0", function() return x:gather(2, tl.tensor({ { 0, 1 }, { 1, 1 } })) end)
    fails("gather: dim 3 is out of range", function() return x:gather(3, good) end)
    fails("gather: index must have as many dims as x (2), got 1", function() return x:gather(2, tl.tensor({ 1, 2 })) end)
    fails("gather: index (shape [3, 2]) is larger than x (shape [2, 3]) along dim 1",
      function() return x:gather(2, tl.tensor({ { 1, 1 }, { 1, 1 }, { 1, 1 } })) end)
    fails("gather: index must be an int64 or int32 tensor of 1-based indices, got float32",
      function() return x:gather(2, tl.tensor({ { 1.0 } })) end)
    fails("scatter_add: src must have x's dtype float32, got float64",
      function() return x:scatter_add(2, good, tl.ones({ 2, 2 }, { dtype = "float64" })) end)
    fails("scatter_add: index (shape [2, 2]) is larger than src (shape [2, 1]) along dim 2",
      function() return x:scatter_add(2, good, tl.ones(2, 1)) end)
    fails("scatter_add: index holds 5", function() return x:scatter_add(2, tl.tensor({ { 5 } }), tl.ones(1, 1)) end)
  end)
end)

describe("gather and scatter_add on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of gather and scatter_add did not run")
    return
  end
  compare("cuda")
  select_and_fill("cuda")

  it("an index out of range is raised at the next synchronization, in Lua's terms", function()
    local x = tl.ones({ 2, 3 }, { device = "cuda" })
    local ok, err = pcall(function() return x:gather(2, tl.tensor({ { 1, 9 }, { 1, 1 } }, { device = "cuda" })):to("cpu") end)
    assert.is_false(ok)
    assert.matches("gather: index holds 9", err, 1, true)
  end)
end)
