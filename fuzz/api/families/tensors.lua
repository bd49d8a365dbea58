-- Statement makers of the API fuzzer for making tensors: constructors, huge and overflowing shapes, ranges, views.
--
-- A maker takes the Gen (fuzz/api/gen.lua) and returns the statement's source, and optionally the pool
-- slots it changes in place (checked unchanged when the statement fails), or nil when it cannot make a
-- statement now (e.g. it needs a tensor the pool lacks).
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

-- ---- constructors ---------------------------------------------------------------------------------------
local function shaped(name)
  return function(g)
    return fmt("%s = tl.%s(%s)", g:target(), name, Gen.args(g:shape_args(g:shape()), g:opts(g:dtype())))
  end
end

local function like(name, extra)
  return function(g)
    local a = g:tensor()
    if not a then return nil end
    local opts = g:chance(0.5) and g:opts_suffix(g:dtype()) or ""
    return fmt("%s = tl.%s_like(%s%s%s)", g:target(), name, a.ref, extra and (", " .. extra(g)) or "", opts)
  end
end

--- nested table literal of a shape's values drawn by value()
local function nested(g, shape, depth, value)
  depth = depth or 1
  if depth > #shape then return value() end
  local parts = {}
  for i = 1, shape[depth] do parts[i] = nested(g, shape, depth + 1, value) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local construct = {
  zeros = shaped("zeros"),
  ones = shaped("ones"),
  empty = shaped("empty"),
  rand = shaped("rand"),
  randn = shaped("randn"),
  full = function(g)
    return fmt("%s = tl.full(%s, %s%s)", g:target(), literal(g:shape()), g:scalar(), g:opts_suffix(g:dtype()))
  end,
  eye = function(g)
    local m = g:chance(0.5) and (", " .. literal(g:int(0, 6))) or ""
    return fmt("%s = tl.eye(%d%s%s)", g:target(), g:int(0, 6), m, g:opts_suffix(g:dtype()))
  end,
  tensor = function(g)
    local shape = g:shape(64)
    local value = g:weighted {
      { 3, function() return g:small_number() end },
      { 1, function() return g:number() end },
      { 1, function() return g:chance(0.5) and "true" or "false" end },
    }
    local data = nested(g, shape, 1, function() return value() end)
    if g:chance(0.05) then data = g:pick { "{{1, 2}, {3}}", "{{}, {}}", "{1, {2}}", '{"a"}', "{{1}, 2}", "{}" } end
    local opts = g:chance(0.5) and g:opts_suffix(g:dtype()) or ""
    return fmt("%s = tl.tensor(%s%s)", g:target(), data, opts)
  end,
  randint = function(g)
    local lo = g:int(-10, 10)
    local hi = lo + g:weighted { { 8, g:int(1, 20) }, { 1, 0 }, { 1, -3 } }
    return fmt("%s = tl.randint(%d, %d, %s%s)", g:target(), lo, hi, literal(g:shape()),
      g:opts_suffix(g:pick { "int64", "int32", "float32", "float64", "bool" }, false))
  end,
  randperm = function(g)
    local dtype = g:pick { "int64", "int32", "float64" }
    return fmt("%s = tl.randperm(%d%s)", g:target(), g:int(0, 40), g:opts_suffix(dtype))
  end,
  zeros_like = like("zeros"),
  ones_like = like("ones"),
  empty_like = like("empty"),
  rand_like = like("rand"),
  randn_like = like("randn"),
  full_like = like("full", function(g) return g:scalar() end),
}

-- ---- huge and overflowing shapes: each must raise a clear error (or give an empty tensor) -----------------
-- (no size between the cap and Gen.BIG: an empty [2^32, 0] summed over dim 2 is a real 16 GiB tensor)
local HUGE_SIZES = { 1 << 41, 1 << 42, 1 << 62, math.maxinteger, -1, math.mininteger, 2.0 ^ 62, 2.0 ^ 63, 2.0 ^ 64, 0 }

