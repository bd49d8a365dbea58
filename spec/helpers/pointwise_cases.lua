-- One line per pointwise op (families "pointwise", "pointwise_binary" and
-- "pointwise_ternary" in the op table): the range its inputs are drawn from (lo, hi; for
-- an op of several inputs a range per input, ranges = {{lo, hi}, ...}), an independent
-- reference in Lua (float64; booleans for a bool_out row; Lua integers for a bits row)
-- and, for an op with a fused backward kernel (<op>_backward), its derivative. An op
-- whose row names numbers (tl.ops()'s numbers: leaky_relu's negative_slope) has their
-- defaults in `numbers` (a list, or a function of the dtype) and another set in `other`;
-- the reference and the derivative take them after the inputs. `ints` is the integer
-- range of an int, bool_out or bits row's integer inputs (default: lo, hi rounded in),
-- `specials` values every value test adds (NaN, infinities). The specs that walk the op
-- table (pointwise_spec: values in every dtype, the dtypes rule, numbers, strided inputs,
-- errors; gradcheck_spec: finite differences; kernel_sweep_spec: every kernel against
-- these Lua references, on the CPU and CUDA) take their cases from here and fail for a
-- pointwise op without a line.
local ref = require("helpers.reference")

-- the standard normal density, for gelu's derivative
local function phi(x) return math.exp(-x * x / 2) / math.sqrt(2 * math.pi) end
-- gelu's tanh approximation (PyTorch's approximate = "tanh"): its inner tanh
local K_GELU = math.sqrt(2 / math.pi)
local function gelu_tanh_inner(x) return ref.tanh(K_GELU * (x + 0.044715 * x ^ 3)) end

local NAN, INF = 0 / 0, math.huge
local function sign(x) return x > 0 and 1 or x < 0 and -1 or 0 end
local function trunc(x) return x >= 0 and math.floor(x) or math.ceil(x) end
-- x rounded half to even
local function round_even(x)
  local f = math.floor(x)
  local d = x - f
  if d ~= 0.5 then return d < 0.5 and f or f + 1 end
  return f % 2 == 0 and f or f + 1
end
-- the inverse of erf by bisection on helpers/reference's series
local function erfinv(y)
  if y <= -1 or y >= 1 then return y == 1 and INF or y == -1 and -INF or NAN end
  local lo, hi = -6.0, 6.0
  for _ = 1, 200 do
    local mid = (lo + hi) / 2
    if ref.erf(mid) < y then lo = mid else hi = mid end
    if hi - lo <= 1e-16 * math.max(1, math.abs(mid)) then break end
  end
  return (lo + hi) / 2
end
local function softplus1(x) return x > 20 and x or math.log(1 + math.exp(x)) end
local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
-- the largest finite value of each floating dtype (nan_to_num's default posinf)
local LARGEST = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308,
                  bfloat16 = 3.3895313892515355e38, float16 = 65504.0 }
local function truthy(x) return x ~= 0 and x ~= false end
local function sign_bit(x) return string.pack(">d", x):byte(1) >= 128 end
local PREDICATE_SPECIALS = { NAN, INF, -INF, -0.0, 0.0 }

