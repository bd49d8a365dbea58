-- Trains an MLP or a small CNN on Fashion-MNIST and reports the test accuracy after each epoch.
--
--   tlua examples/fashion_mnist/train.lua [--model mlp|cnn] [--epochs N] [--batch N] [--lr X]
--        [--optimizer adam|sgd] [--schedule cosine|none] [--device cpu|cuda] [--seed N]
--        [--threads N] [--save path] [--csv path] [--limit N] [--root dir] [--sparse D] [--block N]
--        [--checkpoint path] [--checkpoint-every N] [--resume path] [--stop-after N] [--log-every N]
--        [--bucket-mb X] [--shard-optimizer]
--
-- Defaults: the MLP (784-512-256-10, ReLU) for 10 epochs (the CNN: 5), batch 128, Adam lr 1e-3
-- annealed to 0 along a cosine over the run (stepped every batch). The loss of every batch goes
-- to a CSV file (--csv; by default fashion_mnist_loss.csv next to --save, or in the current
-- directory); --save writes the model's state_dict with tl.save (safetensors) at the end.
--
-- Logging without waits: each step's loss and count of correct predictions stay on the device,
-- in a small buffer, and are read (one wait; on several ranks one all_reduce of that buffer) every
-- --log-every steps, at the end of an epoch, before a checkpoint and at --stop-after; the CSV
-- rows of those steps and the progress bar are written then. The figures are the same whatever
-- --log-every is: only the time they are read changes.
--
-- Resuming: --checkpoint path writes the whole run (model, optimizer, schedule, the loader's
-- position, the RNG, the step and the epoch's running figures; tl.checkpoint) at the end of
-- every epoch, every --checkpoint-every steps and when the run stops; --resume path goes on from
-- one (with the same options) and ends bitwise where the uninterrupted run ends, on the CPU.
--
-- Data-parallel: `tlua --nproc N examples/fashion_mnist/train.lua --device cuda` trains on N GPUs
-- (nn.DataParallel, a sharded loader: --batch is each rank's; --bucket-mb its gradient buckets'
-- size, --shard-optimizer its sharded optimizer state); rank 0 logs, writes the CSV and saves.
local tl = require("tlua")
local nn, optim, data = tl.nn, tl.optim, tl.data
local progress = require("tlua.progress")
local cli = require("tlua.cli")

-- ---- arguments ------------------------------------------------------------------------------
local usage = [[
usage: tlua examples/fashion_mnist/train.lua [options]
  --model mlp|cnn       the model (default mlp)
  --epochs N            epochs (default 10 for the mlp, 5 for the cnn)
  --batch N             batch size (default 128)
  --lr X                learning rate (default 1e-3 for adam, 0.05 for sgd)
  --optimizer adam|sgd  Adam, or SGD with momentum 0.9 (default adam)
  --schedule cosine|none  the lr follows a cosine down to 0 over the run, or stays (default cosine)
  --device cpu|cuda     where to train (default cpu)
  --seed N              seed of the initialisation and the shuffles (default 1)
  --threads N           CPU threads (default: the engine's default)
  --save path           write the trained model's state_dict there (safetensors)
  --csv path            the loss history (default fashion_mnist_loss.csv, next to --save if given)
  --plot                draw the loss history as a PNG beside the CSV (its name ending .png; gnuplot)
  --limit N             use only the first N training images (quick runs)
  --sparse D            the MLP's Linear layers whose sizes are multiples of --block become
                        BlockSparseLinear layers keeping a share D of their blocks (nn.sparsify);
                        at the end the speed of a dense MLP's batches is measured to compare
  --block N             the block size of --sparse (default 16: 784 = 49 x 16)
  --root dir            the dataset's folder (default $TLUA_FASHION_MNIST, else
                        /usr/share/datasets/fashion-mnist)
  --checkpoint path     write the run's state there (tl.checkpoint) after every epoch, every
                        --checkpoint-every steps and at the end, for --resume
  --checkpoint-every N  also every N steps (default 0: after epochs only)
  --resume path         go on from a checkpoint of --checkpoint (give the same options)
  --stop-after N        stop after step N (writing the checkpoint), as an interrupted run
  --log-every N         read the losses and accuracies from the device every N steps (and at
                        the end of an epoch, before a checkpoint, at --stop-after), then write
                        their CSV rows and the progress bar (default 50; 1: every step)
  --bucket-mb X         data-parallel runs (tlua --nproc N): nn.DataParallel's gradient buckets
                        of about X MiB (default: nn.DataParallel's, 25)
  --shard-optimizer     data-parallel runs: nn.DataParallel{shard_optimizer = true}, each rank
                        keeping its share of the optimizer's state (one rank: nothing to shard)
  --graph true|false    on a GPU, capture the training step (forward, backward, the gradients'
                        all-reduce, the optimizer) into a CUDA graph after one eager step and
                        replay it for every full batch (tl.cuda.graph; default false)
  --help                this text]]

local defaults = { model = "mlp", batch = 128, optimizer = "adam", schedule = "cosine", device = "cpu", seed = 1,
  root = tl.data.FASHION_MNIST_ROOT, log_every = 50 }
local numeric = { epochs = "integer", batch = "integer", lr = "number", seed = "integer", limit = "integer",
  threads = "integer", sparse = "number", block = "integer", checkpoint_every = "integer", stop_after = "integer",
  log_every = "integer", bucket_mb = "number" }
local text = { model = true, optimizer = true, device = true, save = true, csv = true, root = true,
  schedule = true, checkpoint = true, resume = true, graph = true }
local opts, fail = cli.parse(arg, { program = "train.lua", usage = usage, numeric = numeric, text = text,
  flags = { plot = true, shard_optimizer = true }, defaults = defaults })
if opts.model ~= "mlp" and opts.model ~= "cnn" then fail("--model must be mlp or cnn") end
if opts.optimizer ~= "adam" and opts.optimizer ~= "sgd" then fail("--optimizer must be adam or sgd") end
if opts.schedule ~= "cosine" and opts.schedule ~= "none" then fail("--schedule must be cosine or none") end
opts.epochs = opts.epochs or (opts.model == "mlp" and 10 or 5)
if opts.epochs < 1 or opts.batch < 1 then fail("--epochs and --batch must be >= 1") end
if opts.sparse and not (opts.sparse > 0 and opts.sparse <= 1) then fail("--sparse must be in (0, 1]") end
if opts.sparse and opts.model ~= "mlp" then fail("--sparse applies to the mlp") end
opts.block = opts.block or 16
opts.checkpoint_every = opts.checkpoint_every or 0
if opts.checkpoint_every < 0 then fail("--checkpoint-every must be >= 0") end
if opts.stop_after and opts.stop_after < 1 then fail("--stop-after must be >= 1") end
if opts.log_every < 1 then fail("--log-every must be >= 1") end
if opts.graph ~= nil and opts.graph ~= "true" and opts.graph ~= "false" then fail("--graph must be true or false") end
local use_graph = opts.graph == "true"
if use_graph and opts.device == "cpu" then fail("--graph true needs --device cuda") end
if opts.bucket_mb and not (opts.bucket_mb > 0 and opts.bucket_mb < math.huge) then
  fail("--bucket-mb must be a number of MiB > 0")
end
opts.lr = opts.lr or (opts.optimizer == "adam" and 1e-3 or 0.05)
if not opts.csv then
  local dir = opts.save and opts.save:match("^(.*)/[^/]*$")
  opts.csv = (dir and dir ~= "" and (dir .. "/") or "") .. "fashion_mnist_loss.csv"
end
if opts.plot then require("tlua.plot").gnuplot() end -- --plot without gnuplot fails now, not after training
if opts.threads then tl.set_num_threads(opts.threads) end
local dist = tl.distributed
local rank, world = dist.rank(), dist.world_size()
local print = function(...) if rank == 0 then _G.print(...) end end -- rank 0 logs

-- ---- data -------------------------------------------------------------------------------------
local t0 = tl.clock()
tl.manual_seed(opts.seed)
local train_set = data.FashionMNIST { root = opts.root, train = true, normalize = true }
local test_set = data.FashionMNIST { root = opts.root, train = false, normalize = true }
if opts.limit and opts.limit < train_set:len() then
  train_set = data.TensorDataset(train_set.images:narrow(1, 1, opts.limit), train_set.labels:narrow(1, 1, opts.limit))
end
if opts.device ~= "cpu" then
  -- the whole dataset on the device: batches are gathered there
  train_set = data.TensorDataset(train_set.tensors[1]:to(opts.device), train_set.tensors[2]:to(opts.device))
  test_set = data.TensorDataset(test_set.tensors[1]:to(opts.device), test_set.tensors[2]:to(opts.device))
end
local train_loader = data.DataLoader { train_set, batch_size = opts.batch, shuffle = true, seed = opts.seed,
  shard = world > 1 and { rank, world } or nil }
local test_loader = data.DataLoader { test_set, batch_size = 1000 }
print(string.format("Fashion-MNIST: %d training and %d test images (loaded in %.2f s)", train_set:len(),
  test_set:len(), tl.clock() - t0))

-- ---- model ------------------------------------------------------------------------------------
local model
local function mlp()
  return nn.Sequential(
    nn.Flatten(),
    nn.Linear(784, 512), nn.ReLU(),
    nn.Linear(512, 256), nn.ReLU(),
    nn.Linear(256, 10))
end
if opts.model == "mlp" then
  model = mlp()
  if opts.sparse then
    local replaced
    model, replaced = nn.sparsify(model, { block = opts.block, density = opts.sparse })
    print(string.format("sparse: layers %s as BlockSparseLinear, blocks %dx%d, density %g", table.concat(replaced, ", "),
      opts.block, opts.block, opts.sparse))
  end
else
  model = nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(3136, 128), nn.ReLU(),
    nn.Linear(128, 10))
end
model:to(opts.device)
print(model)
local inner = model
if world > 1 then -- rank 0's weights; gradients averaged
  local dp_opts = {}
  if opts.bucket_mb then dp_opts.bucket_mb = opts.bucket_mb end
  if opts.shard_optimizer then dp_opts.shard_optimizer = true end
  model = nn.DataParallel(model, dp_opts)
elseif opts.shard_optimizer then
  print("shard-optimizer: one rank, nothing to shard")
end

local optimizer
if opts.optimizer == "adam" then
  optimizer = optim.Adam(model:parameters(), { lr = opts.lr })
else
  optimizer = optim.SGD(model:parameters(), { lr = opts.lr, momentum = 0.9 })
end
local scheduler
if opts.schedule == "cosine" then
  scheduler = optim.CosineAnnealingLR(optimizer, opts.epochs * train_loader:len())
end
local loss_fn = nn.CrossEntropyLoss()
print(string.format("model %s, %s lr %g (%s schedule), batch %d, %d epochs, device %s, %d threads", opts.model,
  opts.optimizer, opts.lr, opts.schedule, opts.batch, opts.epochs, opts.device, tl.get_num_threads()))

-- ---- checkpoints -------------------------------------------------------------------------------
-- the options a resumed run must share with the run it goes on from
local run_args = { model = opts.model, epochs = opts.epochs, batch = opts.batch, lr = opts.lr,
  optimizer = opts.optimizer, schedule = opts.schedule, seed = opts.seed, limit = opts.limit or 0,
  sparse = opts.sparse or 0, block = opts.block, world = world }
local objects = { model = inner, optimizer = optimizer, scheduler = scheduler, loader = train_loader }

-- where the run is: the epoch under way, the step, its running figures, the finished epochs
local run = { epoch = 1, step = 0, seen = 0, correct = 0, loss_sum = 0, history = {}, train_time = 0 }
if opts.resume then
  run = cli.resume(opts.resume, objects, run_args, fail)
  print(string.format("resumed from %s: epoch %d, step %d", opts.resume, run.epoch, run.step))
end

-- ---- loops -------------------------------------------------------------------------------------
local function evaluate()
  model:eval()
  local correct, total = nil, 0 -- the count stays on the device until the end: one wait
  tl.no_grad(function()
    for x, y in test_loader:iter() do
      local hits = model(x):argmax(2):eq(y):sum()
      correct = correct and correct:add_(hits) or hits
      total = total + y:numel()
    end
  end)
  model:train()
  return correct:item() / total
end

-- the CSV: a resumed run keeps the rows up to its checkpoint's step and appends
local function open_csv()
  if rank ~= 0 then return { write = function() end, flush = function() end, close = function() end } end
  return cli.csv(opts.csv, "epoch,batch,step,loss,accuracy\n", 3, opts.resume and run.step)
end
local csv = open_csv()

-- the steps not yet read from the device: row k of `metrics` holds the k-th pending step's loss
-- (this rank's) and count of correct predictions (float32: exact below 2^24), written there without
-- a wait; `pending` holds its batch, step and global batch size. An epoch ends with a flush, so
-- there are never more than log_every of them, nor more than an epoch's batches.
local metrics = tl.zeros({ math.min(opts.log_every, math.max(train_loader:len(), 1)), 2 },
  { dtype = "float32", device = opts.device })
local pending = {}
local bar -- the epoch's progress bar

local function record(loss, logits, y, b, step)
  local k = #pending + 1
  local row = metrics:select(1, k)
  row:narrow(1, 1, 1):copy_(loss:detach())
  row:narrow(1, 2, 1):copy_(logits:detach():argmax(2):eq(y):sum())
  pending[k] = { b = b, step = step, n = y:numel() * world }
end

-- reads the pending steps (one wait; on several ranks one all_reduce: the losses averaged as
-- all_reduce's "avg" does, the counts summed), adds them to the epoch's running figures in step
-- order, writes their CSV rows and updates the bar
local function flush(epoch)
  local count = #pending
  if count == 0 then return end
  local rows = metrics:narrow(1, 1, count)
  if world > 1 then
    dist.all_reduce(rows, "sum")
    rows:select(2, 1):div_(world)
  end
  local values, samples = rows:totable(), 0
  for k, p in ipairs(pending) do
    local l, c, n = values[k][1], math.tointeger(values[k][2]), p.n
    run.seen, run.correct, run.loss_sum = run.seen + n, run.correct + c, run.loss_sum + l * n
    csv:write(string.format("%d,%d,%d,%.6f,%.6f\n", epoch, p.b, p.step, l, c / n))
    samples = samples + n
  end
  bar:update(pending[count].b, { loss = run.loss_sum / run.seen, acc = run.correct / run.seen, samples = samples })
  pending = {}
end

local function save_checkpoint()
  flush(run.epoch) -- the run's figures must be on the host before they are saved
  if opts.checkpoint then -- on every rank: each one's RNG state goes into the file, rank 0 writes it
    csv:flush() -- and the CSV on disk up to its step, for a run that resumes from it after a crash
    tl.checkpoint.save(opts.checkpoint, { model = inner, optimizer = optimizer, scheduler = scheduler,
      loader = train_loader, step = run.step, extra = { args = run_args, run = run } })
  end
end

-- one step: its logits and loss; --graph true captures it once and replays it for every full batch
local function train_step(x, y)
  optimizer:zero_grad()
  local logits = model(x)
  local loss = loss_fn(logits, y)
  loss:backward()
  optimizer:step()
  return logits, loss
end
local step_graph = use_graph and tl.cuda.graph(train_step, { warmup = 1 }) or nil

local history = run.history
local stopped = false
for epoch = run.epoch, opts.epochs do
  model:train()
  run.epoch = epoch
  bar = progress.new { total = train_loader:len(), label = string.format("epoch %d/%d", epoch, opts.epochs) }
  for b, x, y in train_loader:enumerate() do
    local logits, loss
    if step_graph and x.shape[1] == opts.batch then
      logits, loss = step_graph(x, y) -- the graph's outputs, overwritten by the next replay
    else
      logits, loss = train_step(x, y) -- a short last batch steps eagerly
    end
    if scheduler then scheduler:step() end
    run.step = run.step + 1
    local step = run.step
    record(loss, logits, y, b, step)
    if step % opts.log_every == 0 then flush(epoch) end
    if opts.stop_after and step >= opts.stop_after then
      stopped = true
      break
    end
    if opts.checkpoint_every > 0 and step % opts.checkpoint_every == 0 then save_checkpoint() end
  end
  flush(epoch) -- the epoch's last steps, before its time is taken
  local epoch_time = bar:finish()
  run.train_time = run.train_time + epoch_time
  if stopped then break end
  local accuracy = evaluate()
  local seen = math.max(run.seen, 1)
  history[epoch] = { loss = run.loss_sum / seen, train_acc = run.correct / seen, test_acc = accuracy,
    time = epoch_time }
  print(string.format("epoch %d/%d: train loss %.4f, train accuracy %.2f%%, test accuracy %.2f%% " ..
    "(%.1f s, %.0f samples/s)", epoch, opts.epochs, run.loss_sum / seen, 100 * run.correct / seen, 100 * accuracy, epoch_time, seen / epoch_time))
  run.epoch, run.seen, run.correct, run.loss_sum = epoch + 1, 0, 0, 0
  save_checkpoint()
end
if stopped then save_checkpoint() end
csv:close()
if opts.plot and rank == 0 then -- --plot: the loss history drawn beside the CSV
  local png = opts.csv:gsub("%.csv$", "") .. ".png"
  require("tlua.plot").csv(opts.csv, { output = png, title = "fashion_mnist: loss" })
  print("loss plot: " .. png)
end
local train_time = run.train_time

if stopped then
  print(string.format("stopped after step %d (--stop-after)%s", run.step,
    opts.checkpoint and ("; resume with --resume " .. opts.checkpoint) or ""))
  return
end
local final = history[#history]
print(string.format("done: %s, %d epochs, test accuracy %.2f%%, training time %.1f s, wall time %.1f s",
  opts.model, opts.epochs, 100 * final.test_acc, train_time, tl.clock() - t0))
print("loss history: " .. opts.csv)

-- --sparse: the dense MLP's batches timed on the same data, device and optimizer
if opts.sparse then
  local dense = mlp():to(opts.device)
  local dense_opt = optim.Adam(dense:parameters(), { lr = opts.lr })
  local batches = math.min(train_loader:len(), 200)
  local function run(m, o)
    local n, start = 0, nil
    for b, x, y in train_loader:enumerate() do
      if b == 11 then
        if opts.device ~= "cpu" then tl.cuda.synchronize() end
        start = tl.clock() -- after 10 warm-up batches
      end
      if b > batches then break end
      local loss = loss_fn(m(x), y)
      o:zero_grad()
      loss:backward()
      o:step()
      loss:item()
      if start then n = n + 1 end
    end
    if opts.device ~= "cpu" then tl.cuda.synchronize() end
    return (tl.clock() - start) / n
  end
  local dense_batch, sparse_batch = run(dense, dense_opt), run(model, optimizer)
  print(string.format("sparse vs dense: %.2f ms vs %.2f ms a batch (%d batches each): an epoch ran %.2fx faster",
    1000 * sparse_batch, 1000 * dense_batch, batches - 10, dense_batch / sparse_batch))
end
if opts.save and rank == 0 then
  local sd = inner:state_dict()
  tl.save(opts.save, sd, { model = opts.model, epochs = tostring(opts.epochs), test_accuracy = string.format("%.4f", final.test_acc) })
  print("checkpoint: " .. opts.save)
end
