-- tl.data samplers: the seeded shuffles (splitmix), SequentialSampler, RandomSampler, SubsetRandomSampler, BatchSampler.
--
-- A sampler is an object whose iter() gives the indices (1-based) of one epoch, with len() (the
-- count of indices per epoch); DataLoader{ds, sampler = s} batches them. A batch sampler's iter()
-- gives whole batches (Lua arrays of indices); DataLoader{ds, batch_sampler = b} loads them as
-- they come. A sampler may also have state_dict() / load_state_dict(state): the loader saves the
-- state its sampler had when the epoch began, so that a resumed epoch draws the same order.
local tl = require("tlua")
local class = require("tlua.class")
local options = require("tlua.options")

local samplers = {}

--- splitmix(seed) -> random(n): uniform integers in [1, n], the same sequence for a seed on every
-- machine and rank, independent of tl.manual_seed's stream and of math.random
local function splitmix(state)
  if math.type(state) ~= "integer" then options.error("data.splitmix: expected an integer seed, got " .. tostring(state), 2) end
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
samplers.splitmix = splitmix

-- the random stream of a seed's epoch (the DataLoader's shuffles use the same one)
local function epoch_random(seed, epoch)
  return splitmix(seed * 1000003 + epoch)
end
samplers._epoch_random = epoch_random

-- a seed from tl's generator (tl.manual_seed makes it reproducible)
local function fresh_seed()
  return tl.randint(0, 1 << 31, { 1 }):item()
end
samplers._fresh_seed = fresh_seed

-- a Lua array holding a random permutation of 1..n (Fisher-Yates over random(k) in [1, k]); who
-- names the caller when random gives something else
local function permutation(n, random, who)
  local perm = {}
  for i = 1, n do perm[i] = i end
  for i = n, 2, -1 do
    local j = random(i)
    if math.type(j) ~= "integer" or j < 1 or j > i then
      options.error(string.format("%s: the generator gave %s for random(%d), expected an integer in [1, %d]",
        who, tostring(j), i, i), 3)
    end
    perm[i], perm[j] = perm[j], perm[i]
  end
  return perm
end
samplers._permutation = permutation

-- the size of a dataset or a count: n, a table with len(), or an array
local function size_of(who, source)
  if math.type(source) == "integer" and source >= 0 then return source end
  if type(source) == "table" and type(source.len) == "function" then return source:len() end
  options.error(string.format("%s: expected a dataset (with len()) or a count >= 0, got %s", who,
    tl.is_tensor(source) and "a tensor" or tostring(source)), 4)
end

-- an iterator over the entries of a Lua array
local function each(list)
  local i = 0
  return function()
    i = i + 1
    return list[i]
  end
end

--- SequentialSampler(dataset_or_n): indices 1, 2, ..., n in order
local SequentialSampler = class("data.SequentialSampler")
samplers.SequentialSampler = SequentialSampler

function SequentialSampler:init(source)
  self.n = size_of("data.SequentialSampler", source)
end

function SequentialSampler:len() return self.n end
SequentialSampler.__len = SequentialSampler.len

--- iter() -> an iterator over 1..n
function SequentialSampler:iter()
  local i, n = 0, self.n
  return function()
    i = i + 1
    if i <= n then return i end
  end
end

