-- tlua.repl: how the REPL shows what an expression returned (tlua's executable calls repl.print).
local tl = require("tlua")

local repl = {}

local MAX_ITEMS = 30 -- entries of a table shown before "..."
local MAX_DEPTH = 2 -- nested tables shown this deep, then {...}

local function short_tensor(t)
  return string.format("tensor [%s] %s %s", table.concat(t.shape, ", "), t.dtype, t.device)
end

local function scalar(v)
  local kind = type(v)
  return kind == "number" or kind == "boolean" or kind == "string" or kind == "nil"
end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  return "[" .. (type(k) == "string" and string.format("%q", k) or tostring(k)) .. "]"
end

-- the keys of t in a stable order: the sequence first, then the others sorted by their text
local function ordered_keys(t)
  local keys, n = {}, #t
  for i = 1, n do keys[#keys + 1] = i end
  local rest = {}
  for k in pairs(t) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then rest[#rest + 1] = k end
  end
  table.sort(rest, function(a, b)
    if type(a) ~= type(b) then return type(a) < type(b) end
    if type(a) == "number" or type(a) == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys
end

local show

-- a state dict (nn.StateDict, or any table whose values are all tensors): its keys and shapes
local function show_state(t, name, indent)
  local keys = tl.nn.keys(t)
  local lines = { string.format("%s (%d entries)", name, #keys) }
  for i, k in ipairs(keys) do
    if i > MAX_ITEMS then
      lines[#lines + 1] = string.format("%s  ... (%d in all)", indent, #keys)
      break
    end
    local v = t[k]
    lines[#lines + 1] = string.format("%s  %s  %s", indent, k,
      tl.is_tensor(v) and string.format("[%s] %s", table.concat(v.shape, ", "), v.dtype) or show(v, 1, indent .. "  "))
  end
  return table.concat(lines, "\n")
end

local function show_table(t, depth, indent)
  local mt = getmetatable(t)
  if mt and mt.__tostring then return tostring(t) end
  if mt and mt.__name == "nn.StateDict" then return show_state(t, "nn.StateDict", indent) end
  local keys = ordered_keys(t)
  if #keys == 0 then return "{}" end
  if depth > MAX_DEPTH then return "{...}" end
  -- the entries: the sequence's values alone, the other keys as key = value
  local items, one_line, width = {}, true, 0
  for i, k in ipairs(keys) do
    if i > MAX_ITEMS then
      items[#items + 1] = string.format("... (%d entries in all)", #keys)
      break
    end
    local text = show(t[k], depth + 1, indent .. "  ")
    if not (math.type(k) == "integer" and k >= 1 and k <= #t) then text = key_text(k) .. " = " .. text end
    items[#items + 1] = text
    one_line = one_line and not text:find("\n")
    width = width + #text + 2
  end
  -- short lists (a shape, a few tensors) on one line
  if one_line and width + #indent <= 78 then return "{ " .. table.concat(items, ", ") .. " }" end
  local lines = { "{" }
  for _, text in ipairs(items) do lines[#lines + 1] = indent .. "  " .. text .. "," end
  lines[#lines + 1] = indent .. "}"
  return table.concat(lines, "\n")
end

--- repl.show(value) -> string: a value as the REPL shows it. Tensors print whole at the top and as
-- `tensor [shape] dtype device` inside tables; tables print their entries (a list of scalars on one
-- line, nested tables 2 deep, 30 entries at most); a state dict prints its keys with shapes and
-- dtypes; strings inside tables are quoted.
function show(v, depth, indent)
  depth, indent = depth or 0, indent or ""
  if tl.is_tensor(v) then return depth == 0 and tostring(v) or short_tensor(v) end
  if type(v) == "string" then return depth == 0 and v or string.format("%q", v) end
  if type(v) == "table" then return show_table(v, depth == 0 and 1 or depth, indent) end
  return tostring(v)
end
repl.show = show

--- repl.print(...): the REPL's results: scalars side by side as Lua's print puts them, else each
-- value on a line of its own
function repl.print(...)
  local n = select("#", ...)
  local values, all_scalar = { ... }, true
  for i = 1, n do all_scalar = all_scalar and scalar(values[i]) end
  local texts = {}
  for i = 1, n do texts[i] = show(values[i]) end
  io.write(table.concat(texts, all_scalar and "\t" or "\n"), "\n")
  io.flush()
end

return repl
