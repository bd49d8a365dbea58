-- bfloat16 / float16 conversion: round to nearest, ties to even, overflow to
-- Inf, subnormals, NaN/Inf/-0 kept. Hand-worked cases (each with its working)
-- and sweeps of random float32 values against spec/helpers/reference.lua.
local tl = require("tlua")
local ref = require("helpers.reference")

local inf, nan = math.huge, 0 / 0

local function is_neg_zero(x) return x == 0 and 1 / x < 0 end

-- converts xs (float32-exact Lua numbers) to dtype by three roads and returns
-- the three results as Lua arrays: float32 tensor cast, tl.tensor with the
-- dtype, float64 tensor cast.
local function convert(xs, dtype)
  local f32 = tl.tensor(xs, { dtype = "float32" }):to(dtype)
  local direct = tl.tensor(xs, { dtype = dtype })
  local f64 = tl.tensor(xs, { dtype = "float64" }):to(dtype)
  return f32:totable(), direct:totable(), f64:totable()
end

local function check_cases(cases, dtype)
  local xs, expected = {}, {}
  for i, c in ipairs(cases) do
    xs[i] = c[1]
    expected[i] = c[2]
    -- the hand-worked value must agree with the Lua reference too
    local r = dtype == "bfloat16" and ref.round_bf16(c[1]) or ref.round_f16(c[1])
    assert(r == c[2] or (r ~= r and c[2] ~= c[2]), ("reference disagrees on case %d (%s)"):format(i, c[3]))
  end
  local roads = table.pack(convert(xs, dtype))
  local names = { "float32 tensor :to", "tl.tensor(data, {dtype})", "float64 tensor :to" }
  for r = 1, 3 do
    local got = roads[r]
    for i, c in ipairs(cases) do
      local e, g = expected[i], got[i]
      local ok = (e == g and is_neg_zero(e) == is_neg_zero(g)) or (e ~= e and g ~= g)
      if not ok then
        error(("%s via %s, case %d (%s): input %.17g, expected %.17g, got %.17g"):format(
          dtype, names[r], i, c[3], c[1], e, g), 2)
      end
    end
  end
end

describe("bfloat16 rounding (hand-worked)", function()
  -- bf16: 1 sign, 8 exponent, 7 fraction bits; ulp(1) = 2^-7; max finite
  -- (2 - 2^-7) * 2^127; min normal 2^-126; min subnormal 2^-133.
  it("rounds to nearest with ties to even, both ways", function()
    check_cases({
      { 1.0, 1.0, "exact" },
      { 1 + 2 ^ -8, 1.0, "halfway between 1 and 1+2^-7: even is 1 (fraction 0)" },
      { 1 + 3 * 2 ^ -8, 1 + 2 ^ -6, "halfway between 1+2^-7 (odd) and 1+2^-6 (even): up" },
      { 1 + 2 ^ -8 + 2 ^ -16, 1 + 2 ^ -7, "just above halfway: up" },
      { 1 + 2 ^ -9, 1.0, "below halfway: down" },
      { 257, 256, "ulp 2 in [256, 512): 257 is a tie, 256 even" },
      { 259, 260, "259 is a tie between 258 (odd) and 260 (even)" },
      { -259, -260, "negative tie, same rule on the magnitude" },
      { -(1 + 2 ^ -8), -1.0, "negative tie down" },
      { 0.1, 0.10009765625, "0.1 = 1.1001100|11001..b * 2^-4: above half, up to 1.1001101b * 2^-4" },
      { ref.round_f32(math.pi), 3.140625, "pi = 1.1001001|00001..b * 2: below half, 1.1001001b * 2" },
    }, "bfloat16")
  end)

  it("overflows to Inf at and beyond the halfway point above the largest finite", function()
    local max = (2 - 2 ^ -7) * 2 ^ 127 -- 3.3895313892515355e38
    check_cases({
      { max, max, "largest finite kept" },
      { (2 - 2 ^ -8 - 2 ^ -16) * 2 ^ 127, max, "below the halfway point: down to max" },
      { (2 - 2 ^ -8) * 2 ^ 127, inf, "halfway between max (odd fraction 127) and 2^128: up, Inf" },
      { (2 - 2 ^ -23) * 2 ^ 127, inf, "float32 max: Inf" },
      { -(2 - 2 ^ -23) * 2 ^ 127, -inf, "-float32 max: -Inf" },
    }, "bfloat16")
  end)

  it("handles subnormals", function()
    check_cases({
      { 2 ^ -126, 2 ^ -126, "min normal kept" },
      { 2 ^ -133, 2 ^ -133, "min subnormal kept" },
      { 5 * 2 ^ -133, 5 * 2 ^ -133, "a subnormal kept" },
      { 2 ^ -134, 0.0, "half the min subnormal: tie to even 0" },
      { 3 * 2 ^ -134, 2 ^ -132, "tie between 2^-133 (odd) and 2^-132 (even): up" },
      { 2 ^ -134 + 2 ^ -140, 2 ^ -133, "just above half the min subnormal: up" },
      { -2 ^ -134, -0.0, "negative tie to zero keeps the sign" },
    }, "bfloat16")
  end)

end)

