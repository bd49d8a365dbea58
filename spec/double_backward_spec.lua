-- create_graph (double backward): gradients of gradients against finite differences (gradgradcheck) for the ops with differentiable gradients, a gradient penalty's parameter gradients against finite differences, a Hessian-vector product against its closed form, and the error for an op without one.
local tl = require("tlua")
local F = tl.nn.functional
local gradgradcheck = tl.autograd.gradgradcheck

local function randn(...)
  return tl.randn({ ... }, { dtype = "float64" }):requires_grad_()
end

describe("gradgradcheck over the ops with differentiable gradients", function()
  local cases = {
    { "mul, add, sub with broadcasting", function(a, b) return a * b + a - b * b end, { { 3, 4 }, { 4 } } },
    { "div", function(a, b) return a / (b * b + 1) end, { { 2, 3 }, { 2, 3 } } },
    { "neg, exp, log, sqrt", function(a) return (-a):exp() + (a * a + 1):log() + (a * a + 2):sqrt() end, { { 5 } } },
    { "tanh, sigmoid", function(a) return a:tanh() * a:sigmoid() end, { { 6 } } },
    { "relu (away from 0)", function(a) return (a:relu() * a):sum() end, { { 7 } } },
    { "silu, gelu, erf", function(a) return a:silu() + a:gelu() + a:erf() * a end, { { 6 } } },
    { "pow", function(a) return (a * a + 1):pow(1.5) end, { { 4 } } },
    { "sum and mean over dims", function(a) return (a * a):sum(2, true) + (a:exp()):mean({ 1 }, true) end, { { 3, 4 } } },
    { "softmax and log_softmax", function(a) return a:softmax(2) * a + a:log_softmax(1) end, { { 3, 4 } } },
    { "linear (3-D input, bias)", function(x, w, b) return F.linear(x, w, b):tanh() end, { { 2, 3, 4 }, { 5, 4 }, { 5 } } },
    { "matmul, batched with broadcasting", function(a, b) return (a:matmul(b)):tanh() end, { { 2, 3, 4 }, { 4, 2 } } },
    { "views: reshape, transpose, permute, expand, unsqueeze", function(a)
      return a:reshape(4, 3):transpose(1, 2):unsqueeze(1):expand(2, 3, 4):permute(3, 1, 2):tanh() * 2
    end, { { 3, 4 } } },
    { "cast through float32 and back", function(a) return (a:to("float32") * 1):to("float64") * a end, { { 3 } } },
  }
  for _, case in ipairs(cases) do
    it(case[1], function()
      tl.manual_seed(7)
      local inputs = {}
      for i, shape in ipairs(case[3]) do inputs[i] = randn(table.unpack(shape)) end
      local tolerance = case[1]:find("float32") and { atol = 1e-3, rtol = 1e-2, eps = 1e-4 } or nil
      assert.is_true(gradgradcheck(case[2], inputs, tolerance))
    end)
  end
end)

describe("create_graph", function()
  it("a Hessian-vector product of sum(x^3) is 6 x v", function()
    local x = tl.tensor({ 1, -2, 0.5 }, { dtype = "float64" }):requires_grad_()
    local v = tl.tensor({ 2, 1, -3 }, { dtype = "float64" })
    local g = tl.autograd.grad((x * x * x):sum(), x, { create_graph = true })[1]
    assert.is_true(g.requires_grad)
    assert.tensor_near(tl.tensor({ 3, 12, 0.75 }, { dtype = "float64" }), g, 1e-15, 0)
    local hv = tl.autograd.grad((g * v):sum(), x)[1]
    assert.tensor_near(tl.tensor({ 12, -12, -9 }, { dtype = "float64" }), hv, 1e-14, 0)
  end)

  it("gradient-penalty training: the parameters' gradients of a penalty on the input gradient match finite differences", function()
    tl.manual_seed(11)
    local w1, b1, w2 = randn(5, 3), randn(5), randn(1, 5)
    local x = tl.randn(4, 3, { dtype = "float64" })
    -- penalty(w1, b1, w2) = mean over samples of (|d critic / d x| - 1)^2, the WGAN-GP term
    -- (enable_grad: gradcheck's finite differences run it under no_grad)
    local function penalty(a, b, c)
      return tl.enable_grad(function()
        local xi = x:detach():requires_grad_()
        local critic = F.linear(F.linear(xi, a, b):tanh(), c):sum()
        local gx = tl.autograd.grad(critic, xi, { create_graph = true })[1]
        local norm = ((gx * gx):sum(2) + 1e-12):sqrt()
        local d = norm - 1
        return (d * d):mean()
      end)
    end
    assert.is_true(tl.autograd.gradcheck(penalty, { w1, b1, w2 }))
    -- and one step of training lowers it
    local opt = tl.optim.SGD({ w1, b1, w2 }, { lr = 0.05 })
    local before = penalty(w1, b1, w2):item()
    opt:zero_grad()
    penalty(w1, b1, w2):backward()
    opt:step()
    assert.is_true(penalty(w1, b1, w2):item() < before)
  end)

  it("the gradient's graph is the gradient's: the first graph stays for later backwards", function()
    local x = randn(3)
    local y = (x * x):sum()
    local g = tl.autograd.grad(y, x, { create_graph = true })[1]
    g:sum():backward()
    assert.tensor_near(tl.full({ 3 }, 2, { dtype = "float64" }), x.grad, 0, 0)
    y:backward() -- retain_graph defaults to create_graph: the forward graph is still there
    assert.tensor_near(x:detach() * 2 + 2, x.grad, 1e-15, 0)
  end)

  it("an op without a differentiable gradient on the path is an error naming it", function()
    local x = randn(4)
    local y = x:cumsum(1):sum()
    assert.error_matches(function() tl.autograd.grad(y, x, { create_graph = true }) end,
      { "create_graph", "'cumsum'", "not differentiable yet" })
    -- without create_graph the same graph is fine
    assert.tensor_equal(tl.tensor({ 4, 3, 2, 1 }, { dtype = "float64" }), tl.autograd.grad(y, x)[1])
  end)

  describe("on CUDA #cuda", function()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the CUDA double-backward specs did not run")
      return
    end
    it("a Hessian-vector product on CUDA matches the CPU's", function()
      local xc = tl.tensor({ 0.3, -1.2, 2 }, { dtype = "float64" })
      local function hvp(device)
        local x = xc:to(device):detach():clone():requires_grad_()
        local g = tl.autograd.grad((x:tanh() * x):sum(), x, { create_graph = true })[1]
        return tl.autograd.grad((g * g):sum(), x)[1]:to("cpu")
      end
      assert.tensor_near(hvp("cpu"), hvp("cuda"), 1e-12, 1e-12)
    end)
  end)
end)
