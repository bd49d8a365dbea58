-- block_sparse_linear's kernel sweep case (blocks of 32: forward and every gradient against the weight laid out dense in Lua), the cases of its kernels' paths (variants: blocks of 64, 32 and others) and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local transpose, column_sums, leaves = sweep_helpers.transpose, sweep_helpers.column_sums, sweep_helpers.leaves

local M = {}

M.sweep = {}

-- block-sparse linear, blocks of 32 (the CUDA tensor-core kernel for 16-bit dtypes) on the block
-- grid {{1, 0}, {1, 1}}: y = x W^T + b, gx = g W, each block's gradient its part of g^T x, gb
local block_mask = { { true, false }, { true, true } }
local block_coords = { { 1, 1 }, { 2, 1 }, { 2, 2 } } -- (row, col) of each block, row-major
M.sweep.block_sparse_linear = {
  inputs = function(G) return { G.normal(3, 64), G.normal(3, 32, 32), G.normal(64), G.normal(3, 64) } end,
  run = function(x, blocks, bias, g)
    x, blocks, bias = leaves(x, blocks, bias)
    local layout = tl.nn.block_layout(tl.tensor(block_mask, { device = x.device }))
    local y = tl.block_sparse_linear(x, blocks, layout, bias)
    y:backward(g)
    return { y:detach(), x.grad, blocks.grad, bias.grad }
  end,
  reference = function(_, x, blocks, bias, g)
    local w = ref.build({ 64, 64 }, function() return 0.0 end)
    for e, rc in ipairs(block_coords) do
      for o = 1, 32 do
        for c = 1, 32 do w[(rc[1] - 1) * 32 + o][(rc[2] - 1) * 32 + c] = blocks[e][o][c] end
      end
    end
    local y = ref.matmul(x, transpose(w))
    for i = 1, #y do
      for j = 1, 64 do y[i][j] = y[i][j] + bias[j] end
    end
    local gw = ref.matmul(transpose(g), x)
    local gblocks = {}
    for e, rc in ipairs(block_coords) do
      gblocks[e] = ref.build({ 32, 32 }, function(o, c) return gw[(rc[1] - 1) * 32 + o][(rc[2] - 1) * 32 + c] end)
    end
    return { y, ref.matmul(g, w), gblocks, column_sums(g) }
  end,
}

-- ---- block-sparse linear --------------------------------------------------------------------
-- blocks of b on the block grid {{1, 0}, {1, 1}}, x [rows, 2 b]: y = x W^T + bias, gx = g W;
-- hopper: the Hopper kernel on (true: pending where the GPU is no Hopper) or off (false), on CUDA
local function block_sparse_case(b, rows, hopper)
  local n = 2 * b
  return {
    tolerance = { bfloat16 = { 3e-2, 3e-2 }, float16 = { 4e-3, 4e-3 } },
    unavailable = hopper and function(device)
      if not device:match("^cuda") then return nil end
      local major, minor = tl.cuda.get_device_capability()
      if major ~= 9 or minor ~= 0 then return "the Hopper kernel needs a Hopper GPU (compute capability 9.0)" end
      return nil
    end or nil,
    inputs = function(G) return { G.normal(rows, n), G.normal(3, b, b), G.normal(n), G.normal(rows, n) } end,
    run = function(x, blocks, bias, g)
      x, blocks, bias = leaves(x, blocks, bias)
      local cuda = hopper ~= nil and tostring(x.device):match("^cuda") ~= nil
      local before = cuda and tl.cuda.hopper_gemm_enabled()
      if cuda then tl.cuda.set_hopper_gemm_enabled(hopper) end
      local ok, out = pcall(function()
        local layout = tl.nn.block_layout(tl.tensor({ { true, false }, { true, true } }, { device = x.device }))
        local y = tl.block_sparse_linear(x, blocks, layout, bias)
        y:backward(g)
        return { y:detach(), x.grad }
      end)
      if cuda then tl.cuda.set_hopper_gemm_enabled(before) end
      if not ok then error(out, 0) end
      return out
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
-- (300 rows: the Hopper kernel's tiles of 256 rows, a partial one)
local block_sparse = { hopper_b64 = block_sparse_case(64, 300, true), mma_b64 = block_sparse_case(64, 3, false),
  mma_b32 = block_sparse_case(32, 3), plain = block_sparse_case(16, 3) }
M.variants = { block_sparse_linear = block_sparse, block_sparse_linear_backward_input = block_sparse }

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  block_sparse_linear_backward_input = "block_sparse_linear",
  block_sparse_linear_backward_weight = "block_sparse_linear",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  -- blocks of 2 on the grid {{1, 0, 1}, {0, 1, 1}}, with and without a bias
  block_sparse_linear = { { function(x, blocks, bias)
                              local mask = tl.tensor({ { true, false, true }, { false, true, true } })
                              return tl.block_sparse_linear(x, blocks, tl.nn.block_layout(mask), bias)
                            end, { input(3, 6), input(4, 2, 2), input(4) } },
                          { function(x, blocks)
                              local mask = tl.tensor({ { true, false }, { true, true } })
                              return tl.block_sparse_linear(x, blocks, tl.nn.block_layout(mask))
                            end, { input(2, 3, 4), input(3, 2, 2) } } },
}

return M
