-- The kernel sweep and gradcheck cases a family keeps beside its spec: every spec/helpers/<name>_cases.lua whose module returns a `sweep` table (op -> a kernel sweep case: inputs, run, reference), a `case_of_op` table (a kernel's op -> the name of the sweep case that covers it, e.g. a backward kernel's op -> its forward's case), a `variants` table (op -> variant name -> a sweep case that takes that path of the op's kernel) or a `gradcheck` table (op -> a list of {fn, inputs, options}); kernel_sweep_spec and gradcheck_spec take them, so a new family's cases (and the Lua references beside them) are written once, in its own file.
local lfs = require("lfs")

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec/helpers"
local M = { sweep = {}, gradcheck = {}, variants = {}, case_of_op = {} }
local names = {}
for file in lfs.dir(here) do
  local name = file:match("^(.+_cases)%.lua$")
  if name and name ~= "family_cases" then names[#names + 1] = name end
end
table.sort(names) -- a fixed order, whatever the directory's
for _, name in ipairs(names) do
  local module = require("helpers." .. name)
  for _, kind in ipairs({ "sweep", "gradcheck", "variants", "case_of_op" }) do
    if type(module) == "table" and type(module[kind]) == "table" then
      for op, case in pairs(module[kind]) do
        assert(M[kind][op] == nil, string.format("two %s cases for op %s (spec/helpers/%s.lua)", kind, op, name))
        M[kind][op] = case
      end
    end
  end
end
return M
