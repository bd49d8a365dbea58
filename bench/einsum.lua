-- einsum benchmark, tlua side: attention's scores tl.einsum("bhqd,bhkd->bhqk", q, k) against the equivalent tl.matmul(q, k:transpose(3, 4)) in one run (einsum lowers to that one batched matmul over a transposed view: the ratio is einsum's overhead).
--
-- q [B, H, T, D], k [B, H, T, D]: cuda: B = 8, H = 16, T = 1024, D = 64 in bfloat16; cpu: B = 4,
-- H = 8, T = 256, D = 64 in float32. Each figure: the median milliseconds of one call (synchronised,
-- after warm-up). Prints "key value" lines: einsum_ms, matmul_ms, check_max_abs_diff.
-- usage: tlua bench/einsum.lua [--device cpu|cuda] [--repeats N] [--warmup N] [--threads N]
local tl = require("tlua")

local median = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua").median

local script = "bench/einsum.lua"
local opts = { device = "cpu" }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w_]+)$")
  if name == "device" and arg[i + 1] then
    opts.device = arg[i + 1]
  elseif (name == "repeats" or name == "warmup" or name == "threads") and arg[i + 1] then
    opts[name] = math.tointeger(tonumber(arg[i + 1]))
    if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
  else
    error(script .. ": unknown argument '" .. arg[i] .. "'", 0)
  end
  i = i + 2
end
local cuda = opts.device ~= "cpu"
if opts.threads then tl.set_num_threads(opts.threads) end
local B, H, T, D = 8, 16, 1024, 64
if not cuda then B, H, T = 4, 8, 256 end
local dtype = cuda and "bfloat16" or "float32"
local repeats, warmup = opts.repeats or (cuda and 50 or 20), opts.warmup or (cuda and 5 or 3)

local function sync() if cuda then tl.cuda.synchronize() end end
local function ms(fn)
  for _ = 1, warmup do fn() end
  local samples = {}
  for r = 1, repeats do
    sync()
    local t0 = tl.clock()
    fn()
    sync()
    samples[r] = (tl.clock() - t0) * 1e3
  end
  return median(samples)
end

tl.manual_seed(0)
local q = tl.randn(B, H, T, D, { dtype = dtype, device = opts.device })
local k = tl.randn(B, H, T, D, { dtype = dtype, device = opts.device })
tl.no_grad(function()
  local e = tl.einsum("bhqd,bhkd->bhqk", q, k)
  local m = tl.matmul(q, k:transpose(3, 4))
  print("check_max_abs_diff", (e:float() - m:float()):abs():max():item())
  -- alternate the two a few times so neither gets the warmer machine
  local te, tm = {}, {}
  for round = 1, 3 do
    te[round] = ms(function() return tl.einsum("bhqd,bhkd->bhqk", q, k) end)
    tm[round] = ms(function() return tl.matmul(q, k:transpose(3, 4)) end)
  end
  print("einsum_ms", median(te))
  print("matmul_ms", median(tm))
end)
