-- Trains a character-level GPT (examples/gpt/model.lua) on a text corpus (default: Debian's fortunes) and reports the training and validation loss.
--
--   tlua examples/gpt/train.lua [--preset char|gpt2] [--steps N] [--layers N] [--dim N] [--heads N]
--        [--context N] [--batch N] [--lr X] [--device cpu|cuda] [--dtype float32|bfloat16|float16|float64]
--        [--data path] [--save path] [--csv path] [--moe E] [--sparse-ffn D] ...
--        [--checkpoint path] [--checkpoint-every N] [--resume path] [--stop-after N]
--
-- --preset gpt2 is GPT-2 small's shape (124M parameters with OpenAI's vocabulary; byte-level
-- here); the default, --preset char, a character-level model. Options given beside a preset
-- override its values.
--
-- Prints `step N loss X` lines (with tokens/s and the model FLOPs utilisation, MFU) every
-- --log-every steps and a progress bar in between, writes every step's loss to a CSV file,
-- evaluates the validation loss every --eval-every steps and at the end, and with --save writes the model (safetensors, with the
-- config and the vocabulary in its metadata) for examples/gpt/sample.lua, which also samples
-- from a --checkpoint file (it carries the same metadata).
--
-- Resuming: --checkpoint path writes the whole run (model, AdamW, the schedule, the RNG, the
-- batch sampler's position, the step and the losses not yet logged; tl.checkpoint) every
-- --checkpoint-every steps and at the end; --resume path goes on from one (with the same options)
-- and ends bitwise where the uninterrupted run ends, on the CPU.
--
-- Data-parallel: `tlua --nproc N examples/gpt/train.lua ...` trains on N GPUs (nn.DataParallel);
-- --batch is each rank's, every rank draws the same global batch of batch * N windows and keeps
-- its part, and rank 0 logs, writes the CSV and saves.
local tl = require("tlua")
local optim = tl.optim
local progress = require("tlua.progress")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local gpt = require("model")
local data = require("data")

-- ---- arguments ------------------------------------------------------------------------------
local usage = [[
usage: tlua examples/gpt/train.lua [options]
  --preset NAME      the defaults of the options below (given options override them):
                     char (the default): nanoGPT's shakespeare-char shape on cuda, a small
                       model on the cpu, the values below;
                     gpt2: GPT-2 small: 12 layers, dim 768, 12 heads, context 1024, biases,
                       lr 6e-4; batch 16 and 2000 steps on cuda (batch 4, 50 steps on the cpu)
  --steps N          optimizer steps (default 2000 on cuda, 300 on the cpu)
  --layers N         transformer blocks (default 6 on cuda, 2 on the cpu)
  --dim N            model width (default 384 on cuda, 64 on the cpu)
  --heads N          attention heads (default 6 on cuda, 4 on the cpu)
  --context N        tokens per sequence (default 256 on cuda, 64 on the cpu)
  --batch N          sequences per step and rank (default 64 on cuda, 16 on the cpu)
  --bias true|false  biases in the Linears and LayerNorms (default false)
  --lr X             peak learning rate of AdamW (default 1e-3), warmed up over --warmup
                     steps then annealed along a cosine to lr / 10
  --warmup N         warm-up steps (default steps / 20)
  --weight-decay X   AdamW's decoupled weight decay on matrices (default 0.1)
  --grad-clip X      clip the gradients' global norm (default 1; 0 turns it off)
  --dropout X        dropout (default 0)
  --device cpu|cuda  where to train (default cpu)
  --dtype T          float32 (default on the cpu), bfloat16 (autocast: GEMMs and attention in
                     bf16, float32 master weights; default on cuda), float16, float64
  --data path        a text file, or a folder of text files (default the fortunes folder,
                     /usr/share/games/fortunes)
  --save path        write the trained model there (safetensors) for sample.lua
  --csv path         the loss of every step (default gpt_loss.csv, next to --save if given)
  --plot             draw the loss history as a PNG beside the CSV (its name ending .png; gnuplot)
  --eval-every N     validation loss every N steps (default 250; 0: only at the end)
  --eval-iters N     batches per validation loss (default 20)
  --log-every N      a `step N loss X` line every N steps (default 50), with tokens/s and the
                     MFU: model FLOPs (6 per parameter, the position embedding left out, and
                     the attention's, per token) over the GPU's dense peak for --dtype (H100,
                     H200: 989.4 TFLOP/s bf16, 67 float32; A100: 312, 19.5); "?" on the cpu or
                     an unknown GPU
  --peak-tflops X    the peak TFLOP/s of one device for the MFU, instead of the table
  --moe E            the feed-forward is a mixture of E experts, top 2 (grouped_mm)
  --sparse-ffn D     the feed-forward's Linears are BlockSparseLinear keeping a share D of blocks
  --block N          the block size of --sparse-ffn (default 32)
  --attention fused|composed  the attention kernel, or matmul + softmax (default fused)
  --seed N           seed of the initialisation and the batches (default 1337)
  --graph true|false capture the training step (forward, backward, clipping, AdamW; with data
                     parallel its all-reduces too) once into a CUDA graph after one eager step and
                     replay it (tl.cuda.graph; default true on GPUs without --moe or --sparse-ffn,
                     false otherwise)
  --data-parallel    wrap the model in nn.DataParallel even in a world of one (its cost alone);
                     under tlua --nproc N (N > 1) it is always wrapped
  --shard-optimizer  ZeRO-1: nn.DataParallel {shard_optimizer = true}, each rank keeping the
                     AdamW state of its shard of the parameters (implies --data-parallel)
  --checkpoint path  write the run's state there (tl.checkpoint) every --checkpoint-every
                     steps and at the end, for --resume
  --checkpoint-every N  steps between checkpoints (default 500; 0: only at the end)
  --resume path      go on from a checkpoint of --checkpoint (give the same options)
  --stop-after N     stop after step N (writing the checkpoint), as an interrupted run
  --help             this text]]

local numeric = { steps = "integer", layers = "integer", dim = "integer", heads = "integer", context = "integer",
  batch = "integer", lr = "number", warmup = "integer", weight_decay = "number", grad_clip = "number",
  dropout = "number", eval_every = "integer", eval_iters = "integer", log_every = "integer", moe = "integer",
  sparse_ffn = "number", block = "integer", seed = "integer", checkpoint_every = "integer", stop_after = "integer",
  peak_tflops = "number" }
local text_options = { device = true, dtype = true, data = true, save = true, csv = true, attention = true,
  checkpoint = true, resume = true, preset = true, bias = true, graph = true }

local opts, fail = cli.parse(arg, { program = "train.lua", usage = usage, numeric = numeric, text = text_options,
  flags = { data_parallel = true, plot = true, shard_optimizer = true } })
if opts.shard_optimizer then opts.data_parallel = true end

local device = opts.device or "cpu"
if device ~= "cpu" and not device:match("^cuda") then fail("--device must be cpu or cuda") end
local on_gpu = device ~= "cpu"
-- presets: values of the options not given, those of `all` then the device's
local presets = {
  char = {
    all = { lr = 1e-3, bias = "false" },
    cuda = { steps = 2000, layers = 6, dim = 384, heads = 6, context = 256, batch = 64, dtype = "bfloat16" },
    cpu = { steps = 300, layers = 2, dim = 64, heads = 4, context = 64, batch = 16, dtype = "float32" },
  },
  gpt2 = { -- GPT-2 small (nanoGPT's train_gpt2 config: lr 6e-4, weight decay 0.1)
    all = { layers = 12, dim = 768, heads = 12, context = 1024, bias = "true", lr = 6e-4 },
    cuda = { steps = 2000, batch = 16, dtype = "bfloat16" },
    cpu = { steps = 50, batch = 4, dtype = "float32", log_every = 5, eval_every = 0, eval_iters = 2 },
  },
}
opts.preset = opts.preset or "char"
local preset = presets[opts.preset]
if not preset then
  local known = {}
  for name in pairs(presets) do known[#known + 1] = name end
  table.sort(known)
  fail(string.format("--preset: unknown preset '%s' (known: %s)", opts.preset, table.concat(known, ", ")))
end
for _, part in ipairs { preset.all, on_gpu and preset.cuda or preset.cpu } do
  for k, v in pairs(part) do
    if opts[k] == nil then opts[k] = v end
  end
end
if opts.bias ~= "true" and opts.bias ~= "false" then fail("--bias must be true or false") end
if opts.graph and opts.graph ~= "true" and opts.graph ~= "false" then fail("--graph must be true or false") end
if opts.peak_tflops and not (opts.peak_tflops > 0) then fail("--peak-tflops must be > 0") end
opts.warmup = opts.warmup or opts.steps // 20
opts.weight_decay = opts.weight_decay or 0.1
opts.grad_clip = opts.grad_clip or 1.0
opts.dropout = opts.dropout or 0
opts.eval_every = opts.eval_every or 250
opts.eval_iters = opts.eval_iters or 20
opts.log_every = opts.log_every or 50
opts.seed = opts.seed or 1337
opts.checkpoint_every = opts.checkpoint_every or 500
if opts.checkpoint_every < 0 then fail("--checkpoint-every must be >= 0") end
if opts.stop_after and opts.stop_after < 1 then fail("--stop-after must be >= 1") end
local dtypes = { float32 = true, bfloat16 = true, float16 = true, float64 = true }
if not dtypes[opts.dtype] then fail("--dtype must be float32, bfloat16, float16 or float64") end
for _, k in ipairs { "steps", "layers", "dim", "heads", "context", "batch", "eval_iters", "log_every", "block" } do
  if opts[k] and opts[k] < 1 then fail("--" .. k:gsub("_", "-") .. " must be at least 1") end
end
if opts.dim % opts.heads ~= 0 then fail("--dim must be a multiple of --heads") end
if opts.sparse_ffn and not (opts.sparse_ffn > 0 and opts.sparse_ffn <= 1) then fail("--sparse-ffn must be in (0, 1]") end
if opts.moe and opts.moe < 2 then fail("--moe needs at least 2 experts") end
if opts.attention and opts.attention ~= "fused" and opts.attention ~= "composed" then
  fail("--attention must be fused or composed")
end
if not opts.csv then
  local dir = opts.save and opts.save:match("^(.*)/[^/]*$")
  opts.csv = (dir and dir ~= "" and (dir .. "/") or "") .. "gpt_loss.csv"
end
if opts.plot then require("tlua.plot").gnuplot() end -- --plot without gnuplot fails now, not after training

-- ---- data and model -------------------------------------------------------------------------
local dist = tl.distributed
local rank, world = dist.rank(), dist.world_size()
-- the step in a CUDA graph (below): on a GPU, without the MoE's or the sparse FFN's host-side
-- choices; by default on one GPU, and with data parallel too (its collectives are captured)
local graphable = on_gpu and (opts.moe or 0) == 0 and (opts.sparse_ffn or 0) == 0
if opts.graph == "true" and not graphable then
  fail("--graph true needs --device cuda, and no --moe or --sparse-ffn")
end
local use_graph = opts.graph == "true" or (opts.graph == nil and graphable)
local function say(...) if rank == 0 then print(...) end end
tl.manual_seed(opts.seed)
local ds = data.Dataset.load { path = opts.data, device = device }
-- parameters in float32 under autocast (the master weights), in float64 for float64 runs
local param_dtype = opts.dtype == "float64" and "float64" or "float32"
local autocast_dtype = (opts.dtype == "bfloat16" or opts.dtype == "float16") and opts.dtype or false
local config = gpt.config {
  vocab = ds.vocab.size, context = opts.context, layers = opts.layers, dim = opts.dim, heads = opts.heads,
  bias = opts.bias == "true", dropout = opts.dropout, moe = opts.moe or 0, sparse_ffn = opts.sparse_ffn or 0,
  block = opts.block or 32, attention = opts.attention or "fused", dtype = param_dtype, device = device,
}
local model = gpt.GPT(config)
local inner = model
if world > 1 or opts.data_parallel then
  -- rank 0's weights everywhere; gradients averaged in backward (reduce-scattered to each rank's
  -- shard with --shard-optimizer)
  model = tl.nn.DataParallel(model, { shard_optimizer = opts.shard_optimizer or false })
  tl.manual_seed(opts.seed + 7919 * rank) -- each rank its own dropout masks
end
local draw, drawn = ds:sampler(opts.seed)

-- AdamW as nanoGPT: weight decay on matrices (2 dims or more), none on biases and norms
local decay, no_decay = {}, {}
for _, p in ipairs(inner:parameters()) do
  if #p.shape >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
end
local opt = optim.AdamW({ { params = decay, weight_decay = opts.weight_decay }, { params = no_decay, weight_decay = 0 } },
  { lr = opts.lr, betas = { 0.9, 0.99 }, eps = 1e-8 })
local schedule = optim.WarmupCosineLR(opt, { warmup_steps = opts.warmup, total_steps = opts.steps, min_ratio = 0.1 })

say(string.format("gpt: %d layers, dim %d, %d heads, context %d, vocab %d (%d bytes of text), %.2fM parameters",
  config.layers, config.dim, config.heads, config.context, config.vocab, ds.bytes, inner:num_parameters() / 1e6))
say(string.format("     preset %s, batch %d%s, %d steps, lr %g, %s on %s%s%s", opts.preset, opts.batch,
  world > 1 and string.format(" on each of %d ranks", world) or "", opts.steps, opts.lr, opts.dtype, device,
  config.moe > 0 and string.format(", %d experts", config.moe) or "",
  config.sparse_ffn > 0 and string.format(", sparse feed-forward %.2f", config.sparse_ffn) or ""))

-- the model FLOPs utilisation: a token's FLOPs times tokens/s per device, over the device's peak
local flops_per_token = gpt.flops_per_token(config)
local peak_tflops, peak_from = opts.peak_tflops, "--peak-tflops"
if not peak_tflops and on_gpu then
  local ok, name = pcall(tl.cuda.get_device_name, device)
  peak_from = ok and name or "an unknown device"
  peak_tflops = ok and gpt.peak_tflops(name, opts.dtype) or nil
end
local function mfu(tokens_per_s)
  if not peak_tflops then return "?" end
  return string.format("%.1f%%", 100 * flops_per_token * tokens_per_s / world / (peak_tflops * 1e12))
end
say(string.format("     %.3g GFLOP per token; MFU against %s", flops_per_token / 1e9,
  peak_tflops and string.format("%g TFLOP/s (%s, %s)", peak_tflops, peak_from, opts.dtype) or
  "no known peak (--peak-tflops X gives one)"))

local function forward(x, y)
  if autocast_dtype then return tl.autocast(autocast_dtype, model, x, y) end
  return model(x, y)
end

--- the mean loss over eval_iters batches of a split, in eval mode and without gradients
local function estimate_loss(split)
  model:eval()
  local total = 0
  tl.no_grad(function()
    for _ = 1, opts.eval_iters do
      local x, y = ds:batch(split, opts.batch, opts.context)
      local _, loss = forward(x, y)
      total = total + loss:detach()
    end
  end)
  model:train()
  if world > 1 then dist.all_reduce(total, "avg") end
  return total:item() / opts.eval_iters
end

local function sync()
  if on_gpu then tl.cuda.synchronize() end
end

-- ---- checkpoints -----------------------------------------------------------------------------
-- the options a resumed run must share with the run it goes on from
local run_args = {}
for _, k in ipairs { "steps", "layers", "dim", "heads", "context", "batch", "lr", "warmup", "weight_decay", "grad_clip",
  "dropout", "dtype", "seed", "moe", "sparse_ffn", "block", "attention", "bias" } do
  run_args[k] = opts[k] == nil and "" or opts[k]
end
run_args.world, run_args.vocab = world, ds.vocab.size
local objects = { model = inner, optimizer = opt, scheduler = schedule }

-- where the run is: the last step done, the losses and lrs of the steps not yet logged (read from
-- the device: numbers), the last logged loss, the windows the sampler drew
local run = { step = 0, pending = {}, pending_lr = {}, last_loss = nil, drawn = 0 }
if opts.resume then
  run = cli.resume(opts.resume, objects, run_args, fail)
  draw, drawn = ds:sampler(opts.seed, run.drawn)
  say(string.format("resumed from %s at step %d", opts.resume, run.step))
end

-- ---- training -------------------------------------------------------------------------------
-- rank 0 writes the CSV (the other ranks' losses are their own batches'); a resumed run keeps
-- the rows up to its checkpoint's step and appends
local function open_csv()
  if rank ~= 0 then return { write = function() end, close = function() end } end
  return cli.csv(opts.csv, "step,loss,lr\n", 1, opts.resume and run.step)
end
local csv = open_csv()
local params = model:parameters()
local tokens_per_step = opts.batch * opts.context * world
-- the last log_every losses stay on the device until a log line (or a checkpoint) reads them (one
-- wait); written is how many of them the CSV has
local pending, pending_lr, written = run.pending, run.pending_lr, #run.pending
local bar = progress.new { total = opts.steps, label = "train", unit = "step", rate = "tokens" }
sync()
local start, interval_start, interval_steps = tl.clock(), tl.clock(), 0
local last_loss, val_loss = run.last_loss, nil

-- the pending losses as numbers, the ones not yet in the CSV written there
local function write_pending(step)
  for k = written + 1, #pending do
    if tl.is_tensor(pending[k]) then pending[k] = pending[k]:item() end
    csv:write(string.format("%d,%.6f,%.6g\n", step - #pending + k, pending[k], pending_lr[k]))
  end
  written = #pending
end

local function flush(step)
  write_pending(step)
  local sum = 0
  for _, v in ipairs(pending) do sum = sum + v end
  local mean = sum / #pending
  pending, pending_lr, written = {}, {}, 0
  return mean
end

local function save_checkpoint(step)
  if not opts.checkpoint then return end
  write_pending(step)
  -- every rank saves: its RNG state goes into the file (each rank draws its own dropout masks);
  -- rank 0 writes it
  run = { step = step, pending = pending, pending_lr = pending_lr, last_loss = last_loss, drawn = drawn() }
  tl.checkpoint.save(opts.checkpoint, { model = inner, optimizer = opt, scheduler = schedule, step = step,
    extra = { args = run_args, run = run } }, { metadata = data.model_metadata(ds.vocab, config) })
end

local function train_step(x, y)
  local _, loss = forward(x, y)
  loss:backward()
  if opts.grad_clip > 0 then optim.clip_grad_norm(params, opts.grad_clip) end
  opt:step()
  opt:zero_grad()
  return loss
end
-- the step in a CUDA graph: captured at the second step, replayed from then on (its loss is the same
-- tensor at every replay, so the one kept for the log is a copy)
local step_fn = use_graph and tl.cuda.graph(train_step, { warmup = 1 }) or train_step

local first_step, last_step = run.step + 1, opts.stop_after and math.min(opts.stop_after, opts.steps) or opts.steps
for step = first_step, last_step do
  local x, y = draw("train", opts.batch, opts.context, rank, world)
  local loss = step_fn(x, y)
  local logged = use_graph and loss:detach():clone() or loss:detach()
  if world > 1 then logged = dist.all_reduce(logged:clone(), "avg") end -- the global batch's loss
  pending[#pending + 1], pending_lr[#pending_lr + 1] = logged, opt.param_groups[1].lr
  schedule:step()
  interval_steps = interval_steps + 1
  if step % opts.log_every == 0 or step == opts.steps then
    last_loss = flush(step)
    sync()
    local now = tl.clock()
    local rate = interval_steps * tokens_per_step / (now - interval_start)
    bar:clear()
    local comm = ""
    if model ~= inner then
      local st = model:stats()
      if st.comm_ms then
        comm = string.format(", all-reduce %.2f ms, %.2f ms not hidden by backward", st.comm_ms, st.exposed_ms)
      end
    end
    say(string.format("step %d loss %.4f (%.0f tokens/s, %.1f ms/step, MFU %s%s)", step, last_loss, rate,
      1000 * (now - interval_start) / interval_steps, mfu(rate), comm))
    interval_start, interval_steps = tl.clock(), 0
  end
  if opts.eval_every > 0 and step % opts.eval_every == 0 and step < opts.steps then
    bar:clear()
    local v = estimate_loss("val")
    say(string.format("step %d val loss %.4f", step, v))
    interval_start, interval_steps = tl.clock(), 0
  end
  bar:update(step, { loss = last_loss, samples = tokens_per_step })
  if opts.checkpoint_every > 0 and step % opts.checkpoint_every == 0 and step < last_step then
    save_checkpoint(step)
  end
end
save_checkpoint(last_step)
local elapsed = bar:finish()
csv:close()
if opts.plot and rank == 0 then -- --plot: the loss history drawn beside the CSV
  local png = opts.csv:gsub("%.csv$", "") .. ".png"
  require("tlua.plot").csv(opts.csv, { output = png, title = "gpt: loss" })
  print("loss plot: " .. png)
end
if last_step < opts.steps then
  say(string.format("stopped after step %d (--stop-after)%s", last_step,
    opts.checkpoint and ("; resume with --resume " .. opts.checkpoint) or ""))
  return
end
val_loss = estimate_loss("val")
say(string.format("done: %d steps in %.1f s (%.0f tokens/s), train loss %.4f, val loss %.4f", opts.steps,
  tl.clock() - start, (last_step - first_step + 1) * tokens_per_step / elapsed, last_loss, val_loss))
if rank == 0 then print("loss history: " .. opts.csv) end
say(string.format("optimizer state: %.2f MiB on rank 0%s", opt:state_bytes() / 2 ^ 20,
  opts.shard_optimizer and string.format(" (its shard of %d)", world) or ""))

if opts.save and rank == 0 then
  local sd = model:state_dict()
  local cpu = {}
  for name, t in pairs(sd) do cpu[name] = t:to("cpu") end
  tl.save(opts.save, cpu, data.model_metadata(ds.vocab, config))
  print("saved: " .. opts.save)
end
