-- Char-GPT training step speed and peak memory in tlua (examples/gpt/model.lua), the same step as bench/gpt.py measures in PyTorch.
--
--   tlua bench/gpt.lua [--device cuda] [--layers 6 --dim 384 --heads 6 --context 256 --batch 64
--       --vocab 65 --dropout_pct 20] [--steps 30] [--warmup 10] [--graph 1]
--
-- One step: forward under tl.autocast("bfloat16") (cuda; float32 on the cpu), backward, gradient
-- clipping to 1.0, AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices), zero_grad, on
-- batches of random tokens made beforehand. Prints `key value` lines: step_ms (the median of three windows' mean step
-- time), peak_mib (peak allocated over the timed steps, from a reset after warm-up; with a graph the peak
-- reserved, from an emptied cache: the graph's pool holds its working memory) and loss.
-- --graph 1 (the default on a GPU): the step captured once into a CUDA graph (tl.cuda.graph, after one eager
-- step) and replayed; --graph 0 runs it eagerly. --fused_mlp 0: the MLP as Linear, GELU, Linear instead of
-- one tl.linear_gelu_linear (examples/gpt's config fused_mlp, on by default); --gelu_epilogue 1: its GELU in the
-- first GEMM's epilogue (config gelu_epilogue).
local tl = require("tlua")
local bench_dir = arg[0]:match("^(.*)/") or "."
local common = dofile(bench_dir .. "/common.lua")
package.path = bench_dir .. "/../examples/gpt/?.lua;" .. package.path
local gpt = require("model")

local device = "cuda"
for k = 1, #arg - 1 do
  if arg[k] == "--device" then device = table.remove(arg, k + 1); table.remove(arg, k); break end
end
local o = common.options("bench/gpt.lua", { layers = 6, dim = 384, heads = 6, context = 256, batch = 64, vocab = 65,
  dropout_pct = 20, steps = 30, warmup = 10, graph = 1, fused_mlp = 1, gelu_epilogue = 0 })
local on_gpu = device ~= "cpu"

tl.manual_seed(1)
local model = gpt.GPT(gpt.config { vocab = o.vocab, context = o.context, layers = o.layers, dim = o.dim, heads = o.heads,
  dropout = o.dropout_pct / 100, device = device, fused_mlp = o.fused_mlp ~= 0,
  gelu_epilogue = o.gelu_epilogue ~= 0 })
local decay, no_decay = {}, {}
for _, p in ipairs(model:parameters()) do
  if #p.shape >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
end
local opt = tl.optim.AdamW({ { params = decay, weight_decay = 0.1 }, { params = no_decay, weight_decay = 0 } },
  { lr = 1e-3, betas = { 0.9, 0.99 }, eps = 1e-8 })
local params = model:parameters()
local n = o.warmup + o.steps
local xs = tl.randint(1, o.vocab + 1, { n, o.batch, o.context }, { device = device })
local ys = tl.randint(1, o.vocab + 1, { n, o.batch, o.context }, { device = device })

local function train_step(x, y)
  local loss
  if on_gpu then
    local _
    _, loss = tl.autocast("bfloat16", model, x, y)
  else
    local _
    _, loss = model(x, y)
  end
  loss:backward()
  tl.optim.clip_grad_norm(params, 1.0)
  opt:step()
  opt:zero_grad()
  return loss
end
local captured = on_gpu and o.graph ~= 0 and tl.cuda.graph(train_step, { warmup = 1 })
local function step(i) return (captured or train_step)(xs:select(1, i), ys:select(1, i)) end

local function sync() if on_gpu then tl.cuda.synchronize() end end

for i = 1, o.warmup do step(i) end
sync()
-- a graph's working memory is its own pool, reserved but not allocated between replays: with a graph the
-- figure is the peak reserved memory, counted from a cache emptied of what the eager steps left
if captured then tl.cuda.empty_cache() end
tl.reset_peak_memory_stats(device)
local windows, loss = {}, nil
for w = 1, 3 do
  local t0 = tl.clock()
  for i = o.warmup + 1, n do loss = step(i) end
  sync()
  windows[w] = 1000 * (tl.clock() - t0) / o.steps
end
local stats = tl.memory_stats(device)
local step_ms = common.median(windows)
local peak = captured and stats.peak_reserved or stats.peak
print(string.format("step_ms %.3f\npeak_mib %.1f\nloss %.4f", step_ms, peak / 2 ^ 20, loss:item()))
-- tokens/s, and the model FLOPs utilization against the device's dense bf16 peak (examples/gpt's
-- count: 6 x parameters + attention, per token)
local tokens_per_s = o.batch * o.context / (step_ms / 1000)
print(string.format("tokens_per_s %.0f", tokens_per_s))
local peak_tflops = on_gpu and gpt.peak_tflops(tl.cuda.get_device_name(), "bfloat16")
if peak_tflops then
  local flops = gpt.flops_per_token(model.config) * tokens_per_s
  print(string.format("mfu_pct %.1f", 100 * flops / (peak_tflops * 1e12)))
end
