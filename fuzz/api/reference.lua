-- Pure-Lua references for the API fuzzer's value checks: statements call H.check_*(...), which runs the op and
-- compares its result with a computation in Lua over the inputs' values (read with totable()).
--
-- A mismatch is a finding; so is an error where the reference says the call is valid (small inputs, shapes
-- that broadcast), and a success where it says the call is invalid. Inputs the reference cannot read
-- (released tensors) or does not model (dtypes other than those listed) make the check a plain call.
local Checks = require("checks")

local H = {}
H.__index = H

--- H.new(tl, report, tmpdir, check_message): report(message) records a finding; check_message(err) judges
-- the message of an error raised inside a check (nil when it is a good one)
function H.new(tl, report, tmpdir, check_message)
  return setmetatable({ tl = tl, report = report, tmpdir = tmpdir, check_message = check_message }, H)
end

-- ---- dense values --------------------------------------------------------------------------------------
--- {shape, dtype, v (row-major values)} of a readable tensor, or nil
function H:dense(t)
  local tl = self.tl
  if not tl.is_tensor(t) or tl.is_released(t) or not Checks.readable(t.shape) then return nil end
  local shape = t.shape
  return { shape = shape, dtype = t.dtype, v = Checks.flatten(t:detach():totable(), shape) }
end

local function strides(shape)
  local s, n = {}, 1
  for d = #shape, 1, -1 do
    s[d] = n
    n = n * shape[d]
  end
  return s, n
end

--- calls fn(index) for each multi-index (0-based, row-major) of shape
local function each_index(shape, fn)
  local _, n = strides(shape)
  local idx = {}
  for d = 1, #shape do idx[d] = 0 end
  for _ = 1, n do
    fn(idx)
    for d = #shape, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] < shape[d] then break end
      idx[d] = 0
    end
  end
end

--- the value of a (dense) at the out-index idx under broadcasting to an out shape of ndim dims
local function at(a, idx, ndim)
  local s = strides(a.shape)
  local offset, lead = 0, ndim - #a.shape
  for d = 1, #a.shape do
    local i = a.shape[d] == 1 and 0 or idx[lead + d]
    offset = offset + i * s[d]
  end
  return a.v[offset + 1]
end

--- x rounded to nearest-even at `bits` significant bits, with the exponent range of a format whose largest
-- finite value is max and whose smallest normal is 2^min_exp (below it the spacing stays 2^(min_exp-bits+1))
local function round_bits(x, bits, min_exp, max)
  if x ~= x or x == 0 or x == math.huge or x == -math.huge then return x end
  local a = math.abs(x)
  local e = min_exp
  local p = 2.0 ^ (e + 1)
  while a >= p do e, p = e + 1, p * 2 end -- a in [2^e, 2^(e+1)) (or a subnormal: e = min_exp)
  local spacing = 2.0 ^ (e - bits + 1)
  local q = a / spacing -- exact: a power-of-two scale
  local r = math.floor(q)
  local frac = q - r
  if frac > 0.5 or (frac == 0.5 and r % 2 == 1) then r = r + 1 end
  local y = r * spacing
  if y > max then
    -- past the largest finite value: rounds to infinity when beyond its halfway point to the next
    y = (a >= max + 2.0 ^ (math.floor(math.log(max, 2)) - bits)) and math.huge or max
  end
  return x < 0 and -y or y
end

local function round_to(x, dtype)
  if dtype == "float32" then return (string.unpack("<f", string.pack("<f", x))) end
  if dtype == "bfloat16" then return round_bits(x, 8, -126, 3.3895313892515355e38) end
  if dtype == "float16" then return round_bits(x, 11, -14, 65504.0) end
  return x
end
H.round_to = round_to

-- an expected value that only says "not finite" (inf, -inf or NaN)
local ANY_NONFINITE = setmetatable({}, { __tostring = function() return "inf or nan" end })

local function close(got, want, tol)
  if want == ANY_NONFINITE then return type(got) == "number" and (got ~= got or math.abs(got) == math.huge) end
  if type(got) ~= "number" or type(want) ~= "number" then return got == want end
  if want ~= want then return got ~= got end
  if want == math.huge or want == -math.huge then return got == want end
  return math.abs(got - want) <= tol
end

