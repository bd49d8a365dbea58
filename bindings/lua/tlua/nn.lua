-- tl.nn: the Module base class, layers, losses, init helpers and nn.functional.
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
-- number their children from 1, as Lua does.
local tl = require("tlua")

local nn = {}

local is_tensor = tl.is_tensor

-- ---- classes ------------------------------------------------------------------
local Module = {}
Module.__index = Module
Module.__name = "nn.Module"
Module._class_name = "Module"

local metamethods = { "__call", "__tostring", "__newindex", "__len" }

local function is_module(v)
  return type(v) == "table" and rawget(v, "_module_keys") ~= nil
end
nn.is_module = is_module

local function construct(cls, ...)
  local self = setmetatable({}, cls)
  rawset(self, "training", true)
  rawset(self, "_param_keys", {})
  rawset(self, "_buffer_keys", {})
  rawset(self, "_module_keys", {})
  self:init(...)
  return self
end

--- Module:extend(name) -> a new class deriving from this one. Define
-- cls:init(...) (the constructor; fields are registered as they are set) and
-- cls:forward(...); cls(...) makes an instance.
function Module:extend(name)
  if type(name) ~= "string" then error("nn.Module:extend: expected a class name (a string), got " .. type(name), 2) end
  local cls = {}
  for _, m in ipairs(metamethods) do cls[m] = rawget(self, m) end
  cls.__index = cls
  cls.__name = "nn." .. name
  cls._class_name = name
  return setmetatable(cls, { __index = self, __call = construct, __tostring = function() return "nn." .. name end })
end

setmetatable(Module, { __call = construct, __tostring = function() return "nn.Module" end })
nn.Module = Module

function Module:init() end

function Module:forward()
  error(self._class_name .. ": forward is not implemented", 2)
end

-- calling a module runs forward
function Module:__call(...)
  return self:forward(...)
end

local function contains(list, key)
  for _, k in ipairs(list) do if k == key then return true end end
  return false
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

