-- Statement makers of the API fuzzer for computing ops: elementwise, casts and queries, reductions, shape ops and einsum, matmul, indexing.
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

--- a second operand for a: a broadcastable tensor (mostly), another pool tensor, or a Lua number;
-- returns its source and the result's element count (nil when unknown: a number)
local function other_operand(g, a)
  return g:weighted {
    { 5, function()
      local shape = g:broadcastable(a.shape)
      return g:fresh(shape, g:chance(0.7) and a.dtype or g:dtype(), g:chance(0.2)), Gen.broadcast(a.shape, shape)
    end },
    { 3, function()
      local b = g:tensor()
      return b.ref, Gen.broadcast(a.shape, b.shape) or {}
    end },
    { 3, function() return g:number(), a.shape end },
  }()
end

local function small_enough(g, shape) return shape == nil or Gen.numel(shape) <= g.cap end

-- every op of a family in tl.ops() that is also a Lua function (the op table is the list)
local function ops_of(tl, families)
  local list = {}
  for _, row in ipairs(tl.ops()) do
    if families[row.family] and type(rawget(tl, row.name)) == "function" then list[#list + 1] = row.name end
  end
  table.sort(list)
  return list
end

-- the names of a pointwise row's numbers (tl.ops()'s numbers; {} for other ops)
local function number_names(tl, name)
  for _, row in ipairs(tl.ops()) do
    if row.name == name then return row.numbers or {} end
  end
  return {}
end

