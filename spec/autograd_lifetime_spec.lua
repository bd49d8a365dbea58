-- Autograd under stress: a backward started inside a custom backward, what custom Functions and
-- .grad keep alive (memory returns to the baseline, counted by tl.memory_stats("cpu")), and
-- gradients a custom backward returns that do not fit their input.
local tl = require("tlua")

-- CPU bytes held by live tensors after a full collection (tensor objects free their storage in
-- __gc, so collect twice: objects resurrected for finalizers go in the second cycle)
local function live_bytes()
  collectgarbage("collect")
  collectgarbage("collect")
  return tl.memory_stats("cpu").allocated
end

describe("a backward started inside a custom backward", function()
  -- x -> h = x * c^n (a chain of n nodes) -> out = F(h) + k * h, where F is the identity whose
  -- backward first runs h:sum():backward() over the shared chain. By hand:
  -- x.grad = (1 + k) c^n from the outer pass plus c^n from the inner one.
  local function run(n, c, k)
    local x = tl.tensor({ 0.5, -1.0, 2.0 }, { dtype = "float64" }):requires_grad_()
    local h = x
    for _ = 1, n do h = h * c end
    local F = tl.autograd.Function {
      name = "Reenter",
      forward = function(_, a) return a:clone() end,
      backward = function(_, g)
        tl.enable_grad(function() h:sum():backward(nil, { retain_graph = true }) end)
        return g
      end,
    }
    local out = F(h) + h * k
    out:sum():backward()
    return x.grad
  end

  it("keeps the outer pass's own state: gradients are exact for chains of any length", function()
    for n = 1, 7 do
      local c, k = 1.25, 3.0
      local g = run(n, c, k)
      local want = (1 + k) * c ^ n + c ^ n
      for i = 1, 3 do assert.near(want, g[i], 1e-12 * want) end
    end
  end)

  it("works when the inner backward is the one without retain_graph on a disjoint graph", function()
    local x = tl.tensor({ 1.0, 2.0 }, { dtype = "float64" }):requires_grad_()
    local other = tl.tensor({ 3.0 }, { dtype = "float64" }):requires_grad_()
    local F = tl.autograd.Function {
      name = "Nested",
      forward = function(_, a) return a * 2 end,
      backward = function(_, g)
        tl.enable_grad(function() (other * other):sum():backward() end)
        return g * 2
      end,
    }
    F(x):sum():backward()
    assert.are.same({ 2.0, 2.0 }, { x.grad[1], x.grad[2] })
    assert.are.equal(6.0, other.grad[1])
  end)
end)

describe("custom Functions keep no reference cycle", function()
  local Exp = tl.autograd.Function {
    name = "Exp",
    forward = function(ctx, x)
      local y = x:exp()
      ctx:save_for_backward(y)
      return y
    end,
    backward = function(ctx, g) return g * ctx.saved_tensors[1] end,
  }

  it("frees an output saved for backward when nobody runs backward", function()
    local x = tl.rand(1 << 16) -- 256 KiB
    local base = live_bytes()
    for _ = 1, 10 do
      local xi = x:clone():requires_grad_()
      local y = Exp(xi)
      assert.are.equal("Exp", y.grad_fn)
    end
    assert.are.equal(base, live_bytes())
  end)

  it("frees it after backward, and the gradient is exp(x)", function()
    local x = tl.tensor({ 0.0, 1.0, -2.0 }, { dtype = "float64" })
    local base = live_bytes()
    for _ = 1, 5 do
      local xi = x:clone():requires_grad_()
      Exp(xi):sum():backward()
      for i = 1, 3 do assert.near(math.exp(x[i]), xi.grad[i], 1e-12) end
    end
    assert.are.equal(base, live_bytes())
  end)

  it("lets the collector take ctx once the output is gone", function()
    local weak = setmetatable({}, { __mode = "v" })
    local Keep = tl.autograd.Function {
      forward = function(ctx, x)
        weak.ctx = ctx
        local y = x * 3
        ctx:save_for_backward(y, x)
        return y
      end,
      backward = function(_, g) return g * 3 end,
    }
    do
      local y = Keep(tl.ones(4):requires_grad_())
      assert.is_not_nil(y.grad_fn)
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_nil(weak.ctx)
  end)

  it("still sees an in-place change of a saved output, through the returned tensor", function()
    local x = tl.tensor({ 0.5 }, { dtype = "float64" }):requires_grad_()
    local y = Exp(x)
    y:fill_(7)
    assert.has_error(function() y:sum():backward() end,
      "Exp backward: saved tensor 1 was modified in place after it was saved (version 0, now 1); " ..
      "clone it before changing it")
  end)
end)

