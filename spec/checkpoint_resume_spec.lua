-- tl.checkpoint: a training run (Dropout, BatchNorm, AdamW or SGD momentum, a scheduler, a shuffled DataLoader) stopped after k steps and resumed from one file into fresh objects gives bitwise the parameters of the uninterrupted run (float64, CPU; float32 noise on CUDA); plain values round-trip exactly; bad files and mismatched objects raise and change nothing.
local tl = require("tlua")
local nn, optim, data = tl.nn, tl.optim, tl.data
local files = require("helpers.files")

local dir
before_each(function() dir = files.make_temp_dir() end)
after_each(function() files.remove_dir(dir) end)

local N, FEATURES, CLASSES, BATCH = 44, 6, 3, 8 -- 6 batches an epoch, the last of 4

-- a data set of its own seed (the same in every run)
local function dataset(dtype, device)
  tl.manual_seed(100)
  local x = tl.randn(N, FEATURES, { dtype = dtype })
  local y = tl.randint(1, CLASSES + 1, { N }, { dtype = "int64" })
  return data.TensorDataset(x:to(device), y:to(device))
end

-- fresh objects of a run; the seed only changes their initial values (a resumed run's come
-- from the checkpoint)
local function build(seed, kind, dtype, device)
  tl.manual_seed(seed)
  local model = nn.Sequential(nn.Linear(FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
    nn.Linear(16, CLASSES)):to(dtype):to(device)
  local opt, sched
  if kind == "adamw" then
    opt = optim.AdamW(model:parameters(), { lr = 0.01, weight_decay = 0.05 })
    sched = optim.OneCycleLR(opt, 0.02, { total_steps = 20 })
  else
    opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9, weight_decay = 1e-3, nesterov = true })
    sched = optim.CosineAnnealingLR(opt, 16, { eta_min = 1e-3 })
  end
  -- shuffled, its seed drawn from tl's generator (the checkpoint restores it)
  local loader = data.DataLoader { dataset(dtype, device), batch_size = BATCH, shuffle = true }
  tl.manual_seed(seed + 1)
  return { model = model, optimizer = opt, scheduler = sched, loader = loader }
end

local loss_fn = nn.CrossEntropyLoss()

-- trains steps first..last (epochs as the loader gives them); at step save_at writes a checkpoint
local function train(o, first, last, save_at, path)
  local step = first - 1
  while step < last do
    for x, y in o.loader:iter() do
      step = step + 1
      local loss = loss_fn(o.model(x), y)
      o.optimizer:zero_grad()
      loss:backward()
      o.optimizer:step()
      o.scheduler:step()
      if step == save_at then
        tl.checkpoint.save(path, { model = o.model, optimizer = o.optimizer, scheduler = o.scheduler,
          loader = o.loader, step = step, extra = { loss = loss:item(), note = "mid-epoch" } })
      end
      if step == last then break end
    end
  end
end

local function assert_same_state(a, b, exact, rtol)
  local sa, sb = a.model:state_dict(), b.model:state_dict()
  assert.are.same(nn.keys(sa), nn.keys(sb))
  for name, t in pairs(sa) do
    if exact then
      assert.tensor_equal(t, sb[name], name)
    else
      assert.tensor_near(t:to("cpu"), sb[name]:to("cpu"), rtol, rtol, name)
    end
  end
  local oa, ob = a.optimizer:state_dict(), b.optimizer:state_dict()
  for i, s in pairs(oa.state) do
    for k, v in pairs(s) do
      if tl.is_tensor(v) then
        if exact then
          assert.tensor_equal(v, ob.state[i][k])
        else
          assert.tensor_near(v:to("cpu"), ob.state[i][k]:to("cpu"), rtol, rtol)
        end
      else
        assert.are.equal(v, ob.state[i][k])
      end
    end
  end
  assert.are.equal(a.optimizer.param_groups[1].lr, b.optimizer.param_groups[1].lr)
end

local TOTAL = 16

