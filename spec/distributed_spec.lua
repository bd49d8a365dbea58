-- Data-parallel pieces in one process: autograd's grad-ready hooks and queued callbacks, the
-- bucket layout and the reducer's launch order, DataLoader shards, tl.distributed as a world of
-- one, and nn.DataParallel against the plain model in float64.
local tl = require("tlua")
local nn = tl.nn
local buckets = require("tlua.nn.buckets")

local dist = tl.distributed

describe("grad-ready hooks", function()
  it("run once per pass per leaf, after every gradient of the pass is in", function()
    local w = tl.tensor({ 1, 2, 3 }, { dtype = "float64", requires_grad = true })
    local b = tl.tensor({ 0.5 }, { dtype = "float64", requires_grad = true })
    local seen = {}
    tl.autograd.set_grad_ready_hook(w, function(t)
      seen[#seen + 1] = { "w", t.grad:clone() }
    end)
    tl.autograd.set_grad_ready_hook(b, function(t) seen[#seen + 1] = { "b", t.grad:clone() } end)
    -- w is used three times: the hook must see the sum of all three contributions
    local y = (w * w):sum() + (w * 3):sum() + (w + b):sum()
    y:backward()
    assert.are.equal(2, #seen)
    local by = {}
    for _, s in ipairs(seen) do by[s[1]] = s[2] end
    assert.tensor_near({ 2 * 1 + 4, 2 * 2 + 4, 2 * 3 + 4 }, by.w, 0, 1e-12)
    assert.tensor_near({ 3 }, by.b, 0, 1e-12)
  end)

  it("fire in the order backward finishes the leaves, and not for leaves outside the graph", function()
    local a = tl.tensor({ 2 }, { dtype = "float64", requires_grad = true })
    local c = tl.tensor({ 3 }, { dtype = "float64", requires_grad = true })
    local unused = tl.tensor({ 1 }, { dtype = "float64", requires_grad = true })
    local order = {}
    tl.autograd.set_grad_ready_hook(a, function() order[#order + 1] = "a" end)
    tl.autograd.set_grad_ready_hook(c, function() order[#order + 1] = "c" end)
    tl.autograd.set_grad_ready_hook(unused, function() order[#order + 1] = "unused" end)
    local h = (a * 2):exp() -- a is used first in forward, so it is finished last in backward
    local y = (h * c):sum()
    y:backward()
    assert.are.same({ "c", "a" }, order)
  end)

  it("stop backward with the hook's error, and nil removes a hook", function()
    local x = tl.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
    tl.autograd.set_grad_ready_hook(x, function() error("no luck") end)
    local ok, err = pcall(function() (x * x):sum():backward() end)
    assert.is_false(ok)
    assert.matches("grad%-ready hook: .*no luck", tostring(err))
    tl.autograd.set_grad_ready_hook(x, nil)
    x.grad = nil
    ;(x * x):sum():backward()
    assert.tensor_near({ 2, 4 }, x.grad, 0, 1e-12)
  end)

  it("reject bad arguments", function()
    local x = tl.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
    assert.error_matches(function() tl.autograd.set_grad_ready_hook(x, 3) end, "a function or nil")
    assert.error_matches(function() tl.autograd.set_grad_ready_hook(tl.zeros({ 2 }), function() end) end,
      "does not require grad")
    assert.error_matches(function() tl.autograd.set_grad_ready_hook(x * 2, function() end) end, "not a leaf")
    assert.error_matches(function() tl.autograd.queue_callback(function() end) end, "no backward is running")
  end)

  it("queue_callback runs once the backward ends, after every hook", function()
    local x = tl.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
    local z = tl.tensor({ 3 }, { dtype = "float64", requires_grad = true })
    local events = {}
    local function hook(name)
      return function()
        events[#events + 1] = name
        if #events == 1 then tl.autograd.queue_callback(function() events[#events + 1] = "end" end) end
      end
    end
    tl.autograd.set_grad_ready_hook(x, hook("x"))
    tl.autograd.set_grad_ready_hook(z, hook("z"))
    ;(x * z):sum():backward()
    assert.are.equal(3, #events)
    assert.are.equal("end", events[3])
  end)
end)

describe("gradient accumulation into an existing grad", function()
  it("adds in place, so a grad that is a view of a buffer stays one", function()
    local buffer = tl.zeros({ 5 }, { dtype = "float64" })
    local x = tl.tensor({ 1, 2, 3 }, { dtype = "float64", requires_grad = true })
    x.grad = buffer:narrow(1, 2, 3)
    ;(x * x):sum():backward()
    ;(x * 10):sum():backward()
    assert.tensor_near({ 0, 12, 14, 16, 0 }, buffer, 0, 1e-12)
    assert.tensor_near({ 12, 14, 16 }, x.grad, 0, 1e-12)
  end)
end)

describe("buckets.assign", function()
  local function params(sizes, dtype)
    local out = {}
    for i, n in ipairs(sizes) do out[i] = { numel = n, bytes_per_element = 4, dtype = dtype or "float32", device = "cpu" } end
    return out
  end

  it("fills buckets in reverse registration order up to the cap", function()
    -- 4 bytes per element, cap 100 bytes: 25 elements
    local list = buckets.assign(params({ 10, 10, 10, 30, 5 }), { cap_bytes = 100 })
    assert.are.equal(2, #list)
    assert.are.same({ 5, 4 }, list[1].params) -- 5 + 30 elements = 140 bytes >= 100: closes
    assert.are.same({ 0, 5 }, list[1].offsets)
    assert.are.equal(35, list[1].numel)
    assert.are.same({ 3, 2, 1 }, list[2].params) -- 120 bytes: closes after the third
    assert.are.equal(120, list[2].bytes)
    assert.are.same({ 0, 10, 20 }, list[2].offsets)
  end)

  it("puts every parameter in exactly one bucket, a big one alone", function()
    local sizes = { 7, 1000, 3, 3, 3, 64 }
    local list = buckets.assign(params(sizes), { cap_bytes = 64 })
    local count = {}
    for _, b in ipairs(list) do
      local sum = 0
      for k, i in ipairs(b.params) do
        count[i] = (count[i] or 0) + 1
        assert.are.equal(sum, b.offsets[k])
        sum = sum + sizes[i]
      end
      assert.are.equal(sum, b.numel)
    end
    for i = 1, #sizes do assert.are.equal(1, count[i]) end
    for _, b in ipairs(list) do
      if b.params[1] == 2 then assert.are.same({ 2 }, b.params) end
    end
  end)

  it("keeps dtypes and devices apart and follows a given order", function()
    local ps = params({ 4, 4, 4, 4 })
    ps[2].dtype, ps[4].dtype = "float64", "float64"
    local list = buckets.assign(ps, { cap_bytes = 1e9, order = { 1, 2, 3, 4 } })
    assert.are.equal(2, #list)
    assert.are.same({ 1, 3 }, list[1].params)
    assert.are.same({ 2, 4 }, list[2].params)
    assert.are.equal("float64", list[2].dtype)
  end)

  it("rejects bad orders and caps", function()
    assert.error_matches(function() buckets.assign(params({ 1, 2 }), { order = { 1, 1 } }) end, "each parameter index once")
    assert.error_matches(function() buckets.assign(params({ 1, 2 }), { order = { 1 } }) end, "lists 1 parameters, expected 2")
    assert.error_matches(function() buckets.assign(params({ 1 }), { cap_bytes = 0 }) end, "cap_bytes")
  end)
end)

describe("buckets.Reducer", function()
  local function three_buckets()
    return { { params = { 5, 4 } }, { params = { 3 } }, { params = { 2, 1 } } }
  end

  it("launches a bucket the moment its last gradient is ready, in bucket order", function()
    local launched = {}
    local r = buckets.Reducer(three_buckets(), function(b) launched[#launched + 1] = b end)
    r:mark_ready(5)
    assert.are.same({}, launched)
    r:mark_ready(4)
    assert.are.same({ 1 }, launched)
    -- bucket 3 is complete before bucket 2: it waits, then both go in order
    r:mark_ready(1)
    r:mark_ready(2)
    assert.are.same({ 1 }, launched)
    r:mark_ready(3)
    assert.are.same({ 1, 2, 3 }, launched)
    assert.is_true(r:done())
    assert.are.same({ 5, 4, 1, 2, 3 }, r.order)
  end)

  it("resets for a new pass, finds unready parameters, rejects double marks", function()
    local launched = {}
    local r = buckets.Reducer(three_buckets(), function(b) launched[#launched + 1] = b end)
    r:mark_ready(5)
    assert.error_matches(function() r:mark_ready(5) end, "marked ready twice")
    assert.error_matches(function() r:mark_ready(9) end, "in no bucket")
    r:reset()
    for _, i in ipairs({ 5, 4, 3, 2 }) do r:mark_ready(i) end
    assert.is_false(r:done())
    assert.are.same({ 1 }, r:unready())
    r:finish_unready()
    assert.is_true(r:done())
    assert.are.same({ 1, 2, 3 }, launched)
  end)
end)

describe("DataLoader shards", function()
  local function epoch_batches(loader)
    local out = {}
    for x in loader:iter() do
      local list = {}
      for i = 1, x:numel() do list[i] = math.tointeger(x[i]) end
      out[#out + 1] = list
    end
    return out
  end

  for _, case in ipairs({ { n = 20, b = 3, world = 2, drop = false }, { n = 23, b = 2, world = 3, drop = false },
    { n = 23, b = 2, world = 3, drop = true }, { n = 8, b = 4, world = 4, drop = false } }) do
    it(string.format("n=%d batch=%d world=%d drop_last=%s: the ranks' batches k make the global batch k",
      case.n, case.b, case.world, tostring(case.drop)), function()
      local ds = tl.data.TensorDataset(tl.arange(1, case.n + 1):long())
      local global = epoch_batches(tl.data.DataLoader { ds, batch_size = case.b * case.world, shuffle = true,
        seed = 7, drop_last = case.drop })
      local per_rank = {}
      for r = 0, case.world - 1 do
        local loader = tl.data.DataLoader { ds, batch_size = case.b, shuffle = true, seed = 7,
          drop_last = case.drop, shard = { r, case.world } }
        per_rank[r] = epoch_batches(loader)
        assert.are.equal(#global, #per_rank[r])
        assert.are.equal(#global, #loader)
      end
      for k, batch in ipairs(global) do
        local union = {}
        for r = 0, case.world - 1 do
          assert.are.equal(#per_rank[0][k], #per_rank[r][k]) -- equal sizes on every rank
          for _, v in ipairs(per_rank[r][k]) do union[#union + 1] = v end
        end
        -- the union is the global batch, topped up from the start of the order when short
        local expected = { table.unpack(batch) }
        local first = global[1]
        local i = 1
        while #expected % case.world ~= 0 do
          expected[#expected + 1] = first[i]
          i = i + 1
        end
        assert.are.same(expected, union)
      end
    end)
  end

  it("rejects bad shards", function()
    local ds = tl.data.TensorDataset(tl.arange(1, 5))
    assert.error_matches(function() tl.data.DataLoader { ds, shard = { 2, 2 } } end, "shard must be {rank, world}")
    assert.error_matches(function() tl.data.DataLoader { ds, shard = { 0 } } end, "shard must be {rank, world}")
    assert.error_matches(function() tl.data.DataLoader { ds, shard = { 0, 9 } } end, "fewer than the 9 ranks")
    local loader = tl.data.DataLoader { ds, batch_size = 2, shard = true }
    assert.are.equal(2, #loader) -- a world of one
  end)
end)

describe("tl.distributed in a world of one", function()
  it("is rank 0 of 1 and its collectives leave CPU tensors as they are", function()
    assert.are.equal(0, dist.rank())
    assert.are.equal(1, dist.world_size())
    assert.is_true(dist.is_main())
    local t = tl.tensor({ 1.5, -2, 3 }, { dtype = "float64" })
    for _, op in ipairs({ "sum", "avg", "mean", "product", "min", "max" }) do
      assert.are.equal(t, dist.all_reduce(t, op))
      assert.tensor_near({ 1.5, -2, 3 }, t, 0, 0)
    end
    dist.broadcast(t, 0)
    dist.barrier()
    local w = dist.all_reduce_start(t, "avg")
    w:wait()
    local queued, comm = w:timing()
    assert.are.equal(0, queued)
    assert.are.equal(0, comm)
  end)

  it("gives clear errors", function()
    local t = tl.tensor({ 1, 2 }, { dtype = "int64" })
    assert.error_matches(function() dist.all_reduce(t, "avg") end, "\"avg\" needs a floating dtype, got int64")
    assert.error_matches(function() dist.all_reduce(t, "median") end, "op expected \"sum\"")
    assert.error_matches(function() dist.all_reduce(tl.tensor({ true }), "sum") end, "does not take bool")
    assert.error_matches(function() dist.broadcast(t, 1) end, "root must be a rank in %[0, 1%), got 1")
    assert.error_matches(function() dist.all_reduce(tl.zeros({ 3, 2 }):transpose(1, 2), "sum") end, "contiguous")
    assert.error_matches(function() dist.all_reduce(3) end, "expected a tensor, got number")
    assert.error_matches(function() dist.store_get("x") end, "a world of one has no store")
  end)
end)

describe("nn.DataParallel in a world of one", function()
  local function mlp(seed)
    tl.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)):double()
  end

  it("gives the plain model's gradients, held in the buckets' buffers", function()
    local plain, wrapped = mlp(1), nn.DataParallel(mlp(1), { bucket_mb = 100 / (1024 * 1024) })
    local x = tl.randn({ 5, 6 }):double()
    for _, m in ipairs({ plain, wrapped }) do m(x):pow(2):sum():backward() end
    local pp, wp = plain:parameters(), wrapped:parameters()
    assert.are.equal(#pp, #wp)
    for i = 1, #pp do assert.tensor_near(pp[i].grad, wp[i].grad, 0, 1e-14) end
    -- 100-byte buckets of float64 parameters: several buckets, each grad a view of one
    local stats = wrapped:stats()
    assert.is_true(stats.buckets >= 2)
    local total = 0
    for _, bytes in ipairs(stats.bucket_bytes) do total = total + bytes end
    assert.are.equal(8 * wrapped:num_parameters(), total)
    wrapped._buckets[1].buffer:fill_(0)
    local zeroed = 0
    for _, p in ipairs(wp) do
      if p.grad:abs():sum():item() == 0 then zeroed = zeroed + 1 end
    end
    assert.are.equal(#wrapped._buckets[1].params, zeroed)
  end)

  it("zero_grad, then forward, starts the gradients from zero; no_sync accumulates", function()
    local plain, wrapped = mlp(2), nn.DataParallel(mlp(2))
    local x1, x2 = tl.randn({ 4, 6 }):double(), tl.randn({ 4, 6 }):double()
    wrapped(x1):sum():backward()
    wrapped:zero_grad()
    for _, p in ipairs(wrapped:parameters()) do assert.is_nil(p.grad) end
    wrapped:no_sync(function() wrapped(x1):sum():backward() end)
    wrapped(x2):sum():backward()
    plain(x1):sum():backward()
    plain(x2):sum():backward()
    local pp, wp = plain:parameters(), wrapped:parameters()
    for i = 1, #pp do assert.tensor_near(pp[i].grad, wp[i].grad, 0, 1e-13) end
  end)

  it("reports parameters that get no gradient, unless find_unused_parameters", function()
    local Two = nn.Module:extend("Two")
    function Two:init()
      self.used = nn.Linear(3, 2)
      self.unused = nn.Linear(3, 2)
    end
    function Two:forward(x) return self.used(x) end
    tl.manual_seed(3)
    local strict = nn.DataParallel(Two():double())
    local x = tl.randn({ 2, 3 }):double()
    assert.error_matches(function() strict(x):sum():backward() end,
      "2 parameter%(s%) got no gradient in this backward %(unused%.weight, unused%.bias%)")
    local lenient = nn.DataParallel(Two():double(), { find_unused_parameters = true })
    lenient(x):sum():backward()
    lenient(x):sum():backward()
    assert.tensor_near(tl.zeros({ 2, 3 }):double(), lenient.module.unused.weight.grad, 0, 0)
  end)

  it("saves and loads the wrapped module's state dict, without a prefix", function()
    local wrapped = nn.DataParallel(mlp(4))
    local keys = nn.keys(wrapped:state_dict())
    assert.are.same(nn.keys(mlp(4):state_dict()), keys)
    local other = mlp(5)
    other:load_state_dict(wrapped:state_dict())
    assert.tensor_near(wrapped.module[1].weight, other[1].weight, 0, 0)
  end)

  it("lays the buckets out again in the observed ready order after the first backward", function()
    local Rev = nn.Module:extend("Rev")
    function Rev:init()
      self.a = nn.Linear(4, 4) -- registered first, used last: ready first
      self.b = nn.Linear(4, 4)
    end
    function Rev:forward(x) return self.a(self.b(x)) end
    tl.manual_seed(6)
    local plain = Rev():double()
    tl.manual_seed(6)
    local wrapped = nn.DataParallel(Rev():double(), { bucket_mb = 1 / (1024 * 1024) })
    local first = {}
    for _, b in ipairs(wrapped._buckets) do first[#first + 1] = table.concat(b.params, ",") end
    local x = tl.randn({ 3, 4 }):double()
    wrapped(x):sum():backward()
    plain(x):sum():backward()
    local after = {}
    for _, b in ipairs(wrapped._buckets) do after[#after + 1] = table.concat(b.params, ",") end
    assert.are_not.same(first, after)
    assert.are.same(wrapped._reducer.buckets, wrapped._buckets)
    -- the gradients moved with the layout, and the next passes still match the plain model
    local pp, wp = plain:parameters(), wrapped:parameters()
    for i = 1, #pp do assert.tensor_near(pp[i].grad, wp[i].grad, 0, 1e-14) end
    wrapped(x):sum():backward()
    plain(x):sum():backward()
    for i = 1, #pp do assert.tensor_near(pp[i].grad, wp[i].grad, 0, 1e-14) end
  end)

  it("rejects what is not a module", function()
    assert.error_matches(function() nn.DataParallel(3) end, "expected a module, got number")
    assert.error_matches(function() nn.DataParallel(nn.Tanh()) end, "has no parameters")
    assert.error_matches(function() nn.DataParallel(mlp(1), { bucket_mb = -1 }) end, "bucket_mb must be a number > 0")
  end)
end)

-- ---- CUDA: NCCL in a world of one ---------------------------------------------------------------
describe("tl.distributed and nn.DataParallel on cuda #cuda", function()
  if tl.cuda.device_count() == 0 or not dist.nccl_available() then
    pending("no CUDA device or no NCCL: the CUDA specs of tl.distributed did not run")
    return
  end

  it("all_reduce and broadcast through NCCL (one rank) keep every dtype's values", function()
    for _, dtype in ipairs({ "float32", "float64", "bfloat16", "float16", "int32", "int64" }) do
      for _, op in ipairs({ "sum", "product", "min", "max" }) do
        local t = tl.tensor({ 1, -2, 3, 4 }, { dtype = dtype, device = "cuda" })
        dist.all_reduce(t, op)
        assert.tensor_near({ 1, -2, 3, 4 }, t:double():cpu(), 0, 0)
      end
    end
    local f = tl.tensor({ 0.5, 2 }, { device = "cuda" })
    dist.all_reduce(f, "avg")
    dist.broadcast(f, 0)
    assert.tensor_near({ 0.5, 2 }, f:cpu(), 0, 0)
    local w = dist.all_reduce_start(f, "sum")
    w:wait()
    local queued, comm = w:timing()
    assert.is_true(queued >= comm and comm >= 0)
    assert.error_matches(function() dist.all_reduce(tl.zeros({ 2 }, { device = "cuda" }):expand(3, 2), "sum") end,
      "contiguous")
  end)

  it("nn.DataParallel gives the plain model's gradients (float32 and float64)", function()
    for _, dtype in ipairs({ "float64", "float32" }) do
      local function mlp()
        tl.manual_seed(11)
        return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10)):to(dtype):to("cuda")
      end
      local plain, wrapped = mlp(), nn.DataParallel(mlp(), { bucket_mb = 4096 / (1024 * 1024) })
      local x = tl.randn({ 16, 32 }):to(dtype):cuda()
      for step = 1, 3 do
        for _, m in ipairs({ plain, wrapped }) do
          m:zero_grad()
          m(x):pow(2):mean():backward()
        end
        local pp, wp = plain:parameters(), wrapped:parameters()
        for i = 1, #pp do
          assert.tensor_near(pp[i].grad:cpu(), wp[i].grad:cpu(), dtype == "float64" and 1e-14 or 1e-6, 1e-6,
            dtype .. " step " .. step)
        end
      end
      local stats = wrapped:stats()
      assert.is_true(stats.buckets >= 2)
      assert.is_true(stats.comm_ms >= 0 and stats.exposed_ms >= 0)
    end
  end)
end)

describe("nn.DataParallel's lifetime", function()
  it("is collected with its model: the parameters' hooks hold it weakly", function()
    local weak = setmetatable({}, { __mode = "v" })
    do
      local m = nn.DataParallel(nn.Linear(4, 2):double())
      m(tl.randn({ 3, 4 }):double()):sum():backward()
      weak[1], weak[2] = m, m.module.weight
    end
    collectgarbage()
    collectgarbage()
    assert.is_nil(weak[1])
    assert.is_nil(weak[2])
  end)

  it("recovers when a backward fails half way", function()
    tl.manual_seed(9)
    local m = nn.DataParallel(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1)):double(),
      { bucket_mb = 1 / (1024 * 1024) })
    local x = tl.randn({ 3, 4 }):double():requires_grad_(true)
    -- x is finished last: every parameter's hook has run (the pass is open) when this one fails
    tl.autograd.set_grad_ready_hook(x, function() error("stop here") end)
    local ok, err = pcall(function() m(x):sum():backward() end)
    assert.is_false(ok)
    assert.matches("stop here", tostring(err))
    tl.autograd.set_grad_ready_hook(x, nil)
    m:zero_grad()
    m(x):sum():backward()
    tl.manual_seed(9)
    local plain = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1)):double()
    plain(x):sum():backward()
    for i, p in ipairs(plain:parameters()) do assert.tensor_near(p.grad, m:parameters()[i].grad, 0, 1e-14) end
  end)
end)
