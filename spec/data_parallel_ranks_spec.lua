-- Several ranks on the CPU (tlua --nproc N, the launcher's loopback store, no NCCL): the
-- collectives' values, rank 0's parameters reaching every rank, two ranks of batch B training
-- exactly as one process of batch 2B (float64), a failing rank ending the job, and
-- tl.checkpoint keeping every rank's RNG state (each rank's restored on load).
local files = require("helpers.files")


local ranks = require("helpers.ranks")
local run = ranks.run
local scratch = ranks.scratch(before_each, after_each)
local script, launch = scratch.script, scratch.launch

local collectives = [[
local dist = tl.distributed
local r, w = dist.rank(), dist.world_size()
assert(w == tonumber(arg[1]), "world size " .. w)
local device = arg[2] or "cpu"
local function check(t, expected, what)
  for i, v in ipairs(expected) do
    local got = t[i]
    if type(got) == "boolean" then got = got and 1 or 0 end
    if math.abs(got - v) > 1e-12 * math.max(1, math.abs(v)) then
      error(string.format("%s: element %d is %s, expected %s", what, i, tostring(got), tostring(v)))
    end
  end
end
local function over_ranks(fn, combine)
  local acc = fn(0)
  for k = 1, w - 1 do acc = combine(acc, fn(k)) end
  return acc
end
local function values(k) return { k + 1, -(k + 1), (k + 1) * 0.5 } end
local function zip(a, b, f) local out = {} for i = 1, #a do out[i] = f(a[i], b[i]) end return out end
local expected = {
  sum = over_ranks(values, function(a, b) return zip(a, b, function(x, y) return x + y end) end),
  product = over_ranks(values, function(a, b) return zip(a, b, function(x, y) return x * y end) end),
  min = over_ranks(values, function(a, b) return zip(a, b, math.min) end),
  max = over_ranks(values, function(a, b) return zip(a, b, math.max) end),
}
expected.avg = zip(expected.sum, expected.sum, function(x) return x / w end)
for _, dtype in ipairs({ "float64", "float32", "bfloat16" }) do
  for _, op in ipairs({ "sum", "avg", "product", "min", "max" }) do
    local t = tl.tensor(values(r), { dtype = dtype, device = device })
    dist.all_reduce(t, op)
    t = t:cpu()
    local tol = dtype == "float64" and 0 or 1e-2
    for i, v in ipairs(expected[op]) do
      if math.abs(t[i] - v) > tol * math.max(1, math.abs(v)) then
        error(string.format("%s %s: element %d is %s, expected %s", dtype, op, i, tostring(t[i]), tostring(v)))
      end
    end
  end
end
local n = tl.tensor({ r, 10 * r }, { dtype = "int64", device = device })
dist.all_reduce(n, "sum")
check(n:cpu(), { w * (w - 1) / 2, 10 * w * (w - 1) / 2 }, "int64 sum")
local any = tl.tensor({ r == 1, false }, { device = device })
dist.all_reduce(any, "max")
check(any:cpu(), { w > 1 and 1 or 0, 0 }, "bool max")
local b = tl.tensor({ { r, r }, { r, r } }, { dtype = "float64", device = device })
dist.broadcast(b, w - 1)
check(b:cpu():view(4), { w - 1, w - 1, w - 1, w - 1 }, "broadcast")
-- the barrier: nobody passes before every rank has written its file
local f = io.open(string.format("arrived.%d", r), "w") f:write("x") f:close()
dist.barrier()
for k = 0, w - 1 do assert(io.open(string.format("arrived.%d", k)), "rank " .. k .. " passed the barrier late") end
dist.barrier()
assert(dist.store_add("count", 1) <= w)
print(string.format("ok rank %d of %d", r, w))
]]

describe("tl.distributed over several CPU ranks", function()
  for _, nproc in ipairs({ 2, 3 }) do
    it(nproc .. " ranks: all_reduce (every op, three dtypes), broadcast, barrier", function()
      local code, out = launch(nproc, script("collectives.lua", collectives), tostring(nproc))
      assert.are.equal(0, code, out)
      for r = 0, nproc - 1 do
        assert.matches(string.format("ok rank %d of %d", r, nproc), out, 1, true)
      end
    end)
  end

  it("a shape mismatch between ranks is a clear error, and the job ends", function()
    local code, out = launch(2, script("mismatch.lua", [[
      local t = tl.zeros({ tl.distributed.rank() + 2 }, { dtype = "float64" })
      tl.distributed.all_reduce(t, "sum")
    ]]))
    assert.are_not.equal(0, code)
    assert.matches("every rank must pass the same shape and dtype", out, 1, true)
    assert.matches("tlua %-%-nproc: rank %d", out)
  end)

  it("a rank that fails while the others wait in a collective ends them, with its message", function()
    local code, out = launch(3, script("fail.lua", [[
      local dist = tl.distributed
      dist.barrier()
      if dist.rank() == 1 then error("rank one gives up") end
      dist.all_reduce(tl.ones({ 4 }), "sum") -- ranks 0 and 2 wait here for rank 1
      print("should not get here")
    ]]))
    assert.are_not.equal(0, code)
    assert.matches("rank one gives up", out, 1, true)
    assert.matches("tlua --nproc: rank 1", out, 1, true)
    assert.is_nil(out:find("should not get here", 1, true))
  end)
end)

