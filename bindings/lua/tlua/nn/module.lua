-- tl.nn.Module: the base class of layers: registration of parameters, buffers and submodules, walking the tree, train/eval, to(), printing.
--
-- A module is a Lua table whose class derives from nn.Module. Parameters,
-- buffers and submodules are plain fields (self.weight, self.fc1, seq[1]);
-- the module also remembers their keys, in registration order, so that
-- parameters(), state_dict() and friends walk them in a stable order:
--   * assigning a Module to a new field registers it as a submodule;
--   * assigning a leaf tensor that requires grad to a new field registers it
--     as a parameter (or call self:register_parameter(name, t));
--   * self:register_buffer(name, t) registers state that is saved but not
--     trained.
-- Names are dotted paths ("features.1.weight"); Sequential and ModuleList
-- number their children from 1, as Lua does; ModuleDict names them.
--
-- The walks (parameters, named_parameters, buffers, named_buffers, modules,
-- named_modules, children, named_children) share one order: depth first,
-- self before its children, a module's own tensors in registration order
-- before its children's, the children in registration order. As in PyTorch,
-- a module reachable by two paths (self.b = self.a) is walked once, under its
-- first path, and a tensor held by two modules (tied weights) is listed once,
-- under its first name; the named_ forms give the same entries as the plain
-- ones, in the same order.
local options = require("tlua.options")
local tl = require("tlua")
local class = require("tlua.class")

local is_tensor = tl.is_tensor

--- Module(): the base class of every layer (Module:extend(name) makes one): parameters and buffers
--- registered by assignment, forward(...) called by module(...), train()/eval(), to(), state_dict(),
--- parameters(), named_parameters(), modules(), children(), zero_grad(), apply(fn).
local Module = class("nn.Module")
Module._class_name = "Module"

local function is_module(v)
  return type(v) == "table" and rawget(v, "_module_keys") ~= nil
end

local function contains(list, key)
  for _, k in ipairs(list) do if k == key then return true end end
  return false
end

-- cls(...): the registries first, then the class's init (fields are registered as it sets them)
function Module.new(cls, ...)
  local self = setmetatable({}, cls)
  rawset(self, "training", true)
  rawset(self, "_param_keys", {})
  rawset(self, "_buffer_keys", {})
  rawset(self, "_module_keys", {})
  self:init(...)
  return self
end

function Module:init() end

function Module:forward()
  options.error(self._class_name .. ": forward is not implemented", 2)
end

-- calling a module runs forward
function Module:__call(...)
  return self:forward(...)
end

