-- tlua.options: the one checker of the options tables tlua's Lua modules take: an unknown key or a value of another kind raises an error naming the function, the key and the accepted keys, at the user's line.
--
--   local options = require("tlua.options")
--   local CONV2D = { stride = "integer|table", padding = "integer|table", bias = "boolean",
--     dtype = "string", device = "string" }
--   opts = options.check(opts, "nn.Conv2d", CONV2D, 3)
--   --> nn.Conv2d: unknown option 'strides' (accepted: bias, device, dtype, padding, stride)
--
-- Kinds: "any", "boolean", "number", "integer", "string", "table", "function", "callable" (a
-- function or a value with __call), "tensor", or alternatives joined by "|" ("string|callable").
-- Integer keys name positional entries (DataLoader{dataset, batch_size = 8}: [1] = "table").
--
-- Errors point at the user's line: the first function up the stack that is not one of tlua's
-- Lua modules (C functions skipped). Without the debug library (an embedded sandbox) the level
-- the caller gives is used instead, counted as error() counts it from the function that calls
-- options.check or options.error (3 for a class's init: init, Module.new or Class.new, the user).
local core = require("tlua.core")

local options = {}

local getinfo = debug and debug.getinfo
-- the folder of tlua's Lua modules, as chunk sources name it ("@/.../tlua/")
local tlua_folder = getinfo and getinfo(1, "S").source:match("^(@.*[/\\])options%.lua$")

-- whether levels come from the stack (false: the callers' levels, as in a sandbox; for specs)
options._walk_stack = true

-- Whether a chunk source is one of tlua's Lua modules: under tlua_folder, or a relative path to
-- that same folder (a host may load this module by an absolute path and the others through a
-- relative package.path, as busted run by the tlua executable does): "@bindings/lua/tlua/nn/x.lua"
-- when tlua_folder ends in "/bindings/lua/tlua/".
local function is_tlua_source(source)
  if source:sub(1, #tlua_folder) == tlua_folder then return true end
  local path = source:match("^@(.*)$")
  if not path or path:find("^[/\\]") then return false end
  path = path:gsub("^%./", "")
  for finish in path:gmatch("tlua[/\\]()") do
    local folder = path:sub(1, finish - 1)
    local start = finish - 5 -- where "tlua/" begins
    -- a whole component, with a folder above it ("tlua/x.lua" alone could be the user's)
    if start > 1 and path:sub(start - 1, start - 1):find("[/\\]") then
      if tlua_folder:sub(-(#folder + 1)):find("^[@/\\]") and tlua_folder:sub(-#folder) == folder then
        return true
      end
    end
  end
  return false
end

-- for the binding's errors (args.c): the same test, so that an op failing inside a module is
-- reported at the user's line too
options._is_tlua_source = function(source) return tlua_folder ~= nil and is_tlua_source(source) end

-- The level, as error() counts it from the function `base` levels up from find_level (2: its
-- caller), of the first function up the stack outside tlua's Lua modules; fallback when the
-- stack cannot be read.
local function find_level(base, fallback)
  if options._walk_stack and getinfo and tlua_folder then
    local k = base + 1
    while true do
      local info = getinfo(k, "S")
      if not info then break end
      if info.what ~= "C" and not is_tlua_source(info.source) then return k - base + 1 end
      k = k + 1
    end
  end
  return fallback
end

--- options.error(message, level = 2): raises message at the user's line (level: the fallback,
-- counted as error() counts it from the caller of options.error)
function options.error(message, level)
  error(message, find_level(2, (level or 2) + 1))
end

local descriptions = {
  any = "a value", boolean = "a boolean", number = "a number", integer = "an integer", string = "a string",
  table = "a table", ["function"] = "a function", callable = "a function (or a value with __call)",
  tensor = "a tensor",
}

local function is_callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

local tests = {
  any = function() return true end,
  boolean = function(v) return type(v) == "boolean" end,
  number = function(v) return type(v) == "number" end,
  integer = function(v) return math.type(v) == "integer" end,
  string = function(v) return type(v) == "string" end,
  table = function(v) return type(v) == "table" end,
  ["function"] = function(v) return type(v) == "function" end,
  callable = is_callable,
  tensor = function(v) return core.is_tensor(v) end,
}

-- a kind string as {test, ...} with its description and whether it wants an integer (cached)
local parsed_kinds = {}
local function parse_kind(kind)
  local parsed = parsed_kinds[kind]
  if parsed then return parsed end
  parsed = { descriptions = {} }
  for name in kind:gmatch("[^|]+") do
    if not tests[name] then error("options: unknown kind '" .. name .. "' in '" .. kind .. "'", 3) end
    parsed[#parsed + 1] = tests[name]
    parsed.descriptions[#parsed.descriptions + 1] = descriptions[name]
    if name == "integer" then parsed.integer = true end
  end
  parsed.description = table.concat(parsed.descriptions, " or ")
  parsed_kinds[kind] = parsed
  return parsed
end

local function fits(parsed, v)
  for _, test in ipairs(parsed) do
    if test(v) then return true end
  end
  return false
end

-- "[1], batch_size, dataset, ..." (positions first, then names in order), cached per table
local accepted_lists = setmetatable({}, { __mode = "k" })
local function accepted_list(accepted)
  local list = accepted_lists[accepted]
  if list then return list end
  local positions, names = {}, {}
  for key in pairs(accepted) do
    if math.type(key) == "integer" then positions[#positions + 1] = key else names[#names + 1] = key end
  end
  table.sort(positions)
  table.sort(names)
  local parts = {}
  for _, p in ipairs(positions) do parts[#parts + 1] = "[" .. p .. "]" end
  for _, n in ipairs(names) do parts[#parts + 1] = n end
  list = #parts > 0 and table.concat(parts, ", ") or "none"
  accepted_lists[accepted] = list
  return list
end

local function key_text(key)
  if type(key) == "string" then return "'" .. key .. "'" end
  if type(key) == "number" then return "[" .. tostring(key) .. "]" end
  return "(a " .. type(key) .. " key)"
end

local function value_text(v, parsed)
  if type(v) == "number" and parsed.integer then return tostring(v) end
  if core.is_tensor(v) then return "a tensor" end
  return type(v)
end

--- options.check(opts, who, accepted, level = 2) -> opts, or {} when opts is nil. accepted maps
-- each key to its kind; any other key, a value of another kind or opts that is not a table
-- raises "who: unknown option 'key' (accepted: a, b, c)", "who: option key expected a boolean,
-- got number", "who: expected an options table {a, b, c}, got string", at the user's line
-- (level: the fallback, counted as error() counts it from the caller of options.check).
function options.check(opts, who, accepted, level)
  if opts == nil then return {} end
  level = level or 2
  if type(opts) ~= "table" then
    error(string.format("%s: expected an options table {%s}, got %s", who, accepted_list(accepted),
      core.is_tensor(opts) and "a tensor" or type(opts)), find_level(2, level + 1))
  end
  for key, value in pairs(opts) do
    local kind = accepted[key]
    if kind == nil then
      error(string.format("%s: unknown option %s (accepted: %s)", who, key_text(key), accepted_list(accepted)),
        find_level(2, level + 1))
    end
    local parsed = parse_kind(kind)
    if not fits(parsed, value) then
      local name = type(key) == "string" and key or "[" .. tostring(key) .. "]"
      error(string.format("%s: option %s expected %s, got %s", who, name, parsed.description,
        value_text(value, parsed)), find_level(2, level + 1))
    end
  end
  return opts
end

return options
