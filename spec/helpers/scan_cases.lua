-- cumsum (family SCAN) and nonzero (family NONZERO): their kernel sweep cases against Lua loops and cumsum's gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local transpose = sweep_helpers.transpose

local M = {}

M.sweep = {}

-- cumsum along each dim of a [3, 5] input and along the last dim of a transposed view: floating
-- sums in float64, integer and bool sums in Lua integers (int64, wrapping as the kernels do)
local function prefix_sums(m, dim) -- m a 2-D nested table, dim 1 or 2
  local out = {}
  for i = 1, #m do
    out[i] = {}
    for j = 1, #m[i] do
      local v = m[i][j]
      if type(v) == "boolean" then v = v and 1 or 0 end
      local prev
      if dim == 1 and i > 1 then prev = out[i - 1][j] end
      if dim == 2 and j > 1 then prev = out[i][j - 1] end
      out[i][j] = prev and prev + v or v
    end
  end
  return out
end
M.sweep.cumsum = {
  inputs = function(G) return { G.wide(3, 5), G.wide(5, 3) } end,
  run = function(x, y) return { x:cumsum(2), x:cumsum(-2), y:transpose(1, 2):cumsum(2) } end,
  reference = function(_, x, y) return { prefix_sums(x, 2), prefix_sums(x, 1), prefix_sums(transpose(y), 2) } end,
}
-- nonzero: the 1-based coordinates of the non-zero (true) elements, row-major, of a [3, 4, 2]
-- input with many zeros and of a permuted view of it
local function nonzero_coordinates(x) -- a 3-D nested table
  local rows = {}
  for i = 1, #x do
    for j = 1, #x[i] do
      for k = 1, #x[i][j] do
        local v = x[i][j][k]
        if v ~= 0 and v ~= false then rows[#rows + 1] = { i, j, k } end
      end
    end
  end
  return rows
end
M.sweep.nonzero = {
  inputs = function(G) return { G.ints(-1, 1, 3, 4, 2) } end,
  run = function(x) return { x:nonzero(), x:permute(3, 1, 2):nonzero() } end,
  reference = function(_, x)
    local p = ref.build({ 2, 3, 4 }, function(a, b, c) return x[b][c][a] end)
    return { nonzero_coordinates(x), nonzero_coordinates(p) }
  end,
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  cumsum = { { function(x) return x:cumsum(2) end, { input(3, 4) } },
             { function(x) return x:transpose(1, 2):cumsum(-1) end, { input(3, 4) } },
             { function(x) return x:cumsum(1) end, { input(2, 3, 2) } } },
}

return M