local function show(v)
  if math.type(v) == "float" then return string.format("%.17g", v) end
  return tostring(v)
end

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end

local same_shape = require("helpers.reference").same_shape

-- the spacing of each floating dtype's subnormal numbers
local SUBNORMAL_STEP = { float32 = 2 ^ -149, float64 = 2 ^ -1074, bfloat16 = 2 ^ -133, float16 = 2 ^ -24 }

--- compares got (a tensor) with want {shape, v} within tol(i) (0: exact); reports the first mismatch
function H:compare(what, got, want, tol)
  local tl = self.tl
  if not tl.is_tensor(got) or tl.is_released(got) then
    return self.report(what .. ": the result is not a live tensor")
  end
  if not Checks.readable(got.shape) then -- an empty tensor with huge sizes: its shape is all there is to check
    if not same_shape(got.shape, want.shape) then
      return self.report(string.format("%s: result shape %s, expected %s", what, shape_str(got.shape),
        shape_str(want.shape)))
    end
    return
  end
  local d = self:dense(got)
  if not same_shape(d.shape, want.shape) then
    return self.report(string.format("%s: result shape %s, expected %s", what, shape_str(d.shape),
      shape_str(want.shape)))
  end
  if want.dtype and d.dtype ~= want.dtype then
    return self.report(string.format("%s: result dtype %s, expected %s", what, d.dtype, want.dtype))
  end
  for i = 1, #want.v do
    local t = type(tol) == "function" and tol(i) or tol
    -- results among the subnormals are rounded to their fixed spacing (in-place chains reach them)
    if t > 0 then t = math.max(t, 4 * (SUBNORMAL_STEP[d.dtype] or 0)) end
    if not close(d.v[i], want.v[i], t) then
      return self.report(string.format("%s: element %d is %s, expected %s (tolerance %g)", what, i, show(d.v[i]),
        show(want.v[i]), t))
    end
  end
end

--- runs fn; with valid == false the call must raise, with valid == true it must not (returns its result)
-- the history of a view whose base was changed in place by a recorded op since: an op on it raises by design
-- (its gradient would go to the old values), whatever its arguments
local function stale_view_error(message)
  return tostring(message):find("changed in place after the view was taken", 1, true) ~= nil
end

function H:expect(what, valid, fn)
  local ok, result = pcall(fn)
  if ok and valid == false then self.report(what .. ": succeeded, but the reference says it must raise") end
  if not ok and valid == true and not stale_view_error(result) then
    self.report(what .. ": raised, but the reference says it is valid: " .. tostring(result))
  end
  local bad = not ok and self.check_message and self.check_message(result)
  if bad then self.report(what .. ": " .. bad) end
  return ok and result or nil
end

local MODELLED = { float64 = true, float32 = true, int64 = true }
-- the elementwise checks also model the 16-bit floats: an op on two of their values is exact in float64,
-- and rounding that to float32 and then to 16 bits equals rounding it once (24 >= 2 * 11 + 2 bits)
local ELEMENTWISE = { float64 = true, float32 = true, int64 = true, bfloat16 = true, float16 = true }

--- the engine's limit on shapes: the product of the sizes, zeros counted as 1, at most 2^62
local function within_limit(shape)
  local bound = 1.0
  for _, s in ipairs(shape) do bound = bound * math.max(s, 1) end
  return bound <= 2.0 ^ 62
end

-- ---- elementwise -----------------------------------------------------------------------------------------
local BINARY = {
  add = function(x, y) return x + y end,
  sub = function(x, y) return x - y end,
  mul = function(x, y) return x * y end,
  div = function(x, y) return x / y end,
}

