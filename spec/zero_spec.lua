-- ZeRO-1 (nn.DataParallel {shard_optimizer = true}) on CPU ranks in float64: the same numbers as plain data parallel and as one process (1e-12), optimizer state of about 1/N per rank, clipping over every shard, checkpoints gathered and loaded at another world size, and the misuses that raise.
local ranks = require("helpers.ranks")
local scratch = ranks.scratch(before_each, after_each)
local script = scratch.script
-- a world of nproc ranks (tlua --nproc), or one plain process for nproc 0
local function launch(nproc, path, args) return scratch.launch(nproc, path, args, 180) end

-- A float64 MLP; the global batch of 12 rows of step s is rows (12 (s - 1) .. 12 s - 1) mod 48,
-- rank r of N taking the r-th 12/N of them. Arguments: optimizer (adamw | sgd | adam_amsgrad),
-- shard (0 | 1), steps, first step, clip (0 | max norm), save step (0: none), load (a checkpoint
-- or -), device.
local train = [[
local dist, nn = tl.distributed, tl.nn
local optimizer, shard, steps, first = arg[1], arg[2] == "1", tonumber(arg[3]), tonumber(arg[4])
local clip, save_at, load, device = tonumber(arg[5]), tonumber(arg[6]), arg[7], arg[8] or "cpu"
local world, rank = dist.world_size(), dist.rank()
tl.manual_seed(7)
local x = tl.randn({ 48, 5 }):double():to(device)
local y = (x:narrow(2, 1, 1) * 2 - x:narrow(2, 2, 1)):tanh():view(48)
tl.manual_seed(100 + rank)
local net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 7), nn.Tanh(), nn.Linear(7, 1)):double():to(device)
local model = net
if world > 1 or shard then
  -- buckets of 200 bytes: several buckets, parameters cut across shards
  model = nn.DataParallel(net, { bucket_mb = 200 / (1024 * 1024), shard_optimizer = shard })
end
local params = model:parameters()
local opt
if optimizer == "adamw" then
  opt = tl.optim.AdamW(params, { lr = 1e-2, weight_decay = 0.1 })
elseif optimizer == "adam_amsgrad" then
  opt = tl.optim.Adam({ { params = { params[1], params[2] }, lr = 2e-2 }, { params = { table.unpack(params, 3) } } },
    { lr = 1e-2, amsgrad = true })
else
  opt = tl.optim.SGD(params, { lr = 0.03, momentum = 0.9 })
end
if load ~= "-" then tl.checkpoint.load(load, { model = net, optimizer = opt }, { rng = false }) end
local per = 12 // world
for step = first, first + steps - 1 do
  local start = (12 * (step - 1) + per * rank) % 48
  local xb, yb = x:narrow(1, start + 1, per), y:narrow(1, start + 1, per)
  -- SGD's runs set the gradients to nil between forward and backward (as the Fashion-MNIST
  -- example does): nn.DataParallel must still reduce the gradients backward makes
  if optimizer ~= "sgd" then opt:zero_grad() end
  local loss = (model(xb):view(-1) - yb):pow(2):mean()
  if optimizer == "sgd" then opt:zero_grad() end
  loss:backward()
  if clip > 0 then
    local norm = tl.optim.clip_grad_norm(params, clip)
    if rank == 0 then print(string.format("step %d norm %.17g", step, norm:item())) end
  end
  opt:step()
  local global = world > 1 and dist.all_reduce(loss:detach():clone(), "avg") or loss
  if rank == 0 then print(string.format("step %d loss %.17g", step, global:item())) end
  if step == save_at then tl.checkpoint.save("ck.safetensors", { model = net, optimizer = opt }) end
end
local sum = 0
for _, p in ipairs(params) do sum = sum + p:sum():item() end
local lo = tl.tensor({ sum }, { dtype = "float64" })
local hi = tl.tensor({ sum }, { dtype = "float64" })
if world > 1 then
  dist.all_reduce(lo, "min")
  dist.all_reduce(hi, "max")
end
assert(lo:item() == hi:item(), "the ranks' parameters differ")
print(string.format("rank %d state_bytes %d", rank, opt:state_bytes()))
if rank == 0 then print(string.format("params %.17g", sum)) end
]]

