-- The grouped products' kernel sweep cases (grouped_matmul, grouped_mm: forward and every gradient against per-group Lua loops) and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local transpose, add_into, leaves = sweep_helpers.transpose, sweep_helpers.add_into, sweep_helpers.leaves

local M = {}

M.sweep = {}

-- grouped products: C_i = A_i B_i (the second A read transposed), gA_i = g_i B_i^T,
-- gB_i = A_i^T g_i
M.sweep.grouped_matmul = {
  inputs = function(G)
    return { G.normal(3, 4), G.normal(4, 2), G.normal(5, 2), G.normal(5, 3), G.normal(3, 2), G.normal(2, 3) }
  end,
  run = function(a1, b1, a2t, b2, g1, g2)
    a1, b1, a2t, b2 = leaves(a1, b1, a2t, b2)
    local c = tl.grouped_matmul({ a1, a2t:transpose(1, 2) }, { b1, b2 })
    local loss = (c[1] * g1):sum() + (c[2] * g2):sum() -- one pass: both share one node
    loss:backward()
    return { c[1]:detach(), c[2]:detach(), a1.grad, b1.grad, a2t.grad, b2.grad }
  end,
  reference = function(_, a1, b1, a2t, b2, g1, g2)
    local a2 = transpose(a2t)
    return { ref.matmul(a1, b1), ref.matmul(a2, b2), ref.matmul(g1, transpose(b1)),
             ref.matmul(transpose(a1), g1), transpose(ref.matmul(g2, transpose(b2))),
             ref.matmul(transpose(a2), g2) }
  end,
}
-- rows 1-2 times B[1], none for B[2], rows 3-5 times B[3], row 6 zeros
M.sweep.grouped_mm = {
  inputs = function(G) return { G.normal(6, 3), G.normal(3, 3, 2), G.normal(6, 2) } end,
  run = function(a, b, g)
    a, b = leaves(a, b)
    local y = tl.grouped_mm(a, b, { 2, 2, 5 })
    y:backward(g)
    return { y:detach(), a.grad, b.grad }
  end,
  reference = function(_, a, b, g)
    local ends, y, ga, gb = { 2, 2, 5 }, {}, {}, {}
    for e = 1, 3 do
      gb[e] = ref.build({ 3, 2 }, function() return 0.0 end)
    end
    for r = 1, 6 do
      local e = r <= 2 and 1 or (r <= 5 and 3 or nil)
      if e then
        y[r] = ref.matmul({ a[r] }, b[e])[1]
        ga[r] = ref.matmul({ g[r] }, transpose(b[e]))[1]
        gb[e] = add_into(gb[e], ref.matmul(transpose({ a[r] }), { g[r] }))
      else
        y[r], ga[r] = { 0.0, 0.0 }, { 0.0, 0.0, 0.0 }
      end
    end
    return { y, ga, gb }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  grouped_matmul_backward_input = "grouped_matmul",
  grouped_matmul_backward_other = "grouped_matmul", grouped_mm_backward_input = "grouped_mm",
  grouped_mm_backward_weight = "grouped_mm",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  -- two groups of free sizes (the second read transposed), and segments with an empty group and
  -- rows past the last end
  grouped_matmul = { { function(a1, b1, a2t, b2)
                         local c = tl.grouped_matmul({ a1, a2t:transpose(1, 2) }, { b1, b2 })
                         return { c[1], c[2] }
                       end, { input(2, 3), input(3, 4), input(5, 2), input(5, 1) } } },
  grouped_mm = { { function(a, b) return tl.grouped_mm(a, b, { 2, 2, 5 }) end,
                   { input(6, 3), input(3, 3, 2) } } },
}

return M
