-- Data-parallel training on the GPUs of this host: scaling of the char-GPT and the Fashion-MNIST
-- MLP (N ranks against one, each rank with the one-GPU batch), the communication backward did
-- not hide, and the same loss curve for N ranks of batch B as for one GPU of batch N * B.
--
--   tlua bench/data_parallel.lua [--nproc N] [--steps S] [--match_steps S] [--epochs E] [--bucket_mb X]
--                                [--log_every K] [--zero 1|0]
--
-- --zero 1 (default) adds ZeRO-1 (nn.DataParallel {shard_optimizer = true}, the examples'
-- --shard-optimizer): the char-GPT's and the MLP's scaling sharded, the optimizer state per
-- rank against the plain run's, and the sharded run's loss curve against plain data parallel's.
--
-- N defaults to the GPUs present (at least 2 are needed for the scaling and the match; with one
-- GPU the script runs the launcher with a world of one and says so). Prints one line per row
-- and "ratio" lines that scripts/bench-cuda collects.
local tl = require("tlua")
local common = require("bench.common")

local opts = common.options("data_parallel.lua", { nproc = 0, steps = 300, match_steps = 200, epochs = 2,
  bucket_mb = 0, log_every = 50, zero = 1 })
local gpus = tl.cuda.device_count()
if gpus == 0 then error("data_parallel.lua: no GPU", 0) end
local nproc = opts.nproc > 0 and opts.nproc or gpus
local bin = os.getenv("TLUA_BIN") or "build/tlua"
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local function run(command)
  local p = io.popen(command .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  if not ok then
    io.stderr:write(out)
    error(string.format("data_parallel.lua: '%s' failed (%s)", command, tostring(code)), 0)
  end
  return out
end

local function launch(n, script, args)
  if n == 1 then return run(string.format("%s %s %s", bin, script, args)) end
  return run(string.format("%s --nproc %d %s %s", bin, n, script, args))
end

local function read_csv_losses(path)
  local out = {}
  for line in io.lines(path) do
    local step, loss = line:match("^(%d+),([^,]+),")
    if step then out[tonumber(step)] = tonumber(loss) end
  end
  return out
end

print(string.format("data-parallel on %d of %d GPUs (%s)", nproc, gpus, bin))

-- ---- char-GPT: tokens/s of N ranks against one ----------------------------------------------
local gpt = "examples/gpt/train.lua"
local gpt_args = string.format("--device cuda --steps %d --eval-every 0 --eval-iters 1 --log-every 50 --dropout 0.2",
  opts.steps)
local function gpt_rate(n, extra)
  local out = launch(n, gpt, gpt_args .. " --csv " .. dir .. "/gpt_speed.csv " .. (extra or ""))
  -- the rate of the last logged interval (steady state), and the communication of that step
  local rate, comm, exposed
  for r, line in out:gmatch("step %d+ loss %S+ %((%d+) tokens/s([^\n]*)") do
    rate = tonumber(r)
    comm, exposed = line:match("all%-reduce (%S+) ms, (%S+) ms not hidden")
  end
  return rate, tonumber(comm), tonumber(exposed), tonumber(out:match("optimizer state: (%S+) MiB"))
end
local one = gpt_rate(1)
local many, comm, exposed, state_mib = gpt_rate(nproc)
print(string.format("(a) char-GPT (6x384, batch 64 x 256 per rank, bf16): 1 GPU %.0f tokens/s, %d GPUs %.0f tokens/s",
  one, nproc, many))
if comm then
  print(string.format("    per step: all-reduce %.2f ms, of which %.2f ms not hidden by backward", comm, exposed))
end
print(string.format("ratio gpt_scaling_%d %.3f (goal >= %s)", nproc, many / one, nproc == 2 and "1.9" or
  nproc == 4 and "3.7" or string.format("%.2f", 0.93 * nproc)))

-- ---- Fashion-MNIST MLP: samples/s -----------------------------------------------------------
local fm = "examples/fashion_mnist/train.lua"
local fm_args = string.format("--device cuda --epochs %d --schedule none --csv %s/fm.csv --log-every %d%s", opts.epochs,
  dir, opts.log_every, opts.bucket_mb > 0 and string.format(" --bucket-mb %g", opts.bucket_mb) or "")
local function fm_rate(n, extra)
  local out = launch(n, fm, fm_args .. " " .. (extra or ""))
  local best = 0
  for r in out:gmatch("(%d+) samples/s%)") do best = math.max(best, tonumber(r)) end
  return best
end
local fm_one, fm_many = fm_rate(1), fm_rate(nproc)
print(string.format("(b) Fashion-MNIST MLP (batch 128 per rank): 1 GPU %.0f samples/s, %d GPUs %.0f samples/s",
  fm_one, nproc, fm_many))
print(string.format("ratio mlp_scaling_%d %.3f (goal >= %s)", nproc, fm_many / fm_one, nproc == 2 and "1.9" or
  nproc == 4 and "3.7" or string.format("%.2f", 0.93 * nproc)))
-- the step captured into a CUDA graph (--graph true), on one GPU and on N
local fg_one, fg_many = fm_rate(1, "--graph true"), fm_rate(nproc, "--graph true")
print(string.format("(b') the MLP's step in a CUDA graph: 1 GPU %.0f samples/s, %d GPUs %.0f samples/s", fg_one, nproc,
  fg_many))
print(string.format("ratio mlp_graph_scaling_%d %.3f (against the eager 1 GPU: %.3f)", nproc, fg_many / fg_one,
  fg_many / fm_one))

-- ---- the same loss curve: N ranks of batch B against 1 GPU of batch N * B --------------------
if nproc > 1 then
  local B = 64 // nproc
  local common_args = string.format("--device cuda --steps %d --eval-every 0 --eval-iters 1 --log-every 50 --dropout 0",
    opts.match_steps)
  launch(1, gpt, string.format("%s --batch %d --csv %s/one.csv", common_args, B * nproc, dir))
  launch(nproc, gpt, string.format("%s --batch %d --csv %s/many.csv", common_args, B, dir))
  launch(1, gpt, string.format("%s --batch %d --dtype float32 --csv %s/f32.csv", common_args, B * nproc, dir))
  local a, b, f = read_csv_losses(dir .. "/one.csv"), read_csv_losses(dir .. "/many.csv"),
    read_csv_losses(dir .. "/f32.csv")
  local diff, noise, max_diff, max_noise, n = 0, 0, 0, 0, 0
  for step = 1, opts.match_steps do
    if a[step] and b[step] and f[step] then
      local d, e = math.abs(a[step] - b[step]), math.abs(a[step] - f[step])
      diff, noise, n = diff + d, noise + e, n + 1
      max_diff, max_noise = math.max(max_diff, d), math.max(max_noise, e)
    end
  end
  print(string.format("(c) loss curves, %d steps: %d GPUs x batch %d vs 1 GPU x batch %d: mean |diff| %.4f (max %.4f); " ..
    "bf16 noise (1 GPU bf16 vs float32): mean %.4f (max %.4f): %s", n, nproc, B, B * nproc, diff / n, max_diff,
    noise / n, max_noise, diff / n <= noise / n and "PASS" or "FAIL"))
else
  print("(c) loss curves: needs 2 GPUs or more (this host has one)")
end
-- ---- ZeRO-1: the optimizer state sharded -----------------------------------------------------
if nproc > 1 and opts.zero == 1 then
  local z_many, z_comm, z_exposed, z_state = gpt_rate(nproc, "--shard-optimizer")
  print(string.format("(d) ZeRO-1 char-GPT: %d GPUs %.0f tokens/s (plain %.0f); optimizer state on rank 0 %.2f MiB, " ..
    "plain %.2f MiB (%.3f of it)", nproc, z_many, many, z_state or -1, state_mib or -1, (z_state or 0) / (state_mib or 1)))
  if z_comm then
    print(string.format("    per step: reduce-scatter %.2f ms, of which %.2f ms not hidden by backward", z_comm, z_exposed))
  end
  print(string.format("ratio zero_gpt_scaling_%d %.3f (goal >= %s)", nproc, z_many / one, nproc == 2 and "1.9" or
    string.format("%.2f", 0.93 * nproc)))
  print(string.format("ratio zero_state_per_rank_%d %.3f (goal <= %.3f)", nproc, (z_state or 0) / (state_mib or 1),
    1 / nproc + 0.02))
  local z_fm = fm_rate(nproc, "--shard-optimizer")
  print(string.format("(e) ZeRO-1 Fashion-MNIST MLP: %d GPUs %.0f samples/s (plain %.0f)", nproc, z_fm, fm_many))
  print(string.format("ratio zero_mlp_scaling_%d %.3f", nproc, z_fm / fm_one))
  -- the same loss curve: sharded against plain, both N ranks of batch B (bf16: within its noise)
  local B = 64 // nproc
  local common_args = string.format("--device cuda --steps %d --eval-every 0 --eval-iters 1 --log-every 50 --dropout 0",
    opts.match_steps)
  launch(nproc, gpt, string.format("%s --batch %d --csv %s/plain.csv", common_args, B, dir))
  launch(nproc, gpt, string.format("%s --batch %d --shard-optimizer --csv %s/zero.csv", common_args, B, dir))
  launch(1, gpt, string.format("%s --batch %d --dtype float32 --csv %s/f32z.csv", common_args, B * nproc, dir))
  local a, b, f = read_csv_losses(dir .. "/plain.csv"), read_csv_losses(dir .. "/zero.csv"),
    read_csv_losses(dir .. "/f32z.csv")
  local diff, noise, n = 0, 0, 0
  for step = 1, opts.match_steps do
    if a[step] and b[step] and f[step] then
      diff, noise, n = diff + math.abs(a[step] - b[step]), noise + math.abs(a[step] - f[step]), n + 1
    end
  end
  print(string.format("(f) loss curves, %d steps: ZeRO-1 vs plain, %d GPUs x batch %d: mean |diff| %.4f; bf16 noise " ..
    "%.4f: %s", n, nproc, B, diff / n, noise / n, diff / n <= noise / n and "PASS" or "FAIL"))
end
os.execute("rm -rf " .. dir)
