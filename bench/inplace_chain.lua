-- In-place chain benchmark, tlua side: 8 square matmuls then a softmax over the last dim of
-- x [rows, cols], in place (x:matmul_(W) ..., x:softmax_(-1)) and out of place (x:matmul(W) ...),
-- under no_grad and as a training step with the weights frozen and x requiring grad
-- (h = x:clone(), the chain on h, h:sum():backward()). For each: the median time of one chain
-- (synchronised, after warm-up; in place and out of place alternate, so that drift hurts both
-- alike) and the peak of tensor storage above the inputs (x and the weights, counted right after
-- they are made) over the activation's bytes (x's). Prints "key value" lines;
-- scripts/bench (CPU) and scripts/bench-cuda (GPU) compare them with bench/inplace_chain.py.
-- usage: tlua bench/inplace_chain.lua [--device cpu|cuda] [--rows N] [--cols N] [--layers N]
--          [--dtype float32|bfloat16|...] [--threads N] [--repeats N] [--warmup N]
-- defaults: cuda: 65536 x 1024 bfloat16, 50 repeats; cpu: 32768 x 512 float32, 5 repeats
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local opts = { device = "cpu", layers = 8 }
local strings = { device = true, dtype = true }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  local known = name and (strings[name] or name == "rows" or name == "cols" or name == "layers"
    or name == "threads" or name == "repeats" or name == "warmup")
  if not known or arg[i + 1] == nil then
    error("bench/inplace_chain.lua: unknown argument '" .. tostring(arg[i]) .. "'", 0)
  end
  opts[name] = strings[name] and arg[i + 1] or math.tointeger(tonumber(arg[i + 1]))
  if not opts[name] then error("bench/inplace_chain.lua: --" .. name .. " needs an integer", 0) end
  i = i + 2
end
local cuda = opts.device ~= "cpu"
local defaults = cuda and { rows = 65536, cols = 1024, dtype = "bfloat16", repeats = 50, warmup = 5 }
  or { rows = 32768, cols = 512, dtype = "float32", repeats = 5, warmup = 1 }
for k, v in pairs(defaults) do if opts[k] == nil then opts[k] = v end end
if opts.threads then tl.set_num_threads(opts.threads) end
local dev = opts.device

local function sync() if cuda then tl.cuda.synchronize() end end
local function allocated() return tl.memory_stats(dev).allocated end

local elem = { float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2 }
local act_bytes = opts.rows * opts.cols * assert(elem[opts.dtype], "unknown dtype " .. opts.dtype)

-- the inputs, then the bytes they hold (every temporary of their making collected)
tl.manual_seed(0)
local x = tl.randn(opts.rows, opts.cols, { device = dev }):to(opts.dtype)
local ws = {}
for l = 1, opts.layers do
  ws[l] = (tl.randn(opts.cols, opts.cols, { device = dev }) * (1 / math.sqrt(opts.cols))):to(opts.dtype)
end
collectgarbage("collect")
collectgarbage("collect")
sync()
local inputs = allocated()

-- the chains; out of place, each intermediate is released as soon as the next one exists
-- (<close>), as PyTorch's reference counting does
local function chain_inplace(h)
  for l = 1, #ws do h:matmul_(ws[l]) end
  h:softmax_(-1)
end

local function chain_outplace(y)
  y = y:matmul(ws[1])
  for l = 2, #ws do
    local prev <close> = y
    y = prev:matmul(ws[l])
  end
  local prev <close> = y
  return prev:softmax(-1)
end

local function infer_inplace() tl.no_grad(function() chain_inplace(x) end) end
local function infer_outplace()
  tl.no_grad(function()
    local y <close> = chain_outplace(x)
  end)
end

-- training with frozen weights: x.grad is dropped first, so every step starts alike; the Lua
-- references to h (in place) and to the result (out of place) go before backward, so that the
-- in-place backward may write over what nothing else holds
local function train_inplace()
  x.grad = nil
  local loss <close> = (function()
    local h <close> = x:clone()
    chain_inplace(h)
    return h:sum()
  end)()
  loss:backward()
end
local function train_outplace()
  x.grad = nil
  local loss <close> = (function()
    local y <close> = chain_outplace(x)
    return y:sum()
  end)()
  loss:backward()
end

-- peak above the inputs over the activation, for one call of fn from a collected state
local function peak_ratio(fn)
  x.grad = nil
  collectgarbage("collect")
  collectgarbage("collect")
  sync()
  tl.reset_peak_memory_stats(dev)
  fn()
  sync()
  local peak = tl.memory_stats(dev).peak
  x.grad = nil
  collectgarbage("collect")
  return (peak - inputs) / act_bytes
end

-- medians of seconds per call of each fn, the fns alternating within each repeat
local function times(fns)
  for _, fn in ipairs(fns) do
    for _ = 1, opts.warmup do fn() end
  end
  local samples = {}
  for k = 1, #fns do samples[k] = {} end
  for r = 1, opts.repeats do
    for k, fn in ipairs(fns) do
      collectgarbage("step")
      sync()
      local t0 = tl.clock()
      fn()
      sync()
      samples[k][r] = tl.clock() - t0
    end
  end
  local out = {}
  for k = 1, #fns do out[k] = median(samples[k]) end
  return out
end

print(string.format("shape %dx%d", opts.rows, opts.cols))
print(string.format("dtype %s", opts.dtype))
print(string.format("activation_mib %.1f", act_bytes / 2 ^ 20))
print(string.format("inputs_mib %.1f", inputs / 2 ^ 20))

-- the two chains agree (on a copy: x stays as it is)
do
  local a <close> = x:clone()
  tl.no_grad(function() chain_inplace(a) end)
  local b <close> = tl.no_grad(function() return chain_outplace(x) end)
  local d <close> = (a:float() - b:float()):abs():max()
  print(string.format("check_max_abs_diff %.3g", d:item()))
end
collectgarbage("collect")

local t = times({ infer_inplace, infer_outplace })
print(string.format("infer_inplace_ms %.3f", t[1] * 1e3))
print(string.format("infer_outplace_ms %.3f", t[2] * 1e3))
print(string.format("infer_inplace_peak %.3f", peak_ratio(infer_inplace)))
print(string.format("infer_outplace_peak %.3f", peak_ratio(infer_outplace)))

x:requires_grad_(true)
t = times({ train_inplace, train_outplace })
print(string.format("train_inplace_ms %.3f", t[1] * 1e3))
print(string.format("train_outplace_ms %.3f", t[2] * 1e3))
print(string.format("train_inplace_peak %.3f", peak_ratio(train_inplace)))
print(string.format("train_outplace_peak %.3f", peak_ratio(train_outplace)))
x.grad = nil
collectgarbage("collect")
collectgarbage("collect")
-- what stays allocated besides the inputs once the runs are over, inside the peaks above
print(string.format("held_after_mib %.1f", (allocated() - inputs) / 2 ^ 20))
