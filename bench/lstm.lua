-- Issue-29 benchmark (point 9), tlua side: a 2-layer nn.LSTM, forward + backward, float32 and under bfloat16 autocast (run by scripts/bench and scripts/bench-cuda against bench/lstm_torch.py, which times torch.nn.LSTM: cuDNN on CUDA).
--
-- x [steps, batch, input] float32 requiring grad, the LSTM's parameters float32; one run is
-- out, (h_n, c_n) = lstm(x), then out:sum() backward (every parameter's and x's gradient), the
-- gradients dropped before the next run. Defaults: cuda hidden 1024, input 1024, 256 steps,
-- batch 64; cpu hidden 256, input 256, 64 steps, batch 32. Each figure: after warm-up, the
-- median over repeats of one run's seconds (synchronized on cuda). Prints "key value" lines:
-- f32_ms and bf16_ms (bf16: the run inside tl.autocast("bfloat16"), cuda only unless --bf16 1).
-- usage: tlua bench/lstm.lua [--device cpu|cuda] [--hidden N] [--input N] [--steps N]
--        [--batch N] [--layers N] [--repeats N] [--warmup N] [--threads N] [--bf16 0|1]
local tl = require("tlua")

local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")
local median = common.median

-- the sizes' defaults depend on the device: absent here, chosen below
local opts = common.options("bench/lstm.lua", { device = "cpu" }, { hidden = true, input = true, steps = true,
  batch = true, layers = true, repeats = true, warmup = true, threads = true, bf16 = true })
local cuda = opts.device ~= "cpu"
if opts.threads then tl.set_num_threads(opts.threads) end
local H = opts.hidden or (cuda and 1024 or 256)
local I = opts.input or (cuda and 1024 or 256)
local T = opts.steps or (cuda and 256 or 64)
local N = opts.batch or (cuda and 64 or 32)
local L = opts.layers or 2
local repeats, warmup = opts.repeats or (cuda and 10 or 5), opts.warmup or 2
local bf16 = opts.bf16 == nil and cuda or opts.bf16 == 1

local function sync() if cuda then tl.cuda.synchronize() end end

tl.manual_seed(0)
local lstm = tl.nn.LSTM(I, H, { num_layers = L, device = opts.device })
local x = tl.randn(T, N, I, { device = opts.device }):requires_grad_()

local function step(autocast)
  local function run()
    local out = lstm(x)
    return out:float():sum()
  end
  local loss = autocast and tl.autocast("bfloat16", run) or run()
  loss:backward()
  lstm:zero_grad()
  x.grad = nil
end

local function seconds(autocast)
  for _ = 1, warmup do step(autocast) end
  local samples = {}
  for r = 1, repeats do
    collectgarbage("collect")
    sync()
    local t0 = tl.clock()
    step(autocast)
    sync()
    samples[r] = tl.clock() - t0
  end
  return median(samples)
end

print(string.format("f32_ms %.3f", seconds(false) * 1e3))
if bf16 then print(string.format("bf16_ms %.3f", seconds(true) * 1e3)) end