function Module:register_parameter(name, t)
  if t ~= nil and not is_tensor(t) then
    error(string.format("register_parameter: '%s' expected a tensor or nil, got %s", tostring(name), type(t)), 2)
  end
  if t ~= nil and not t.requires_grad then t:requires_grad_(true) end
  if not contains(self._param_keys, name) and t ~= nil then
    self._param_keys[#self._param_keys + 1] = name
  end
  rawset(self, name, t)
  return t
end

function Module:register_buffer(name, t)
  if t ~= nil and not is_tensor(t) then
    error(string.format("register_buffer: '%s' expected a tensor or nil, got %s", tostring(name), type(t)), 2)
  end
  if not contains(self._buffer_keys, name) then self._buffer_keys[#self._buffer_keys + 1] = name end
  rawset(self, name, t)
  return t
end

function Module:add_module(name, m)
  if not is_module(m) then
    error(string.format("add_module: '%s' expected a module, got %s", tostring(name), type(m)), 2)
  end
  if not contains(self._module_keys, name) then self._module_keys[#self._module_keys + 1] = name end
  rawset(self, name, m)
  return m
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

-- ordered list of {name, tensor} over kinds ("_param_keys" and/or "_buffer_keys"), without
-- duplicates (a tensor shared by two modules is listed once, as PyTorch does)
local function named(self, kinds)
  local out, seen = {}, {}
  walk(self, "", function(m, prefix)
    for _, kind in ipairs(kinds) do
      for _, key in ipairs(m[kind]) do
        local t = rawget(m, key)
        if t ~= nil and not seen[t] then
          seen[t] = true
          out[#out + 1] = { prefix .. tostring(key), t }
        end
      end
    end
  end)
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

--- parameters() -> array of tensors, in a stable order (own ones first, then each child's)
function Module:parameters()
  local list = named(self, { "_param_keys" })
  for i, e in ipairs(list) do list[i] = e[2] end
  return list
end

--- named_parameters() -> iterator over name, tensor (`for name, p in m:named_parameters() do`)
function Module:named_parameters()
  return iterate(named(self, { "_param_keys" }))
end

function Module:named_buffers()
  return iterate(named(self, { "_buffer_keys" }))
end

function Module:buffers()
  local list = named(self, { "_buffer_keys" })
  for i, e in ipairs(list) do list[i] = e[2] end
  return list
end

--- children() -> array of the direct submodules (each once); named_children() -> iterator name, module
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

function Module:children()
  local out = {}
  for i, e in ipairs(named_children(self)) do out[i] = e[2] end
  return out
end

function Module:named_children()
  return iterate(named_children(self))
end

--- modules() -> array of self and every submodule (depth first); named_modules() -> iterator
function Module:modules()
  local out = {}
  walk(self, "", function(m) out[#out + 1] = m end)
  return out
end

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

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

local function is_dtype(name)
  for _, d in ipairs(tl.dtypes) do if d == name then return true end end
  return name == "float" or name == "double" or name == "half" or name == "int" or name == "long"
end

--- to(device_or_dtype, ...): moves every parameter and buffer to a device and/or casts the
-- floating ones to a dtype, replacing the tensors (parameters keep requires_grad; their grads
-- move with them). Returns self. Build optimizers after moving the model.
function Module:to(...)
  local args = table.pack(...)
  if args.n == 0 then error("Module:to: expected a device or a dtype", 2) end
  local done = {} -- a tensor shared by two modules stays shared
  local function convert(t, is_param)
    if done[t] then return done[t] end
    local new = t
    for i = 1, args.n do
      local a = args[i]
      if type(a) == "string" and is_dtype(a) then
        if floating[new.dtype] then new = new:to(a) end
      else
        new = new:to(a)
      end
    end
    if new == t then return t end
    new = new:detach()
    if not new:is_contiguous() then new = new:contiguous() end
    if is_param then
      new:requires_grad_(t.requires_grad)
      local g = t.grad
      if g ~= nil then
        for i = 1, args.n do
          local a = args[i]
          if not (type(a) == "string" and is_dtype(a)) or floating[g.dtype] then g = g:to(a) end
        end
        new.grad = g:detach()
      end
    end
    done[t] = new
    return new
  end
  -- convert everything first, then assign: a conversion that fails (a bad device, a released
  -- tensor) leaves the whole model as it was
  local assignments = {}
  tl.no_grad(function()
    for _, m in ipairs(self:modules()) do
      for _, key in ipairs(m._param_keys) do
        local t = rawget(m, key)
        if t ~= nil then assignments[#assignments + 1] = { m, key, convert(t, true) } end
      end
      for _, key in ipairs(m._buffer_keys) do
        local t = rawget(m, key)
        if t ~= nil then assignments[#assignments + 1] = { m, key, convert(t, false) } end
      end
    end
  end)
  for _, a in ipairs(assignments) do rawset(a[1], a[2], a[3]) end
  return self
end

function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end

-- ---- state dicts -------------------------------------------------------------------
-- An ordered table: pairs() walks it in insertion order; keys(sd) gives the order.
local OrderedMeta = {}
OrderedMeta.__pairs = function(t)
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
OrderedMeta.__newindex = function(t, k, v)
  local order = getmetatable(t).__keys
  if not contains(order, k) then order[#order + 1] = k end
  rawset(t, k, v)
end

local function ordered(keys, values)
  local t = setmetatable({}, { __pairs = OrderedMeta.__pairs, __newindex = OrderedMeta.__newindex, __keys = keys,
    __name = "nn.StateDict" })
  for i, k in ipairs(keys) do rawset(t, k, values[i]) end
  return t
end

--- nn.keys(sd): the keys of a state dict in order (sorted for a plain table, e.g. from tl.load)
function nn.keys(sd)
  local mt = getmetatable(sd)
  if mt and mt.__keys then
    local out = {}
    for _, k in ipairs(mt.__keys) do if rawget(sd, k) ~= nil then out[#out + 1] = k end end
    return out
  end
  local out = {}
  for k in next, sd do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- state_dict() -> ordered table name -> tensor (parameters and buffers, detached, sharing
-- storage with the module's tensors)
function Module:state_dict()
  local keys, values = {}, {}
  walk(self, "", function(m, prefix)
    for _, kind in ipairs({ "_param_keys", "_buffer_keys" }) do
      for _, key in ipairs(m[kind]) do
        local t = rawget(m, key)
        if t ~= nil then
          keys[#keys + 1] = prefix .. tostring(key)
          values[#values + 1] = t:detach()
        end
      end
    end
  end)
  return ordered(keys, values)
end

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- load_state_dict(sd, strict = true): copies the values of sd into the module's parameters and
-- buffers (casting dtype, moving device). strict: every key must match both ways. A shape
-- mismatch is always an error. On error nothing is copied. Returns {missing = {...},
-- unexpected = {...}}.
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then error("load_state_dict: expected a table of tensors, got " .. type(sd), 2) end
  if strict == nil then strict = true end
  local targets = {}
  local order = {}
  walk(self, "", function(m, prefix)
    for _, kind in ipairs({ "_param_keys", "_buffer_keys" }) do
      for _, key in ipairs(m[kind]) do
        local t = rawget(m, key)
        if t ~= nil then
          local name = prefix .. tostring(key)
          targets[name] = t
          order[#order + 1] = name
        end
      end
    end
  end)
  local missing, unexpected, mismatched = {}, {}, {}
  for _, name in ipairs(order) do
    local v = rawget(sd, name)
    if v == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(v) then
      mismatched[#mismatched + 1] = string.format("%s: expected a tensor, got %s", name, type(v))
    elseif not same_shape(v.shape, targets[name].shape) then
      mismatched[#mismatched + 1] = string.format("%s: the module has shape %s, the state dict %s",
        name, shape_str(targets[name].shape), shape_str(v.shape))
    end
  end
  for _, name in ipairs(nn.keys(sd)) do
    if targets[name] == nil then unexpected[#unexpected + 1] = name end
  end
  table.sort(unexpected)
  local problems = {}
  if strict and #missing > 0 then
    problems[#problems + 1] = string.format("missing key%s: %s", #missing > 1 and "s" or "", table.concat(missing, ", "))
  end
  if strict and #unexpected > 0 then
    problems[#problems + 1] = string.format("unexpected key%s: %s", #unexpected > 1 and "s" or "", table.concat(unexpected, ", "))
  end
  if #mismatched > 0 then
    problems[#problems + 1] = "size mismatch for " .. table.concat(mismatched, "; ")
  end
  if #problems > 0 then
    error(string.format("load_state_dict: error(s) loading the state dict into %s: %s",
      self._class_name, table.concat(problems, "; ")), 2)
  end
  tl.no_grad(function()
    for _, name in ipairs(order) do
      local v = rawget(sd, name)
      if v ~= nil then targets[name]:copy_(v) end
    end
  end)
  return { missing = missing, unexpected = unexpected }
end

-- ---- printing ----------------------------------------------------------------------------
local function with_commas(n)
  local s = tostring(n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  if out:sub(1, 1) == "," then out = out:sub(2) end
  return out
end

function Module:extra_repr() return "" end

local function describe(m, indent)
  local head = m._class_name .. "(" .. m:extra_repr() .. ")"
  local n = m:num_parameters()
  local count = n > 0 and ("  -- " .. with_commas(n) .. " parameters") or ""
  local children = m._module_keys
  if #children == 0 then return head .. count end
  local lines = { m._class_name .. "(" .. m:extra_repr() .. ")" .. count .. " {" }
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

-- ---- init -----------------------------------------------------------------------------
local init = {}
nn.init = init

local function fans(t, fn_name)
  local shape = t.shape
  if #shape < 2 then
    error(string.format("nn.init.%s: fan in and fan out need a tensor with at least 2 dims, got %d", fn_name, #shape), 3)
  end
  local receptive = 1
  for d = 3, #shape do receptive = receptive * shape[d] end
  return shape[2] * receptive, shape[1] * receptive
end

--- calculate_gain(nonlinearity, param?) as torch.nn.init.calculate_gain
function init.calculate_gain(nonlinearity, param)
  local linear = { linear = true, conv1d = true, conv2d = true, conv3d = true, sigmoid = true,
    conv_transpose1d = true, conv_transpose2d = true, conv_transpose3d = true }
  if linear[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    return math.sqrt(2 / (1 + slope * slope))
  end
  error("nn.init.calculate_gain: unsupported nonlinearity '" .. tostring(nonlinearity) .. "'", 2)
end

local function fill_with(t, values)
  tl.no_grad(function() t:copy_(values) end)
  return t
end

local function like(t)
  return { dtype = floating[t.dtype] and t.dtype or "float32", device = t.device }
end

--- uniform_(t, a = 0, b = 1), normal_(t, mean = 0, std = 1), constant_, zeros_, ones_: in place
function init.uniform_(t, a, b)
  a, b = a or 0, b or 1
  return fill_with(t, tl.rand(t.shape, like(t)) * (b - a) + a)
end

function init.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  return fill_with(t, tl.randn(t.shape, like(t)) * std + mean)
end

function init.constant_(t, value)
  tl.no_grad(function() t:fill_(value) end)
  return t
end

function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end

local function fan_for(t, mode, fn_name)
  local fan_in, fan_out = fans(t, fn_name)
  mode = mode or "fan_in"
  if mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  error(string.format("nn.init.%s: mode must be 'fan_in' or 'fan_out', got '%s'", fn_name, tostring(mode)), 3)
end

--- kaiming_uniform_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"})
function init.kaiming_uniform_(t, opts)
  opts = opts or {}
  local fan = fan_for(t, opts.mode, "kaiming_uniform_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  local bound = math.sqrt(3) * gain / math.sqrt(fan)
  return init.uniform_(t, -bound, bound)
end

--- kaiming_normal_(t, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"})
function init.kaiming_normal_(t, opts)
  opts = opts or {}
  local fan = fan_for(t, opts.mode, "kaiming_normal_")
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return init.normal_(t, 0, gain / math.sqrt(fan))
end

--- xavier_uniform_(t, gain = 1), xavier_normal_(t, gain = 1)
function init.xavier_uniform_(t, gain)
  local fan_in, fan_out = fans(t, "xavier_uniform_")
  local bound = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -bound, bound)
end

function init.xavier_normal_(t, gain)
  local fan_in, fan_out = fans(t, "xavier_normal_")
  return init.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fan_in + fan_out)))
end

-- ---- functional ----------------------------------------------------------------------------
local F = {}
nn.functional = F

F.linear = tl.linear
F.conv2d = tl.conv2d
F.max_pool2d = tl.max_pool2d
F.embedding = tl.embedding
F.layer_norm = tl.layer_norm
F.relu = tl.relu
F.gelu = tl.gelu
F.tanh = tl.tanh
F.sigmoid = tl.sigmoid
F.softmax = tl.softmax
F.log_softmax = tl.log_softmax

--- cross_entropy(logits [N, C], target [N] (classes 1..C), {label_smoothing = 0})
function F.cross_entropy(logits, target, opts)
  return tl.cross_entropy(logits, target, opts)
end

--- mse_loss(input, target): mean of the squared differences
function F.mse_loss(input, target)
  local d = input - target
  return (d * d):mean()
end

--- dropout(x, p = 0.5, training = true): zeroes elements with probability p and scales the
-- rest by 1 / (1 - p) when training; identity otherwise
function F.dropout(x, p, training)
  p = p or 0.5
  if not (p >= 0 and p <= 1) then error("dropout: p must be in [0, 1], got " .. tostring(p), 2) end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = tl.rand(x.shape, { dtype = x.dtype, device = x.device }):ge(p)
  return x * (keep:to(x.dtype) * (1 / (1 - p)))
end

-- ---- layers ----------------------------------------------------------------------------------
local function options(opts, name)
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("nn.%s: expected an options table, got %s", name, type(opts)), 3)
  end
  return opts or {}
end

local function check_size(v, what, cls)
  if math.type(v) ~= "integer" or v < 1 then
    error(string.format("nn.%s: %s must be a positive integer, got %s", cls, what, tostring(v)), 3)
  end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

local function pair_str(v)
  if type(v) == "table" then return "(" .. v[1] .. ", " .. v[2] .. ")" end
  return tostring(v)
end

local function pair(v, what, cls)
  if type(v) == "number" then return { v, v } end
  if type(v) == "table" and #v == 2 then return { v[1], v[2] } end
  error(string.format("nn.%s: %s must be an integer or {h, w}, got %s", cls, what, tostring(v)), 3)
end

--- Linear(in_features, out_features, {bias = true, dtype =, device =}): y = x W^T + b
local Linear = Module:extend("Linear")
nn.Linear = Linear

function Linear:init(in_features, out_features, opts)
  opts = options(opts, "Linear")
  check_size(in_features, "in_features", "Linear")
  check_size(out_features, "out_features", "Linear")
  self.in_features, self.out_features = in_features, out_features
  local o = tensor_opts(opts)
  self:register_parameter("weight", tl.empty(out_features, in_features, o))
  if opts.bias ~= false then self:register_parameter("bias", tl.empty(out_features, o)) end
  self:reset_parameters()
end

-- PyTorch's default: weight kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
-- bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
function Linear:reset_parameters()
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local bound = 1 / math.sqrt(self.in_features)
    init.uniform_(self.bias, -bound, bound)
  end
end

function Linear:forward(x)
  return tl.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end

--- Conv2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, bias = true, dtype, device})
local Conv2d = Module:extend("Conv2d")
nn.Conv2d = Conv2d

function Conv2d:init(in_channels, out_channels, kernel_size, opts)
  opts = options(opts, "Conv2d")
  check_size(in_channels, "in_channels", "Conv2d")
  check_size(out_channels, "out_channels", "Conv2d")
  local k = pair(kernel_size, "kernel_size", "Conv2d")
  self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
  self.stride = opts.stride or 1
  self.padding = opts.padding or 0
  local o = tensor_opts(opts)
  self:register_parameter("weight", tl.empty(out_channels, in_channels, k[1], k[2], o))
  if opts.bias ~= false then self:register_parameter("bias", tl.empty(out_channels, o)) end
  self:reset_parameters()
end

function Conv2d:reset_parameters()
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local bound = 1 / math.sqrt(self.in_channels * self.kernel_size[1] * self.kernel_size[2])
    init.uniform_(self.bias, -bound, bound)
  end
end

function Conv2d:forward(x)
  return tl.conv2d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding })
end

function Conv2d:extra_repr()
  return string.format("%d, %d, kernel_size=%s, stride=%s, padding=%s%s", self.in_channels, self.out_channels,
    pair_str(self.kernel_size), pair_str(self.stride), pair_str(self.padding),
    self.bias and "" or ", bias=false")
end

--- MaxPool2d(kernel_size, {stride = kernel_size, padding = 0})
local MaxPool2d = Module:extend("MaxPool2d")
nn.MaxPool2d = MaxPool2d

function MaxPool2d:init(kernel_size, opts)
  opts = options(opts, "MaxPool2d")
  self.kernel_size = kernel_size
  self.stride = opts.stride
  self.padding = opts.padding or 0
end

function MaxPool2d:forward(x)
  return tl.max_pool2d(x, self.kernel_size, { stride = self.stride, padding = self.padding })
end

function MaxPool2d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s", pair_str(self.kernel_size),
    pair_str(self.stride or self.kernel_size), pair_str(self.padding))
end

--- Flatten(start_dim = 2, end_dim = -1): keeps the batch dim
local Flatten = Module:extend("Flatten")
nn.Flatten = Flatten

function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end

function Flatten:forward(x)
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim)
end

-- activations
local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  nn[name] = cls
  return cls
end

activation("ReLU", tl.relu)
activation("GELU", tl.gelu)
activation("Tanh", tl.tanh)
activation("Sigmoid", tl.sigmoid)

--- Identity()
activation("Identity", function(x) return x end)

--- Dropout(p = 0.5): a mask from tl.rand when training, the identity in eval mode
local Dropout = Module:extend("Dropout")
nn.Dropout = Dropout

function Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("nn.Dropout: p must be a probability in [0, 1], got " .. tostring(p), 3)
  end
  self.p = p
end

function Dropout:forward(x)
  return F.dropout(x, self.p, self.training)
end

function Dropout:extra_repr()
  return string.format("p=%g", self.p)
end

--- LayerNorm(normalized_shape, {eps = 1e-5, elementwise_affine = true, dtype, device}): over
-- the last dims (normalized_shape: an integer or a table of sizes)
local LayerNorm = Module:extend("LayerNorm")
nn.LayerNorm = LayerNorm

function LayerNorm:init(normalized_shape, opts)
  opts = options(opts, "LayerNorm")
  local shape = type(normalized_shape) == "table" and normalized_shape or { normalized_shape }
  local size = 1
  for _, s in ipairs(shape) do
    check_size(s, "normalized_shape", "LayerNorm")
    size = size * s
  end
  self.normalized_shape, self.size = shape, size
  self.eps = opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    local o = tensor_opts(opts)
    self:register_parameter("weight", tl.ones(shape, o))
    self:register_parameter("bias", tl.zeros(shape, o))
  end
end

function LayerNorm:forward(x)
  local k = #self.normalized_shape
  if k == 1 then return tl.layer_norm(x, self.weight, self.bias, self.eps) end
  local shape = x.shape
  local lead = {}
  for d = 1, #shape - k do lead[d] = shape[d] end
  lead[#lead + 1] = self.size
  local w = self.weight and self.weight:reshape(self.size)
  local b = self.bias and self.bias:reshape(self.size)
  return tl.layer_norm(x:reshape(lead), w, b, self.eps):reshape(shape)
end

function LayerNorm:extra_repr()
  return string.format("%s, eps=%g, elementwise_affine=%s", shape_str(self.normalized_shape), self.eps,
    tostring(self.weight ~= nil))
end

--- Embedding(num_embeddings, embedding_dim, {dtype, device}): weight N(0, 1); indices count from 1
local Embedding = Module:extend("Embedding")
nn.Embedding = Embedding

function Embedding:init(num_embeddings, embedding_dim, opts)
  opts = options(opts, "Embedding")
  check_size(num_embeddings, "num_embeddings", "Embedding")
  check_size(embedding_dim, "embedding_dim", "Embedding")
  self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
  local w = tl.randn(num_embeddings, embedding_dim, tensor_opts(opts))
  self:register_parameter("weight", w)
end

function Embedding:forward(indices)
  return tl.embedding(indices, self.weight)
end

function Embedding:extra_repr()
  return string.format("%d, %d", self.num_embeddings, self.embedding_dim)
end

-- ---- containers ------------------------------------------------------------------------------
local function module_list_args(cls, ...)
  local n = select("#", ...)
  local first = ...
  if n == 1 and type(first) == "table" and not is_module(first) then return first end
  return { ... }
end

--- Sequential(m1, m2, ...) or Sequential({m1, m2, ...}): seq[i] is the i-th module
local Sequential = Module:extend("Sequential")
nn.Sequential = Sequential

function Sequential:init(...)
  for i, m in ipairs(module_list_args("Sequential", ...)) do
    if not is_module(m) then
      error(string.format("nn.Sequential: argument %d expected a module, got %s", i, type(m)), 3)
    end
    self:add_module(i, m)
  end
end

function Sequential:forward(x, ...)
  for _, key in ipairs(self._module_keys) do
    x = rawget(self, key)(x, ...)
  end
  return x
end

function Sequential:append(m)
  return self:add_module(#self._module_keys + 1, m) and self
end

function Sequential:__len()
  return #self._module_keys
end

--- ModuleList({m1, m2, ...}): holds modules (registered, numbered from 1); ipairs(list) walks them
local ModuleList = Module:extend("ModuleList")
nn.ModuleList = ModuleList

function ModuleList:init(...)
  for i, m in ipairs(module_list_args("ModuleList", ...)) do
    if not is_module(m) then
      error(string.format("nn.ModuleList: entry %d expected a module, got %s", i, type(m)), 3)
    end
    self:add_module(i, m)
  end
end

function ModuleList:append(m)
  self:add_module(#self._module_keys + 1, m)
  return self
end

function ModuleList:__len()
  return #self._module_keys
end

function ModuleList:forward()
  error("nn.ModuleList: a list of modules has no forward; call its modules", 2)
end

-- ---- losses ----------------------------------------------------------------------------------
--- CrossEntropyLoss({label_smoothing = 0}): (logits [N, C], target [N] of classes 1..C) -> mean loss
local CrossEntropyLoss = Module:extend("CrossEntropyLoss")
nn.CrossEntropyLoss = CrossEntropyLoss

function CrossEntropyLoss:init(opts)
  opts = options(opts, "CrossEntropyLoss")
  self.label_smoothing = opts.label_smoothing or 0
end

function CrossEntropyLoss:forward(logits, target)
  return tl.cross_entropy(logits, target, self.label_smoothing)
end

function CrossEntropyLoss:extra_repr()
  return self.label_smoothing ~= 0 and string.format("label_smoothing=%g", self.label_smoothing) or ""
end

--- MSELoss(): mean squared error
local MSELoss = Module:extend("MSELoss")
nn.MSELoss = MSELoss

function MSELoss:forward(input, target)
  return F.mse_loss(input, target)
end

return nn
