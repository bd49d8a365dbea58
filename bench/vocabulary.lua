-- Issue-28 benchmark (point 8), tlua side: the memory-bound ops of the vocabulary (cat, gather, index_select, scatter_add_, masked_fill, erf, maximum, sum, amax, logsumexp, std) against tlua's own copy_ of as many float32 elements (run by scripts/bench and scripts/bench-cuda against bench/vocabulary_torch.py).
--
-- x [rows, cols] float32 (cuda: 8192 x 8192 = 64M elements; cpu: 4096 x 4096 = 16M):
--   copy      out:copy_(x)                                       bytes 8m (m = rows * cols)
--   cat1      tl.cat({a, b}, 1), a and b [rows / 2, cols]         8m
--   cat2      tl.cat({a, b}, 2), a and b [rows, cols / 2]         8m
--   gather    x:gather(2, idx), idx [rows, cols] random in 1..cols (int64)           4m + 8m + 4m
--   index_select  w:index_select(1, idx), w [m / 1024, 1024], idx m / 1024 random rows  8m + 8 m / 1024
--   scatter_add   y:scatter_add_(2, perm, src) in place, perm a random permutation of 1..cols per
--             row (no collisions), src [rows, cols]: reads y, perm, src, writes y    4m + 8m + 4m + 4m
--   masked_fill   x:masked_fill(mask, 0), mask [rows, cols] bool, about half true     4m + m + 4m
--   erf       x:erf()                                             8m
--   maximum   tl.maximum(x, z)                                    12m
--   sum, amax, logsumexp, std   over dim 2 (the last)             4m + 4 rows
-- Bytes are what the op must read and write at least (each input read once, the output written
-- once). Each figure: after warm-up, the median over repeats of one call's seconds (synchronized
-- around inner calls on cuda, one call on the cpu). Prints "key value" lines: <op>_ms and
-- <op>_gbs for copy and each op.
-- usage: tlua bench/vocabulary.lua [--device cpu|cuda] [--rows N] [--cols N] [--repeats N]
--        [--warmup N] [--inner N] [--threads N]
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local script = "bench/vocabulary.lua"
local opts = { device = "cpu" }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  if name == "device" and arg[i + 1] then
    opts.device = arg[i + 1]
  elseif (name == "rows" or name == "cols" or name == "repeats" or name == "warmup" or name == "inner"
      or name == "threads") and arg[i + 1] then
    opts[name] = math.tointeger(tonumber(arg[i + 1]))
    if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
  else
    error(script .. ": unknown argument '" .. arg[i] .. "'", 0)
  end
  i = i + 2
end
local cuda = opts.device ~= "cpu"
if opts.threads then tl.set_num_threads(opts.threads) end
local rows = opts.rows or (cuda and 8192 or 4096)
local cols = opts.cols or (cuda and 8192 or 4096)
local repeats, warmup = opts.repeats or (cuda and 20 or 10), opts.warmup or 3
local inner = opts.inner or (cuda and 10 or 1)
local m = rows * cols
if rows % 2 ~= 0 or cols % 2 ~= 0 or m % 1024 ~= 0 then
  error(script .. ": rows and cols must be even and rows * cols a multiple of 1024", 0)
end

local function sync() if cuda then tl.cuda.synchronize() end end
-- seconds per call of fn: warm-up, then the median of repeats, each timed from a synchronized
-- start to a synchronized end over inner calls
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
local function report(key, bytes, fn)
  local s = seconds(fn)
  print(string.format("%s_ms %.4f", key, s * 1e3))
  print(string.format("%s_gbs %.1f", key, bytes / s / 1e9))
  collectgarbage("collect")
end

local dev = { device = opts.device }
tl.manual_seed(0)
tl.no_grad(function()
  local x = tl.randn(rows, cols, dev)
  local out = tl.empty(rows, cols, dev)
  report("copy", 8 * m, function() out:copy_(x) end)
  out = nil

  local a, b = tl.randn(rows // 2, cols, dev), tl.randn(rows // 2, cols, dev)
  report("cat1", 8 * m, function() return tl.cat({ a, b }, 1) end)
  a, b = tl.randn(rows, cols // 2, dev), tl.randn(rows, cols // 2, dev)
  report("cat2", 8 * m, function() return tl.cat({ a, b }, 2) end)
  a, b = nil, nil

  local idx = tl.randint(1, cols + 1, { rows, cols }, dev)
  report("gather", 16 * m, function() return x:gather(2, idx) end)
  idx = nil

  local w = tl.randn(m // 1024, 1024, dev)
  local ridx = tl.randint(1, m // 1024 + 1, { m // 1024 }, dev)
  report("index_select", 8 * m + 8 * (m // 1024), function() return w:index_select(1, ridx) end)
  w, ridx = nil, nil

  local perm = tl.rand(rows, cols, dev):argsort(2)
  local y, src = tl.zeros(rows, cols, dev), tl.randn(rows, cols, dev)
  report("scatter_add", 20 * m, function() y:scatter_add_(2, perm, src) end)
  perm, y, src = nil, nil, nil

  local mask = tl.rand(rows, cols, dev):lt(0.5)
  report("masked_fill", 9 * m, function() return x:masked_fill(mask, 0) end)
  mask = nil

  report("erf", 8 * m, function() return x:erf() end)
  local z = tl.randn(rows, cols, dev)
  report("maximum", 12 * m, function() return tl.maximum(x, z) end)
  z = nil

  report("sum", 4 * m + 4 * rows, function() return x:sum(2) end)
  report("amax", 4 * m + 4 * rows, function() return x:amax(2) end)
  report("logsumexp", 4 * m + 4 * rows, function() return x:logsumexp(2) end)
  report("std", 4 * m + 4 * rows, function() return x:std(2) end)
end)
