-- Lua references of the kernel sweep (spec/kernel_sweep_spec.lua) that many ops share, independent
-- of the engine: integer arithmetic with the engine's wrapping, casts, the Philox4x32-10 generator
-- of the random kernels (and of dropout's and attention's masks), the softmax gradients. A hand-written
-- family's references (conv2d, pooling, batch_norm, the optimizer steps, ...) are beside its cases, in
-- spec/helpers/<family>_cases.lua.
local ref = require("helpers.reference")

local M = {}

-- ---------------------------------------------------------------------------
-- Integers: int64 is Lua's own wrapping arithmetic; int32 keeps the low 32 bits.
function M.wrap32(v) return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000 end

function M.wrap(dtype, v)
  if dtype == "int32" then return M.wrap32(v) end
  return v
end

-- a ^ b as the integer kernels define it: wrapping; for b < 0 the truncated 1 / a^-b
-- (1 for a = 1, +-1 for a = -1, else 0)
function M.ipow(a, b)
  if b < 0 then
    if a == 1 then return 1 end
    if a == -1 then return (b % 2 == 1) and -1 or 1 end
    return 0
  end
  local r = 1
  for _ = 1, b do r = r * a end
  return r
end

-- ---------------------------------------------------------------------------
-- Casts (engine/kernels/cpu/copy.c): bool = value ~= 0; float -> int truncates toward zero,
-- NaN -> 0, out of range saturates; int64 -> int32 wraps; to a float dtype rounds once.
local INT_RANGE = {
  int32 = { -0x80000000, 0x7FFFFFFF },
  int64 = { math.mininteger, math.maxinteger },
}

function M.cast(v, to)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if to == "bool" then return v ~= 0 end
  if to == "float64" then return v + 0.0 end
  if to == "float32" or to == "bfloat16" or to == "float16" then return ref.round_to(v + 0.0, to) end
  local lo, hi = INT_RANGE[to][1], INT_RANGE[to][2]
  if math.type(v) == "integer" then return M.wrap(to, v) end
  if v ~= v then return 0 end
  if v >= -(lo + 0.0) then return hi end -- 2^31 or 2^63 and beyond
  if v <= lo + 0.0 then return lo end
  local t = v < 0 and math.ceil(v) or math.floor(v)
  return math.tointeger(t)
end

-- ---------------------------------------------------------------------------
-- Philox4x32-10 (Salmon et al., SC 2011), as engine/kernels/cpu/random.c states it: block c of
-- a stream is philox({c low, c high, 0, 0}, {seed low, seed high}). 32x32-bit products fit
-- in a Lua integer (they wrap modulo 2^64, the bits are the same); >> is a logical shift.
local M0, M1, W0, W1, LOW = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF

function M.philox(counter, seed)
  local c0, c1, c2, c3 = counter & LOW, (counter >> 32) & LOW, 0, 0
  local k0, k1 = seed & LOW, (seed >> 32) & LOW
  for round = 0, 9 do
    if round > 0 then k0, k1 = (k0 + W0) & LOW, (k1 + W1) & LOW end
    local p0, p1 = M0 * c0, M1 * c2
    c0, c1, c2, c3 = ((p1 >> 32) ~ c1 ~ k0) & LOW, p1 & LOW, ((p0 >> 32) ~ c3 ~ k1) & LOW, p0 & LOW
  end
  return { c0, c1, c2, c3 }
end

local function word64(w, half) return (w[2 * half + 2] << 32) | w[2 * half + 1] end
local function uniform_bits(w, bits) return (w >> (32 - bits)) * 2.0 ^ -bits end
local function uniform53(u) return (u >> 11) * 2.0 ^ -53 end
-- u mod r for u read as unsigned 64 bits, 0 < r < 2^62
local function umod(u, r)
  if u >= 0 then return u % r end
  return (((u >> 1) % r) * 2 + (u & 1)) % r
end
local SIGNIFICAND = { bfloat16 = 8, float16 = 11, float32 = 24 }

-- the stored value of a float64 draw in dtype (random.c's store: through float32 for 16 bits)
local function store(v, dtype)
  if dtype == "float64" then return v end
  return ref.round_to(ref.round_f32(v), dtype)
end

-- the first n values of op ("rand", "randn", "randint" with low, high) in dtype, drawn from
-- the stream (seed, counter); returns them and the next unused counter
function M.random(op, dtype, n, seed, counter, low, high)
  local out = {}
  local per = (op == "randint" or dtype == "float64") and 2 or 4
  local blocks = (n + per - 1) // per
  for b = 0, blocks - 1 do
    local w = M.philox(counter + b, seed)
    local v = {}
    if op == "rand" then
      for j = 0, per - 1 do
        v[j + 1] = dtype == "float64" and uniform53(word64(w, j)) or uniform_bits(w[j + 1], SIGNIFICAND[dtype])
      end
    elseif op == "randn" then
      local function box_muller(u1, u2)
        local r, theta = math.sqrt(-2.0 * math.log(u1)), 6.283185307179586 * u2
        return r * math.cos(theta), r * math.sin(theta)
      end
      if dtype == "float64" then
        v[1], v[2] = box_muller(1.0 - uniform53(word64(w, 0)), uniform53(word64(w, 1)))
      else
        v[1], v[2] = box_muller(1.0 - uniform_bits(w[1], 24), uniform_bits(w[2], 24))
        v[3], v[4] = box_muller(1.0 - uniform_bits(w[3], 24), uniform_bits(w[4], 24))
      end
    else
      for j = 0, 1 do v[j + 1] = low + umod(word64(w, j), high - low) end
    end
    for j = 1, per do
      if #out < n then
        local x = v[j]
        if math.type(x) == "integer" then
          out[#out + 1] = (dtype == "int32" or dtype == "int64") and x or x + 0.0
        else
          out[#out + 1] = store(x, dtype)
        end
      end
    end
  end
  return out, counter + blocks
end

-- ---------------------------------------------------------------------------
-- the gradient of softmax (log_softmax when log) along a 1-based dim from the forward's output
-- y and the output's gradient g (nested tables of one shape): y * (g - sum(g * y)) and
-- g - exp(y) * sum(g), the sums along dim
function M.softmax_backward(y, g, dim, log)
  local fy, shape = ref.flatten(y)
  local fg = ref.flatten(g)
  local out = {}
  for _, at in ipairs(ref.lines(shape, dim)) do
    local s = 0.0
    for _, p in ipairs(at) do s = s + (log and fg[p] or fg[p] * fy[p]) end
    for _, p in ipairs(at) do
      if log then out[p] = fg[p] - math.exp(fy[p]) * s else out[p] = fy[p] * (fg[p] - s) end
    end
  end
  return ref.unflatten(out, shape)
end

return M
