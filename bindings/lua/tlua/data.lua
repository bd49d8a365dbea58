-- tl.data: IDX files (MNIST's format, gzip or plain), Fashion-MNIST, TensorDataset and a
-- DataLoader that batches by gathering rows in C (tl._gather_rows), so an epoch costs no
-- per-sample Lua work.
--
--   local train = tl.data.FashionMNIST { train = true }
--   local loader = tl.data.DataLoader { train, batch_size = 128, shuffle = true, seed = 1 }
--   for images, labels in loader:iter() do ... end       -- or: for i, x, y in loader:enumerate()
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")

local data = {}

local gather_rows = tl._gather_rows

--- read_idx(path) -> tensor: int32 for the byte/short/int types, float32/float64 for the float
-- ones, shaped by the file's dims. A missing, truncated or corrupt file raises naming it.
function data.read_idx(path)
  if type(path) ~= "string" then error("data.read_idx: expected a path (a string), got " .. type(path), 2) end
  local ok, result = pcall(tl._read_idx, path)
  if not ok then
    local message = tostring(result):gsub("^[^:]*:%d+: ", ""):gsub("^read_idx: ", "")
    error("data.read_idx: " .. message, 2)
  end
  return result
end

-- ---- datasets -------------------------------------------------------------------------
-- A dataset has dataset:len() and dataset:get(i) (one sample, 1-based); one that can gather a
-- whole batch at once has dataset:batch(indices) (an int64 tensor of 1-based indices) returning
-- the batch's tensors. DataLoader uses batch when present.

local TensorDataset = class("data.TensorDataset")
data.TensorDataset = TensorDataset

--- TensorDataset(t1, t2, ...): sample i is t1[i], t2[i], ... (each tensor indexed along dim 1)
function TensorDataset.new(cls, ...)
  local tensors = table.pack(...)
  if tensors.n == 0 then error("data.TensorDataset: expected at least one tensor", 2) end
  local n
  for i = 1, tensors.n do
    local t = tensors[i]
    if not tl.is_tensor(t) then
      error(string.format("data.TensorDataset: argument %d expected a tensor, got %s", i, type(t)), 2)
    end
    if t:dim() == 0 then error(string.format("data.TensorDataset: argument %d is a 0-dim tensor", i), 2) end
    local size = t:size(1)
    if n and size ~= n then
      error(string.format("data.TensorDataset: the tensors differ in size along dim 1 (%d and %d)", n, size), 2)
    end
    n = size
  end
  return setmetatable({ tensors = { table.unpack(tensors, 1, tensors.n) }, n = n }, cls)
end

function TensorDataset:len() return self.n end
TensorDataset.__len = TensorDataset.len

function TensorDataset:get(i)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return table.unpack(out)
end

function TensorDataset:batch(indices)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = gather_rows(t, indices) end
  return table.unpack(out)
end

local function file_in(root, name)
  for _, candidate in ipairs({ name, name .. ".gz" }) do
    local path = root .. "/" .. candidate
    -- core's check: in an embedded sandbox, only the folders the host granted are readable
    if tl._is_readable(path) then return path end
  end
  error(string.format("data.FashionMNIST: neither %s/%s nor %s/%s.gz exists (install the Debian package " ..
    "dataset-fashion-mnist, or pass root =)", root, name, root, name), 3)
end

data.FASHION_MNIST_CLASSES = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
  "Sneaker", "Bag", "Ankle boot" }

-- Where FashionMNIST looks by default: $TLUA_FASHION_MNIST if set, else Debian's
-- dataset-fashion-mnist package.
data.FASHION_MNIST_ROOT = (os.getenv and os.getenv("TLUA_FASHION_MNIST")) or "/usr/share/datasets/fashion-mnist"

