-- tl.autograd.Function: custom differentiable functions written in Lua, over tensors and (nested)
-- tables of tensors.
local core = require("tlua.core")
local options = require("tlua.options")

local autograd = {} -- gathers Function; init.lua merges it into tl.autograd

local function is_tensor(v)
  return core.is_tensor(v)
end

-- ---- tensors inside arguments ---------------------------------------------------------------
-- A custom function's arguments, results, saved values and gradients may be tensors or plain
-- Lua tables of them (no metatable; walked over 1..#t, nested). A *shape* describes one value:
-- the index of a tensor in a flat list, a table of shapes for a plain table, false otherwise.

local function is_plain_table(v)
  return type(v) == "table" and getmetatable(v) == nil
end

local function type_of(v)
  return is_tensor(v) and "tensor" or type(v)
end

-- " [2][3]" for the path {2, 3} (empty for the value itself)
local function path_str(path, depth)
  local parts = {}
  for d = 1, depth do parts[d] = "[" .. path[d] .. "]" end
  return depth > 0 and " " .. table.concat(parts) or ""
end

-- Appends the tensors of v to list (with their paths in paths, when given); returns v's shape.
-- what names v in the error raised for a table that contains itself.
local function flatten(v, list, what, paths, path, depth, open)
  if is_tensor(v) then
    list[#list + 1] = v
    if paths then paths[#list] = what .. path_str(path, depth) end
    return #list
  end
  if not is_plain_table(v) then return false end
  if open[v] then
    error(string.format("%s contains itself (a table of tensors must not hold a cycle)",
      what .. path_str(path, depth)), 0)
  end
  open[v] = true
  local shape = {}
  for i = 1, #v do
    path[depth + 1] = i
    shape[i] = flatten(v[i], list, what, paths, path, depth + 1, open)
  end
  open[v] = nil
  return shape
end

local function shape_of(v, list, what, paths)
  return flatten(v, list, what, paths, {}, 0, {})
end

-- The value of shape made from leaf(index) for each tensor (other = the value elsewhere).
local function mirror(shape, leaf, other)
  if shape == false then return other end
  if type(shape) == "number" then return leaf(shape) end
  local t = {}
  for i = 1, #shape do t[i] = mirror(shape[i], leaf, other) end
  return t
end

-- v with its tensors replaced by connected ones (new tables: forward's own stay untouched, so
-- what ctx kept of them holds no connected tensor).
local function rebuild(v, shape, connected)
  if shape == false then return v end
  if type(shape) == "number" then return connected[shape] end
  local copy = {}
  for k, x in pairs(v) do copy[k] = x end
  for i = 1, #shape do copy[i] = rebuild(v[i], shape[i], connected) end
  return copy
end

local function shape_text(dims)
  return "[" .. table.concat(dims, ", ") .. "]"
end

-- What a gradient of a tensor inside a table must match (the engine checks it too, but names
-- the input by its place among all tensor inputs; this names the argument and the entry).
local function input_info(t)
  return { shape = t.shape, dtype = t.dtype, device = t.device }
end

local function check_fits(g, info, where)
  local shape = g.shape
  local same = #shape == #info.shape
  for d = 1, #shape do same = same and shape[d] == info.shape[d] end
  if not same then
    error(string.format("gradient for %s has shape %s, expected %s (the input's shape)", where,
      shape_text(shape), shape_text(info.shape)), 0)
  end
  if g.dtype ~= info.dtype then
    error(string.format("gradient for %s has dtype %s, expected %s (the input's dtype)", where,
      g.dtype, info.dtype), 0)
  end
  if g.device ~= info.device then
    error(string.format("gradient for %s is on %s, expected %s (the input's device)", where,
      g.device, info.device), 0)
  end
end

-- Puts the gradients g (returned for a value of the given shape) into by_input, checked;
-- infos[k]: what the gradient of input k must match (tensors inside tables that need one).
local function take_gradients(g, shape, by_input, infos, argument, path, depth)
  if shape == false then return end -- not a tensor: its gradient is ignored
  if type(shape) == "number" then
    if g ~= nil and not is_tensor(g) then
      error(string.format("gradient for argument %d%s must be a tensor or nil, got %s",
        argument, path_str(path, depth), type_of(g)), 0)
    end
    if g ~= nil and infos[shape] then
      check_fits(g, infos[shape], "argument " .. argument .. path_str(path, depth))
    end
    by_input[shape] = g
    return
  end
  if g == nil then return end
  if not is_plain_table(g) then
    error(string.format("gradient for argument %d%s must be a table (the argument was a " ..
      "table) or nil, got %s", argument, path_str(path, depth), type_of(g)), 0)
  end
  if #g > #shape then
    error(string.format("gradient for argument %d%s has %d entries, the argument had %d",
      argument, path_str(path, depth), #g, #shape), 0)
  end
  for i = 1, #shape do
    path[depth + 1] = i
    take_gradients(g[i], shape[i], by_input, infos, argument, path, depth + 1)
  end
end

-- ctx of a custom function: what forward leaves for backward.
local Context = {}
Context.__index = Context

-- Saves tensors, or tables of tensors, for backward (ctx.saved_tensors there, as given). Each
-- tensor keeps the version its storage had: an in-place change before backward is an error,
-- not a wrong gradient. Keep tensors here rather than in fields of ctx: an output kept in a
-- field is the tensor forward returned, which autograd replaces by an alias.
function Context:save_for_backward(...)
  local saved = table.pack(...)
  local tensors, paths, versions = {}, {}, {}
  for i = 1, saved.n do shape_of(saved[i], tensors, "saved tensor " .. i, paths) end
  for k, t in ipairs(tensors) do versions[k] = t._version end
  self.saved_tensors = saved
  self._saved = { tensors = tensors, paths = paths, versions = versions }
end

local function check_saved_versions(ctx)
  local saved = ctx._saved
  if not saved then return end
  for k, t in ipairs(saved.tensors) do
    local version, now = saved.versions[k], t._version
    if now ~= version then
      error(string.format("%s was modified in place after it was saved " ..
        "(version %d, now %d); clone it before changing it", saved.paths[k], version, now), 0)
    end
  end
end

local FUNCTION_OPTIONS = { forward = "function", backward = "function", name = "string" } -- (tlua.options)

--- Function{forward = function(ctx, ...) end, backward = function(ctx, ...) end, name = "..."}
-- returns a callable op. Its arguments and forward's results may be tensors, plain Lua tables
-- (no metatable) of tensors, walked over 1..#t and nested, or anything else (passed through).
-- forward runs without recording; every tensor of its results joins the graph through one
-- node, and the caller gets the results back in the same structure (new tables) holding the
-- connected tensors. ctx.needs_input_grad mirrors the arguments: a boolean for a tensor, a
-- table of booleans of the same shape for a table, false otherwise. ctx:save_for_backward
-- takes tensors and tables of them (ctx.saved_tensors gives them back as given).
-- `backward(ctx, grad_1, ..., grad_m)` gets one value per result of forward (a gradient for a
-- tensor, a table of gradients for a table, nil otherwise) and returns one per argument of
-- forward, in order: a tensor or nil for a tensor, a table of the same shape (nil entries
-- allowed) or nil for a table; values for other arguments are ignored. When no tensor argument
-- requires grad (or grad mode is off) the results do not require grad, and backward on one
-- says why, naming the function.
function autograd.Function(def)
  if type(def) == "table" then options.check(def, "autograd.Function", FUNCTION_OPTIONS, 2) end
  if type(def) ~= "table" or type(def.forward) ~= "function" or type(def.backward) ~= "function" then
    options.error("autograd.Function: expected a table with forward and backward functions", 2)
  end
  local name = def.name or "Function"
  local op = {}
  return setmetatable(op, {
    __name = "tlua.autograd.Function",
    __tostring = function() return "autograd.Function(" .. name .. ")" end,
    __call = function(_, ...)
      local args = table.pack(...)
      local grad_on = core.is_grad_enabled()
      local inputs, in_shapes = {}, {}
      for i = 1, args.n do
        local ok, shape = pcall(shape_of, args[i], inputs, "argument " .. i)
        if not ok then options.error(name .. ": " .. shape, 2) end
        in_shapes[i] = shape
      end
      local needs, infos = {}, {}
      local function requires(k) return grad_on and inputs[k].requires_grad end
      for i = 1, args.n do
        local shape = in_shapes[i]
        needs[i] = mirror(shape, requires, false)
        if type(shape) == "table" then
          mirror(shape, function(k)
            if requires(k) then infos[k] = input_info(inputs[k]) end
          end)
        end
      end
      local ctx = setmetatable({ needs_input_grad = needs, saved_tensors = {} }, Context)
      local results = table.pack(core.no_grad(def.forward, ctx, table.unpack(args, 1, args.n)))
      local outputs, out_shapes = {}, {}
      for i = 1, results.n do
        local ok, shape = pcall(shape_of, results[i], outputs, "result " .. i)
        if not ok then options.error(name .. ": " .. shape, 2) end
        out_shapes[i] = shape
      end
      local nargs, nresults = args.n, results.n
      -- holds no tensor of the graph: the node keeps this function
      local function backward(...)
        check_saved_versions(ctx)
        local flat = table.pack(...)
        local grads_out = {}
        local function grad_of(k) return flat[k] end
        for i = 1, nresults do grads_out[i] = mirror(out_shapes[i], grad_of, nil) end
        local grads = table.pack(def.backward(ctx, table.unpack(grads_out, 1, nresults)))
        local by_input = {}
        for i = 1, nargs do take_gradients(grads[i], in_shapes[i], by_input, infos, i, {}, 0) end
        return by_input
      end
      local connected = core.custom_function(name, inputs, outputs, backward)
      for i = 1, nresults do results[i] = rebuild(results[i], out_shapes[i], connected) end
      return table.unpack(results, 1, nresults)
    end,
  })
end

return autograd
