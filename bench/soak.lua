-- Soak test: trains for thousands of steps (an MLP; a custom Function that saves its output) and reports the
-- resident set size (RSS) at intervals; fails when RSS grows by more than a threshold after warm-up.
--
--   tlua bench/soak.lua [--steps N] [--every N] [--warmup N] [--threshold MiB] [--part mlp|exp|exp_forward|all]
--                       [--data random|fashion] [--batch N] [--threads N] [--no-collect]
--
-- Parts (each runs --steps steps and is judged on its own):
--   mlp          784-512-256-10 ReLU MLP, Adam, cross entropy, batches of random data (or Fashion-MNIST)
--   exp          PyTorch's documented Exp Function (forward saves y = exp(x), backward returns grad * y) on a
--                1 MiB float32 input, then y:sum():backward(), every step
--   exp_forward  the same Function called every step without backward (the graph is dropped unused)
-- RSS is VmRSS of /proc/self/status, read after a full garbage collection (unless --no-collect), so growth
-- measures memory still held, not the collector's lag. Growth = last report - first report after warm-up.
-- scripts/soak sets MALLOC_MMAP_THRESHOLD_ so that freed tensors leave RSS (see scripts/soak --help).
-- Exit status: 0 when every part stays within the threshold, 1 otherwise, 2 for bad usage.
local tl = require("tlua")
local nn, optim = tl.nn, tl.optim

local usage = [[
usage: tlua bench/soak.lua [options]
  --steps N        steps of each part (default 3000)
  --every N        report RSS every N steps (default 250)
  --warmup N       steps before the baseline report (default 250)
  --threshold M    allowed RSS growth after warm-up, in MiB (default 10)
  --part P         mlp, exp, exp_forward or all (default all)
  --data D         random or fashion (Fashion-MNIST batches for the MLP; default random)
  --batch N        MLP batch size (default 128)
  --threads N      CPU threads
  --no-collect     read RSS without a full garbage collection first]]

local opts = { steps = 3000, every = 250, warmup = 250, threshold = 10, part = "all", data = "random", batch = 128 }
do
  local numeric = { steps = true, every = true, warmup = true, threshold = true, batch = true, threads = true }
  local i, argv = 1, arg or {}
  while i <= #argv do
    local key = argv[i]:match("^%-%-([%w-]+)$")
    if key == "help" then
      print(usage)
      os.exit(0)
    elseif key == "no-collect" then
      opts.no_collect = true
    elseif key and (numeric[key] or key == "part" or key == "data") and argv[i + 1] then
      local value = argv[i + 1]
      if numeric[key] then
        value = tonumber(value)
        if not value or value <= 0 then
          io.stderr:write("soak: --", key, " expects a number > 0\n", usage, "\n")
          os.exit(2)
        end
      end
      opts[key] = value
      i = i + 1
    else
      io.stderr:write("soak: unexpected argument '", argv[i], "'\n", usage, "\n")
      os.exit(2)
    end
    i = i + 1
  end
  local parts = { mlp = true, exp = true, exp_forward = true, all = true }
  if not parts[opts.part] or (opts.data ~= "random" and opts.data ~= "fashion") then
    io.stderr:write("soak: --part must be mlp, exp, exp_forward or all; --data random or fashion\n")
    os.exit(2)
  end
  if opts.warmup >= opts.steps then
    io.stderr:write("soak: --warmup must be smaller than --steps\n")
    os.exit(2)
  end
end
if opts.threads then tl.set_num_threads(math.tointeger(opts.threads)) end

-- ---- RSS ---------------------------------------------------------------------------------------------------
local function rss_mib()
  if not opts.no_collect then collectgarbage() end
  local f = assert(io.open("/proc/self/status", "r"))
  local text = f:read("a")
  f:close()
  local kib = assert(tonumber(text:match("VmRSS:%s*(%d+)%s*kB")), "no VmRSS in /proc/self/status")
  return kib / 1024
end

