-- Reference utilities for the specs, in pure Lua and independent of the engine:
-- a seeded pseudo-random generator, nested-table <-> flat helpers, float64
-- matmul, reductions and softmax by Lua loops, erf, and bf16/f16/f32 rounding
-- written from the IEEE 754 definitions (bits through string.pack/unpack).
local M = {}

-- ---------------------------------------------------------------------------
-- Pseudo-random numbers: a 64-bit LCG (Knuth's MMIX constants; Lua integers
-- wrap modulo 2^64), high bits only. Deterministic across runs and machines.
local Rng = {}
Rng.__index = Rng

function M.rng(seed)
  assert(math.type(seed) == "integer", "rng: seed must be an integer")
  local r = setmetatable({ state = seed ~ 0x5DEECE66D }, Rng)
  for _ = 1, 4 do r:next_int() end
  return r
end

-- the next 64-bit state (any integer, wraps)
function Rng:next_int()
  self.state = self.state * 6364136223846793005 + 1442695040888963407
  return self.state
end

-- uniform float in [0, 1) with 53 random bits
function Rng:random()
  return (self:next_int() >> 11) * 2.0 ^ -53
end

function Rng:uniform(lo, hi)
  return lo + (hi - lo) * self:random()
end

-- integer uniform in [lo, hi] (both included)
function Rng:int(lo, hi)
  return lo + math.floor(self:random() * (hi - lo + 1))
end

-- 32 random bits as an integer in [0, 2^32)
function Rng:bits32()
  return self:next_int() >> 32
end

-- standard normal (Box-Muller)
function Rng:normal()
  local u1 = 1.0 - self:random() -- (0, 1]
  local u2 = self:random()
  return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
end

-- ---------------------------------------------------------------------------
-- Shapes and nested tables. A nested table is a Lua array of arrays; a number
-- or boolean is a 0-dim value. Flat arrays are row-major.

-- whether two shapes (Lua arrays) are the same
function M.same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

function M.numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

function M.strides(shape)
  local st, acc = {}, 1
  for d = #shape, 1, -1 do
    st[d] = acc
    acc = acc * shape[d]
  end
  return st
end

function M.shape_str(shape)
  local parts = {}
  for i, s in ipairs(shape) do parts[i] = tostring(s) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

