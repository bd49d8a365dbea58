-- dropout's kernel sweep case (the mask from Philox4x32-10 in Lua), the cases of its kernel's paths (variants) and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local sweep_helpers = require("helpers.sweep_helpers")
local transpose = sweep_helpers.transpose

local M = {}

M.sweep = {}

-- dropout after tl.manual_seed: y = x * keep / (1 - p) and its gradient g * keep / (1 - p) (the
-- same kernel on g), then a transposed z (its mask by the view's row-major index) continuing the
-- stream; keep_e = the float32 uniform of element e (Philox4x32-10 in Lua: block counter + e // 4,
-- word e % 4, 24 bits) >= p rounded to float32
local DROPOUT_SEED, DROPOUT_P = 0x123456789ABCDEF, 0.375
local function dropout_keep(n, counter)
  local keep, threshold = {}, string.unpack("f", string.pack("f", DROPOUT_P))
  for e = 0, n - 1 do
    local w = K.philox(counter + e // 4, DROPOUT_SEED)
    keep[e + 1] = (w[e % 4 + 1] >> 8) * 2.0 ^ -24 >= threshold
  end
  return keep, counter + (n + 3) // 4
end
local function dropped(m, keep) -- m a nested [rows][cols] table, keep by row-major index
  local cols = #m[1]
  return ref.build({ #m, cols }, function(i, j)
    return keep[(i - 1) * cols + j] and m[i][j] / (1 - DROPOUT_P) or 0.0
  end)
end
M.sweep.dropout = {
  inputs = function(G) return { G.normal(3, 7), G.normal(3, 7), G.normal(5, 3) } end,
  run = function(x, g, z)
    tl.manual_seed(DROPOUT_SEED)
    local leaf = x:detach():requires_grad_()
    local y = tl.dropout(leaf, DROPOUT_P)
    local yz = tl.dropout(z:transpose(1, 2), DROPOUT_P)
    y:backward(g)
    return { y:detach(), leaf.grad, yz }
  end,
  reference = function(_, x, g, z)
    local keep, counter = dropout_keep(21, 0)
    local keep_z = dropout_keep(15, counter)
    return { dropped(x, keep), dropped(g, keep), dropped(transpose(z), keep_z) }
  end,
}

-- ---- dropout: the mask from Philox4x32-10 in Lua ------------------------------------------------
-- M.sweep.dropout runs a contiguous input and a transposed one; p = 1 drops every element undrawn
local dropout_case = M.sweep.dropout
local dropout = {
  dense = dropout_case,
  strided = dropout_case,
  dense_vector = dropout_case,
  dense_scalar = {
    layout = function(x) return sweep_helpers.layouts.offset(x) end,
    inputs = dropout_case.inputs, run = dropout_case.run, reference = dropout_case.reference,
  },
  all_dropped = {
    inputs = function(G) return { G.normal(3, 7) } end,
    run = function(x) return { tl.dropout(x, 1) } end,
    reference = function(_, x) return { ref.map(x, function() return 0.0 end) } end,
  },
}

M.variants = { dropout = dropout }

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  -- under a fixed seed, so every evaluation draws the same mask; contiguous and transposed
  dropout = { { function(x) tl.manual_seed(17) return tl.dropout(x, 0.4) end, { input(4, 5) } },
              { function(x) tl.manual_seed(3) return tl.dropout(x:transpose(1, 2), 0.25) end, { input(3, 6) } } },
}

return M
