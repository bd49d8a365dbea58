-- Issue-3 benchmark, tlua side: Linear forward+backward (batch 256, 1024->1024,
-- float32) and the cost of recording the graph on a tiny op (run by scripts/bench).
-- usage: tlua bench/autograd.lua [--threads N] [--iters N] [--repeats N]
local tl = require("tlua")

local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")
local opts = common.options("bench/autograd.lua", { iters = 100000, repeats = 15 }, { threads = true })
if opts.threads then tl.set_num_threads(opts.threads) end

local median = common.median

-- (a) Linear 1024 -> 1024 on a batch of 256: forward, backward (all three grads)
tl.manual_seed(0)
local x = tl.randn(256, 1024, { requires_grad = true })
local w = tl.randn(1024, 1024, { requires_grad = true })
local b = tl.randn(1024, { requires_grad = true })
local g = tl.randn(256, 1024)
local function step()
  x.grad, w.grad, b.grad = nil, nil, nil
  tl.linear(x, w, b):backward(g)
end
for _ = 1, 3 do step() end
local times = {}
for k = 1, opts.repeats do
  local t0 = tl.clock()
  step()
  times[k] = tl.clock() - t0
end
print(string.format("linear_fwd_bwd_ms %.4f", median(times) * 1e3))

-- (b) recording the graph: c = a * b on 1-element tensors that require grad
local p = tl.tensor({ 1.5 }, { requires_grad = true })
local q = tl.tensor({ 2.0 }, { requires_grad = true })
local c
for _ = 1, opts.iters // 10 do c = p * q end
local per_op = {}
for k = 1, 5 do
  collectgarbage("collect")
  local t0 = tl.clock()
  for _ = 1, opts.iters do c = p * q end
  per_op[k] = (tl.clock() - t0) / opts.iters * 1e6
end
assert(c.requires_grad)
print(string.format("tiny_mul_grad_us %.4f", median(per_op)))