describe("float16 rounding (hand-worked)", function()
  -- f16: 1 sign, 5 exponent, 10 fraction bits; ulp(1) = 2^-10; max finite
  -- 65504 = (2 - 2^-10) * 2^15; min normal 2^-14; min subnormal 2^-24.
  it("rounds to nearest with ties to even, both ways", function()
    check_cases({
      { 1 + 2 ^ -11, 1.0, "halfway between 1 and 1+2^-10: even is 1" },
      { 1 + 3 * 2 ^ -11, 1 + 2 ^ -9, "halfway between 1+2^-10 (odd) and 1+2^-9 (even): up" },
      { 1 + 2 ^ -11 + 2 ^ -20, 1 + 2 ^ -10, "just above halfway: up" },
      { 2049, 2048, "ulp 2 in [2048, 4096): 2049 ties to 2048 (even)" },
      { 2051, 2052, "2051 ties between 2050 (odd) and 2052 (even)" },
      { 2050, 2050, "exact" },
      { -2051, -2052, "negative tie" },
      { 0.1, 0.0999755859375, "0.1 = 1.1001100110|0110..b * 2^-4: below half, down" },
      { ref.round_f32(math.pi), 3.140625, "pi = 1.1001001000|0111..b * 2: below half" },
    }, "float16")
  end)

  it("overflows to Inf at 65520", function()
    check_cases({
      { 65504, 65504, "largest finite kept" },
      { 65519, 65504, "below the halfway point 65520: down" },
      { 65520, inf, "halfway between 65504 (odd fraction 1023) and 65536: up, Inf" },
      { -65520, -inf, "negative overflow" },
      { 65536, inf, "2^16: Inf" },
      { 1e5, inf, "far beyond: Inf" },
    }, "float16")
  end)

  it("handles subnormals: 2^-25 rounds to 0", function()
    check_cases({
      { 2 ^ -14, 2 ^ -14, "min normal kept" },
      { 2 ^ -14 - 2 ^ -24, 2 ^ -14 - 2 ^ -24, "max subnormal kept" },
      { 2 ^ -24, 2 ^ -24, "min subnormal kept" },
      { 2 ^ -20, 2 ^ -20, "a subnormal kept" },
      { 2 ^ -25, 0.0, "half the min subnormal: tie to even 0" },
      { 3 * 2 ^ -25, 2 ^ -23, "tie between 2^-24 (odd) and 2^-23 (even): up" },
      { 5 * 2 ^ -26, 2 ^ -24, "1.25 * 2^-24: nearest is 2^-24" },
      { 2 ^ -25 + 2 ^ -35, 2 ^ -24, "just above half the min subnormal: up" },
      { 2 ^ -30, 0.0, "far below: 0" },
      { -2 ^ -26, -0.0, "negative underflow keeps the sign" },
    }, "float16")
  end)

end)

describe("special values", function()
  for _, dtype in ipairs({ "bfloat16", "float16" }) do
    it(dtype .. " keeps NaN, +-Inf and both zeros", function()
      check_cases({
        { nan, nan, "NaN" },
        { inf, inf, "+Inf" },
        { -inf, -inf, "-Inf" },
        { -0.0, -0.0, "-0" },
        { 0.0, 0.0, "+0" },
      }, dtype)
    end)
  end
end)

