-- The kernel sweep's cases for the paths of kernels that have several (tl.kernel_variants()): for each op and variant (and each path of a loop many kernels share), inputs and a run that take that path, against Lua loops (batch_norm's planes and columns; attention with its dropout mask drawn from Philox4x32-10 in Lua; block-sparse linear from its blocks laid out dense; elementwise ops on inputs laid out for the path).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local sweep = require("helpers.sweep_cases")
local nn_sweep = require("helpers.sweep_nn_cases")

local function leaves(...)
  local out = {}
  for i, x in ipairs({ ... }) do out[i] = x:detach():requires_grad_() end
  return table.unpack(out)
end

local SEED = 0x5EED0A77

-- ---- attention ------------------------------------------------------------------------------
-- q [1, H, T, D], k and v [1, H, S, D]: one forward (causal as asked, scale 1 / sqrt(D), dropout
-- p after tl.manual_seed(SEED)) and its backward with the gradient g of the output. The mask
-- keeps element e = (h T + i) S + j when the float32 uniform of rand's stream at e is >= p.
local H = 2

local function attention_reference(T, S, D, causal, p)
  return function(_, q, k, v, g)
    local scale = 1 / math.sqrt(D)
    local u = p > 0 and K.random("rand", "float32", H * T * S, SEED, 0) or nil
    local threshold, inv_keep = ref.round_f32(p), 1 / (1 - p)
    local function keep(h)
      if not u then return nil end
      return function(i, j) return u[((h - 1) * T + i - 1) * S + j] >= threshold and inv_keep or 0.0 end
    end
    local y, gq, gk, gv = { {} }, { {} }, { {} }, { {} }
    for h = 1, H do
      y[1][h], gq[1][h], gk[1][h], gv[1][h] =
        K.attention_head(q[1][h], k[1][h], v[1][h], g[1][h], scale, causal, keep(h))
    end
    return { y, gq, gk, gv }
  end
end

local function attention_case(T, S, D, causal, p)
  return {
    -- bfloat16 keeps 8 bits: sums of S products of rounded operands, and their gradients
    tolerance = { bfloat16 = { 4e-2, 4e-2 }, float16 = { 8e-3, 8e-3 } },
    inputs = function(G)
      return { G.normal(1, H, T, D), G.normal(1, H, S, D), G.normal(1, H, S, D), G.normal(1, H, T, D) }
    end,
    run = function(q, k, v, g)
      q, k, v = leaves(q, k, v)
      tl.manual_seed(SEED)
      local y = tl.scaled_dot_product_attention(q, k, v, { causal = causal, dropout = p })
      y:backward(g)
      return { y:detach(), q.grad, k.grad, v.grad }
    end,
    reference = attention_reference(T, S, D, causal, p),
  }
end

-- ---- block-sparse linear --------------------------------------------------------------------
-- blocks of b on the block grid {{1, 0}, {1, 1}}, x [3, 2 b]: y = x W^T + bias, gx = g W
local block_coords = { { 1, 1 }, { 2, 1 }, { 2, 2 } }

local function block_sparse_case(b)
  local n = 2 * b
  return {
    tolerance = { bfloat16 = { 3e-2, 3e-2 }, float16 = { 4e-3, 4e-3 } },
    inputs = function(G) return { G.normal(3, n), G.normal(3, b, b), G.normal(n), G.normal(3, n) } end,
    run = function(x, blocks, bias, g)
      x, blocks, bias = leaves(x, blocks, bias)
      local layout = tl.nn.block_layout(tl.tensor({ { true, false }, { true, true } }, { device = x.device }))
      local y = tl.block_sparse_linear(x, blocks, layout, bias)
      y:backward(g)
      return { y:detach(), x.grad }
    end,
    reference = function(_, x, blocks, bias, g)
      local w = ref.build({ n, n }, function() return 0.0 end)
      for e, rc in ipairs(block_coords) do
        for o = 1, b do
          for c = 1, b do w[(rc[1] - 1) * b + o][(rc[2] - 1) * b + c] = blocks[e][o][c] end
        end
      end
      local wt = ref.build({ n, n }, function(i, j) return w[j][i] end)
      local y = ref.matmul(x, wt)
      for i = 1, #y do
        for j = 1, n do y[i][j] = y[i][j] + bias[j] end
      end
      return { y, ref.matmul(g, w) }
    end,
  }
