-- tl.checkpoint: a training run's whole state (modules, optimizers, schedulers, DataLoaders, the RNG, plain values) in one safetensors file, and back.
--
--   tl.checkpoint.save(path, { model = model, optimizer = opt, scheduler = sched, loader = loader,
--     step = step, extra = { best = 0.91, note = "run 3" } })
--   ...
--   local state = tl.checkpoint.load(path, { model = model, optimizer = opt, scheduler = sched,
--     loader = loader })
--   local step = state.step -- plain values come back as they were saved
--
-- The file is a plain safetensors file (tl.load and other readers open it): every tensor under a
-- dotted name of its place ("model.0.weight", "optimizer.state.1.exp_avg", "rng_state"), and in
-- the metadata "tlua.checkpoint" (the format's version) and "tlua.tree": the structure, with the
-- plain values written out exactly: strings byte for byte, integers as integers, floats in hex
-- ("%a": bit for bit, infinities too; a NaN stays a NaN), booleans. The tree is parsed by a
-- small reader of its own (nothing of a file is ever run as Lua).
--
-- Ranks (tlua --nproc N, tl.distributed): each rank's generator may differ (each its own dropout
-- masks), so in a world of more than one rank save is a collective: every rank calls it, the
-- ranks' RNG states are gathered ("rng_state" [world, 2], row r + 1 rank r's) and rank 0 writes
-- the file; load gives each rank its own row. A world of one keeps "rng_state" [2].
local tl = require("tlua")
local options = require("tlua.options")
local dist = require("tlua.distributed")

local checkpoint = {}

local FORMAT = "1"
local FORMAT_KEY, TREE_KEY = "tlua.checkpoint", "tlua.tree"
local RNG_NAME = "rng_state"
local MAX_DEPTH = 100

-- ---- errors ------------------------------------------------------------------------------------
-- internal failures carry their message up to the public function, which raises it at the
-- user's line with its own name in front
local Failure = {}
local function fail(fmt, ...)
  error(setmetatable({ message = string.format(fmt, ...) }, Failure), 0)
end

local function guard(who, fn, ...)
  local result = table.pack(pcall(fn, ...))
  if result[1] then return table.unpack(result, 2, result.n) end
  local e = result[2]
  if getmetatable(e) == Failure then options.error(who .. ": " .. e.message, 3) end
  error(e, 0)
end

-- a path of keys as the messages show it: model.0.weight (the root: "the state")
local function path_text(path)
  if #path == 0 then return "the state" end
  local parts = {}
  for i, k in ipairs(path) do parts[i] = tostring(k) end
  return "'" .. table.concat(parts, ".") .. "'"
end