describe("tl.checkpoint resume (CPU, float64)", function()
  for _, case in ipairs({ { kind = "adamw", k = 8 }, { kind = "sgd", k = 9 }, { kind = "adamw", k = 3 } }) do
    it(string.format("%s: stopped after %d steps (mid-epoch) and resumed gives bitwise the same run", case.kind,
      case.k), function()
      local path = dir .. "/run.safetensors"
      local full = build(7, case.kind, "float64", "cpu")
      train(full, 1, TOTAL, case.k, path)

      local resumed = build(12345, case.kind, "float64", "cpu") -- other initial values, another loader seed
      local state = tl.checkpoint.load(path, { model = resumed.model, optimizer = resumed.optimizer,
        scheduler = resumed.scheduler, loader = resumed.loader })
      assert.are.equal(case.k, state.step)
      assert.are.equal("integer", math.type(state.step))
      assert.are.equal("mid-epoch", state.extra.note)
      train(resumed, state.step + 1, TOTAL)
      assert_same_state(full, resumed, true)

      -- without the RNG state the dropout masks differ: the comparison above can fail
      local other = build(12345, case.kind, "float64", "cpu")
      tl.checkpoint.load(path, { model = other.model, optimizer = other.optimizer, scheduler = other.scheduler,
        loader = other.loader }, { rng = false })
      train(other, case.k + 1, TOTAL)
      assert.is_false(tl.equal(full.model:state_dict()["1.weight"], other.model:state_dict()["1.weight"]))
    end)
  end

  it("the file is plain safetensors: dotted tensor names, the tree in the metadata", function()
    local path = dir .. "/run.safetensors"
    local o = build(1, "adamw", "float64", "cpu")
    train(o, 1, 2, 2, path)
    local tensors, metadata = tl.load(path)
    assert.are.equal("1", metadata["tlua.checkpoint"])
    assert.is_string(metadata["tlua.tree"])
    assert.tensor_equal(o.model:state_dict()["2.running_var"], tensors["model.2.running_var"])
    assert.tensor_equal(o.optimizer.state[o.model:parameters()[1]].exp_avg, tensors["optimizer.state.1.exp_avg"])
    assert.are.equal("int64", tensors.rng_state.dtype)
    assert.are.same({ 2 }, tensors.rng_state.shape) -- a world of one: the layout of one state
    -- read changes nothing: each object's state dict in its place
    local rng = tl.get_rng_state()
    local state, info = tl.checkpoint.read(path)
    assert.tensor_equal(rng, tl.get_rng_state())
    assert.tensor_equal(tensors.rng_state, info.rng)
    assert.are.equal(2, state.step)
    assert.are.equal(2, state.loader.batch)
    assert.are.equal(2, state.scheduler.last_epoch)
    assert.tensor_equal(tensors["model.1.weight"], state.model["1.weight"])
  end)
end)