-- shape of a nested table (from the first element of each level)
function M.shape_of(nested)
  local shape, v = {}, nested
  while type(v) == "table" do
    shape[#shape + 1] = #v
    v = v[1]
  end
  return shape
end

-- flat row-major array and shape; errors on ragged tables
function M.flatten(nested)
  local shape = M.shape_of(nested)
  local flat = {}
  local function walk(v, depth)
    if depth > #shape then
      if type(v) == "table" then error("flatten: nested table deeper than its first element") end
      flat[#flat + 1] = v
      return
    end
    if type(v) ~= "table" or #v ~= shape[depth] then
      error(("flatten: ragged nested table at depth %d"):format(depth))
    end
    for i = 1, #v do walk(v[i], depth + 1) end
  end
  walk(nested, 1)
  return flat, shape
end

-- nested table of the given shape from a flat array (shape {} gives flat[1])
function M.unflatten(flat, shape)
  if #shape == 0 then return flat[1] end
  local pos = 0
  local function build(depth)
    local t = {}
    for i = 1, shape[depth] do
      if depth == #shape then
        pos = pos + 1
        t[i] = flat[pos]
      else
        t[i] = build(depth + 1)
      end
    end
    return t
  end
  return build(1)
end

-- nested table of shape filled by gen(i1, i2, ...) (1-based indices)
function M.build(shape, gen)
  local idx = {}
  local function rec(depth)
    if depth > #shape then return gen(table.unpack(idx, 1, #shape)) end
    local t = {}
    for i = 1, shape[depth] do
      idx[depth] = i
      t[i] = rec(depth + 1)
    end
    return t
  end
  return rec(1)
end

-- nested table of uniform numbers in [lo, hi); round (optional) maps each value
function M.random_table(rng, shape, lo, hi, round)
  return M.build(shape, function()
    local v = rng:uniform(lo or -1, hi or 1)
    return round and round(v) or v
  end)
end

function M.random_int_table(rng, shape, lo, hi)
  return M.build(shape, function() return rng:int(lo, hi) end)
end

-- element of a nested table at a list of 1-based indices
function M.get(nested, idx)
  local v = nested
  for _, i in ipairs(idx) do v = v[i] end
  return v
end

-- calls fn(idx) for every 1-based multi-index of shape in row-major order
-- (idx is reused between calls: copy it to keep it)
function M.each_index(shape, fn)
  local n = M.numel(shape)
  if n == 0 then return end
  local idx = {}
  for d = 1, #shape do idx[d] = 1 end
  for _ = 1, n do
    fn(idx)
    for d = #shape, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] <= shape[d] then break end
      idx[d] = 1
    end
  end
end

-- elementwise map of one nested table (or a number)
function M.map(nested, fn)
  if type(nested) ~= "table" then return fn(nested) end
  local out = {}
  for i = 1, #nested do out[i] = M.map(nested[i], fn) end
  return out
end

-- NumPy broadcasting of two shapes (nil when they cannot be broadcast)
function M.broadcast_shape(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local sa = a[#a - n + i] or 1
    local sb = b[#b - n + i] or 1
    if sa ~= sb and sa ~= 1 and sb ~= 1 then return nil end
    out[i] = sa == 1 and sb or sa
  end
  return out
end

-- element of (flat, shape) at an index of a broadcast result shape
local function broadcast_read(flat, shape, idx)
  local nd, n = #shape, #idx
  local off, acc = 0, 1
  for d = nd, 1, -1 do
    local i = idx[n - nd + d]
    if shape[d] == 1 then i = 1 end
    off = off + (i - 1) * acc
    acc = acc * shape[d]
  end
  return flat[off + 1]
end

-- fn applied elementwise to any number of broadcast operands (nested tables or scalars)
function M.broadcast_map(fn, ...)
  local args = table.pack(...)
  local flats, shapes = {}, {}
  local out_shape = {}
  for i = 1, args.n do
    local v = args[i]
    if type(v) == "table" then
      flats[i], shapes[i] = M.flatten(v)
    else
      flats[i], shapes[i] = { v }, {}
    end
    out_shape = assert(M.broadcast_shape(out_shape, shapes[i]), "broadcast_map: shapes do not broadcast")
  end
  local out = {}
  M.each_index(out_shape, function(idx)
    local vals = {}
    for i = 1, args.n do vals[i] = broadcast_read(flats[i], shapes[i], idx) end
    out[#out + 1] = fn(table.unpack(vals, 1, args.n))
  end)
  return M.unflatten(out, out_shape)
end

-- ---------------------------------------------------------------------------
-- Reductions by Lua loops. dim is 1-based (negative from the end) or nil for
-- all elements. kind: "sum", "mean", "max", "min", "argmax", "argmin",
-- "maxidx"/"minidx" (the 1-based index of max/min along dim). Ties give the
-- first index. NaN propagates through max/min (and is the reported maximum).
local function pick(kind, best, v)
  if best ~= best then return false end -- a NaN stays
  if v ~= v then return true end
  if kind == "max" then return v > best end
  return v < best
end

-- The lines of a row-major array of shape along a 1-based dim (negative from the end): a list,
-- in row-major order of the other dims, of each line's flat 1-based positions; and the dim
-- counted from the start.
function M.lines(shape, dim)
  local nd = #shape
  if dim < 0 then dim = dim + nd + 1 end
  assert(dim >= 1 and dim <= nd, "dim out of range")
  local outer, inner, n = 1, 1, shape[dim]
  for d = 1, dim - 1 do outer = outer * shape[d] end
  for d = dim + 1, nd do inner = inner * shape[d] end
  local list = {}
  for o = 0, outer - 1 do
    for i = 0, inner - 1 do
      local at = {}
      for k = 0, n - 1 do at[k + 1] = o * n * inner + k * inner + i + 1 end
      list[#list + 1] = at
    end
  end
  return list, dim
end

-- the values of flat at the positions at
local function gather(flat, at)
  local values = {}
  for k, p in ipairs(at) do values[k] = flat[p] end
  return values
end

-- kind's reduction (base "sum", "mean", "max", "min"; the index when want_index) of a list
local function reduce_list(base, want_index, values)
  local acc, best, besti = 0.0, nil, nil
  for i, v in ipairs(values) do
    acc = acc + v
    if besti == nil or pick(base, best, v) then best, besti = v, i end
  end
  if base == "sum" then return acc end
  if base == "mean" then return acc / #values end
  if want_index then return besti end
  return best
end

function M.reduce(nested, kind, dim, keepdim)
  local flat, shape = M.flatten(nested)
  local base = kind:gsub("^arg", ""):gsub("idx$", "")
  local want_index = kind:sub(1, 3) == "arg" or kind:sub(-3) == "idx"
  if dim == nil then return reduce_list(base, want_index, flat) end
  local lines
  lines, dim = M.lines(shape, dim)
  local out = {}
  for j, at in ipairs(lines) do out[j] = reduce_list(base, want_index, gather(flat, at)) end
  local out_shape = {}
  for d = 1, #shape do
    if d ~= dim then out_shape[#out_shape + 1] = shape[d]
    elseif keepdim then out_shape[#out_shape + 1] = 1 end
  end
  return M.unflatten(out, out_shape)
end

-- numerically stable softmax / log_softmax of a Lua array
-- the largest element m and sum(exp(x - m))
local function max_and_sum_exp(xs)
  local m = -math.huge
  for _, x in ipairs(xs) do if x > m then m = x end end
  local s = 0.0
  for _, x in ipairs(xs) do s = s + math.exp(x - m) end
  return m, s
end

function M.softmax_list(xs)
  local m, s = max_and_sum_exp(xs)
  local out = {}
  for i, x in ipairs(xs) do out[i] = math.exp(x - m) / s end
  return out
end

function M.log_softmax_list(xs)
  local m, s = max_and_sum_exp(xs)
  local lse = m + math.log(s)
  local out = {}
  for i, x in ipairs(xs) do out[i] = x - lse end
  return out
end

-- softmax (or log_softmax when log is true) of a nested table along a 1-based dim
function M.softmax(nested, dim, log)
  local flat, shape = M.flatten(nested)
  local out = {}
  for _, at in ipairs(M.lines(shape, dim)) do
    local xs = gather(flat, at)
    local ys = log and M.log_softmax_list(xs) or M.softmax_list(xs)
    for k, p in ipairs(at) do out[p] = ys[k] end
  end
  return M.unflatten(out, shape)
end

-- ---------------------------------------------------------------------------
-- matmul in float64 with torch.matmul semantics (1-D promotion, broadcast
-- batch dims), by a triple loop over nested tables.
function M.matmul(a, b)
  local fa, sa = M.flatten(a)
  local fb, sb = M.flatten(b)
  assert(#sa >= 1 and #sb >= 1, "matmul: need at least 1 dim")
  local a_vec, b_vec = #sa == 1, #sb == 1
  if a_vec then sa = { 1, sa[1] } end
  if b_vec then sb = { sb[1], 1 } end
  local m, k = sa[#sa - 1], sa[#sa]
  local k2, n = sb[#sb - 1], sb[#sb]
  assert(k == k2, "matmul: inner sizes differ")
  local ba, bb = {}, {}
  for d = 1, #sa - 2 do ba[d] = sa[d] end
  for d = 1, #sb - 2 do bb[d] = sb[d] end
  local batch = assert(M.broadcast_shape(ba, bb), "matmul: batch dims do not broadcast")
  local out = {}
  local function batch_offset(bshape, idx)
    local nd, nb = #bshape, #idx
    local off, acc = 0, 1
    for d = nd, 1, -1 do
      local i = bshape[d] == 1 and 1 or idx[nb - nd + d]
      off = off + (i - 1) * acc
      acc = acc * bshape[d]
    end
    return off
  end
  local function one(idx)
    local oa = batch_offset(ba, idx) * m * k
    local ob = batch_offset(bb, idx) * k * n
    for i = 0, m - 1 do
      for j = 0, n - 1 do
        local s = 0.0
        for p = 0, k - 1 do
          s = s + fa[oa + i * k + p + 1] * fb[ob + p * n + j + 1]
        end
        out[#out + 1] = s
      end
    end
  end
  if #batch == 0 then one({}) else M.each_index(batch, one) end
  local out_shape = {}
  for d = 1, #batch do out_shape[d] = batch[d] end
  if not a_vec then out_shape[#out_shape + 1] = m end
  if not b_vec then out_shape[#out_shape + 1] = n end
  return M.unflatten(out, out_shape)
end

-- ---------------------------------------------------------------------------
-- Special functions

-- erf by the series erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)),
-- whose terms are all positive (no cancellation); |erf| = 1 in double beyond 6.
function M.erf(x)
  if x ~= x then return x end
  local ax = math.abs(x)
  if ax > 6 then return x > 0 and 1.0 or -1.0 end
  local term, sum, n = ax, ax, 0
  while term > sum * 1e-17 do
    n = n + 1
    term = term * 2 * ax * ax / (2 * n + 1)
    sum = sum + term
  end
  local r = 2 / math.sqrt(math.pi) * math.exp(-ax * ax) * sum
  return x < 0 and -r or r
end

-- erfc(z) for z >= 0: 1 - erf(z) below 2 (at most ~2 digits lost), else the
-- continued fraction erfc(z) = exp(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))
-- evaluated backwards from a fixed depth.
function M.erfc(z)
  if z ~= z then return z end
  if z < 0 then return 2 - M.erfc(-z) end
  if z < 2 then return 1 - M.erf(z) end
  if z > 27 then return 0.0 end
  local k = z
  for n = 200, 1, -1 do k = z + (n / 2) / k end
  return math.exp(-z * z) / math.sqrt(math.pi) / k
end

-- gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2) (accurate for x < 0 too)
function M.gelu(x)
  return 0.5 * x * M.erfc(-x / math.sqrt(2))
end

-- gelu's tanh form, PyTorch's approximate = "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
-- and its derivative
local K_GELU = math.sqrt(2 / math.pi)
function M.gelu_tanh(x) return 0.5 * x * (1 + M.tanh(K_GELU * (x + 0.044715 * x ^ 3))) end
function M.gelu_tanh_derivative(x)
  local t = M.tanh(K_GELU * (x + 0.044715 * x ^ 3))
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K_GELU * (1 + 3 * 0.044715 * x * x)
end

function M.tanh(x)
  if x ~= x then return x end
  if x > 20 then return 1.0 end
  if x < -20 then return -1.0 end
  if math.abs(x) < 1e-4 then return x - x * x * x / 3 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

function M.sigmoid(x)
  if x >= 0 then return 1 / (1 + math.exp(-x)) end
  local e = math.exp(x)
  return e / (1 + e)
end

-- ---------------------------------------------------------------------------
-- Floating-point formats, from the IEEE 754 definitions.

-- bits of a double / float32 as integers (little-endian packing)
function M.f64_bits(x) return (string.unpack("<i8", string.pack("<d", x))) end
function M.f32_bits(x) return (string.unpack("<I4", string.pack("<f", x))) end
function M.f32_from_bits(b) return (string.unpack("<f", string.pack("<I4", b))) end

-- the float32 nearest to x (the C conversion, round to nearest even)
function M.round_f32(x) return (string.unpack("<f", string.pack("<f", x))) end

-- unbiased binary exponent of a finite nonzero double: |x| in [2^e, 2^(e+1))
local function exponent_of(ax)
  local biased = (M.f64_bits(ax) >> 52) & 0x7FF
  if biased == 0 then -- subnormal double: scale up (exact)
    local e = (M.f64_bits(ax * 2.0 ^ 64) >> 52) & 0x7FF
    return e - 1023 - 64
  end
  return biased - 1023
end

-- rounds x to the nearest value of a binary format with `frac` fraction bits,
-- minimum normal exponent emin and maximum exponent emax, ties to even;
-- values at or beyond the overflow threshold become +-Inf; NaN, +-Inf and the
-- sign of zero are kept.
function M.round_to_format(x, frac, emin, emax)
  if x ~= x then return x end
  if x == math.huge or x == -math.huge then return x end
  local neg = x < 0 or (x == 0 and 1 / x < 0)
  local ax = math.abs(x)
  local r
  if ax == 0 then
    r = 0.0
  else
    local e = exponent_of(ax)
    if e < emin then e = emin end -- subnormal range: fixed quantum
    local q = 2.0 ^ (e - frac) -- spacing of representable values near ax
    local scaled = ax / q -- exact: q is a power of two
    local n = math.floor(scaled)
    local rest = scaled - n
    if rest > 0.5 or (rest == 0.5 and n % 2 == 1) then n = n + 1 end
    r = n * q
    if r >= 2.0 ^ (emax + 1) then r = math.huge end
  end
  if neg then return -r end
  return r
end

-- bfloat16: 8 exponent bits (like float32), 7 fraction bits
function M.round_bf16(x) return M.round_to_format(x, 7, -126, 127) end
-- float16: 5 exponent bits, 10 fraction bits
function M.round_f16(x) return M.round_to_format(x, 10, -14, 15) end

-- the value a Lua number takes when stored in dtype (float dtypes only)
function M.round_to(x, dtype)
  if dtype == "float32" then return M.round_f32(x) end
  if dtype == "bfloat16" then return M.round_bf16(x) end
  if dtype == "float16" then return M.round_f16(x) end
  return x
end

-- ---------------------------------------------------------------------------
-- Tensors <-> tables (thin wrappers, so specs read the same way)
function M.to_tensor(tbl, dtype)
  local tl = require("tlua")
  return tl.tensor(tbl, dtype and { dtype = dtype } or nil)
end

function M.to_table(t)
  return t:totable()
end

-- The floating dtypes, and the tolerances of an elementwise result in each against a float64
-- reference computed from the stored inputs: float32 kernels are good to a few ulp; bf16/f16
-- results are one rounding (plus the float32 compute) away.
M.FLOAT_DTYPES = { "float32", "float64", "bfloat16", "float16" }
M.ELEMENTWISE_TOL = {
  float32 = { rtol = 1e-5, atol = 1e-6 },
  float64 = { rtol = 1e-12, atol = 1e-14 },
  bfloat16 = { rtol = 2 ^ -7, atol = 1e-3 },
  float16 = { rtol = 2 ^ -10, atol = 1e-4 },
}

return M
