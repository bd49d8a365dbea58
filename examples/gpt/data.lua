-- examples/gpt/data.lua: a character-level (byte-level) corpus: the vocabulary, the encoded text split 90/10 into train and validation, and random batches drawn with tensor ops on the training device.
local tl = require("tlua")

local data = {}

-- a new class named name (a table that is its instances' metatable and holds their methods),
-- exported as data[name]
local function class(name)
  local cls = {}
  cls.__index = cls
  data[name] = cls
  return cls
end

--- The default corpus: Debian's `fortunes` package (scripts/setup installs it), or the folder
--- or file $TLUA_GPT_DATA names (a machine without the package).
data.DEFAULT = os.getenv("TLUA_GPT_DATA") or "/usr/share/games/fortunes"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- the plain fortune files of a folder (names without a dot: the .dat indexes and the .u8 links
-- are left out), sorted, so the corpus is the same on every machine
local function folder_files(dir)
  local p = io.popen('ls -1 "' .. dir .. '" 2>/dev/null')
  if not p then return {} end
  local files = {}
  for name in p:lines() do
    if not name:find(".", 1, true) then files[#files + 1] = dir .. "/" .. name end
  end
  p:close()
  table.sort(files)
  return files
end

--- text(path): the corpus as one string: a file, or every plain file of a folder joined
function data.text(path)
  path = path or data.DEFAULT
  local s = read(path)
  if s and s ~= "" then return s end
  local parts = {}
  for _, f in ipairs(folder_files(path)) do
    local t = read(f)
    if t then parts[#parts + 1] = t end
  end
  if #parts == 0 then
    error(string.format("gpt data: no text at '%s' (install Debian's fortunes package, or pass --data FILE)", path), 2)
  end
  return table.concat(parts)
end

--- Vocabulary: the distinct bytes of a text, sorted; ids count from 1.
local Vocab = class("Vocab")

function Vocab.of(text)
  local seen = {}
  for i = 1, #text do seen[text:byte(i)] = true end
  local chars = {}
  for b = 0, 255 do if seen[b] then chars[#chars + 1] = b end end
  return Vocab.from_bytes(chars)
end

--- from_bytes({b1, b2, ...}): the vocabulary of those byte values, in that order
function Vocab.from_bytes(chars)
  local id = {}
  for i, b in ipairs(chars) do id[b] = i end
  return setmetatable({ chars = chars, id = id, size = #chars }, Vocab)
end

--- encode(s) -> int64 tensor of ids (1-based); an unknown byte is an error
function Vocab:encode(s)
  local ids, id, n = {}, self.id, #s
  local CHUNK = 4096
  for start = 1, n, CHUNK do
    local bytes = { s:byte(start, math.min(n, start + CHUNK - 1)) }
    for j = 1, #bytes do
      local v = id[bytes[j]]
      if not v then error(string.format("gpt data: byte %d is not in the vocabulary", bytes[j]), 2) end
      ids[start + j - 1] = v
    end
  end
  return tl.tensor(ids, { dtype = "int64" })
end

--- decode(ids): a table or a 1-D tensor of ids -> the string
function Vocab:decode(ids)
  if type(ids) ~= "table" then ids = ids:to("cpu"):totable() end
  local out = {}
  for i, v in ipairs(ids) do out[i] = string.char(self.chars[v]) end
  return table.concat(out)
end

--- A data set: train and validation ids on a device, and batches of windows of them.
local Dataset = class("Dataset")

--- Dataset.load{path, device, val_fraction = 0.1} -> dataset (vocab, train, val)
function Dataset.load(opts)
  local text = data.text(opts.path)
  local vocab = Vocab.of(text)
  local ids = vocab:encode(text)
  local n = ids.shape[1]
  local n_val = math.floor(n * (opts.val_fraction or 0.1))
  local device = opts.device or "cpu"
  -- [N, 1]: rows for tl._gather_rows
  local train = ids:narrow(1, 1, n - n_val):contiguous():view(n - n_val, 1):to(device)
  local val = ids:narrow(1, n - n_val + 1, n_val):contiguous():view(n_val, 1):to(device)
  return setmetatable({ vocab = vocab, train = train, val = val, device = device, bytes = #text }, Dataset)
end

--- batch(split, B, T) -> x, y [B, T] int64 on the data's device: B windows at random offsets
--- (tl.randint, so tl.manual_seed fixes them), y shifted by one token
function Dataset:batch(split, B, T)
  local src = split == "val" and self.val or self.train
  local n = src.shape[1]
  if n <= T then error(string.format("gpt data: the %s split has %d tokens, fewer than context + 1", split, n), 2) end
  return self:batch_at(split, tl.randint(1, n - T + 1, { B }, { device = self.device }), T)
end

--- sampler(seed, drawn = 0) -> draw(split, B, T, rank = 0, world = 1) -> x, y, and drawn() -> the
--- number of windows drawn so far: windows drawn by a generator of the sampler's own (not tl's),
--- so every rank of a data-parallel job draws the same global batch of B * world windows and
--- keeps rows rank * B + 1 .. (rank + 1) * B: the ranks' batches together are the batch
--- B * world of one process. A sampler made with drawn = drawn() of another of the same seed goes
--- on where that one is (a resumed run's).
function Dataset:sampler(seed, drawn)
  local random = tl.data.splitmix(seed) -- a generator of its own, the same on every rank
  local count = drawn or 0
  for _ = 1, count do random(1) end -- each draw advances the generator by one, whatever its range
  local function draws() return count end
  return function(split, B, T, rank, world)
    rank, world = rank or 0, world or 1
    local src = split == "val" and self.val or self.train
    local n = src.shape[1]
    if n <= T then error(string.format("gpt data: the %s split has %d tokens, fewer than context + 1", split, n), 2) end
    local offsets = {}
    for k = 1, B * world do
      local o = random(n - T)
      if k > rank * B and k <= (rank + 1) * B then offsets[#offsets + 1] = o end
    end
    count = count + B * world
    return self:batch_at(split, tl.tensor(offsets, { dtype = "int64" }), T)
  end, draws
end

--- batch_at(split, offsets, T) -> x, y: the windows starting at the given 1-based token offsets
--- (an int64 tensor [B]) of a split
function Dataset:batch_at(split, offsets, T)
  local src = split == "val" and self.val or self.train
  local B = offsets.shape[1]
  offsets = offsets:to(self.device)
  local positions = offsets:view(B, 1) + tl.arange(0, T + 1, { device = self.device }):view(1, T + 1)
  local windows = tl._gather_rows(src, positions:view(B * (T + 1))):view(B, T + 1)
  return windows:narrow(2, 1, T), windows:narrow(2, 2, T)
end

-- ---- model files ------------------------------------------------------------------------------
-- A training script writes its model two ways: --save (tl.save: the model's tensors) and
-- --checkpoint (tl.checkpoint.save: the model under "model", beside the optimizer, schedule, RNG
-- and step). Both carry the same metadata: the vocabulary ("vocab_bytes") and the model's config
-- ("config.<key>"), so a sampling script builds the model from either file.

--- model_metadata(vocab, config) -> the metadata of a model file: the vocabulary's bytes and
-- every config value but the device, as strings
function data.model_metadata(vocab, config)
  local chars = {}
  for k, b in ipairs(vocab.chars) do chars[k] = tostring(b) end
  local meta = { vocab_bytes = table.concat(chars, ",") }
  for k, v in pairs(config) do if k ~= "device" then meta["config." .. k] = tostring(v) end end
  return meta
end

--- load_model(path, defaults, fail) -> tensors, vocab, overrides: the model's state dict from a
-- file of --save or of --checkpoint (told apart by the checkpoint's metadata, then read with
-- tl.checkpoint.read), its vocabulary, and its config values as overrides of `defaults` (each
-- converted to the type of its default). A file that is neither, or has no vocabulary, goes to
-- fail(message).
function data.load_model(path, defaults, fail)
  local ok, tensors, meta = pcall(tl.load, path)
  if not ok then fail(tostring(tensors)) end
  if meta["tlua.checkpoint"] ~= nil then
    local state, info = tl.checkpoint.read(path)
    if type(state.model) ~= "table" then fail("'" .. path .. "' is a checkpoint without a model") end
    tensors, meta = state.model, info.metadata
  end
  if not meta.vocab_bytes then
    fail("'" .. path .. "' has no vocabulary: was it written by train.lua --save or --checkpoint?")
  end
  local chars = {}
  for b in meta.vocab_bytes:gmatch("%d+") do chars[#chars + 1] = tonumber(b) end
  local overrides = {}
  for k, v in pairs(defaults) do
    local s = meta["config." .. k]
    if s ~= nil then
      if type(v) == "number" then overrides[k] = math.tointeger(tonumber(s)) or tonumber(s)
      elseif type(v) == "boolean" then overrides[k] = s == "true"
      else overrides[k] = s end
    end
  end
  return tensors, Vocab.from_bytes(chars), overrides
end

return data