-- float64 MLP: 2 ranks with batch B (sharded loader, DataParallel) against 1 process with 2B;
-- rank r starts from seed 100 + r, so only the broadcast from rank 0 makes them agree
local train = [[
local dist, nn = tl.distributed, tl.nn
local B, steps, optimizer, device = tonumber(arg[1]), tonumber(arg[2]), arg[3], arg[4] or "cpu"
tl.manual_seed(7)
local x = tl.randn({ 64, 5 }):double():to(device)
local y = (x:narrow(2, 1, 1) * 2 - x:narrow(2, 2, 1)):tanh():view(64)
local ds = tl.data.TensorDataset(x, y)
tl.manual_seed(100 + dist.rank())
local model = nn.DataParallel(nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1)):double():to(device),
  { bucket_mb = 200 / (1024 * 1024) })
local params = model:parameters()
local opt = optimizer == "adamw" and tl.optim.AdamW(params, { lr = 1e-2, weight_decay = 0.1 })
  or tl.optim.SGD(params, { lr = 0.03, momentum = 0.9 })
local loader = tl.data.DataLoader { ds, batch_size = B, shuffle = true, seed = 3, shard = true }
local step = 0
for epoch = 1, 100 do
  for xb, yb in loader:iter() do
    step = step + 1
    if step > steps then break end
    opt:zero_grad()
    local loss = (model(xb):view(-1) - yb):pow(2):mean()
    loss:backward()
    opt:step()
    local global = dist.all_reduce(loss:detach():clone(), "avg")
    if dist.is_main() then print(string.format("step %d loss %.17g", step, global:item())) end
  end
  if step > steps then break end
end
local flat = {}
for _, p in ipairs(params) do flat[#flat + 1] = p:view(-1) end
local sum = 0
for _, f in ipairs(flat) do sum = sum + f:sum():item() end
-- every rank holds the same parameters
local lo = tl.tensor({ sum }, { dtype = "float64", device = device })
local hi = tl.tensor({ sum }, { dtype = "float64", device = device })
dist.all_reduce(lo, "min")
dist.all_reduce(hi, "max")
assert(lo:item() == hi:item(), "the ranks' parameters differ")
if dist.is_main() then print(string.format("params %.17g", sum)) end
]]

