-- tlua.nn.replaced: the parameters Module:to() replaced by new tensors (old -> what they were moved to), for optimizers to refuse stale ones.
--
-- Module:to(...) makes new parameter tensors; an optimizer built before it still holds the old
-- ones and would train nothing. to() records each replaced parameter here, weakly keyed (an
-- entry lives as long as something, such as an optimizer, still holds the old tensor), and
-- Optimizer:step() raises an error for a parameter found here.
--
--   replaced[old] = "float64"   -- the arguments of to(), as the message shows them
--
-- The table lives on tlua.core, so that every copy of this module shares it: the submodules
-- tl.nn and tl.optim are cached on that table as they load, so a host that reloads Lua modules
-- (busted between spec files) can hold a tl.nn from one load and a tl.optim from another.
local core = require("tlua.core")
if not rawget(core, "_replaced_parameters") then
  rawset(core, "_replaced_parameters", setmetatable({}, { __mode = "k" }))
end
return rawget(core, "_replaced_parameters")
