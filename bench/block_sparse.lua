-- Block-sparse linear benchmark, tlua side: tl.block_sparse_linear against a dense tl.linear, forward (no_grad) and forward+backward, blocks of 32 and 64 at densities 50/25/10%.
--
-- Shape: x [rows, in] -> out (cuda: 8192 x 4096 -> 4096 bfloat16; cpu: 2048 x 2048 -> 2048 float32).
-- The pattern of each (block, density) is the one bench/block_sparse.py draws: block row r keeps
-- k = round(density * C) columns, the first k of a Fisher-Yates shuffle of 0 .. C-1 driven by an
-- LCG (s <- (1103515245 s + 12345) mod 2^31, s0 = 7919 r + 17 b + k; swap i with s mod (i + 1),
-- i from C-1 down to 1). forward+backward: x and the blocks require grad, y:backward(g) with a
-- fixed g, the grads dropped before each step. No bias (torch's sparse side takes none).
-- Each figure: the median time of one call (synchronised, after warm-up). Prints "key value"
-- lines: dense_fwd_ms, dense_fwdbwd_ms, b<block>_d<percent>_fwd_ms, ..._fwdbwd_ms.
-- usage: tlua bench/block_sparse.lua [--device cpu|cuda] [--repeats N] [--warmup N] [--threads N]
--          [--blocks 32,64] [--densities 50,25,10]
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local script = "bench/block_sparse.lua"
local opts = { device = "cpu", blocks = "32,64", densities = "50,25,10" }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  if name and opts[name] ~= nil and arg[i + 1] ~= nil then
    opts[name] = arg[i + 1]
  elseif (name == "repeats" or name == "warmup" or name == "threads") and arg[i + 1] ~= nil then
    opts[name] = math.tointeger(tonumber(arg[i + 1]))
    if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
  else
    error(script .. ": unknown argument '" .. tostring(arg[i]) .. "'", 0)
  end
  i = i + 2
end
local cuda = opts.device ~= "cpu"
opts.repeats = opts.repeats or (cuda and 30 or 3)
opts.warmup = opts.warmup or (cuda and 5 or 1)
if opts.threads then tl.set_num_threads(opts.threads) end
local dev = opts.device
local dtype = cuda and "bfloat16" or "float32"
local rows, IN, OUT = 8192, 4096, 4096
if not cuda then rows, IN, OUT = 2048, 2048, 2048 end

local function sync() if cuda then tl.cuda.synchronize() end end

local function time_ms(fn)
  for _ = 1, opts.warmup do fn() end
  sync()
  local t = {}
  for r = 1, opts.repeats do
    local start = tl.clock()
    fn()
    sync()
    t[r] = (tl.clock() - start) * 1000
  end
  return median(t)
end

local function list(s)
  local out = {}
  for v in s:gmatch("%d+") do out[#out + 1] = tonumber(v) end
  return out
end

-- the pattern shared with bench/block_sparse.py
local function pattern(R, C, block, density)
  local k = math.max(1, math.floor(density * C + 0.5))
  local mask = tl.zeros(R, C, { dtype = "bool" })
  for r = 0, R - 1 do
    local cols, s = {}, (7919 * r + 17 * block + k) % 2147483648
    for c = 0, C - 1 do cols[c] = c end
    for j = C - 1, 1, -1 do
      s = (1103515245 * s + 12345) % 2147483648
      local m = s % (j + 1)
      cols[j], cols[m] = cols[m], cols[j]
    end
    local row = mask[r + 1]
    for j = 0, k - 1 do row[cols[j] + 1] = true end
  end
  return mask
end

tl.manual_seed(0)
local x = tl.randn(rows, IN, { dtype = dtype, device = dev })
local g = tl.randn(rows, OUT, { dtype = dtype, device = dev })

local function report(key, fwd, step)
  print(string.format("%s_fwd_ms %.4f", key, tl.no_grad(function() return time_ms(fwd) end)))
  print(string.format("%s_fwdbwd_ms %.4f", key, time_ms(step)))
end

local w = (tl.randn(OUT, IN, { dtype = dtype, device = dev }) * 0.02):requires_grad_()
local xg = x:detach():requires_grad_()
report("dense", function() return tl.linear(x, w) end, function()
  xg.grad, w.grad = nil, nil
  tl.linear(xg, w):backward(g)
end)
w, xg = nil, nil
collectgarbage()

for _, block in ipairs(list(opts.blocks)) do
  for _, percent in ipairs(list(opts.densities)) do
    local m = tl.nn.BlockSparseLinear(IN, OUT, { block = block, mask = pattern(OUT // block, IN // block, block,
      percent / 100), bias = false, dtype = dtype, device = dev })
    local blocks, layout = m.blocks, m:layout()
    local xs = x:detach():requires_grad_()
    report(string.format("b%d_d%d", block, percent), function()
      return tl.block_sparse_linear(x, blocks, layout)
    end, function()
      xs.grad, blocks.grad = nil, nil
      tl.block_sparse_linear(xs, blocks, layout):backward(g)
    end)
    m, blocks, layout, xs = nil, nil, nil, nil
    collectgarbage()
  end
end
