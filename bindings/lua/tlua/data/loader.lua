-- tl.data.DataLoader: batches of a dataset (gathered in C when the dataset has batch(indices)), shuffled, sampled, sharded, collated, prefetched to a device, resumable mid-epoch.
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")
local samplers = require("tlua.data.samplers")
local collate = require("tlua.data.collate")

local loader = {}

local gather_rows = tl._gather_rows
local default_collate, to_device = collate.default_collate, collate._to_device

local DataLoader = class("data.DataLoader")
loader.DataLoader = DataLoader

--- DataLoader{dataset, batch_size = 1, shuffle = false, seed = nil, drop_last = false, device = nil,
-- shard = nil, sampler = nil, batch_sampler = nil, collate_fn = nil, pin_memory = false}: the
-- batches of a dataset, one epoch per call of iter() (or enumerate()). DataLoader(dataset, opts)
-- (PyTorch's order) is the same as DataLoader{dataset, ...opts}.
--
-- A batch is what the dataset's batch(indices) returns when it has one (TensorDataset: a gather
-- of rows in C), else the samples get(i) gives, collated by collate_fn(samples) (default
-- data.default_collate: tensors stacked along a new dim 1, numbers into tensors, tables of
-- tensors field by field); a get(i) that returns several values (x, y) gives batches of as many
-- values (`for x, y in loader:iter()`), one that returns a table gives tables.
--
-- shuffle: each epoch draws a new order; with a seed the sequence of orders is the same on every
-- run (otherwise the seed comes from tl's generator, see tl.manual_seed). drop_last: the last,
-- smaller batch is left out. sampler: an object whose iter() gives an epoch's indices, with len()
-- (e.g. data.RandomSampler, or a Lua array / 1-D integer tensor of indices), instead of shuffle.
-- batch_sampler: an object whose iter() gives whole batches of indices (e.g. data.BatchSampler,
-- or a Lua array of arrays), instead of batch_size, shuffle, sampler and drop_last.
--
-- device: every tensor of a batch moves there; the next batch is gathered and its copy queued
-- before the current one is handed out (a worker-free prefetch: on CUDA the copy runs while the
-- step computes). pin_memory = true: batches are gathered into pinned (page-locked) host memory
-- (t:pin_memory()), so the copy to the GPU runs while the host goes on; needs CUDA.
--
-- shard = {rank, world} (ranks from 0, as tl.distributed.rank(); or shard = true for this
-- rank of the job): every rank draws the same epoch order (seed defaults to 0, the same on
-- every rank) and cuts each global batch of batch_size * world samples into world parts, rank
-- r taking part r + 1. So the ranks' batches k together are the batch k of an unsharded loader
-- with batch_size * world, and every rank has the same number of batches: without drop_last
-- the last global batch is topped up to a multiple of world with samples from the start of
-- the order (as torch's DistributedSampler does).
--
-- state_dict() / load_state_dict(state): the epoch, the batches of it already handed out and
-- the shuffle's seed (and the sampler's state): a new loader over the same dataset that loads
-- the state gives, at its next iter(), exactly the remaining batches of the interrupted epoch.
local DATALOADER_OPTIONS = { "table", dataset = "table", batch_size = "integer", shuffle = "boolean",
  seed = "integer", drop_last = "boolean", device = "string", shard = "boolean|table", sampler = "table|tensor",
  batch_sampler = "table", collate_fn = "callable", pin_memory = "boolean" }

-- a sampler given as a Lua array or a tensor of indices: an object over them
local function as_sampler(who, value, level)
  if type(value) == "table" and type(value.iter) == "function" then return value end
  local list = samplers._index_list(who, value, level + 1)
  local function iter()
    local i = 0
    return function()
      i = i + 1
      return list[i]
    end
  end
  return { iter = iter, len = function() return #list end }
end

-- a batch sampler given as a Lua array of batches: an object over them
local function as_batch_sampler(value, level)
  if type(value.iter) == "function" then return value end
  for k, batch in ipairs(value) do
    if type(batch) ~= "table" and not tl.is_tensor(batch) then
      options.error(string.format("data.DataLoader: batch_sampler entry %d expected a list of indices, got %s", k,
        type(batch)), level + 1)
    end
  end
  local function iter()
    local i = 0
    return function()
      i = i + 1
      return value[i]
    end
  end
  return { iter = iter, len = function() return #value end }
end

local function parse_shard(shard, dataset)
  if shard == true then shard = { tl.distributed.rank(), tl.distributed.world_size() } end
  local rank, world = type(shard) == "table" and shard[1], type(shard) == "table" and shard[2]
  if math.type(rank) ~= "integer" or math.type(world) ~= "integer" or world < 1 or rank < 0 or rank >= world then
    options.error("data.DataLoader: shard must be {rank, world} with integers 0 <= rank < world (or true), got " ..
      (type(shard) == "table" and string.format("{%s, %s}", tostring(rank), tostring(world)) or tostring(shard)), 4)
  end
  if dataset:len() < world then
    options.error(string.format("data.DataLoader: the dataset has %d samples, fewer than the %d ranks",
      dataset:len(), world), 4)
  end
  return { rank = rank, world = world }
end

-- the options DataLoader(dataset, opts) takes in opts (the dataset is its first argument)
local SECOND_ARGUMENT_OPTIONS = {}
for key, kind in pairs(DATALOADER_OPTIONS) do
  if key ~= 1 and key ~= "dataset" then SECOND_ARGUMENT_OPTIONS[key] = kind end
end

local function is_dataset(value)
  return type(value) == "table" and type(value.len) == "function"
    and (type(value.get) == "function" or type(value.batch) == "function")
end

local function kind_of(value)
  if tl.is_tensor(value) then return "a tensor" end
  return type(value) == "table" and "a table that is not a dataset" or type(value)
end

function DataLoader.new(cls, opts, ...)
  local n_extra = select("#", ...)
  if is_dataset(opts) then
    -- DataLoader(dataset, opts): the same as DataLoader{dataset, ...opts} (PyTorch's order)
    local extra = ...
    if n_extra > 1 then
      options.error(string.format("data.DataLoader: expected DataLoader(dataset, {options}), got %d arguments",
        n_extra + 1), 2)
    end
    if type(extra) == "table" and (extra[1] ~= nil or extra.dataset ~= nil) then
      options.error("data.DataLoader: give the dataset once (as the first argument or in the options table)", 2)
    end
    local merged = { opts }
    for key, value in pairs(options.check(extra, "data.DataLoader", SECOND_ARGUMENT_OPTIONS, 2)) do
      merged[key] = value
    end
    opts = merged
  elseif n_extra > 0 then
    options.error("data.DataLoader: expected DataLoader{dataset, batch_size = ..., ...} or DataLoader(dataset, " ..
      "{batch_size = ..., ...}) with a dataset (with len() and get(i) or batch(indices)) first, got " ..
      kind_of(opts) .. " as the first argument", 2)
  end
  if type(opts) ~= "table" then
    options.error("data.DataLoader: expected a table {dataset, batch_size = ..., ...} or DataLoader(dataset, " ..
      "{...}), got " .. (tl.is_tensor(opts) and "a tensor" or type(opts)), 2)
  end
  options.check(opts, "data.DataLoader", DATALOADER_OPTIONS, 2)
  if opts[1] ~= nil and opts.dataset ~= nil then
    options.error("data.DataLoader: give the dataset once (as the first entry or as dataset =)", 2)
  end
  local dataset = opts[1] or opts.dataset
  if type(dataset) ~= "table" or type(dataset.len) ~= "function"
      or (type(dataset.get) ~= "function" and type(dataset.batch) ~= "function") then
    options.error("data.DataLoader: expected a dataset (with len() and get(i) or batch(indices)) as the first entry",
      2)
  end
  local batch_size = opts.batch_size or 1
  if batch_size < 1 then
    options.error("data.DataLoader: batch_size must be a positive integer, got " .. tostring(batch_size), 2)
  end
  if opts.pin_memory and not tl.cuda.is_available() then
    options.error("data.DataLoader: pin_memory needs CUDA (pinned host memory speeds copies to a GPU; this " ..
      "build or machine has none)", 2)
  end
  if opts.sampler ~= nil and opts.shuffle ~= nil then
    options.error("data.DataLoader: sampler and shuffle exclude each other (a sampler gives the order)", 2)
  end
  if opts.batch_sampler ~= nil then
    for _, key in ipairs({ "batch_size", "shuffle", "sampler", "drop_last" }) do
      if opts[key] ~= nil then
        options.error("data.DataLoader: batch_sampler and " .. key .. " exclude each other (the batch sampler " ..
          "makes the batches)", 2)
      end
    end
  end
  if opts.shard ~= nil and (opts.sampler ~= nil or opts.batch_sampler ~= nil) then
    options.error("data.DataLoader: shard excludes sampler and batch_sampler", 2)
  end
  if opts.seed ~= nil and (opts.sampler ~= nil or opts.batch_sampler ~= nil) then
    options.error("data.DataLoader: seed is for shuffle; a sampler has its own (e.g. data.RandomSampler(ds, {seed}))",
      2)
  end
  local self = setmetatable({
    dataset = dataset, batch_size = batch_size, shuffle = opts.shuffle and true or false,
    drop_last = opts.drop_last and true or false, device = opts.device, collate_fn = opts.collate_fn,
    pin_memory = opts.pin_memory and true or false,
    seed = opts.seed, epoch = 0, _position = 0, _done = true,
  }, cls)
  if opts.sampler ~= nil then self.sampler = as_sampler("data.DataLoader: sampler", opts.sampler, 2) end
  if opts.batch_sampler ~= nil then self.batch_sampler = as_batch_sampler(opts.batch_sampler, 2) end
  if opts.shard ~= nil and opts.shard ~= false then
    self.shard = parse_shard(opts.shard, dataset)
    if self.seed == nil then self.seed = 0 end
  end
  if self.seed == nil then self.seed = samplers._fresh_seed() end
  return self
end

-- the number of indices or batches a sampler gives per epoch
local function sampler_len(sampler, what)
  local len = sampler.len or (getmetatable(sampler) or {}).__len
  if type(len) ~= "function" then
    options.error("data.DataLoader:len: its " .. what .. " has no len()", 3)
  end
  return len(sampler)
end

--- len() -> the number of batches per epoch (also #loader); with shard, this rank's (the same on
-- every rank)
function DataLoader:len()
  if self.batch_sampler then return sampler_len(self.batch_sampler, "batch_sampler") end
  local n = self.sampler and sampler_len(self.sampler, "sampler") or self.dataset:len()
  local size = self.batch_size * (self.shard and self.shard.world or 1)
  if self.drop_last then return n // size end
  return (n + size - 1) // size
end
DataLoader.__len = DataLoader.len

-- the order of epoch `epoch` (shuffle, or 1..n): an int64 tensor of 1-based indices
local function epoch_order(self, epoch)
  local n = self.dataset:len()
  if not self.shuffle then return tl.arange(1, n + 1) end
  return tl.tensor(samplers._permutation(n, samplers._epoch_random(self.seed, epoch), "data.DataLoader"),
    { dtype = "int64" })
end

-- the whole of one iterator of a sampler, as a Lua array
local function drain(sampler)
  local list, next_value = {}, sampler:iter()
  for v in next_value do list[#list + 1] = v end
  return list
end

-- the list of this epoch's batches of indices (int64 tensors); for a sampler, drawn now
local function epoch_batches(self, epoch)
  local batches = {}
  if self.batch_sampler then
    for k, batch in ipairs(drain(self.batch_sampler)) do
      if not tl.is_tensor(batch) then
        batch = tl.tensor(samplers._index_list("data.DataLoader: batch " .. k, batch, 3), { dtype = "int64" })
      end
      batches[k] = batch
    end
    return batches
  end
  local order
  if self.sampler then
    local list = drain(self.sampler)
    for k, i in ipairs(list) do
      if math.type(i) ~= "integer" then
        options.error(string.format("data.DataLoader: the sampler gave %s as index %d, expected an integer",
          tostring(i), k), 3)
      end
    end
    order = tl.tensor(list, { dtype = "int64" })
  else
    order = epoch_order(self, epoch)
  end
  -- a dataset that gathers its batches on a device takes the indices there: the order moves once
  -- an epoch instead of each batch's indices once a batch
  local dataset = self.dataset
  if not self.collate_fn and type(dataset.batch) == "function" and type(dataset.batch_device) == "function" then
    local device = dataset:batch_device()
    if device then order = order:to(device) end
  end
  local n, size = order:numel(), self.batch_size
  local count = self:len()
  for b = 1, count do
    if self.shard then
      batches[b] = loader._shard_indices(self, order, b)
    else
      local start = (b - 1) * size + 1
      batches[b] = order:narrow(1, start, math.min(size, n - start + 1))
    end
  end
  return batches
end

-- the indices of this rank's batch b of an epoch's order: its part of global batch b
function loader._shard_indices(self, order, b)
  local n, size, world, rank = order:numel(), self.batch_size, self.shard.world, self.shard.rank
  local start = (b - 1) * size * world + 1
  local count = math.min(size * world, n - start + 1)
  local global = order:narrow(1, start, count)
  if count % world ~= 0 then -- top up the last global batch from the start of the order
    local positions = {}
    for k = 1, count do positions[k] = start + k - 1 end
    for k = 1, world - count % world do positions[#positions + 1] = k end
    global = gather_rows(order, tl.tensor(positions, { dtype = "int64" }))
    count = global:numel()
  end
  local part = count // world
  return global:narrow(1, rank * part + 1, part)
end

-- the batch of the indices (an int64 tensor): packed values, moved to the device
local function load_batch(self, indices)
  local dataset, out = self.dataset, nil
  if dataset.batch and not self.collate_fn then
    out = table.pack(dataset:batch(indices))
  else
    if type(dataset.get) ~= "function" then
      options.error("data.DataLoader: collate_fn needs a dataset with get(i)", 3)
    end
    local samples, width = {}, nil
    for k = 1, indices:numel() do
      local sample = table.pack(dataset:get(indices[k]))
      if width and sample.n ~= width then
        options.error(string.format("data.DataLoader: the dataset's get gave %d values for sample %d, %d for " ..
          "the first of the batch", sample.n, indices[k], width), 3)
      end
      width = sample.n
      if width == 1 then
        samples[k] = sample[1]
      else
        sample.n = nil
        samples[k] = sample
      end
    end
    if self.collate_fn then
      out = table.pack(self.collate_fn(samples))
    elseif width == 1 then
      out = table.pack(default_collate(samples))
    else
      local columns = default_collate(samples)
      out = table.pack(table.unpack(columns, 1, width))
    end
  end
  if self.device or self.pin_memory then
    for i = 1, out.n do out[i] = to_device(out[i], self.device, self.pin_memory) end
  end
  return out
end

--- iter() -> an iterator over the batches of one epoch: `for x, y in loader:iter() do`. After
-- load_state_dict, the first call resumes the interrupted epoch where it stopped.
function DataLoader:iter()
  local epoch, first = self.epoch + 1, 1
  local resume = self._resume
  self._resume = nil
  if resume then epoch, first = resume.epoch, resume.batch + 1 end
  self.epoch = epoch
  -- the state a sampler had before this epoch drew from it (a resumed epoch redraws the same)
  local source = self.batch_sampler or self.sampler
  self._sampler_state = source and type(source.state_dict) == "function" and source:state_dict() or nil
  local batches = epoch_batches(self, epoch)
  self._position, self._done = first - 1, false
  local b, pending = first - 1, nil
  local prefetch = self.device ~= nil
  return function()
    local current
    if pending then
      current, pending = pending, nil
    else
      if b >= #batches then
        if self.epoch == epoch then self._done = true end
        return nil
      end
      b = b + 1
      current = load_batch(self, batches[b])
    end
    if prefetch and b < #batches then -- the next batch's copy is queued before this one is handed out
      b = b + 1
      pending = load_batch(self, batches[b])
    end
    if self.epoch == epoch then self._position = self._position + 1 end
    return table.unpack(current, 1, current.n)
  end
end

--- enumerate() -> an iterator over i, batch...: `for i, x, y in loader:enumerate() do` (after a
-- resume, i goes on from the batches the interrupted run had)
function DataLoader:enumerate()
  local next_batch = self:iter()
  local i = self._position
  return function()
    local out = table.pack(next_batch())
    if out[1] == nil then return nil end
    i = i + 1
    return i, table.unpack(out, 1, out.n)
  end
end

--- state_dict() -> {epoch, batch, done, seed, samples, sampler}: the epoch under way or last
-- begun (0: none yet), how many of its batches were handed out, whether its iterator has ended,
-- the shuffle's seed, the dataset's size, and the sampler's state (at the start of the epoch
-- under way, else now). Plain values: tl.save keeps them.
function DataLoader:state_dict()
  if self._resume then
    local r = self._resume
    return { epoch = r.epoch, batch = r.batch, done = false, seed = self.seed, samples = self.dataset:len(),
      sampler = r.sampler }
  end
  local source = self.batch_sampler or self.sampler
  local sampler_state = self._sampler_state
  if self._done and source and type(source.state_dict) == "function" then sampler_state = source:state_dict() end
  return { epoch = self.epoch, batch = self._position, done = self._done, seed = self.seed,
    samples = self.dataset:len(), sampler = sampler_state }
end

local STATE_KEYS = { epoch = "integer", batch = "integer", done = "boolean", seed = "integer", samples = "integer",
  sampler = "any" }

--- load_state_dict(state): takes a state of state_dict(). An epoch under way (done = false)
-- resumes: the next iter() gives the rest of its batches, in the same order (none when all were
-- handed out), and the iter() after that the next epoch; after an epoch that ended, the next
-- iter() gives the next epoch.
function DataLoader:load_state_dict(state)
  options.check(state, "data.DataLoader:load_state_dict", STATE_KEYS, 2)
  if type(state) ~= "table" or state.epoch == nil or state.batch == nil or state.done == nil or state.seed == nil then
    options.error("data.DataLoader:load_state_dict: expected a state of state_dict() {epoch, batch, done, seed, ...}",
      2)
  end
  if state.samples ~= nil and state.samples ~= self.dataset:len() then
    options.error(string.format("data.DataLoader:load_state_dict: the state is of a dataset of %d samples, this " ..
      "loader's has %d", state.samples, self.dataset:len()), 2)
  end
  if state.epoch < 0 or state.batch < 0 then
    options.error(string.format("data.DataLoader:load_state_dict: epoch and batch must be >= 0, got %d and %d",
      state.epoch, state.batch), 2)
  end
  if self.shard and state.seed ~= self.seed then
    options.error("data.DataLoader:load_state_dict: the state's seed differs from the one every rank shares", 2)
  end
  local source = self.batch_sampler or self.sampler
  if state.sampler ~= nil and not (source and type(source.load_state_dict) == "function") then
    options.error("data.DataLoader:load_state_dict: the state holds a sampler's state, this loader's sampler " ..
      "has no load_state_dict", 2)
  end
  local len = self:len()
  if state.batch > len then
    options.error(string.format("data.DataLoader:load_state_dict: the state is at batch %d of an epoch of %d",
      state.batch, len), 2)
  end
  if state.sampler ~= nil then source:load_state_dict(state.sampler) end
  self.seed, self._sampler_state = state.seed, nil
  if state.epoch >= 1 and not state.done then
    self.epoch, self._position, self._done = state.epoch - 1, 0, true
    self._resume = { epoch = state.epoch, batch = state.batch, sampler = state.sampler }
  else
    self.epoch, self._position, self._done = state.epoch, state.batch, true
    self._resume = nil
  end
end

return loader
