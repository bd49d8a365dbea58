-- One line per pointwise op (families "pointwise" and "pointwise_binary" in the op
-- table): the range its inputs are drawn from (lo, hi; for a binary op a range per
-- input, {lo, hi} each), an independent reference in Lua (float64) and, for an op
-- with a fused backward kernel (<op>_backward), its derivative. The specs that walk
-- the op table (pointwise_spec: values in every dtype, integer inputs, strided
-- inputs; gradcheck_spec: finite differences; kernel_sweep_spec: every kernel
-- against these Lua references, on the CPU and CUDA) take their cases from here
-- and fail for a pointwise op without a line.
local ref = require("helpers.reference")

-- the standard normal density, for gelu's derivative
local function phi(x) return math.exp(-x * x / 2) / math.sqrt(2 * math.pi) end
-- gelu's tanh approximation (PyTorch's approximate = "tanh"): its inner tanh
local K_GELU = math.sqrt(2 / math.pi)
local function gelu_tanh_inner(x) return ref.tanh(K_GELU * (x + 0.044715 * x ^ 3)) end

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
  -- binary
  div = { ranges = { { -5, 5 }, { 0.5, 5 } }, reference = function(a, b) return a / b end },
  atan2 = { ranges = { { -3, 3 }, { -3, 3 } }, reference = math.atan },
}
