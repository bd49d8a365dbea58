-- Issue-28 benchmark (point 3), tlua side: topk(k) of x [rows, cols] (bfloat16 on CUDA, float32 on the CPU) and a sort of n float32 (run by scripts/bench and scripts/bench-cuda against bench/sort_torch.py). Prints "key value" lines.
-- usage: tlua bench/sort.lua [--cuda 1] [--rows N] [--cols N] [--k N] [--n N] [--repeats N] [--threads N]
local tl = require("tlua")

local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")
local opts = common.options("bench/sort.lua",
  { cuda = 0, rows = 8192, cols = 50304, k = 50, n = 16 * 1024 * 1024, repeats = 10 }, { threads = true })
if opts.threads then tl.set_num_threads(opts.threads) end
local device = opts.cuda ~= 0 and "cuda" or "cpu"
local sync = device == "cuda" and tl.cuda.synchronize or function() end

-- seconds per call of fn: warm-up, then the median of repeats from a synchronized start
local function time(fn)
  for _ = 1, 2 do fn() end
  sync()
  local samples = {}
  for r = 1, opts.repeats do
    local t0 = tl.clock()
    fn()
    sync()
    samples[r] = tl.clock() - t0
  end
  return common.median(samples)
end

tl.manual_seed(0)
local x = tl.randn(opts.rows, opts.cols, { device = device })
if device == "cuda" then x = x:bfloat16() end
print(string.format("topk_ms %.4f", time(function() return x:topk(opts.k) end) * 1e3))
x = nil
collectgarbage("collect")
local v = tl.randn(opts.n, { device = device })
print(string.format("sort_ms %.4f", time(function() return v:sort() end) * 1e3))
