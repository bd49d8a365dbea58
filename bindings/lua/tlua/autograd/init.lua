-- tl.autograd: custom differentiable functions (function.lua), gradcheck (gradcheck.lua), grad() and hooks (register_hook, retain_grad).
local core = require("tlua.core")
local options = require("tlua.options")

local autograd = {}
for _, part in ipairs({ "tlua.autograd.function", "tlua.autograd.gradcheck" }) do
  for name, value in pairs(require(part)) do autograd[name] = value end
end

--- set_grad_ready_hook(t, fn): backward calls fn(t) once per pass, after the last gradient that
--- pass has for the leaf t was accumulated into t.grad; nil removes it. One hook per tensor.
function autograd.set_grad_ready_hook(t, fn) return core._set_grad_ready_hook(t, fn) end
--- queue_callback(fn): from a hook, runs fn() when the backward now running ends
function autograd.queue_callback(fn) return core._queue_callback(fn) end

local GRAD_OPTIONS = { grad_outputs = "table|tensor", retain_graph = "boolean", create_graph = "boolean",
  allow_unused = "boolean" }

local function as_list(v, what)
  if core.is_tensor(v) then return { v } end
  if type(v) ~= "table" then
    options.error(string.format("autograd.grad: %s expected a tensor or a list of tensors, got %s", what, type(v)))
  end
  return v
end

--- grad(outputs, inputs, {grad_outputs = nil, retain_graph = create_graph, create_graph = false,
-- allow_unused = false}) -> a list
-- of the gradients of the outputs (a tensor or a list) with respect to each input (a tensor or a
-- list), without touching any tensor's .grad: sum over the outputs of d(output)/d(input) weighted
-- by grad_outputs (a tensor or list; nil entries mean 1 for one-element outputs). Only the part of
-- the graph between them runs; tensor hooks run. An input no output depends on is an error unless
-- allow_unused (its entry is then nil). create_graph = true records the gradients' own graph, so
-- they can be differentiated again (a gradient penalty, a Hessian-vector product): the
-- pointwise arithmetic, exp, log, sqrt, tanh, sigmoid, relu, silu, gelu, erf, pow, sum, mean,
-- softmax, log_softmax, linear, matmul, views and casts have differentiable gradients; another op
-- on the path is an error naming it.
--   local gx = tl.autograd.grad(y, x)[1]
function autograd.grad(outputs, inputs, opts)
  opts = options.check(opts, "autograd.grad", GRAD_OPTIONS)
  local outs, ins = as_list(outputs, "outputs"), as_list(inputs, "inputs")
  local grads = opts.grad_outputs
  if core.is_tensor(grads) then grads = { grads } end
  local retain = opts.retain_graph
  if retain == nil then retain = opts.create_graph or false end
  local results, n = core._autograd_grad(outs, ins, grads, retain, opts.create_graph or false)
  if not opts.allow_unused then
    for i = 1, n do
      if results[i] == nil then
        options.error(string.format("autograd.grad: input %d was not used to compute the outputs (pass " ..
          "allow_unused = true to get nil for it)", i))
      end
    end
  end
  return results
end

return autograd