local function numbers(out, pattern)
  local list = {}
  for v in out:gmatch(pattern) do list[#list + 1] = tonumber(v) end
  return list
end

local function same_numbers(optimizer, device)
      local path = script("train.lua", train)
      local code1, one = launch(0, path, "8 12 " .. optimizer .. " " .. device)
      assert.are.equal(0, code1, one)
      local code2, two = launch(2, path, "4 12 " .. optimizer .. " " .. device)
      assert.are.equal(0, code2, two)
      local l1, l2 = numbers(one, "step %d+ loss (%S+)"), numbers(two, "step %d+ loss (%S+)")
      assert.are.equal(12, #l1)
      assert.are.equal(12, #l2)
      for i = 1, 12 do
        assert.is_true(math.abs(l1[i] - l2[i]) <= 1e-12 * math.abs(l1[i]),
          string.format("step %d: %.17g vs %.17g", i, l1[i], l2[i]))
      end
      assert.is_true((l1[9] + l1[10] + l1[11] + l1[12]) / 4 < l1[1]) -- it trains
      local p1, p2 = numbers(one, "params (%S+)"), numbers(two, "params (%S+)")
      assert.is_true(math.abs(p1[1] - p2[1]) <= 1e-11 * math.abs(p1[1]), one .. two)
      -- rank 0 alone logs
      assert.are.equal(12, select(2, two:gsub("step %d+ loss", "")))
end

describe("nn.DataParallel over two CPU ranks", function()
  for _, optimizer in ipairs({ "sgd", "adamw" }) do
    it("batch 4 on each of 2 ranks trains as batch 8 on one (" .. optimizer .. ", float64)", function()
      same_numbers(optimizer, "cpu")
    end)
  end
end)

describe("tl.checkpoint over several CPU ranks", function()
  -- save: every rank seeds and draws differently, records its RNG state and what it draws after
  -- the save; load: every rank scrambles its generator, loads, and must draw those numbers again
  local ranks = [[
local dist = tl.distributed
local r = dist.rank()
local function numbers(t)
  local out = {}
  for i, v in ipairs(t:totable()) do out[i] = string.format("%.17g", v) end
  return table.concat(out, " ")
end
local function write(name, text)
  local f = assert(io.open(name .. "." .. r, "w"))
  f:write(text)
  f:close()
end
local function read(name)
  local f = assert(io.open(name .. "." .. r))
  local text = f:read("a")
  f:close()
  return text
end
if arg[1] == "save" then
  tl.manual_seed(100 + 7 * r)
  for _ = 0, r do tl.rand(3) end -- the counters differ too
  local model = tl.nn.Linear(2, 2)
  write("state", numbers(tl.get_rng_state()))
  tl.checkpoint.save("ck.safetensors", { model = model, step = 3 })
  write("next", numbers(tl.rand(4, { dtype = "float64" })))
  print("saved on rank " .. r)
else
  tl.manual_seed(999)
  local model = tl.nn.Linear(2, 2)
  tl.checkpoint.load("ck.safetensors", { model = model })
  local drawn = numbers(tl.rand(4, { dtype = "float64" }))
  assert(drawn == read("next"), "rank " .. r .. " drew " .. drawn .. ", expected " .. read("next"))
  print("restored on rank " .. r)
end
]]

  local function numbers_of(path)
    local out = {}
    for v in assert(files.read_file(path)):gmatch("%S+") do out[#out + 1] = math.tointeger(tonumber(v)) end
    return out
  end

  it("save gathers every rank's RNG state into the file; load gives each rank its own", function()
    local path = script("ranks.lua", ranks)
    local code, out = launch(3, path, "save")
    assert.are.equal(0, code, out)
    for r = 0, 2 do assert.matches("saved on rank " .. r, out, 1, true) end
    -- the file holds [3, 2]: row r + 1 is rank r's state at the save
    local tl = require("tlua")
    local ck = scratch.dir .. "/ck.safetensors"
    local state, info = tl.checkpoint.read(ck)
    assert.are.equal(3, state.step)
    assert.are.same({ 3, 2 }, info.rng.shape)
    local rows = info.rng:totable()
    for r = 0, 2 do assert.are.same(numbers_of(scratch.dir .. "/state." .. r), rows[r + 1]) end
    assert.are_not.same(rows[1], rows[2])
    assert.are_not.same(rows[2], rows[3])
    code, out = launch(3, path, "load")
    assert.are.equal(0, code, out)
    for r = 0, 2 do assert.matches("restored on rank " .. r, out, 1, true) end
    -- another world size cannot take the ranks' states (but can load without them)
    code, out = launch(2, path, "load")
    assert.are_not.equal(0, code)
    assert.matches("holds the RNG states of 3 ranks, this run has 2", out, 1, true)
    local model = tl.nn.Linear(2, 2)
    local before = tl.get_rng_state()
    assert.error_matches(function() tl.checkpoint.load(ck, { model = model }) end,
      { "checkpoint.load: ", "holds the RNG states of 3 ranks, this run has 1", "{rng = false}" })
    assert.tensor_equal(before, tl.get_rng_state())
    tl.checkpoint.load(ck, { model = model }, { rng = false })
    assert.tensor_equal(before, tl.get_rng_state())
  end)
end)

-- ---- CUDA: NCCL across GPUs ----------------------------------------------------------------------
describe("tl.distributed and nn.DataParallel over GPUs #cuda", function()
  local tl = require("tlua")
  local gpus = tl.cuda.device_count()
  if gpus == 0 or not tl.distributed.nccl_available() then
    pending("no CUDA device or no NCCL: the NCCL specs did not run")
    return
  end
  if gpus == 1 then
    pending("one GPU: NCCL across ranks did not run (it needs a GPU per rank)")
    it("two ranks on one GPU get a clear error before NCCL refuses them", function()
      local code, out = launch(2, script("shared.lua", [[
        tl.distributed.all_reduce(tl.ones({ 4 }, { device = "cuda" }), "sum")
      ]]))
      assert.are_not.equal(0, code)
      assert.matches("2 ranks share this host's 1 GPU, and NCCL takes one GPU per rank", out, 1, true)
    end)
    return
  end
  it("2 ranks: all_reduce (every op, three dtypes), broadcast, barrier through NCCL", function()
    local code, out = launch(2, script("collectives.lua", collectives), "2 cuda")
    assert.are.equal(0, code, out)
    assert.matches("ok rank 1 of 2", out, 1, true)
  end)
  it("batch 4 on each of 2 GPUs trains as batch 8 on one (adamw, float64)", function()
    same_numbers("adamw", "cuda")
  end)
end)
