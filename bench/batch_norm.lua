-- Issue-29 benchmark (point 9), tlua side: nn.BatchNorm2d in training mode, forward and forward+backward, float32 and bfloat16 input (float32 parameters and running statistics, as under autocast), against bench/batch_norm_torch.py (run by scripts/bench and scripts/bench-cuda).
--
-- x [N, C, H, W] (cuda: [64, 64, 56, 56]; cpu: [16, 64, 56, 56]), a BatchNorm2d(C) module in
-- training mode (the batch's statistics, the running ones updated, num_batches_tracked counted):
--   fwd_<dtype>      y = m(x)
--   fwdbwd_<dtype>   y = m(x); y:backward(g), x, weight and bias requiring grad
-- Each figure: after warm-up, the median over repeats of one call's seconds (synchronized around
-- inner calls on cuda). Prints "key value" lines: fwd_f32_ms, fwdbwd_f32_ms, fwd_bf16_ms,
-- fwdbwd_bf16_ms (bf16 rows only on cuda unless --bf16 1).
-- usage: tlua bench/batch_norm.lua [--device cpu|cuda] [--n N] [--c N] [--hw N] [--repeats N]
--        [--warmup N] [--inner N] [--threads N] [--bf16 0|1]
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local script = "bench/batch_norm.lua"
local opts = { device = "cpu" }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  if name == "device" and arg[i + 1] then
    opts.device = arg[i + 1]
  elseif (name == "n" or name == "c" or name == "hw" or name == "repeats" or name == "warmup" or name == "inner"
      or name == "threads" or name == "bf16") and arg[i + 1] then
    opts[name] = math.tointeger(tonumber(arg[i + 1]))
    if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
  else
    error(script .. ": unknown argument '" .. arg[i] .. "'", 0)
  end
  i = i + 2
end
local cuda = opts.device ~= "cpu"
if opts.threads then tl.set_num_threads(opts.threads) end
local n, c, hw = opts.n or (cuda and 64 or 16), opts.c or 64, opts.hw or 56
local repeats, warmup = opts.repeats or (cuda and 20 or 10), opts.warmup or 3
local inner = opts.inner or (cuda and 10 or 1)
local bf16 = opts.bf16 == nil and cuda or opts.bf16 == 1

local function sync() if cuda then tl.cuda.synchronize() end end
local function seconds(fn)
  for _ = 1, warmup do fn() end
  local samples = {}
  for r = 1, repeats do
    sync()
    local t0 = tl.clock()
    for _ = 1, inner do fn() end
    sync()
    samples[r] = (tl.clock() - t0) / inner
  end
  return median(samples)
end

local dev = { device = opts.device }
tl.manual_seed(0)
local m = tl.nn.BatchNorm2d(c, dev)
m:train()
for _, dtype in ipairs(bf16 and { "float32", "bfloat16" } or { "float32" }) do
  local key = dtype == "float32" and "f32" or "bf16"
  local x = tl.randn(n, c, hw, hw, dev):to(dtype)
  local g = tl.randn(n, c, hw, hw, dev):to(dtype)
  local fwd = seconds(function() tl.no_grad(function() m(x) end) end)
  print(string.format("fwd_%s_ms %.4f", key, fwd * 1e3))
  local xg = x:detach():requires_grad_()
  local step = seconds(function()
    xg.grad, m.weight.grad, m.bias.grad = nil, nil, nil
    m(xg):backward(g)
  end)
  print(string.format("fwdbwd_%s_ms %.4f", key, step * 1e3))
  collectgarbage("collect")
end
