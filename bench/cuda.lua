-- Issue-4 benchmark, tlua side (run on a GPU machine by scripts/bench-cuda):
-- bf16 GEMM 4096^3, bf16 Linear fwd+bwd (8192 rows, 4096->4096), 64M-element
-- float32 add against the device-to-device copy bandwidth, and the launch
-- overhead of a tiny op. Prints "key value" lines.
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

-- seconds per call of fn: warm-up, then the median of repeats, each timed
-- from a synchronized start to a synchronized end
local function time(fn, repeats, inner)
  inner = inner or 1
  for _ = 1, 3 do fn() end
  tl.cuda.synchronize()
  local samples = {}
  for r = 1, repeats do
    local t0 = tl.clock()
    for _ = 1, inner do fn() end
    tl.cuda.synchronize()
    samples[r] = (tl.clock() - t0) / inner
  end
  return median(samples)
end

-- --tiny: only the tiny-op launch figure (scripts/bench-cuda alternates it with torch's)
if arg and arg[1] == "--tiny" then
  local u = tl.ones(1, { device = "cuda" })
  local v = tl.ones(1, { device = "cuda" })
  local s = time(function() return u + v end, 9, 20000)
  print(string.format("tiny_add_us %.3f", s * 1e6))
  return
end

tl.manual_seed(0)
local n = 4096
local a = tl.randn(n, n, { device = "cuda" }):bfloat16()
local b = tl.randn(n, n, { device = "cuda" }):bfloat16()
local s = time(function() return tl.matmul(a, b) end, 20, 5)
print(string.format("gemm_bf16_tflops %.2f", 2 * n ^ 3 / s / 1e12))

local x = tl.randn(8192, 4096, { device = "cuda" }):bfloat16():requires_grad_()
local w = (tl.randn(4096, 4096, { device = "cuda" }) * 0.01):bfloat16():requires_grad_()
local bias = tl.zeros(4096, { device = "cuda", dtype = "bfloat16", requires_grad = true })
local g = tl.randn(8192, 4096, { device = "cuda" }):bfloat16()
s = time(function()
  x.grad, w.grad, bias.grad = nil, nil, nil
  tl.linear(x, w, bias):backward(g)
end, 20)
print(string.format("linear_bf16_ms %.4f", s * 1e3))
print(string.format("linear_bf16_tflops %.2f", 3 * 2 * 8192 * 4096 * 4096 / s / 1e12))
x, w, bias, g, a, b = nil, nil, nil, nil, nil, nil
collectgarbage("collect")

local m = 64 * 1024 * 1024
local p = tl.randn(m, { device = "cuda" })
local q = tl.randn(m, { device = "cuda" })
local out = tl.empty(m, { device = "cuda" })
s = time(function() out:copy_(p) end, 20)
print(string.format("copy_f32_gbs %.1f", 2 * 4 * m / s / 1e9))
s = time(function() return p + q end, 20)
print(string.format("add_f32_gbs %.1f", 3 * 4 * m / s / 1e9))
p, q, out = nil, nil, nil
collectgarbage("collect")

local u = tl.ones(1, { device = "cuda" })
local v = tl.ones(1, { device = "cuda" })
s = time(function() return u + v end, 9, 20000)
print(string.format("tiny_add_us %.3f", s * 1e6))