--- FashionMNIST{root = data.FASHION_MNIST_ROOT, train = true, normalize = false,
-- device = "cpu"}: a TensorDataset of images [N, 1, 28, 28] float32 in [0, 1] (normalize = true:
-- (x - 0.2860) / 0.3530, the training set's mean and std) and labels [N] int64, classes 1..10
-- (the files' 0..9 plus one). ds.images, ds.labels, ds.classes.
local FASHION_MNIST_OPTIONS = { root = "string", train = "boolean", normalize = "boolean", device = "string" }

function data.FashionMNIST(opts)
  opts = options.check(opts, "data.FashionMNIST", FASHION_MNIST_OPTIONS, 2)
  local root = opts.root or data.FASHION_MNIST_ROOT
  local prefix = (opts.train == false) and "t10k" or "train"
  local images = data.read_idx(file_in(root, prefix .. "-images-idx3-ubyte"))
  local labels = data.read_idx(file_in(root, prefix .. "-labels-idx1-ubyte"))
  if images:dim() ~= 3 or labels:dim() ~= 1 or images:size(1) ~= labels:size(1) then
    error(string.format("data.FashionMNIST: expected images [N, 28, 28] and labels [N], got [%s] and [%s]",
      table.concat(images.shape, ", "), table.concat(labels.shape, ", ")), 2)
  end
  local n, h, w = images:size(1), images:size(2), images:size(3)
  local x = images:float():view(n, 1, h, w) / 255
  if opts.normalize then x = (x - 0.2860) / 0.3530 end
  local y = labels:long() + 1
  if opts.device and opts.device ~= "cpu" then
    x, y = x:to(opts.device), y:to(opts.device)
  end
  local ds = TensorDataset(x, y)
  ds.images, ds.labels, ds.classes = x, y, data.FASHION_MNIST_CLASSES
  return ds
end

-- ---- DataLoader ------------------------------------------------------------------------
-- A small PRNG of its own (splitmix64) for the shuffles: reproducible for a seed, and leaves
-- tl.manual_seed's stream and math.random alone.
--- splitmix(seed) -> random(n): uniform integers in [1, n], the same sequence for a seed on every
--- machine and rank, independent of tl.manual_seed's stream and of math.random
local function splitmix(state)
  local s = state
  return function(n) -- uniform integer in [1, n]
    s = s + 0x9E3779B97F4A7C15
    local z = s
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 11) % n + 1
  end
end

data.splitmix = splitmix

local DataLoader = class("data.DataLoader")
data.DataLoader = DataLoader

--- DataLoader{dataset, batch_size = 1, shuffle = false, seed = nil, drop_last = false,
-- device = nil, shard = nil}: batches of the dataset (tensors stacked along a new dim 1). With
-- shuffle, each epoch (each call of iter) draws a new order; with a seed the sequence of orders
-- is the same on every run (otherwise the seed comes from tl's generator, see tl.manual_seed).
--
-- shard = {rank, world} (ranks from 0, as tl.distributed.rank(); or shard = true for this
-- rank of the job): every rank draws the same epoch order (seed defaults to 0, the same on
-- every rank) and cuts each global batch of batch_size * world samples into world parts, rank
-- r taking part r + 1. So the ranks' batches k together are the batch k of an unsharded loader
-- with batch_size * world, and every rank has the same number of batches: without drop_last
-- the last global batch is topped up to a multiple of world with samples from the start of
-- the order (as torch's DistributedSampler does).
local DATALOADER_OPTIONS = { "table", dataset = "table", batch_size = "any", shuffle = "boolean", seed = "any",
  drop_last = "boolean", device = "string", shard = "any" }

function DataLoader.new(cls, opts)
  if type(opts) ~= "table" then error("data.DataLoader: expected a table {dataset, batch_size = ..., ...}", 2) end
  options.check(opts, "data.DataLoader", DATALOADER_OPTIONS, 2)
  local dataset = opts[1] or opts.dataset
  if type(dataset) ~= "table" or type(dataset.len) ~= "function" then
    error("data.DataLoader: expected a dataset (with len() and get(i) or batch(indices)) as the first entry", 2)
  end
  local batch_size = opts.batch_size or 1
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    error("data.DataLoader: batch_size must be a positive integer, got " .. tostring(batch_size), 2)
  end
  local seed = opts.seed
  if seed ~= nil and math.type(seed) ~= "integer" then
    error("data.DataLoader: seed must be an integer, got " .. tostring(seed), 2)
  end
  local shard = opts.shard
  if shard == true then shard = { tl.distributed.rank(), tl.distributed.world_size() } end
  if shard ~= nil then
    local rank, world = type(shard) == "table" and shard[1], type(shard) == "table" and shard[2]
    if math.type(rank) ~= "integer" or math.type(world) ~= "integer" or world < 1 or rank < 0 or rank >= world then
      error("data.DataLoader: shard must be {rank, world} with integers 0 <= rank < world (or true), got " ..
        (type(shard) == "table" and string.format("{%s, %s}", tostring(rank), tostring(world)) or tostring(shard)), 2)
    end
    shard = { rank = rank, world = world }
    if seed == nil then seed = 0 end
    if dataset:len() < world then
      error(string.format("data.DataLoader: the dataset has %d samples, fewer than the %d ranks", dataset:len(), world), 2)
    end
  end
  if seed == nil then seed = tl.randint(0, 1 << 31, { 1 }):item() end
  return setmetatable({
    dataset = dataset, batch_size = batch_size, shuffle = opts.shuffle and true or false,
    drop_last = opts.drop_last and true or false, device = opts.device,
    seed = seed, epoch = 0, shard = shard,
  }, cls)
end

--- number of batches per epoch (also #loader); with shard, this rank's (the same on every rank)
function DataLoader:len()
  local n = self.dataset:len()
  local size = self.batch_size * (self.shard and self.shard.world or 1)
  if self.drop_last then return n // size end
  return (n + size - 1) // size
end
DataLoader.__len = DataLoader.len

-- the order of an epoch: an int64 tensor of 1-based indices
function DataLoader:_order()
  local n = self.dataset:len()
  if not self.shuffle then return tl.arange(1, n + 1) end
  self.epoch = self.epoch + 1
  local random = splitmix(self.seed * 1000003 + self.epoch)
  local perm = {}
  for i = 1, n do perm[i] = i end
  for i = n, 2, -1 do
    local j = random(i)
    perm[i], perm[j] = perm[j], perm[i]
  end
  return tl.tensor(perm, { dtype = "int64" })
end

local function stack_samples(dataset, indices)
  -- generic path: one get(i) per sample, stacked with a gather of each sample's rows
  local columns, count = {}, indices:numel()
  for k = 1, count do
    local sample = table.pack(dataset:get(indices[k]))
    for c = 1, sample.n do
      columns[c] = columns[c] or {}
      columns[c][k] = sample[c]
    end
  end
  local out = {}
  for c, list in ipairs(columns) do
    local first = list[1]
    if tl.is_tensor(first) then
      local shape = first.shape
      local batch = tl.empty({ count, table.unpack(shape) }, { dtype = first.dtype, device = first.device })
      for k = 1, count do batch[k] = list[k] end
      out[c] = batch
    else
      out[c] = tl.tensor(list)
    end
  end
  return table.unpack(out)
end

-- the indices of this rank's batch b of an epoch's order: its part of global batch b
local function shard_indices(self, order, b)
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

--- iter() -> an iterator over the batches of one epoch: `for x, y in loader:iter() do`
function DataLoader:iter()
  local order = self:_order()
  local n, size = order:numel(), self.batch_size
  local batches = self:len()
  local dataset, device = self.dataset, self.device
  local b = 0
  return function()
    b = b + 1
    if b > batches then return nil end
    local indices
    if self.shard then
      indices = shard_indices(self, order, b)
    else
      local start = (b - 1) * size + 1
      indices = order:narrow(1, start, math.min(size, n - start + 1))
    end
    local out
    if dataset.batch then
      out = table.pack(dataset:batch(indices))
    else
      out = table.pack(stack_samples(dataset, indices))
    end
    if device then
      for i = 1, out.n do if tl.is_tensor(out[i]) then out[i] = out[i]:to(device) end end
    end
    return table.unpack(out, 1, out.n)
  end
end

--- enumerate() -> an iterator over i, batch...: `for i, x, y in loader:enumerate() do`
function DataLoader:enumerate()
  local next_batch = self:iter()
  local i = 0
  return function()
    local out = table.pack(next_batch())
    if out[1] == nil then return nil end
    i = i + 1
    return i, table.unpack(out, 1, out.n)
  end
end

return data