-- a pointwise op's numbers after its tensors: none, some positionally, an options table by their
-- names (now and then a wrong key, or one number too many)
local function numbers_source(g, names)
  if #names == 0 then return g:chance(0.05) and ", " .. g:number() or "" end
  return g:weighted {
    { 3, function() return "" end },
    { 3, function()
      local list = {}
      for i = 1, g:int(1, #names) do list[i] = g:chance(0.1) and "nil" or g:number() end
      if g:chance(0.05) then list[#list + 1] = g:number() end
      return ", " .. table.concat(list, ", ")
    end },
    { 2, function()
      local fields = {}
      for _, key in ipairs(names) do
        if g:chance(0.6) then fields[#fields + 1] = fmt("%s = %s", key, g:number()) end
      end
      if g:chance(0.05) then fields[#fields + 1] = "no_such_number = 1" end
      return ", {" .. table.concat(fields, ", ") .. "}"
    end },
  }()
end

local elementwise = {
  unary = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick(ops_of(g.tl, { unary = true, pointwise = true }))
    if op == "pow_scalar" then return fmt("%s = %s:pow(%s)", g:target(), a.ref, g:number()) end
    if op == "clamp" then
      local lo = g:chance(0.7) and g:number() or "nil"
      local hi = g:chance(0.7) and g:number() or "nil"
      return fmt("%s = %s:clamp(%s, %s)", g:target(), a.ref, lo, hi)
    end
    local numbers = numbers_source(g, number_names(g.tl, op))
    if g:chance(0.5) then return fmt("%s = tl.%s(%s%s)", g:target(), op, a.ref, numbers) end
    if g:chance(0.2) then return fmt("%s:%s_(%s)", a.ref, op, numbers:sub(3)) end
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, op, numbers:sub(3))
  end,
  -- lerp, addcmul, addcdiv, clamp_tensor and clamp with tensor bounds: three operands, each
  -- broadcastable or a number, and the row's numbers
  ternary = function(g)
    local a = g:tensor()
    if not a then return nil end
    local b, sb = other_operand(g, a)
    local c, sc = other_operand(g, a)
    local shape = sb and sc and Gen.broadcast(sb, sc)
    if not small_enough(g, shape) then return nil end
    if g:chance(0.2) then
      return fmt("%s = %s:clamp(%s, %s)", g:target(), a.ref, g:chance(0.2) and "nil" or b, c)
    end
    local op = g:pick(ops_of(g.tl, { pointwise_ternary = true }))
    return fmt("%s = tl.%s(%s, %s, %s%s)", g:target(), op, a.ref, b, c, numbers_source(g, number_names(g.tl, op)))
  end,
  binary = function(g)
    local a = g:tensor()
    if not a then return nil end
    local b, shape = other_operand(g, a)
    if not small_enough(g, shape) then return nil end
    local op = g:pick(ops_of(g.tl, { binary = true, pointwise_binary = true }))
    if g:chance(0.2) then return fmt("%s = tl.%s(%s, %s)", g:target(), op, b, a.ref) end
    return fmt("%s = tl.%s(%s, %s)", g:target(), op, a.ref, b)
  end,
  operator = function(g)
    local a = g:tensor()
    if not a then return nil end
    local b, shape = other_operand(g, a)
    if not small_enough(g, shape) then return nil end
    local op = g:pick { "+", "-", "*", "/", "^" }
    if g:chance(0.1) then return fmt("%s = -%s", g:target(), a.ref) end
    if g:chance(0.3) then return fmt("%s = %s %s %s", g:target(), b, op, a.ref) end
    return fmt("%s = %s %s %s", g:target(), a.ref, op, b)
  end,
  where = function(g)
    local c = g:tensor()
    if not c then return nil end
    local cond = c.dtype == "bool" and c.ref or fmt("%s:gt(0)", c.ref)
    local a, sa = other_operand(g, c)
    local b, sb = other_operand(g, c)
    local shape = sa and sb and Gen.broadcast(sa, sb)
    if not small_enough(g, shape) then return nil end
    return fmt("%s = tl.where(%s, %s, %s)", g:target(), cond, a, b)
  end,
  compare_bool = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, g:pick { "eq", "ne", "lt", "le", "gt", "ge" },
      g:chance(0.5) and g:number() or fmt("%s:bool()", a.ref))
  end,
}

local CAST_NAMES = { "float", "double", "bfloat16", "half", "int", "long", "bool" }

local casts = {
  to_dtype = function(g)
    local a = g:tensor()
    if not a then return nil end
    local arg = g:weighted {
      { 6, literal(g:dtype()) },
      { 1, fmt("{dtype = %s}", literal(g:dtype())) },
      { 1, literal(g:pick { "cpu", "cuda", "cuda:3", "float8", "", "CPU" }) },
      { 1, (g:tensor() or a).ref },
      { 0.3, g:pick { "", "nil", "1", "{}", "true" } },
    }
    return fmt("%s = %s:to(%s)", g:target(), a.ref, arg)
  end,
  cast_method = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s:%s()", g:target(), a.ref, g:pick(CAST_NAMES))
  end,
  device = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s:%s", g:target(), a.ref, g:pick { "cpu()", "cuda()", "cuda(1)", "cuda(-1)", "to('cuda:99')" })
  end,
  item = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("local _ = %s:item()", a.ref)
  end,
  totable = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("local _ = %s:totable()", a.ref)
  end,
  tostring = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("local _ = tostring(%s)", a.ref)
  end,
  queries = function(g)
    local a = g:tensor()
    if not a then return nil end
    local q = g:pick { "#%s", "%s:size()", "%s:size(" .. g:dim(a.ndim) .. ")", "%s:dim()", "%s:numel()",
      "%s.shape", "%s.dtype", "%s.device", "%s.ndim", "%s:is_contiguous()", "%s.grad_fn", "%s.is_leaf",
      "%s.requires_grad", "%s.nonexistent_field" }
    return "local _ = " .. fmt(q, a.ref)
  end,
}

local reduce = {
  sum_mean = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "sum", "mean" }
    local args = g:weighted { { 2, "" }, { 3, g:dim(a.ndim) }, { 2, g:dim(a.ndim) .. ", " .. tostring(g:chance(0.5)) } }
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, op, args)
  end,
  max_min = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "max", "min" }
    if g:chance(0.3) then return fmt("%s = %s:%s()", g:target(), a.ref, op) end
    local keep = g:chance(0.5) and (", " .. tostring(g:chance(0.5))) or ""
    return fmt("%s, %s = %s:%s(%s%s)", g:target(), g:target(), a.ref, op, g:dim(a.ndim), keep)
  end,
  argmax_argmin = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "argmax", "argmin" }
    local args = g:weighted { { 1, "" }, { 2, g:dim(a.ndim) }, { 1, g:dim(a.ndim) .. ", true" } }
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, op, args)
  end,
  softmax = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, g:pick { "softmax", "log_softmax" }, g:dim(a.ndim))
  end,
  -- cumsum along a dim (mostly valid; sometimes none, a fraction or a string); nonzero of a
  -- tensor whose coordinates stay within the cap ([count, ndim] int64)
  cumsum = function(g)
    local a = g:tensor()
    if not a then return nil end
    local dim = g:weighted { { 12, g:dim(a.ndim) }, { 1, "" }, { 1, g:pick { "1.5", "'rows'", "nil", "{}" } } }
    if g:chance(0.3) then return fmt("%s = tl.cumsum(%s%s)", g:target(), a.ref, dim == "" and "" or ", " .. dim) end
    return fmt("%s = %s:cumsum(%s)", g:target(), a.ref, dim)
  end,
  nonzero = function(g)
    local a = g:tensor(function(i) return i.numel * math.max(i.ndim, 1) <= g.cap end)
    if not a then return nil end
    if g:chance(0.3) then return fmt("%s = tl.nonzero(%s)", g:target(), a.ref) end
    return fmt("%s = %s:nonzero()", g:target(), a.ref)
  end,
}

