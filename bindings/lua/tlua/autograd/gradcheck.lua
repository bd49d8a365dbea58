-- tl.autograd.gradcheck and gradgradcheck: autograd's first and second derivatives against central finite differences in float64.
local core = require("tlua.core")
local options = require("tlua.options")

local autograd = {}

local function is_tensor(v)
  return core.is_tensor(v)
end

-- flat element access for gradcheck (contiguous tensors)
local function flat(t)
  return t:view(t:numel())
end

local function as_list(v)
  if is_tensor(v) then return { v } end
  if type(v) == "table" then return v end
  options.error("gradcheck: fn must return a tensor or a list of tensors, got " .. type(v), 3)
end

local GRADCHECK_OPTIONS = { eps = "number", atol = "number", rtol = "number", raise = "boolean" } -- (tlua.options)

--- gradcheck(fn, inputs, opts): compares the gradients autograd computes for
-- fn(table.unpack(inputs)) with central finite differences, in float64.
-- opts: eps (1e-6), atol (1e-5), rtol (1e-3), raise (true).
-- Returns true, or false and a message naming the worst element (or raises).
function autograd.gradcheck(fn, inputs, opts)
  opts = options.check(opts, "gradcheck", GRADCHECK_OPTIONS, 2)
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  local raise = opts.raise ~= false
  local checked = {}
  for i, t in ipairs(inputs) do
    if is_tensor(t) and t.requires_grad then
      if t.dtype ~= "float64" then
        options.error(string.format("gradcheck: input %d is %s; use float64 inputs", i, t.dtype), 2)
      end
      if not t:is_contiguous() then
        options.error(string.format("gradcheck: input %d must be contiguous", i), 2)
      end
      checked[#checked + 1] = i
    end
  end
  if #checked == 0 then options.error("gradcheck: no input requires grad", 2) end

  -- fresh dense float64 copies: an output may alias an input or be a view
  local function outputs_now()
    local list = as_list(core.no_grad(fn, table.unpack(inputs)))
    local copies = {}
    for o, t in ipairs(list) do copies[o] = t:detach():double():clone() end
    return copies
  end

  -- numerical Jacobian, one input element at a time: numeric[i][k][o][j]
  local base = outputs_now()
  local numeric = {}
  for _, i in ipairs(checked) do
    local x = flat(inputs[i])
    numeric[i] = {}
    for k = 1, x:numel() do
      local saved = x[k]
      x[k] = saved + eps
      local up = outputs_now()
      x[k] = saved - eps
      local down = outputs_now()
      x[k] = saved
      local column = {}
      for o = 1, #base do
        local u, d = flat(up[o]), flat(down[o])
        local values = {}
        for j = 1, u:numel() do values[j] = (u[j] - d[j]) / (2 * eps) end
        column[o] = values
      end
      numeric[i][k] = column
    end
  end

  -- analytical Jacobian, one output element at a time, and the comparison
  local outputs = as_list(fn(table.unpack(inputs)))
  local worst = { err = -1 }
  for o, out in ipairs(outputs) do
    if out.requires_grad then
      for j = 1, out:numel() do
        for _, i in ipairs(checked) do inputs[i].grad = nil end
        local seed = core.zeros(out.shape, { dtype = out.dtype, device = out.device })
        flat(seed)[j] = 1
        out:backward(seed, { retain_graph = true })
        for _, i in ipairs(checked) do
          local g = inputs[i].grad
          local gflat = g and flat(g:contiguous()) or nil
          for k = 1, inputs[i]:numel() do
            local analytic = gflat and gflat[k] or 0
            local expected = numeric[i][k][o][j]
            local err = math.abs(analytic - expected) - (atol + rtol * math.abs(expected))
            if err > worst.err then
              worst = { err = err, input = i, element = k, output = o, output_element = j,
                        analytic = analytic, numeric = expected }
            end
          end
        end
      end
    end
  end
  for _, i in ipairs(checked) do inputs[i].grad = nil end
  if worst.err <= 0 then return true end
  local message = string.format(
    "gradcheck: gradient of output %d (element %d) with respect to input %d (element %d): " ..
    "analytical %.10g, numerical %.10g (atol %g, rtol %g)",
    worst.output, worst.output_element, worst.input, worst.element,
    worst.analytic, worst.numeric, atol, rtol)
  if raise then options.error(message, 2) end
  return false, message
end

local GRADGRADCHECK_OPTIONS = { eps = "number", atol = "number", rtol = "number", raise = "boolean",
  grad_outputs = "table" }

--- gradgradcheck(fn, inputs, opts): checks the second derivatives: the gradients of
-- fn(table.unpack(inputs)) with respect to the inputs that require grad, computed by
-- autograd.grad with create_graph = true for grad_outputs v (opts.grad_outputs, one tensor per
-- output; default: fixed pseudo-random float64 values), are themselves checked by gradcheck
-- against finite differences. opts: eps, atol, rtol, raise as gradcheck's.
function autograd.gradgradcheck(fn, inputs, opts)
  opts = options.check(opts, "gradgradcheck", GRADGRADCHECK_OPTIONS, 2)
  local grad = require("tlua.autograd").grad
  local wrt = {}
  for _, t in ipairs(inputs) do
    if is_tensor(t) and t.requires_grad then wrt[#wrt + 1] = t end
  end
  if #wrt == 0 then options.error("gradgradcheck: no input requires grad", 2) end
  local v = opts.grad_outputs
  if not v then
    v = {}
    local outputs = as_list(core.no_grad(fn, table.unpack(inputs)))
    for o, out in ipairs(outputs) do
      -- values in [-1, 1] that do not depend on the random generator's state
      local values = core.arange(1, out:numel() + 1, { dtype = "float64" }):mul(0.7 + o):sin()
      v[o] = values:reshape(out.shape):to(out.device)
    end
  end
  -- the first derivatives as a function of the inputs, differentiable (create_graph)
  local function first_derivatives(...)
    local args = { ... }
    return core.enable_grad(function()
      local outputs = as_list(fn(table.unpack(args)))
      local with = {}
      for _, t in ipairs(args) do
        if is_tensor(t) and t.requires_grad then with[#with + 1] = t end
      end
      local grads = grad(outputs, with, { grad_outputs = v, create_graph = true, allow_unused = true })
      local list = {}
      for i = 1, #with do
        list[#list + 1] = grads[i] or core.zeros(with[i].shape, { dtype = with[i].dtype, device = with[i].device })
      end
      return list
    end)
  end
  return autograd.gradcheck(first_derivatives, inputs,
    { eps = opts.eps, atol = opts.atol, rtol = opts.rtol, raise = opts.raise })
end

return autograd