local function numbers(out, pattern)
  local list = {}
  for v in out:gmatch(pattern) do list[#list + 1] = tonumber(v) end
  return list
end

local function assert_close(a, b, what)
  assert.are.equal(#a, #b, what)
  assert.is_true(#a > 0, what)
  for i = 1, #a do
    assert.is_true(math.abs(a[i] - b[i]) <= 1e-12 * math.max(1, math.abs(a[i])),
      string.format("%s %d: %.17g vs %.17g", what, i, a[i], b[i]))
  end
end

-- runs train with args; returns its losses, norms, final parameter sum and state bytes by rank
local function train_run(nproc, args)
  local code, out = launch(nproc, script("train.lua", train), args)
  assert.are.equal(0, code, out)
  local bytes = {}
  for r, b in out:gmatch("rank (%d+) state_bytes (%d+)") do bytes[tonumber(r)] = tonumber(b) end
  return { loss = numbers(out, "step %d+ loss (%S+)"), norm = numbers(out, "step %d+ norm (%S+)"),
    params = numbers(out, "params (%S+)"), bytes = bytes, out = out }
end

describe("nn.DataParallel {shard_optimizer = true} over CPU ranks (ZeRO-1, float64)", function()
  for _, case in ipairs({ { "adamw", 2 }, { "sgd", 3 }, { "adam_amsgrad", 2 } }) do
    local optimizer, nproc = case[1], case[2]
    it(string.format("%d sharded ranks train as plain data parallel and as one process (%s, clipped)", nproc,
      optimizer), function()
      local args = optimizer .. " %d 10 1 0.5 0 -"
      local one = train_run(0, string.format(args, 0))
      local plain = train_run(nproc, string.format(args, 0))
      local sharded = train_run(nproc, string.format(args, 1))
      assert.are.equal(10, #one.loss)
      assert_close(one.loss, sharded.loss, "loss")
      assert_close(plain.loss, sharded.loss, "loss")
      assert_close(one.norm, sharded.norm, "clipped norm")
      assert_close(one.params, sharded.params, "parameter sum")
      assert.is_true((one.loss[8] + one.loss[9] + one.loss[10]) / 3 < one.loss[1]) -- it trains
      -- the optimizer state: each rank keeps its shard (the padding aside, 1/N of the whole)
      local whole, sum = one.bytes[0], 0
      assert.is_true(whole > 0)
      for r = 0, nproc - 1 do
        local b = sharded.bytes[r]
        assert.is_true(b <= whole / nproc + 6 * 3 * 8, -- a slice per bucket at most one padding element longer
           string.format("rank %d keeps %d of %d bytes", r, b, whole))
        sum = sum + b
        assert.are.equal(whole, plain.bytes[r])
      end
      assert.are.equal(whole, sum)
    end)
  end

  it("a checkpoint of 2 sharded ranks goes on in 1 process, in 3 sharded ranks and in 2, as the run it left",
    function()
      local full = train_run(2, "adamw 1 12 1 0 0 -")
      local first = train_run(2, "adamw 1 6 1 0 6 -")
      assert_close({ table.unpack(full.loss, 1, 6) }, first.loss, "loss before the checkpoint")
      local rest = { table.unpack(full.loss, 7, 12) }
      for _, resume in ipairs({ { 0, 0 }, { 3, 1 }, { 2, 1 }, { 2, 0 } }) do
        local r = train_run(resume[1], string.format("adamw %d 6 7 0 0 ck.safetensors", resume[2]))
        assert_close(rest, r.loss, string.format("loss after resuming in %d ranks (sharded %d)", resume[1], resume[2]))
        assert_close(full.params, r.params, "parameter sum")
      end
      -- the checkpoint holds the whole state, as a plain optimizer's
      local tl = require("tlua")
      local state = tl.checkpoint.read(scratch.dir .. "/ck.safetensors")
      local sd = state.optimizer
      assert.are.equal(6, #sd.param_groups[1].params)
      assert.are.same({ 16, 5 }, sd.state[1].exp_avg.shape)
      assert.are.same({ 1 }, sd.state[6].exp_avg_sq.shape)
      assert.are.equal(6, sd.state[3].step)
    end)

  it("a plain run's checkpoint loads into sharded ranks", function()
    local full = train_run(0, "sgd 0 12 1 0 0 -")
    train_run(0, "sgd 0 6 1 0 6 -")
    local r = train_run(2, "sgd 1 6 7 0 0 ck.safetensors")
    assert_close({ table.unpack(full.loss, 7, 12) }, r.loss, "loss after resuming sharded")
  end)
end)

describe("nn.DataParallel {shard_optimizer = true}: misuse", function()
  local tl = require("tlua")
  local nn = tl.nn

  it("a world of one shards into one shard: the same numbers as no wrapper", function()
    local args = "adamw %d 5 1 0.3 0 -"
    local plain, sharded = train_run(0, string.format(args, 0)), train_run(0, string.format(args, 1))
    assert_close(plain.loss, sharded.loss, "loss")
    assert.are.equal(plain.bytes[0], sharded.bytes[0])
  end)

  it("refuses rebuild_buckets = true, old parameters, and tensors that are not the model's", function()
    local net = nn.Linear(3, 2)
    local old = net:parameters()
    local stale = tl.optim.SGD(old, { lr = 0.1 })
    assert.error_matches(function() nn.DataParallel(net, { shard_optimizer = true, rebuild_buckets = true }) end,
      { "nn.DataParallel: rebuild_buckets = true cannot go with shard_optimizer = true" })
    assert.error_matches(function() nn.DataParallel(net, { shard_optimizer = 1 }) end, { "shard_optimizer" })
    local model = nn.DataParallel(net, { shard_optimizer = true })
    -- the wrapper moved the parameters into its buffers: an optimizer of the old ones refuses to step
    old[1].grad = tl.zeros(2, 3)
    assert.error_matches(function() stale:step() end,
      { "was replaced (moved to nn.DataParallel's flat buffers (shard_optimizer))",
        "build the optimizer after model:to(...) and nn.DataParallel(...)" })
    local extra = tl.zeros(3, { requires_grad = true })
    local params = model:parameters()
    assert.error_matches(function() tl.optim.AdamW({ params[1], extra }, { lr = 0.1 }) end,
      { "optim.AdamW: parameter 2 of group 1 is not one of the sharded model's parameters" })
    assert.error_matches(function() tl.optim.clip_grad_norm({ params[1], extra }, 1) end,
      { "clip_grad_norm: the parameters of an nn.DataParallel with shard_optimizer are clipped all together" })
    assert.error_matches(function() tl.optim.clip_grad_norm({ params[1] }, 1) end, { "not some of them" })
    local opt = tl.optim.AdamW(params, { lr = 0.1 })
    assert.error_matches(function() opt:load_state_dict({ state = {}, param_groups = { { params = { 1 } } } }) end,
      { "load_state_dict: parameter group 1 has 1 parameters in the state dict, 2 in the optimizer" })
    local sd = opt:state_dict()
    sd.state[1] = { step = 1, exp_avg = tl.zeros(2, 3), exp_avg_sq = tl.zeros(5) }
    assert.error_matches(function() opt:load_state_dict(sd) end,
      { "load_state_dict: state 'exp_avg_sq' of parameter 1 has shape [5], the parameter [2, 3]" })
  end)

  it("clip_grad_norm over the shards: the norms 2, 3 and inf of the plain clip, the gradients scaled alike", function()
    for _, norm_type in ipairs({ 2, 3, math.huge }) do
      tl.manual_seed(5)
      local plain = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)):double()
      local net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)):double()
      net:load_state_dict(plain:state_dict())
      local model = nn.DataParallel(net, { shard_optimizer = true, bucket_mb = 100 / (1024 * 1024) })
      local x = tl.randn(5, 4):double()
      plain(x):pow(2):sum():backward()
      model(x):pow(2):sum():backward()
      local want = tl.optim.clip_grad_norm(plain:parameters(), 0.5, norm_type)
      local got = tl.optim.clip_grad_norm(model:parameters(), 0.5, norm_type)
      assert.are.same({}, got.shape)
      assert.are.equal("float64", got.dtype)
      assert.is_true(math.abs(want:item() - got:item()) <= 1e-12 * want:item(), tostring(norm_type))
      for i, p in ipairs(plain:parameters()) do
        assert.tensor_near(p.grad, model:parameters()[i].grad, 1e-12, 1e-14)
      end
    end
  end)

  it("a parameter's value, gradient and the optimizer's kind stay what they were", function()
    tl.manual_seed(3)
    local net = nn.Linear(4, 3)
    local w = net.weight:clone()
    local model = nn.DataParallel(net, { shard_optimizer = true })
    assert.tensor_equal(w, net.weight)
    assert.are.equal(net.weight, model:parameters()[1])
    local opt = tl.optim.AdamW(model:parameters(), { lr = 0.1 })
    assert.are.equal("optim.AdamW", getmetatable(opt).__name)
    local x = tl.randn(5, 4)
    model(x):sum():backward()
    assert.tensor_near(x:sum(1):expand(3, 4), net.weight.grad, 1e-6, 1e-6)
    local scheduler = tl.optim.StepLR(opt, 1, { gamma = 0.5 })
    opt:step()
    scheduler:step()
    assert.are.equal(0.05, opt.param_groups[1].lr)
    assert.is_false(tl.equal(w, net.weight))
  end)
end)

-- the step captured into a CUDA graph (tl.cuda.graph) with data parallel: the collectives are
-- captured with it. Arguments: shard (0 | 1 | none: no wrapper), steps.
local graphed = [[
local dist, nn = tl.distributed, tl.nn
local shard, steps = arg[1], tonumber(arg[2])
local world, rank = dist.world_size(), dist.rank()
tl.manual_seed(7)
local x = tl.randn({ 48, 5 }):double():to("cuda")
local y = (x:narrow(2, 1, 1) * 2 - x:narrow(2, 2, 1)):tanh():view(48)
tl.manual_seed(100 + rank)
local net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1)):double():to("cuda")
local model = shard == "none" and net or nn.DataParallel(net, { bucket_mb = 200 / (1024 * 1024),
  shard_optimizer = shard == "1" })
local opt = tl.optim.AdamW(model:parameters(), { lr = 1e-2, weight_decay = 0.1 })
local step = tl.cuda.graph(function(xb, yb)
  opt:zero_grad()
  local loss = (model(xb):view(-1) - yb):pow(2):mean()
  loss:backward()
  opt:step()
  return loss
end, { warmup = 1 })
local per = 12 // world
for s = 1, steps do
  local start = (12 * (s - 1) + per * rank) % 48
  local loss = step(x:narrow(1, start + 1, per), y:narrow(1, start + 1, per))
  local global = world > 1 and dist.all_reduce(loss:detach():clone(), "avg") or loss
  if rank == 0 then print(string.format("step %d loss %.17g", s, global:item())) end
end
]]

