-- The kernel sweep's cases for the paths of kernels of the sweep_cases.lua ops that have several (tl.kernel_variants()): for each op and variant (and each path of a loop many kernels share), inputs and a run that take that path, against Lua loops (elementwise ops on inputs laid out for the path); a family's variants are in its cases file (`variants`, found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local sweep = require("helpers.sweep_cases")
local layouts = require("helpers.sweep_helpers").layouts
local sweep_transpose = require("helpers.sweep_helpers").transpose
local add_into = require("helpers.sweep_helpers").add_into

-- ---- the paths of loops many kernels share -------------------------------------------------------
-- a binary elementwise op of dtype d (mul; ne for bool) on [3, cols] operands laid out by layout
-- (16 columns fit vectors of every dtype, 5 none)
local function elementwise_through(layout, cols)
  cols = cols or 16
  return function(d)
    local op = d == "bool" and "ne" or "mul"
    return {
      layout = layouts[layout],
      inputs = function(G) return { G.wide(3, cols), G.wide(3, cols) } end,
      run = sweep.cases[op].run,
      reference = sweep.cases[op].reference,
    }
  end
end

-- sum along a unit-stride dim (one line at a time), min along dim 1 (lines side by side), sum of
-- 2 x 32768 (few long lines: split in chunks)
local function through(case) return function() return case end end
local split_sum = {
  inputs = function(G) return { G.wide(2, 32768) } end,
  run = sweep.cases.sum.run,
  reference = sweep.cases.sum.reference,
}

-- sum along dim 1 of [2048, 4] (few column tiles of long lines)
local function column_sum(d, x)
  local out = {}
  for j = 1, #x[1] do
    local acc = sweep.floating[d] and 0.0 or 0
    for i = 1, #x do
      local v = x[i][j]
      acc = acc + (type(v) == "boolean" and (v and 1 or 0) or v)
    end
    out[j] = acc
  end
  return out
end
local columns_sum = {
  inputs = function(G) return { G.wide(2048, 4) } end,
  run = function(x) return { x:sum(1) } end,
  reference = function(d, x) return { column_sum(d, x) } end,
}
local long_rows_sum = {
  inputs = function(G) return { G.wide(4, 2048) } end,
  run = sweep.cases.sum.run,
  reference = sweep.cases.sum.reference,
}

-- softmax along dim of [rows, cols] and its backward for a gradient g, against the float64
-- softmax and the Lua backward formula applied to the stored output
local function softmax_case(rows, cols, dim)
  return {
    inputs = function(G) return { G.normal(rows, cols), G.normal(rows, cols) } end,
    run = function(x, g)
      local leaf = x:detach():requires_grad_()
      local y = leaf:softmax(dim)
      y:backward(g)
      return { y:detach(), leaf.grad }
    end,
    reference = function(d, x, g)
      local y = ref.softmax(x, dim)
      local stored = ref.map(y, function(v) return ref.round_to(v, d) end)
      return { y, K.softmax_backward(stored, g, dim, false) }
    end,
  }
end
local softmax_paths = {
  rows_warp = through(softmax_case(3, 5, 2)),
  -- lines of 1030: long, but no whole number of 16-byte vectors (not the register kernel's)
  rows_block = through(softmax_case(2, 1030, 2)),
  rows_registers = through(softmax_case(3, 256, 2)),
  cols = through(softmax_case(3, 16, 1)),
}

-- the index kernels' paths (kernels/cuda/index.cu): gather along dim 1 by an index [3, 5] (the
-- walk) and by a contiguous [3, 8] one (4 elements a thread), gather's sweep case (along the last
-- dim: the line in shared memory), index_select of rows of [4, 3, 40] along dim 2 (an index
-- constant but along dim: a warp per run of 40; 16-byte vectors for the dtypes whose runs fill
-- them, elements for the others)
local index_cases = require("helpers.index_cases")
local function gather_along_1(index)
  local rows, cols = #index, #index[1]
  return {
    inputs = function(G) return { G.wide(4, cols) } end,
    run = function(x) return { x:gather(1, tl.tensor(index, { device = x.device })) } end,
    reference = function(_, x) return { index_cases.gather_ref(x, 1, index, { rows, cols }) } end,
  }
