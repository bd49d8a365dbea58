-- tl.nn containers: Sequential (runs its modules in order) and ModuleList (holds them); children are numbered from 1.
local base = require("tlua.nn.module")

local Module, is_module = base.Module, base.is_module

local containers = {}

-- registers the modules given as varargs or as one list, numbered from 1 (called by an init:
-- errors point at the caller of the constructor); what names an entry in messages
local function add_all(self, what, ...)
  local list, first = { ... }, ...
  if select("#", ...) == 1 and type(first) == "table" and not is_module(first) then list = first end
  for i, m in ipairs(list) do
    if not is_module(m) then
      error(string.format("nn.%s: %s %d expected a module, got %s", self._class_name, what, i, type(m)), 4)
    end
    self:add_module(i, m)
  end
end

local function append(self, m)
  self:add_module(#self._module_keys + 1, m)
  return self
end

local function len(self)
  return #self._module_keys
end

--- Sequential(m1, m2, ...) or Sequential({m1, m2, ...}): seq[i] is the i-th module; append(m)
local Sequential = Module:extend("Sequential")
containers.Sequential = Sequential
Sequential.append, Sequential.__len = append, len

function Sequential:init(...) add_all(self, "argument", ...) end

function Sequential:forward(x, ...)
  for _, key in ipairs(self._module_keys) do
    x = rawget(self, key)(x, ...)
  end
  return x
end

--- ModuleList({m1, m2, ...}): holds modules (registered, numbered from 1); ipairs(list) walks them; append(m)
local ModuleList = Module:extend("ModuleList")
containers.ModuleList = ModuleList
ModuleList.append, ModuleList.__len = append, len

function ModuleList:init(...) add_all(self, "entry", ...) end

function ModuleList:forward()
  error("nn.ModuleList: a list of modules has no forward; call its modules", 2)
end

return containers
