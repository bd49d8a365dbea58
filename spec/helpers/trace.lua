-- Which ops a function ran, as tl.trace saw them: for specs that check what ran (fused kernels,
-- autocast's casts, no extra copies).
local tl = require("tlua")

local trace = {}

--- the ops fn ran, in order
function trace.ops(fn)
  local ops = {}
  for _, e in ipairs(tl.trace(fn)) do ops[#ops + 1] = e.op end
  return ops
end

--- how many times fn ran each op: op name -> count
function trace.op_counts(fn)
  local seen = {}
  for _, e in ipairs(tl.trace(fn)) do seen[e.op] = (seen[e.op] or 0) + 1 end
  return seen
end

return trace
