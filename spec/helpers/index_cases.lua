-- gather and scatter_add in Lua loops (for index_spec), their kernel sweep cases and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

-- the Lua gather: out at p = x at p with coordinate dim replaced by index[p] (1-based)
function M.gather_ref(x, dim, index, shape)
  local function walk(t, d, at)
    if d > #shape then
      local coords = { table.unpack(at) }
      local v = t
      coords[dim] = v
      local e = x
      for _, c in ipairs(coords) do e = e[c] end
      return e
    end
    local out = {}
    for i = 1, shape[d] do
      at[d] = i
      out[i] = walk(t[i], d + 1, at)
    end
    return out
  end
  return walk(index, 1, {})
end

-- the Lua scatter_add: a copy of x with src[p] added at p with coordinate dim replaced by index[p]
function M.scatter_add_ref(x, dim, index, src, ishape, add)
  local out = ref.map(x, function(v) return v end)
  local at = {}
  local function walk(t, d)
    if d > #ishape then
      local coords = { table.unpack(at) }
      coords[dim] = t
      local s = src
      for _, c in ipairs(at) do s = s[c] end
      local row = out
      for k = 1, #coords - 1 do row = row[coords[k]] end
      row[coords[#coords]] = add(row[coords[#coords]], s)
      return
    end
    for i = 1, ishape[d] do
      at[d] = i
      walk(t[i], d + 1)
    end
  end
  walk(index, 1)
  return out
end


-- the sweep: x [3, 4] gathered along dim 2 by a [3, 5] index (1-based, repeats), and a [2, 4]
-- src added into x along dim 1 by a [2, 4] index (duplicates)
local GATHER_INDEX = { { 4, 1, 1, 3, 2 }, { 2, 2, 4, 1, 3 }, { 1, 4, 3, 2, 2 } }
local SCATTER_INDEX = { { 3, 1, 1, 2 }, { 3, 3, 2, 1 } }
local function wrap_add(d)
  local K = require("helpers.kernel_reference")
  if d == "int32" or d == "int64" then return function(a, b) return K.wrap(d, a + b) end end
  return function(a, b) return a + b end
end

M.sweep = {
  gather = {
    inputs = function(G) return { G.wide(3, 4) } end,
    run = function(x) return { x:gather(2, tl.tensor(GATHER_INDEX, { device = x.device })) } end,
    reference = function(_, x) return { M.gather_ref(x, 2, GATHER_INDEX, { 3, 5 }) } end,
  },
  scatter_add = {
    tolerance = { bfloat16 = { 3e-2, 3e-2 }, float16 = { 4e-3, 4e-3 } },
    inputs = function(G) return { G.wide(3, 4), G.wide(2, 4) } end,
    run = function(x, src) return { x:scatter_add(1, tl.tensor(SCATTER_INDEX, { device = x.device }), src) } end,
    reference = function(d, x, src) return { M.scatter_add_ref(x, 1, SCATTER_INDEX, src, { 2, 4 }, wrap_add(d)) } end,
  },
}

local function input(...) return tl.randn(...):double():requires_grad_() end
local INDEX = tl.tensor({ { 3, 1, 1 }, { 2, 2, 4 } })
M.gradcheck = {
  gather = { { function(x) return x:gather(2, INDEX) end, { input(2, 4) } },
             { function(x) return x:gather(1, tl.tensor({ { 2, 1, 2 } })) end, { input(2, 3) } } },
  scatter_add = { { function(x, src) return x:scatter_add(2, INDEX, src) end, { input(2, 4), input(3, 3) } } },
}

return M
