-- tl.data collation: default_collate turns a list of samples into one batch (tensors stacked, numbers into tensors, tables field by field).
local tl = require("tlua")
local options = require("tlua.options")

local collate = {}

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end

-- "sample 3" or "field image of sample 3" (path: the keys from the sample down)
local function where(path, k)
  if #path == 0 then return "sample " .. k end
  local parts = {}
  for i, key in ipairs(path) do parts[i] = type(key) == "string" and key or "[" .. tostring(key) .. "]" end
  return string.format("field %s of sample %d", table.concat(parts, "."), k)
end

-- the keys of a table: array part 1..n first, then the others sorted (strings before numbers)
local function keys_of(t)
  local keys, n = {}, #t
  for i = 1, n do keys[i] = i end
  local others = {}
  for key in pairs(t) do
    if not (math.type(key) == "integer" and key >= 1 and key <= n) then others[#others + 1] = key end
  end
  table.sort(others, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) == "string"
  end)
  for _, key in ipairs(others) do keys[#keys + 1] = key end
  return keys
end

-- "a,b,1" of a list of keys
local function key_names(keys)
  local names = {}
  for i, key in ipairs(keys) do names[i] = tostring(key) end
  return table.concat(names, ",")
end

local function collate_values(list, path)
  local first = list[1]
  local kind = tl.is_tensor(first) and "tensor" or type(first)
  for k, v in ipairs(list) do
    local this = tl.is_tensor(v) and "tensor" or type(v)
    if this ~= kind then
      options.error(string.format("data.default_collate: %s is a %s, %s a %s", where(path, k), this, where(path, 1),
        kind), 4)
    end
  end
  if kind == "tensor" then
    local shape, dtype, device = first.shape, first.dtype, first.device
    for k, t in ipairs(list) do
      if t.dtype ~= dtype or t.device ~= device or shape_str(t.shape) ~= shape_str(shape) then
        local function a(d) return (d:match("^[aeiou]") and "an " or "a ") .. d end
        options.error(string.format("data.default_collate: %s is %s tensor of shape %s on %s, %s %s tensor of " ..
          "shape %s on %s (a batch stacks equal shapes)", where(path, k), a(t.dtype), shape_str(t.shape), t.device,
          where(path, 1), a(dtype), shape_str(shape), device), 4)
      end
    end
    return tl.stack(list, 1)
  elseif kind == "number" then
    local integers = true
    for _, v in ipairs(list) do if math.type(v) ~= "integer" then integers = false end end
    return tl.tensor(list, { dtype = integers and "int64" or "float64" })
  elseif kind == "boolean" then
    return tl.tensor(list, { dtype = "bool" })
  elseif kind == "string" then
    return { table.unpack(list) }
  elseif kind == "table" then
    local keys = keys_of(first)
    for k, v in ipairs(list) do
      local these = keys_of(v)
      local same = #these == #keys
      for i = 1, #keys do if these[i] ~= keys[i] then same = false end end
      if not same then
        options.error(string.format("data.default_collate: %s has the keys {%s}, %s {%s}", where(path, k),
          key_names(these), where(path, 1), key_names(keys)), 4)
      end
    end
    local out = {}
    for _, key in ipairs(keys) do
      local column = {}
      for k, v in ipairs(list) do column[k] = v[key] end
      path[#path + 1] = key
      out[key] = collate_values(column, path)
      path[#path] = nil
    end
    return out
  end
  options.error(string.format("data.default_collate: %s is a %s, which cannot be batched (pass collate_fn)",
    where(path, 1), kind), 4)
end

--- default_collate(samples) -> batch: samples is a list of samples of one form, each a tensor, a
-- number, a boolean, a string or a table of these (named fields or a list, nested). Tensors
-- stack along a new dim 1 (equal shapes, dtypes and devices), integers give an int64 tensor,
-- other numbers float64 (as torch), booleans a bool tensor, strings a list of them, and tables a
-- table of the same keys, each field collated.
function collate.default_collate(samples)
  if type(samples) ~= "table" or #samples == 0 then
    options.error("data.default_collate: expected a non-empty list of samples, got " ..
      (type(samples) == "table" and "an empty table" or type(samples)), 2)
  end
  for k = 1, #samples do
    if samples[k] == nil then options.error("data.default_collate: sample " .. k .. " is nil", 2) end
  end
  return collate_values(samples, {})
end

-- moves the tensors of a batch (a tensor or nested tables of them) to device; other values stay
-- value (a tensor, or a plain table of them, nested) with every CPU tensor copied into pinned host
-- memory (pin) and then moved to device (when given): from pinned memory the copy to a GPU runs
-- while the host goes on
local function to_device(value, device, pin)
  if tl.is_tensor(value) then
    if pin and value.device == "cpu" then value = value:pin_memory() end
    return device and value:to(device) or value
  end
  if type(value) == "table" and getmetatable(value) == nil then
    local out = {}
    for k, v in pairs(value) do out[k] = to_device(v, device, pin) end
    return out
  end
  return value
end
collate._to_device = to_device

return collate
