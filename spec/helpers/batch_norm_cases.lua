-- batch_norm in Lua loops (training with the running update, eval on running statistics, and the three gradients), its kernel sweep case, the cases of its kernels' paths (variants: planes and columns) and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves = sweep_helpers.leaves

local M = {}

-- batch_norm over flat row-major x, g of [N, C, S] (w, b, rm, rv flat [C]; rm, rv updated in
-- place when training): y, the gradients of x, w and b for the output's gradient g, in float64.
-- training: the batch's mean and biased variance (running: momentum towards the unbiased one);
-- else the running statistics, with the input's gradient g * w * invstd.
function M.batch_norm(x, w, b, g, rm, rv, N, C, S, o)
  local M_ = N * S
  local y, gx, gw, gb = {}, {}, {}, {}
  for c = 1, C do
    local function at(n, j) return ((n - 1) * C + c - 1) * S + j end
    local mean, invstd
    if o.training then
      local sum, sq = 0.0, 0.0
      for n = 1, N do for j = 1, S do sum = sum + x[at(n, j)] end end
      mean = sum / M_
      for n = 1, N do for j = 1, S do sq = sq + (x[at(n, j)] - mean) ^ 2 end end
      local var = sq / M_
      invstd = 1 / math.sqrt(var + o.eps)
      if rm then
        rm[c] = (1 - o.momentum) * rm[c] + o.momentum * mean
        rv[c] = (1 - o.momentum) * rv[c] + o.momentum * var * M_ / (M_ - 1)
      end
    else
      mean, invstd = rm[c], 1 / math.sqrt(rv[c] + o.eps)
    end
    local sdy, sdyx = 0.0, 0.0
    for n = 1, N do
      for j = 1, S do
        local i = at(n, j)
        local xhat = (x[i] - mean) * invstd
        y[i] = xhat * w[c] + b[c]
        sdy, sdyx = sdy + g[i], sdyx + g[i] * xhat
      end
    end
    gw[c], gb[c] = sdyx, sdy
    for n = 1, N do
      for j = 1, S do
        local i = at(n, j)
        if o.training then
          local xhat = (x[i] - mean) * invstd
          gx[i] = w[c] * invstd * (g[i] - sdy / M_ - xhat * sdyx / M_)
        else
          gx[i] = g[i] * w[c] * invstd
        end
      end
    end
  end
  return y, gx, gw, gb
end

M.sweep = {}

-- batch_norm of [N, C, *spatial]: a training step (the running statistics updated) and an eval
-- step on them, each with its output and the gradients of input, weight and bias; shapes pick
-- the CUDA paths (M.variants below)
local function batch_norm_case(shape)
  local C = shape[2]
  local N, S = shape[1], 1
  for d = 3, #shape do S = S * shape[d] end
  return {
    inputs = function(G)
      return { G.normal(table.unpack(shape)), G.normal(C), G.normal(C), G.normal(table.unpack(shape)),
        G.normal(C), G.uniform(0.5, 2, C) }
    end,
    run = function(x, w, b, g, rm, rv)
      local out = {}
      rm, rv = rm:clone(), rv:clone()
      for _, training in ipairs({ true, false }) do
        local xl, wl, bl = leaves(x, w, b)
        local y = tl.batch_norm(xl, rm, rv, { weight = wl, bias = bl, training = training, momentum = 0.25 })
        y:backward(g)
        for _, v in ipairs({ y:detach(), xl.grad, wl.grad, bl.grad }) do out[#out + 1] = v end
        if training then out[#out + 1], out[#out + 2] = rm:clone(), rv:clone() end
      end
      return out
    end,
    reference = function(_, x, w, b, g, rm, rv)
      local out = {}
      local fx, fg = ref.flatten(x), ref.flatten(g)
      for _, training in ipairs({ true, false }) do
        local y, gx, gw, gb = M.batch_norm(fx, w, b, fg, rm, rv, N, C, S,
          { training = training, momentum = 0.25, eps = 1e-5 })
        for _, v in ipairs({ ref.unflatten(y, shape), ref.unflatten(gx, shape), gw, gb }) do out[#out + 1] = v end
        if training then out[#out + 1], out[#out + 2] = { table.unpack(rm) }, { table.unpack(rv) } end
      end
      return out
    end,
  }
end
M.sweep.batch_norm = batch_norm_case({ 3, 4, 2, 3 })

-- ---- batch_norm: S >= 64 reads a channel's planes by blocks (chunks over N), S < 64 the
-- columns of [N, C * S]; the backward's kernels take the same path as the forward
local batch_norm = {
  planes = batch_norm_case({ 3, 2, 8, 9 }),
  columns = batch_norm_case({ 5, 3, 2 }),
}

M.variants = {
  batch_norm = batch_norm, batch_norm_backward_reduce = batch_norm, batch_norm_backward_input = batch_norm,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  batch_norm_backward_reduce = "batch_norm", batch_norm_backward_input = "batch_norm",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  -- training (the batch's statistics; no running ones, so evaluations do not drift) and eval on
  -- fixed running statistics, weight and bias included
  batch_norm = { { function(x, w, b) return tl.batch_norm(x, nil, nil, { weight = w, bias = b, training = true }) end,
                   { input(3, 2, 4), input(2), input(2) } },
                 { function(x, w, b)
                     local rm = tl.tensor({ 0.1, -0.2 }, { dtype = "float64" })
                     local rv = tl.tensor({ 0.5, 1.5 }, { dtype = "float64" })
                     return tl.batch_norm(x, rm, rv, { weight = w, bias = b, eps = 1e-3 })
                   end, { input(2, 2, 2, 3), input(2), input(2) } },
                 { function(x) return tl.batch_norm(x, nil, nil, { training = true }) end, { input(5, 3) } } },
}

return M
