-- The cases of the kernel sweep (spec/kernel_sweep_spec.lua), one per op or op group: inputs(G, d)
-- makes the inputs in dtype d (G: a seeded maker, below), run(...) computes with the engine and
-- returns a list of result tensors, reference(d, ...) the same list computed in Lua (float64
-- numbers, integers with the engine's wrapping, booleans) from the inputs' stored values
-- (t:totable()). `exact(v)` marks an expected value compared exactly whatever its dtype.
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local pointwise = require("helpers.pointwise_cases")

local M = {}

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
M.floating = floating

function M.exact(v) return { exact = true, value = v } end
local exact = M.exact

-- ---------------------------------------------------------------------------
-- Input makers: G = M.maker(d, rng); tensors in dtype d on the CPU, from Lua numbers.
-- Integer "wide" values reach past the int32/int64 range under +, -, * (wrapping).
local WIDE = {
  int32 = { 2147483647, -2147483648, 2147483000, -2147483000, 123456789, -987654321, 70000,
            -65537, 0, 1, -1, 3 },
  int64 = { math.maxinteger, math.mininteger, (1 << 62) + 3, -(1 << 62) - 5, 123456789012345,
            3037000500, -4294967297, 0, 1, -1, 3, -4 },
}

function M.maker(d, rng)
  local G = {}
  local function make(shape, gen, dtype)
    return tl.tensor(ref.build(shape, gen), { dtype = dtype or d })
  end
  function G.normal(...) return make({ ... }, function() return rng:normal() end) end
  function G.uniform(lo, hi, ...) return make({ ... }, function() return rng:uniform(lo, hi) end) end
  function G.ints(lo, hi, ...)
    if d == "bool" then return make({ ... }, function() return rng:int(0, 1) == 1 end) end
    return make({ ... }, function()
      local v = rng:int(lo, hi)
      return floating[d] and v + 0.0 or v
    end)
  end
  function G.bools(...) return make({ ... }, function() return rng:int(0, 1) == 1 end, "bool") end
  -- normal numbers for floating dtypes, small integers (ties) or booleans otherwise
  function G.values(...)
    if floating[d] then return G.normal(...) end
    return G.ints(-4, 4, ...)
  end
  -- wrapping integers for integer dtypes, normal numbers for floating ones
  function G.wide(...)
    local list = WIDE[d]
    if not list then return G.values(...) end
    return make({ ... }, function() return list[rng:int(1, #list)] end)
  end
  -- distinct values k/8 (exact in every floating dtype) in a random order
  function G.distinct(...)
    local n = ref.numel({ ... })
    local order = {}
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do
      local j = rng:int(1, i)
      order[i], order[j] = order[j], order[i]
    end
    local pos = 0
    return make({ ... }, function()
      pos = pos + 1
      return (order[pos] - n // 2) / 8
    end)
  end
  return G
end

-- ---------------------------------------------------------------------------
local map, bmap = ref.map, ref.broadcast_map
local function as_number(v) if type(v) == "boolean" then return v and 1 or 0 end return v end
local function is_int(d) return d == "int32" or d == "int64" end

-- an elementwise case: fn the engine call, f(d, ...) the Lua reference of one element
local function elementwise(make_inputs, fn, f)
  return {
    inputs = make_inputs,
    run = function(...) return { fn(...) } end,
    reference = function(d, ...)
      local args = table.pack(...)
      return { bmap(function(...) return f(d, ...) end, table.unpack(args, 1, args.n)) }
    end,
  }
end

local function one(shape) return function(G) return { G.wide(table.unpack(shape)) } end end
local function arith(f_int, f_float)
  return function(d, a, b)
    if is_int(d) then return K.wrap(d, f_int(a, b)) end
    return f_float(a, b)
  end
end

local cases = {}
M.cases = cases

cases.neg = elementwise(one({ 3, 5 }), tl.neg, function(d, x) return is_int(d) and K.wrap(d, -x) or -x end)
cases.abs = elementwise(one({ 3, 5 }), tl.abs, function(d, x)
  if is_int(d) then return x < 0 and K.wrap(d, -x) or x end
  return math.abs(x)
end)
cases.relu = elementwise(one({ 3, 5 }), tl.relu, function(d, x)
  if is_int(d) then return x > 0 and x or 0 end
  return x > 0 and x or 0.0
end)
cases.pow_scalar = {
  inputs = one({ 3, 5 }),
  run = function(x) return { x ^ 2, x ^ 3 } end,
  reference = function(d, x)
    if is_int(d) then
      return { map(x, function(v) return K.wrap(d, v * v) end), map(x, function(v) return K.wrap(d, v * v * v) end) }
    end
    return { map(x, function(v) return v * v end), map(x, function(v) return v ^ 3 end) }
  end,
}
cases.clamp = {
  inputs = function(G) return { G.values(3, 5) } end,
  run = function(x) return { x:clamp(-1, 2), x:clamp(nil, 1) } end,
  reference = function(_, x)
    return { map(x, function(v) return math.min(math.max(v, -1), 2) end),
             map(x, function(v) return math.min(v, 1) end) }
  end,
}
cases.add = elementwise(function(G) return { G.wide(3, 1), G.wide(1, 5) } end, tl.add,
  arith(function(a, b) return a + b end, function(a, b) return a + b end))
cases.sub = elementwise(function(G) return { G.wide(3, 5), G.wide(5) } end, tl.sub,
  arith(function(a, b) return a - b end, function(a, b) return a - b end))
cases.mul = elementwise(function(G) return { G.wide(3, 5), G.wide(3, 5) } end, tl.mul,
  arith(function(a, b) return a * b end, function(a, b) return a * b end))
cases.pow = elementwise(function(G, d)
  if floating[d] then return { G.uniform(0.5, 2, 3, 5), G.normal(5) } end
  return { G.wide(3, 5), G.ints(-2, 9, 5) }
end, tl.pow, arith(K.ipow, function(a, b) return a ^ b end))

-- comparisons: ties from small integers, a NaN in floating inputs
local function compare_inputs(G, d)
  local a, b = G.ints(-2, 2, 4, 4), G.ints(-2, 2, 4)
  if floating[d] then a[2][3] = 0 / 0; b[1] = 0 / 0 end
  return { a, b }
end
for name, f in pairs({
  eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
  lt = function(a, b) return a < b end, le = function(a, b) return a <= b end,
  gt = function(a, b) return a > b end, ge = function(a, b) return a >= b end,
}) do
  cases[name] = elementwise(compare_inputs, tl[name], function(_, a, b) return f(as_number(a), as_number(b)) end)
end

cases.where = elementwise(function(G) return { G.bools(3, 4), G.values(3, 4), G.values(4) } end, tl.where,
  function(_, c, a, b) if c then return a end return b end)

local FILLS = { 1 / 3, -7.9, 0 }
cases.fill = {
  inputs = function(G) return { G.values(2, 3) } end,
  run = function(x)
    local out = {}
    for i, v in ipairs(FILLS) do
      out[i] = tl.full({ 2, 3 }, v, { dtype = x.dtype, device = x.device })
    end
    return out
  end,
  reference = function(d)
    local out = {}
    for i, v in ipairs(FILLS) do out[i] = exact(ref.build({ 2, 3 }, function() return K.cast(v, d) end)) end
    return out
  end,
}

-- casts from dtype d (the kernels are keyed by the source) to every dtype
local CAST_VALUES = {
  float = { { -2.75, -0.5, 0.0, 0.5 }, { 1.5, 2.5, 3.99, 1e10 }, { -1e10, 0 / 0, 300.0, -65537.0 } },
  int32 = { { -3, 0, 1, 7 }, { 2147483647, -2147483648, 123456789, 300 }, { -65537, 4096, 5, -1 } },
  int64 = { { -3, 0, 1, 7 }, { (1 << 40) + 3, 123456789012, -(1 << 35) - 1, 300 }, { 2147483648, 4096, 5, -1 } },
  bool = { { true, false, true, true }, { false, false, true, false }, { true, true, false, false } },
}
cases.cast = {
  inputs = function(_, d) return { tl.tensor(CAST_VALUES[d] or CAST_VALUES.float, { dtype = d }) } end,
  run = function(x)
    local out = {}
    for i, to in ipairs(tl.dtypes) do out[i] = x:to(to) end
    return out
  end,
  reference = function(_, x)
    local out = {}
    for i, to in ipairs(tl.dtypes) do
      out[i] = exact(map(x, function(v) return K.cast(v, to) end))
      out[i].dtype = to
    end
    return out
  end,
}

-- reductions (indices 1-based, the first of ties); integer sums wrap in int64
local function reduce_ref(x, kind, dim)
  return ref.reduce(map(x, as_number), kind, dim)
end
-- the value reductions (REDUCE_OP rows): each row's Lua fold (helpers/reduce_cases.lua) over
-- dim 2 (one line at a time), every element and dim 1 (lines side by side) of a [rows, cols]
local R = require("helpers.reduce_cases")
for name, case in pairs(R.cases) do
  cases[name] = {
    inputs = function(G, d)
      if floating[d] then return { G.uniform(case.lo, case.hi, 3, 5) } end
      return { G.wide(3, 5) }
    end,
    run = function(x) return { R.call(x, name, 2), R.call(x, name), R.call(x, name, 1) } end,
    reference = function(_, x)
      local shape = { #x, #x[1] }
      local function fold(v) return case.fold(v, #v, case.default) end
      return { (R.reduce(x, shape, { [2] = true }, false, fold)), (R.reduce(x, shape, {}, false, fold)),
        (R.reduce(x, shape, { [1] = true }, false, fold)) }
    end,
  }
end
local function back(d, v) -- a reduced value in the input's kind (bool stays bool)
  if d == "bool" then return map(v, function(e) return e == 1 end) end
  return v
end
local function extreme(kind, dim)
  return {
    inputs = function(G) return { G.values(3, 5) } end,
    run = function(x)
      local v, i = x[kind](x, dim)
      return { v, i, x[kind](x) }
    end,
    reference = function(d, x)
      return { back(d, reduce_ref(x, kind, dim)), reduce_ref(x, kind .. "idx", dim), back(d, reduce_ref(x, kind)) }
    end,
  }
end
cases.max, cases.min = extreme("max", 2), extreme("min", 1)
local function arg(kind, dim)
  return {
    inputs = function(G) return { G.values(3, 5) } end,
    run = function(x) return { x[kind](x, dim), x[kind](x) } end,
    reference = function(_, x) return { reduce_ref(x, kind, dim), reduce_ref(x, kind) } end,
  }
end
cases.argmax, cases.argmin = arg("argmax", 2), arg("argmin", 1)

cases.softmax = {
  inputs = function(G) return { G.normal(3, 5) } end,
  run = function(x) return { x:softmax(2) } end,
  reference = function(_, x) return { ref.softmax(x, 2) } end,
}
cases.log_softmax = {
  inputs = function(G) return { G.normal(3, 5) } end,
  run = function(x) return { x:log_softmax(1) } end,
  reference = function(_, x) return { ref.softmax(x, 1, true) } end,
}

-- softmax_backward, log_softmax_backward through the forward op's backward: grad_input of y =
-- op(x) for a gradient g, against the Lua formula applied to y as stored (the float64 softmax of
-- the stored x rounded to the dtype) and g: rows (dim 2 of [3, 5]), lanes (dim 1 of [6, 9]), a
-- strided g (a transpose) and g expanded across and along the dim (0 strides, as sum() gives)
local function softmax_backward_case(log)
  local forward = log and "log_softmax" or "softmax"
  local function stored_output(d, x, dim)
    return map(ref.softmax(x, dim, log), function(v) return ref.round_to(v, d) end)
  end
  local function full(rows, cols, at)
    local g = {}
    for i = 1, rows do
      g[i] = {}
      for j = 1, cols do g[i][j] = at(i, j) end
    end
    return g
  end
  return {
    inputs = function(G)
      return { G.normal(3, 5), G.normal(6, 9), G.normal(3, 5), G.normal(5, 3), G.normal(6, 9),
        G.normal(6), G.normal(9) }
    end,
    run = function(a, b, ga, gat, gb, v6, v9)
      local function grad_input(x, dim, g)
        local leaf = x:detach():requires_grad_()
        leaf[forward](leaf, dim):backward(g)
        return leaf.grad
      end
      return {
        grad_input(a, 2, ga), grad_input(a, 2, gat:transpose(1, 2)), grad_input(b, 1, gb),
        grad_input(b, 1, v6:reshape(6, 1):expand(6, 9)), grad_input(b, 1, v9:reshape(1, 9):expand(6, 9)),
      }
    end,
    reference = function(d, a, b, ga, gat, gb, v6, v9)
      local ya, yb = stored_output(d, a, 2), stored_output(d, b, 1)
      local sb = K.softmax_backward
      return {
        sb(ya, ga, 2, log), sb(ya, full(3, 5, function(i, j) return gat[j][i] end), 2, log),
        sb(yb, gb, 1, log), sb(yb, full(6, 9, function(i) return v6[i] end), 1, log),
        sb(yb, full(6, 9, function(_, j) return v9[j] end), 1, log),
      }
    end,
  }
end
cases.softmax_backward = softmax_backward_case(false)
cases.log_softmax_backward = softmax_backward_case(true)

-- pointwise ops: inputs from their range in helpers/pointwise_cases.lua (integers of it for the
-- integer and bool kernels of int, bool_out and bits rows), its Lua reference with the row's
-- default numbers
local rule_of, arity_of = {}, {}
local ARITY = { pointwise = 1, pointwise_binary = 2, pointwise_ternary = 3 }
for _, op in ipairs(tl.ops()) do rule_of[op.name], arity_of[op.name] = op.dtypes, ARITY[op.family] end
local function numbers_of(case, d)
  local n = case.numbers or {}
  if type(n) == "function" then n = n(d) end
  return n
end
-- G's input in dtype d for range k of case (shape ...)
local function pointwise_input(G, d, case, k, ...)
  local r = case.ranges and case.ranges[k] or case.ints or { case.lo, case.hi }
  if floating[d] and not case.ints then return G.uniform(r[1], r[2], ...) end
  local lo = math.ceil(r[1])
  return G.ints(lo, math.max(lo, math.floor(r[2])), ...)
end
local function pointwise_reference(name, case)
  local bits = rule_of[name] == "bits"
  return function(d, ...)
    local args = table.pack(...)
    if not bits then
      for i = 1, args.n do args[i] = as_number(args[i]) end
    end
    local nums = numbers_of(case, d)
    for i = 1, #nums do args[args.n + i] = nums[i] end
    local v = case.reference(table.unpack(args, 1, args.n + #nums))
    return is_int(d) and type(v) == "number" and math.tointeger(v) or v
  end
end
for name, case in pairs(pointwise) do
  local arity = arity_of[name] or 1
  local shapes = ({ { { 3, 5 } }, { { 3, 1 }, { 1, 5 } }, { { 3, 1 }, { 1, 5 }, { 5 } } })[arity]
  cases[name] = elementwise(function(G, d)
    local inputs = {}
    for k = 1, arity do inputs[k] = pointwise_input(G, d, case, k, table.unpack(shapes[k])) end
    return inputs
  end, tl[name], pointwise_reference(name, case))
end

-- pointwise backward kernels (relu_backward, ...): y = f(x), then y:backward(w) gives w * f'(x),
-- with the row's default numbers and (where it has numbers) its other ones
-- derivatives of the ops with a fused backward kernel: the `derivative` of their line in
-- pointwise_cases.lua; relu is an integer-capable unary op without a line there
local relu_derivative = function(x) return x > 0 and 1.0 or 0.0 end
for _, op in ipairs(tl.ops()) do
  if op.family == "pointwise_backward" then
    local forward = op.name:gsub("_backward$", "")
    local line = pointwise[forward]
    local range = line or { lo = -3, hi = 3 }
    local f = line and line.reference or function(x) return math.max(x, 0.0) end
    local other = line and line.other
    local function grad_of(x, w, numbers)
      local leaf = x:detach():requires_grad_()
      local y = tl[forward](leaf, table.unpack(numbers or {}))
      y:backward(w)
      return y:detach(), leaf.grad
    end
    cases[op.name] = {
      inputs = function(G) return { G.uniform(range.lo, range.hi, 3, 5), G.normal(3, 5) } end,
      run = function(x, w)
        local y, g = grad_of(x, w)
        if not other then return { y, g } end
        local y2, g2 = grad_of(x, w, other)
        return { y, g, y2, g2 }
      end,
      reference = function(d, x, w)
        local df = forward == "relu" and relu_derivative or line and line.derivative
        assert(df, "sweep_cases: pointwise_cases.lua gives no derivative of " .. forward)
        local function at(numbers)
          return map(x, function(v) return f(v, table.unpack(numbers)) end),
            bmap(function(xv, wv) return wv * df(xv, table.unpack(numbers)) end, x, w)
        end
        local y, g = at(line and numbers_of(line, d) or {})
        if not other then return { y, g } end
        local y2, g2 = at(other)
        return { y, g, y2, g2 }
      end,
    }
  end
end

return M