--- H:check_binary(op, a, b): add/sub/mul/div of two tensors of one dtype (float64, float32, int64 for add,
-- sub, mul), broadcasting; exact (every one is an IEEE operation on the rounded inputs)
function H:check_binary(op, a, b)
  local tl = self.tl
  local what = string.format("%s(a, b)", op)
  local da, db = self:dense(a), self:dense(b)
  if not da or not db or da.dtype ~= db.dtype or not ELEMENTWISE[da.dtype] or (op == "div" and da.dtype == "int64") then
    pcall(tl[op], a, b)
    return
  end
  local shape = require("gen").broadcast(da.shape, db.shape)
  local valid = shape ~= nil and within_limit(shape)
  if valid and require("gen").numel(shape) > 1e6 then valid = nil end -- may be refused for its memory
  local result = self:expect(what, valid, function() return tl[op](a, b) end)
  if not result or not valid then return end
  local want, f, n = { shape = shape, dtype = da.dtype, v = {} }, BINARY[op], #shape
  if da.dtype == "int64" then
    for _, v in ipairs(da.v) do if math.abs(v) > (1 << 30) then return end end
    for _, v in ipairs(db.v) do if math.abs(v) > (1 << 30) then return end end
  end
  each_index(shape, function(idx) want.v[#want.v + 1] = round_to(f(at(da, idx, n), at(db, idx, n)), da.dtype) end)
  -- below float32's normal range (2^-126) a bfloat16 result computed in float32 is rounded twice: allow that
  local tiny = da.dtype == "bfloat16" and 2.0 ^ -120 or 0
  self:compare(what, result, want, function(i) return math.abs(want.v[i]) < tiny and tiny or 0 end)
end

--- H:check_scalar(op, a, x): a float64 tensor op a Lua number, on either side (x first when swap)
function H:check_scalar(op, a, x, swap)
  local tl = self.tl
  local da = self:dense(a)
  if not da or da.dtype ~= "float64" then
    pcall(tl[op], swap and x or a, swap and a or x)
    return
  end
  local what = string.format("%s(%s)", op, swap and "number, a" or "a, number")
  local result = self:expect(what, true, function() return tl[op](swap and x or a, swap and a or x) end)
  if not result then return end
  local f, want = BINARY[op], { shape = da.shape, dtype = "float64", v = {} }
  for i, v in ipairs(da.v) do want.v[i] = swap and f(x, v) or f(v, x) end
  self:compare(what, result, want, 0)
end

-- ---- reductions ----------------------------------------------------------------------------------------
--- H:check_sum(t, dim?, keepdim?) and H:check_mean: float64/float32 within a rounding bound, int64 exactly
function H:check_reduce(op, t, dim, keepdim)
  local tl = self.tl
  local d = self:dense(t)
  local what = string.format("%s(t%s)", op, dim and (", " .. dim) or "")
  if not d or not MODELLED[d.dtype] or (op == "mean" and d.dtype == "int64") then
    pcall(function() return t[op](t, dim, keepdim) end)
    return
  end
  local nd = #d.shape
  local valid = dim == nil or (nd > 0 and dim >= -nd and dim <= nd and dim ~= 0)
  if nd == 0 and (dim == 1 or dim == -1) then valid = nil end -- a 0-dim tensor's dim 1: either answer
  local axis = (valid ~= false and dim and nd > 0) and (dim < 0 and dim + nd + 1 or dim) or nil
  local out_shape = {}
  if axis then
    for i = 1, nd do
      if i ~= axis then out_shape[#out_shape + 1] = d.shape[i] elseif keepdim then out_shape[#out_shape + 1] = 1 end
    end
  end
  -- a huge result (the sum over the empty dim of [0, 2^42]) may be refused for its memory: either answer
  local huge = require("gen").numel(out_shape) > 1e6
  if valid and huge then valid = nil end
  local result = self:expect(what, valid, function() return t[op](t, dim, keepdim) end)
  if not result or valid == false or huge then return end
  local out_strides = strides(out_shape)
  local sums, mags, counts, element = {}, {}, {}, 0
  each_index(d.shape, function(idx)
    element = element + 1
    local o, od = 0, 0
    if axis then
      for i = 1, nd do
        if i ~= axis or keepdim then
          od = od + 1
          if i ~= axis then o = o + idx[i] * out_strides[od] end
        end
      end
    end
    local v = d.v[element]
    sums[o + 1] = (sums[o + 1] or 0) + v
    mags[o + 1] = (mags[o + 1] or 0) + math.abs(v)
    counts[o + 1] = (counts[o + 1] or 0) + 1
  end)
  local _, n_out = strides(out_shape)
  local want, tols = { shape = out_shape, dtype = d.dtype, v = {} }, {}
  local eps = d.dtype == "float32" and 1e-5 or 1e-12
  for i = 1, n_out do
    local s, m, c = sums[i] or (d.dtype == "int64" and 0 or 0.0), mags[i] or 0, counts[i] or 0
    if op == "mean" then
      want.v[i] = c > 0 and s / c or 0 / 0
      m = c > 0 and m / c or 0
    else
      want.v[i] = s
    end
    tols[i] = d.dtype == "int64" and 0 or eps * m + 1e-300
  end
  self:compare(what, result, want, function(i) return tols[i] end)
end

-- ---- matmul --------------------------------------------------------------------------------------------
--- H:check_matmul(a, b): float64/float32 1-D and 2-D operands, and 3-D with a matching or 2-D other
function H:check_matmul(a, b)
  local tl = self.tl
  local da, db = self:dense(a), self:dense(b)
  if not da or not db or da.dtype ~= db.dtype or (da.dtype ~= "float64" and da.dtype ~= "float32")
      or #da.shape == 0 or #db.shape == 0 or #da.shape > 3 or #db.shape > 3 then
    pcall(tl.matmul, a, b)
    return
  end
  -- as batch x n x k times batch x k x m, remembering which dims to drop
  local function as3(d, is_left)
    local s = d.shape
    if #s == 1 then return is_left and { 1, 1, s[1] } or { 1, s[1], 1 } end
    if #s == 2 then return { 1, s[1], s[2] } end
    return { s[1], s[2], s[3] }
  end
  local sa, sb = as3(da, true), as3(db, false)
  local batch = math.max(sa[1], sb[1])
  local valid = sa[3] == sb[2] and (sa[1] == sb[1] or sa[1] == 1 or sb[1] == 1)
      and not (#da.shape == 3 and #db.shape == 3 and sa[1] ~= sb[1])
  local result = self:expect("matmul(a, b)", valid, function() return tl.matmul(a, b) end)
  if not result or not valid then return end
  local n, k, m = sa[2], sa[3], sb[3]
  local shape = {}
  if #da.shape == 3 or #db.shape == 3 then shape[#shape + 1] = batch end
  if #da.shape >= 2 then shape[#shape + 1] = n end
  if #db.shape >= 2 then shape[#shape + 1] = m end
  local want, tols = { shape = shape, dtype = da.dtype, v = {} }, {}
  local eps = da.dtype == "float32" and 1e-5 or 1e-12
  for bi = 0, batch - 1 do
    local ba, bb = sa[1] == 1 and 0 or bi, sb[1] == 1 and 0 or bi
    for i = 0, n - 1 do
      for j = 0, m - 1 do
        local s, mag = 0.0, 0.0
        for p = 0, k - 1 do
          local x = da.v[ba * n * k + i * k + p + 1]
          local y = db.v[bb * k * m + p * m + j + 1]
          s, mag = s + x * y, mag + math.abs(x * y)
        end
        -- a sum over infinities: BLAS's order and its products with zero decide inf or NaN
        want.v[#want.v + 1] = mag == math.huge and ANY_NONFINITE or s
        tols[#tols + 1] = eps * mag + 1e-300
      end
    end
  end
  self:compare("matmul(a, b)", result, want, function(i) return tols[i] end)
end

-- ---- views -----------------------------------------------------------------------------------------------
--- H:check_permute(t, dims): t:permute(dims):contiguous() holds t's values in the permuted order (exact)
function H:check_permute(t, dims)
  local d = self:dense(t)
  local what = "permute(t, {" .. table.concat(dims, ", ") .. "}):contiguous()"
  if not d then
    pcall(function() return t:permute(dims):contiguous() end)
    return
  end
  local nd, seen, valid = #d.shape, {}, #dims == #d.shape
  local axes = {}
  for i, a in ipairs(dims) do
    local w = a < 0 and a + nd + 1 or a
    if w < 1 or w > nd or seen[w] then valid = false end
    seen[w], axes[i] = true, w
  end
  local result = self:expect(what, valid, function() return t:permute(dims):contiguous() end)
  if not result or not valid then return end
  local shape = {}
  for i, a in ipairs(axes) do shape[i] = d.shape[a] end
  local s, want = strides(d.shape), { shape = shape, dtype = d.dtype, v = {} }
  each_index(shape, function(idx)
    local offset = 0
    for i, a in ipairs(axes) do offset = offset + idx[i] * s[a] end
    want.v[#want.v + 1] = d.v[offset + 1]
  end)
  self:compare(what, result, want, 0)
end

--- H:check_narrow(t, dim, start, length): the values of t:narrow(dim, start, length) (exact)
function H:check_narrow(t, dim, start, length)
  local d = self:dense(t)
  local what = string.format("narrow(t, %d, %d, %d)", dim, start, length)
  if not d then
    pcall(t.narrow, t, dim, start, length)
    return
  end
  local nd = #d.shape
  local axis = dim < 0 and dim + nd + 1 or dim
  local size = d.shape[axis]
  local first = start < 0 and size and start + size + 1 or start
  local valid = nd > 0 and axis >= 1 and axis <= nd and dim ~= 0 and length >= 0 and first >= 1
      and first - 1 <= size - length
  if nd > 0 and axis >= 1 and axis <= nd and length == 0 and first == size + 1 then valid = nil end
  local result = self:expect(what, valid, function() return t:narrow(dim, start, length) end)
  if not result or not valid then return end
  local shape = {}
  for i = 1, nd do shape[i] = d.shape[i] end
  shape[axis] = length
  local s, want = strides(d.shape), { shape = shape, dtype = d.dtype, v = {} }
  each_index(shape, function(idx)
    local offset = 0
    for i = 1, nd do offset = offset + (idx[i] + (i == axis and first - 1 or 0)) * s[i] end
    want.v[#want.v + 1] = d.v[offset + 1]
  end)
  self:compare(what, result, want, 0)
end

-- ---- softmax ---------------------------------------------------------------------------------------------
--- H:check_softmax(t, dim, log): float64 softmax/log_softmax along dim, within 1e-12 relative
function H:check_softmax(t, dim, log)
  local op = log and "log_softmax" or "softmax"
  local d = self:dense(t)
  local what = string.format("%s(t, %d)", op, dim)
  if not d or d.dtype ~= "float64" or #d.shape == 0 then
    pcall(t[op], t, dim)
    return
  end
  local nd = #d.shape
  local axis = dim < 0 and dim + nd + 1 or dim
  local valid = dim ~= 0 and axis >= 1 and axis <= nd
  local result = self:expect(what, valid, function() return t[op](t, dim) end)
  if not result or not valid then return end
  local s = strides(d.shape)
  local want = { shape = d.shape, dtype = "float64", v = {} }
  local line = {}
  each_index(d.shape, function(idx)
    if idx[axis] ~= 0 then return end
    local base = 0
    for i = 1, nd do base = base + idx[i] * s[i] end
    local max = -math.huge
    for j = 0, d.shape[axis] - 1 do
      line[j] = d.v[base + j * s[axis] + 1]
      if line[j] > max then max = line[j] end
    end
    local total = 0.0
    for j = 0, d.shape[axis] - 1 do total = total + math.exp(line[j] - max) end
    for j = 0, d.shape[axis] - 1 do
      local v = line[j] - max
      want.v[base + j * s[axis] + 1] = log and v - math.log(total) or math.exp(v) / total
    end
  end)
  self:compare(what, result, want, function(i) return 1e-12 * (math.abs(want.v[i]) + 1) end)
end

-- ---- in place --------------------------------------------------------------------------------------------
--- H:check_fill(t, value): after t:fill_(value) every element is value (float64, int64 exactly; float32
-- rounded); a failed fill_ is the driver's concern (the target must be unchanged)
function H:check_fill(t, value)
  local d = self:dense(t)
  local ok = pcall(t.fill_, t, value)
  if not ok or not d or not MODELLED[d.dtype] or type(value) ~= "number" then return end
  if d.dtype == "int64" and math.type(value) ~= "integer" then return end
  if d.dtype ~= "int64" and math.type(value) == "integer" and math.abs(value) > (1 << 53) then return end
  local want = { shape = d.shape, dtype = d.dtype, v = {} }
  for i = 1, #d.v do want.v[i] = round_to(value + 0.0, d.dtype) end
  if d.dtype == "int64" then for i = 1, #d.v do want.v[i] = value end end
  self:compare("fill_(t, value)", t, want, 0)
end

--- H:check_full(value, dtype): tl.full({2}, value, {dtype}) holds what a cast of the value gives. A number an
-- integer dtype cannot hold (NaN, infinite, or an integer part out of range) is an error naming the overflow,
-- as in PyTorch; the tensor cast of the same value saturates instead when it is floating (NaN gives 0) and
-- wraps modulo 2^32 from int64 to int32 (two's complement, as C and PyTorch narrow), which is checked too.
local integer_range = { int32 = { -2147483648, 2147483647 }, int64 = { math.mininteger, math.maxinteger } }
local function fits_integer(value, dtype)
  local range = integer_range[dtype]
  if not range then return true end
  if math.type(value) == "integer" then return value >= range[1] and value <= range[2] end
  if value ~= value then return false end
  if dtype == "int64" then return value >= -2 ^ 63 and value < 2 ^ 63 end
  return value > range[1] - 1 and value < range[2] + 1
end
function H:check_full(value, dtype)
  local tl = self.tl
  local ok, full = pcall(tl.full, { 2 }, value, { dtype = dtype })
  local source = math.type(value) == "integer" and "int64" or "float64"
  local ok2, cast = pcall(function() return tl.tensor({ value, value }, { dtype = source }):to(dtype) end)
  if not ok2 then
    return self.report(string.format("tensor(%s, %s):to(%s) raised: %s", show(value), source, dtype, tostring(cast)))
  end
  if not fits_integer(value, dtype) then
    if ok then
      return self.report(string.format("full(%s, %s) stored a value the dtype cannot hold", show(value), dtype))
    end
    if not tostring(full):find("cannot be converted to " .. dtype .. " without overflow", 1, true) then
      return self.report(string.format("full(%s, %s) raised an unexpected error: %s", show(value), dtype, tostring(full)))
    end
    local range = integer_range[dtype]
    local want
    if math.type(value) == "integer" then -- int64 -> int32 narrows modulo 2^32
      want = value & 0xFFFFFFFF
      if want >= 0x80000000 then want = want - 0x100000000 end
    else
      want = value ~= value and 0 or value < 0 and range[1] or range[2]
    end
    local got = cast[1]
    if got ~= want then
      return self.report(string.format("tensor(%s, %s):to(%s) gave %s, expected %s", show(value), source,
        dtype, show(got), show(want)))
    end
    return
  end
  if not ok then
    return self.report(string.format("full(%s, %s) raised for a value the dtype can hold: %s", show(value), dtype,
      tostring(full)))
  end
  local want = self:dense(cast)
  self:compare(string.format("full(%s, %s) against tensor(%s, %s):to(%s)", show(value), dtype, show(value), source,
    dtype), full, want, 0)
end

--- H:check_copy(t, src): t:copy_(src) of one dtype writes src's values, broadcast, as they were before the
-- call (src may overlap t: the result must still be the old values of src)
function H:check_copy(t, src)
  local d, ds = self:dense(t), self:dense(src)
  local ok = pcall(t.copy_, t, src)
  if not ok or not d or not ds or d.dtype ~= ds.dtype then return end
  local shape = require("gen").broadcast(d.shape, ds.shape)
  if not shape or not same_shape(shape, d.shape) then
    return self.report(string.format("copy_: succeeded for a source of shape %s into %s", shape_str(ds.shape),
      shape_str(d.shape)))
  end
  local want, n = { shape = d.shape, dtype = d.dtype, v = {} }, #d.shape
  each_index(d.shape, function(idx) want.v[#want.v + 1] = at(ds, idx, n) end)
  self:compare("copy_(t, src)", t, want, 0)
end

-- ---- checkpoints -----------------------------------------------------------------------------------------
--- H:check_save_load(tensors, metadata?): tl.save then tl.load gives the same shapes, dtypes and bits
function H:check_save_load(tensors, metadata)
  local tl = self.tl
  local path = self.tmpdir .. "/roundtrip.safetensors"
  local wants, names = {}, {}
  for name, t in pairs(tensors) do
    local d = self:dense(t)
    if not d then return pcall(tl.save, path, tensors, metadata) end
    wants[name] = d
    names[#names + 1] = name
  end
  local ok, err = pcall(tl.save, path, tensors, metadata)
  if not ok then
    local text = require("checks").strip_position(tostring(err))
    if not text:find("^save:") then self.report("save: raised an unexpected error: " .. tostring(err)) end
    return
  end
  local ok_load, loaded, meta = pcall(tl.load, path)
  if not ok_load then return self.report("load after save: raised " .. tostring(loaded)) end
  if type(loaded) ~= "table" then return self.report("load after save: returned a " .. type(loaded)) end
  table.sort(names)
  for _, name in ipairs(names) do
    local got = loaded[name]
    if not tl.is_tensor(got) then return self.report(string.format("load after save: no tensor %q", name)) end
    self:compare(string.format("load after save: tensor %q", name), got, wants[name], 0)
  end
  for name in pairs(loaded) do
    if not wants[name] then return self.report(string.format("load after save: an extra tensor %q", name)) end
  end
  for key, value in pairs(metadata or {}) do
    if type(meta) ~= "table" or meta[key] ~= tostring(value) then
      return self.report(string.format("load after save: metadata %q is %s, saved %s", key,
        tostring(type(meta) == "table" and meta[key]), tostring(value)))
    end
  end
end

-- ---- files (for statements that make odd inputs for the loaders) -------------------------------------------
local bytes = require("helpers.bytes")
local slurp = bytes.read_file

--- H:write(path, bytes)
function H:write(path, data) bytes.write_file(path, data) end

--- H:truncate(src, dst, n): dst holds the first n bytes of src (an empty file when src is missing)
function H:truncate(src, dst, n) self:write(dst, (slurp(src) or ""):sub(1, n)) end

--- H:poke(src, dst, offset, byte): dst is src with the byte at offset (0-based) replaced, when it exists
function H:poke(src, dst, offset, byte)
  local data = slurp(src) or ""
  if offset < #data then data = data:sub(1, offset) .. string.char(byte) .. data:sub(offset + 2) end
  self:write(dst, data)
end

--- H:first(t): the value of t's smallest key (a deterministic pick: the order of pairs() is not)
function H:first(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return t[keys[1]]
end

-- the files statements make in the temporary folder
H.FILES = { "f1.safetensors", "f2.safetensors", "f3.safetensors", "roundtrip.safetensors", "bad", "x.idx", "fifo" }

--- H:clear_files(): removes them (each episode starts without files)
function H:clear_files()
  for _, name in ipairs(H.FILES) do os.remove(self.tmpdir .. "/" .. name) end
end

--- H:mkfifo(path): a named pipe with no writer (a loader must not block on it)
function H:mkfifo(path)
  os.remove(path)
  assert(os.execute("mkfifo '" .. path:gsub("'", "'\\''") .. "'"), "mkfifo failed")
end

-- ---- autograd --------------------------------------------------------------------------------------------
--- H:check_grad_mul(a, b): for float64 copies x, y of a and b, (x * y):sum():backward() gives x.grad = y summed
-- over broadcast dims (checked when a and b have one shape: x.grad = y, y.grad = x exactly)
function H:check_grad_mul(a, b)
  local tl = self.tl
  local da, db = self:dense(a), self:dense(b)
  if not da or not db or da.dtype ~= "float64" or db.dtype ~= "float64" or not same_shape(da.shape, db.shape) then
    return
  end
  local x = self:expect("detach/clone/requires_grad_", true, function()
    return a:detach():clone():requires_grad_()
  end)
  local y = x and b:detach():clone():requires_grad_()
  if not y then return end
  local ok, err = pcall(function() (x * y):sum():backward() end)
  if not ok then return self.report("(x * y):sum():backward() raised: " .. tostring(err)) end
  self:compare("grad of x in (x * y):sum()", x.grad, { shape = db.shape, dtype = "float64", v = db.v }, 0)
  self:compare("grad of y in (x * y):sum()", y.grad, { shape = da.shape, dtype = "float64", v = da.v }, 0)
end

--- H:check_gradcheck(fn, x): gradcheck of fn at the float64 input x holds (fn differentiable near x)
function H:check_gradcheck(fn, x)
  local ok, passed, message = pcall(self.tl.autograd.gradcheck, fn, { x }, { raise = false })
  if not ok then
    local bad = self.check_message and self.check_message(passed)
    if bad then self.report("gradcheck: " .. bad) end
    return
  end
  if not passed then self.report(tostring(message)) end
end

return H