-- a new field: registers modules, and leaf tensors that require grad (not results of ops
-- kept by forward)
function Module:__newindex(key, value)
  if is_module(value) then
    local keys = rawget(self, "_module_keys")
    if not contains(keys, key) then keys[#keys + 1] = key end
  elseif is_tensor(value) and value.requires_grad and value.is_leaf then
    local keys = rawget(self, "_param_keys")
    if not contains(keys, key) then keys[#keys + 1] = key end
  end
  rawset(self, key, value)
end

-- adds key to self[list] (once) and sets the field
local function register(self, list, key, value)
  local keys = self[list]
  if value ~= nil and not contains(keys, key) then keys[#keys + 1] = key end
  rawset(self, key, value)
  return value
end

local function check_tensor(fn, name, t)
  if t ~= nil and not is_tensor(t) then
    options.error(string.format("%s: '%s' expected a tensor or nil, got %s", fn, tostring(name), type(t)), 3)
  end
end

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local dtype_aliases = { float = "float32", double = "float64", half = "float16", int = "int32", long = "int64" }

--- Module:_check_parameter_dtype(dtype, level): raises "nn.<Class>: dtype int64 cannot hold trainable
-- parameters (expected a floating dtype ...)" unless dtype (a name or an alias) is floating; a
-- module's constructor calls it (through register_parameter) for its dtype option. level: the
-- fallback, counted as options.error counts it from the caller of this method.
function Module:_check_parameter_dtype(dtype, level)
  dtype = dtype_aliases[dtype] or dtype
  if not floating[dtype] then
    local mt = getmetatable(self)
    options.error(string.format("%s: dtype %s cannot hold trainable parameters (expected a floating dtype: " ..
      "float32, float64, bfloat16 or float16)", tostring(mt and mt.__name or "nn.Module"), tostring(dtype)),
      (level or 2) + 1)
  end
end

function Module:register_parameter(name, t)
  check_tensor("register_parameter", name, t)
  if t ~= nil and not t.requires_grad then
    -- (from a module's init: register_parameter 1, init 2, Module.new 3, the user 4)
    self:_check_parameter_dtype(t.dtype, 4)
    t:requires_grad_(true)
  end
  return register(self, "_param_keys", name, t)
end

function Module:register_buffer(name, t)
  check_tensor("register_buffer", name, t)
  if not contains(self._buffer_keys, name) then self._buffer_keys[#self._buffer_keys + 1] = name end
  rawset(self, name, t)
  return t
end

function Module:add_module(name, m)
  if not is_module(m) then
    options.error(string.format("add_module: '%s' expected a module, got %s", tostring(name), type(m)), 2)
  end
  return register(self, "_module_keys", name, m)
end

--- Module:extend(name) -> a new class deriving from this one. Define
-- cls:init(...) (the constructor; fields are registered as they are set) and
-- cls:forward(...); cls(...) makes an instance.
function Module:extend(name)
  if type(name) ~= "string" then options.error("nn.Module:extend: expected a class name (a string), got " .. type(name), 2) end
  local cls = class("nn." .. name, self)
  cls._class_name = name
  return cls
end

-- ---- walking the tree -------------------------------------------------------------
-- calls fn(module, prefix) for self and every submodule, depth first, in order
local function walk(m, prefix, fn, seen)
  seen = seen or {}
  if seen[m] then return end
  seen[m] = true
  fn(m, prefix)
  for _, key in ipairs(m._module_keys) do
    local child = rawget(m, key)
    if child ~= nil then walk(child, prefix .. tostring(key) .. ".", fn, seen) end
  end
end

local STATE = { "_param_keys", "_buffer_keys" }

-- calls fn(name, tensor, module, key, kind) for every parameter and buffer (kinds: the key lists
-- to walk, default both), in order; a tensor shared by two modules comes once per name
local function each_tensor(self, fn, kinds)
  walk(self, "", function(m, prefix)
    for _, kind in ipairs(kinds or STATE) do
      for _, key in ipairs(m[kind]) do
        local t = rawget(m, key)
        if t ~= nil then fn(prefix .. tostring(key), t, m, key, kind) end
      end
    end
  end)
end

-- ordered list of {name, tensor} over kinds, without duplicates (a tensor shared by two modules
-- is listed once, as PyTorch does)
local function named(self, kinds)
  local out, seen = {}, {}
  each_tensor(self, function(name, t)
    if not seen[t] then
      seen[t] = true
      out[#out + 1] = { name, t }
    end
  end, kinds)
  return out
end

local function iterate(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

-- the second entries of a list of pairs
local function values(list)
  for i, e in ipairs(list) do list[i] = e[2] end
  return list
end

--- parameters() -> array of the parameters of self and every submodule (own ones first, then each
-- child's; each tensor once)
function Module:parameters() return values(named(self, { "_param_keys" })) end

--- named_parameters() -> iterator over name, tensor in the order of parameters()
-- (`for name, p in m:named_parameters() do`; names as in state_dict: "encoder.weight")
function Module:named_parameters() return iterate(named(self, { "_param_keys" })) end

--- buffers() -> array of the buffers (register_buffer) of self and every submodule, each once
function Module:buffers() return values(named(self, { "_buffer_keys" })) end
--- named_buffers() -> iterator over name, tensor in the order of buffers()
function Module:named_buffers() return iterate(named(self, { "_buffer_keys" })) end

-- {name, module} of the direct submodules, each module once
local function named_children(self)
  local list, seen = {}, {}
  for _, key in ipairs(self._module_keys) do
    local m = rawget(self, key)
    if m ~= nil and not seen[m] then
      seen[m] = true
      list[#list + 1] = { tostring(key), m }
    end
  end
  return list
end

--- children() -> array of the direct submodules, in registration order, each once
function Module:children() return values(named_children(self)) end
--- named_children() -> iterator over name, module in the order of children() (names as strings:
-- "1", "encoder")
function Module:named_children() return iterate(named_children(self)) end

--- modules() -> array of self and every submodule (depth first, self first), each once
function Module:modules()
  local out = {}
  walk(self, "", function(m) out[#out + 1] = m end)
  return out
end

--- named_modules() -> iterator over name, module in the order of modules(); self is named ""
-- and the others by their dotted path ("features.1")
function Module:named_modules()
  local list = {}
  walk(self, "", function(m, prefix) list[#list + 1] = { prefix:sub(1, -2), m } end)
  return iterate(list)
end

--- apply(fn): fn(m) for every submodule, then self (as PyTorch); returns self
function Module:apply(fn)
  for _, child in ipairs(self:children()) do child:apply(fn) end
  fn(self)
  return self
end

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawset(m, "training", mode and true or false) end
  return self
end

function Module:eval()
  return self:train(false)
end

--- zero_grad(): every parameter's grad becomes nil
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
  return self
end

--- num_parameters() -> the number of trainable elements
function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- ---- to(): devices and dtypes ------------------------------------------------------------
local replaced = require("tlua.nn.replaced")

local function is_dtype(name)
  if type(name) ~= "string" then return false end
  for _, d in ipairs(tl.dtypes) do if d == name then return true end end
  return name == "float" or name == "double" or name == "half" or name == "int" or name == "long"
end

-- t converted by each of args (a device, or a dtype that applies to floating tensors only)
local function converted(t, args)
  for i = 1, args.n do
    local a = args[i]
    if not is_dtype(a) or floating[t.dtype] then t = t:to(a) end
  end
  return t
end

--- to(device_or_dtype, ...): moves every parameter and buffer to a device and/or casts the
-- floating ones to a dtype, replacing the tensors (parameters keep requires_grad; their grads
-- move with them). Returns self. Build optimizers after moving the model (an optimizer holding a
-- replaced parameter refuses to step: tlua.nn.replaced).
function Module:to(...)
  local args = table.pack(...)
  if args.n == 0 then options.error("Module:to: expected a device or a dtype", 2) end
  local done = {} -- a tensor shared by two modules stays shared
  local function convert(t, is_param)
    if done[t] then return done[t] end
    local new = converted(t, args)
    if new == t then return t end
    new = new:detach()
    if not new:is_contiguous() then new = new:contiguous() end
    if is_param then
      new:requires_grad_(t.requires_grad)
      local g = t.grad
      if g ~= nil then new.grad = converted(g, args):detach() end
    end
    done[t] = new
    return new
  end
  -- convert everything first, then assign: a conversion that fails (a bad device, a released
  -- tensor) leaves the whole model as it was
  local assignments = {}
  tl.no_grad(function()
    each_tensor(self, function(_, t, m, key, kind)
      assignments[#assignments + 1] = { m, key, convert(t, kind == "_param_keys") }
    end)
  end)
  for _, a in ipairs(assignments) do rawset(a[1], a[2], a[3]) end
  -- an optimizer built before this holds the old parameters: step() refuses them (tlua.nn.replaced)
  local moved = {}
  for i = 1, args.n do moved[i] = tostring(args[i]) end
  moved = table.concat(moved, ", ")
  for t, new in pairs(done) do
    if new ~= t and t.requires_grad then replaced[t] = moved end
  end
  return self
end

--- _replace_parameters(map, why): every place that holds a parameter of map (old -> new) holds
-- the new tensor instead; optimizers built before refuse the old ones (tlua.nn.replaced: "moved
-- to <why>"). For wrappers that move parameters into buffers of their own (nn.DataParallel's
-- shard_optimizer).
function Module:_replace_parameters(map, why)
  local assignments = {}
  each_tensor(self, function(_, t, m, key)
    if map[t] then assignments[#assignments + 1] = { m, key, map[t] } end
  end, { "_param_keys" })
  for _, a in ipairs(assignments) do rawset(a[1], a[2], a[3]) end
  for old, new in pairs(map) do
    if new ~= old then replaced[old] = why end
  end
end

function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end

-- ---- printing ----------------------------------------------------------------------------
local function with_commas(n)
  local s = tostring(n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  if out:sub(1, 1) == "," then out = out:sub(2) end
  return out
end

function Module:extra_repr() return "" end

local function describe(m, indent)
  local n = m:num_parameters()
  local head = m._class_name .. "(" .. m:extra_repr() .. ")" .. (n > 0 and ("  -- " .. with_commas(n) .. " parameters") or "")
  local children = m._module_keys
  if #children == 0 then return head end
  local lines = { head .. " {" }
  for _, key in ipairs(children) do
    local child = rawget(m, key)
    if child ~= nil then
      lines[#lines + 1] = indent .. "  (" .. tostring(key) .. "): " .. describe(child, indent .. "  ")
    end
  end
  lines[#lines + 1] = indent .. "}"
  return table.concat(lines, "\n")
end

function Module:__tostring()
  return describe(self, "")
end

-- the helpers the other files of tl.nn share
return {
  Module = Module,
  is_module = is_module,
  contains = contains,
  each_tensor = each_tensor,
  floating = floating,
}