--- an int64 index tensor of shape, its values 1-based positions below limit (rarely 0 or past it)
local function positions(g, shape, limit)
  local function build(d)
    if d > #shape then
      if g:chance(0.03) then return g:pick { 0, limit + 1, -1 } end
      return limit > 0 and g:int(1, limit) or 1
    end
    local out = {}
    for i = 1, shape[d] do out[i] = build(d + 1) end
    return out
  end
  if #shape == 0 then return fmt("tl.tensor(%d)", build(1)) end
  return fmt("tl.tensor(%s, {dtype = 'int64'})", literal(build(1)))
end

-- the index family: gather and the scatters along a dim (an index no larger than x, mostly),
-- index_select and the index_* ops by a 1-d index, take, masked_select, their in-place forms on
-- a clone, and the subscripts
local indexing = {
  along_dim = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.ndim <= 3 and i.numel <= 200 end)
    if not a then return nil end
    local d = g:int(1, a.ndim)
    local shape = {}
    for k = 1, a.ndim do shape[k] = math.min(a.shape[k], g:int(0, 3)) + (g:chance(0.05) and 1 or 0) end
    local index = positions(g, shape, a.shape[d])
    local src = g:chance(0.9) and g:fresh(shape, g:chance(0.9) and a.dtype or g:dtype()) or g:number()
    local op = g:pick { "gather", "scatter", "scatter_add", "scatter_reduce", "scatter_", "scatter_add_" }
    local x = op:sub(-1) == "_" and a.ref .. ":detach():clone()" or a.ref
    if op == "gather" then return fmt("%s = %s:gather(%d, %s)", g:target(), x, d, index) end
    if op == "scatter_reduce" then
      local reduce = g:pick { "sum", "prod", "mean", "amax", "amin", "max" }
      return fmt("%s = %s:scatter_reduce(%d, %s, %s, %q, {include_self = %s})", g:target(), x, d, index, src,
        reduce, tostring(g:chance(0.5)))
    end
    return fmt("%s = %s:%s(%d, %s, %s)", g:target(), x, op, d, index, src)
  end,
  by_positions = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.numel <= 200 end)
    if not a then return nil end
    local d = g:int(1, a.ndim)
    local n = g:int(0, 4)
    local index = positions(g, { n }, a.shape[d])
    local shape = { table.unpack(a.shape) }
    shape[d] = g:chance(0.95) and n or n + 1
    local src = g:fresh(shape, g:chance(0.9) and a.dtype or g:dtype())
    local op = g:pick { "index_select", "index_add", "index_copy", "index_fill", "index_add_", "index_copy_",
      "index_fill_" }
    local x = op:sub(-1) == "_" and a.ref .. ":detach():clone()" or a.ref
    if op == "index_select" then return fmt("%s = %s:index_select(%s, %s)", g:target(), x, g:dim(a.ndim), index) end
    if op:find("fill") then return fmt("%s = %s:%s(%d, %s, %s)", g:target(), x, op, d, index, g:number()) end
    local alpha = op:find("add") and g:chance(0.3) and fmt(", {alpha = %s}", g:number()) or ""
    return fmt("%s = %s:%s(%d, %s, %s%s)", g:target(), x, op, d, index, src, alpha)
  end,
  flat_and_masks = function(g)
    local a = g:tensor(function(i) return i.numel <= 200 end)
    if not a then return nil end
    local mask = g:chance(0.9) and fmt("%s:ne(0)", a.ref) or g:fresh(g:broadcastable(a.shape), "bool")
    return g:weighted {
      { 2, function() return fmt("%s = %s:take(%s)", g:target(), a.ref, positions(g, { g:int(0, 4) }, a.numel)) end },
      { 2, function() return fmt("%s = %s:masked_select(%s)", g:target(), a.ref, mask) end },
      { 1, function() return fmt("%s = %s:detach():clone():masked_fill_(%s, %s)", g:target(), a.ref, mask, g:number()) end },
      { 1, function()
        if a.ndim == 0 then return nil end
        return fmt("%s = %s[%s]", g:target(), a.ref, positions(g, { g:int(0, 3) }, a.shape[1]))
      end },
      { 1, function() return fmt("%s = %s[%s:ne(0)]", g:target(), a.ref, a.ref) end },
    }()
  end,
}

