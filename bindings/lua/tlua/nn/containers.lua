-- tl.nn containers: Sequential (runs its modules in order), ModuleList (holds them; children numbered from 1) and ModuleDict (holds them by name, in insertion order).
local base = require("tlua.nn.module")
local options = require("tlua.options")

local Module, is_module = base.Module, base.is_module

local containers = {}

local function what_is(v)
  if is_module(v) then return "a module" end
  return type(v)
end

-- raises unless m is a module (who: "nn.ModuleList:insert", what: "argument 2")
local function check_module(who, what, m, level)
  if not is_module(m) then
    options.error(string.format("%s: %s expected a module, got %s", who, what, what_is(m)), level + 1)
  end
end

-- registers the modules given as varargs or as one list, numbered from 1 (called by an init:
-- errors point at the caller of the constructor); what names an entry in messages
local function add_all(self, what, ...)
  local list, first = { ... }, ...
  if select("#", ...) == 1 and type(first) == "table" and not is_module(first) then list = first end
  for i, m in ipairs(list) do
    check_module("nn." .. self._class_name, what .. " " .. i, m, 4)
    self:add_module(i, m)
  end
end

--- append(m) -> self: m becomes entry #self + 1 (Sequential:add(m) is the same, as in Torch7)
local function append(self, m)
  check_module("nn." .. self._class_name .. ":append", "the argument", m, 2)
  self:add_module(#self._module_keys + 1, m)
  return self
end

--- extend(list) -> self: appends each module of list (a Lua array, a ModuleList or a Sequential)
local function extend(self, list)
  local who = "nn." .. self._class_name .. ":extend"
  if type(list) ~= "table" or (is_module(list) and list._class_name ~= "ModuleList"
      and list._class_name ~= "Sequential") then
    options.error(string.format("%s: expected a list of modules (a table, ModuleList or Sequential), got %s", who,
      is_module(list) and list._class_name or type(list)), 2)
  end
  local items = {}
  for i, m in ipairs(list) do
    check_module(who, "entry " .. i, m, 2)
    items[i] = m
  end
  for _, m in ipairs(items) do self:add_module(#self._module_keys + 1, m) end
  return self
end

--- insert(index, m) -> self: m becomes entry index (1 <= index <= #self + 1), the entries from
-- index on moving up by one (their state_dict keys renumber with them)
local function insert(self, index, m)
  local who = "nn." .. self._class_name .. ":insert"
  local n = #self._module_keys
  if math.type(index) ~= "integer" or index < 1 or index > n + 1 then
    options.error(string.format("%s: index must be an integer in [1, %d], got %s", who, n + 1, tostring(index)), 2)
  end
  check_module(who, "argument 2", m, 2)
  self._module_keys[n + 1] = n + 1
  for k = n, index, -1 do rawset(self, k + 1, rawget(self, k)) end
  rawset(self, index, m)
  return self
end

--- pop(index = #self) -> the module removed from entry index, the later entries moving down
local function pop(self, index)
  local who = "nn." .. self._class_name .. ":pop"
  local n = #self._module_keys
  if index == nil then index = n end
  if math.type(index) ~= "integer" or index < 1 or index > n then
    options.error(string.format("%s: index must be an integer in [1, %d], got %s", who, n, tostring(index)), 2)
  end
  local m = rawget(self, index)
  for k = index, n - 1 do rawset(self, k, rawget(self, k + 1)) end
  rawset(self, n, nil)
  self._module_keys[n] = nil
  return m
end

local function len(self)
  return #self._module_keys
end

--- Sequential(m1, m2, ...) or Sequential({m1, m2, ...}): runs its modules in order, the output of
-- each the input of the next (extra arguments of the call go to every module); seq[i] is the
-- i-th module. add(m) / append(m), extend(list), insert(index, m), pop(index).
local Sequential = Module:extend("Sequential")
containers.Sequential = Sequential
Sequential.append, Sequential.add, Sequential.extend, Sequential.insert, Sequential.pop = append, append, extend,
  insert, pop
Sequential.__len = len

function Sequential:init(...) add_all(self, "argument", ...) end

function Sequential:forward(x, ...)
  for _, key in ipairs(self._module_keys) do
    x = rawget(self, key)(x, ...)
  end
  return x
end

--- ModuleList({m1, m2, ...}): holds modules (registered, numbered from 1, so their parameters
-- are the model's); list[i], #list, ipairs(list). append(m), extend(list), insert(index, m),
-- pop(index).
local ModuleList = Module:extend("ModuleList")
containers.ModuleList = ModuleList
ModuleList.append, ModuleList.extend, ModuleList.insert, ModuleList.pop = append, extend, insert, pop
ModuleList.__len = len

function ModuleList:init(...) add_all(self, "entry", ...) end

function ModuleList:forward()
  options.error("nn.ModuleList: a list of modules has no forward; call its modules", 2)
end

-- ---- ModuleDict ------------------------------------------------------------------------
--- ModuleDict(modules): holds modules by name (strings), in insertion order: dict[name] (or
-- dict.name), #dict, keys(), values(), items() (an iterator over name, module: also pairs(dict)),
-- update(modules), pop(name), contains(name). modules: a Lua array of {name, module} pairs (kept
-- in that order), a table name -> module (taken in sorted order of the names) or another
-- ModuleDict. Its state_dict keys are "name.weight" and so on. A name may not contain "." nor
-- hide a method or field (keys, forward, training, ...).
local ModuleDict = Module:extend("ModuleDict")
containers.ModuleDict = ModuleDict

-- raises unless key can name an entry of dict
local function check_key(who, dict, key, level)
  if type(key) ~= "string" then
    options.error(string.format("%s: a name must be a string, got %s", who, type(key)), level + 1)
  end
  if key == "" or key:find(".", 1, true) then
    options.error(string.format("%s: the name '%s' is empty or holds a '.'", who, key), level + 1)
  end
  local existing = rawget(dict, key)
  if (existing ~= nil and not is_module(existing)) or (existing == nil and ModuleDict[key] ~= nil)
      or key:sub(1, 1) == "_" then
    options.error(string.format("%s: the name '%s' would hide the ModuleDict's own '%s'", who, key, key), level + 1)
  end
end

-- the {name, module} pairs of an update's argument, in order
local function entries(who, modules, level)
  if type(modules) ~= "table" then
    options.error(string.format("%s: expected a list of {name, module} pairs, a table name -> module or a " ..
      "ModuleDict, got %s", who, type(modules)), level + 1)
  end
  if is_module(modules) then
    if modules._class_name ~= "ModuleDict" then
      options.error(string.format("%s: expected a ModuleDict, a list of {name, module} pairs or a table " ..
        "name -> module, got a %s", who, modules._class_name), level + 1)
    end
    local out = {}
    for name, m in modules:items() do out[#out + 1] = { name, m } end
    return out
  end
  local out = {}
  if #modules > 0 then
    for i, pair in ipairs(modules) do
      if type(pair) ~= "table" or is_module(pair) or #pair ~= 2 then
        options.error(string.format("%s: entry %d expected a {name, module} pair, got %s", who, i, what_is(pair)),
          level + 1)
      end
      out[i] = { pair[1], pair[2] }
    end
    for key in pairs(modules) do
      if math.type(key) ~= "integer" then
        options.error(string.format("%s: a list of pairs with a named entry '%s' as well", who, tostring(key)),
          level + 1)
      end
    end
  else
    local names = {}
    for key in pairs(modules) do
      if type(key) ~= "string" then
        options.error(string.format("%s: a name must be a string, got %s", who, type(key)), level + 1)
      end
      names[#names + 1] = key
    end
    table.sort(names)
    for i, name in ipairs(names) do out[i] = { name, modules[name] } end
  end
  for _, e in ipairs(out) do
    check_key(who, { _module_keys = {} }, e[1], level + 1)
    check_module(who, "'" .. tostring(e[1]) .. "'", e[2], level + 1)
  end
  return out
end

function ModuleDict:init(modules)
  if modules ~= nil then
    for _, e in ipairs(entries("nn.ModuleDict", modules, 3)) do self:add_module(e[1], e[2]) end
  end
end

-- dict.name = module: a new entry, checked like update's
function ModuleDict:__newindex(key, value)
  if is_module(value) then check_key("nn.ModuleDict", self, key, 2) end
  Module.__newindex(self, key, value)
end

function ModuleDict:add_module(name, m)
  check_key("nn.ModuleDict", self, name, 2)
  return Module.add_module(self, name, m)
end

--- update(modules) -> self: adds the entries (a name already there keeps its place and takes the
-- new module); modules as for the constructor
function ModuleDict:update(modules)
  local list = entries("nn.ModuleDict:update", modules, 2)
  for _, e in ipairs(list) do check_key("nn.ModuleDict:update", self, e[1], 2) end
  for _, e in ipairs(list) do Module.add_module(self, e[1], e[2]) end
  return self
end

--- keys() -> the names, in order
function ModuleDict:keys()
  return { table.unpack(self._module_keys) }
end

--- values() -> the modules, in order
function ModuleDict:values()
  local out = {}
  for i, key in ipairs(self._module_keys) do out[i] = rawget(self, key) end
  return out
end

--- items() -> an iterator over name, module in order: `for name, m in dict:items() do`
function ModuleDict:items()
  local keys, i = self:keys(), 0
  return function()
    i = i + 1
    local key = keys[i]
    if key ~= nil then return key, rawget(self, key) end
  end
end
ModuleDict.__pairs = function(self) return self:items(), self, nil end

--- contains(name) -> whether name is an entry
function ModuleDict:contains(name)
  return type(name) == "string" and base.contains(self._module_keys, name)
end

--- pop(name) -> the module removed from the dict
function ModuleDict:pop(name)
  if not self:contains(name) then
    options.error(string.format("nn.ModuleDict:pop: no entry '%s' (entries: %s)", tostring(name),
      table.concat(self._module_keys, ", ")), 2)
  end
  local m = rawget(self, name)
  for i, key in ipairs(self._module_keys) do
    if key == name then
      table.remove(self._module_keys, i)
      break
    end
  end
  rawset(self, name, nil)
  return m
end

--- clear() -> self, with no entries
function ModuleDict:clear()
  for _, key in ipairs(self._module_keys) do rawset(self, key, nil) end
  rawset(self, "_module_keys", {})
  return self
end

ModuleDict.__len = len

function ModuleDict:forward()
  options.error("nn.ModuleDict: a dict of modules has no forward; call its modules", 2)
end

return containers