describe(".grad holds data, not a graph", function()
  it("keeps a gradient computed from the tensor itself without a cycle (memory returns)", function()
    local base = live_bytes()
    for _ = 1, 5 do
      local x = tl.ones(1000, { dtype = "float64" }):requires_grad_()
      x.grad = x * 2
      assert.are.equal(2.0, x.grad[1000])
      assert.is_false(x.grad.requires_grad)
      assert.is_nil(x.grad.grad_fn)
    end
    assert.are.equal(base, live_bytes())
  end)

  it("shares the assigned tensor's values", function()
    local x = tl.zeros(3):requires_grad_()
    local g = tl.tensor({ 1, 2, 3 }, { dtype = "float32" })
    x.grad = g
    g:fill_(5)
    assert.are.equal(5, x.grad[2])
  end)
end)

describe("gradients returned by a custom backward are checked", function()
  local function returning(grad_fn)
    return tl.autograd.Function {
      name = "Returns",
      forward = function(_, a, b) return a * b end,
      backward = function(_, g) return grad_fn(g) end,
    }
  end

  local a = tl.tensor({ 1.0, 2.0, 3.0, 4.0 }):requires_grad_()
  local b = tl.tensor({ 2.0 })

  it("refuses a gradient of another shape, naming the function and the input", function()
    local F = returning(function() return tl.ones(2, 2) end)
    assert.has_error(function() F(a, b):sum():backward() end,
      "Returns backward: the gradient of input 1 has shape [2, 2], expected [4] (the input's shape)")
    assert.is_nil(a.grad)
  end)

  it("refuses a gradient of another dtype", function()
    local F = returning(function() return tl.ones(4, { dtype = "float64" }) end)
    assert.has_error(function() F(a, b):sum():backward() end,
      "Returns backward: the gradient of input 1 has dtype float64, expected float32 (the input's dtype)")
    local G = returning(function() return tl.ones(4, { dtype = "int32" }) end)
    assert.has_error(function() G(a, b):sum():backward() end,
      "Returns backward: the gradient of input 1 has dtype int32, expected float32 (the input's dtype)")
    assert.is_nil(a.grad)
  end)

  it("names the input by its position among the tensor inputs", function()
    local c = tl.ones(3):requires_grad_()
    local F = tl.autograd.Function {
      name = "Two",
      forward = function(_, p, q) return p + q end,
      backward = function(_, g) return g, tl.ones(1) end,
    }
    assert.has_error(function() F(c, c:clone()):sum():backward() end,
      "Two backward: the gradient of input 2 has shape [1], expected [3] (the input's shape)")
  end)

  it("accepts nil and a right gradient", function()
    local F = returning(function(g) return g * 2, nil end)
    F(a, b):sum():backward()
    assert.are.same({ 2, 2, 2, 2 }, { a.grad[1], a.grad[2], a.grad[3], a.grad[4] })
    a.grad = nil
  end)
end)

describe("custom gradients on the wrong device #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the device check of custom gradients did not run")
    return
  end

  it("refuses a CPU gradient for a CUDA input, naming the devices", function()
    local F = tl.autograd.Function {
      name = "Moves",
      forward = function(_, a) return a * 2 end,
      backward = function(_, g) return g:cpu() * 2 end,
    }
    local x = tl.ones(3, { device = "cuda" }):requires_grad_()
    assert.has_error(function() F(x):sum():backward() end,
      "Moves backward: the gradient of input 1 is on cpu, expected cuda:0 (the input's device)")
    assert.is_nil(x.grad)
  end)
end)
