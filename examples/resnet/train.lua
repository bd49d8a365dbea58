-- Trains a small ResNet (examples/resnet/model.lua) on Fashion-MNIST and reports the test accuracy after each epoch.
--
--   tlua examples/resnet/train.lua [--epochs N] [--batch N] [--lr X] [--optimizer sgd|adamw]
--        [--schedule onecycle|cosine] [--width N] [--blocks N] [--augment on|off]
--        [--device cpu|cuda] [--dtype float32|bfloat16] [--checkpoint path] [--resume path] ...
--
-- Defaults: widths 32/64/128, 2 BasicBlocks a stage (0.7M parameters), 15 epochs of batch 128,
-- SGD (Nesterov momentum 0.9, weight decay 5e-4) with the one-cycle schedule up to lr 0.1,
-- label smoothing 0.1, random crops (padding 2) and left-right flips. On CUDA the forward runs
-- under bf16 autocast (float32 weights). The loss of every batch goes to a CSV file.
--
-- Resuming: --checkpoint path writes the whole run (model, optimizer, schedule, the loader's
-- position, the RNG, the step and the epoch's running figures; tl.checkpoint) after every epoch,
-- every --checkpoint-every steps and when the run stops; --resume path goes on from one (with
-- the same options).
local tl = require("tlua")
local nn, optim, data = tl.nn, tl.optim, tl.data
local progress = require("tlua.progress")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local resnet = require("model")

-- ---- arguments ------------------------------------------------------------------------------
local usage = [[
usage: tlua examples/resnet/train.lua [options]
  --epochs N            epochs (default 15)
  --batch N             batch size (default 128)
  --lr X                peak learning rate (default 0.1 for sgd, 3e-3 for adamw)
  --optimizer sgd|adamw SGD with Nesterov momentum 0.9, or AdamW (default sgd)
  --weight-decay X      weight decay (default 5e-4 for sgd, 0.05 for adamw)
  --schedule onecycle|cosine  one-cycle (warm-up over 25% of the run, then a cosine down) or a
                        cosine from lr down to 0 (default onecycle); stepped every batch
  --width N             channels of the first stage; the others have 2x and 4x (default 32)
  --blocks N            BasicBlocks a stage (default 2)
  --augment on|off      random crops (padding 2) and left-right flips (default on)
  --label-smoothing X   of the cross-entropy (default 0.1)
  --device cpu|cuda     where to train (default cpu)
  --dtype T             float32, or bfloat16 (autocast of the forward, float32 weights; the
                        default on cuda)
  --seed N              seed of the initialisation, shuffles and augmentation (default 1)
  --threads N           CPU threads (default: the engine's default)
  --limit N             use only the first N training images (quick runs)
  --test-limit N        evaluate on the first N test images only (quick runs)
  --save path           write the trained model's state_dict there (safetensors)
  --csv path            the loss history (default resnet_loss.csv, next to --save if given)
  --plot                draw the loss history as a PNG beside the CSV (its name ending .png; gnuplot)
  --root dir            the dataset's folder (default $TLUA_FASHION_MNIST, else
                        /usr/share/datasets/fashion-mnist)
  --checkpoint path     write the run's state there (tl.checkpoint) after every epoch, every
                        --checkpoint-every steps and at the end, for --resume
  --checkpoint-every N  also every N steps (default 0: after epochs only)
  --resume path         go on from a checkpoint of --checkpoint (give the same options)
  --stop-after N        stop after step N (writing the checkpoint), as an interrupted run
  --help                this text]]

local numeric = { epochs = "integer", batch = "integer", lr = "number", weight_decay = "number", width = "integer",
  blocks = "integer", label_smoothing = "number", seed = "integer", threads = "integer", limit = "integer",
  test_limit = "integer", checkpoint_every = "integer", stop_after = "integer" }
local text = { optimizer = true, schedule = true, augment = true, device = true, dtype = true, save = true, csv = true,
  root = true, checkpoint = true, resume = true }
local opts, fail = cli.parse(arg, { program = "train.lua", usage = usage, numeric = numeric, text = text,
  flags = { plot = true },
  defaults = { epochs = 15, batch = 128, optimizer = "sgd", schedule = "onecycle", width = 32, blocks = 2,
    augment = "on", label_smoothing = 0.1, device = "cpu", seed = 1, checkpoint_every = 0,
    root = data.FASHION_MNIST_ROOT } })
if opts.optimizer ~= "sgd" and opts.optimizer ~= "adamw" then fail("--optimizer must be sgd or adamw") end
if opts.schedule ~= "onecycle" and opts.schedule ~= "cosine" then fail("--schedule must be onecycle or cosine") end
if opts.augment ~= "on" and opts.augment ~= "off" then fail("--augment must be on or off") end
if opts.device ~= "cpu" and not opts.device:match("^cuda") then fail("--device must be cpu or cuda") end
opts.dtype = opts.dtype or (opts.device == "cpu" and "float32" or "bfloat16")
if opts.dtype ~= "float32" and opts.dtype ~= "bfloat16" then fail("--dtype must be float32 or bfloat16") end
for _, k in ipairs { "epochs", "batch", "width", "blocks" } do
  if opts[k] < 1 then fail("--" .. k .. " must be at least 1") end
end
if opts.checkpoint_every < 0 then fail("--checkpoint-every must be >= 0") end
if opts.stop_after and opts.stop_after < 1 then fail("--stop-after must be >= 1") end
if not (opts.label_smoothing >= 0 and opts.label_smoothing < 1) then fail("--label-smoothing must be in [0, 1)") end
opts.lr = opts.lr or (opts.optimizer == "sgd" and 0.1 or 3e-3)
opts.weight_decay = opts.weight_decay or (opts.optimizer == "sgd" and 5e-4 or 0.05)
if not opts.csv then
  local dir = opts.save and opts.save:match("^(.*)/[^/]*$")
  opts.csv = (dir and dir ~= "" and (dir .. "/") or "") .. "resnet_loss.csv"
end
if opts.plot then require("tlua.plot").gnuplot() end -- --plot without gnuplot fails now, not after training
if opts.threads then tl.set_num_threads(opts.threads) end

-- ---- data -------------------------------------------------------------------------------------
local t0 = tl.clock()
tl.manual_seed(opts.seed)
local train_set = data.FashionMNIST { root = opts.root, train = true, normalize = true }
local test_set = data.FashionMNIST { root = opts.root, train = false, normalize = true }
-- standardized with the training set's mean and deviation (of Fashion-MNIST: 0.2860, 0.3530)
local function prepare(set, limit)
  local x, y = set.tensors[1], set.tensors[2]
  if limit and limit < x.shape[1] then x, y = x:narrow(1, 1, limit), y:narrow(1, 1, limit) end
  x = ((x - 0.2860) / 0.3530):contiguous()
  return data.TensorDataset(x:to(opts.device), y:contiguous():to(opts.device))
end
train_set, test_set = prepare(train_set, opts.limit), prepare(test_set, opts.test_limit)
local train_loader = data.DataLoader { train_set, batch_size = opts.batch, shuffle = true, seed = opts.seed }
local test_loader = data.DataLoader { test_set, batch_size = 1000 }
print(string.format("Fashion-MNIST: %d training and %d test images (loaded in %.2f s)", train_set:len(),
  test_set:len(), tl.clock() - t0))

-- ---- model and optimizer ----------------------------------------------------------------------
local model = resnet.ResNet { width = opts.width, blocks = opts.blocks }
model:to(opts.device)
local optimizer
if opts.optimizer == "sgd" then
  optimizer = optim.SGD(model:parameters(), { lr = opts.lr, momentum = 0.9, nesterov = true,
    weight_decay = opts.weight_decay })
else
  optimizer = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })
