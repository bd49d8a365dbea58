-- Trains a character-level LSTM language model (examples/lstm/model.lua) on a text corpus (default: Debian's fortunes) with truncated backpropagation through time, reports the training and validation loss, and samples from it.
--
--   tlua examples/lstm/train.lua [--steps N] [--hidden N] [--layers N] [--embed N] [--bptt T]
--        [--batch B] [--lr X] [--grad-clip X] [--dropout X] [--device cpu|cuda] [--data path]
--        [--save path] [--checkpoint path] [--resume path] [--sample-tokens N] ...
--
-- The training text is cut into --batch parallel streams, read --bptt characters at a time; the
-- LSTM's state is carried from one chunk to the next (detached: the gradient stops at the chunk's
-- start) and reset at each pass over the text. AdamW with a warm-up and a cosine down to lr / 10,
-- the gradients' global norm clipped. Every step's loss goes to a CSV file; the validation loss
-- (bits per character too) every --eval-every steps and at the end; then a sample of
-- --sample-tokens characters. --save writes the model with its config and vocabulary for
-- examples/lstm/sample.lua (which also samples from a --checkpoint file: the same metadata).
--
-- Resuming: --checkpoint path writes the whole run (model, optimizer, schedule, the RNG, the step,
-- the position in the text and the carried LSTM state; tl.checkpoint) every --checkpoint-every
-- steps and at the end; --resume path goes on from one (with the same options) and ends bitwise
-- where the uninterrupted run ends, on the CPU.
local tl = require("tlua")
local nn, optim = tl.nn, tl.optim
local progress = require("tlua.progress")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../gpt/?.lua;" .. package.path
local lstm = require("model")
local data = require("data") -- examples/gpt/data.lua: the corpus and its vocabulary
local sampling = require("sampling") -- examples/gpt/sampling.lua

-- ---- arguments ------------------------------------------------------------------------------
local usage = [[
usage: tlua examples/lstm/train.lua [options]
  --steps N          optimizer steps (default 3000 on cuda, 300 on the cpu)
  --hidden N         LSTM width (default 512 on cuda, 128 on the cpu)
  --layers N         LSTM layers (default 2)
  --embed N          embedding width (default 64)
  --bptt T           characters a chunk: backpropagation through time stops there (default
                     128 on cuda, 64 on the cpu)
  --batch B          parallel streams of text (default 64 on cuda, 16 on the cpu)
  --lr X             peak learning rate of AdamW (default 2e-3), warmed up over --warmup
                     steps then annealed along a cosine to lr / 10
  --warmup N         warm-up steps (default steps / 20)
  --weight-decay X   AdamW's decoupled weight decay (default 0.01)
  --grad-clip X      clip the gradients' global norm (default 1; 0 turns it off)
  --dropout X        between the LSTM layers and before the head (default 0.1 on cuda, 0 on
                     the cpu)
  --device cpu|cuda  where to train (default cpu)
  --data path        a text file, or a folder of text files (default the fortunes folder,
                     /usr/share/games/fortunes)
  --save path        write the trained model there (safetensors) for sample.lua
  --csv path         the loss of every step (default lstm_loss.csv, next to --save if given)
  --plot             draw the loss history as a PNG beside the CSV (its name ending .png; gnuplot)
  --eval-every N     validation loss every N steps (default 500; 0: only at the end)
  --eval-chunks N    chunks of the validation text per evaluation (default 20)
  --log-every N      a `step N loss X` line every N steps (default 50)
  --sample-tokens N  characters sampled at the end (default 300; 0: none)
  --temperature X    of that sample (default 0.8)
  --seed N           seed of the initialisation, dropout and sampling (default 1)
  --threads N        CPU threads (default: the engine's default)
  --checkpoint path  write the run's state there (tl.checkpoint) every --checkpoint-every
                     steps and at the end, for --resume
  --checkpoint-every N  steps between checkpoints (default 500; 0: only at the end)
  --resume path      go on from a checkpoint of --checkpoint (give the same options)
  --stop-after N     stop after step N (writing the checkpoint), as an interrupted run
  --help             this text]]

local numeric = { steps = "integer", hidden = "integer", layers = "integer", embed = "integer", bptt = "integer",
  batch = "integer", lr = "number", warmup = "integer", weight_decay = "number", grad_clip = "number",
  dropout = "number", eval_every = "integer", eval_chunks = "integer", log_every = "integer",
  sample_tokens = "integer", temperature = "number", seed = "integer", threads = "integer",
  checkpoint_every = "integer", stop_after = "integer" }
local text_options = { device = true, data = true, save = true, csv = true, checkpoint = true, resume = true }
local opts, fail = cli.parse(arg, { program = "train.lua", usage = usage, numeric = numeric, text = text_options,
  flags = { plot = true },
  defaults = { layers = 2, embed = 64, lr = 2e-3, weight_decay = 0.01, grad_clip = 1, eval_every = 500,
    eval_chunks = 20, log_every = 50, sample_tokens = 300, temperature = 0.8, seed = 1, checkpoint_every = 500,
    device = "cpu" } })
if opts.device ~= "cpu" and not opts.device:match("^cuda") then fail("--device must be cpu or cuda") end
local on_gpu = opts.device ~= "cpu"
local function default(key, gpu_value, cpu_value)
  if opts[key] == nil then opts[key] = on_gpu and gpu_value or cpu_value end
end
default("steps", 3000, 300)
default("hidden", 512, 128)
default("bptt", 128, 64)
default("batch", 64, 16)
default("dropout", 0.1, 0)
opts.warmup = opts.warmup or opts.steps // 20
for _, k in ipairs { "steps", "hidden", "layers", "embed", "bptt", "batch", "eval_chunks", "log_every" } do
  if opts[k] < 1 then fail("--" .. k:gsub("_", "-") .. " must be at least 1") end
end
if not (opts.dropout >= 0 and opts.dropout < 1) then fail("--dropout must be in [0, 1)") end
if not (opts.temperature > 0) then fail("--temperature must be > 0") end
if opts.checkpoint_every < 0 or opts.eval_every < 0 or opts.sample_tokens < 0 then
  fail("--checkpoint-every, --eval-every and --sample-tokens must be >= 0")
end
if opts.stop_after and opts.stop_after < 1 then fail("--stop-after must be >= 1") end
if not opts.csv then
  local dir = opts.save and opts.save:match("^(.*)/[^/]*$")
  opts.csv = (dir and dir ~= "" and (dir .. "/") or "") .. "lstm_loss.csv"
end
if opts.plot then require("tlua.plot").gnuplot() end -- --plot without gnuplot fails now, not after training
if opts.threads then tl.set_num_threads(opts.threads) end

-- ---- data and model -------------------------------------------------------------------------
tl.manual_seed(opts.seed)
local ds = data.Dataset.load { path = opts.data, device = opts.device }
local train_streams = lstm.streams(ds.train, opts.batch)
local val_streams = lstm.streams(ds.val, opts.batch)
local per_epoch = lstm.chunks(train_streams, opts.bptt)
if per_epoch < 1 then fail(string.format("the training text is too short for --batch %d and --bptt %d", opts.batch,
  opts.bptt)) end
local config = lstm.config { vocab = ds.vocab.size, embed = opts.embed, hidden = opts.hidden, layers = opts.layers,
  dropout = opts.dropout }
local model = lstm.CharLSTM(config):to(opts.device)
local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })
local schedule = optim.WarmupCosineLR(opt, { warmup_steps = opts.warmup, total_steps = opts.steps, min_ratio = 0.1 })
local loss_fn = nn.CrossEntropyLoss()
print(string.format("lstm: %d layers of %d, embedding %d, vocab %d (%d bytes of text), %.2fM parameters",
  opts.layers, opts.hidden, opts.embed, ds.vocab.size, ds.bytes, model:num_parameters() / 1e6))
