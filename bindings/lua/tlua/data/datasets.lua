-- tl.data datasets: TensorDataset, Subset, ConcatDataset and random_split.
--
-- A dataset has dataset:len() and dataset:get(i) (one sample, 1-based: one value or several,
-- e.g. an image and its label, or a table of named fields). One that can gather a whole batch at
-- once also has dataset:batch(indices) (an int64 tensor of 1-based indices) returning the batch's
-- tensors; DataLoader uses batch when present.
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")
local samplers = require("tlua.data.samplers")

local datasets = {}

local gather_rows = tl._gather_rows

-- raises unless ds is a dataset (len() and get(i)); what names it in the message
local function check_dataset(who, what, ds, level)
  if type(ds) ~= "table" or type(ds.len) ~= "function" or (type(ds.get) ~= "function"
      and type(ds.batch) ~= "function") then
    options.error(string.format("%s: %s expected a dataset (with len() and get(i)), got %s", who, what,
      tl.is_tensor(ds) and "a tensor" or type(ds)), level + 1)
  end
end
datasets._check_dataset = check_dataset

-- raises unless i is an index of a dataset of n samples
local function check_index(who, i, n)
  if math.type(i) ~= "integer" or i < 1 or i > n then
    options.error(string.format("%s: index %s out of range (1 <= index <= %d)", who, tostring(i), n), 3)
  end
end

--- TensorDataset(t1, t2, ...): sample i is t1[i], t2[i], ... (each tensor indexed along dim 1);
-- ds.tensors lists them. batch(indices) gathers the rows of each tensor in C.
local TensorDataset = class("data.TensorDataset")
datasets.TensorDataset = TensorDataset

function TensorDataset.new(cls, ...)
  local tensors = table.pack(...)
  if tensors.n == 0 then options.error("data.TensorDataset: expected at least one tensor", 2) end
  local n
  for i = 1, tensors.n do
    local t = tensors[i]
    if not tl.is_tensor(t) then
      options.error(string.format("data.TensorDataset: argument %d expected a tensor, got %s", i, type(t)), 2)
    end
    if t:dim() == 0 then options.error(string.format("data.TensorDataset: argument %d is a 0-dim tensor", i), 2) end
    local size = t:size(1)
    if n and size ~= n then
      options.error(string.format("data.TensorDataset: the tensors differ in size along dim 1 (%d and %d)", n, size), 2)
    end
    n = size
  end
  return setmetatable({ tensors = { table.unpack(tensors, 1, tensors.n) }, n = n }, cls)
end

