-- layer_norm and add_layer_norm in Lua loops (rows normalized, weight and bias, the three gradients, the sum's), their kernel sweep cases (each backward path: the one pass, the input's alone, the weight's alone; CUDA's one-pass variants) and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves = sweep_helpers.leaves

local M = {}

-- layer norm of the rows of x [N, D] with weight w, bias b, eps, and the gradients of
-- sum(y * g): returns y, gx, gw, gb
function M.layer_norm(x, w, b, g, eps)
  local y, gx, gw, gb = {}, {}, {}, {}
  local D = #w
  for j = 1, D do gw[j], gb[j] = 0.0, 0.0 end
  for i = 1, #x do
    local mean, var = 0.0, 0.0
    for j = 1, D do mean = mean + x[i][j] end
    mean = mean / D
    for j = 1, D do var = var + (x[i][j] - mean) ^ 2 end
    local rstd = 1 / math.sqrt(var / D + eps)
    local xhat, gh, m1, m2 = {}, {}, 0.0, 0.0
    for j = 1, D do
      xhat[j] = (x[i][j] - mean) * rstd
      gh[j] = g[i][j] * w[j]
      m1, m2 = m1 + gh[j] / D, m2 + gh[j] * xhat[j] / D
      gw[j], gb[j] = gw[j] + g[i][j] * xhat[j], gb[j] + g[i][j]
    end
    y[i], gx[i] = {}, {}
    for j = 1, D do
      y[i][j] = xhat[j] * w[j] + b[j]
      gx[i][j] = rstd * (gh[j] - m1 - xhat[j] * m2)
    end
  end
  return y, gx, gw, gb
end

-- add_layer_norm's reference: s = x + r (rounded to dtype, as the sum is a tensor of the inputs'
-- dtype; nil: float64), then layer_norm of s with the gradient gs of the sum added to the input's:
-- returns y, s, gx (= gr), gw, gb. gs may be nil (no gradient of the sum).
function M.add_layer_norm(x, r, w, b, g, gs, eps, dtype)
  local s = {}
  for i = 1, #x do
    s[i] = {}
    for j = 1, #x[i] do
      s[i][j] = x[i][j] + r[i][j]
      if dtype and dtype ~= "float64" then s[i][j] = ref.round_to(s[i][j], dtype) end
    end
  end
  local y, gx, gw, gb = M.layer_norm(s, w, b, g, eps)
  if gs then
    for i = 1, #gx do
      for j = 1, #gx[i] do gx[i][j] = gx[i][j] + gs[i][j] end
    end
  end
  return y, s, gx, gw, gb
end

M.sweep = {}

-- every gradient wanted: the one-pass backward (layer_norm_backward)
local function layer_norm_case(rows, D)
  return {
    inputs = function(G) return { G.normal(rows, D), G.normal(D), G.normal(D), G.normal(rows, D) } end,
    run = function(x, w, b, g)
      x, w, b = leaves(x, w, b)
      local y = tl.layer_norm(x, w, b, 1e-5)
      y:backward(g)
      return { y:detach(), x.grad, w.grad, b.grad }
    end,
    reference = function(_, x, w, b, g) return { M.layer_norm(x, w, b, g, 1e-5) } end,
  }
end
M.sweep.layer_norm = layer_norm_case(3, 6)

-- only the input's gradient: layer_norm_backward_input alone
M.sweep.layer_norm_input_gradient = {
  inputs = function(G) return { G.normal(3, 7), G.normal(7), G.normal(7), G.normal(3, 7) } end,
  run = function(x, w, b, g)
    x = leaves(x)
    tl.layer_norm(x, w, b, 1e-5):backward(g)
    return { x.grad }
  end,
  reference = function(_, x, w, b, g)
    local _, gx = M.layer_norm(x, w, b, g, 1e-5)
    return { gx }
  end,
}

-- only the weight's and the bias's: layer_norm_backward_weight alone
M.sweep.layer_norm_weight_gradient = {
  inputs = function(G) return { G.normal(5, 3), G.normal(3), G.normal(3), G.normal(5, 3) } end,
  run = function(x, w, b, g)
    w, b = leaves(w, b)
    tl.layer_norm(x, w, b, 1e-5):backward(g)
    return { w.grad, b.grad }
  end,
  reference = function(_, x, w, b, g)
    local _, _, gw, gb = M.layer_norm(x, w, b, g, 1e-5)
    return { gw, gb }
  end,
}

