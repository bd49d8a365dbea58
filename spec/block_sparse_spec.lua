-- tl.block_sparse_linear and nn.BlockSparseLinear against loop-built layouts and a dense float64 reference (#cuda).
local tl = require("tlua")
local ref = require("helpers.block_sparse_ref")
local files = require("helpers.files")
local nn = tl.nn

local T, F = true, false
local DTYPES = { "float64", "float32", "bfloat16", "float16" }

local ops_of = require("helpers.trace").op_counts

local function with_last(lead, width)
  local s = {}
  for i, v in ipairs(lead) do s[i] = v end
  s[#s + 1] = width
  return s
end

-- a layout table (tensors) equals the reference one (Lua arrays) field by field
local function assert_layout(expected, got, what)
  for _, name in ipairs(ref.FIELDS) do
    local t = got[name]
    assert.is_true(tl.is_tensor(t), what .. ": " .. name .. " is not a tensor")
    assert.are.equal("int32", t.dtype, what .. ": " .. name)
    assert.are.same({ #expected[name] }, t.shape, what .. ": " .. name .. " shape")
    assert.are.same(expected[name], t:to("cpu"):totable(), what .. ": " .. name)
  end
end

-- runs the op on random data of case c (mask, block, lead) in dtype on device and compares
-- the output and the x, blocks and bias gradients of y:backward(g) with the float64 reference
local function check_op(c, dtype, with_bias, device)
  device = device or "cpu"
  local rtol, atol = ref.TOL[dtype][1], ref.TOL[dtype][2]
  local l, b = ref.layout(c.mask), c.block
  local layout = nn.block_layout(ref.mask_tensor(c.mask):to(device))
  local blocks = ref.draw({ l.nnz, b, b }, dtype, device):requires_grad_()
  local bias = with_bias and ref.draw({ l.R * b }, dtype, device):requires_grad_() or nil
  local x = ref.draw(with_last(c.lead, l.C * b), dtype, device):requires_grad_()
  local y = tl.block_sparse_linear(x, blocks, layout, bias)
  local what = ("%s, %s, bias %s"):format(c.name, dtype, tostring(with_bias))
  assert.are.same(with_last(c.lead, l.R * b), y.shape, what)
  assert.are.equal(dtype, y.dtype)
  assert.are.equal(x.device, y.device)
  local W = ref.dense_weight(blocks, l)
  assert.tensor_near(ref.forward(x, W, bias), ref.f64(y), rtol, atol, what .. ": output")
  local g = ref.draw(y.shape, dtype, device)
  y:backward(g)
  local r = ref.grads(x, g, W, l, b)
  assert.tensor_near(r.x, ref.f64(x.grad), rtol, atol, what .. ": dx")
  assert.tensor_near(r.blocks, ref.f64(blocks.grad), rtol, atol, what .. ": dblocks")
  assert.are.equal(dtype, x.grad.dtype)
  assert.are.equal(dtype, blocks.grad.dtype)
  if bias then assert.tensor_near(r.bias, ref.f64(bias.grad), rtol, atol, what .. ": dbias") end
end

-- a mask of R x C from the seeded RNG with the given block rows and columns emptied
local function random_mask(rng, R, C, density, empty_rows, empty_cols)
  local m = ref.mask(R, C, { rng = rng, density = density })
  for _, r in ipairs(empty_rows or {}) do for c = 1, C do m[r][c] = false end end
  for _, c in ipairs(empty_cols or {}) do for r = 1, R do m[r][c] = false end end
  return m
end

-- ---------------------------------------------------------------------------------------------
describe("block layouts against loops over the mask", function()
  it("random masks from 1x1 to 7x4 at several densities", function()
    local rng = ref.rng(20240611)
    for _, size in ipairs({ { 1, 1 }, { 3, 5 }, { 7, 4 }, { 5, 3 }, { 6, 6 }, { 1, 9 }, { 8, 1 } }) do
      for _, density in ipairs({ 0.2, 0.5, 0.9 }) do
        local m = ref.mask(size[1], size[2], { rng = rng, density = density })
        local what = ("%dx%d at %.1f"):format(size[1], size[2], density)
        local expected = ref.layout(m)
        local got = nn.block_layout(ref.mask_tensor(m))
        assert_layout(expected, got, what)
        assert.is_true(tl.block_layout_validate(got, expected.nnz))
        assert.tensor_equal(ref.mask_tensor(m), nn.block_mask(got, size[1], size[2]))
        -- the loop-built layout is accepted and maps back to the same mask
        local mine = ref.layout_tensors(expected)
        assert.is_true(tl.block_layout_validate(mine, expected.nnz))
        assert.tensor_equal(ref.mask_tensor(m), nn.block_mask(mine, size[1], size[2]))
      end
    end
  end)

  it("all false (nnz 0), all true, empty rows and columns, one block", function()
    local masks = {
      { name = "all false", m = ref.mask(3, 4, nil, function() return false end) },
      { name = "1x1 false", m = { { F } } },
      { name = "1x1 true", m = { { T } } },
      { name = "all true", m = ref.mask(4, 3, nil, function() return true end) },
      { name = "empty rows and columns", m = { { F, F, F, F, F }, { T, F, T, F, T }, { F, F, F, F, F },
                                                { F, F, T, F, F }, { T, F, F, F, T } } },
      { name = "a diagonal", m = ref.mask(5, 5, nil, function(r, c) return r == c end) },
      { name = "an anti-diagonal", m = ref.mask(4, 6, nil, function(r, c) return r + c == 6 end) },
    }
    for _, case in ipairs(masks) do
      local R, C = #case.m, #case.m[1]
      local expected = ref.layout(case.m)
      local got = nn.block_layout(ref.mask_tensor(case.m))
      assert_layout(expected, got, case.name)
      assert.is_true(tl.block_layout_validate(got, expected.nnz))
      assert.tensor_equal(ref.mask_tensor(case.m), nn.block_mask(got, R, C))
    end
    assert.are.same({ 0, 0, 0, 0 }, nn.block_layout(tl.zeros(3, 4, { dtype = "bool" })).row_offsets:totable())
    assert.are.same({ 0, 3, 6, 9, 12 }, nn.block_layout(tl.ones(4, 3, { dtype = "bool" })).row_offsets:totable())
  end)

  it("a transposed (strided) mask gives the layout of its values", function()
    local m = random_mask(ref.rng(7), 4, 6, 0.5)
    local mt = {}
    for c = 1, 6 do
      mt[c] = {}
      for r = 1, 4 do mt[c][r] = m[r][c] end
    end
    assert_layout(ref.layout(mt), nn.block_layout(ref.mask_tensor(m):transpose(1, 2)), "transposed")
  end)

  it("random_block_mask keeps max(1, floor(d * C + 0.5)) blocks in every row", function()
    for _, case in ipairs({ { 5, 7, 0.5 }, { 4, 7, 0.01 }, { 3, 8, 0.25 }, { 6, 3, 1 }, { 2, 10, 0.75 },
                            { 1, 1, 0.3 }, { 3, 4, 0.125 } }) do
      local R, C, d = case[1], case[2], case[3]
      tl.manual_seed(5)
      local mask = nn.random_block_mask(R, C, d)
      assert.are.equal("bool", mask.dtype)
      assert.are.same({ R, C }, mask.shape)
      local keep = math.max(1, math.floor(d * C + 0.5))
      for r, n in ipairs(ref.row_counts(mask)) do
        assert.are.equal(keep, n, ("%dx%d at %g, row %d"):format(R, C, d, r))
      end
      tl.manual_seed(5)
      assert.tensor_equal(mask, nn.random_block_mask(R, C, d)) -- repeatable
    end
  end)

  it("random_block_mask and block_layout refuse bad arguments", function()
    for _, d in ipairs({ 0, -1, 1.5, "x", 0 / 0 }) do
      assert.error_matches(function() return nn.random_block_mask(3, 4, d) end,
        { "nn.random_block_mask", "density must be a number in (0, 1]", "got " .. tostring(d) })
    end
    assert.error_matches(function() return nn.block_layout(tl.ones(2, 2)) end,
      { "nn.block_layout", "2-D bool tensor", "float32" })
    assert.error_matches(function() return nn.block_layout(tl.ones(4, { dtype = "bool" })) end,
      { "nn.block_layout", "2-D bool tensor", "1 dims" })
    assert.error_matches(function() return nn.block_layout({ { true } }) end, { "nn.block_layout", "table" })
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("block_sparse_linear on the cpu against the dense float64 reference", function()
  local rng = ref.rng(99)
  local cases = {
    { name = "blocks of 4, leading dims [2, 3], an empty block row and column", block = 4, lead = { 2, 3 },
      mask = random_mask(rng, 3, 5, 0.6, { 2 }, { 4 }) },
    { name = "blocks of 8, a single row", block = 8, lead = { 1 }, mask = random_mask(rng, 2, 3, 0.6) },
    { name = "blocks of 8, a 1-D input", block = 8, lead = {}, mask = random_mask(rng, 3, 2, 0.6) },
    { name = "blocks of 4, zero rows", block = 4, lead = { 0 }, mask = random_mask(rng, 2, 3, 0.6) },
    { name = "blocks of 4, an empty middle dim", block = 4, lead = { 2, 0 }, mask = random_mask(rng, 2, 3, 0.6) },
    { name = "blocks of 32, an empty block row", block = 32, lead = { 5 }, mask = { { T, F }, { F, F }, { T, T } } },
    { name = "blocks of 64", block = 64, lead = { 3 }, mask = { { F, T }, { T, T } } },
    { name = "no block kept (nnz 0)", block = 4, lead = { 4 }, mask = { { F, F, F }, { F, F, F } } },
    { name = "300 rows (more than one panel)", block = 4, lead = { 3, 100 }, mask = random_mask(rng, 2, 3, 0.5) },
  }
  for _, dtype in ipairs(DTYPES) do
    for _, with_bias in ipairs({ true, false }) do
      it(("values and x, blocks, bias gradients in %s, bias %s"):format(dtype, tostring(with_bias)), function()
        tl.manual_seed(21)
        for _, c in ipairs(cases) do check_op(c, dtype, with_bias) end
      end)
    end
  end

  it("strided inputs: a transposed x, transposed blocks, a strided bias", function()
    tl.manual_seed(22)
    local mask = { { T, F, T }, { F, T, T } }
    local l = ref.layout(mask)
    local x = tl.randn(12, 7):double():transpose(1, 2) -- [7, 12]
    local blocks = tl.randn(l.nnz, 4, 4):double():transpose(2, 3)
    local bias = tl.randn(8, 2):double():select(2, 2)
    local y = tl.block_sparse_linear(x, blocks, nn.block_layout(ref.mask_tensor(mask)), bias)
    assert.tensor_near(ref.forward(x, ref.dense_weight(blocks, l), bias), y, 1e-12, 1e-12)
  end)

  it("nn.BlockSparseLinear in every dtype: to_dense, mask, nnz, density, values, gradients", function()
    tl.manual_seed(23)
    local mask = random_mask(ref.rng(5), 3, 4, 0.5, { 3 }, { 1 })
    mask[1][2] = true
    local l = ref.layout(mask)
    for _, dtype in ipairs(DTYPES) do
      local rtol, atol = ref.TOL[dtype][1], ref.TOL[dtype][2]
      local m = nn.BlockSparseLinear(32, 24, { block = 8, mask = ref.mask_tensor(mask), dtype = dtype })
      assert.are.equal(l.nnz, m:nnz())
      assert.are.equal(l.nnz / 12, m:density())
      assert.are.same({ l.nnz, 8, 8 }, m.blocks.shape)
      assert.are.equal(dtype, m.blocks.dtype)
      assert.tensor_equal(ref.mask_tensor(mask), m:mask())
      local W = ref.dense_weight(m.blocks, l)
      assert.tensor_equal(W, ref.f64(m:to_dense()))
      assert.are.equal(dtype, m:to_dense().dtype)
      local x = ref.draw({ 2, 5, 32 }, dtype):requires_grad_()
      local y = m(x)
      assert.tensor_near(ref.forward(x, W, m.bias), ref.f64(y), rtol, atol, dtype .. ": output")
      local g = ref.draw(y.shape, dtype)
      y:backward(g)
      local r = ref.grads(x, g, W, l, 8)
      assert.tensor_near(r.x, ref.f64(x.grad), rtol, atol, dtype .. ": dx")
      assert.tensor_near(r.blocks, ref.f64(m.blocks.grad), rtol, atol, dtype .. ": dblocks")
      assert.tensor_near(r.bias, ref.f64(m.bias.grad), rtol, atol, dtype .. ": dbias")
    end
    -- density: round(d * C) blocks per row; no bias; an all-false mask gives the bias alone
    local d = nn.BlockSparseLinear(64, 16, { block = 8, density = 0.5, bias = false })
    assert.is_nil(d.bias)
    assert.are.same({ 4, 4 }, ref.row_counts(d:mask()))
    assert.are.equal(0.5, d:density())
    local empty = nn.BlockSparseLinear(8, 8, { block = 4, mask = tl.zeros(2, 2, { dtype = "bool" }) })
    assert.are.equal(0, empty:nnz())
    local x = tl.randn(3, 8)
    assert.tensor_near(ref.forward(x, tl.zeros(8, 8, { dtype = "float64" }), empty.bias), empty(x), 0, 0)
    assert.tensor_equal(tl.zeros(8, 8), empty:to_dense())
    -- a float dtype change leaves the int32 layout buffers alone
    d:to("float64")
    assert.are.equal("float64", d.blocks.dtype)
    assert.are.equal("int32", d.col_indices.dtype)
    assert.are.same({ 2, 16 }, d(tl.randn(2, 64):double()).shape)
  end)

  it("passes gradcheck in float64 (an empty block row and column, leading dims)", function()
    tl.manual_seed(24)
    local layout = nn.block_layout(ref.mask_tensor({ { T, F, F, T }, { F, F, F, F }, { F, T, F, T } }))
    local inputs = { tl.randn(2, 2, 8):double():requires_grad_(), tl.randn(4, 2, 2):double():requires_grad_(),
                     tl.randn(6):double():requires_grad_() }
    assert.is_true(tl.autograd.gradcheck(function(x, blocks, bias)
      return tl.block_sparse_linear(x, blocks, layout, bias)
    end, inputs))
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("block_sparse_linear runs only the backward kernels that are needed", function()
  local mask = { { T, F, T }, { F, T, T }, { F, F, F } }
  local l = ref.layout(mask)
  local layout = nn.block_layout(ref.mask_tensor(mask))
  local BI, BW, BB = "block_sparse_linear_backward_input", "block_sparse_linear_backward_weight",
    "linear_backward_bias"

  local function run(need_x, need_blocks, need_bias)
    tl.manual_seed(31)
    local x, blocks, bias = tl.randn(5, 12), tl.randn(l.nnz, 4, 4), tl.randn(12)
    if need_x then x:requires_grad_() end
    if need_blocks then blocks:requires_grad_() end
    if need_bias then bias:requires_grad_() end
    local y
    local forward = ops_of(function() y = tl.block_sparse_linear(x, blocks, layout, bias) end)
    assert.are.equal(1, forward.block_sparse_linear)
    local seen = ops_of(function() y:sum():backward() end)
    local r = ref.grads(x, tl.ones(5, 12), ref.dense_weight(blocks, l), l, 4)
    return seen, r, x, blocks, bias
  end

  it("x alone: the input gradient only", function()
    local seen, r, x, blocks, bias = run(true, false, false)
    assert.are.equal(1, seen[BI])
    assert.is_nil(seen[BW])
    assert.is_nil(seen[BB])
    assert.tensor_near(r.x, x.grad, 1e-5, 1e-5)
    assert.is_nil(blocks.grad)
    assert.is_nil(bias.grad)
  end)

  it("blocks alone: the weight gradient only", function()
    local seen, r, x, blocks = run(false, true, false)
    assert.are.equal(1, seen[BW])
    assert.is_nil(seen[BI])
    assert.is_nil(seen[BB])
    assert.tensor_near(r.blocks, blocks.grad, 1e-5, 1e-5)
    assert.is_nil(x.grad)
  end)

  it("bias alone: linear_backward_bias only", function()
    local seen, r, _, _, bias = run(false, false, true)
    assert.are.equal(1, seen[BB])
    assert.is_nil(seen[BI])
    assert.is_nil(seen[BW])
    assert.tensor_near(r.bias, bias.grad, 1e-5, 1e-5)
  end)

  it("all three: one of each; nothing needing grad or no_grad: no node", function()
    local seen = run(true, true, true)
    assert.are.equal(1, seen[BI])
    assert.are.equal(1, seen[BW])
    assert.are.equal(1, seen[BB])
    local x = tl.randn(2, 12)
    assert.is_false(tl.block_sparse_linear(x, tl.randn(l.nnz, 4, 4), layout).requires_grad)
    local blocks = tl.randn(l.nnz, 4, 4):requires_grad_()
    assert.is_true(tl.block_sparse_linear(x, blocks, layout).requires_grad)
    assert.is_false(tl.no_grad(function() return tl.block_sparse_linear(x, blocks, layout) end).requires_grad)
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("block-sparse linear refuses bad input", function()
  local mask = { { T, F, T }, { F, T, T } } -- blocks of 2: in 6, out 4, nnz 4
  local l = ref.layout(mask)
  local L = nn.block_layout(ref.mask_tensor(mask))
  local blocks, x, bias = tl.randn(4, 2, 2), tl.randn(3, 6), tl.randn(4)
  local module = nn.BlockSparseLinear(6, 4, { block = 2, mask = ref.mask_tensor(mask) })

  local function with(field, value)
    local c = {}
    for k, v in pairs(L) do c[k] = v end
    c[field] = value
    return c
  end
  local function i32(values) return tl.tensor(values, { dtype = "int32" }) end
  local strided = tl.zeros(4, 2, { dtype = "int32" })
  strided:select(2, 1):copy_(L.col_indices)

  -- corrupted layouts: {name, field, value, message parts}, refused by the op and by validate
  local corrupt = {
    { "col_indices out of range", "col_indices", i32({ 0, 5, 1, 2 }), { "layout.col_indices", "= 5", "out of range" } },
    { "col_indices not increasing", "col_indices", i32({ 0, 0, 1, 2 }), { "layout.col_indices", "not increasing" } },
    { "row_offsets not ending at nnz", "row_offsets", i32({ 0, 2, 3 }),
      { "layout.row_offsets", "= 3", "breaks its order" } },
    { "row_offsets decreasing", "row_offsets", i32({ 0, 3, 2 }), { "layout.row_offsets", "breaks its order" } },
    { "col_offsets not starting at 0", "col_offsets", i32({ 1, 1, 2, 4 }),
      { "layout.col_offsets", "breaks its order" } },
    { "row_indices out of range", "row_indices", i32({ 0, 1, 0, 3 }), { "layout.row_indices", "= 3", "out of range" } },
    { "col_blocks naming another block", "col_blocks", i32({ 0, 1, 2, 3 }),
      { "layout.col_blocks", "is not the block" } },
    { "a coordinate list that disagrees", "coo_cols", i32({ 0, 2, 1, 1 }), { "coordinate list", "block 4" } },
    { "a field missing", "col_blocks", nil, { "layout.col_blocks", "int32 index tensor", "nil" } },
    { "an int64 field", "coo_rows", L.coo_rows:long(), { "layout.coo_rows", "must be int32", "int64" } },
    { "a 2-D field", "col_indices", L.col_indices:reshape(2, 2),
      { "layout.col_indices", "1-D with 4 entries", "2 dims" } },
    { "a strided field", "col_indices", strided:select(2, 1), { "layout.col_indices", "contiguous" } },
    { "a field of another length", "coo_rows", i32({ 0, 0, 1 }), { "layout.coo_rows", "1-D with 4 entries" } },
  }

  local cases = {
    { "in_features not a multiple of block", function() return nn.BlockSparseLinear(10, 8, { block = 4 }) end,
      { "nn.BlockSparseLinear", "in_features (10)", "multiple of the block size (4)" } },
    { "out_features not a multiple of block", function() return nn.BlockSparseLinear(8, 6, { block = 4 }) end,
      { "nn.BlockSparseLinear", "out_features (6)", "multiple of the block size (4)" } },
    { "a block of 0", function() return nn.BlockSparseLinear(8, 8, { block = 0 }) end,
      { "nn.BlockSparseLinear", "block must be a positive integer", "got 0" } },
    { "density 0", function() return nn.BlockSparseLinear(8, 8, { block = 4, density = 0 }) end,
      { "nn.BlockSparseLinear", "density must be a number in (0, 1]", "got 0" } },
    { "density 1.5", function() return nn.BlockSparseLinear(8, 8, { block = 4, density = 1.5 }) end,
      { "nn.BlockSparseLinear", "density", "got 1.5" } },
    { "density -1", function() return nn.BlockSparseLinear(8, 8, { block = 4, density = -1 }) end,
      { "nn.BlockSparseLinear", "density", "got -1" } },
    { "a mask of the wrong shape", function()
        return nn.BlockSparseLinear(8, 8, { block = 4, mask = tl.ones(2, 3, { dtype = "bool" }) })
      end, { "nn.BlockSparseLinear", "mask must be [out_features / block, in_features / block] = [2, 2]", "[2, 3]" } },
    { "a float mask", function() return nn.BlockSparseLinear(8, 8, { block = 4, mask = tl.ones(2, 2) }) end,
      { "nn.BlockSparseLinear", "mask must be a bool tensor", "float32" } },
    { "density and mask", function()
        return nn.BlockSparseLinear(8, 8, { block = 4, mask = tl.ones(2, 2, { dtype = "bool" }), density = 0.5 })
      end, { "nn.BlockSparseLinear", "either density or mask" } },
    { "options not a table", function() return nn.BlockSparseLinear(8, 8, 4) end,
      { "nn.BlockSparseLinear", "options table", "number" } },
    { "input features that do not match (module)", function() return module(tl.randn(3, 7)) end,
      { "block_sparse_linear", "input must be [..., 6]", "[3, 7]" } },
    { "input features that do not match (op)", function() return tl.block_sparse_linear(tl.randn(2, 4), blocks, L) end,
      { "block_sparse_linear", "input must be [..., 6]", "[2, 4]" } },
    { "a 0-dim input", function() return tl.block_sparse_linear(tl.tensor(1.0), blocks, L) end,
      { "block_sparse_linear", "input must be [..., 6]" } },
    { "blocks not square", function() return tl.block_sparse_linear(x, tl.randn(4, 2, 3), L) end,
      { "block_sparse_linear", "blocks must be [nnz, b, b]", "[4, 2, 3]" } },
    { "2-D blocks", function() return tl.block_sparse_linear(x, tl.randn(4, 4), L) end,
      { "block_sparse_linear", "blocks must be [nnz, b, b]", "[4, 4]" } },
    { "more blocks than the layout", function() return tl.block_sparse_linear(x, tl.randn(5, 2, 2), L) end,
      { "block_sparse_linear", "layout.", "5 entries" } },
    { "integer blocks", function() return tl.block_sparse_linear(x:int(), blocks:int(), L) end,
      { "block_sparse_linear", "blocks", "floating", "int32" } },
    { "an input of another dtype", function() return tl.block_sparse_linear(x:double(), blocks, L) end,
      { "block_sparse_linear", "input is float64" } },
    { "a bias of the wrong size", function() return tl.block_sparse_linear(x, blocks, L, tl.randn(5)) end,
      { "block_sparse_linear", "bias must be [4]", "[5]" } },
    { "a 2-D bias", function() return tl.block_sparse_linear(x, blocks, L, tl.randn(4, 1)) end,
      { "block_sparse_linear", "bias must be [4]", "[4, 1]" } },
    { "a bias of another dtype", function() return tl.block_sparse_linear(x, blocks, L, bias:double()) end,
      { "block_sparse_linear", "bias is float64" } },
    { "a layout that is not a table", function() return tl.block_sparse_linear(x, blocks, "x") end,
      { "block_sparse_linear", "argument 3", "layout table" } },
    { "a tensor as layout", function() return tl.block_sparse_linear(x, blocks, blocks) end,
      { "block_sparse_linear", "argument 3", "layout table" } },
    { "validate with another nnz", function() return tl.block_layout_validate(L, 3) end,
      { "block_layout", "layout.col_indices", "3 entries" } },
    { "a module whose layout buffer was corrupted", function()
        local m = nn.BlockSparseLinear(6, 4, { block = 2, mask = ref.mask_tensor(mask) })
        m(x)
        m.col_indices:fill_(7)
        return m(x)
      end, { "block_layout", "layout.col_indices", "= 7", "out of range" } },
  }
  for _, c in ipairs(corrupt) do
    cases[#cases + 1] = { c[1] .. " (op)", function() return tl.block_sparse_linear(x, blocks, with(c[2], c[3])) end,
      { "block_sparse_linear", table.unpack(c[4]) } }
    cases[#cases + 1] = { c[1] .. " (block_layout_validate)", function()
        return tl.block_layout_validate(with(c[2], c[3]), 4)
      end, { "block_layout", table.unpack(c[4]) } }
  end
  local W = ref.dense_weight(blocks, l)
  for _, c in ipairs(cases) do
    it(c[1] .. ": a clear error, the engine usable after", function()
      local before = blocks:clone()
      assert.error_matches(c[2], c[3])
      assert.tensor_equal(before, blocks)
      assert.tensor_near(ref.forward(x, W, bias), tl.block_sparse_linear(x, blocks, L, bias), 1e-5, 1e-5)
      local y = module(x)
      assert.tensor_near(ref.forward(x, ref.dense_weight(module.blocks, l), module.bias), y, 1e-5, 1e-5)
    end)
  end

  -- DESIGN.md (Errors): "Messages speak to Lua users: dims and indices in them count from 1"
  it("positions in layout messages count from 1, as in every other message", function()
    assert.error_matches(function() return tl.block_layout_validate(with("col_indices", i32({ 0, 5, 1, 2 })), 4) end,
      { "layout.col_indices[2] = 5" })
    assert.error_matches(function() return tl.block_sparse_linear(x, blocks, with("row_offsets", i32({ 0, 2, 3 }))) end,
      { "layout.row_offsets[3] = 3" })
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("BlockSparseLinear.from_dense", function()
  -- Linear(16, 12) on blocks of 4: a 3 x 4 grid; the blocks at big get the largest norms
  local big = { { 1, 2 }, { 2, 4 }, { 3, 1 } }
  local function linear(bias)
    tl.manual_seed(41)
    local lin = nn.Linear(16, 12, { dtype = "float64", bias = bias })
    tl.no_grad(function()
      lin.weight:copy_(tl.rand(12, 16):double() * 0.2 - 0.1)
      for _, rc in ipairs(big) do
        local block = lin.weight:narrow(1, (rc[1] - 1) * 4 + 1, 4):narrow(2, (rc[2] - 1) * 4 + 1, 4)
        block:copy_(tl.randn(4, 4):double() + 3)
      end
    end)
    return lin
  end
  local expected = ref.mask(3, 4, nil, function(r, c)
    for _, rc in ipairs(big) do if rc[1] == r and rc[2] == c then return true end end
    return false
  end)

  -- the Linear's weight zeroed off the mask, by loops
  local function masked(weight, mask, b)
    local w, keep = weight:detach():double():totable(), mask:totable()
    for i = 1, #w do
      for j = 1, #w[1] do
        if not keep[(i - 1) // b + 1][(j - 1) // b + 1] then w[i][j] = 0.0 end
      end
    end
    return tl.tensor(w, { dtype = "float64" })
  end

  it("keeps exactly the blocks of largest norm, their values and the bias", function()
    local lin = linear()
    local m = nn.BlockSparseLinear.from_dense(lin, { block = 4, density = 0.25 }) -- round(0.25 * 12) = 3
    assert.are.equal("BlockSparseLinear", m._class_name)
    assert.tensor_equal(ref.mask_tensor(expected), m:mask())
    assert.are.equal(3, m:nnz())
    assert.are.equal("float64", m.blocks.dtype)
    local l = ref.layout(expected)
    for e = 1, l.nnz do
      local r, c = l.coo_rows[e], l.coo_cols[e]
      assert.tensor_equal(lin.weight:detach():narrow(1, r * 4 + 1, 4):narrow(2, c * 4 + 1, 4), m.blocks[e]:detach())
    end
    assert.tensor_equal(lin.bias:detach(), m.bias:detach())
    local Wm = masked(lin.weight, ref.mask_tensor(expected), 4)
    assert.tensor_equal(Wm, m:to_dense())
    local x = tl.randn(5, 16):double()
    assert.tensor_near(ref.forward(x, Wm, lin.bias), m(x), 1e-12, 1e-12)
    assert.is_true(m.blocks.requires_grad)
  end)

  it("without a bias, density 1 keeps every block, and bad arguments", function()
    local m = nn.BlockSparseLinear.from_dense(linear(false), { block = 4, density = 0.2 }) -- round(2.4) = 2
    assert.is_nil(m.bias)
    assert.are.equal(2, m:nnz())
    local all = nn.BlockSparseLinear.from_dense(linear(), { block = 4, density = 1 })
    assert.are.equal(12, all:nnz())
    assert.tensor_equal(linear().weight:detach(), all:to_dense())
    assert.error_matches(function() return nn.BlockSparseLinear.from_dense(nn.ReLU(), { block = 4, density = 0.5 }) end,
      { "from_dense", "expected an nn.Linear" })
    assert.error_matches(function()
      return nn.BlockSparseLinear.from_dense(nn.Linear(10, 8), { block = 4, density = 0.5 })
    end,
      { "nn.BlockSparseLinear", "in_features (10)", "multiple of the block size (4)" })
    assert.error_matches(function() return nn.BlockSparseLinear.from_dense(linear(), { block = 4 }) end,
      { "nn.BlockSparseLinear.from_dense: density must be a number in (0, 1], got nil" })
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("nn.sparsify", function()
  local function net()
    tl.manual_seed(51)
    return nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 12), nn.Tanh()), nn.Linear(12, 6))
  end

  -- the float64 forward of net with each layer's weight zeroed off its mask (by loops)
  local function reference(x, layers)
    local h = ref.f64(x)
    for i, layer in ipairs(layers) do
      local W = ref.f64(layer.weight)
      if layer.mask then
        local w, keep = W:totable(), layer.mask:totable()
        for r = 1, #w do
          for c = 1, #w[1] do
            if not keep[(r - 1) // 4 + 1][(c - 1) // 4 + 1] then w[r][c] = 0.0 end
          end
        end
        W = tl.tensor(w, { dtype = "float64" })
      end
      h = h:matmul(W:transpose(1, 2)) + ref.f64(layer.bias)
      if i == 1 then h = h:relu() elseif i == 2 then h = h:tanh() end
    end
    return h
  end

  it("replaces the Linear layers that fit the block (nested ones too) and skips the others", function()
    local model = net()
    local layers = { { weight = model[1].weight:clone(), bias = model[1].bias:clone() },
                     { weight = model[3][1].weight:clone(), bias = model[3][1].bias:clone() },
                     { weight = model[4].weight:clone(), bias = model[4].bias:clone() } }
    local out, names = nn.sparsify(model, { block = 4, density = 0.5 })
    assert.are.equal(model, out)
    assert.are.same({ "1", "3.1" }, names)
    assert.are.equal("BlockSparseLinear", model[1]._class_name)
    assert.are.equal("BlockSparseLinear", model[3][1]._class_name)
    assert.are.equal("Linear", model[4]._class_name)
    assert.are.equal(4, model[1]:nnz()) -- round(0.5 * 2 * 4)
    assert.are.equal(3, model[3][1]:nnz()) -- round(0.5 * 3 * 2)
    layers[1].mask, layers[2].mask = model[1]:mask(), model[3][1]:mask()
    local x = tl.randn(7, 16)
    assert.tensor_near(reference(x, layers), ref.f64(model(x)), 1e-5, 1e-5)
    local keys = nn.keys(model:state_dict())
    assert.are.equal("1.blocks", keys[1])
  end)

  it("a filter chooses by name and sees every Linear", function()
    local model = net()
    local seen = {}
    local _, names = nn.sparsify(model, { block = 4, density = 0.5, filter = function(name, m)
      seen[#seen + 1] = name .. ":" .. m._class_name
      return name == "3.1"
    end })
    assert.are.same({ "1:Linear", "3.1:Linear", "4:Linear" }, seen)
    assert.are.same({ "3.1" }, names)
    assert.are.equal("Linear", model[1]._class_name)
    assert.are.equal("BlockSparseLinear", model[3][1]._class_name)
  end)

  it("an error when the filter picks a Linear whose sizes do not fit, and for bad options", function()
    assert.error_matches(function()
      return nn.sparsify(net(), { block = 4, density = 0.5, filter = function(name) return name == "4" end })
    end, { "nn.sparsify", "4 is Linear(12, 6)", "not multiples of block 4" })
    assert.error_matches(function() return nn.sparsify(net()) end, { "nn.sparsify", "options table" })
    -- a missing density names sparsify, not the BlockSparseLinear it would build
    local msg = assert.error_matches(function() return nn.sparsify(net(), { block = 4 }) end,
      { "nn.sparsify: density must be a number in (0, 1], got nil" })
    assert.is_nil(msg:find("nn.BlockSparseLinear", 1, true), msg)
    assert.error_matches(function() return nn.sparsify(net(), { block = 4, density = 2 }) end,
      { "nn.sparsify: density must be a number in (0, 1], got 2" })
    local ok, err = pcall(function() return nn.sparsify(net(), { block = 4 }) end)
    assert.is_false(ok)
    assert.matches("^spec/block_sparse_spec%.lua:%d+: nn%.sparsify: ", err)
    assert.error_matches(function() return nn.sparsify(net(), { block = 4, density = 0.5, filter = 3 }) end,
      { "nn.sparsify", "filter must be a function" })
    local model = net()
    assert.are.same({ "1", "3.1" }, select(2, nn.sparsify(model, { block = 4, density = 0.5 }))) -- usable after
  end)

  it("a block that is not a positive integer is a clear error naming sparsify and block", function()
    for _, block in ipairs({ 0, "x" }) do
      assert.error_matches(function() return nn.sparsify(net(), { block = block, density = 0.5 }) end,
        { "nn.sparsify", "block" })
    end
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("BlockSparseLinear state dicts", function()
  local dir
  before_each(function() dir = files.make_temp_dir() end)
  after_each(function() files.remove_dir(dir) end)
  local mask = ref.mask_tensor({ { T, F, T, F }, { F, F, F, F }, { T, T, F, T } })

  it("holds blocks, bias and the 7 layout buffers; tl.save / tl.load round-trip them", function()
    tl.manual_seed(61)
    local a = nn.BlockSparseLinear(16, 12, { block = 4, mask = mask })
    local expected = { "blocks", "bias" }
    for _, f in ipairs(ref.FIELDS) do expected[#expected + 1] = f end
    assert.are.same(expected, nn.keys(a:state_dict()))
    assert.are.equal(2, #a:parameters())
    local path = dir .. "/bsl.safetensors"
    tl.save(path, a:state_dict())
    tl.manual_seed(62)
    local b = nn.BlockSparseLinear(16, 12, { block = 4, mask = mask })
    local x = tl.randn(4, 16)
    assert.is_true((a(x) - b(x)):abs():max():item() > 0)
    local loaded = tl.load(path)
    assert.are.equal("int32", loaded.col_blocks.dtype)
    assert.are.same({ missing = {}, unexpected = {} }, b:load_state_dict(loaded))
    assert.tensor_equal(a(x), b(x))
    assert.tensor_equal(a:to_dense(), b:to_dense())
  end)

  it("loading a pattern with the same nnz takes the saved pattern", function()
    tl.manual_seed(63)
    local a = nn.BlockSparseLinear(16, 12, { block = 4, mask = mask })
    local other = ref.mask_tensor({ { F, F, F, T }, { T, T, F, F }, { F, T, F, T } })
    local b = nn.BlockSparseLinear(16, 12, { block = 4, mask = other })
    local x = tl.randn(3, 16)
    b(x) -- its layout is checked (and cached) before the load
    local path = dir .. "/bsl.safetensors"
    tl.save(path, a:state_dict())
    b:load_state_dict(tl.load(path))
    assert.tensor_equal(mask, b:mask())
    assert.tensor_equal(a(x), b(x))
  end)

  it("loading into a module with a different nnz is an error that changes nothing", function()
    local a = nn.BlockSparseLinear(16, 12, { block = 4, mask = mask })
    local b = nn.BlockSparseLinear(16, 12, { block = 4, density = 0.5 }) -- 2 blocks in each of 3 rows
    local before = b.blocks:clone()
    local path = dir .. "/bsl.safetensors"
    tl.save(path, a:state_dict())
    assert.error_matches(function() b:load_state_dict(tl.load(path)) end,
      { "load_state_dict", "blocks: the module has shape [6, 4, 4], the state dict [5, 4, 4]" })
    assert.tensor_equal(before, b.blocks)
    assert.are.same({ 2, 2, 2 }, ref.row_counts(b:mask()))
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("block_sparse_linear on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of block_sparse_linear did not run")
    return
  end

  -- in 256, out 192, 130 rows (not a multiple of 128), block row 2 empty
  local function big_case(block, lead)
    local R, C = 192 // block, 256 // block
    return { name = ("in 256, out 192, blocks of %d"):format(block), block = block, lead = lead,
             mask = random_mask(ref.rng(block), R, C, 0.5, { 2 }) }
  end

  for _, dtype in ipairs({ "bfloat16", "float16" }) do
    for _, block in ipairs({ 32, 64 }) do
      it(("tensor-core kernel in %s, blocks of %d: values and gradients"):format(dtype, block), function()
        tl.manual_seed(71)
        check_op(big_case(block, { 130 }), dtype, true, "cuda")
        check_op(big_case(block, { 2, 65 }), dtype, false, "cuda")
      end)
    end
  end

  for _, dtype in ipairs({ "float32", "float64" }) do
    it(("plain kernel in %s: values and gradients"):format(dtype), function()
      tl.manual_seed(72)
      check_op(big_case(32, { 130 }), dtype, true, "cuda")
      local small = random_mask(ref.rng(3), 3, 5, 0.5, { 1 }, { 2 })
      check_op({ name = "blocks of 4", block = 4, lead = { 3, 5 }, mask = small }, dtype, false, "cuda")
    end)
  end

  it("plain kernel for blocks of 16 in bfloat16, and zero rows and nnz 0", function()
    tl.manual_seed(73)
    check_op(big_case(16, { 130 }), "bfloat16", true, "cuda")
    check_op({ name = "zero rows", block = 32, lead = { 0 }, mask = random_mask(ref.rng(4), 2, 3, 0.5) },
      "bfloat16", true, "cuda")
    check_op({ name = "nnz 0", block = 32, lead = { 9 }, mask = { { F, F }, { F, F } } }, "float16", true, "cuda")
  end)

  it("the layout built from a mask on the GPU equals the CPU one", function()
    local rng = ref.rng(74)
    for _, size in ipairs({ { 1, 1 }, { 6, 8 }, { 7, 4 }, { 3, 5 } }) do
      local m = random_mask(rng, size[1], size[2], 0.5, size[1] > 2 and { 2 } or nil)
      local gpu = nn.block_layout(ref.mask_tensor(m):cuda())
      for _, name in ipairs(ref.FIELDS) do assert.are.equal("cuda:0", gpu[name].device) end
      assert_layout(ref.layout(m), gpu, "cuda")
      assert_layout(ref.layout(m), nn.block_layout(ref.mask_tensor(m)), "cpu")
      assert.is_true(tl.block_layout_validate(gpu, ref.layout(m).nnz))
    end
    assert.error_matches(function()
      return tl.block_sparse_linear(tl.randn(2, 6):cuda(), tl.randn(4, 2, 2):cuda(),
        nn.block_layout(ref.mask_tensor({ { T, F, T }, { F, T, T } })))
    end, { "block_sparse_linear", "layout.row_offsets is on cpu" })
    local bad = ref.layout_tensors(ref.layout({ { T, F, T }, { F, T, T } }), "cuda")
    bad.col_indices = tl.tensor({ 0, 5, 1, 2 }, { dtype = "int32" }):cuda()
    assert.error_matches(function() return tl.block_layout_validate(bad, 4) end,
      { "block_layout", "layout.col_indices" })
  end)

  it("a module moved with m:to('cuda') gives the CPU module's outputs and gradients", function()
    tl.manual_seed(75)
    local mask = random_mask(ref.rng(75), 6, 8, 0.5, { 3 })
    for _, dtype in ipairs({ "float32", "bfloat16" }) do
      local rtol, atol = ref.TOL[dtype][1], ref.TOL[dtype][2]
      local m = nn.BlockSparseLinear(256, 192, { block = 32, mask = ref.mask_tensor(mask), dtype = dtype })
      local x = ref.draw({ 130, 256 }, dtype)
      local W = ref.dense_weight(m.blocks, ref.layout(mask))
      local expected, y_cpu = ref.forward(x, W, m.bias), m(x)
      m:to("cuda")
      assert.are.equal("cuda:0", m.row_offsets.device)
      assert.are.equal("int32", m.row_offsets.dtype)
      local y = m(x:cuda())
      assert.are.equal("cuda:0", y.device)
      assert.tensor_near(expected, ref.f64(y), rtol, atol, dtype)
      assert.tensor_near(ref.f64(y_cpu), ref.f64(y), rtol, atol, dtype .. " vs cpu")
      y:sum():backward()
      assert.are.equal("cuda:0", m.blocks.grad.device)
      assert.tensor_equal(ref.mask_tensor(mask), m:mask())
    end
  end)
end)
