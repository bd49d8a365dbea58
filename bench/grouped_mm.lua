-- Grouped GEMM benchmark, tlua side: tl.grouped_mm(A [T, K], B [G, K, N], offsets) forward (no_grad) and forward+backward, two shapes, two token splits, and a loop of per-group matmuls.
--
-- Shapes (bfloat16 on cuda):
--   gmm64: G = 64 experts, K = N = 1024, T = 32768 tokens
--   gmm8:  G = 8 experts, K = 2048, N = 4096, T = 16384 tokens
-- Splits of the T rows over the G groups: even (T / G each: the keys gmm64_*, gmm8_*) and a fixed
-- uneven one (the keys gmm64_uneven_*, gmm8_uneven_*) that bench/grouped_mm.py draws the same way:
-- an LCG (s <- (1103515245 s + 12345) mod 2^31, s0 = 12345 + G) gives each group a weight
-- s mod 1000, weights under 100 become 0 (empty groups), sizes are floor(T w / sum w) and the
-- remainder goes one row at a time to the non-empty groups in order. *_signature (sum of g * size_g)
-- lets scripts/bench-cuda check that both scripts split alike.
-- forward+backward: A and B require grad, y:backward(g) with a fixed random g of y's shape, the
-- grads dropped before each step (as torch's side sets them to None).
-- loop64_*: shape gmm64 with the even split as G separate matmuls of per-group leaf tensors
-- (A_g [T / G, K], B_g [K, N]; backward: one y_g:backward(g_g) per group): tlua's own loop figure;
-- scripts/bench-cuda compares tl.grouped_mm with torch's loop (bench/grouped_mm.py).
-- offsets are int32 on the device, as torch's side has them (on a Hopper GPU grouped_mm reads them
-- there and never waits; elsewhere it reads them on the host).
-- Each figure: the median time of one call (synchronised, after warm-up). Prints "key value" lines.
-- dense4096_*: a bf16 4096^3 product as grouped_mm with one group (on a Hopper GPU tlua's own GEMM
-- core) and as tl.matmul (cuBLAS), cuda only.
-- usage: tlua bench/grouped_mm.lua [--device cpu|cuda] [--dtype bfloat16|float32|...] [--small]
--          [--repeats N] [--warmup N] [--threads N]
-- defaults: cuda: bfloat16, 50 repeats, 5 warm-ups; cpu: bfloat16, 3 repeats, 1 warm-up;
-- --small: tiny shapes (G = 4, K = N = 64, T = 256; G = 2, K = 64, N = 128, T = 128), to try the
-- script on a CPU
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local script = "bench/grouped_mm.lua"
local opts = { device = "cpu" }
local strings = { device = true, dtype = true }
local integers = { repeats = true, warmup = true, threads = true }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  if name == "small" then
    opts.small = true
    i = i + 1
  elseif name and (strings[name] or integers[name]) and arg[i + 1] ~= nil then
    opts[name] = strings[name] and arg[i + 1] or math.tointeger(tonumber(arg[i + 1]))
    if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
    i = i + 2
  else
    error(script .. ": unknown argument '" .. tostring(arg[i]) .. "'", 0)
  end
end
local cuda = opts.device ~= "cpu"
local defaults = cuda and { dtype = "bfloat16", repeats = 50, warmup = 5 }
  or { dtype = "bfloat16", repeats = 3, warmup = 1 }
for k, v in pairs(defaults) do if opts[k] == nil then opts[k] = v end end
if opts.threads then tl.set_num_threads(opts.threads) end
local dev, dtype = opts.device, opts.dtype

local shapes = opts.small
  and { { key = "gmm64", G = 4, K = 64, N = 64, T = 256 }, { key = "gmm8", G = 2, K = 64, N = 128, T = 128 } }
  or { { key = "gmm64", G = 64, K = 1024, N = 1024, T = 32768 }, { key = "gmm8", G = 8, K = 2048, N = 4096, T = 16384 } }

local function sync() if cuda then tl.cuda.synchronize() end end

-- the splits (the same in bench/grouped_mm.py)
local function even_split(T, G)
  local sizes = {}
  for g = 1, G do sizes[g] = T // G + (g <= T % G and 1 or 0) end
  return sizes
end

local function uneven_split(T, G)
  local s, w, total = 12345 + G, {}, 0
  for g = 1, G do
    s = (1103515245 * s + 12345) % 2147483648
    w[g] = s % 1000
    if w[g] < 100 then w[g] = 0 end
    total = total + w[g]
  end
  local sizes, used = {}, 0
  for g = 1, G do
    sizes[g] = T * w[g] // total
    used = used + sizes[g]
  end
  local g = 0
  while used < T do
    g = g % G + 1
    if w[g] > 0 then
      sizes[g] = sizes[g] + 1
      used = used + 1
    end
  end
  return sizes
end

local function ends_of(sizes)
  local ends, sum = {}, 0
  for g, n in ipairs(sizes) do
    sum = sum + n
    ends[g] = sum
  end
  return tl.tensor(ends, { dtype = "int32" }):to(dev)
end

