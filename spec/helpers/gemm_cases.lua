-- The GEMM ops' kernel sweep cases (matmul, matmul_ in place, matmul's gradients, linear, outer: forward and every gradient against Lua loops) and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local transpose, add_into, column_sums = sweep_helpers.transpose, sweep_helpers.add_into, sweep_helpers.column_sums
local differentiated = sweep_helpers.differentiated

local M = {}

M.sweep = {}

M.sweep.matmul = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 5) } end,
  run = function(a, b) return { tl.matmul(a, b) } end,
  reference = function(_, a, b) return { ref.matmul(a, b) } end,
}
-- x:matmul_(w) in place: x row-major (one folded matrix) and column-major (y's matrices
-- transposed), against w and w^T
M.sweep.matmul_inplace = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 4), G.normal(2, 4, 3) } end,
  run = function(x, w, y)
    return { x:clone():matmul_(w), y:clone():transpose(2, 3):matmul_(w:transpose(1, 2)) }
  end,
  reference = function(_, x, w, y)
    local yt = {}
    for b = 1, #y do yt[b] = ref.matmul(transpose(y[b]), transpose(w)) end
    return { ref.matmul(x, w), yt }
  end,
}
-- matmul_'s two CUDA paths: on a Hopper GPU the core over x itself (16-bit, rows 16-byte aligned:
-- x [130, 16] against w and w^T, two tiles of rows), else by tiles of rows (the core off)
local function inplace_case(hopper)
  return {
    unavailable = hopper and function(device)
      if not device:match("^cuda") then return nil end
      local major, minor = tl.cuda.get_device_capability()
      if major ~= 9 or minor ~= 0 then return "the Hopper core needs a Hopper GPU (compute capability 9.0)" end
      return nil
    end or nil,
    inputs = function(G) return { G.normal(130, 16), G.normal(16, 16) } end,
    run = function(x, w)
      local cuda = tostring(x.device):match("^cuda") ~= nil
      local before = cuda and tl.cuda.hopper_gemm_enabled()
      if cuda then tl.cuda.set_hopper_gemm_enabled(hopper) end
      local ok, out = pcall(function()
        return { x:clone():matmul_(w), x:clone():matmul_(w:transpose(1, 2)) }
      end)
      if cuda then tl.cuda.set_hopper_gemm_enabled(before) end
      if not ok then error(out, 0) end
      return out
    end,
    reference = function(_, x, w) return { ref.matmul(x, w), ref.matmul(x, transpose(w)) } end,
  }
end
M.variants = { matmul_inplace = { hopper = inplace_case(true), tiles = inplace_case(false) } }