end

-- op -> variant -> case (the backward op's variants are reached by the same runs)
local attention = {
  plain = attention_case(3, 5, 4, true, 0),
  mma_d32 = attention_case(40, 64, 32, false, 0),
  mma_d64 = attention_case(48, 64, 64, true, 0),
  mma_d128 = attention_case(32, 40, 128, false, 0),
  dropout_ahead = attention_case(48, 64, 64, true, 0.25),
  dropout_per_element = attention_case(36, 30, 32, false, 0.25),
  mma_d64_wide = attention_case(48, 64, 64, false, 0),
  mma_d64_causal = attention_case(64, 48, 64, true, 0),
  mma_d64_causal_dropout = attention_case(48, 64, 64, true, 0.25),
}
local block_sparse = { mma_b64 = block_sparse_case(64), mma_b32 = block_sparse_case(32), plain = block_sparse_case(16) }

-- ---- input layouts --------------------------------------------------------------------------------
-- Input layouts with the values a reference reads back: a view one element into a buffer
-- (misaligned for vectors), rows of a wider buffer (unit stride, aligned rows), the transpose of
-- a transposed copy (no unit stride), the second operand expanded along its last dim.
local layouts = {
  as_is = function(x) return x end,
  offset = function(x)
    local buffer = tl.zeros({ x:numel() + 1 }, { dtype = x.dtype, device = x.device })
    local view = buffer:narrow(1, 2, x:numel()):view(table.unpack(x.shape))
    view:copy_(x)
    return view
  end,
  padded = function(x)
    local buffer = tl.zeros({ x.shape[1], x.shape[2] + 16 }, { dtype = x.dtype, device = x.device })
    local view = buffer:narrow(2, 1, x.shape[2])
    view:copy_(x)
    return view
  end,
  transposed = function(x) return x:transpose(1, 2):contiguous():transpose(1, 2) end,
  broadcast = function(x, i)
    if i == 1 then return x end
    return x:narrow(2, 1, 1):expand(table.unpack(x.shape))
  end,
}

-- ---- dropout: the mask from Philox4x32-10 in Lua ------------------------------------------------
-- cases.dropout runs a contiguous input and a transposed one; p = 1 drops every element undrawn
local dropout_case = nn_sweep.cases.dropout
local dropout = {
  dense = dropout_case,
  strided = dropout_case,
  dense_vector = dropout_case,
  dense_scalar = {
    layout = function(x) return layouts.offset(x) end,
    inputs = dropout_case.inputs, run = dropout_case.run, reference = dropout_case.reference,
  },
  all_dropped = {
    inputs = function(G) return { G.normal(3, 7) } end,
    run = function(x) return { tl.dropout(x, 1) } end,
    reference = function(_, x) return { ref.map(x, function() return 0.0 end) } end,
  },
}

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
  rows_block = through(softmax_case(2, 1024, 2)),
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

-- ---- batch_norm: S >= 64 reads a channel's planes by blocks (chunks over N), S < 64 the
-- columns of [N, C * S]; the backward's kernels take the same path as the forward
local batch_norm = {
  planes = nn_sweep.batch_norm_case({ 3, 2, 8, 9 }),
  columns = nn_sweep.batch_norm_case({ 5, 3, 2 }),
}

return {
  batch_norm = batch_norm,
  batch_norm_backward_reduce = batch_norm,
  batch_norm_backward_input = batch_norm,
  scaled_dot_product_attention = attention,
  scaled_dot_product_attention_backward = attention,
  block_sparse_linear = block_sparse,
  block_sparse_linear_backward_input = block_sparse,
  dropout = dropout,
  fill = fill,
  cast = cast,
  loops = loops,
}