describe("conversion sweeps against the Lua reference", function()
  local function sweep(xs)
    local t = tl.tensor(xs, { dtype = "float32" })
    -- the inputs are float32-exact, so the tensor holds them unchanged
    assert.tensor_equal(xs, t)
    for _, dt in ipairs({ "bfloat16", "float16" }) do
      local expected = {}
      for i, x in ipairs(xs) do
        expected[i] = dt == "bfloat16" and ref.round_bf16(x) or ref.round_f16(x)
      end
      local got = t:to(dt)
      assert.equal(dt, got.dtype)
      assert.tensor_equal(expected, got)
      -- widening back is exact
      assert.tensor_equal(expected, got:to("float32"))
      assert.tensor_equal(expected, got:to("float64"))
      -- and bf16 <-> f16 goes through the value: f16(bf16(x)) rounds the bf16 value
      local other = dt == "bfloat16" and "float16" or "bfloat16"
      local twice = {}
      for i, v in ipairs(expected) do
        twice[i] = other == "bfloat16" and ref.round_bf16(v) or ref.round_f16(v)
      end
      assert.tensor_equal(twice, got:to(other))
    end
  end

  it("random float32 bit patterns (every exponent, NaN and Inf included)", function()
    local rng = ref.rng(2024)
    local xs = {}
    for i = 1, 20000 do xs[i] = ref.f32_from_bits(rng:bits32()) end
    sweep(xs)
  end)

  it("random float32 values in and around the float16 range", function()
    local rng = ref.rng(7)
    local xs = {}
    for i = 1, 20000 do
      local sign = rng:int(0, 1) << 31
      local exp = rng:int(-27, 16) + 127
      local frac = rng:int(0, (1 << 23) - 1)
      xs[i] = ref.f32_from_bits(sign | (exp << 23) | frac)
    end
    sweep(xs)
  end)

  it("exact ties of both formats", function()
    local rng = ref.rng(99)
    local xs = {}
    for _ = 1, 5000 do -- bf16 ties: the 16 dropped bits are exactly 1000...0
      local bits = (rng:bits32() & 0xFFFF0000) | 0x8000
      if ((bits >> 23) & 0xFF) ~= 0xFF then xs[#xs + 1] = ref.f32_from_bits(bits) end
    end
    for _ = 1, 5000 do -- f16 normal ties: the 13 dropped bits are exactly 1 0000 0000 0000
      local sign = rng:int(0, 1) << 31
      local exp = rng:int(-14, 15) + 127
      local frac = (rng:int(0, (1 << 10) - 1) << 13) | 0x1000
      xs[#xs + 1] = ref.f32_from_bits(sign | (exp << 23) | frac)
    end
    for _ = 1, 2000 do -- f16 subnormal ties: odd multiples of 2^-25 below 2^-14
      local k = 2 * rng:int(0, 1023) + 1
      xs[#xs + 1] = (rng:int(0, 1) == 1 and -1 or 1) * k * 2 ^ -25
    end
    sweep(xs)
  end)
end)

describe("values written into bf16/f16 tensors round the same way", function()
  it("fill_, full and t[i] = v round to nearest even", function()
    local v = 1 + 3 * 2 ^ -8 -- bf16: up to 1 + 2^-6 (see above)
    local t = tl.zeros(3, { dtype = "bfloat16" })
    t:fill_(v)
    assert.tensor_equal({ 1 + 2 ^ -6, 1 + 2 ^ -6, 1 + 2 ^ -6 }, t)
    t[2] = 257
    assert.equal(256, t[2])
    local h = tl.zeros(2, { dtype = "float16" })
    h:copy_(tl.tensor({ 2051.0, 2049.0 })) -- float32 source, ties to even in f16
    assert.tensor_equal({ 2052, 2048 }, h)
    assert.tensor_equal({ inf }, tl.full({ 1 }, 65520, { dtype = "float16" }))
  end)
end)