--- runs step(i) for opts.steps steps, printing RSS every opts.every steps; returns the growth after warm-up
local function soak(name, step)
  print(string.format("== %s: %d steps, RSS every %d steps (baseline after %d steps of warm-up)", name, opts.steps,
    opts.every, opts.warmup))
  local t0, baseline, last, peak = tl.clock(), nil, nil, 0
  local figures = {}
  for i = 1, opts.steps do
    step(i)
    if i == opts.warmup or i % opts.every == 0 or i == opts.steps then
      local rss = rss_mib()
      if i >= opts.warmup then
        baseline = baseline or rss
        last = rss
        peak = math.max(peak, rss)
      end
      figures[#figures + 1] = string.format("%d:%.1f", i, rss)
      print(string.format("  step %5d  RSS %8.1f MiB%s  (%.1f s)", i, rss,
        baseline and string.format("  %+7.2f MiB since warm-up", rss - baseline) or "", tl.clock() - t0))
    end
  end
  local growth = last - baseline
  local ok = growth <= opts.threshold
  print(string.format("%s: RSS %.1f MiB after warm-up, %.1f MiB at the end (peak %.1f): growth %+.2f MiB " ..
    "(%.2f KiB per step), threshold %g MiB: %s", name, baseline, last, peak, growth,
    growth * 1024 / (opts.steps - opts.warmup), opts.threshold, ok and "flat" or "GROWS"))
  return ok, growth
end

print(string.format("soak: RSS from /proc/self/status%s; malloc mmap threshold %s", opts.no_collect and "" or
  " after a full collection", os.getenv("MALLOC_MMAP_THRESHOLD_") or "glibc's adaptive default"))

-- ---- parts -------------------------------------------------------------------------------------------------
local function mlp_part()
  tl.manual_seed(0)
  local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
    nn.Linear(256, 10))
  local optimizer = optim.Adam(model:parameters(), { lr = 1e-3 })
  local loss_fn = nn.CrossEntropyLoss()
  local batch = math.tointeger(opts.batch)
  local images, labels
  if opts.data == "fashion" then
    local set = tl.data.FashionMNIST { train = true, normalize = true }
    images, labels = set.images, set.labels
  else
    images = tl.rand(4096, 1, 28, 28)
    labels = tl.randint(1, 11, { 4096 })
  end
  local n = images.shape[1]
  local loss
  return soak(string.format("mlp (784-512-256-10, Adam, batch %d, %s data)", batch, opts.data), function(i)
    local start = ((i - 1) * batch) % (n - batch + 1) + 1
    local x, y = images:narrow(1, start, batch), labels:narrow(1, start, batch)
    optimizer:zero_grad()
    loss = loss_fn(model(x), y)
    loss:backward()
    optimizer:step()
  end)
end

-- PyTorch's documented example of a custom Function that saves its output
local Exp = tl.autograd.Function {
  name = "Exp",
  forward = function(ctx, x)
    local y = x:exp()
    ctx:save_for_backward(y)
    return y
  end,
  backward = function(ctx, grad)
    return grad * ctx.saved_tensors[1]
  end,
}

local function exp_part(with_backward)
  tl.manual_seed(0)
  local x = (tl.rand(512, 512) * 0.1):requires_grad_() -- 262144 float32: 1 MiB
  local name = with_backward and "exp (custom Function saving its output, 1 MiB input, forward + backward)"
      or "exp_forward (the same Function, forward only)"
  return soak(name, function()
    local y = Exp(x)
    if with_backward then
      y:sum():backward()
      x.grad = nil
    end
  end)
end

-- ---- run ---------------------------------------------------------------------------------------------------
local results, failed = {}, 0
local parts = { { "mlp", mlp_part }, { "exp", function() return exp_part(true) end },
  { "exp_forward", function() return exp_part(false) end } }
for _, part in ipairs(parts) do
  if opts.part == "all" or opts.part == part[1] then
    local ok, growth = part[2]()
    results[#results + 1] = string.format("%s %+.2f MiB", part[1], growth)
    if not ok then failed = failed + 1 end
    print()
  end
end
print(string.format("soak: %s; threshold %g MiB: %s", table.concat(results, ", "), opts.threshold,
  failed == 0 and "flat" or (failed .. " part(s) grow")))
os.exit(failed == 0 and 0 or 1, true)
