-- embedding in Lua loops (rows picked by 1-based indices, and the weight's gradient), its kernel sweep case, the index check's (an index out of range reported with its value and position) and its gradcheck case (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves = sweep_helpers.leaves

local M = {}

-- rows of w [V, D] picked by 1-based indices idx (nested), and the gradient of sum(y * g)
-- with respect to w: returns y, gw
function M.embedding(idx, w, g)
  local fi, si = ref.flatten(idx)
  local fw, sw = ref.flatten(w)
  local fg = ref.flatten(g)
  local D = sw[2]
  local y, gw = {}, {}
  for i = 1, #fw do gw[i] = 0.0 end
  for p, r in ipairs(fi) do
    for j = 1, D do
      y[(p - 1) * D + j] = fw[(r - 1) * D + j]
      gw[(r - 1) * D + j] = gw[(r - 1) * D + j] + fg[(p - 1) * D + j]
    end
  end
  local ys = {}
  for d = 1, #si do ys[d] = si[d] end
  ys[#ys + 1] = D
  return ref.unflatten(y, ys), ref.unflatten(gw, sw)
end

M.sweep = {}

local EMBEDDING_INDEX = { { 1, 7, 3 }, { 3, 3, 2 } }
M.sweep.embedding = {
  inputs = function(G) return { G.normal(7, 4), G.normal(2, 3, 4) } end,
  run = function(w, g)
    w = leaves(w)
    local y = tl.embedding(tl.tensor(EMBEDDING_INDEX, { device = w.device }), w)
    y:backward(g)
    return { y:detach(), w.grad }
  end,
  reference = function(_, w, g) return { M.embedding(EMBEDDING_INDEX, w, g) } end,
}
-- index_check (int32, int64): indices in range pass (the gather they guard is right) and the one
-- out of range is reported with its value and 1-based position (on CUDA by the synchronization)
local CHECKED_INDEX = { 3, 1, 2, 5, 4 }
M.sweep.index_check = {
  inputs = function(_, dtype) return { tl.tensor(CHECKED_INDEX, { dtype = dtype }) } end,
  run = function(idx)
    local w = tl.arange(1, 6, { dtype = "float32", device = idx.device }):view(5, 1)
    local y = tl.embedding(idx, w)
    local ok, err = pcall(function()
      local _ = tl.embedding(idx + 1, w) -- 6 at position 4
      if idx.device ~= "cpu" then tl.cuda.synchronize() end
    end)
    assert(not ok, "index_check: the index out of range was not reported")
    local value, position = tostring(err):match("holds (%-?%d+) at position (%d+)")
    return { y, tl.tensor({ tonumber(value), tonumber(position) }) }
  end,
  reference = function(_, idx)
    local rows = {}
    for i, v in ipairs(idx) do rows[i] = { v } end
    return { rows, { exact = true, value = tl.tensor({ 6, 4 }) } }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  embedding_backward = "embedding",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  embedding = { { function(w) return tl.embedding(tl.tensor({ { 1, 3 }, { 3, 4 } }), w) end, { input(4, 3) } } },
}

return M
