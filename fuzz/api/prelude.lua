-- The API fuzzer's prelude: custom autograd Functions (F.*) that statements call, defined by one logged record.
--
-- Exp is PyTorch's documented example (saves its output); the others misbehave on purpose: a backward that
-- runs another backward, one that recurses without end, gradients of the wrong shape, dtype or type, a
-- backward that raises, an output that aliases the input. Each must give a clear error or a right result.
-- (A backward runs with grad mode off, as in PyTorch: Reentrant and Recursive record under enable_grad.)
return [[
local Function = tl.autograd.Function
F.Exp = Function { name = "Exp",
  forward = function(ctx, x) local y = x:exp(); ctx:save_for_backward(y); return y end,
  backward = function(ctx, g) return g * ctx.saved_tensors[1] end }
F.Square = Function { name = "Square",
  forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
  backward = function(ctx, g) return g * 2 * ctx.saved_tensors[1] end }
F.MulAdd = Function { name = "MulAdd",
  forward = function(ctx, a, b) ctx:save_for_backward(a, b); return a * b, a + b end,
  backward = function(ctx, gp, gs)
    local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
    return gp * b + gs, gp * a + gs
  end }
F.Alias = Function { name = "Alias",
  forward = function(ctx, x) return x end,
  backward = function(ctx, g) return g end }
F.Reentrant = Function { name = "Reentrant",
  forward = function(ctx, x) return x * 1 end,
  backward = function(ctx, g)
    tl.enable_grad(function()
      local z = tl.ones(3, { dtype = "float64", requires_grad = true })
      local s = (z * z):sum()
      s:backward()
      if z.grad:sum():item() ~= 6 then error("Reentrant: the inner backward gave a wrong gradient") end
    end)
    return g
  end }
F.Recursive = Function { name = "Recursive",
  forward = function(ctx, x) ctx.x = x:detach():requires_grad_(); return x * 1 end,
  backward = function(ctx, g)
    tl.enable_grad(function() F.Recursive(ctx.x):sum():backward() end)
    return g
  end }
F.WrongShape = Function { name = "WrongShape",
  forward = function(ctx, x) return x * 2 end,
  backward = function(ctx, g) return tl.ones(7, 3, { dtype = g.dtype }) end }
F.WrongDtype = Function { name = "WrongDtype",
  forward = function(ctx, x) return x * 2 end,
  backward = function(ctx, g) return g:to(g.dtype == "float64" and "float32" or "float64") end }
F.WrongType = Function { name = "WrongType",
  forward = function(ctx, x) return x * 2 end,
  backward = function(ctx, g) return 42 end }
F.Raises = Function { name = "Raises",
  forward = function(ctx, x) return x * 2 end,
  backward = function(ctx, g) error("Raises: backward failed on purpose") end }
F.NilGrad = Function { name = "NilGrad",
  forward = function(ctx, x) return x * 2 end,
  backward = function(ctx, g) return nil end }
F.NoTensor = Function { name = "NoTensor",
  forward = function(ctx, x) return 5 end,
  backward = function(ctx) return nil end }
F.ForwardRaises = Function { name = "ForwardRaises",
  forward = function(ctx, x) error("ForwardRaises: forward failed on purpose") end,
  backward = function(ctx, g) return g end }
F.KeepsGraph = Function { name = "KeepsGraph",
  forward = function(ctx, x)
    ctx.self, ctx.input = ctx, x
    local y = x:exp()
    ctx:save_for_backward(y, x)
    return y
  end,
  backward = function(ctx, g) return g * ctx.saved_tensors[1] end }
F.Names = { "Exp", "Square", "Alias", "Reentrant", "Recursive", "WrongShape", "WrongDtype", "WrongType", "Raises",
  "NilGrad", "NoTensor", "ForwardRaises", "KeepsGraph" }]]