local function huge_shape(g)
  local shape = {}
  for d = 1, g:int(1, 4) do shape[d] = g:chance(0.6) and g:pick(HUGE_SIZES) or g:int(0, 3) end
  return g:beyond_cap(shape)
end

local huge = {
  classic = function(g) -- overflows named in the issue and their neighbours
    return fmt("%s = %s", g:target(), g:pick {
      "tl.empty(0):view(1 << 32, 1 << 32)", "tl.empty(0):view(-1, 1 << 32, 1 << 32)", "tl.zeros(0, 1 << 62, 1 << 62)",
      "tl.zeros(0, 2^62, 2^62)", "tl.zeros(3):narrow(1, 2, math.maxinteger)",
      "tl.zeros(3):narrow(1, math.maxinteger, 1)",
      "tl.zeros(3):narrow(1, -3, math.maxinteger)", "tl.zeros(2, 0):expand(1 << 62, 4, 2, 0)",
      "tl.zeros(1, 1, 1, 1):expand(1 << 32, 1 << 32, 1 << 32, 0)", "tl.empty(0):reshape(0, -1)",
      "tl.zeros(0, 1 << 62):transpose(1, 2):contiguous()", "tl.zeros(0, 1 << 62):sum(1)",
      "tl.zeros(0, 1 << 62):softmax(1)", "tl.zeros(1 << 62, 0):softmax(2)", "tl.zeros(1 << 62, 0):mean(2)",
      "tl.zeros(0, 1 << 62):matmul(tl.zeros(1 << 62, 0))", "tl.zeros(1 << 42, 0):matmul(tl.zeros(0, 1 << 42))",
      "tl.conv2d(tl.zeros(1, 1, 3, 3), tl.zeros(1, 1, 1, 1), {padding = 1 << 62})",
      "tl.conv2d(tl.zeros(1, 1, 3, 3), tl.zeros(1, 1, 1, 1), {padding = math.maxinteger})",
      "tl.conv2d(tl.zeros(1, 1, 3, 3), tl.zeros(1, 1, 1, 1), {stride = math.maxinteger})",
      "tl.max_pool2d(tl.zeros(1, 1, 3, 3), 2, {padding = 1 << 62})",
      "tl.max_pool2d(tl.zeros(1, 1, 3, 3), math.maxinteger)", "tl.arange(0, 1 << 62)", "tl.arange(2^53, 2^53 + 4)",
      "tl.arange(math.maxinteger - 2, math.maxinteger)", "tl.arange(math.mininteger, math.maxinteger, 1 << 62)",
      "tl.linspace(0, 1, math.maxinteger)", "tl.randperm(math.maxinteger)", "tl.eye(1 << 62, 1 << 62)",
      "tl.full({1 << 62, 0}, 1):sum(2)", "tl.zeros(3):expand(1 << 62, 3):sum()",
    })
  end,
  constructor = function(g)
    local name = g:pick { "zeros", "ones", "empty", "rand", "randn" }
    return fmt("%s = tl.%s(%s)", g:target(), name, Gen.args(g:shape_args(huge_shape(g)), g:opts(g:dtype(), false)))
  end,
  empty_with_huge_dims = function(g)
    local shape = { 0, g:pick(HUGE_SIZES), g:pick(HUGE_SIZES) }
    return fmt("%s = tl.%s(%s%s)", g:target(), g:pick { "zeros", "empty", "ones" }, literal(shape),
      g:opts_suffix(g:dtype(), false))
  end,
  full = function(g)
    return fmt("%s = tl.full(%s, %s%s)", g:target(), literal(huge_shape(g)), g:scalar(),
      g:opts_suffix(g:dtype(), false))
  end,
  view = function(g)
    local a = g:chance(0.7) and g:tensor() or nil
    local src = a and a.ref or "tl.empty(0)"
    return fmt("%s = %s:%s(%s)", g:target(), src, g:pick { "view", "reshape" }, g:shape_args(huge_shape(g)))
  end,
  expand = function(g)
    local a = g:tensor()
    local src = a and a.ref or "tl.zeros(1)"
    local shape = huge_shape(g)
    if a then for d = 1, a.ndim do shape[#shape + 1] = g:chance(0.5) and -1 or a.shape[d] end end
    return fmt("%s = %s:expand(%s)", g:target(), src, g:shape_args(shape))
  end,
  narrow = function(g)
    local a = g:tensor(function(i) return i.ndim > 0 end)
    if not a then return nil end
    local values = { math.maxinteger, math.mininteger, 1 << 62, -(1 << 62), 1 << 32, 0, 1, -1, 2 }
    return fmt("%s = %s:narrow(%s, %s, %s)", g:target(), a.ref, g:dim(a.ndim), literal(g:pick(values)),
      literal(g:pick(values)))
  end,
  select = function(g)
    local a = g:tensor()
    if not a then return nil end
    local index = g:pick { math.maxinteger, math.mininteger, 1 << 62, -(1 << 62), 0, a.shape[1] or 1 }
    return fmt("%s = %s:select(%s, %s)", g:target(), a.ref, g:dim(a.ndim), literal(index))
  end,
  index = function(g)
    local a = g:tensor()
    if not a then return nil end
    local index = g:pick { math.maxinteger, math.mininteger, 0, -(a.shape[1] or 1) - 1, 2.0 ^ 63, 1.5, "x" }
    return fmt("local _ = %s[%s]", a.ref, literal(index))
  end,
  dims = function(g)
    local a = g:tensor()
    if not a then return nil end
    local d = literal(g:pick { math.maxinteger, math.mininteger, 1 << 31, -(1 << 31), 1 << 62, 17, -17, 0 })
    local call = g:pick { "sum(%s)", "mean(%s)", "softmax(%s)", "log_softmax(%s)", "unsqueeze(%s)", "squeeze(%s)",
      "transpose(%s, 1)", "transpose(1, %s)", "flatten(%s)", "flatten(1, %s)", "size(%s)", "max(%s)", "argmin(%s)",
      "narrow(%s, 1, 1)", "select(%s, 1)", "permute(%s)" }
    return fmt("%s = %s:%s", g:target(), a.ref, fmt(call, d))
  end,
}

-- ---- ranges with extreme numbers ---------------------------------------------------------------------------
local RANGE_VALUES = { 0, 1, -1, 10, 0.5, -2.5, 1e-300, 1e308, math.huge, -math.huge, 0 / 0, 1 << 53, (1 << 53) + 3,
  2.0 ^ 53, 1 << 62, math.maxinteger, math.mininteger, (1 << 31) - 1, 1 << 31, -(1 << 31), 2.0 ^ 63 }

--- true when a range of count elements is cheap, or too large for the engine to even try (or invalid)
local function range_ok(g, count)
  return count ~= count or count <= g.cap or count >= Gen.BIG or count == math.huge
end

local ranges = {
  arange = function(g)
    local start, stop, step = g:pick(RANGE_VALUES), g:pick(RANGE_VALUES), g:pick(RANGE_VALUES)
    if g:chance(0.5) then -- a few elements from an extreme start
      step = g:pick { 1, -1, 3, 0.25, 1 << 40, 2.0 ^ 60 }
      local n = g:int(0, 12)
      local exact = math.type(start) == "integer" and math.type(step) == "integer" and math.abs(start) < (1 << 61)
      stop = exact and start + n * step or (start + 0.0) + n * step
    end
    local form = g:int(1, 3)
    local count = ((stop + 0.0) - (form == 1 and 0 or start)) / (form == 3 and step or 1)
    if not range_ok(g, count) then return nil end
    local opts = g:chance(0.3) and g:opts_suffix(g:dtype(), false) or ""
    if form == 1 then return fmt("%s = tl.arange(%s%s)", g:target(), literal(stop), opts) end
    if form == 2 then return fmt("%s = tl.arange(%s, %s%s)", g:target(), literal(start), literal(stop), opts) end
    return fmt("%s = tl.arange(%s, %s, %s%s)", g:target(), literal(start), literal(stop), literal(step), opts)
  end,
  linspace = function(g)
    local steps = g:pick { 0, 1, 2, 5, 100, -1, 1 << 41, math.maxinteger, math.mininteger, 2.5, 0 / 0 }
    local opts = g:chance(0.3) and g:opts_suffix(g:dtype(), false) or ""
    return fmt("%s = tl.linspace(%s, %s, %s%s)", g:target(), literal(g:pick(RANGE_VALUES)),
      literal(g:pick(RANGE_VALUES)), literal(steps), opts)
  end,
  randint = function(g)
    local lo, hi = g:pick(RANGE_VALUES), g:pick(RANGE_VALUES)
    return fmt("%s = tl.randint(%s, %s, %s%s)", g:target(), literal(lo), literal(hi), literal(g:shape(16)),
      g:opts_suffix(g:pick { "int64", "int32", "float32", "bool" }, false))
  end,
  randperm = function(g)
    return fmt("%s = tl.randperm(%s)", g:target(),
      literal(g:pick { 0, 1, -1, 1 << 41, 1 << 62, math.maxinteger, math.mininteger, 2.5, 0 / 0 }))
  end,
  eye = function(g)
    local values = { 0, 1, 3, -1, 1 << 41, 1 << 62, math.maxinteger, math.mininteger }
    local n, m = g:pick(values), g:pick(values)
    if n > 0 and m > 0 and n * 1.0 * m > g.cap and n * 1.0 * m < Gen.BIG then return nil end
    return fmt("%s = tl.eye(%s, %s)", g:target(), literal(n), literal(m))
  end,
  full_value = function(g)
    local dtype = g:dtype()
    return fmt("%s = tl.full(%s, %s, {dtype = %s})", g:target(), literal(g:shape(8)),
      literal(g:pick(RANGE_VALUES)), literal(dtype))
  end,
}

-- ---- views -------------------------------------------------------------------------------------------------
--- a shape with numel elements (a random factorization, maybe one -1), or a wrong one
local function reshaped(g, shape, numel)
  if g:chance(0.1) then return g:shape() end
  local out, left = {}, numel
  while left > 1 and #out < 5 do
    local f = 1
    for cand = g:int(2, 6), 2, -1 do if left % cand == 0 then f = cand break end end
    if f == 1 then break end
    out[#out + 1] = f
    left = left // f
  end
  if left ~= 1 or numel == 0 then out[#out + 1] = left end
  if numel == 0 and g:chance(0.5) then out = { 0, g:int(1, 4) } end
  if #out > 0 and g:chance(0.3) then out[g:int(1, #out)] = -1 end
  if g:chance(0.2) then table.insert(out, g:int(1, #out + 1), 1) end
  return out
end

local function with_tensor(filter, body)
  return function(g)
    local a = g:tensor(filter)
    if not a then return nil end
    return body(g, a)
  end
end

local views = {
  view = with_tensor(nil, function(g, a)
    return fmt("%s = %s:view(%s)", g:target(), a.ref, g:shape_args(reshaped(g, a.shape, a.numel)))
  end),
  reshape = with_tensor(nil, function(g, a)
    return fmt("%s = %s:reshape(%s)", g:target(), a.ref, g:shape_args(reshaped(g, a.shape, a.numel)))
  end),
  transpose = with_tensor(nil, function(g, a)
    return fmt("%s = %s:transpose(%s, %s)", g:target(), a.ref, g:dim(a.ndim), g:dim(a.ndim))
  end),
  permute = with_tensor(nil, function(g, a)
    local dims = {}
    for d = 1, a.ndim do table.insert(dims, g:int(1, d), g:chance(0.2) and d - a.ndim - 1 or d) end
    if g:chance(0.1) then dims[#dims + 1] = g:dim(a.ndim) end
    if g:chance(0.05) and #dims > 1 then dims[1] = dims[2] end
    local args = g:chance(0.5) and literal(dims) or table.concat(dims, ", ")
    return fmt("%s = %s:permute(%s)", g:target(), a.ref, args)
  end),
  narrow = with_tensor(function(i) return i.ndim > 0 end, function(g, a)
    local d = g:int(1, a.ndim)
    local size = a.shape[d]
    local start = g:int(1, size + 1)
    local length = g:int(0, size - start + 1)
    if g:chance(0.1) then start, length = g:int(-size - 2, size + 2), g:int(-1, size + 2) end
    if g:chance(0.2) and start <= size then start = start - size - 1 end
    return fmt("%s = %s:narrow(%s, %d, %d)", g:target(), a.ref, g:chance(0.9) and d or g:dim(a.ndim), start, length)
  end),
  select = with_tensor(nil, function(g, a)
    local d = a.ndim > 0 and g:int(1, a.ndim) or 1
    local size = a.shape[d] or 1
    local index = g:chance(0.9) and g:int(1, math.max(size, 1)) or g:int(-size - 1, size + 1)
    return fmt("%s = %s:select(%s, %d)", g:target(), a.ref, g:chance(0.9) and d or g:dim(a.ndim), index)
  end),
  squeeze = with_tensor(nil, function(g, a)
    return fmt("%s = %s:squeeze(%s)", g:target(), a.ref, g:chance(0.3) and "" or g:dim(a.ndim))
  end),
  unsqueeze = with_tensor(nil, function(g, a)
    return fmt("%s = %s:unsqueeze(%s)", g:target(), a.ref, g:dim(a.ndim + 1))
  end),
  flatten = with_tensor(nil, function(g, a)
    local args = g:weighted { { 1, "" }, { 1, g:dim(a.ndim) }, { 2, g:dim(a.ndim) .. ", " .. g:dim(a.ndim) } }
    return fmt("%s = %s:flatten(%s)", g:target(), a.ref, args)
  end),
  expand = with_tensor(nil, function(g, a)
    local shape = {}
    for d = 1, a.ndim do
      local s = a.shape[d]
      shape[d] = g:weighted { { 3, s }, { 1, -1 }, { s == 1 and 3 or 0, g:int(0, 5) }, { 0.3, g:int(0, 5) } }
    end
    for _ = 1, g:weighted { { 3, 0 }, { 2, 1 }, { 1, 2 } } do table.insert(shape, 1, g:int(1, 4)) end
    return fmt("%s = %s:expand(%s)", g:target(), a.ref, g:shape_args(shape))
  end),
  contiguous = with_tensor(nil, function(g, a) return fmt("%s = %s:contiguous()", g:target(), a.ref) end),
  clone = with_tensor(nil, function(g, a) return fmt("%s = %s:clone()", g:target(), a.ref) end),
  detach = with_tensor(nil, function(g, a) return fmt("%s = %s:detach()", g:target(), a.ref) end),
  index = with_tensor(nil, function(g, a)
    local n = a.shape[1] or 1
    local i = g:chance(0.85) and g:int(1, math.max(n, 1)) or g:int(-n - 1, n + 1)
    if g:chance(0.3) then i = -i end
    if a.ndim == 1 then return fmt("local _ = %s[%d]", a.ref, i) end
    return fmt("%s = %s[%d]", g:target(), a.ref, i)
  end),
}

return {
  { name = "construct", weight = 6, variants = construct },
  { name = "huge", weight = 2, variants = huge },
  { name = "ranges", weight = 2, variants = ranges },
  { name = "views", weight = 8, variants = views },
}