end
local gather_walk = gather_along_1({ { 4, 1, 1, 3, 2 }, { 2, 2, 4, 1, 3 }, { 1, 4, 3, 2, 2 } })
local gather_quads =
  gather_along_1({ { 4, 1, 1, 3, 2, 3, 2, 4 }, { 2, 2, 4, 1, 3, 1, 1, 4 }, { 1, 4, 3, 2, 2, 3, 4, 1 } })
local ROWS = { 3, 1, 3, 2, 2 }
local index_select_rows = {
  inputs = function(G) return { G.wide(4, 3, 40) } end,
  run = function(x) return { x:index_select(2, tl.tensor(ROWS, { device = x.device })) } end,
  reference = function(_, x)
    return { ref.build({ 4, #ROWS, 40 }, function(i, j, k) return x[i][ROWS[j]][k] end) }
  end,
}

-- the CUDA GEMM's paths (kernels/cuda/gemm.c): a small product as it is, and a product of at
-- least 2^26 multiply-adds whose operands' rows (257 and 259 elements) leave them unaligned, run on
-- aligned copies; its reference is the CPU's float64 product (OpenBLAS, not the kernel under test)
local gemm_cases = require("helpers.gemm_cases")
local gemm_direct = gemm_cases.sweep.matmul
local gemm_padded = {
  -- sums of 257 products: float32's rounding grows past the sweep's 1e-5 near zero
  tolerance = { float32 = { 1e-4, 1e-4 } },
  inputs = function(G) return { G.normal(1031, 257), G.normal(257, 259) } end,
  run = function(a, b) return { tl.matmul(a, b) } end,
  reference = function(_, a, b)
    local product = tl.matmul(tl.tensor(a, { dtype = "float64" }), tl.tensor(b, { dtype = "float64" }))
    return { product:totable() }
  end,
}

-- the grouped GEMM's paths (kernels/cuda/gemm_grouped.c, hopper_gemm.cu): grouped_mm by segments
-- of equal rows with the Hopper core off (cuBLAS's strided batch), grouped_matmul's free sizes
-- (a cuBLAS group), grouped_mm's sweep case with the core off (its ends read on the host); the
-- core's two walks: grouped_mm and its gradients on a Hopper GPU, rows 16-byte aligned
local grouped = require("helpers.grouped_cases")
local function hopper_off(case)
  return {
    inputs = case.inputs,
    reference = case.reference,
    run = function(...)
      local before = tl.cuda.hopper_gemm_enabled()
      tl.cuda.set_hopper_gemm_enabled(false)
      local ok, out = pcall(case.run, ...)
      tl.cuda.set_hopper_gemm_enabled(before)
      if not ok then error(out, 0) end
      return out
    end,
  }
end
local function not_hopper(device)
  if not device:match("^cuda") then return nil end
  local major, minor = tl.cuda.get_device_capability()
  if major ~= 9 or minor ~= 0 then return "the Hopper core needs a Hopper GPU (compute capability 9.0)" end
  return nil
end
local even_mm = {
  inputs = function(G) return { G.normal(6, 3), G.normal(3, 3, 2) } end,
  run = function(a, b) return { tl.grouped_mm(a, b, { 2, 4, 6 }) } end,
  reference = function(_, a, b)
    local y = {}
    for r = 1, 6 do y[r] = ref.matmul({ a[r] }, b[(r + 1) // 2])[1] end
    return { y }
  end,
}
-- rows 1-10 times B[1], none for B[2], rows 11-33 times B[3], rows 34-40 zeros; k 16, n 8
local function core_mm()
  local ends = { 10, 10, 33 }
  return {
    unavailable = not_hopper,
    inputs = function(G) return { G.normal(40, 16), G.normal(3, 16, 8), G.normal(40, 8) } end,
    run = function(a, b, g)
      a, b = a:detach():requires_grad_(), b:detach():requires_grad_()
      local y = tl.grouped_mm(a, b, tl.tensor(ends, { dtype = "int32", device = a.device }))
      y:backward(g)
      return { y:detach(), a.grad, b.grad }
    end,
    reference = function(_, a, b, g)
      local y, ga, gb = {}, {}, {}
      for e = 1, 3 do gb[e] = ref.build({ 16, 8 }, function() return 0.0 end) end
      for r = 1, 40 do
        local e = r <= 10 and 1 or (r <= 33 and 3 or nil)
        if e then
          y[r] = ref.matmul({ a[r] }, b[e])[1]
          ga[r] = ref.matmul({ g[r] }, sweep_transpose(b[e]))[1]
          gb[e] = add_into(gb[e], ref.matmul(sweep_transpose({ a[r] }), { g[r] }))
        else
          y[r] = ref.build({ 8 }, function() return 0.0 end)
          ga[r] = ref.build({ 16 }, function() return 0.0 end)
        end
      end
      return { y, ga, gb }
    end,
  }
end

local loops = {
  elementwise = {
    -- the CPU walk (kernels/cpu/loop.c)
    dense = elementwise_through("as_is"),
    broadcast = elementwise_through("broadcast"),
    strided = elementwise_through("transposed"),
    -- the CUDA launch (kernels/cuda/elementwise.cuh)
    dense_vector = elementwise_through("as_is"),
    dense_scalar = elementwise_through("offset"),
    rows_vector = elementwise_through("padded"),
    rows_scalar = elementwise_through("transposed", 5),
  },
  lines = { line = through(sweep.cases.sum), lanes = through(sweep.cases.min) },
  -- an epilogue: the feed-forward's aligned GEMMs (every epilogue, cuBLASLt on CUDA), linear's
  -- rows of 3 elements (bias and bias gradient after the product)
  gemm = { direct = through(gemm_direct), padded = through(gemm_padded),
    epilogue_lt = through(gemm_cases.sweep.linear_gelu_linear), epilogue_after = through(gemm_cases.sweep.linear) },
  index = {
    walk = through(gather_walk),
    quads = through(gather_quads),
    rows = through(index_select_rows),
    line = through(index_cases.sweep.gather),
  },
  reduce = {
    split = through(split_sum), -- CPU
    rows_warp = through(sweep.cases.sum),
    rows_block = through(long_rows_sum),
    rows_split = through(split_sum),
    cols = through(sweep.cases.min),
    cols_split = through(columns_sum),
    rows_vector = through(long_rows_sum),
  },
  gemm_grouped = {
    strided = function() return hopper_off(even_mm) end,
    grouped = through(grouped.sweep.grouped_matmul),
    segments_on_host = function() return hopper_off(grouped.sweep.grouped_mm) end,
    hopper_rows = core_mm,
    hopper_reduction = core_mm,
  },
  softmax = softmax_paths,
  softmax_backward = softmax_paths,
}

-- fill into [3, 16]: contiguous, one element into a buffer, transposed
local function fill_case(layout)
  return {
    layout = layouts[layout],
    inputs = function(G) return { G.values(3, 16) } end,
    run = function(x) return { x:fill_(-7.9) } end,
    reference = function(d) return { sweep.exact(ref.build({ 3, 16 }, function() return K.cast(-7.9, d) end)) } end,
  }
end
local fill = { dense_vector = fill_case("as_is"), dense_scalar = fill_case("offset"), strided = fill_case("transposed") }

-- a clone of the same dtype: a device to device copy
local cast = {
  memcpy = {
    inputs = function(G) return { G.wide(3, 5) } end,
    run = function(x) return { x:clone() } end,
    reference = function(_, x) return { x } end,
  },
  -- each piece of a cat along the last dim is copied into rows of the output (by 16-byte
  -- vectors where a row fills them: float32 [3, 8] and [3, 4] into [3, 12]; elements otherwise)
  pitched = {
    inputs = function(G) return { G.wide(3, 8), G.wide(3, 4) } end,
    run = function(a, b) return { tl.cat({ a, b }, 2) } end,
    reference = function(_, a, b)
      return { ref.build({ 3, 12 }, function(i, j) return j <= 8 and a[i][j] or b[i][j - 8] end) }
    end,
  },
}

return {
  fill = fill,
  cast = cast,
  loops = loops,
}
