-- layer_norm in Lua loops (rows normalized, weight and bias, and the three gradients), its kernel sweep case and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
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

M.sweep = {}

M.sweep.layer_norm = {
  inputs = function(G) return { G.normal(3, 6), G.normal(6), G.normal(6), G.normal(3, 6) } end,
  run = function(x, w, b, g)
    x, w, b = leaves(x, w, b)
    local y = tl.layer_norm(x, w, b, 1e-5)
    y:backward(g)
    return { y:detach(), x.grad, w.grad, b.grad }
  end,
  reference = function(_, x, w, b, g) return { M.layer_norm(x, w, b, g, 1e-5) } end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  layer_norm_backward_input = "layer_norm", layer_norm_backward_weight = "layer_norm",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  layer_norm = { { function(x, w, b) return tl.layer_norm(x, w, b) end, { input(3, 5), input(5), input(5) } },
                 { function(x) return tl.layer_norm(x, nil, nil, 1e-3) end, { input(2, 2, 4) } } },
}

return M
