-- tl.data's dataset helpers (Subset, ConcatDataset, random_split against torch's lengths), samplers, default_collate, and the DataLoader's sampler, batch_sampler, collate_fn, device prefetch, strict options and mid-epoch resume (#cuda).
local tl = require("tlua")
local data = tl.data

local SPLIT = dofile("spec/goldens/data_split.lua") -- /usr/bin/python3 spec/goldens/data_split.py

-- a TensorDataset of n samples: x[i] = {i, 10 i} (float64), y[i] = i (int64)
local function dataset(n)
  local y = tl.arange(1, n + 1)
  local x = y:double():view(n, 1) * tl.tensor({ { 1, 10 } }, { dtype = "float64" })
  return data.TensorDataset(x, y)
end

-- a dataset with get(i) only, logging the samples asked for
local function logged(n, log)
  return {
    len = function() return n end,
    get = function(_, i)
      log[#log + 1] = i
      return tl.full({ 2 }, i, { dtype = "float64" }), i
    end,
  }
end

-- the y of every batch of an iterator over (x, y) batches, checking rows stay together
local function ys(iterator)
  local out = {}
  for x, y in iterator do
    assert.tensor_equal(y:double(), x:select(2, 1))
    out[#out + 1] = y:totable()
  end
  return out
end

local function sorted(list)
  local copy = { table.unpack(list) }
  table.sort(copy)
  return copy
end

local function range(a, b)
  local out = {}
  for i = a, b do out[#out + 1] = i end
  return out
end

describe("data.Subset", function()
  it("holds the given samples in the given order, and batches through its dataset", function()
    local ds = dataset(10)
    local sub = data.Subset(ds, { 3, 1, 7, 3 })
    assert.are.equal(4, sub:len())
    assert.are.equal(4, #sub)
    local x, y = sub:get(3)
    assert.tensor_equal(tl.tensor({ 7, 70 }, { dtype = "float64" }), x)
    assert.are.equal(7, y)
    assert.are.same({ { 3, 1 }, { 7, 3 } }, ys(data.DataLoader { sub, batch_size = 2 }:iter()))
    assert.are.equal(ds, sub.dataset)
    assert.are.same({ 3, 1, 7, 3 }, sub.indices)
    -- a tensor of indices, and a dataset that has get only
    local log = {}
    local sub2 = data.Subset(logged(5, log), tl.tensor({ 5, 2 }, { dtype = "int32" }))
    assert.is_nil(sub2.batch)
    assert.are.same({ { 5, 2 } }, ys(data.DataLoader { sub2, batch_size = 4 }:iter()))
    assert.are.same({ 5, 2 }, log)
  end)

  it("refuses bad datasets and indices", function()
    local ds = dataset(4)
    assert.error_matches(function() data.Subset(ds, { 1, 5 }) end,
      { "data.Subset: index 5 at position 2 is out of range (1 <= index <= 4)" })
    assert.error_matches(function() data.Subset(ds, { 0 }) end, { "data.Subset", "index 0", "out of range" })
    assert.error_matches(function() data.Subset(ds, { 1.5 }) end,
      { "data.Subset: index 1 expected an integer, got 1.5" })
    assert.error_matches(function() data.Subset(ds, tl.tensor({ 1.0 })) end,
      { "data.Subset", "int64 or int32", "float32" })
    assert.error_matches(function() data.Subset(ds, 3) end, { "data.Subset", "list of integers", "number" })
    assert.error_matches(function() data.Subset(tl.zeros(3), { 1 }) end, { "data.Subset: argument 1 expected a dataset",
      "a tensor" })
    assert.error_matches(function() data.Subset(ds, { 1 }):get(2) end, { "data.Subset:get: index 2 out of range" })
  end)
end)

describe("data.ConcatDataset", function()
  it("joins datasets: get, len, cumulative_sizes, and batches across the parts in the order asked", function()
    local a, b = dataset(3), data.Subset(dataset(10), { 9, 8 })
    local c = data.ConcatDataset({ a, b, dataset(1) })
    assert.are.equal(6, c:len())
    assert.are.same({ 3, 5, 6 }, c.cumulative_sizes)
    local got = {}
    for i = 1, 6 do
      local _, y = c:get(i)
      got[i] = y
    end
    assert.are.same({ 1, 2, 3, 9, 8, 1 }, got)
    assert.is_function(c.batch)
    local picked = data.DataLoader { c, sampler = { 4, 6, 5, 3, 1 }, batch_size = 5 }
    assert.are.same({ { 9, 1, 8, 3, 1 } }, ys(picked:iter()))
    assert.are.same({ { 1, 2 } }, ys(data.DataLoader { c, sampler = { 1, 2 }, batch_size = 5 }:iter())) -- one part
    -- every sample once over a shuffled epoch, by batch and by get
    local log = {}
    local mixed = data.ConcatDataset({ a, logged(4, log) })
    assert.is_nil(mixed.batch)
    local all = {}
    for _, batch in ipairs(ys(data.DataLoader { mixed, batch_size = 3, shuffle = true, seed = 4 }:iter())) do
      for _, v in ipairs(batch) do all[#all + 1] = v end
    end
    assert.are.same({ 1, 1, 2, 2, 3, 3, 4 }, sorted(all))
    assert.are.same({ 1, 2, 3, 4 }, sorted(log))
  end)

  it("refuses what is not a list of datasets", function()
    assert.error_matches(function() data.ConcatDataset({}) end,
      { "data.ConcatDataset", "non-empty list", "empty table" })
    assert.error_matches(function() data.ConcatDataset(dataset(2)) end, { "data.ConcatDataset", "a dataset" })
    assert.error_matches(function() data.ConcatDataset({ dataset(2), 5 }) end,
      { "data.ConcatDataset: entry 2 expected a dataset", "number" })
    assert.error_matches(function() data.ConcatDataset({ dataset(2) }):get(3) end,
      { "data.ConcatDataset:get: index 3 out of range (1 <= index <= 2)" })
  end)
end)

describe("data.random_split", function()
  it("gives torch's lengths for counts and fractions (golden), a partition of the dataset", function()
    for _, case in ipairs(SPLIT) do
      local parts = data.random_split(dataset(case.n), case.lengths, { seed = 3 })
      local sizes, all = {}, {}
      for k, part in ipairs(parts) do
        sizes[k] = part:len()
        for _, i in ipairs(part.indices) do all[#all + 1] = i end
      end
      assert.are.same(case.sizes, sizes, "n = " .. case.n)
      assert.are.same(range(1, case.n), sorted(all), "n = " .. case.n)
    end
  end)

  it("is reproducible with a seed or a generator, and otherwise follows tl.manual_seed", function()
    local ds = dataset(20)
    local a = data.random_split(ds, { 5, 15 }, { seed = 9 })
    assert.are.same(a[1].indices, data.random_split(ds, { 5, 15 }, { seed = 9 })[1].indices)
    assert.are_not.same(a[1].indices, data.random_split(ds, { 5, 15 }, { seed = 10 })[1].indices)
    assert.are.same(a[2].indices, data.random_split(ds, { 5, 15 }, { generator = data.splitmix(9) })[2].indices)
    tl.manual_seed(4)
    local b = data.random_split(ds, { 0.5, 0.5 })
    tl.manual_seed(4)
    assert.are.same(b[1].indices, data.random_split(ds, { 0.5, 0.5 })[1].indices)
    -- the parts are datasets of the samples
    local _, y = a[1]:get(2)
    assert.are.equal(a[1].indices[2], y)
  end)

  it("refuses bad lengths, options and generators", function()
    local ds = dataset(10)
    assert.error_matches(function() data.random_split(ds, { 3, 3 }) end,
      { "data.random_split: the lengths sum to 6, the dataset has 10 samples" })
    assert.error_matches(function() data.random_split(ds, { 0.5, 0.4 }) end,
      { "data.random_split", "lengths[1] = 0.5" })
    assert.error_matches(function() data.random_split(ds, { 1.5, -0.5 }) end,
      { "data.random_split: the fraction lengths[1] = 1.5 is not between 0 and 1" })
    assert.error_matches(function() data.random_split(ds, { 11, -1 }) end, { "data.random_split", "lengths[2] = -1" })
    assert.error_matches(function() data.random_split(ds, {}) end, { "data.random_split", "non-empty list" })
    assert.error_matches(function() data.random_split(ds, { "5", 5 }) end,
      { "data.random_split: lengths[1] expected a number, got string" })
    assert.error_matches(function() data.random_split(ds, { 5, 5 }, { sed = 1 }) end,
      { "data.random_split: unknown option 'sed' (accepted: generator, seed)" })
    assert.error_matches(function() data.random_split(ds, { 5, 5 }, { seed = 1, generator = data.splitmix(1) }) end,
      { "data.random_split: give seed or generator, not both" })
    assert.error_matches(function() data.random_split(ds, { 5, 5 }, { generator = function() return 0 end }) end,
      { "data.random_split: the generator gave 0 for random(10), expected an integer in [1, 10]" })
    assert.error_matches(function() data.random_split({}, { 1 }) end,
      { "data.random_split: argument 1 expected a dataset" })
  end)
end)

describe("data samplers", function()
  local function drain(sampler)
    local out = {}
    for i in sampler:iter() do out[#out + 1] = i end
    return out
  end

  it("SequentialSampler, RandomSampler (seeded, with and without replacement), SubsetRandomSampler", function()
    assert.are.same({ 1, 2, 3, 4 }, drain(data.SequentialSampler(dataset(4))))
    assert.are.same({}, drain(data.SequentialSampler(0)))
    local r = data.RandomSampler(10, { seed = 2 })
    local e1, e2 = drain(r), drain(r)
    assert.are.same(range(1, 10), sorted(e1))
    assert.are_not.same(e1, e2)
    assert.are.same(e1, drain(data.RandomSampler(dataset(10), { seed = 2 })))
    -- more samples than n without replacement: whole permutations, then part of one
    local long = drain(data.RandomSampler(4, { seed = 1, num_samples = 10 }))
    assert.are.equal(10, #long)
    assert.are.same(range(1, 4), sorted({ table.unpack(long, 1, 4) }))
    assert.are.same(range(1, 4), sorted({ table.unpack(long, 5, 8) }))
    local with = drain(data.RandomSampler(3, { seed = 1, replacement = true, num_samples = 50 }))
    assert.are.equal(50, #with)
    local counts = { 0, 0, 0 }
    for _, i in ipairs(with) do counts[i] = counts[i] + 1 end
    assert.is_true(counts[1] > 5 and counts[2] > 5 and counts[3] > 5) -- draws repeat
    local s = data.SubsetRandomSampler({ 7, 3, 9 }, { seed = 5 })
    assert.are.equal(3, s:len())
    assert.are.same({ 3, 7, 9 }, sorted(drain(s)))
  end)

  it("BatchSampler cuts a sampler's indices into batches, drop_last leaving out the last", function()
    local seq = data.SequentialSampler(7)
    local function batches(b)
      local out = {}
      for batch in b:iter() do out[#out + 1] = batch end
      return out
    end
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 }, { 7 } }, batches(data.BatchSampler(seq, 3)))
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, batches(data.BatchSampler(seq, 3, true)))
    assert.are.same({ { 1, 2, 3, 4, 5, 6, 7 } }, batches(data.BatchSampler(seq, 7, true)))
    assert.are.same({ 3, 2 }, { data.BatchSampler(seq, 3):len(), #data.BatchSampler(seq, 3, true) })
  end)

  it("a sampler's state replays its next order", function()
    local r = data.RandomSampler(12, { seed = 8 })
    drain(r)
    local state = r:state_dict()
    assert.are.same({ seed = 8, epoch = 1 }, state)
    local next_order = drain(r)
    local fresh = data.RandomSampler(12)
    fresh:load_state_dict(state)
    assert.are.same(next_order, drain(fresh))
  end)

  it("refuse bad arguments", function()
    assert.error_matches(function() data.RandomSampler(5, { sed = 1 }) end,
      { "data.RandomSampler: unknown option 'sed' (accepted: num_samples, replacement, seed)" })
    assert.error_matches(function() data.RandomSampler(5, { num_samples = 0 }) end,
      { "data.RandomSampler", "num_samples" })
    assert.error_matches(function() data.RandomSampler(0) end, { "data.RandomSampler: the dataset is empty" })
    assert.error_matches(function() data.SequentialSampler("x") end, { "data.SequentialSampler", "a dataset", "x" })
    assert.error_matches(function() data.SubsetRandomSampler({ 1 }, { seeds = 1 }) end,
      { "data.SubsetRandomSampler: unknown option 'seeds'" })
    assert.error_matches(function() data.BatchSampler({}, 2) end, { "data.BatchSampler", "sampler" })
    assert.error_matches(function() data.BatchSampler(data.SequentialSampler(3), 0) end, { "data.BatchSampler",
      "batch_size", "0" })
    assert.error_matches(function() data.BatchSampler(data.SequentialSampler(3), 2, 1) end, { "data.BatchSampler",
      "drop_last" })
    assert.error_matches(function() data.RandomSampler(3):load_state_dict({ seed = 1 }) end,
      { "data.RandomSampler:load_state_dict", "epoch" })
  end)
end)

describe("data.default_collate", function()
  it("stacks tensors, makes tensors of numbers and booleans, keeps strings, and goes into tables", function()
    local batch = data.default_collate({
      { image = tl.full({ 2 }, 1.0), label = 1, w = 0.5, ok = true, name = "a", parts = { tl.ones(1), 3 } },
      { image = tl.full({ 2 }, 2.0), label = 2, w = 2, ok = false, name = "b", parts = { tl.zeros(1), 4 } },
    })
    assert.tensor_equal(tl.tensor({ { 1, 1 }, { 2, 2 } }, { dtype = "float32" }), batch.image)
    assert.tensor_equal(tl.tensor({ 1, 2 }, { dtype = "int64" }), batch.label)
    assert.tensor_equal(tl.tensor({ 0.5, 2 }, { dtype = "float64" }), batch.w) -- a float among them: float64
    assert.tensor_equal(tl.tensor({ true, false }, { dtype = "bool" }), batch.ok)
    assert.are.same({ "a", "b" }, batch.name)
    assert.tensor_equal(tl.tensor({ { 1 }, { 0 } }, { dtype = "float32" }), batch.parts[1])
    assert.tensor_equal(tl.tensor({ 3, 4 }), batch.parts[2])
  end)

  it("names the sample and field that differ", function()
    assert.error_matches(function() data.default_collate({ { x = tl.ones(2) }, { x = tl.ones(3) } }) end,
      { "data.default_collate: field x of sample 2 is a float32 tensor of shape [3] on cpu, field x of sample 1 " ..
        "a float32 tensor of shape [2]" })
    assert.error_matches(function() data.default_collate({ { x = 1 }, { y = 1 } }) end,
      { "data.default_collate: sample 2 has the keys {y}, sample 1 {x}" })
    assert.error_matches(function() data.default_collate({ { a = { b = 1 } }, { a = { b = "s" } } }) end,
      { "data.default_collate: field a.b of sample 2 is a string, field a.b of sample 1 a number" })
    assert.error_matches(function() data.default_collate({ print }) end, { "sample 1 is a function", "collate_fn" })
    assert.error_matches(function() data.default_collate({}) end, { "data.default_collate", "non-empty list" })
    assert.error_matches(function() data.default_collate({ tl.ones(1), tl.ones(1, { dtype = "float64" }) }) end,
      { "sample 2 is a float64 tensor" })
  end)
end)

describe("data.DataLoader's samplers and collation", function()
  it("collates samples that are tables of tensors (named and nested fields)", function()
    local ds = {
      len = function() return 5 end,
      get = function(_, i)
        return { image = tl.full({ 1, 2 }, i), target = { class = i, box = tl.full({ 4 }, -i) } }
      end,
    }
    local got = {}
    for batch in data.DataLoader { ds, batch_size = 2 }:iter() do
      assert.are.same({ batch.image:size(1), 1, 2 }, batch.image.shape)
      assert.tensor_equal(batch.target.class:float(), batch.image:select(2, 1):select(2, 2))
      assert.tensor_equal(-batch.target.class:float(), batch.target.box:select(2, 3))
      got[#got + 1] = batch.target.class:totable()
    end
    assert.are.same({ { 1, 2 }, { 3, 4 }, { 5 } }, got)
  end)

  it("takes a sampler (object, list or tensor) and a batch_sampler (object or list of lists)", function()
    local ds = dataset(10)
    assert.are.same({ { 4, 2 }, { 9 } }, ys(data.DataLoader { ds, sampler = { 4, 2, 9 }, batch_size = 2 }:iter()))
    local by_tensor = data.DataLoader { ds, sampler = tl.tensor({ 4, 2, 9 }), batch_size = 5 }
    assert.are.same({ { 4, 2, 9 } }, ys(by_tensor:iter()))
    local r = data.RandomSampler(ds, { seed = 6 })
    local loader = data.DataLoader { ds, sampler = r, batch_size = 4, drop_last = true }
    assert.are.equal(2, #loader)
    local order = {}
    for i in data.RandomSampler(ds, { seed = 6 }):iter() do order[#order + 1] = i end
    assert.are.same({ { table.unpack(order, 1, 4) }, { table.unpack(order, 5, 8) } }, ys(loader:iter()))
    local b = data.BatchSampler(data.SequentialSampler(ds), 4)
    assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10 } }, ys(data.DataLoader { ds, batch_sampler = b }:iter()))
    assert.are.equal(3, #data.DataLoader { ds, batch_sampler = b })
    assert.are.same({ { 3 }, { 1, 10 } }, ys(data.DataLoader { ds, batch_sampler = { { 3 }, { 1, 10 } } }:iter()))
  end)

  it("hands the samples to collate_fn and yields what it returns", function()
    local seen
    local loader = data.DataLoader { dataset(5), batch_size = 2, collate_fn = function(samples)
      seen = seen or samples
      local sum = 0
      for _, s in ipairs(samples) do sum = sum + s[2] end
      return sum, #samples
    end }
    local out = {}
    for sum, count in loader:iter() do out[#out + 1] = { sum, count } end
    assert.are.same({ { 3, 2 }, { 7, 2 }, { 5, 1 } }, out)
    assert.tensor_equal(tl.tensor({ 1, 10 }, { dtype = "float64" }), seen[1][1]) -- {x, y} per sample
  end)

  it("moves batches to the device, gathering the next batch before handing out the current one", function()
    local log = {}
    local loader = data.DataLoader { logged(5, log), batch_size = 2, device = "cpu" }
    local next_batch = loader:iter()
    local x, y = next_batch()
    assert.are.same({ 1, 2 }, y:totable())
    assert.are.equal("cpu", x.device)
    assert.are.same({ 1, 2, 3, 4 }, log) -- batch 2 is already loaded
    next_batch()
    assert.are.same({ 1, 2, 3, 4, 5 }, log)
    next_batch()
    assert.is_nil(next_batch())
    log = {}
    local plain = data.DataLoader { logged(5, log), batch_size = 2 }:iter()
    plain()
    assert.are.same({ 1, 2 }, log) -- without a device, one batch at a time
  end)

  it("checks every option, and the options that exclude each other", function()
    local ds = dataset(4)
    assert.error_matches(function() data.DataLoader { ds, batchsize = 4 } end,
      { "data.DataLoader: unknown option 'batchsize' (accepted: [1], batch_sampler, batch_size, collate_fn, dataset," })
    assert.error_matches(function() data.DataLoader { ds, batch_size = 2.5 } end,
      { "data.DataLoader: option batch_size expected an integer, got 2.5" })
    if tl.cuda.device_count() == 0 then
      assert.error_matches(function() data.DataLoader { ds, pin_memory = true } end,
        { "data.DataLoader: pin_memory needs CUDA" })
      assert.error_matches(function() tl.ones(2):pin_memory() end, "pin_memory: pinned host memory needs CUDA")
    end
    assert.are.equal(4, #data.DataLoader { ds, pin_memory = false })
    assert.is_false(tl.ones(2):is_pinned())
    assert.error_matches(function() data.DataLoader { ds, sampler = { 1 }, shuffle = true } end,
      { "data.DataLoader: sampler and shuffle exclude each other" })
    for _, key in ipairs({ "batch_size", "shuffle", "drop_last" }) do
      local opts = { ds, batch_sampler = { { 1 } } }
      opts[key] = key == "batch_size" and 2 or false
      assert.error_matches(function() data.DataLoader(opts) end,
        { "data.DataLoader: batch_sampler and " .. key .. " exclude each other" })
    end
    assert.error_matches(function() data.DataLoader { ds, batch_sampler = { { 1 } }, sampler = { 1 } } end,
      { "data.DataLoader: batch_sampler and sampler exclude each other" })
    assert.error_matches(function() data.DataLoader { ds, shard = { 0, 2 }, sampler = { 1 } } end,
      { "data.DataLoader: shard excludes sampler" })
    assert.error_matches(function() data.DataLoader { ds, seed = 1, sampler = { 1 } } end, { "data.DataLoader: seed" })
    assert.error_matches(function() data.DataLoader { ds, sampler = { 1, "2" } } end,
      { "data.DataLoader: sampler: index 2 expected an integer" })
    assert.error_matches(function() data.DataLoader { ds, batch_sampler = { 1 } } end,
      { "data.DataLoader: batch_sampler entry 1 expected a list of indices, got number" })
    assert.error_matches(function() data.DataLoader { ds, collate_fn = 3 } end,
      { "data.DataLoader: option collate_fn" })
    assert.error_matches(function() data.DataLoader { ds, dataset = ds } end,
      { "data.DataLoader: give the dataset once" })
    assert.error_matches(function() data.DataLoader { ds, shard = { 2, 2 } } end, { "data.DataLoader: shard must be" })
    assert.error_matches(function() data.DataLoader { ds, sampler = { iter = function() end } }:len() end,
      { "data.DataLoader:len: its sampler has no len()" })
    assert.error_matches(function()
      for _ in data.DataLoader { ds, sampler = { 1, 9 } }:iter() do end
    end, { "_gather_rows", "index 9" })
  end)

  it("takes DataLoader(dataset, opts) as DataLoader{dataset, ...opts}, and refuses other argument lists", function()
    local ds = dataset(5)
    assert.are.same(ys(data.DataLoader { ds, batch_size = 2 }:iter()), ys(data.DataLoader(ds, { batch_size = 2 }):iter()))
    assert.are.same({ { 1 }, { 2 }, { 3 }, { 4 }, { 5 } }, ys(data.DataLoader(ds):iter()))
    local l = data.DataLoader(ds, { batch_size = 2, drop_last = true, shuffle = true, seed = 3 })
    assert.are.equal(2, #l)
    assert.are.same(ys(data.DataLoader { ds, batch_size = 2, drop_last = true, shuffle = true, seed = 3 }:iter()),
      ys(l:iter()))
    local rows = logged(3, {})
    assert.are.equal(2, #data.DataLoader(rows, { batch_size = 2 }))
    assert.error_matches(function() data.DataLoader(ds, { batchsize = 2 }) end,
      { "data.DataLoader: unknown option 'batchsize' (accepted: batch_sampler, batch_size, collate_fn, device," })
    assert.error_matches(function() data.DataLoader(ds, { batch_size = 0 }) end,
      { "data.DataLoader: batch_size must be a positive integer, got 0" })
    assert.error_matches(function() data.DataLoader(ds, 8) end,
      { "data.DataLoader: expected an options table {", "got number" })
    assert.error_matches(function() data.DataLoader(ds, { ds }) end, { "data.DataLoader: give the dataset once" })
    assert.error_matches(function() data.DataLoader(ds, { dataset = ds }) end,
      { "data.DataLoader: give the dataset once" })
    assert.error_matches(function() data.DataLoader(ds, {}, {}) end,
      { "data.DataLoader: expected DataLoader(dataset, {options}), got 3 arguments" })
    assert.error_matches(function() data.DataLoader({ batch_size = 2 }, ds) end,
      { "data.DataLoader: expected DataLoader{dataset, batch_size = ..., ...} or DataLoader(dataset, {batch_size",
        "got a table that is not a dataset as the first argument" })
    assert.error_matches(function() data.DataLoader(tl.ones(3), { batch_size = 2 }) end,
      { "got a tensor as the first argument" })
    assert.error_matches(function() data.DataLoader(8) end, { "data.DataLoader: expected a table {dataset", "got number" })
    local ok, err = pcall(function() data.DataLoader(ds, { batch_size = 0 }) end)
    assert.is_false(ok)
    assert.matches("^spec/data_loader_spec%.lua:%d+: data%.DataLoader", err)
    assert.are.same({ { 1, 2 } }, ys(data.DataLoader(dataset(2), { batch_size = 2 }):iter())) -- still works
  end)
end)

describe("data.DataLoader:state_dict", function()
  -- the y batches of `epochs` whole epochs of a loader
  local function epochs(loader, count)
    local out = {}
    for e = 1, count do out[e] = ys(loader:iter()) end
    return out
  end

  -- for every stop point k of epoch 2: run epoch 1 and k batches of epoch 2, save the state, load
  -- it into a loader made by make_resumed; it must give the rest of epoch 2 then epoch 3 as the
  -- uninterrupted run does
  local function check_resume(make, make_resumed)
    local reference = epochs(make(), 3)
    local len = #reference[2]
    for k = 0, len do
      local run = make()
      ys(run:iter())
      local it = run:iter()
      for _ = 1, k do it() end
      local state = run:state_dict()
      assert.are.same({ 2, k, false }, { state.epoch, state.batch, state.done })
      local resumed = make_resumed()
      resumed:load_state_dict(state)
      assert.are.same(state, resumed:state_dict()) -- a loaded state is saved back as it came
      local rest = ys(resumed:iter())
      assert.are.same({ table.unpack(reference[2], k + 1, len) }, rest, "stopped after batch " .. k)
      assert.are.same(reference[3], ys(resumed:iter()), "the epoch after, stopped after batch " .. k)
    end
    -- stopped after an epoch's loop ended: the resumed loader goes on with the next epoch
    local run = make()
    ys(run:iter())
    ys(run:iter())
    local state = run:state_dict()
    assert.are.same({ 2, len, true }, { state.epoch, state.batch, state.done })
    local resumed = make_resumed()
    resumed:load_state_dict(state)
    assert.are.same(state, resumed:state_dict())
    assert.are.same(reference[3], ys(resumed:iter()))
  end

  it("resumes a shuffled epoch mid-way with the remaining batches (the seed travels with the state)", function()
    local ds = dataset(23)
    check_resume(function() return data.DataLoader { ds, batch_size = 5, shuffle = true, seed = 31 } end,
      function() return data.DataLoader { ds, batch_size = 5, shuffle = true } end)
    tl.manual_seed(3) -- a seed drawn from tl's generator is saved too
    local unseeded = data.DataLoader { ds, batch_size = 4, shuffle = true }
    check_resume(function() return data.DataLoader { ds, batch_size = 4, shuffle = true, seed = unseeded.seed } end,
      function() return data.DataLoader { ds, batch_size = 4, shuffle = true } end)
  end)

  it("resumes with drop_last, in order, sharded, with a sampler, a batch sampler, and prefetching", function()
    local ds = dataset(17)
    check_resume(
      function() return data.DataLoader { ds, batch_size = 4, shuffle = true, seed = 2, drop_last = true } end,
      function() return data.DataLoader { ds, batch_size = 4, shuffle = true, drop_last = true } end)
    check_resume(function() return data.DataLoader { ds, batch_size = 6 } end,
      function() return data.DataLoader { ds, batch_size = 6 } end)
    check_resume(function() return data.DataLoader { ds, batch_size = 2, shuffle = true, shard = { 1, 3 } } end,
      function() return data.DataLoader { ds, batch_size = 2, shuffle = true, shard = { 1, 3 } } end)
    check_resume(
      function() return data.DataLoader { ds, batch_size = 3, sampler = data.RandomSampler(ds, { seed = 4 }) } end,
      function() return data.DataLoader { ds, batch_size = 3, sampler = data.RandomSampler(ds) } end)
    local function batches(seed)
      return data.BatchSampler(data.RandomSampler(ds, { seed = seed }), 5, true)
    end
    check_resume(function() return data.DataLoader { ds, batch_sampler = batches(5) } end,
      function() return data.DataLoader { ds, batch_sampler = batches(nil) } end)
    check_resume(function() return data.DataLoader { ds, batch_size = 5, shuffle = true, seed = 7, device = "cpu" } end,
      function() return data.DataLoader { ds, batch_size = 5, shuffle = true, device = "cpu" } end)
  end)

  it("saves plain values, and numbers enumerate's batches on from where it resumes", function()
    local ds = dataset(9)
    local loader = data.DataLoader { ds, batch_size = 2, shuffle = true, seed = 12 }
    assert.are.same({ epoch = 0, batch = 0, done = true, seed = 12, samples = 9 }, loader:state_dict())
    local it = loader:iter()
    it()
    it()
    assert.are.same({ epoch = 1, batch = 2, done = false, seed = 12, samples = 9 }, loader:state_dict())
    local resumed = data.DataLoader { ds, batch_size = 2, shuffle = true }
    resumed:load_state_dict(loader:state_dict())
    local numbers = {}
    for i in resumed:enumerate() do numbers[#numbers + 1] = i end
    assert.are.same({ 3, 4, 5 }, numbers)
    assert.are.same({ epoch = 1, batch = 5, done = true, seed = 12, samples = 9 }, resumed:state_dict())
  end)

  it("refuses a state that does not fit the loader, changing nothing", function()
    local ds = dataset(9)
    local loader = data.DataLoader { ds, batch_size = 2, seed = 1 }
    local good = loader:state_dict()
    -- {epoch = 1, batch = 0, done = false, seed = 1} with the changes
    local function state(changes)
      local s = { epoch = 1, batch = 0, done = false, seed = 1 }
      for k, v in pairs(changes) do s[k] = v end
      return s
    end
    assert.error_matches(function() loader:load_state_dict(state { samples = 10 }) end,
      { "data.DataLoader:load_state_dict: the state is of a dataset of 10 samples, this loader's has 9" })
    assert.error_matches(function() loader:load_state_dict(state { batch = 6 }) end,
      { "data.DataLoader:load_state_dict: the state is at batch 6 of an epoch of 5" })
    assert.error_matches(function() loader:load_state_dict(state { batch = -1 }) end,
      { "epoch and batch must be >= 0" })
    assert.error_matches(function() loader:load_state_dict(state { bacth = 1 }) end,
      { "data.DataLoader:load_state_dict: unknown option 'bacth'" })
    assert.error_matches(function() loader:load_state_dict({ epoch = 1 }) end, { "expected a state of state_dict()" })
    assert.error_matches(function() loader:load_state_dict(state { sampler = {} }) end,
      { "this loader's sampler has no load_state_dict" })
    assert.error_matches(function() loader:load_state_dict(3) end, { "data.DataLoader:load_state_dict" })
    assert.error_matches(function()
      data.DataLoader { ds, shard = { 0, 2 } }:load_state_dict({ epoch = 1, batch = 0, done = false, seed = 5 })
    end, { "seed differs" })
    assert.are.same(good, loader:state_dict())
  end)
end)

describe("data.DataLoader on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the DataLoader did not run")
    return
  end

  it("pin_memory: batches in pinned host memory, then on the GPU with the same values", function()
    local x = tl.arange(1, 7):reshape(3, 2)
    local p = x:pin_memory()
    assert.is_true(p:is_pinned())
    assert.is_false(x:is_pinned())
    assert.are.equal("cpu", p.device)
    assert.tensor_equal(x, p)
    assert.is_true(p:pin_memory():is_pinned()) -- pinned already: itself
    assert.tensor_equal(x, p:pin_memory())
    assert.tensor_equal(x, p:to("cuda"):to("cpu"))
    assert.error_matches(function() x:to("cuda"):pin_memory() end, "only CPU tensors can be pinned")
    local ds = dataset(7)
    local plain, pinned = {}, {}
    for a, b in data.DataLoader { ds, batch_size = 3, shuffle = true, seed = 2 }:iter() do plain[#plain + 1] = { a, b } end
    for a, b in data.DataLoader { ds, batch_size = 3, shuffle = true, seed = 2, pin_memory = true }:iter() do
      assert.is_true(a:is_pinned())
      pinned[#pinned + 1] = { a, b }
    end
    for a, b in data.DataLoader { ds, batch_size = 3, shuffle = true, seed = 2, pin_memory = true,
      device = "cuda" }:iter() do
      assert.are.equal("cuda:0", a.device)
      pinned[#pinned + 1] = { a:to("cpu"), b:to("cpu") }
    end
    assert.are.equal(6, #pinned)
    for k = 1, 3 do
      assert.tensor_equal(plain[k][1], pinned[k][1])
      assert.tensor_equal(plain[k][1], pinned[k + 3][1])
      assert.tensor_equal(plain[k][2], pinned[k + 3][2])
    end
  end)

  it("moves every tensor of a batch (tables included) and queues the next batch's copy first", function()
    local ds = dataset(7)
    local cpu = {}
    for x, y in data.DataLoader { ds, batch_size = 3, shuffle = true, seed = 1 }:iter() do cpu[#cpu + 1] = { x, y } end
    local k = 0
    for x, y in data.DataLoader { ds, batch_size = 3, shuffle = true, seed = 1, device = "cuda" }:iter() do
      k = k + 1
      assert.are.equal("cuda:0", x.device)
      assert.are.equal("cuda:0", y.device)
      assert.tensor_equal(cpu[k][1], x:to("cpu"))
      assert.tensor_equal(cpu[k][2], y:to("cpu"))
    end
    assert.are.equal(3, k)
    local log = {}
    local named = {
      len = function() return 4 end,
      get = function(_, i)
        log[#log + 1] = i
        return { x = tl.full({ 2 }, i), meta = { id = i } }
      end,
    }
    local next_batch = data.DataLoader { named, batch_size = 2, device = "cuda" }:iter()
    local batch = next_batch()
    assert.are.equal("cuda:0", batch.x.device)
    assert.are.equal("cuda:0", batch.meta.id.device)
    assert.are.same({ 1, 2, 3, 4 }, log)
    tl.cuda.synchronize()
  end)
end)
