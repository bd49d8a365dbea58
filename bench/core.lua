-- Issue-2 benchmark, tlua side: the cost of a tiny op from Lua and 1024^3 float32 matmul GFLOP/s (run by scripts/bench).
-- usage: tlua bench/core.lua [--threads N] [--iters N] [--batches N] [--repeats N] [--size N]
local tl = require("tlua")

local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")
local opts = common.options("bench/core.lua", { iters = 200000, batches = 7, repeats = 15, size = 1024 }, { threads = true })
if opts.threads then tl.set_num_threads(opts.threads) end

local median = common.median

-- (a) tiny op: c = a + b on two 1-element float32 tensors
local a = tl.tensor({ 1.5 }, { dtype = "float32" })
local b = tl.tensor({ 2.25 }, { dtype = "float32" })
local c = a + b
assert(c:item() == 3.75, "tiny add gave a wrong result")
for _ = 1, opts.iters // 10 do c = a + b end -- warm-up
local per_op = {}
for k = 1, opts.batches do
  collectgarbage("collect")
  local t0 = tl.clock()
  for _ = 1, opts.iters do
    c = a + b
  end
  per_op[k] = (tl.clock() - t0) / opts.iters * 1e6
end
print(string.format("tiny_add_us %.4f", median(per_op)))

-- (b) float32 matmul n x n x n
local n = opts.size
tl.manual_seed(0)
local x = tl.randn(n, n)
local y = tl.randn(n, n)
local z
for _ = 1, 3 do z = tl.matmul(x, y) end -- warm-up
local secs = {}
for k = 1, opts.repeats do
  local t0 = tl.clock()
  z = tl.matmul(x, y)
  secs[k] = tl.clock() - t0
end
assert(z.shape[1] == n and z.shape[2] == n, "matmul gave a wrong shape")
print(string.format("matmul_gflops %.2f", 2 * n * n * n / median(secs) / 1e9))
print(string.format("threads %d", tl.get_num_threads()))