--- RandomSampler(dataset_or_n, {seed = from tl's generator, replacement = false, num_samples = n}):
-- each epoch (each iter()) a new random order of 1..n, the same sequence of orders for a seed.
-- Without replacement, num_samples > n gives whole permutations then part of one (as torch);
-- with replacement, num_samples independent draws. state_dict() = {seed, epoch}.
local RandomSampler = class("data.RandomSampler")
samplers.RandomSampler = RandomSampler
local RANDOM_OPTIONS = { seed = "integer", replacement = "boolean", num_samples = "integer" }

function RandomSampler:init(source, opts)
  self.n = size_of("data.RandomSampler", source)
  opts = options.check(opts, "data.RandomSampler", RANDOM_OPTIONS, 3)
  if self.n == 0 then options.error("data.RandomSampler: the dataset is empty", 3) end
  self.replacement = opts.replacement or false
  self.num_samples = opts.num_samples or self.n
  if self.num_samples < 1 then
    options.error("data.RandomSampler: num_samples must be a positive integer, got " .. self.num_samples, 3)
  end
  self.seed = opts.seed or fresh_seed()
  self.epoch = 0
end

function RandomSampler:len() return self.num_samples end
RandomSampler.__len = RandomSampler.len

--- iter() -> an iterator over this epoch's indices (the epoch count moves on)
function RandomSampler:iter()
  self.epoch = self.epoch + 1
  local random, n, count = epoch_random(self.seed, self.epoch), self.n, self.num_samples
  local list = {}
  if self.replacement then
    for k = 1, count do list[k] = random(n) end
  else
    while #list < count do
      local perm = permutation(n, random, "data.RandomSampler")
      for k = 1, math.min(n, count - #list) do list[#list + 1] = perm[k] end
    end
  end
  return each(list)
end

local SAMPLER_STATE = { seed = "integer", epoch = "integer" }

--- state_dict() -> {seed, epoch}: what the next iter() depends on
function RandomSampler:state_dict() return { seed = self.seed, epoch = self.epoch } end

--- load_state_dict{seed, epoch}: the next iter() draws the order it would have drawn then
function RandomSampler:load_state_dict(state)
  options.check(state, "data.RandomSampler:load_state_dict", SAMPLER_STATE, 2)
  if state.seed == nil or state.epoch == nil or state.epoch < 0 then
    options.error("data.RandomSampler:load_state_dict: expected {seed = integer, epoch = integer >= 0}", 2)
  end
  self.seed, self.epoch = state.seed, state.epoch
end

-- a Lua array of integer indices from an array or a 1-D integer tensor (who: the caller)
local function index_list(who, indices, level)
  if tl.is_tensor(indices) then
    if indices:dim() ~= 1 or (indices.dtype ~= "int64" and indices.dtype ~= "int32") then
      options.error(string.format("%s: indices must be a 1-D int64 or int32 tensor, got %s %s tensor of shape [%s]",
        who, indices.dtype:match("^[aeiou]") and "an" or "a", indices.dtype, table.concat(indices.shape, ", ")),
        level + 1)
    end
    return indices:to("cpu"):totable()
  end
  if type(indices) ~= "table" then
    options.error(string.format("%s: indices must be a list of integers or a 1-D integer tensor, got %s", who,
      type(indices)), level + 1)
  end
  local list = {}
  for k, v in ipairs(indices) do
    if math.type(v) ~= "integer" then
      options.error(string.format("%s: index %d expected an integer, got %s", who, k, tostring(v)), level + 1)
    end
    list[k] = v
  end
  return list
end
samplers._index_list = index_list

--- SubsetRandomSampler(indices, {seed}): the given indices in a new random order each epoch
local SubsetRandomSampler = class("data.SubsetRandomSampler")
samplers.SubsetRandomSampler = SubsetRandomSampler

function SubsetRandomSampler:init(indices, opts)
  self.indices = index_list("data.SubsetRandomSampler", indices, 3)
  opts = options.check(opts, "data.SubsetRandomSampler", { seed = "integer" }, 3)
  self.seed = opts.seed or fresh_seed()
  self.epoch = 0
end

function SubsetRandomSampler:len() return #self.indices end
SubsetRandomSampler.__len = SubsetRandomSampler.len

function SubsetRandomSampler:iter()
  self.epoch = self.epoch + 1
  local perm = permutation(#self.indices, epoch_random(self.seed, self.epoch), "data.SubsetRandomSampler")
  for k, p in ipairs(perm) do perm[k] = self.indices[p] end
  return each(perm)
end

SubsetRandomSampler.state_dict = RandomSampler.state_dict
function SubsetRandomSampler:load_state_dict(state)
  options.check(state, "data.SubsetRandomSampler:load_state_dict", SAMPLER_STATE, 2)
  if state.seed == nil or state.epoch == nil or state.epoch < 0 then
    options.error("data.SubsetRandomSampler:load_state_dict: expected {seed = integer, epoch = integer >= 0}", 2)
  end
  self.seed, self.epoch = state.seed, state.epoch
end

--- BatchSampler(sampler, batch_size, drop_last = false): the sampler's indices in Lua arrays of
-- batch_size (the last one smaller unless drop_last). Its state is its sampler's.
local BatchSampler = class("data.BatchSampler")
samplers.BatchSampler = BatchSampler

function BatchSampler:init(sampler, batch_size, drop_last)
  if type(sampler) ~= "table" or type(sampler.iter) ~= "function" then
    options.error("data.BatchSampler: expected a sampler (with iter()) as argument 1, got " .. type(sampler), 3)
  end
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    options.error("data.BatchSampler: batch_size (argument 2) must be a positive integer, got " ..
      tostring(batch_size), 3)
  end
  if drop_last ~= nil and type(drop_last) ~= "boolean" then
    options.error("data.BatchSampler: drop_last (argument 3) must be a boolean, got " .. type(drop_last), 3)
  end
  self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last or false
end

function BatchSampler:len()
  if type(self.sampler.len) ~= "function" then
    options.error("data.BatchSampler:len: its sampler has no len()", 2)
  end
  local n = self.sampler:len()
  if self.drop_last then return n // self.batch_size end
  return (n + self.batch_size - 1) // self.batch_size
end
BatchSampler.__len = BatchSampler.len

--- iter() -> an iterator over batches (Lua arrays of indices)
function BatchSampler:iter()
  local next_index, size, drop_last = self.sampler:iter(), self.batch_size, self.drop_last
  local done = false
  return function()
    if done then return nil end
    local batch = {}
    while #batch < size do
      local i = next_index()
      if i == nil then
        done = true
        break
      end
      batch[#batch + 1] = i
    end
    if #batch == 0 or (done and drop_last and #batch < size) then return nil end
    return batch
  end
end

function BatchSampler:state_dict()
  if type(self.sampler.state_dict) == "function" then return self.sampler:state_dict() end
end

function BatchSampler:load_state_dict(state)
  if type(self.sampler.load_state_dict) == "function" then self.sampler:load_state_dict(state) end
end

return samplers