describe("tl.checkpoint values", function()
  it("round-trip plain values exactly: strings byte for byte, integers, floats bit for bit, booleans, tables",
    function()
      local bytes = {}
      for b = 0, 255 do bytes[#bytes + 1] = string.char(b) end
      local value = {
        all_bytes = table.concat(bytes), empty = "", quotes = "\"\\x41\\", utf8 = "héllo ✓",
        ints = { 0, -1, 1, math.maxinteger, math.mininteger, 1 << 53, -(1 << 53) - 1 },
        floats = { 0.1, -0.0, 0.0, 1.0, -2.5, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
          math.huge, -math.huge, 1 / 3, 1e100 },
        flags = { t = true, f = false },
        nested = { { { { deep = "yes" } } }, [10] = "ten", ["a.b"] = { c = 1 }, ["key with \"quote\""] = 2 },
        mixed = { 1, 2, x = 3 },
        tensors = { tl.arange(5), { w = tl.ones(2, 2, { dtype = "float64" }) } },
      }
      local path = dir .. "/values.safetensors"
      tl.checkpoint.save(path, value, { rng = false, metadata = { run = "r1" } })
      local got, info = tl.checkpoint.read(path)
      assert.is_nil(info.rng)
      assert.are.same({ run = "r1" }, info.metadata)
      assert.are.equal(value.all_bytes, got.all_bytes)
      assert.are.equal("", got.empty)
      assert.are.equal(value.quotes, got.quotes)
      assert.are.equal(value.utf8, got.utf8)
      for i, v in ipairs(value.ints) do
        assert.are.equal(v, got.ints[i])
        assert.are.equal("integer", math.type(got.ints[i]))
      end
      for i, v in ipairs(value.floats) do
        assert.are.equal("float", math.type(got.floats[i]))
        assert.are.equal(string.format("%a", v), string.format("%a", got.floats[i])) -- bit for bit, -0.0 too
      end
      assert.are.same(value.flags, got.flags)
      assert.are.same(value.nested, got.nested)
      assert.are.same(value.mixed, got.mixed)
      assert.tensor_equal(value.tensors[1], got.tensors[1])
      assert.tensor_equal(value.tensors[2].w, got.tensors[2].w)
      -- a NaN stays a NaN
      tl.checkpoint.save(path, { nan = 0 / 0 }, { rng = false })
      local nan = tl.checkpoint.read(path).nan
      assert.is_true(nan ~= nan)
    end)

  it("save refuses what it cannot hold, naming the place, and leaves the path untouched", function()
    local path = dir .. "/x.safetensors"
    tl.checkpoint.save(path, { step = 1 })
    local before = files.read_file(path)
    local cyclic = {}
    cyclic.self = cyclic
    for _, case in ipairs({
      { { f = print }, { "checkpoint.save", "'f'", "function" } },
      { { a = { b = { coroutine.create(print) } } }, { "'a.b.1'", "thread" } },
      { { [1.5] = 1 }, { "key", "1.5" } },
      { { [true] = 1 }, { "key", "boolean" } },
      { cyclic, { "'self'", "contains itself" } },
      { tl.ones(2), { "argument 2", "a tensor" } },
      { nn.Linear(2, 2), { "argument 2", "nn.Linear" } },
      { "x", { "argument 2", "string" } },
    }) do
      assert.error_matches(function() tl.checkpoint.save(path, case[1]) end, case[2])
    end
    assert.error_matches(function() tl.checkpoint.save(path, { a = 1 }, { metadata = { ["tlua.tree"] = "x" } }) end,
      { "tlua.tree", "checkpoint's own" })
    assert.error_matches(function() tl.checkpoint.save(path, { a = 1 }, { rgn = false }) end, { "rgn" })
    assert.error_matches(function() tl.checkpoint.save(7, { a = 1 }) end, { "argument 1", "path" })
    assert.are.equal(before, files.read_file(path))
  end)
end)

describe("tl.checkpoint.load errors", function()
  local path
  local function snapshot(o)
    local sd = {}
    for k, v in pairs(o.model:state_dict()) do sd[k] = v:clone() end
    return { model = sd, loader = o.loader:state_dict(), lr = o.optimizer.param_groups[1].lr,
      sched = o.scheduler.last_epoch, rng = tl.get_rng_state() }
  end
  local function assert_unchanged(o, s)
    for k, v in pairs(o.model:state_dict()) do assert.tensor_equal(s.model[k], v, k) end
    assert.are.same(s.loader, o.loader:state_dict())
    assert.are.equal(s.lr, o.optimizer.param_groups[1].lr)
    assert.are.equal(s.sched, o.scheduler.last_epoch)
    assert.tensor_equal(s.rng, tl.get_rng_state())
  end

  before_each(function()
    path = dir .. "/run.safetensors"
    train(build(3, "adamw", "float64", "cpu"), 1, 4, 4, path)
  end)

  it("a missing entry, an object of another class or a bad argument raise before anything changes", function()
    local sgd = build(5, "sgd", "float64", "cpu")
    local o = build(5, "adamw", "float64", "cpu")
    train(o, 1, 2)
    local s = snapshot(o)
    for _, case in ipairs({
      { { model = o.model, optimizer = sgd.optimizer },
        { "checkpoint.load", "'optimizer'", "optim.AdamW", "optim.SGD" } },
      { { model = o.model, sched = o.scheduler }, { "'sched' is not in the checkpoint", "scheduler" } },
      { { model = o.model, scheduler = sgd.scheduler }, { "optim.OneCycleLR", "optim.CosineAnnealingLR" } },
      { { model = o.model, step = 3 }, { "'step'", "load_state_dict", "number" } },
      { { model = o.model, extra = { note = o.loader } }, { "'extra.note'", "not the state of an object" } },
    }) do
      assert.error_matches(function() tl.checkpoint.load(path, case[1]) end, case[2])
      assert_unchanged(o, s)
    end
    assert.error_matches(function() tl.checkpoint.load(path, o.model) end, { "argument 2", "nn.Sequential" })
    assert.error_matches(function() tl.checkpoint.load(path, { model = o.model }, { rgn = true }) end, { "rgn" })
    assert_unchanged(o, s)
  end)

  it("a state dict an object refuses rolls back the objects loaded before it", function()
    local wide = nn.Sequential(nn.Linear(FEATURES, 17), nn.BatchNorm1d(17), nn.ReLU(), nn.Dropout(0.3),
      nn.Linear(17, CLASSES)):to("float64")
    local o = build(5, "adamw", "float64", "cpu")
    train(o, 1, 2)
    -- loaded in key order: loader, model, then the optimizer of two groups refuses the state of one
    local ps = o.model:parameters()
    local two = optim.AdamW({ { params = { ps[1], ps[2] } }, { params = { ps[3], ps[4], ps[5], ps[6] } } })
    local s = snapshot(o)
    assert.error_matches(function()
      tl.checkpoint.load(path, { loader = o.loader, model = o.model, optimizer = two })
    end, { "checkpoint.load", "'optimizer'", "parameter groups" })
    assert_unchanged(o, s)
    -- a model of other shapes
    assert.error_matches(function() tl.checkpoint.load(path, { loader = o.loader, model = wide }) end,
      { "'model'", "size mismatch" })
    assert_unchanged(o, s)
  end)

  it("files that are not checkpoints, or broken ones, raise and change nothing", function()
    local o = build(5, "adamw", "float64", "cpu")
    local s = snapshot(o)
    local objects = { model = o.model, optimizer = o.optimizer }
    local plain = dir .. "/plain.safetensors"
    tl.save(plain, o.model:state_dict())
    assert.error_matches(function() tl.checkpoint.load(plain, objects) end,
      { "checkpoint.load", "not a checkpoint", "tl.load" })
    local count = 0
    local function with_tree(tree, format)
      count = count + 1
      local p = dir .. "/bad" .. count .. ".safetensors"
      tl.save(p, { t = tl.ones(2) }, { ["tlua.checkpoint"] = format or "1", ["tlua.tree"] = tree })
      return p
    end
    for _, case in ipairs({
      { with_tree('{s"state"={s"a"=T"t"}', nil), { "corrupt", "expected ',' or '}'" } },
      { with_tree('{s"state"={s"a"=T"u"}}'), { "corrupt", "no tensor 'u'" } },
      { with_tree('{s"state"={s"a"=i1}}'), { "names no tensor 't'" } },
      { with_tree('{s"state"={s"a"=T"t",s"b"=T"t"}}'), { "corrupt", "twice" } },
      { with_tree('{s"state"={s"a"=T"t",s"a"=i1}}'), { "corrupt", "a key twice" } },
      { with_tree('{s"state"={s"a"=T"t",s"b"=f0x10}}'), { "corrupt", "bad float" } },
      { with_tree('{s"state"={s"a"=T"t",s"b"=i99999999999999999999}}'), { "corrupt", "bad integer" } },
      { with_tree('{s"state"={s"a"=T"t",s"b"=s"\\q"}}'), { "corrupt", "bad escape" } },
      { with_tree('{s"state"={s"a"=T"t",s"b"=os.exit()}}'), { "corrupt", "expected a value" } },
      { with_tree(string.rep("{s\"a\"=", 200) .. 'T"t"' .. string.rep("}", 200)), { "corrupt", "too deep" } },
      { with_tree('{s"state"={s"a"=T"t"}}', "2"), { "format 2" } },
      { with_tree('{s"state"=T"t"}'), { "no state table" } },
      { with_tree('{s"state"={},s"rng"=T"t"}'), { "RNG state" } },
    }) do
      assert.error_matches(function() tl.checkpoint.load(case[1], objects) end, case[2])
      assert_unchanged(o, s)
    end
    -- truncated
    local bytes = files.read_file(path)
    files.write_file(dir .. "/cut.safetensors", bytes:sub(1, #bytes - 10))
    assert.error_matches(function() tl.checkpoint.load(dir .. "/cut.safetensors", objects) end, { "checkpoint.load" })
    assert.error_matches(function() tl.checkpoint.load(dir .. "/none.safetensors", objects) end,
      { "checkpoint.load", "none.safetensors" })
    assert_unchanged(o, s)
    -- saved without the RNG state: loading it asks for {rng = false}
    local norng = dir .. "/norng.safetensors"
    tl.checkpoint.save(norng, { model = o.model }, { rng = false })
    assert.error_matches(function() tl.checkpoint.load(norng, { model = o.model }) end,
      { "no RNG state", "rng = false" })
    tl.checkpoint.load(norng, { model = o.model }, { rng = false })
    assert_unchanged(o, s)
  end)
end)

describe("tl.checkpoint resume on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA resume spec did not run")
    return
  end

  it("float32 on CUDA: the resumed run matches the uninterrupted one within float32 noise", function()
    for _, kind in ipairs({ "adamw", "sgd" }) do
      local path = dir .. "/cuda.safetensors"
      local full = build(7, kind, "float32", "cuda")
      train(full, 1, TOTAL, 8, path)
      local resumed = build(99, kind, "float32", "cuda")
      local state = tl.checkpoint.load(path, { model = resumed.model, optimizer = resumed.optimizer,
        scheduler = resumed.scheduler, loader = resumed.loader })
      assert.are.equal("cuda", resumed.model:parameters()[1].device:sub(1, 4))
      train(resumed, state.step + 1, TOTAL)
      assert_same_state(full, resumed, false, 1e-5)
    end
  end)
end)