--- len() -> the number of samples (also #ds)
function TensorDataset:len() return self.n end
TensorDataset.__len = TensorDataset.len

--- get(i) -> t1[i], t2[i], ...
function TensorDataset:get(i)
  check_index("data.TensorDataset:get", i, self.n)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return table.unpack(out)
end

--- batch(indices) -> the rows indices of t1, t2, ... (indices: an int64 tensor, 1-based)
function TensorDataset:batch(indices)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = gather_rows(t, indices) end
  return table.unpack(out)
end

--- batch_device() -> the device of the tensors when they all share one that is not the CPU, else
-- nil: a DataLoader hands batch() its indices there (the epoch's order moved once, so that a batch
-- costs no copy of its indices from the host)
function TensorDataset:batch_device()
  local device = self.tensors[1].device
  if device == "cpu" then return nil end
  for _, t in ipairs(self.tensors) do
    if t.device ~= device then return nil end
  end
  return device
end

-- ---- Subset ----------------------------------------------------------------------------
--- Subset(dataset, indices): the samples indices[1], indices[2], ... of dataset (indices: a Lua
-- array of 1-based integers or a 1-D int64/int32 tensor; repeats allowed). ds.dataset,
-- ds.indices (a Lua array). Gathers whole batches when dataset can.
local Subset = class("data.Subset")
datasets.Subset = Subset

-- batch(indices) of a Subset whose dataset has batch: the dataset's rows, mapped
local function subset_batch(self, indices)
  return self.dataset:batch(gather_rows(self._index_tensor, indices))
end

function Subset:init(dataset, indices)
  check_dataset("data.Subset", "argument 1", dataset, 3)
  local list = samplers._index_list("data.Subset", indices, 3)
  local n = dataset:len()
  for k, i in ipairs(list) do
    if i < 1 or i > n then
      options.error(string.format("data.Subset: index %d at position %d is out of range (1 <= index <= %d)", i, k, n),
        3)
    end
  end
  self.dataset, self.indices = dataset, list
  if type(dataset.batch) == "function" then
    self._index_tensor = tl.tensor(list, { dtype = "int64" })
    self.batch = subset_batch
  end
end

--- len() -> #indices (also #subset)
function Subset:len() return #self.indices end
Subset.__len = Subset.len

--- get(i) -> dataset:get(indices[i])
function Subset:get(i)
  check_index("data.Subset:get", i, #self.indices)
  return self.dataset:get(self.indices[i])
end

-- ---- ConcatDataset ---------------------------------------------------------------------
--- ConcatDataset({ds1, ds2, ...}): the samples of ds1, then those of ds2, ... ds.datasets,
-- ds.cumulative_sizes (as torch: the running totals). Gathers whole batches when every part can
-- (their batches must hold the same number of tensors).
local ConcatDataset = class("data.ConcatDataset")
datasets.ConcatDataset = ConcatDataset

-- the part holding sample i and i's index in it (binary search over the running totals)
local function locate(self, i)
  local sizes = self.cumulative_sizes
  local lo, hi = 1, #sizes
  while lo < hi do
    local mid = (lo + hi) // 2
    if sizes[mid] >= i then hi = mid else lo = mid + 1 end
  end
  return lo, i - (sizes[lo - 1] or 0)
end

-- batch(indices) of a ConcatDataset whose parts all have batch: each part's rows in one batch,
-- joined and put back in the order asked
local function concat_batch(self, indices)
  local list, n = indices:to("cpu"):totable(), self:len()
  local parts, order = {}, {}
  for k, i in ipairs(list) do
    check_index("data.ConcatDataset:batch", i, n)
    local p, j = locate(self, i)
    local part = parts[p]
    if not part then
      part = { positions = {}, rows = {} }
      parts[p] = part
      order[#order + 1] = p
    end
    part.positions[#part.positions + 1] = k
    part.rows[#part.rows + 1] = j
  end
  if #order == 1 then
    return self.datasets[order[1]]:batch(tl.tensor(parts[order[1]].rows, { dtype = "int64" }))
  end
  local columns, where, row, count = {}, {}, 0, nil
  for _, p in ipairs(order) do
    local part = parts[p]
    local out = table.pack(self.datasets[p]:batch(tl.tensor(part.rows, { dtype = "int64" })))
    if count and out.n ~= count then
      options.error(string.format("data.ConcatDataset: its datasets' batches differ in length (%d and %d values)",
        count, out.n), 2)
    end
    count = out.n
    for c = 1, out.n do
      if not tl.is_tensor(out[c]) then
        options.error(string.format("data.ConcatDataset: dataset %d's batch gave %s as value %d, expected tensors",
          p, type(out[c]), c), 2)
      end
      columns[c] = columns[c] or {}
      columns[c][#columns[c] + 1] = out[c]
    end
    for _, k in ipairs(part.positions) do
      row = row + 1
      where[k] = row
    end
  end
  local back = tl.tensor(where, { dtype = "int64" })
  local result = {}
  for c = 1, count do result[c] = gather_rows(tl.cat(columns[c], 1), back) end
  return table.unpack(result, 1, count)
end

function ConcatDataset:init(list)
  if type(list) ~= "table" or #list == 0 or type(list.len) == "function" then
    options.error("data.ConcatDataset: expected a non-empty list of datasets {ds1, ds2, ...}, got " ..
      (type(list) == "table" and (type(list.len) == "function" and "a dataset" or "an empty table") or type(list)), 3)
  end
  local sizes, total, all_batch = {}, 0, true
  for k, ds in ipairs(list) do
    check_dataset("data.ConcatDataset", "entry " .. k, ds, 3)
    total = total + ds:len()
    sizes[k] = total
    if type(ds.batch) ~= "function" then all_batch = false end
  end
  self.datasets, self.cumulative_sizes = { table.unpack(list) }, sizes
  if all_batch then self.batch = concat_batch end
end

--- len() -> the total number of samples (also #ds)
function ConcatDataset:len() return self.cumulative_sizes[#self.cumulative_sizes] end
ConcatDataset.__len = ConcatDataset.len

--- get(i) -> the sample i of the joined datasets
function ConcatDataset:get(i)
  check_index("data.ConcatDataset:get", i, self:len())
  local p, j = locate(self, i)
  return self.datasets[p]:get(j)
end

-- ---- random_split ----------------------------------------------------------------------
local function is_close_to_one(x)
  return math.abs(x - 1) <= 1e-9 * math.max(math.abs(x), 1)
end

-- the lengths of random_split: counts as given, or fractions turned into counts by torch's rule
-- (floor(n * fraction) each, then the remainder one by one from the first part on)
local function split_lengths(lengths, n)
  if type(lengths) ~= "table" or #lengths == 0 then
    options.error("data.random_split: lengths must be a non-empty list of counts or fractions, got " ..
      type(lengths), 4)
  end
  local sum = 0
  for k, v in ipairs(lengths) do
    if type(v) ~= "number" then
      options.error(string.format("data.random_split: lengths[%d] expected a number, got %s", k, type(v)), 4)
    end
    sum = sum + v
  end
  local counts = {}
  if is_close_to_one(sum) and sum <= 1 then
    local total = 0
    for k, frac in ipairs(lengths) do
      if frac < 0 or frac > 1 then
        options.error(string.format("data.random_split: the fraction lengths[%d] = %s is not between 0 and 1", k,
          tostring(frac)), 4)
      end
      counts[k] = math.floor(n * frac)
      total = total + counts[k]
    end
    for i = 0, n - total - 1 do
      local k = i % #counts + 1
      counts[k] = counts[k] + 1
    end
    return counts
  end
  local total = 0
  for k, v in ipairs(lengths) do
    if math.type(v) ~= "integer" or v < 0 then
      options.error(string.format("data.random_split: lengths[%d] = %s: expected counts (integers >= 0) or " ..
        "fractions summing to 1", k, tostring(v)), 4)
    end
    counts[k] = v
    total = total + v
  end
  if total ~= n then
    options.error(string.format("data.random_split: the lengths sum to %d, the dataset has %d samples", total, n), 4)
  end
  return counts
end

local SPLIT_OPTIONS = { seed = "integer", generator = "callable" }

--- random_split(dataset, lengths, {seed = from tl's generator, generator = nil}) -> {Subset, ...}:
-- a random partition of dataset into parts of the given lengths: counts summing to #dataset, or
-- fractions summing to 1 (floor(n * fraction) each, the remainder given one by one from the first
-- part on, as torch). The order comes from a seeded shuffle (data.splitmix(seed)), or from
-- generator, a function random(k) -> an integer in [1, k] (e.g. data.splitmix(7)).
function datasets.random_split(dataset, lengths, opts)
  check_dataset("data.random_split", "argument 1", dataset, 2)
  opts = options.check(opts, "data.random_split", SPLIT_OPTIONS, 2)
  if opts.seed ~= nil and opts.generator ~= nil then
    options.error("data.random_split: give seed or generator, not both", 2)
  end
  local n = dataset:len()
  local counts = split_lengths(lengths, n)
  local random = opts.generator or samplers.splitmix(opts.seed or samplers._fresh_seed())
  local perm = samplers._permutation(n, random, "data.random_split")
  local parts, offset = {}, 0
  for k, count in ipairs(counts) do
    parts[k] = Subset(dataset, table.move(perm, offset + 1, offset + count, 1, {}))
    offset = offset + count
  end
  return parts
end

return datasets
