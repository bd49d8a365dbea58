-- tlua.class: the one class helper of tlua's Lua modules (nn.Module and its layers, optimizers, LR schedulers).
--
--   local class = require("tlua.class")
--   local Base = class("my.Base")             -- a root class
--   function Base:init(x) self.x = x end      -- the constructor's body
--   local Derived = class("my.Derived", Base) -- inherits Base's methods and metamethods
--   local obj = Derived(1)                    -- Derived:new(1): setmetatable({}, Derived), then obj:init(1)
--
-- A class is the metatable of its instances (cls.__index = cls, cls.__name = name). Calling a class
-- calls cls:new(...); a class whose instances need set-up before init (nn.Module) or that builds
-- them its own way (optimizers, schedulers) defines new. Lua looks metamethods up in the
-- metatable itself, without __index, so a class copies its parent's when it is made: define a
-- class's metamethods before deriving from it.
local options = require("tlua.options")

-- metamethods an instance finds in its class (not __index, which is the class, nor __name)
local metamethods = { "__call", "__tostring", "__newindex", "__len", "__eq", "__lt", "__le", "__concat", "__unm",
  "__add", "__sub", "__mul", "__div", "__mod", "__pow", "__idiv", "__close", "__gc" }

-- the default constructor: a new instance, then init(...) when the class has one
local function new(cls, ...)
  local self = setmetatable({}, cls)
  if self.init then self:init(...) end
  return self
end

local function instantiate(cls, ...)
  return cls:new(...)
end

--- class(name, parent?) -> a new class named name (as tostring(cls) and __name show it)
local function class(name, parent)
  if type(name) ~= "string" then options.error("class: expected a class name (a string), got " .. type(name), 2) end
  local cls = {}
  if parent ~= nil then
    for _, m in ipairs(metamethods) do cls[m] = rawget(parent, m) end
  else
    cls.new = new
  end
  cls.__index = cls
  cls.__name = name
  return setmetatable(cls, { __index = parent, __call = instantiate, __tostring = function() return name end })
end

return class