local function with(path, key)
  local out = table.move(path, 1, #path, 1, {})
  out[#out + 1] = key
  return out
end

-- whether v is an object that saves its state: a class instance with state_dict()
local function is_stateful(v)
  return type(v) == "table" and getmetatable(v) ~= nil and type(v.state_dict) == "function"
end

local function kind_of(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and type(mt.__name) == "string" and mt.__name or "object"
end

-- the keys of a table: integers ascending, then strings sorted (the same bytes for the same state)
local function sorted_keys(t, path)
  local ints, strs = {}, {}
  for k in pairs(t) do
    if math.type(k) == "integer" then
      ints[#ints + 1] = k
    elseif type(k) == "string" then
      strs[#strs + 1] = k
    else
      fail("%s has a key of type %s (%s); keys must be strings or integers", path_text(path),
        math.type(k) or type(k), tostring(k))
    end
  end
  table.sort(ints)
  table.sort(strs)
  table.move(strs, 1, #strs, #ints + 1, ints)
  return ints
end

-- ---- the tree's text ---------------------------------------------------------------------------
-- value  := 'T' string (a tensor, by its name in the file) | 's' string | 'i' integer | 'f' float
--         | 'b1' | 'b0' | table | 'O' string table (the state dict of an object of that class)
-- table  := '{' [ key '=' value { ',' key '=' value } ] '}'    key := 's' string | 'i' integer
-- string := '"' { printable ASCII but " and \ | '\\' | '\"' | '\x' hex hex } '"'
-- integer: decimal digits with an optional '-'; float: "%a" hex, or inf, -inf, nan
local function quote(s)
  return '"' .. s:gsub('[%c"\\\128-\255]', function(c) return string.format("\\x%02x", c:byte()) end) .. '"'
end

local function float_text(v)
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  return string.format("%a", v)
end

-- a tensor's name in the file: the dotted path, bytes outside printable ASCII as %XX, made unique
local function tensor_name(path, used)
  local parts = {}
  for i, k in ipairs(path) do parts[i] = tostring(k) end
  local base = table.concat(parts, "."):gsub("[^ -~]", function(c) return string.format("%%%02X", c:byte()) end)
  if base == "" then base = "tensor" end
  local name, n = base, 1
  while used[name] do
    n = n + 1
    name = base .. "~" .. n
  end
  used[name] = true
  return name
end

-- encode(value, path, ctx) -> text; tensors go to ctx.tensors under their names
local function encode(v, path, ctx, depth)
  if depth > MAX_DEPTH then fail("%s is nested more than %d deep", path_text(path), MAX_DEPTH) end
  if tl.is_tensor(v) then
    local name = tensor_name(path, ctx.used)
    ctx.tensors[name] = v
    return "T" .. quote(name)
  end
  local t = type(v)
  if t == "string" then return "s" .. quote(v) end
  if t == "boolean" then return v and "b1" or "b0" end
  if t == "number" then
    if math.type(v) == "integer" then return "i" .. string.format("%d", v) end
    return "f" .. float_text(v)
  end
  if t ~= "table" then
    fail("%s is a %s; a checkpoint holds tensors, numbers, strings, booleans, tables of them and objects " ..
      "with state_dict() (modules, optimizers, schedulers, DataLoaders)", path_text(path), t)
  end
  if ctx.seen[v] then fail("%s holds a table that contains itself", path_text(path)) end
  local prefix = ""
  if is_stateful(v) then
    prefix = "O" .. quote(kind_of(v))
    v = v:state_dict()
    if type(v) ~= "table" then fail("%s: state_dict() gave a %s, expected a table", path_text(path), type(v)) end
  end
  ctx.seen[v] = true
  local parts = {}
  for _, k in ipairs(sorted_keys(v, path)) do
    local key = math.type(k) == "integer" and ("i" .. string.format("%d", k)) or ("s" .. quote(k))
    parts[#parts + 1] = key .. "=" .. encode(v[k], with(path, k), ctx, depth + 1)
  end
  ctx.seen[v] = nil
  return prefix .. "{" .. table.concat(parts, ",") .. "}"
end

-- ---- reading the tree --------------------------------------------------------------------------
-- a node of the read tree that was an object's state: {kind =, value =} (value: its state dict)
local Object = {}

local function parser(text, tensors)
  local pos, used = 1, {}
  local function corrupt(what)
    fail("the checkpoint's tree is corrupt at byte %d: %s", pos, what)
  end
  local function expect(c)
    if text:sub(pos, pos) ~= c then corrupt(string.format("expected '%s'", c)) end
    pos = pos + 1
  end
  local function read_string()
    expect('"')
    local out = {}
    while true do
      local s, e = text:find('[\\"]', pos)
      if not s then corrupt("an unterminated string") end
      local chunk = text:sub(pos, s - 1)
      if chunk:find("[^ -~]") then corrupt("a byte outside printable ASCII in a string") end
      out[#out + 1] = chunk
      pos = e + 1
      if text:sub(s, s) == '"' then break end
      local c = text:sub(pos, pos)
      if c == "\\" or c == '"' then
        out[#out + 1] = c
        pos = pos + 1
      elseif c == "x" and text:find("^%x%x", pos + 1) then
        out[#out + 1] = string.char(tonumber(text:sub(pos + 1, pos + 2), 16))
        pos = pos + 3
      else
        corrupt("a bad escape in a string")
      end
    end
    return table.concat(out)
  end
  local function read_integer()
    local token = text:match("^%-?%d+", pos)
    local v = token and math.tointeger(tonumber(token))
    if not v or string.format("%d", v) ~= token then corrupt("a bad integer") end
    pos = pos + #token
    return v
  end
  local function read_float()
    local token = text:match("^[%w%.%+%-]+", pos)
    if not token then corrupt("a bad float") end
    local v
    if token == "inf" then v = math.huge
    elseif token == "-inf" then v = -math.huge
    elseif token == "nan" then v = 0 / 0
    elseif token:find("^%-?0x[%x%.]+p[%+%-]%d+$") then v = tonumber(token)
    end
    if math.type(v) ~= "float" then corrupt("a bad float") end
    pos = pos + #token
    return v
  end
  local read_value
  local function read_table(depth)
    expect("{")
    local t = {}
    if text:sub(pos, pos) == "}" then
      pos = pos + 1
      return t
    end
    while true do
      local tag, key = text:sub(pos, pos), nil
      pos = pos + 1
      if tag == "s" then key = read_string()
      elseif tag == "i" then key = read_integer()
      else corrupt("expected a key") end
      if t[key] ~= nil then corrupt("a key twice") end
      expect("=")
      t[key] = read_value(depth + 1)
      local c = text:sub(pos, pos)
      pos = pos + 1
      if c == "}" then return t end
      if c ~= "," then
        pos = pos - 1
        corrupt("expected ',' or '}'")
      end
    end
  end
  function read_value(depth)
    if depth > MAX_DEPTH then corrupt("nested too deep") end
    local tag = text:sub(pos, pos)
    pos = pos + 1
    if tag == "T" then
      local name = read_string()
      if tensors[name] == nil then corrupt("no tensor '" .. name .. "' in the file") end
      if used[name] then corrupt("the tensor '" .. name .. "' twice") end
      used[name] = true
      return tensors[name]
    elseif tag == "s" then return read_string()
    elseif tag == "i" then return read_integer()
    elseif tag == "f" then return read_float()
    elseif tag == "b" then
      local c = text:sub(pos, pos)
      pos = pos + 1
      if c == "1" then return true elseif c == "0" then return false end
      pos = pos - 1
      corrupt("a bad boolean")
    elseif tag == "O" then
      local kind = read_string()
      return setmetatable({ kind = kind, value = read_table(depth) }, Object)
    elseif tag == "{" then
      pos = pos - 1
      return read_table(depth)
    end
    pos = pos - 1
    corrupt("expected a value")
  end
  return function()
    local v = read_value(1)
    if pos <= #text then corrupt("text after the end") end
    for name in pairs(tensors) do
      if not used[name] then fail("the checkpoint's tree names no tensor '%s' (a corrupt file?)", name) end
    end
    return v
  end
end

-- the read tree with every object node replaced by its state dict
local function plain(v)
  if getmetatable(v) == Object then return plain(v.value) end
  if type(v) ~= "table" or tl.is_tensor(v) then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = plain(x) end
  return out
end

-- ---- the RNG states of the ranks ---------------------------------------------------------------
-- the RNG state to save: this process's [2] in a world of one; in a world of more, every rank's
-- as [world, 2] (row r + 1: rank r's), on every rank. tl.distributed has all_reduce but no
-- all_gather: each rank puts its state in its own row of zeros and the rows are summed (int64
-- sums are exact, and the other rows add 0). A collective: every rank must call it.
local function rng_states()
  local own, world = tl.get_rng_state(), dist.world_size()
  if world <= 1 then return own end
  local all = tl.zeros({ world, 2 }, { dtype = "int64" })
  all:narrow(1, dist.rank() + 1, 1):copy_(own:view(1, 2))
  return dist.all_reduce(all, "sum")
end

-- this rank's state of a saved rng tensor: [2] (a world of one: every rank takes it) or [W, 2]
-- (W ranks: rank r takes row r + 1, and the world must have W ranks)
local function own_rng_state(rng, path)
  if #rng.shape == 1 then return rng end
  local saved, world = rng.shape[1], dist.world_size()
  if saved ~= world then
    fail("'%s' holds the RNG states of %d ranks, this run has %d (start it with tlua --nproc %d, or load with " ..
      "{rng = false})", path, saved, world, saved)
  end
  return rng:narrow(1, dist.rank() + 1, 1):reshape(2)
end

-- ---- save --------------------------------------------------------------------------------------
local SAVE_OPTIONS = { metadata = "table", rng = "boolean" }

--- checkpoint.save(path, state, {metadata = nil, rng = true}): writes state into one safetensors
-- file (atomically, as tl.save: a temporary file renamed; on error the path is untouched).
-- state: a table of tensors (on any device: saved from the host), numbers, strings, booleans,
-- tables of these, and objects with state_dict() (nn modules, optimizers, schedulers,
-- DataLoaders, samplers), whose state dicts are saved with their class names. Keys: strings or
-- integers. rng: also save tl.get_rng_state() (the one generator of CPU and CUDA), which
-- checkpoint.load restores; in a world of more than one rank (tl.distributed), every rank's:
-- then save is a collective that every rank calls, and rank 0 alone writes the file (the state
-- saved is rank 0's). metadata: {key = string|number|boolean} for the file's metadata (keys
-- "tlua.*" are the checkpoint's own).
function checkpoint.save(path, state, opts)
  opts = options.check(opts, "checkpoint.save", SAVE_OPTIONS, 2) or {}
  guard("checkpoint.save", function()
    if type(path) ~= "string" then fail("expected a path (a string) as argument 1, got %s", type(path)) end
    if type(state) ~= "table" or is_stateful(state) or tl.is_tensor(state) then
      fail("expected a table of what to save as argument 2 ({model = m, optimizer = opt, step = k, ...}), got %s",
        tl.is_tensor(state) and "a tensor" or is_stateful(state) and ("a " .. kind_of(state)) or type(state))
    end
    local metadata = {}
    for k, v in pairs(opts.metadata or {}) do
      if type(k) ~= "string" then fail("metadata keys must be strings, got a %s key", type(k)) end
      if k:sub(1, 5) == "tlua." then fail("metadata key '%s': keys 'tlua.*' are the checkpoint's own", k) end
      metadata[k] = v
    end
    local ctx = { tensors = {}, used = { __metadata__ = true }, seen = {} }
    if opts.rng ~= false then
      ctx.used[RNG_NAME] = true
      ctx.tensors[RNG_NAME] = rng_states()
    end
    -- every rank encodes (a sharded optimizer's state_dict() is a collective of every rank),
    -- rank 0 writes
    local tree = encode(state, {}, ctx, 1)
    if dist.world_size() > 1 and dist.rank() ~= 0 then return end
    if opts.rng ~= false then tree = "{s\"rng\"=T" .. quote(RNG_NAME) .. ",s\"state\"=" .. tree .. "}"
    else tree = "{s\"state\"=" .. tree .. "}" end
    metadata[FORMAT_KEY], metadata[TREE_KEY] = FORMAT, tree
    tl.save(path, ctx.tensors, metadata)
  end)
end

-- ---- read --------------------------------------------------------------------------------------
-- the file's tree (object nodes kept), rng tensor or nil, user metadata
local function read_file(path)
  if type(path) ~= "string" then fail("expected a path (a string) as argument 1, got %s", type(path)) end
  local ok, tensors, metadata = pcall(tl.load, path)
  if not ok then fail("%s", tostring(tensors):gsub("^.-load: ", "")) end
  if metadata[FORMAT_KEY] == nil or metadata[TREE_KEY] == nil then
    fail("'%s' is not a checkpoint of tl.checkpoint.save (no '%s' metadata); tl.load reads plain safetensors files",
      path, FORMAT_KEY)
  end
  if metadata[FORMAT_KEY] ~= FORMAT then
    fail("'%s' is a checkpoint of format %s, this tlua reads format %s", path, metadata[FORMAT_KEY], FORMAT)
  end
  local ok2, root = pcall(parser(metadata[TREE_KEY], tensors))
  if not ok2 then
    if getmetatable(root) == Failure then fail("'%s': %s", path, root.message) end
    error(root, 0)
  end
  if type(root) ~= "table" or getmetatable(root) ~= nil or type(root.state) ~= "table"
      or getmetatable(root.state) == Object then
    fail("'%s': the checkpoint's tree has no state table", path)
  end
  local rng = root.rng
  local shape = tl.is_tensor(rng) and rng.shape
  if rng ~= nil and not (shape and rng.dtype == "int64" and ((#shape == 1 and shape[1] == 2) or
      (#shape == 2 and shape[1] >= 1 and shape[2] == 2))) then
    fail("'%s': the checkpoint's RNG state is not an int64 tensor of 2 values (or [ranks, 2])", path)
  end
  local user = {}
  for k, v in pairs(metadata) do
    if k:sub(1, 5) ~= "tlua." then user[k] = v end
  end
  return root.state, rng, user
end

--- checkpoint.read(path) -> state, {rng = tensor or nil, metadata = {...}}: what save wrote
-- (rng: [2], or [ranks, 2] from a world of several ranks, row r + 1 rank r's),
-- changing nothing: tensors (on the CPU) and plain values where they were, each object's state
-- dict in its place. A file that is not a checkpoint, or a corrupt one, raises.
function checkpoint.read(path)
  return guard("checkpoint.read", function()
    local state, rng, metadata = read_file(path)
    return plain(state), { rng = rng, metadata = metadata }
  end)
end

-- ---- load --------------------------------------------------------------------------------------
-- v with every table copied and every tensor cloned (a snapshot to roll back to)
local function deep_clone(v)
  if tl.is_tensor(v) then return v:detach():clone() end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_clone(x) end
  return out
end

local function keys_text(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = tostring(k) end
  table.sort(names)
  return #names > 0 and table.concat(names, ", ") or "nothing"
end

-- pairs (object, its saved node, path) for every object of `objects`, checked against the tree
local function match(objects, node, path, out)
  for _, k in ipairs(sorted_keys(objects, path)) do
    local obj, sub, p = objects[k], node[k], with(path, k)
    if sub == nil then
      fail("%s is not in the checkpoint (%s holds: %s)", path_text(p), path_text(path), keys_text(node))
    end
    if type(obj) == "table" and type(obj.load_state_dict) == "function" then
      if getmetatable(sub) ~= Object then
        fail("%s in the checkpoint is not the state of an object (%s)", path_text(p),
          tl.is_tensor(sub) and "a tensor" or type(sub))
      end
      local kind = kind_of(obj)
      if not tl.nn.is_module(obj) and sub.kind ~= kind then
        fail("%s in the checkpoint was saved from %s, not %s", path_text(p), sub.kind, kind)
      end
      out[#out + 1] = { obj = obj, state = plain(sub.value), path = p }
    elseif type(obj) == "table" and getmetatable(obj) == nil then
      if type(sub) ~= "table" or tl.is_tensor(sub) or getmetatable(sub) == Object then
        fail("%s in the checkpoint is not a table", path_text(p))
      end
      match(obj, sub, p, out)
    else
      fail("%s: expected an object with load_state_dict (a module, optimizer, scheduler, DataLoader) or a table " ..
        "of them, got %s", path_text(p), tl.is_tensor(obj) and "a tensor" or (getmetatable(obj) and kind_of(obj))
        or type(obj))
    end
  end
  return out
end

local LOAD_OPTIONS = { rng = "boolean" }

--- checkpoint.load(path, objects, {rng = true}) -> state: loads into each object of `objects`
-- (a table shaped as the saved state, e.g. {model = m, optimizer = opt, scheduler = s, loader =
-- dl}; nested tables of objects too) its saved state dict (load_state_dict), then sets the RNG
-- state that save recorded (rng = false leaves the generator alone; the RNG states of W ranks
-- give each rank its own, in a world of W ranks only). Returns the saved state as
-- checkpoint.read gives it (plain values: state.step, state.extra...). Objects saved but not
-- asked for are not loaded. Everything is checked first: a file that is not a checkpoint, a
-- missing entry, an object of another class (modules: by their state dict's names and shapes)
-- or a state dict an object refuses raises, and the objects loaded before it are put back:
-- nothing changes.
function checkpoint.load(path, objects, opts)
  opts = options.check(opts, "checkpoint.load", LOAD_OPTIONS, 2) or {}
  return guard("checkpoint.load", function()
    local state, rng = read_file(path)
    if type(objects) ~= "table" or getmetatable(objects) ~= nil then
      fail("expected a table of the objects to load as argument 2 ({model = m, optimizer = opt, ...}), got %s",
        tl.is_tensor(objects) and "a tensor" or (type(objects) == "table" and kind_of(objects)) or type(objects))
    end
    if opts.rng ~= false and rng == nil then
      fail("'%s' holds no RNG state (saved with rng = false); load it with {rng = false}", path)
    end
    if opts.rng ~= false then rng = own_rng_state(rng, path) end
    local targets = match(objects, state, {}, {})
    local done = {}
    for _, target in ipairs(targets) do
      local before = #targets > 1 and deep_clone(target.obj:state_dict()) or nil
      local ok, err = pcall(target.obj.load_state_dict, target.obj, target.state)
      if not ok then
        for i = #done, 1, -1 do pcall(done[i].obj.load_state_dict, done[i].obj, done[i].before) end
        fail("%s: %s", path_text(target.path), tostring(err))
      end
      done[#done + 1] = { obj = target.obj, before = before }
    end
    if opts.rng ~= false then tl.set_rng_state(rng) end
    return plain(state)
  end)
end

return checkpoint
