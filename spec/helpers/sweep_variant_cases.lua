-- The kernel sweep's cases for the paths of kernels that have several (tl.kernel_variants()): for each op and variant, inputs and a run that take that path, against Lua loops (attention with its dropout mask drawn from Philox4x32-10 in Lua; block-sparse linear from its blocks laid out dense).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")

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

return {
  scaled_dot_product_attention = attention,
  scaled_dot_product_attention_backward = attention,
  block_sparse_linear = block_sparse,
  block_sparse_linear_backward_input = block_sparse,
}
