-- cross_entropy and linear_cross_entropy in Lua loops (mean or sum over rows, label smoothing, ignore_index, and the gradients), their kernel sweep cases and gradcheck cases (found by helpers/family_cases.lua).
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

-- the classifier's loss in float64 loops: logits = x w^T + b (b may be nil), then the cross
-- entropy of each row not ignored, summed ("sum") or divided by the rows kept ("mean"); returns
-- loss, gx, gw, gb
function M.linear_cross_entropy(x, w, b, target, o)
  local eps, N, V, C = o.label_smoothing or 0, #x, #w, #x[1]
  local logits, kept = {}, 0
  for i = 1, N do
    logits[i] = {}
    for v = 1, V do
      local z = b and b[v] or 0
      for c = 1, C do z = z + x[i][c] * w[v][c] end
      logits[i][v] = z
    end
    if target[i] ~= o.ignore_index then kept = kept + 1 end
  end
  local scale = o.reduction == "sum" and 1 or 1 / kept
  local loss, gx, gw, gb = 0.0, {}, {}, {}
  for v = 1, V do gw[v], gb[v] = {}, 0 for c = 1, C do gw[v][c] = 0 end end
  for i = 1, N do
    gx[i] = {}
    for c = 1, C do gx[i][c] = 0 end
    if target[i] ~= o.ignore_index then
      local logp = ref.log_softmax_list(logits[i])
      for v = 1, V do
        local q = eps / V + (v == target[i] and (1 - eps) or 0)
        loss = loss - q * logp[v] * scale
        local d = (math.exp(logp[v]) - q) * scale
        gb[v] = gb[v] + d
        for c = 1, C do
          gx[i][c] = gx[i][c] + d * w[v][c]
          gw[v][c] = gw[v][c] + d * x[i][c]
        end
      end
    end
  end
  return loss, gx, gw, gb
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

-- 7 rows in chunks of 3 (a partial last chunk), 11 classes (on CUDA padded to 64 columns), two
-- rows ignored, label smoothing, a bias: every part of the row kernel and of the chunk loop
local LCE_TARGET = { 1, 3, 11, 3, 5, 2, 7 }
local LCE = { chunk = 3, label_smoothing = 0.1, ignore_index = 3 }
M.sweep.linear_cross_entropy = {
  inputs = function(G) return { G.normal(7, 5), G.normal(11, 5), G.normal(11) } end,
  run = function(x, w, b)
    x, w, b = leaves(x), leaves(w), leaves(b)
    local loss = tl.linear_cross_entropy(x, w, tl.tensor(LCE_TARGET, { device = x.device }),
      { bias = b, chunk = LCE.chunk, label_smoothing = LCE.label_smoothing, ignore_index = LCE.ignore_index })
    loss:backward()
    return { loss:detach(), x.grad, w.grad, b.grad }
  end,
  reference = function(_, x, w, b) return { M.linear_cross_entropy(x, w, b, LCE_TARGET, LCE) } end,
  -- bfloat16: the logits and their gradient are rounded to 8 bits before the GEMMs sum them
  tolerance = { bfloat16 = { 4e-2, 4e-2 }, float16 = { 5e-3, 5e-3 } },
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
  linear_cross_entropy = {
    { function(x, w, b) return tl.linear_cross_entropy(x, w, tl.tensor({ 2, 5, 1, 5 }), { bias = b, chunk = 3 }) end,
      { input(4, 3), input(5, 3), input(5) } },
    { function(x, w) return tl.linear_cross_entropy(x, w, tl.tensor({ { 1, 4 }, { 3, 4 } }),
        { label_smoothing = 0.2, ignore_index = 3, reduction = "sum", chunk = 1 }) end,
      { input(2, 2, 3), input(4, 3) } },
  },
}

return M