--- shapes for matmul: a's and b's, compatible most of the time (1-D, 2-D, batched)
local function matmul_shapes(g)
  local n, k, m = g:int(0, 6), g:int(0, 6), g:int(0, 6)
  local b = g:int(1, 3)
  local pairs_ = {
    { { k }, { k } }, { { n, k }, { k } }, { { k }, { k, m } }, { { n, k }, { k, m } },
    { { b, n, k }, { b, k, m } }, { { b, n, k }, { k, m } }, { { n, k }, { b, k, m } },
    { { b, 1, n, k }, { 2, k, m } }, { { b, n, k }, { k } },
  }
  local sa, sb = table.unpack(g:pick(pairs_))
  if g:chance(0.15) then sb[#sb == 1 and 1 or #sb - 1] = k + g:int(1, 2) end
  return sa, sb
end

local matmul = {
  matmul = function(g)
    local sa, sb = matmul_shapes(g)
    local dtype = g:float_dtype()
    local a = g:chance(0.3) and g:tensor(function(i) return i.ndim >= 1 and i.ndim <= 3 and i.numel <= 20000 end)
    local left = a and a.ref or g:fresh(sa, dtype, g:chance(0.3))
    if a then
      sb = { a.shape[a.ndim] }
      if g:chance(0.7) then sb[2] = g:int(0, 5) end
    end
    local right = g:fresh(sb, g:chance(0.9) and (a and a.dtype or dtype) or g:dtype(), g:chance(0.3))
    if g:chance(0.5) then return fmt("%s = %s:matmul(%s)", g:target(), left, right) end
    return fmt("%s = tl.matmul(%s, %s)", g:target(), left, right)
  end,
  linear = function(g)
    local dtype = g:float_dtype()
    local n, i, o = g:int(0, 5), g:int(0, 6), g:int(0, 6)
    local input = { n, i }
    if g:chance(0.3) then table.insert(input, 1, g:int(1, 3)) end
    if g:chance(0.2) then input = { i } end
    local weight = { o, g:chance(0.9) and i or i + 1 }
    local bias = g:weighted { { 2, "" }, { 3, ", " .. g:fresh({ g:chance(0.9) and o or o + 2 }, dtype, g:chance(0.5)) },
      { 0.3, ", 3" } }
    return fmt("%s = tl.linear(%s, %s%s)", g:target(), g:fresh(input, dtype, g:chance(0.3)),
      g:fresh(weight, g:chance(0.9) and dtype or g:dtype(), g:chance(0.5)), bias)
  end,
  -- gelu_linear: linear's shapes, the form mostly valid
  gelu_linear = function(g)
    local dtype = g:float_dtype()
    local n, i, o = g:int(0, 5), g:int(0, 6), g:int(0, 6)
    local pre = g:chance(0.8) and { n, i } or { i }
    local weight = { o, g:chance(0.9) and i or i + 1 }
    local bias = g:chance(0.5) and g:fresh({ g:chance(0.9) and o or o + 2 }, dtype, g:chance(0.5)) or "nil"
    local opts = g:weighted { { 2, "" }, { 2, ", {approximate = 'tanh'}" }, { 1, ", {approximate = 'none'}" },
      { 0.3, ", {approximate = 'fast'}" }, { 0.3, ", {approximate = 1}" } }
    return fmt("%s = tl.gelu_linear(%s, %s, %s%s)", g:target(), g:fresh(pre, dtype, g:chance(0.5)),
      g:fresh(weight, g:chance(0.9) and dtype or g:dtype(), g:chance(0.5)), bias, opts)
  end,
  -- linear_gelu_linear: a feed-forward's shapes, mostly matching, the form mostly valid
  linear_gelu_linear = function(g)
    local dtype = g:float_dtype()
    local n, i, h, o = g:int(0, 5), g:int(0, 6), g:int(0, 6), g:int(0, 6)
    local x = g:chance(0.8) and { n, i } or { i }
    local w1 = { h, g:chance(0.9) and i or i + 1 }
    local w2 = { o, g:chance(0.9) and h or h + 1 }
    local function bias(len)
      return g:chance(0.5) and g:fresh({ g:chance(0.9) and len or len + 2 }, dtype, g:chance(0.5)) or "nil"
    end
    local opts = g:weighted { { 2, "" }, { 2, ", {approximate = 'tanh'}" }, { 1, ", {approximate = 'none'}" },
      { 1, ", {approximate = 'tanh', gelu_epilogue = true}" }, { 0.3, ", {gelu_epilogue = 1}" },
      { 0.3, ", {approximate = 'fast'}" } }
    return fmt("%s = tl.linear_gelu_linear(%s, %s, %s, %s, %s%s)", g:target(), g:fresh(x, dtype, g:chance(0.5)),
      g:fresh(w1, g:chance(0.9) and dtype or g:dtype(), g:chance(0.5)), bias(h),
      g:fresh(w2, g:chance(0.9) and dtype or g:dtype(), g:chance(0.5)), bias(o), opts)
  end,
  -- grouped products: offsets mostly valid (sorted ends within T), sometimes decreasing, past
  -- T, of the wrong length or dtype; lists mostly matching
  grouped_mm = function(g)
    local dtype = g:float_dtype()
    local groups, t, k, n = g:int(0, 4), g:int(0, 8), g:int(0, 5), g:int(0, 5)
    local ends, last = {}, 0
    for i = 1, groups do
      last = math.min(t, last + g:int(0, 4))
      ends[i] = last
    end
    if groups > 0 and g:chance(0.1) then ends[g:int(1, groups)] = g:pick { -1, t + 1, 0 } end
    if g:chance(0.05) then ends[#ends + 1] = t end
    local offsets = "{ " .. table.concat(ends, ", ") .. " }"
    if g:chance(0.3) then
      offsets = fmt("tl.tensor(%s, { dtype = %q })", offsets, g:pick { "int32", "int64", "float32" })
    end
    local a = g:fresh({ t, g:chance(0.9) and k or k + 1 }, dtype, g:chance(0.3))
    local b = g:fresh({ groups, k, n }, g:chance(0.9) and dtype or g:dtype(), g:chance(0.3))
    return fmt("%s = tl.grouped_mm(%s, %s, %s)", g:target(), a, b, offsets)
  end,
  -- block-sparse linear: a random block mask, blocks of 1, 2 or 4, the blocks' count, the input
  -- features and the bias mostly right
  block_sparse_linear = function(g)
    local dtype = g:float_dtype()
    local R, C, b = g:int(1, 3), g:int(1, 3), g:pick { 1, 2, 4 }
    local rows, nnz = {}, 0
    for r = 1, R do
      local cols = {}
      for c = 1, C do
        local on = g:chance(0.5)
        if on then nnz = nnz + 1 end
        cols[c] = tostring(on)
      end
      rows[r] = "{ " .. table.concat(cols, ", ") .. " }"
    end
    local mask = fmt("tl.tensor({ %s })", table.concat(rows, ", "))
    local blocks = g:fresh({ g:chance(0.9) and nnz or nnz + 1, b, b }, dtype, g:chance(0.5))
    local x = g:fresh({ g:int(0, 4), g:chance(0.9) and C * b or C * b + 1 }, g:chance(0.9) and dtype or g:dtype(),
      g:chance(0.5))
    local bias = g:weighted { { 2, "" }, { 2, ", " .. g:fresh({ g:chance(0.9) and R * b or R * b + 1 }, dtype, g:chance(0.5)) } }
    return fmt("%s = tl.block_sparse_linear(%s, %s, tl.nn.block_layout(%s)%s)", g:target(), x, blocks, mask, bias)
  end,
  grouped_matmul = function(g)
    local dtype = g:float_dtype()
    local count = g:int(1, 3)
    local as, bs = {}, {}
    for i = 1, count do
      local m, k, n = g:int(0, 5), g:int(0, 5), g:int(0, 5)
      as[i] = g:fresh({ m, k }, dtype, g:chance(0.3))
      bs[i] = g:fresh({ g:chance(0.9) and k or k + 1, n }, g:chance(0.9) and dtype or g:dtype(), g:chance(0.3))
    end
    if g:chance(0.05) then bs[#bs] = nil end
    return fmt("%s = tl.grouped_matmul({ %s }, { %s })[1]", g:target(), table.concat(as, ", "),
      table.concat(bs, ", "))
  end,
  outer = function(g)
    local a = g:tensor(function(i) return i.ndim == 1 and i.numel <= 300 end)
    local left = a and a.ref or g:fresh({ g:int(0, 6) }, g:float_dtype(), g:chance(0.3))
    local right = g:chance(0.9) and g:fresh({ g:int(0, 6) }, a and a.dtype or "float32") or g:fresh({ 2, 2 })
    return fmt("%s = tl.outer(%s, %s)", g:target(), left, right)
  end,
}

-- shape ops: small pool tensors (their results stay under the cap), dims and counts mostly valid
local function small(g, min_ndim)
  return g:tensor(function(i) return i.ndim >= (min_ndim or 0) and i.numel <= 200 end)
end
local function int_list(g, n, lo, hi)
  local parts = {}
  for i = 1, n do parts[i] = g:chance(0.95) and g:int(lo, hi) or g:pick { -1, 0, 99, math.mininteger } end
  return "{ " .. table.concat(parts, ", ") .. " }"
end
local shapes = {
  triangle = function(g)
    local a = small(g)
    if not a then return nil end
    return fmt("%s = %s:%s(%s)", g:target(), a.ref, g:pick { "tril", "triu" }, g:chance(0.7) and g:int(-3, 3) or "")
  end,
  flip_roll = function(g)
    local a = small(g)
    if not a then return nil end
    if g:chance(0.5) then return fmt("%s = %s:flip(%s)", g:target(), a.ref, g:dim(a.ndim)) end
    if g:chance(0.3) then return fmt("%s = %s:roll(%d)", g:target(), a.ref, g:int(-9, 9)) end
    return fmt("%s = tl.roll(%s, { %d, %d }, { %s, %s })", g:target(), a.ref, g:int(-9, 9), g:int(-9, 9),
      g:dim(a.ndim), g:dim(a.ndim))
  end,
  repeats = function(g)
    local a = small(g)
    if not a then return nil end
    if g:chance(0.4) then return fmt("%s = %s:tile(%s)", g:target(), a.ref, int_list(g, g:int(0, 3), 0, 3)) end
    if g:chance(0.5) then
      return fmt("%s = %s:repeat_interleave(%d%s)", g:target(), a.ref, g:int(-1, 3),
        g:chance(0.6) and ", " .. g:dim(a.ndim) or "")
    end
    local d = g:dim(a.ndim)
    local n = a.ndim > 0 and a.shape[((d - 1) % a.ndim) + 1] or 1
    return fmt("%s = %s:repeat_interleave(tl.tensor(%s), %s)", g:target(), a.ref,
      int_list(g, g:chance(0.9) and n or n + 1, 0, 3), d)
  end,
  pad = function(g)
    local a = small(g)
    if not a then return nil end
    local mode = g:pick { "constant", "reflect", "replicate", "circular" }
    return fmt("%s = tl.nn.functional.pad(%s, %s, { mode = %q })", g:target(), a.ref,
      int_list(g, 2 * g:int(0, math.min(a.ndim, 3)), mode == "constant" and -2 or 0, 3), mode)
  end,
  diagonals = function(g)
    local a = small(g)
    if not a then return nil end
    return g:weighted {
      { 2, function() return fmt("%s = %s:diagonal(%d, %s, %s)", g:target(), a.ref, g:int(-2, 2), g:dim(a.ndim), g:dim(a.ndim)) end },
      { 1, function() return fmt("%s = tl.diag(%s, %d)", g:target(), a.ref, g:int(-2, 2)) end },
      { 1, function() return fmt("%s = %s:diag_embed(%d)", g:target(), a.ref, g:int(-2, 2)) end },
      { 1, function() return fmt("%s = %s:unfold(%s, %d, %d)", g:target(), a.ref, g:dim(a.ndim), g:int(0, 3), g:int(0, 3)) end },
      { 1, function() return fmt("%s = %s:movedim(%s, %s)", g:target(), a.ref, g:dim(a.ndim), g:dim(a.ndim)) end },
    }()
  end,
  one_hot = function(g)
    local n = g:int(0, 5)
    return fmt("%s = tl.one_hot(tl.tensor(%s), %s)", g:target(), int_list(g, n, 1, 4), g:chance(0.5) and g:int(-1, 5) or "nil")
  end,
  einsum = function(g)
    local dtype = g:float_dtype()
    local i, j, k = g:int(0, 4), g:int(0, 4), g:int(0, 4)
    local spec, shapes_ = table.unpack(g:pick {
      { "ij,jk->ik", { { i, j }, { j, k } } }, { "ii->i", { { i, i } } }, { "ij,kj", { { i, j }, { k, j } } },
      { "bij,bjk->bik", { { 2, i, j }, { 2, j, k } } }, { "...j,j", { { i, j }, { j } } },
      { "ij,jk,k->i", { { i, j }, { j, k }, { k } } }, { "ij->ji", { { i, j } } }, { "ij,jz->iq", { { i, j }, { j, k } } },
    })
    local operands = {}
    for n, shape in ipairs(shapes_) do
      if g:chance(0.1) then shape[1] = (shape[1] or 0) + 1 end
      operands[n] = g:fresh(shape, g:chance(0.95) and dtype or g:dtype(), g:chance(0.3))
    end
    if g:chance(0.5) then
      return fmt("%s = tl.tensordot(%s, %s, %d)", g:target(), g:fresh({ i, j }, dtype), g:fresh({ j, k }, dtype), g:int(0, 2))
    end
    return fmt("%s = tl.einsum(%q, %s)", g:target(), spec, table.concat(operands, ", "))
  end,
  compare = function(g)
    local a = small(g)
    if not a then return nil end
    if g:chance(0.3) then
      return fmt("%s = tl.meshgrid({ %s:flatten(), %s })[%d]", g:target(), a.ref, g:fresh({ g:int(0, 4) }), g:int(1, 2))
    end
    local b = g:fresh(a.shape, g:chance(0.9) and a.dtype or g:dtype())
    return fmt("%s = tl.isclose(%s, %s, { rtol = %g })", g:target(), a.ref, b, g:pick { 0, 1e-5, 0.5 })
  end,
}

return {
  { name = "elementwise", weight = 10, variants = elementwise },
  { name = "shapes", weight = 4, variants = shapes },
  { name = "casts", weight = 4, variants = casts },
  { name = "reduce", weight = 6, variants = reduce },
  { name = "matmul", weight = 4, variants = matmul },
  { name = "indexing", weight = 4, variants = indexing },
}
