-- scaled_dot_product_attention in Lua loops (one head: causal mask, dropout factors, forward and the three gradients), its kernel sweep case, the cases of its kernels' paths (variants: head dims 32, 64 and 128, dropout drawn from Philox4x32-10 in Lua, causal and not, T != S) and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local sweep_helpers = require("helpers.sweep_helpers")
local add_into, leaves = sweep_helpers.add_into, sweep_helpers.leaves

local M = {}

-- Scaled dot-product attention of one head by Lua loops: Q [T][D], Kh and V [S][D], the output's
-- gradient G [T][D] (nested tables); causal hides the keys j > i; keep(i, j) (nil: 1) is the
-- dropout factor of probability (i, j), 0 or 1 / (1 - p). Returns y, gq, gk, gv.
function M.attention_head(Q, Kh, V, G, scale, causal, keep)
  local T, S, D = #Q, #Kh, #Q[1]
  local P, F = {}, {} -- the probabilities and their dropout factors
  for i = 1, T do
    local row, top = {}, -math.huge
    for j = 1, S do
      local s = -math.huge
      if not causal or j <= i then
        s = 0.0
        for d = 1, D do s = s + Q[i][d] * Kh[j][d] end
        s = s * scale
      end
      row[j] = s
      if s > top then top = s end
    end
    local sum = 0.0
    for j = 1, S do
      row[j] = row[j] == -math.huge and 0.0 or math.exp(row[j] - top)
      sum = sum + row[j]
    end
    F[i] = {}
    for j = 1, S do
      row[j] = row[j] / sum
      F[i][j] = keep and keep(i, j) or 1.0
    end
    P[i] = row
  end
  local y = ref.build({ T, D }, function(i, d)
    local acc = 0.0
    for j = 1, S do acc = acc + P[i][j] * F[i][j] * V[j][d] end
    return acc
  end)
  -- dP = (G V^T) * F; dS = P (dP - sum_j P dP) scale
  local dS = {}
  for i = 1, T do
    local dP, dot = {}, 0.0
    for j = 1, S do
      local acc = 0.0
      for d = 1, D do acc = acc + G[i][d] * V[j][d] end
      dP[j] = acc * F[i][j]
      dot = dot + P[i][j] * dP[j]
    end
    dS[i] = {}
    for j = 1, S do dS[i][j] = P[i][j] * (dP[j] - dot) * scale end
  end
  local gq = ref.build({ T, D }, function(i, d)
    local acc = 0.0
    for j = 1, S do acc = acc + dS[i][j] * Kh[j][d] end
    return acc
  end)
  local gk = ref.build({ S, D }, function(j, d)
    local acc = 0.0
    for i = 1, T do acc = acc + dS[i][j] * Q[i][d] end
    return acc
  end)
  local gv = ref.build({ S, D }, function(j, d)
    local acc = 0.0
    for i = 1, T do acc = acc + P[i][j] * F[i][j] * G[i][d] end
    return acc
  end)
  return y, gq, gk, gv
end

M.sweep = {}

-- attention of one leading dim, T = 3 queries, S = 5 keys, D = 4, twice on the same inputs:
-- causal with scale 0.5 and plain (1 / sqrt(D)); both outputs' gradient g, one backward
local function attention_ref(q, k, v, g, causal, scale)
  local y, gq, gk, gv = {}, {}, {}, {}
  for b = 1, #q do y[b], gq[b], gk[b], gv[b] = M.attention_head(q[b], k[b], v[b], g[b], scale, causal) end
  return y, gq, gk, gv
end
M.sweep.scaled_dot_product_attention = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(2, 5, 4), G.normal(2, 5, 4), G.normal(2, 3, 4) } end,
  run = function(q, k, v, g)
    q, k, v = leaves(q, k, v)
    local y1 = tl.scaled_dot_product_attention(q, k, v, { causal = true, scale = 0.5 })
    local y2 = tl.scaled_dot_product_attention(q, k, v)
    local loss = (y1 * g):sum() + (y2 * g):sum()
    loss:backward()
    return { y1:detach(), y2:detach(), q.grad, k.grad, v.grad }
  end,
  reference = function(_, q, k, v, g)
    local y1, gq1, gk1, gv1 = attention_ref(q, k, v, g, true, 0.5)
    local y2, gq2, gk2, gv2 = attention_ref(q, k, v, g, false, 0.5)
    return { y1, y2, add_into(gq1, gq2), add_into(gk1, gk2), add_into(gv1, gv2) }
  end,
}

-- ---- the paths of attention's kernels ----------------------------------------------------------
local SEED = 0x5EED0A77

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
        M.attention_head(q[1][h], k[1][h], v[1][h], g[1][h], scale, causal, keep(h))
    end
    return { y, gq, gk, gv }
  end
end

-- cudnn: whether the run may take cuDNN's fused attention (tl.cuda.set_cudnn_enabled; tlua's own
-- kernels' cases turn it off)
local function attention_case(T, S, D, causal, p, cudnn)
  return {
    -- bfloat16 keeps 8 bits: sums of S products of rounded operands, and their gradients
    tolerance = { bfloat16 = { 4e-2, 4e-2 }, float16 = { 8e-3, 8e-3 } },
    inputs = function(G)
      return { G.normal(1, H, T, D), G.normal(1, H, S, D), G.normal(1, H, S, D), G.normal(1, H, T, D) }
    end,
    run = function(q, k, v, g)
      q, k, v = leaves(q, k, v)
      local was = tl.cuda.cudnn_enabled()
      tl.cuda.set_cudnn_enabled(cudnn == true)
      local ok, y = pcall(function()
        tl.manual_seed(SEED)
        local out = tl.scaled_dot_product_attention(q, k, v, { causal = causal, dropout = p })
        out:backward(g)
        return out
      end)
      tl.cuda.set_cudnn_enabled(was)
      if not ok then error(y, 0) end
      return { y:detach(), q.grad, k.grad, v.grad }
    end,
    reference = attention_reference(T, S, D, causal, p),
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
  cudnn = attention_case(48, 64, 64, true, 0, true),
}

M.variants = { scaled_dot_product_attention = attention, scaled_dot_product_attention_backward = attention }

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  scaled_dot_product_attention_backward = "scaled_dot_product_attention",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  -- no leading dim and T < S; causal with T > S and a scale; dropout and causal under a fixed seed
  -- (every call draws the same mask)
  scaled_dot_product_attention = {
    { tl.scaled_dot_product_attention, { input(3, 4), input(5, 4), input(5, 4) } },
    { function(q, k, v) return tl.scaled_dot_product_attention(q, k, v, { causal = true, scale = 0.7 }) end,
      { input(1, 2, 5, 3), input(1, 2, 4, 3), input(1, 2, 4, 3) } },
    { function(q, k, v)
        tl.manual_seed(7)
        return tl.scaled_dot_product_attention(q, k, v, { causal = true, dropout = 0.3 })
      end, { input(2, 4, 3), input(2, 6, 3), input(2, 6, 3) } } },
}

return M
