-- Statement makers of the API fuzzer for autograd: backward (retain_graph, twice, bad gradients), requires_grad,
-- .grad assignment, grad modes, and the custom Functions of the prelude (fuzz/api/prelude.lua).

local function fmt(...) return string.format(...) end

local function graph_tensor(g)
  return g:tensor(function(i) return i.requires_grad end) or g:tensor(function(i) return i.floating end)
end

--- a gradient argument for backward on a: right shape (mostly), wrong shape or dtype, or a bad value
local function grad_arg(g, a)
  return g:weighted {
    { 6, fmt("tl.ones_like(%s)", a.ref) },
    { 2, g:fresh(a.shape, a.dtype) },
    { 1, g:fresh(g:shape(), a.dtype) },
    { 1, g:fresh(a.shape, g:dtype()) },
    { 0.5, g:pick { "3", "'grad'", "{}", "true" } },
  }
end

local function custom(names, arity, no_backward)
  return function(g)
    local a = g:chance(0.8) and (g:tensor(function(i) return i.requires_grad end) or
      g:tensor(function(i) return i.floating end)) or nil
    local x = a and a.ref or g:fresh(g:shape(), g:float_dtype(), true)
    local name = g:pick(names)
    local call = fmt("F.%s(%s)", name, x)
    if arity == 2 then
      local shape = a and (g:chance(0.8) and a.shape or g:broadcastable(a.shape)) or g:shape()
      call = fmt("F.%s(%s, %s)", name, x, g:fresh(shape, a and a.dtype or "float32", g:chance(0.6)))
      return fmt("%s, %s = %s", g:target(), g:target(), call)
    end
    if not no_backward and g:chance(0.6) then
      local target = g:target()
      local rg = g:chance(0.3) and "{retain_graph = true}" or ""
      return fmt("%s = %s; %s:sum():backward(%s)", target, call, target, rg)
    end
    return fmt("%s = %s", g:target(), call)
  end
end

local autograd = {
  backward = function(g)
    local a = graph_tensor(g)
    if not a then return nil end
    local rg = g:weighted { { 3, "" }, { 2, "{retain_graph = true}" }, { 1, "{retain_graph = false}" },
      { 0.5, "true" } }
    local form = g:int(1, 3)
    if form == 1 then return fmt("%s:sum():backward(%s)", a.ref, rg) end
    if form == 2 then return fmt("%s:backward(%s)", a.ref, rg) end
    return fmt("%s:backward(%s%s)", a.ref, grad_arg(g, a), rg ~= "" and (", " .. rg) or "")
  end,
  backward_bad_options = function(g)
    local a = graph_tensor(g)
    if not a then return nil end
    local bad = g:pick { "{retain_graph = 1}", "{retain_graph = 'yes'}", "{retain = true}", "'x'", "1" }
    return fmt("%s:sum():backward(%s)", a.ref, g:chance(0.5) and bad or ("nil, " .. bad))
  end,
  backward_twice = function(g)
    local a = graph_tensor(g)
    if not a then return nil end
    return fmt("do local s = %s:sum(); s:backward({retain_graph = %s}); s:backward() end", a.ref,
      tostring(g:chance(0.7)))
  end,
  chain = function(g) -- a small graph through several ops, then backward
    local a = g:tensor(function(i) return i.floating and i.numel <= 4096 end)
    if not a then return nil end
    local ops = { "exp()", "tanh()", "sigmoid()", "relu()", "sum(1, true)", "transpose(1, -1)", "clone()", "mean()",
      "softmax(-1)", "log_softmax(1)", "pow(2)", "abs()", "view(-1)", "expand(2, table.unpack(%s.shape))" }
    local chain = a.ref
    for _ = 1, g:int(1, 4) do chain = chain .. ":" .. fmt(g:pick(ops), a.ref) end
    local target = g:target()
    return fmt("%s = %s; %s:sum():backward()", target, chain, target)
  end,
  requires_grad = function(g)
    local a = g:tensor()
    if not a then return nil end
    local value = g:weighted { { 5, "true" }, { 3, "false" }, { 0.5, "1" }, { 0.5, "nil" } }
    if g:chance(0.5) then return fmt("%s.requires_grad = %s", a.ref, value) end
    return fmt("%s:requires_grad_(%s)", a.ref, g:chance(0.8) and value or "")
  end,
  grad_assign = function(g)
    local a = g:tensor()
    if not a then return nil end
    local value = g:weighted {
      { 5, g:fresh(a.shape, a.dtype) },
      { 2, "nil" },
      { 1, g:fresh(g:shape(), a.dtype) },
      { 1, g:fresh(a.shape, g:dtype()) },
      { 1, (g:tensor() or a).ref },
      { 0.5, g:pick { "3", "'g'", "{}" } },
    }
    return fmt("%s.grad = %s", a.ref, value), { a.k }
  end,
  grad_read = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s.grad", g:target(), a.ref)
  end,
  zero_grad = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s:zero_grad()", a.ref)
  end,
  detach = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s = %s:detach()%s", g:target(), a.ref, g:chance(0.3) and ":requires_grad_()" or "")
  end,
  grad_mode = function(g)
    local a = g:tensor()
    if not a then return nil end
    return g:pick {
      fmt("%s = tl.no_grad(function() return %s * 2 end)", g:target(), a.ref),
      fmt("%s = tl.enable_grad(function() return %s * 2 end)", g:target(), a.ref),
      fmt("%s = tl.no_grad(function() return tl.enable_grad(function() return %s + 1 end) end)", g:target(), a.ref),
      "tl.no_grad(function() error('raised inside no_grad on purpose') end)",
      "tl.no_grad(function() return tl.enable_grad(function() error('raised inside enable_grad') end) end)",
      fmt("tl.no_grad(function() %s:sum():backward() end)", a.ref),
      "tl.no_grad(42)",
      "tl.set_grad_enabled(tl.is_grad_enabled())",
      "tl.set_grad_enabled('yes')",
    }
  end,
  version = function(g) -- an in-place change to a saved tensor before backward: an error naming the op
    local a = g:tensor(function(i) return i.floating and i.requires_grad end)
    if not a then return nil end
    return fmt("do local y = (%s:clone() * %s):sum(); %s:detach():fill_(1); y:backward() end", a.ref, a.ref, a.ref)
  end,
  custom_exp = custom({ "Exp", "Square", "Alias", "NilGrad", "KeepsGraph" }),
  custom_two = custom({ "MulAdd" }, 2),
  custom_reentrant = custom({ "Reentrant" }),
  custom_recursive = custom({ "Recursive" }),
  custom_wrong_grad = custom({ "WrongShape", "WrongDtype", "WrongType" }),
  custom_raises = custom({ "Raises", "ForwardRaises" }),
  custom_no_tensor = custom({ "NoTensor" }, 1, true),
  custom_define = function(g) -- bad definitions
    return "local _ = " .. g:pick {
      "tl.autograd.Function({})", "tl.autograd.Function({forward = 1, backward = 2})", "tl.autograd.Function(nil)",
      "tl.autograd.Function({forward = function() end, backward = function() end})(1, 2)",
      "tl.custom_function('x', {}, {}, function() end)", "tl.custom_function('x', {1}, {}, print)",
      "tl.custom_function('x', {tl.zeros(1), tl.zeros(1), tl.zeros(1), tl.zeros(1), tl.zeros(1)}, {}, print)",
    }
  end,
}

return {
  { name = "autograd", weight = 8, variants = autograd },
}