return {
  exp = { lo = -5, hi = 5, reference = math.exp },
  log = { lo = 0.01, hi = 10, reference = math.log },
  sqrt = { lo = 0.01, hi = 10, reference = math.sqrt },
  tanh = { lo = -6, hi = 6, reference = ref.tanh, derivative = function(x) return 1 - ref.tanh(x) ^ 2 end },
  sigmoid = {
    lo = -12, hi = 12, reference = ref.sigmoid,
    derivative = function(x) local s = ref.sigmoid(x) return s * (1 - s) end,
  },
  gelu = {
    lo = -6, hi = 6, reference = ref.gelu,
    derivative = function(x) return 0.5 * ref.erfc(-x / math.sqrt(2)) + x * phi(x) end,
  },
  gelu_tanh = {
    lo = -6, hi = 6, reference = function(x) return 0.5 * x * (1 + gelu_tanh_inner(x)) end,
    derivative = function(x)
      local t = gelu_tanh_inner(x)
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K_GELU * (1 + 3 * 0.044715 * x * x)
    end,
  },
  silu = {
    lo = -12, hi = 12, reference = function(x) return x * ref.sigmoid(x) end,
    derivative = function(x) local s = ref.sigmoid(x) return s + x * s * (1 - s) end,
  },
  sin = { lo = -7, hi = 7, reference = math.sin },
  cos = { lo = -7, hi = 7, reference = math.cos },
  erf = {
    lo = -4, hi = 4, reference = ref.erf,
    derivative = function(x) return 2 / math.sqrt(math.pi) * math.exp(-x * x) end,
  },
  log1p = { lo = -0.9, hi = 5, reference = function(x) return math.log(1 + x) end,
    derivative = function(x) return 1 / (1 + x) end },
  expm1 = { lo = -5, hi = 5, reference = function(x) return math.exp(x) - 1 end,
    derivative = math.exp },
  log2 = { lo = 0.05, hi = 10, reference = function(x) return math.log(x, 2) end,
    derivative = function(x) return 1 / (x * math.log(2)) end },
  log10 = { lo = 0.05, hi = 10, reference = function(x) return math.log(x, 10) end,
    derivative = function(x) return 1 / (x * math.log(10)) end },
  exp2 = { lo = -6, hi = 6, reference = function(x) return 2 ^ x end,
    derivative = function(x) return 2 ^ x * math.log(2) end },
  rsqrt = { lo = 0.2, hi = 5, reference = function(x) return 1 / math.sqrt(x) end,
    derivative = function(x) return -0.5 * x ^ -1.5 end },
  reciprocal = { lo = 0.2, hi = 5, reference = function(x) return 1 / x end,
    derivative = function(x) return -1 / (x * x) end },
  erfc = { lo = -3, hi = 3, reference = function(x) return 1 - ref.erf(x) end,
    derivative = function(x) return -2 / math.sqrt(math.pi) * math.exp(-x * x) end },
  sinh = { lo = -4, hi = 4, reference = function(x) return (math.exp(x) - math.exp(-x)) / 2 end,
    derivative = function(x) return (math.exp(x) + math.exp(-x)) / 2 end },
  cosh = { lo = -4, hi = 4, reference = function(x) return (math.exp(x) + math.exp(-x)) / 2 end,
    derivative = function(x) return (math.exp(x) - math.exp(-x)) / 2 end },
  tan = { lo = -1.2, hi = 1.2, reference = math.tan,
    derivative = function(x) return 1 + math.tan(x) ^ 2 end },
  asin = { lo = -0.95, hi = 0.95, reference = math.asin,
    derivative = function(x) return 1 / math.sqrt(1 - x * x) end },
  acos = { lo = -0.95, hi = 0.95, reference = math.acos,
    derivative = function(x) return -1 / math.sqrt(1 - x * x) end },
  atan = { lo = -5, hi = 5, reference = function(x) return math.atan(x) end,
    derivative = function(x) return 1 / (1 + x * x) end },
  asinh = { lo = -5, hi = 5, reference = function(x) return math.log(x + math.sqrt(x * x + 1)) end,
    derivative = function(x) return 1 / math.sqrt(x * x + 1) end },
  acosh = { lo = 1.1, hi = 5, reference = function(x) return math.log(x + math.sqrt(x * x - 1)) end,
    derivative = function(x) return 1 / math.sqrt(x * x - 1) end },
  atanh = { lo = -0.9, hi = 0.9, reference = function(x) return 0.5 * math.log((1 + x) / (1 - x)) end,
    derivative = function(x) return 1 / (1 - x * x) end },
  -- rounding (integer inputs kept exactly) and steps
  floor = { lo = -5, hi = 5, reference = math.floor },
  ceil = { lo = -5, hi = 5, reference = math.ceil },
  round = { lo = -5, hi = 5, numbers = { 0 }, other = { 2 },
    reference = function(x, d) return d == 0 and round_even(x) or round_even(x * 10 ^ d) / 10 ^ d end },
  trunc = { lo = -5, hi = 5, reference = trunc },
  frac = { lo = -5, hi = 5, reference = function(x) return x - trunc(x) end },
  sign = { lo = -3, hi = 3, reference = sign },
  sgn = { lo = -3, hi = 3, reference = sign },
  square = { lo = -4, hi = 4, reference = function(x) return x * x end, derivative = function(x) return 2 * x end },
  erfinv = { lo = -0.95, hi = 0.95, reference = erfinv,
    derivative = function(x) return math.sqrt(math.pi) / 2 * math.exp(erfinv(x) ^ 2) end },
  -- activations
  softplus = { lo = -5, hi = 5, numbers = { 1, 20 }, other = { 2, 1.5 },
    reference = function(x, beta, threshold)
      return x * beta > threshold and x or math.log(1 + math.exp(beta * x)) / beta
    end,
    derivative = function(x, beta, threshold)
      return x * beta > threshold and 1 or ref.sigmoid(beta * x)
    end },
  mish = { lo = -5, hi = 5, reference = function(x) return x * ref.tanh(softplus1(x)) end,
    derivative = function(x)
      local t = ref.tanh(softplus1(x))
      return t + x * ref.sigmoid(x) * (1 - t * t)
    end },
  hardtanh = { lo = -3, hi = 3, numbers = { -1, 1 }, other = { -0.5, 2 },
    reference = function(x, lo, hi) return math.min(math.max(x, lo), hi) end,
    derivative = function(x, lo, hi) return (x > lo and x < hi) and 1 or 0 end },
  hardsigmoid = { lo = -5, hi = 5, reference = function(x) return math.min(math.max(x / 6 + 0.5, 0), 1) end,
    derivative = function(x) return (x > -3 and x < 3) and 1 / 6 or 0 end },
  hardswish = { lo = -5, hi = 5, reference = function(x) return x * math.min(math.max(x + 3, 0), 6) / 6 end,
    derivative = function(x) return x < -3 and 0 or x > 3 and 1 or x / 3 + 0.5 end },
  leaky_relu = { lo = -3, hi = 3, numbers = { 0.01 }, other = { 0.2 },
    reference = function(x, slope) return x > 0 and x or x * slope end,
    derivative = function(x, slope) return x > 0 and 1 or slope end },
  elu = { lo = -4, hi = 3, numbers = { 1 }, other = { 0.5 },
    reference = function(x, alpha) return x > 0 and x or alpha * (math.exp(x) - 1) end,
    derivative = function(x, alpha) return x > 0 and 1 or alpha * math.exp(x) end },
  selu = { lo = -4, hi = 3,
    reference = function(x) return SELU_SCALE * (x > 0 and x or SELU_ALPHA * (math.exp(x) - 1)) end,
    derivative = function(x) return SELU_SCALE * (x > 0 and 1 or SELU_ALPHA * math.exp(x)) end },
  celu = { lo = -4, hi = 3, numbers = { 1 }, other = { 2 },
    reference = function(x, alpha) return x > 0 and x or alpha * (math.exp(x / alpha) - 1) end,
    derivative = function(x, alpha) return x > 0 and 1 or math.exp(x / alpha) end },
  logit = { lo = 0.05, hi = 0.95, numbers = {}, other = { 0.2 },
    reference = function(x, eps)
      local z = eps and math.min(math.max(x, eps), 1 - eps) or x
      return math.log(z / (1 - z))
    end,
    derivative = function(x, eps)
      if eps and (x < eps or x > 1 - eps) then return 0 end
      return 1 / (x * (1 - x))
    end },
  nan_to_num = { lo = -5, hi = 5, specials = { NAN, INF, -INF },
    numbers = function(dtype) return { 0, LARGEST[dtype] or 0, -(LARGEST[dtype] or 0) } end,
    other = { 1.5, 100, -200 },
    reference = function(x, nan, posinf, neginf)
      if x ~= x then return nan end
      return x == INF and posinf or x == -INF and neginf or x
    end,
    derivative = function() return 1 end },
  -- predicates (bool results) and bits
  isnan = { lo = -3, hi = 3, specials = PREDICATE_SPECIALS, reference = function(x) return x ~= x end },
  isinf = { lo = -3, hi = 3, specials = PREDICATE_SPECIALS, reference = function(x) return math.abs(x) == INF end },
  isfinite = { lo = -3, hi = 3, specials = PREDICATE_SPECIALS,
    reference = function(x) return x == x and math.abs(x) ~= INF end },
  signbit = { lo = -3, hi = 3, specials = PREDICATE_SPECIALS, reference = sign_bit },
  logical_not = { lo = -2, hi = 2, specials = PREDICATE_SPECIALS, reference = function(x) return not truthy(x) end },
  bitwise_not = { ints = { -100, 100 }, reference = function(x)
    if type(x) == "boolean" then return not x end
    return ~x
  end },
  -- binary
  div = { ranges = { { -5, 5 }, { 0.5, 5 } }, reference = function(a, b) return a / b end },
  atan2 = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.atan },
  hypot = { ranges = { { -3, 3 }, { -3, 3 } }, reference = function(a, b) return math.sqrt(a * a + b * b) end },
  copysign = { ranges = { { -3, 3 }, { -3, 3 } },
    reference = function(a, b) return sign_bit(b) and -math.abs(a) or math.abs(a) end },
  xlogy = { ranges = { { -3, 3 }, { 0.1, 4 } },
    reference = function(a, b) if b ~= b then return b end return a == 0 and 0 or a * math.log(b) end },
  maximum = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.max },
  minimum = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.min },
  fmax = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.max },
  fmin = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.min },
  fmod = { ranges = { { -5, 5 }, { 0.5, 3 } }, reference = math.fmod },
  remainder = { ranges = { { -5, 5 }, { 0.5, 3 } }, reference = function(a, b) return a - b * math.floor(a / b) end },
  floor_divide = { ranges = { { -5, 5 }, { 0.5, 3 } }, reference = function(a, b) return math.floor(a / b) end },
  bitwise_and = { ints = { -100, 100 }, reference = function(a, b)
    if type(a) == "boolean" then return a and b end
    return a & b
  end },
  bitwise_or = { ints = { -100, 100 }, reference = function(a, b)
    if type(a) == "boolean" then return a or b end
    return a | b
  end },
  bitwise_xor = { ints = { -100, 100 }, reference = function(a, b)
    if type(a) == "boolean" then return a ~= b end
    return a ~ b
  end },
  logical_and = { ranges = { { -2, 2 }, { -2, 2 } }, reference = function(a, b) return truthy(a) and truthy(b) end },
  logical_or = { ranges = { { -2, 2 }, { -2, 2 } }, reference = function(a, b) return truthy(a) or truthy(b) end },
  logical_xor = { ranges = { { -2, 2 }, { -2, 2 } }, reference = function(a, b) return truthy(a) ~= truthy(b) end },
  -- ternary
  lerp = { ranges = { { -3, 3 }, { -3, 3 }, { 0, 1 } }, reference = function(a, b, w) return a + w * (b - a) end },
  addcmul = { ranges = { { -3, 3 }, { -3, 3 }, { -3, 3 } }, numbers = { 1 }, other = { 0.5 },
    reference = function(a, b, c, value) return a + value * b * c end },
  addcdiv = { ranges = { { -3, 3 }, { -3, 3 }, { 0.5, 3 } }, numbers = { 1 }, other = { -2 },
    reference = function(a, b, c, value) return a + value * b / c end },
  clamp_tensor = { ranges = { { -3, 3 }, { -3, -0.5 }, { 0.5, 3 } },
    reference = function(x, lo, hi) return math.min(math.max(x, lo), hi) end },
}
