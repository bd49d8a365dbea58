-- tl.autograd: custom differentiable functions (function.lua), gradcheck (gradcheck.lua) and hooks.
local core = require("tlua.core")

local autograd = {}
for _, part in ipairs({ "tlua.autograd.function", "tlua.autograd.gradcheck" }) do
  for name, value in pairs(require(part)) do autograd[name] = value end
end

--- set_grad_ready_hook(t, fn): backward calls fn(t) once per pass, after the last gradient that
--- pass has for the leaf t was accumulated into t.grad; nil removes it. One hook per tensor.
function autograd.set_grad_ready_hook(t, fn) return core._set_grad_ready_hook(t, fn) end
--- queue_callback(fn): from a hook, runs fn() when the backward now running ends
function autograd.queue_callback(fn) return core._queue_callback(fn) end

return autograd
