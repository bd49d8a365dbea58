-- cross_entropy in Lua loops (mean over rows, label smoothing, and the logits' gradient), its kernel sweep case and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves = sweep_helpers.leaves

local M = {}

-- mean cross entropy of logits x [N, K] with 1-based targets and label smoothing eps (torch's
-- definition), and its gradient: returns loss, gx
function M.cross_entropy(x, target, eps)
  local loss, gx = 0.0, {}
  local N, K = #x, #x[1]
  for i = 1, N do
    local logp = ref.log_softmax_list(x[i])
    local row = {}
    for c = 1, K do
      local q = eps / K + (c == target[i] and (1 - eps) or 0)
      loss = loss - q * logp[c]
      row[c] = (math.exp(logp[c]) - q) / N
    end
    gx[i] = row
  end
  return loss / N, gx
end

M.sweep = {}

local TARGET, SMOOTHING = { 1, 4, 2, 2, 3 }, 0.1
M.sweep.cross_entropy = {
  inputs = function(G) return { G.normal(5, 4) } end,
  run = function(x)
    x = leaves(x)
    local loss = tl.cross_entropy(x, tl.tensor(TARGET, { device = x.device }), { label_smoothing = SMOOTHING })
    loss:backward()
    return { loss:detach(), x.grad }
  end,
  reference = function(_, x) return { M.cross_entropy(x, TARGET, SMOOTHING) } end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  cross_entropy_backward = "cross_entropy",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  cross_entropy = { { function(l) return tl.cross_entropy(l, tl.tensor({ 1, 3, 2 })) end, { input(3, 4) } },
                    { function(l) return tl.cross_entropy(l, tl.tensor({ 4, 1, 4 }), { label_smoothing = 0.2 }) end,
                      { input(3, 4) } } },
}

return M
