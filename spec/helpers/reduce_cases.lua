-- One entry per value reduction (the REDUCE_OP rows of the op table, family "fold"): the range its floating inputs are drawn from, its number (the option's name, and values other than its default to try: other, and others for more), whether the number comes first in Lua (number_first: x:norm(p, dims, keepdim)), and a Lua reference over the values one result reduces: fold(values, n, number) with values float64 numbers (integers as Lua integers, bool as 0/1). reduce_spec (every dtype, one dim, several, all, keepdim, the number, bad input), gradcheck_spec and kernel_sweep_spec take their cases from here (calling through M.call), and fail for a row without an entry.
local M = {}

-- the element that beats every other (a NaN wins); nil for no element (an error)
local function extreme(v, beats)
  local m
  for _, x in ipairs(v) do
    if m == nil or x ~= x or beats(x, m) then m = x end
    if m ~= m then return m end
  end
  return m
end

-- the sum of squared deviations from the mean over max(0, n - correction) (0 / 0 for none)
local function variance(v, n, correction)
  local mean = 0.0
  for _, x in ipairs(v) do mean = mean + x end
  mean = mean / n
  local squares = 0.0
  for _, x in ipairs(v) do squares = squares + (x - mean) ^ 2 end
  return squares / math.max(0, n - correction)
end

M.cases = {
  sum = {
    lo = -3, hi = 3,
    fold = function(v)
      local s = 0
      for _, x in ipairs(v) do s = s + x end -- Lua integers wrap as int64 sums do
      return s
    end,
  },
  mean = {
    lo = -3, hi = 3,
    fold = function(v)
      local s = 0.0
      for _, x in ipairs(v) do s = s + x end
      return s / #v
    end,
  },
  amax = { lo = -3, hi = 3, fold = function(v) return extreme(v, function(x, m) return x > m end) end },
  amin = { lo = -3, hi = 3, fold = function(v) return extreme(v, function(x, m) return x < m end) end },
  all = { lo = -1, hi = 1, fold = function(v)
    for _, x in ipairs(v) do if x == 0 then return 0 end end
    return 1
  end },
  any = { lo = -1, hi = 1, fold = function(v)
    for _, x in ipairs(v) do if x ~= 0 then return 1 end end
    return 0
  end },
  count_nonzero = { lo = -1, hi = 1, fold = function(v)
    local n = 0
    for _, x in ipairs(v) do if x ~= 0 then n = n + 1 end end
    return n
  end },
  logsumexp = {
    lo = -3, hi = 3,
    fold = function(v)
      local m = -math.huge
      for _, x in ipairs(v) do if x > m then m = x end end
      if m == -math.huge then return m end
      local s = 0.0
      for _, x in ipairs(v) do s = s + math.exp(x - m) end
      return m + math.log(s)
    end,
  },
  var = { lo = -3, hi = 3, number = "correction", default = 1, other = 0, fold = function(v, n, c) return variance(v, n, c) end },
  std = { lo = -3, hi = 3, number = "correction", default = 1, other = 0,
          fold = function(v, n, c) return math.sqrt(variance(v, n, c)) end },
  prod = {
    lo = -2, hi = 2,
    fold = function(v)
      local s = 1
      for _, x in ipairs(v) do s = s * x end -- Lua integers wrap as int64 products do
      return s
    end,
  },
  norm = {
    lo = -3, hi = 3, number = "p", number_first = true, default = 2, other = 1,
    others = { 1, 0, 3, 0.5, -1, math.huge, -math.huge },
    fold = function(v, _, p)
      if p == math.huge or p == -math.huge then
        local m = p > 0 and 0.0 or math.huge
        for _, x in ipairs(v) do
          local a = math.abs(x)
          if a ~= a then return a end
          if (p > 0 and a > m) or (p < 0 and a < m) then m = a end
        end
        return m
      end
      local s = 0.0
      for _, x in ipairs(v) do
        if p == 0 then s = s + (x ~= 0 and 1 or 0) else s = s + math.abs(x) ^ p end
      end
      if p == 0 or p == 1 then return s end
      return s ^ (1 / p)
    end,
  },
}

-- x:<name>(dims, last) for the row name, with a leading nil order where the number comes first
function M.call(x, name, ...)
  if M.cases[name].number_first then return x[name](x, nil, ...) end
  return x[name](x, ...)
end

-- The reduction of the nested table x (shape `shape`) over the dims where reduced[d] (every
-- dim when none is), keepdim as the ops do: fold(values) for each result, values in
-- row-major order.
function M.reduce(x, shape, reduced, keepdim, fold)
  local ndim = #shape
  local all = true
  for d = 1, ndim do if reduced[d] then all = false end end
  local function is_reduced(d) return all or reduced[d] == true end
  -- results keyed by their kept coordinates
  local groups, order = {}, {}
  local index = {}
  local function walk(t, d)
    if d > ndim then
      local key = {}
      for k = 1, ndim do if not is_reduced(k) then key[#key + 1] = index[k] end end
      local name = table.concat(key, ",")
      if not groups[name] then
        groups[name] = {}
        order[#order + 1] = { name = name, at = key }
      end
      local v = t
      if type(v) == "boolean" then v = v and 1 or 0 end
      table.insert(groups[name], v)
      return
    end
    for i = 1, shape[d] do
      index[d] = i
      walk(t[i], d + 1)
    end
  end
  walk(x, 1)
  -- the result's shape, then its nested table
  local out_shape = {}
  for d = 1, ndim do
    if not is_reduced(d) then out_shape[#out_shape + 1] = shape[d]
    elseif keepdim then out_shape[#out_shape + 1] = 1 end
  end
  if ndim == 0 or (#out_shape == 0) then
    local values = groups[""] or {}
    return fold(values), out_shape
  end
  local function build(d, key)
    if d > ndim then return fold(groups[table.concat(key, ",")] or {}) end
    local t = {}
    if is_reduced(d) then
      if not keepdim then return build(d + 1, key) end
      t[1] = build(d + 1, key)
      return t
    end
    for i = 1, shape[d] do
      local k = { table.unpack(key) }
      k[#k + 1] = i
      t[i] = build(d + 1, k)
    end
    return t
  end
  return build(1, {}), out_shape
end

return M
