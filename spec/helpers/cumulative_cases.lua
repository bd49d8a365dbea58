-- cumprod, logcumsumexp, cummax and cummin in Lua loops (for cumulative_spec), their kernel sweep cases and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

local function number(v) if type(v) == "boolean" then return v and 1 or 0 end return v end

-- the running fold of each line of nested table x along dim (1-based): step(state, v, r) gives
-- the new state and the value written at r (and the index, for the extremes)
local function along(x, shape, dim, start, step)
  local values, indices = ref.map(x, function(v) return v end), ref.map(x, function() return 0 end)
  local at = {}
  local function walk(d)
    if d > #shape then
      if at[dim] ~= 1 then return end -- each line once, from its first element
      local state = start
      for r = 1, shape[dim] do
        local coords = { table.unpack(at) }
        coords[dim] = r
        local e = x
        for _, c in ipairs(coords) do e = e[c] end
        local value, index
        state, value, index = step(state, number(e), r)
        local vrow, irow = values, indices
        for k = 1, #coords - 1 do vrow, irow = vrow[coords[k]], irow[coords[k]] end
        vrow[coords[#coords]], irow[coords[#coords]] = value, index
      end
      return
    end
    for i = 1, shape[d] do
      at[d] = i
      walk(d + 1)
    end
  end
  walk(1)
  return values, indices
end

-- integer products wrap as Lua integers do (int64); floating ones in double
function M.cumprod(x, shape, dim)
  return (along(x, shape, dim, 1, function(s, v) local p = s * v return p, p end))
end

function M.logcumsumexp(x, shape, dim)
  return (along(x, shape, dim, {}, function(seen, v)
    local list = { table.unpack(seen) }
    list[#list + 1] = v
    local m = -math.huge
    for _, e in ipairs(list) do if e > m or e ~= e then m = e end end
    if m ~= m or m == math.huge or m == -math.huge then return list, m end
    local sum = 0.0
    for _, e in ipairs(list) do sum = sum + math.exp(e - m) end
    return list, m + math.log(sum)
  end))
end

-- the running extreme and the 1-based index it was last reached at (ties and NaN take the later)
function M.running_extreme(x, shape, dim, max)
  return along(x, shape, dim, nil, function(s, v, r)
    local takes = s == nil or v ~= v or (s.v == s.v and (max and v >= s.v or not max and v <= s.v))
    if takes then s = { v = v, i = r } end
    return s, s.v, s.i
  end)
end

local function floating(d) return d == "float32" or d == "float64" or d == "bfloat16" or d == "float16" end
local function inputs(G, d)
  if floating(d) then return { G.uniform(-2, 2, 3, 5) } end
  return { G.wide(3, 5) }
end

-- the sweep: [3, 5] along dim 2 (one line at a time) and dim 1 (lines side by side)
local function scan_case(name, reference)
  return {
    tolerance = { bfloat16 = { 3e-2, 3e-2 }, float16 = { 4e-3, 4e-3 } },
    inputs = inputs,
    run = function(x) return { x[name](x, 2), x[name](x, 1) } end,
    reference = function(_, x) return { reference(x, { 3, 5 }, 2), reference(x, { 3, 5 }, 1) } end,
  }
end
local function extreme_case(name, max)
  return {
    inputs = function(G, d)
      if floating(d) then return { G.ints(-2, 2, 3, 5) } end -- ties
      return { G.values(3, 5) }
    end,
    run = function(x)
      local v2, i2 = x[name](x, 2)
      local v1, i1 = x[name](x, 1)
      return { v2, i2, v1, i1 }
    end,
    reference = function(_, x)
      local v2, i2 = M.running_extreme(x, { 3, 5 }, 2, max)
      local v1, i1 = M.running_extreme(x, { 3, 5 }, 1, max)
      return { v2, i2, v1, i1 }
    end,
  }
end
M.sweep = {
  cumprod = scan_case("cumprod", M.cumprod),
  logcumsumexp = scan_case("logcumsumexp", M.logcumsumexp),
  cummax = extreme_case("cummax", true),
  cummin = extreme_case("cummin", false),
}

local function input(...) return tl.randn(...):double():requires_grad_() end
local function with_zeros()
  return tl.tensor({ { 1.5, 0, 2, -1 }, { 0, 0, 1, 2 }, { 1.25, 2, 0.5, -1 } }, { dtype = "float64" }):requires_grad_()
end
M.gradcheck = {
  cumprod = { { function(x) return x:cumprod(2) end, { input(3, 4) } },
              { function(x) return x:cumprod(2) end, { with_zeros() } },
              { function(x) return x:cumprod(1) end, { with_zeros() } } },
  logcumsumexp = { { function(x) return x:logcumsumexp(2) end, { input(3, 5) } },
                   { function(x) return x:logcumsumexp(1) * 40 end, { input(4, 2) } } },
  cummax = { { function(x) return (x:cummax(2)) end, { input(3, 5) } } },
  cummin = { { function(x) return (x:cummin(1)) end, { input(4, 3) } } },
}

return M