print(string.format("      %d streams x %d characters a chunk (%d chunks a pass), %d steps, lr %g, on %s", opts.batch,
  opts.bptt, per_epoch, opts.steps, opts.lr, opts.device))

local function sync()
  if on_gpu then tl.cuda.synchronize() end
end

--- the mean loss (nats a character) over the first eval_chunks chunks of the validation streams
local function evaluate()
  model:eval()
  local total, n = 0, math.min(opts.eval_chunks, lstm.chunks(val_streams, opts.bptt))
  tl.no_grad(function()
    local state
    for k = 1, n do
      local x, y = lstm.chunk(val_streams, opts.bptt, k)
      local logits
      logits, state = model(x, state)
      total = total + loss_fn(logits:reshape(-1, config.vocab), y:reshape(-1)):detach()
    end
  end)
  model:train()
  return total:item() / n
end

-- ---- checkpoints -----------------------------------------------------------------------------
local run_args = {}
for _, k in ipairs { "steps", "hidden", "layers", "embed", "bptt", "batch", "lr", "warmup", "weight_decay",
  "grad_clip", "dropout", "seed" } do
  run_args[k] = opts[k]
end
run_args.vocab = ds.vocab.size
local objects = { model = model, optimizer = opt, scheduler = schedule }

-- where the run is: the last step, the chunk of the pass it read, the carried LSTM state, the
-- losses since the last log line
local run = { step = 0, chunk = 0, pending = {} }
local state -- the LSTM state carried between chunks ({h, c}), nil at the start of a pass
if opts.resume then
  run = cli.resume(opts.resume, objects, run_args, fail)
  if run.state then state = { run.state[1]:to(opts.device), run.state[2]:to(opts.device) } end
  print(string.format("resumed from %s at step %d", opts.resume, run.step))
end

local function save_checkpoint()
  if not opts.checkpoint then return end
  run.state = state
  tl.checkpoint.save(opts.checkpoint, { model = model, optimizer = opt, scheduler = schedule, step = run.step,
    extra = { args = run_args, run = run } }, { metadata = data.model_metadata(ds.vocab, config) })
  run.state = nil
