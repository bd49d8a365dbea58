-- tl.autocast: mixed precision regions (GEMM-like ops and attention in bfloat16/float16, norms, softmax and losses in float32), as a function or a to-be-closed scope.
local options = require("tlua.options")
local core = require("tlua.core")

local autocast = {}

local Scope = {}
Scope.__index = Scope

-- restores the state that was current when the scope opened (once)
function Scope:close()
  if self.open then
    self.open = false
    core._autocast_set(self.previous)
  end
end
Scope.__close = Scope.close

local function check_dtype(dtype)
  if dtype == nil or dtype == false then return false end
  if dtype ~= "bfloat16" and dtype ~= "float16" then
    options.error(string.format("autocast: dtype must be \"bfloat16\" or \"float16\" (or false to turn it off), got %s",
      type(dtype) == "string" and ("'" .. dtype .. "'") or type(dtype)), 3)
  end
  return dtype
end

--- tl.autocast(dtype, fn, ...) runs fn(...) with autocast on (dtype "bfloat16" or "float16";
--- false turns it off inside) and returns its results; the previous state comes back even
--- when fn raises. tl.autocast(dtype) alone opens a scope: `local ac <close> = tl.autocast("bfloat16")`
--- (or ac:close()).
function autocast.autocast(dtype, fn, ...)
  dtype = check_dtype(dtype)
  if fn ~= nil and type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    options.error("autocast: argument 2 expected a function, got " .. type(fn), 2)
  end
  local scope = setmetatable({ previous = core._autocast_set(dtype), open = true }, Scope)
  if fn == nil then return scope end
  local _ <close> = scope
  return fn(...)
end

--- tl.autocast_dtype(): the current autocast dtype, or false when autocast is off
function autocast.autocast_dtype()
  return core._autocast_get()
end

return autocast