end
local total_steps = opts.epochs * train_loader:len()
local scheduler
if opts.schedule == "onecycle" then
  scheduler = optim.OneCycleLR(optimizer, opts.lr, { total_steps = total_steps, pct_start = 0.25 })
else
  scheduler = optim.CosineAnnealingLR(optimizer, total_steps)
end
local loss_fn = nn.CrossEntropyLoss { label_smoothing = opts.label_smoothing }
local autocast = opts.dtype == "bfloat16" and "bfloat16" or nil
local function forward(x)
  if autocast then return tl.autocast(autocast, model, x) end
  return model(x)
end
print(string.format("resnet: widths %d/%d/%d, %d blocks a stage, %.2fM parameters; %s lr %g (%s), weight decay %g, " ..
  "batch %d, %d epochs, augment %s, %s on %s", opts.width, 2 * opts.width, 4 * opts.width, opts.blocks,
  model:num_parameters() / 1e6, opts.optimizer, opts.lr, opts.schedule, opts.weight_decay, opts.batch, opts.epochs,
  opts.augment, opts.dtype, opts.device))

-- ---- checkpoints -------------------------------------------------------------------------------
-- the options a resumed run must share with the run it goes on from
local run_args = { epochs = opts.epochs, batch = opts.batch, lr = opts.lr, optimizer = opts.optimizer,
  weight_decay = opts.weight_decay, schedule = opts.schedule, width = opts.width, blocks = opts.blocks,
  augment = opts.augment, label_smoothing = opts.label_smoothing, dtype = opts.dtype, seed = opts.seed,
  limit = opts.limit or 0 }