end

-- the CSV: a resumed run keeps the rows up to its checkpoint's step and appends
local function open_csv()
  return cli.csv(opts.csv, "step,loss,lr\n", 1, opts.resume and run.step)
end

-- ---- training -------------------------------------------------------------------------------
local csv = open_csv()
local params = model:parameters()
local chars_per_step = opts.batch * opts.bptt
local bar = progress.new { total = opts.steps, label = "train", unit = "step", rate = "chars" }
sync()
local start, interval_start, interval_steps = tl.clock(), tl.clock(), 0
local first_step = run.step + 1
local last_step = opts.stop_after and math.min(opts.stop_after, opts.steps) or opts.steps
local last_loss
for step = first_step, last_step do
  if run.chunk >= per_epoch then run.chunk, state = 0, nil end -- a new pass over the text
  run.chunk = run.chunk + 1
  local x, y = lstm.chunk(train_streams, opts.bptt, run.chunk)
  local logits
  logits, state = model(x, state)
  state = lstm.detach(state)
  local loss = loss_fn(logits:reshape(-1, config.vocab), y:reshape(-1))
  opt:zero_grad()
  loss:backward()
  if opts.grad_clip > 0 then optim.clip_grad_norm(params, opts.grad_clip) end
  local lr = opt.param_groups[1].lr
  opt:step()
  schedule:step()
  run.step = step
  local l = loss:item()
  run.pending[#run.pending + 1] = l
  csv:write(string.format("%d,%.6f,%.6g\n", step, l, lr))
  interval_steps = interval_steps + 1
  if step % opts.log_every == 0 or step == opts.steps then
    local sum = 0
    for _, v in ipairs(run.pending) do sum = sum + v end
    last_loss, run.pending = sum / #run.pending, {}
    sync()
    local now = tl.clock()
    bar:clear()
    print(string.format("step %d loss %.4f (%.0f chars/s, %.1f ms/step)", step, last_loss,
      interval_steps * chars_per_step / (now - interval_start), 1000 * (now - interval_start) / interval_steps))
    interval_start, interval_steps = tl.clock(), 0
  end
  if opts.eval_every > 0 and step % opts.eval_every == 0 and step < opts.steps then
    bar:clear()
    local v = evaluate()
    print(string.format("step %d val loss %.4f (%.3f bits/char)", step, v, v / math.log(2)))
    interval_start, interval_steps = tl.clock(), 0
  end
  bar:update(step, { loss = last_loss or l, samples = chars_per_step })
  if opts.checkpoint_every > 0 and step % opts.checkpoint_every == 0 and step < last_step then save_checkpoint() end
end
save_checkpoint()
local elapsed = bar:finish()
csv:close()
if opts.plot then -- --plot: the loss history drawn beside the CSV
  local png = opts.csv:gsub("%.csv$", "") .. ".png"
  require("tlua.plot").csv(opts.csv, { output = png, title = "lstm: loss" })
  print("loss plot: " .. png)
end
if last_step < opts.steps then
  print(string.format("stopped after step %d (--stop-after)%s", last_step,
    opts.checkpoint and ("; resume with --resume " .. opts.checkpoint) or ""))
  return
end
local val_loss = evaluate()
print(string.format("done: %d steps in %.1f s (%.0f chars/s), train loss %.4f, val loss %.4f (%.3f bits/char)",
  opts.steps, tl.clock() - start, (last_step - first_step + 1) * chars_per_step / elapsed, last_loss or 0 / 0,
  val_loss, val_loss / math.log(2)))
print("loss history: " .. opts.csv)

-- ---- a sample and the model -------------------------------------------------------------------
--- sample(model, vocab, prompt, n, temperature, device) -> the prompt and n characters drawn after it
local function sample(prompt, n)
  model:eval()
  local ids = ds.vocab:encode(prompt):to(opts.device)
  local out = {}
  tl.no_grad(function()
    local logits, st = model(ids:view(1, -1))
    local last = logits:narrow(2, logits.shape[2], 1):view(1, config.vocab)
    for i = 1, n do
      local next_id = sampling.sample(last, { temperature = opts.temperature })
      out[i] = next_id
      logits, st = model(next_id:view(1, 1), st)
      last = logits:view(1, config.vocab)
    end
  end)
  model:train()
  if n == 0 then return prompt end
  return prompt .. ds.vocab:decode(tl.cat(out):to("cpu"))
end
if opts.sample_tokens > 0 then
  tl.manual_seed(opts.seed)
  print("sample (temperature " .. opts.temperature .. "):")
  print(sample("\n", opts.sample_tokens))
end

if opts.save then
  local cpu = {}
  for name, t in pairs(model:state_dict()) do cpu[name] = t:to("cpu") end
  tl.save(opts.save, cpu, data.model_metadata(ds.vocab, config))
  print("saved: " .. opts.save)
end
