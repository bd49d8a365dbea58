-- tl.nn state dicts: Module:state_dict() (an ordered table name -> tensor), Module:load_state_dict(), nn.keys().
local options = require("tlua.options")
local tl = require("tlua")
local base = require("tlua.nn.module")

local Module, contains, each_tensor = base.Module, base.contains, base.each_tensor
local is_tensor = tl.is_tensor

local state = {}

-- An ordered table: pairs() walks it in insertion order; keys(sd) gives the order.
local function ordered_pairs(t)
  local order = getmetatable(t).__keys
  local i = 0
  return function()
    i = i + 1
    local k = order[i]
    while k ~= nil and rawget(t, k) == nil do
      i = i + 1
      k = order[i]
    end
    if k ~= nil then return k, rawget(t, k) end
  end, t, nil
end

-- a key added later goes to the end of the order
local function ordered_newindex(t, k, v)
  local order = getmetatable(t).__keys
  if not contains(order, k) then order[#order + 1] = k end
  rawset(t, k, v)
end

local function ordered(keys, values)
  local t = setmetatable({}, { __pairs = ordered_pairs, __newindex = ordered_newindex, __keys = keys,
    __name = "nn.StateDict" })
  for i, k in ipairs(keys) do rawset(t, k, values[i]) end
  return t
end

--- nn.keys(sd): the keys of a state dict in order (sorted for a plain table, e.g. from tl.load)
function state.keys(sd)
  local out = {}
  local mt = getmetatable(sd)
  if mt and mt.__keys then
    for _, k in ipairs(mt.__keys) do if rawget(sd, k) ~= nil then out[#out + 1] = k end end
    return out
  end
  for k in next, sd do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- the module's parameters and buffers by name: names in order, name -> tensor
local function named_state(self)
  local order, tensors = {}, {}
  each_tensor(self, function(name, t)
    order[#order + 1] = name
    tensors[name] = t
  end)
  return order, tensors
end

--- state_dict() -> ordered table name -> tensor (parameters and buffers, detached, sharing
-- storage with the module's tensors)
function Module:state_dict()
  local order, tensors = named_state(self)
  local values = {}
  for i, name in ipairs(order) do values[i] = tensors[name]:detach() end
  return ordered(order, values)
end

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end
state.shape_str = shape_str

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- "missing key: a" / "missing keys: a, b"
local function key_list(what, list)
  return string.format("%s key%s: %s", what, #list > 1 and "s" or "", table.concat(list, ", "))
end

--- load_state_dict(sd, strict = true): copies the values of sd into the module's parameters and
-- buffers (casting dtype, moving device). strict: every key must match both ways. A shape
-- mismatch is always an error. On error nothing is copied. Returns {missing = {...},
-- unexpected = {...}}.
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then options.error("load_state_dict: expected a table of tensors, got " .. type(sd), 2) end
  if strict == nil then strict = true end
  local order, targets = named_state(self)
  local missing, unexpected, mismatched, not_tensors = {}, {}, {}, {}
  for _, name in ipairs(order) do
    local v = rawget(sd, name)
    if v == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(v) then
      not_tensors[#not_tensors + 1] = string.format("%s: expected a tensor, got %s", name, type(v))
    elseif not same_shape(v.shape, targets[name].shape) then
      mismatched[#mismatched + 1] = string.format("%s: the module has shape %s, the state dict %s",
        name, shape_str(targets[name].shape), shape_str(v.shape))
    end
  end
  for _, name in ipairs(state.keys(sd)) do
    if targets[name] == nil then unexpected[#unexpected + 1] = name end
  end
  table.sort(unexpected)
  local problems = {}
  if strict and #missing > 0 then problems[#problems + 1] = key_list("missing", missing) end
  if strict and #unexpected > 0 then problems[#problems + 1] = key_list("unexpected", unexpected) end
  if #not_tensors > 0 then problems[#problems + 1] = table.concat(not_tensors, "; ") end
  if #mismatched > 0 then
    problems[#problems + 1] = "size mismatch for " .. table.concat(mismatched, "; ")
  end
  if #problems > 0 then
    options.error(string.format("load_state_dict: error(s) loading the state dict into %s: %s",
      self._class_name, table.concat(problems, "; ")), 2)
  end
  tl.no_grad(function()
    -- tensors of another device (a CPU checkpoint into a GPU model) move first, all of them,
    -- so that a failed move changes nothing
    local sources = {}
    for _, name in ipairs(order) do
      local v = rawget(sd, name)
      if v ~= nil and v.device ~= targets[name].device then v = v:to(targets[name].device) end
      sources[name] = v
    end
    for _, name in ipairs(order) do
      if sources[name] ~= nil then targets[name]:copy_(sources[name]) end
    end
  end)
  return { missing = missing, unexpected = unexpected }
end

return state