describe("nn.DataParallel {shard_optimizer = true} over GPUs #cuda", function()
  local tl = require("tlua")
  local gpus = tl.cuda.device_count()
  if gpus < 2 or not tl.distributed.nccl_available() then
    pending(string.format("%d GPU(s) or no NCCL: ZeRO-1 across GPUs did not run (it needs 2)", gpus))
    return
  end
  it("2 sharded ranks on 2 GPUs train as one GPU, and a checkpoint of theirs goes on in one (adamw, float64)",
    function()
      local one = train_run(0, "adamw 0 10 1 0.5 0 - cuda")
      local sharded = train_run(2, "adamw 1 10 1 0.5 0 - cuda")
      assert_close(one.loss, sharded.loss, "loss")
      assert_close(one.norm, sharded.norm, "clipped norm")
      assert_close(one.params, sharded.params, "parameter sum")
      assert.is_true(sharded.bytes[0] < one.bytes[0] and sharded.bytes[1] < one.bytes[0])
      assert.are.equal(one.bytes[0], sharded.bytes[0] + sharded.bytes[1])
      train_run(2, "adamw 1 5 1 0.5 5 - cuda")
      local resumed = train_run(0, "adamw 0 5 6 0.5 0 ck.safetensors cuda")
      assert_close({ table.unpack(one.loss, 6, 10) }, resumed.loss, "loss after resuming on one GPU")
    end)
  it("a step captured into a CUDA graph with data parallel (plain and sharded) trains as one GPU eagerly", function()
    local path = script("graphed.lua", graphed)
    local function losses(nproc, shard)
      local code, out = launch(nproc, path, shard .. " 8")
      assert.are.equal(0, code, out)
      return numbers(out, "step %d+ loss (%S+)")
    end
    local one = losses(0, "none")
    assert.are.equal(8, #one)
    assert_close(one, losses(2, "0"), "loss, plain data parallel in a graph")
    assert_close(one, losses(2, "1"), "loss, ZeRO-1 in a graph")
  end)
end)
