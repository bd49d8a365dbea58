-- gather, scatter_add, scatter and scatter_reduce in Lua loops (for index_spec), their kernel sweep cases, scatter_reduce's folds as its variants' cases, and their gradcheck cases (all found by helpers/family_cases.lua).
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

-- the Lua scatter: a copy of x with src[p] written at p with coordinate dim replaced by index[p],
-- in row-major order of the index (of duplicates the last one stays, as the CPU kernel writes)
function M.scatter_ref(x, dim, index, src, ishape)
  return M.scatter_add_ref(x, dim, index, src, ishape, function(_, s) return s end)
end

-- the values src puts at each place of x: {[flat place] = {values in index order}}
local function reaching(dim, index, src, ishape)
  local lists, at = {}, {}
  local function key(coords) return table.concat(coords, ",") end
  local function walk(t, d)
    if d > #ishape then
      local coords = { table.unpack(at) }
      coords[dim] = t
      local s = src
      for _, c in ipairs(at) do s = s[c] end
      local k = key(coords)
      lists[k] = lists[k] or {}
      table.insert(lists[k], s)
      return
    end
    for i = 1, ishape[d] do
      at[d] = i
      walk(t[i], d + 1)
    end
  end
  walk(index, 1)
  return lists, key
end

-- floor(a / b) of integers (b > 0)
local function floor_div(a, b) return a // b end

-- the Lua scatter_reduce: at each place src reaches, fold of x's value (include_self) and the
-- values src puts there, in index order; other places keep x's. d: the dtype (integers wrap).
function M.scatter_reduce_ref(x, dim, index, src, ishape, reduce, include_self, d)
  local lists, key = reaching(dim, index, src, ishape)
  local integer = d == "int32" or d == "int64"
  local K = require("helpers.kernel_reference")
  local function wrap(v) return integer and K.wrap(d, v) or v end
  local function fold(values)
    local acc = values[1]
    for i = 2, #values do
      local v = values[i]
      if reduce == "sum" or reduce == "mean" then acc = wrap(acc + v)
      elseif reduce == "prod" then acc = wrap(acc * v)
      elseif reduce == "amax" then acc = math.max(acc, v)
      else acc = math.min(acc, v) end
    end
    if reduce == "mean" then acc = integer and floor_div(acc, #values) or acc / #values end
    return acc
  end
  local coords = {}
  local function walk(t, depth)
    if type(t) ~= "table" then
      local list = lists[key(coords)]
      if not list then return t end
      local values = {}
      if include_self then values[1] = t end
      for _, v in ipairs(list) do values[#values + 1] = v end
      return fold(values)
    end
    local out = {}
    for i = 1, #t do
      coords[depth] = i
      out[i] = walk(t[i], depth + 1)
    end
    coords[depth] = nil
    return out
  end
  return walk(x, 1)
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

-- scatter writes [2, 4] into x [3, 4] along dim 1 at distinct places (no duplicate: CUDA keeps
-- any one of them); scatter_reduce folds with duplicates (index 3 twice in a column, 1 twice)
local WRITE_INDEX = { { 3, 1, 2, 2 }, { 1, 3, 3, 1 } }
local function reduce_case(reduce, include_self)
  return {
    tolerance = { bfloat16 = { 3e-2, 3e-2 }, float16 = { 4e-3, 4e-3 } },
    inputs = function(G) return { G.wide(3, 4), G.wide(2, 4) } end,
    run = function(x, src)
      local index = tl.tensor(SCATTER_INDEX, { device = x.device })
      return { x:scatter_reduce(1, index, src, reduce, { include_self = include_self }) }
    end,
    reference = function(d, x, src)
      return { M.scatter_reduce_ref(x, 1, SCATTER_INDEX, src, { 2, 4 }, reduce, include_self, d) }
    end,
  }
end
-- scatter_reduce's folds, each a variant of its kernel (op -> variant -> case)
M.variants = {
  scatter_reduce = {
    prod = reduce_case("prod", true), amax = reduce_case("amax", false), amin = reduce_case("amin", true),
  },
}

M.sweep = {
  scatter = {
    inputs = function(G) return { G.wide(3, 4), G.wide(2, 4) } end,
    run = function(x, src) return { x:scatter(1, tl.tensor(WRITE_INDEX, { device = x.device }), src) } end,
    reference = function(_, x, src) return { M.scatter_ref(x, 1, WRITE_INDEX, src, { 2, 4 }) } end,
  },
  scatter_reduce = reduce_case("amax", true),
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
  -- distinct places (a duplicate's gradient goes to every written value)
  scatter = { { function(x, src) return x:scatter(2, tl.tensor({ { 3, 1 }, { 2, 4 } }), src) end,
                { input(2, 4), input(3, 3) } },
              { function(x) return x:scatter(1, tl.tensor({ { 2, 1, 2 } }), 0.5) end, { input(2, 3) } } },
  -- distinct values (no ties in amax/amin; prod away from zero's kink)
  scatter_reduce = {
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "sum") end, { input(2, 4), input(3, 3) } },
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "mean", { include_self = false }) end,
      { input(2, 4), input(2, 3) } },
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "prod") end, { input(2, 4), input(2, 3) } },
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "prod", { include_self = false }) end,
      { input(2, 4), input(2, 3) } },
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "amax") end, { input(2, 4), input(2, 3) } },
    { function(x, src) return x:scatter_reduce(2, INDEX, src, "amin", { include_self = false }) end,
      { input(2, 4), input(2, 3) } },
  },
}

return M