-- y = a @ b, a [2, 3, 4] batched against b [4, 5]: ga = g b^T, gb = sum over the batch a^T g
M.sweep.matmul_backward = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 5), G.normal(2, 3, 5) } end,
  run = differentiated(tl.matmul),
  reference = function(_, a, b, g)
    local ga, gb = {}, nil
    for n = 1, #a do
      ga[n] = ref.matmul(g[n], transpose(b))
      gb = add_into(gb, ref.matmul(transpose(a[n]), g[n]))
    end
    return { ref.matmul(a, b), ga, gb }
  end,
}
-- y = x w^T + bias: gx = g w, gw = g^T x, gbias = column sums of g
M.sweep.linear = {
  inputs = function(G) return { G.normal(4, 3), G.normal(5, 3), G.normal(5), G.normal(4, 5) } end,
  run = differentiated(tl.linear),
  reference = function(_, x, w, b, g)
    local y = ref.broadcast_map(function(v, bias) return v + bias end, ref.matmul(x, transpose(w)), b)
    return { y, ref.matmul(g, w), ref.matmul(transpose(g), x), column_sums(g) }
  end,
}
-- the same with only the bias and the input wanting gradients: the bias's own GEMM (with the
-- weight's, its sums come from that GEMM's epilogue)
M.sweep.linear_bias = {
  inputs = function(G) return { G.normal(4, 3), G.normal(5, 3), G.normal(5), G.normal(4, 5) } end,
  run = function(x, w, b, g)
    x, b = x:detach():requires_grad_(), b:detach():requires_grad_()
    local y = tl.linear(x, w, b)
    y:backward(g)
    return { y:detach(), x.grad, b.grad }
  end,
  reference = function(_, x, w, b, g)
    local y = ref.broadcast_map(function(v, bias) return v + bias end, ref.matmul(x, transpose(w)), b)
    return { y, ref.matmul(g, w), column_sums(g) }
  end,
}
local gelu_tanh, gelu_tanh_slope = ref.gelu_tanh, ref.gelu_tanh_derivative
local function map(m, f) return ref.broadcast_map(function(v) return f(v) end, m) end
local function with_bias(m, b) return ref.broadcast_map(function(v, c) return v + c end, m, b) end
-- y = gelu(x w1^T + b1) w2^T + b2, the feed-forward node on the GEMM epilogues (gelu_epilogue; sizes multiples
-- of 8: on CUDA, 16-byte aligned rows take cuBLASLt's fused epilogues): with pre = x w1^T + b1,
-- h = gelu(pre), gw2 = g^T h, gb2 = g's column sums, dpre = (g w2) * gelu'(pre), gw1 = dpre^T x,
-- gb1 = dpre's column sums, gx = dpre w1. The tensors the node keeps or makes are of the dtype, so
-- the reference rounds them as they are stored: pre (kept), h (forward's, and backward's made
-- again from the stored pre) and dpre.
M.sweep.linear_gelu_linear = {
  -- cuBLASLt's GELU epilogues evaluate tanh by a fast approximation (relative errors near 4e-5 in
  -- float32); dpre, rounded from its float32 product, falls on the other side of a rounding step
  -- than the float64 reference's for some elements: an ulp of dpre (magnitudes near 4: 0.03 in
  -- bf16, 0.004 in f16) times a weight in gx and gw1 per such element
  tolerance = { float32 = { 1e-4, 1e-4 }, bfloat16 = { 2e-2, 6e-2 }, float16 = { 2e-3, 8e-3 } },
  inputs = function(G)
    return { G.normal(8, 16), G.normal(24, 16), G.normal(24), G.normal(8, 24), G.normal(8), G.normal(8, 8) }
  end,
  run = differentiated(function(x, w1, b1, w2, b2)
    return tl.linear_gelu_linear(x, w1, b1, w2, b2, { approximate = "tanh", gelu_epilogue = true })
  end),
  reference = function(dtype, x, w1, b1, w2, b2, g)
    local function stored(v) return dtype == "float64" and v or ref.round_to(v, dtype) end
    local pre = with_bias(ref.matmul(x, transpose(w1)), b1)
    local y = with_bias(ref.matmul(map(pre, function(v) return stored(gelu_tanh(v)) end), transpose(w2)), b2)
    local kept = map(pre, stored)
    local h = map(kept, function(v) return stored(gelu_tanh(v)) end)
    local dpre = ref.broadcast_map(function(d, p) return stored(d * gelu_tanh_slope(p)) end, ref.matmul(g, w2), kept)
    return { y, ref.matmul(dpre, w1), ref.matmul(transpose(dpre), x), column_sums(dpre),
      ref.matmul(transpose(g), h), column_sums(g) }
  end,
}
-- y = a b^T: ga = g b, gb = g^T a
M.sweep.outer = {
  inputs = function(G) return { G.normal(3), G.normal(4), G.normal(3, 4) } end,
  run = differentiated(tl.outer),
  reference = function(_, a, b, g)
    local y = ref.build({ #a, #b }, function(i, j) return a[i] * b[j] end)
    return { y, ref.matmul(g, b), ref.matmul(transpose(g), a) }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  linear_forward = "linear", linear_backward_input = "linear", linear_backward_weight = "linear",
  linear_backward_bias = "linear_bias", matmul_backward_input = "matmul_backward",
  linear_gelu_forward = "linear_gelu_linear", linear_backward_input_dgelu = "linear_gelu_linear",
  matmul_backward_other = "matmul_backward", outer_forward = "outer",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  matmul = { { tl.matmul, { input(3, 4), input(4, 2) } },
             { tl.matmul, { input(2, 1, 3, 4), input(3, 4, 2) } },
             { tl.matmul, { input(4), input(4, 3) } },
             { tl.matmul, { input(3, 4), input(4) } },
             { tl.matmul, { input(4), input(4) } } },
  linear_forward = { { tl.linear, { input(5, 3), input(4, 3), input(4) } },
                     { tl.linear, { input(2, 5, 3), input(4, 3) } } },
  outer_forward = { { tl.outer, { input(3), input(4) } } },
  linear_gelu_forward = {
    { function(x, w1, b1, w2, b2) return tl.linear_gelu_linear(x, w1, b1, w2, b2, { approximate = "tanh" }) end,
      { input(3, 4), input(5, 4), input(5), input(2, 5), input(2) } },
    { function(x, w1, w2) return tl.linear_gelu_linear(x, w1, nil, w2, nil) end,
      { input(2, 3, 4), input(5, 4), input(2, 5) } },
  },
}

return M
