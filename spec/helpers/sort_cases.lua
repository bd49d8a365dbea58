-- Sorting and selection in Lua (for sort_spec): a stable sort of each line with NaN above +inf and -0 equal to +0 (torch's order), topk, the lower median, searchsorted and bincount; their kernel sweep cases, the cases of their kernels' paths (variants) and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

local function number(v) if type(v) == "boolean" then return v and 1 or 0 end return v end

-- a before b in ascending order: NaN last, -0 and +0 tied
function M.less(a, b)
  a, b = number(a), number(b)
  if a ~= a then return false end
  if b ~= b then return true end
  return a < b
end

-- positions 1..#list of list ordered stably (ties in position order), descending or not
function M.order(list, descending)
  local at = {}
  for i = 1, #list do at[i] = i end
  table.sort(at, function(i, j)
    local a, b = list[i], list[j]
    if descending then a, b = b, a end
    if M.less(a, b) then return true end
    if M.less(b, a) then return false end
    return i < j
  end)
  return at
end

-- the first k of each line along dim (1-based, negative from the end) of x (nested, shape)
-- sorted stably: values and 1-based positions, nested, dim of size k
function M.sorted(x, shape, dim, descending, k)
  local flat = ref.flatten(x)
  local lines, d = ref.lines(shape, dim)
  local oshape = { table.unpack(shape) }
  oshape[d] = k or shape[d]
  local olines = ref.lines(oshape, d)
  local values, positions = {}, {}
  for l, line in ipairs(lines) do
    local list = {}
    for i, p in ipairs(line) do list[i] = flat[p] end
    local at = M.order(list, descending)
    for i, o in ipairs(olines[l]) do
      values[o], positions[o] = list[at[i]], at[i]
    end
  end
  return ref.unflatten(values, oshape), ref.unflatten(positions, oshape)
end

-- the lower median of a list (a NaN when it holds one, at its first NaN) and its position
function M.median(list)
  for i, v in ipairs(list) do
    if v ~= v then return v, i end
  end
  local at = M.order(list)
  local i = at[(#list - 1) // 2 + 1]
  return list[i], i
end

-- for each value of each row, the 1-based insertion point in the sorted row: 1 + how many come
-- before it (right: are not after it)
function M.searchsorted(sorted_rows, value_rows, right)
  local out = {}
  for r, values in ipairs(value_rows) do
    local row = sorted_rows[r] or sorted_rows[1]
    out[r] = {}
    for j, v in ipairs(values) do
      local count = 0
      for _, s in ipairs(row) do
        if (right and not M.less(v, s)) or (not right and M.less(s, v)) then count = count + 1 end
      end
      out[r][j] = count + 1
    end
  end
  return out
end

-- counts (or sums of weights) of the 1-based bins' values, length max(minlength, largest)
function M.bincount(bins, minlength, weights)
  local out = {}
  local length = minlength or 0
  for _, b in ipairs(bins) do length = math.max(length, b) end
  for i = 1, length do out[i] = weights and 0.0 or 0 end
  for i, b in ipairs(bins) do out[b] = out[b] + (weights and weights[i] or 1) end
  return out
end

-- ---- kernel sweep ---------------------------------------------------------------------------
local exact = function(v) return { exact = true, value = v } end
local function sorted_pair(x, shape, dim, descending, k)
  local v, i = M.sorted(x, shape, dim, descending, k)
  return exact(v), exact(i)
end
local function sorted_row(row)
  local at = M.order(row)
  local out = {}
  for i, p in ipairs(at) do out[i] = row[p] end
  return out
end
local BINS = { 3, 1, 4, 1, 5, 2, 6, 5, 3, 5 }

M.sweep = {
  sort = {
    inputs = function(G) return { G.values(3, 9) } end,
    run = function(x)
      local v1, i1 = x:sort()
      local v2, i2 = x:sort(1, { descending = true })
      return { v1, i1, v2, i2 }
    end,
    reference = function(_, x)
      local a, b = sorted_pair(x, { 3, 9 }, 2, false)
      local c, d = sorted_pair(x, { 3, 9 }, 1, true)
      return { a, b, c, d }
    end,
  },
  topk = {
    inputs = function(G) return { G.values(4, 40) } end,
    run = function(x)
      local v1, i1 = x:topk(3)
      local v2, i2 = x:topk(4, 1, { largest = false })
      return { v1, i1, v2, i2 }
    end,
    reference = function(_, x)
      local a, b = sorted_pair(x, { 4, 40 }, 2, true, 3)
      local c, d = sorted_pair(x, { 4, 40 }, 1, false, 4)
      return { a, b, c, d }
    end,
  },
  searchsorted = {
    inputs = function(G) return { G.values(2, 7), G.values(2, 5) } end,
    run = function(s, v)
      local sorted = s:sort()
      return { tl.searchsorted(sorted, v), tl.searchsorted(sorted, v, { right = true }),
               tl.searchsorted(sorted:select(1, 1):contiguous(), v) }
    end,
    reference = function(_, s, v)
      local rows = { sorted_row(s[1]), sorted_row(s[2]) }
      return { exact(M.searchsorted(rows, v)), exact(M.searchsorted(rows, v, true)),
               exact(M.searchsorted({ rows[1] }, v)) }
    end,
  },
  bincount = {
    inputs = function(_, d) return { tl.tensor(BINS, { dtype = d }) } end,
    run = function(b)
      local w = tl.tensor({ 0.5, 1, 2, 0.25, 1, 3, 1, 1, 1, 1 }, { dtype = "float64", device = b.device })
      return { tl.bincount(b), tl.bincount(b, { minlength = 9 }), tl.bincount(b, { weights = w }),
               tl.bincount(b, { weights = w:float() }) }
    end,
    reference = function()
      local w = { 0.5, 1, 2, 0.25, 1, 3, 1, 1, 1, 1 }
      return { exact(M.bincount(BINS)), exact(M.bincount(BINS, 9)), M.bincount(BINS, 0, w),
               M.bincount(BINS, 0, w) }
    end,
  },
}

-- ---- the kernels' paths (tl.kernel_variants()): a case per op and variant name ----------------
local function sort_case(shape, dim)
  return {
    inputs = function(G) return { G.values(table.unpack(shape)) } end,
    run = function(x)
      local v, i = x:sort(dim)
      return { v, i }
    end,
    reference = function(_, x) return { sorted_pair(x, shape, dim, false) } end,
  }
end
local function topk_case(shapes, k, largest)
  return {
    inputs = function(G)
      local list = {}
      for i, s in ipairs(shapes) do
        list[i] = s.ties and G.ints(0, 1, table.unpack(s)) or G.values(table.unpack(s))
      end
      return list
    end,
    run = function(...)
      local out = {}
      for _, x in ipairs({ ... }) do
        local v, i = x:topk(k, -1, { largest = largest })
        out[#out + 1], out[#out + 2] = v, i
      end
      return out
    end,
    reference = function(_, ...)
      local out = {}
      for n, x in ipairs({ ... }) do
        local shape = { shapes[n][1], shapes[n][2] }
        out[#out + 1], out[#out + 2] = sorted_pair(x, shape, 2, largest, k)
      end
      return out
    end,
  }
end

M.variants = {
  sort = {
    insertion = sort_case({ 3, 7 }, 2),  -- cpu: rows of at most 32
    radix = sort_case({ 100 }, 1),       -- cpu: longer rows; cuda: one row
    segmented = sort_case({ 3, 40 }, 1), -- cuda: several rows
  },
  topk = {
    heap = topk_case({ { 3, 40 } }, 4, true),   -- cpu: k * 8 <= n
    sort = topk_case({ { 2, 600 } }, 520, true), -- cpu: k * 8 > n; cuda: k > 512
    -- cuda: a block per row, by the maxima's threshold, and by the exact select when thousands
    -- of elements tie at it
    select = topk_case({ { 3, 40 }, { 2, 5000, ties = true } }, 5, false),
  },
}

-- ---- gradcheck: values' gradients go back to the positions the indices name ---------------
local function input(...) return tl.randn(...):double():requires_grad_() end
local function first(f) return function(...) return (f(...)) end end
M.gradcheck = {
  sort = { { first(function(x) return x:sort(2) end), { input(3, 5) } },
           { first(function(x) return x:sort(1, { descending = true }) end), { input(4, 2) } },
           -- kthvalue and median are made of sort
           { first(function(x) return x:kthvalue(2, 2) end), { input(3, 4) } },
           { first(function(x) return x:median(1, { keepdim = true }) end), { input(5, 3) } },
           { function(x) return x:median() end, { input(2, 3) } } },
  topk = { { first(function(x) return x:topk(2, 2) end), { input(3, 6) } },
           { first(function(x) return x:topk(3, 1, { largest = false }) end), { input(5, 2) } } },
}

return M