local function signature(sizes)
  local s = 0
  for g, n in ipairs(sizes) do s = s + g * n end
  return s
end

-- seconds per call of fn: warm-up, then the median of synchronised repeats
local function time(fn)
  for _ = 1, opts.warmup do fn() end
  local samples = {}
  for r = 1, opts.repeats do
    collectgarbage("step")
    sync()
    local t0 = tl.clock()
    fn()
    sync()
    samples[r] = tl.clock() - t0
  end
  return median(samples)
end

local function report(key, seconds)
  print(string.format("%s %.4f", key, seconds * 1e3))
end

local function randn(...)
  return tl.randn(...):to(dtype)
end

print(string.format("device %s", dev))
print(string.format("dtype %s", dtype))
tl.manual_seed(0)
for _, sh in ipairs(shapes) do
  local G, K, N, T = sh.G, sh.K, sh.N, sh.T
  local scale = 1 / math.sqrt(K)
  local A = randn(T, K, { device = dev }):requires_grad_()
  local B = (tl.randn(G, K, N, { device = dev }) * scale):to(dtype):requires_grad_()
  local gout = randn(T, N, { device = dev })
  print(string.format("%s_shape G=%d K=%d N=%d T=%d", sh.key, G, K, N, T))
  for _, split in ipairs({ { suffix = "", sizes = even_split(T, G) }, { suffix = "_uneven", sizes = uneven_split(T, G) } }) do
    local key = sh.key .. split.suffix
    local offsets = ends_of(split.sizes)
    if split.suffix == "_uneven" then
      local lo, hi, empty = math.huge, 0, 0
      for _, n in ipairs(split.sizes) do
        lo, hi = math.min(lo, n), math.max(hi, n)
        if n == 0 then empty = empty + 1 end
      end
      print(string.format("%s_signature %d", key, signature(split.sizes)))
      print(string.format("%s_groups min=%d max=%d empty=%d", key, lo, hi, empty))
    end
    report(key .. "_fwd_ms", time(function()
      tl.no_grad(function()
        local y <close> = tl.grouped_mm(A, B, offsets)
      end)
    end))
    report(key .. "_fwdbwd_ms", time(function()
      A.grad, B.grad = nil, nil
      local y <close> = tl.grouped_mm(A, B, offsets)
      y:backward(gout)
    end))
    A.grad, B.grad = nil, nil
    collectgarbage("collect")
  end

  if sh.key == "gmm64" then
    -- the loop: per-group leaves with the values of A's row blocks and B's matrices
    local sizes = even_split(T, G)
    local As, Bs, gs, start = {}, {}, {}, 1
    tl.no_grad(function()
      for g = 1, G do
        As[g] = A:narrow(1, start, sizes[g]):clone():requires_grad_()
        Bs[g] = B[g]:clone():requires_grad_()
        gs[g] = gout:narrow(1, start, sizes[g]):contiguous()
        start = start + sizes[g]
      end
    end)
    -- the loop computes what grouped_mm computes
    do
      local ok, diff = pcall(function()
        return tl.no_grad(function()
          local y = tl.grouped_mm(A, B, ends_of(sizes))
          local worst, row = 0, 1
          for g = 1, G do
            local d = (y:narrow(1, row, sizes[g]):float() - As[g]:matmul(Bs[g]):float()):abs():max():item()
            worst = math.max(worst, d)
            row = row + sizes[g]
          end
          return worst
        end)
      end)
      print(ok and string.format("check_max_abs_diff %.3g", diff) or ("check_failed " .. tostring(diff):gsub("%s", "_")))
    end
    report("loop64_fwd_ms", time(function()
      tl.no_grad(function()
        for g = 1, G do
          local y <close> = As[g]:matmul(Bs[g])
        end
      end)
    end))
    report("loop64_fwdbwd_ms", time(function()
      for g = 1, G do
        As[g].grad, Bs[g].grad = nil, nil
        local y <close> = As[g]:matmul(Bs[g])
        y:backward(gs[g])
      end
    end))
    As, Bs, gs = nil, nil, nil
  end
  A, B, gout = nil, nil, nil
  collectgarbage("collect")
  collectgarbage("collect")
end

-- the Hopper core's check against cuBLAS: a dense bf16 product, 4096^3, as grouped_mm with one group
-- (the core on a Hopper GPU) and as tl.matmul (cuBLAS), in the same run
if cuda and not opts.small then
  local M = 4096
  local A = randn(M, M, { device = dev })
  local B = randn(1, M, M, { device = dev })
  local B1 = B:select(1, 1)
  local offsets = tl.tensor({ M }, { dtype = "int32" }):to(dev)
  local function core() tl.no_grad(function() local y <close> = tl.grouped_mm(A, B, offsets) end) end
  local function cublas() tl.no_grad(function() local y <close> = A:matmul(B1) end) end
  local t_core, t_blas = time(core), time(cublas)
  t_core, t_blas = math.min(t_core, time(core)), math.min(t_blas, time(cublas))
  report("dense4096_core_ms", t_core)
  report("dense4096_cublas_ms", t_blas)
end