local objects = { model = model, optimizer = optimizer, scheduler = scheduler, loader = train_loader }

-- where the run is: the epoch under way, the step, its running figures, the finished epochs
local run = { epoch = 1, step = 0, seen = 0, correct = 0, loss_sum = 0, history = {}, train_time = 0 }
if opts.resume then
  run = cli.resume(opts.resume, objects, run_args, fail)
  print(string.format("resumed from %s: epoch %d, step %d", opts.resume, run.epoch, run.step))
end

local function save_checkpoint()
  if opts.checkpoint then
    tl.checkpoint.save(opts.checkpoint, { model = model, optimizer = optimizer, scheduler = scheduler,
      loader = train_loader, step = run.step, extra = { args = run_args, run = run } })
  end
end

-- ---- loops -------------------------------------------------------------------------------------
local function evaluate()
  model:eval()
  local correct, total = 0, 0
  tl.no_grad(function()
    for x, y in test_loader:iter() do
      correct = correct + forward(x):argmax(2):eq(y):sum():item()
      total = total + y:numel()
    end
  end)
  model:train()
  return correct / total
end

-- the CSV: a resumed run keeps the rows up to its checkpoint's step and appends
local function open_csv()
  return cli.csv(opts.csv, "epoch,batch,step,loss,accuracy,lr\n", 3, opts.resume and run.step)
end
local csv = open_csv()

local history, stopped = run.history, false
for epoch = run.epoch, opts.epochs do
  model:train()
  run.epoch = epoch
  local bar = progress.new { total = train_loader:len(), label = string.format("epoch %d/%d", epoch, opts.epochs) }
  for b, x, y in train_loader:enumerate() do
    if opts.augment == "on" then x = resnet.augment(x, 2) end
    local lr = optimizer.param_groups[1].lr
    local logits = forward(x)
    local loss = loss_fn(logits:float(), y)
    optimizer:zero_grad()
    loss:backward()
    optimizer:step()
    scheduler:step()
    run.step = run.step + 1
    local n = y:numel()
    local l, c = loss:item(), logits:detach():argmax(2):eq(y):sum():item()
    run.seen, run.correct, run.loss_sum = run.seen + n, run.correct + c, run.loss_sum + l * n
    csv:write(string.format("%d,%d,%d,%.6f,%.6f,%.6g\n", epoch, b, run.step, l, c / n, lr))
    bar:update(b, { loss = run.loss_sum / run.seen, acc = run.correct / run.seen, samples = n })
    if opts.stop_after and run.step >= opts.stop_after then
      stopped = true
      break
    end
    if opts.checkpoint_every > 0 and run.step % opts.checkpoint_every == 0 then save_checkpoint() end
  end
  local epoch_time = bar:finish()
  run.train_time = run.train_time + epoch_time
  if stopped then break end
  local accuracy = evaluate()
  local seen = math.max(run.seen, 1)
  history[epoch] = { loss = run.loss_sum / seen, train_acc = run.correct / seen, test_acc = accuracy,
    time = epoch_time }
  print(string.format("epoch %d/%d: train loss %.4f, train accuracy %.2f%%, test accuracy %.2f%% " ..
    "(%.1f s, %.0f images/s)", epoch, opts.epochs, run.loss_sum / seen, 100 * run.correct / seen, 100 * accuracy, epoch_time, seen / epoch_time))
  run.epoch, run.seen, run.correct, run.loss_sum = epoch + 1, 0, 0, 0
  save_checkpoint()
end
csv:close()
if opts.plot then -- --plot: the loss history drawn beside the CSV
  local png = opts.csv:gsub("%.csv$", "") .. ".png"
  require("tlua.plot").csv(opts.csv, { output = png, title = "resnet: loss" })
  print("loss plot: " .. png)
end

if stopped then
  save_checkpoint()
  print(string.format("stopped after step %d (--stop-after)%s", run.step,
    opts.checkpoint and ("; resume with --resume " .. opts.checkpoint) or ""))
  return
end
local final = history[#history]
print(string.format("done: resnet, %d epochs, test accuracy %.2f%%, training time %.1f s, wall time %.1f s",
  opts.epochs, 100 * final.test_acc, run.train_time, tl.clock() - t0))
print("loss history: " .. opts.csv)
if opts.save then
  local cpu = {}
  for name, t in pairs(model:state_dict()) do cpu[name] = t:to("cpu") end
  tl.save(opts.save, cpu, { width = tostring(opts.width), blocks = tostring(opts.blocks),
    test_accuracy = string.format("%.4f", final.test_acc) })
  print("saved: " .. opts.save)
end
