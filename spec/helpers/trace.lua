-- Which ops a function ran, as tl.trace saw them: for specs that check what ran (fused kernels,
-- autocast's casts, no extra copies); and the CPU memory a result keeps.
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

-- The CPU bytes that fn's result (a tensor, with what its graph saved) keeps allocated, counted
-- after full collections; the result is then run backward through its sum, and dropped.
function trace.bytes_kept(fn)
  collectgarbage("collect")
  local before = tl.memory_stats("cpu").allocated
  local y = fn()
  collectgarbage("collect")
  local kept = tl.memory_stats("cpu").allocated - before
  y:sum():backward()
  return kept
end

return trace