-- add_layer_norm with both outputs used (the sum's gradient gs added): the fused forward and the
-- one pass with the sum's gradient
local function add_layer_norm_case(rows, D)
  return {
    inputs = function(G)
      return { G.normal(rows, D), G.normal(rows, D), G.normal(D), G.normal(D), G.normal(rows, D), G.normal(rows, D) }
    end,
    run = function(x, r, w, b, g, gs)
      x, r, w, b = leaves(x, r, w, b)
      local y, s = tl.add_layer_norm(x, r, w, b)
      local loss = (y * g):sum() + (s * gs):sum()
      loss:backward()
      return { y:detach(), s:detach(), x.grad, r.grad, w.grad, b.grad }
    end,
    reference = function(dtype, x, r, w, b, g, gs)
      local y, s, gx, gw, gb = M.add_layer_norm(x, r, w, b, g, gs, 1e-5, dtype)
      return { y, s, gx, gx, gw, gb }
    end,
  }
end
M.sweep.add_layer_norm = add_layer_norm_case(4, 5)

-- mixed precision (kernels/kernel.h): a float32 row with 16-bit branch operands. add_layer_norm of
-- a float32 x and a bfloat16 residual with a bfloat16 output (both outputs used, so grad_out is
-- bfloat16 and the residual's gradient is written in bfloat16 beside x's), or layer_norm with a
-- bfloat16 output (residual false). wanted: the gradients asked ("all", or "input": x's and the
-- residual's alone). The reference rounds the residual, y, y's gradient and the residual's
-- gradient to bfloat16 as the op's dtypes do.
local function mixed_case(rows, D, residual, wanted)
  local input_only = wanted == "input"
  return {
    inputs = function(G)
      return { G.normal(rows, D), G.normal(rows, D), G.normal(D), G.normal(D), G.normal(rows, D), G.normal(rows, D) }
    end,
    run = function(x, r, w, b, g, gs)
      local rb = r:to("bfloat16")
      if input_only then
        x, rb = leaves(x, rb)
      else
        x, rb, w, b = leaves(x, rb, w, b)
      end
      local y, s
      if residual then
        y, s = tl.add_layer_norm(x, rb, w, b, { output_dtype = "bfloat16" })
      else
        y = tl.layer_norm(x, w, b, 1e-5, { output_dtype = "bfloat16" })
      end
      local loss = (y:float() * g):sum()
      if s then loss = loss + (s * gs):sum() end
      loss:backward()
      local out = { y:detach():float(), x.grad }
      if residual then
        out[#out + 1] = s:detach()
        out[#out + 1] = rb.grad:float()
      end
      if not input_only then
        out[#out + 1] = w.grad
        out[#out + 1] = b.grad
      end
      return out
    end,
    reference = function(_, x, r, w, b, g, gs)
      local bf = function(t) return ref.map(t, ref.round_bf16) end
      local y, s, gx, gw, gb
      if residual then
        y, s, gx, gw, gb = M.add_layer_norm(x, bf(r), w, b, bf(g), gs, 1e-5, "float32")
      else
        y, gx, gw, gb = M.layer_norm(x, w, b, bf(g), 1e-5)
      end
      local out = { bf(y), gx }
      if residual then
        out[#out + 1] = s
        out[#out + 1] = bf(gx)
      end
      if not input_only then
        out[#out + 1] = gw
        out[#out + 1] = gb
      end
      return out
    end,
    -- a bfloat16 rounding may land one step (2^-8 relative) apart from the float64 reference's
    tolerance = { float32 = { 8e-3, 8e-3 } },
  }
end
M.mixed_case = mixed_case

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  layer_norm_backward = "layer_norm",
  layer_norm_backward_input = "layer_norm_input_gradient",
  layer_norm_backward_weight = "layer_norm_weight_gradient",
}

-- the paths of CUDA's one pass: rows whose column sums fit a block's shared memory (D = 7, read
-- by a warp; D = 264, whole 16-byte vectors held in registers), and longer ones (D = 6200 > 6144),
-- which run the split kernels
-- and of CUDA's forward: rows of whole 16-byte vectors held in registers (D = 16: one vector a
-- lane or none; D = 264: 33 to 132 vectors, so 2 to 8 a lane with the last round partial), and
-- other rows (D = 5)
-- and mixed precision on each (float32 only): the vector paths (D = 264) and the rows (D = 7)
M.variants = {
  layer_norm_backward = { warps = layer_norm_case(3, 7), vector = layer_norm_case(3, 264),
                          split = add_layer_norm_case(2, 6200), mixed = mixed_case(3, 264, true) },
  layer_norm_backward_input = { mixed = mixed_case(4, 7, true, "input") },
  layer_norm = { vector = layer_norm_case(3, 16), rows = layer_norm_case(3, 5),
                 mixed = mixed_case(3, 264, false) },
  add_layer_norm = { vector = add_layer_norm_case(3, 264), rows = add_layer_norm_case(4, 5),
                     mixed = mixed_case(4, 7, true) },
}

local function input(...) return tl.randn(...):double():requires_grad_() end
local function constant(...) return tl.randn(...):double() end

M.gradcheck = {
  layer_norm = { { function(x, w, b) return tl.layer_norm(x, w, b) end, { input(3, 5), input(5), input(5) } },
                 { function(x) return tl.layer_norm(x, nil, nil, 1e-3) end, { input(2, 2, 4) } },
                 -- each backward path: the input's alone, the weight's alone
                 { function(x, w) return tl.layer_norm(x, w, nil) end, { input(3, 7), constant(7) } },
                 { function(x, w, b) return tl.layer_norm(x, w, b) end, { constant(4, 3), input(3), input(3) } } },
  add_layer_norm = {
    -- both outputs used (the sum's gradient reaches x and residual), every input differentiated
    { function(x, r, w, b) return { tl.add_layer_norm(x, r, w, b) } end, { input(3, 5), input(3, 5), input(5), input(5) } },
    -- only the normalized output used (no gradient of the sum), no weight nor bias, eps 1e-3
    { function(x, r) return (tl.add_layer_norm(x, r, nil, nil, { eps = 1e-3 })) end, { input(2, 2, 4), input(2, 2, 4) } },
    -- only the sum used later (the normalized output's gradient is zero)
    { function(x, r, w) local _, s = tl.add_layer_norm(x, r, w); return s:sin() end, { input(2, 3), input(2, 3), input(3) } },
    -- some inputs only: the input's gradient alone (the split kernel), with the sum's
    { function(x, r, w) return { tl.add_layer_norm(x, r, w) } end, { input(3, 1), constant(3, 1), constant(1) } },
    { function(x, r, w, b) return { tl.add_layer_norm(x, r, w, b) } end, { constant(3, 7), input(3, 7), constant(7), constant(7) } },
    -- the weight's and the bias's alone
    { function(x, r, w, b) return { tl.add_layer_norm(x, r, w, b) } end, { constant(4, 3), constant(4, 3), input(3), input(3) } },
  },
}

return M
