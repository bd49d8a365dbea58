-- Tensor gradient hooks (register_hook, remove), retain_grad and tl.autograd.grad: the gradients they see and give against analytic derivatives, what they leave alone, and bad use.
local tl = require("tlua")

local function f64(values) return tl.tensor(values, { dtype = "float64" }) end
local function leaf(values) return f64(values):requires_grad_() end

describe("register_hook", function()
  it("a non-leaf's hook sees its gradient, and its replacement flows on", function()
    local x = leaf({ 1, 2, 3 })
    local y = x * x -- dz/dy = 3, dz/dx = 3 * 2x
    local seen
    y:register_hook(function(g)
      seen = g:clone()
      return g * 10
    end)
    ;(y * 3):sum():backward()
    assert.tensor_equal(f64({ 3, 3, 3 }), seen)
    assert.tensor_near(f64({ 60, 120, 180 }), x.grad, 0, 0)
  end)

  it("a leaf's hook runs once per pass on its whole gradient, before it is added into .grad", function()
    local x = leaf({ 1, -2 })
    local calls, seen = 0, nil
    x:register_hook(function(g)
      calls = calls + 1
      seen = g:clone()
      return g + 1
    end)
    local z = (x * x):sum() + (x * 4):sum() -- two uses: dz/dx = 2x + 4
    z:backward()
    assert.equal(1, calls)
    assert.tensor_equal(f64({ 6, 0 }), seen)
    assert.tensor_equal(f64({ 7, 1 }), x.grad)
    ;(x * 2):sum():backward() -- a second pass: the hook again, the sum added to .grad
    assert.equal(2, calls)
    assert.tensor_equal(f64({ 10, 4 }), x.grad)
  end)

  it("hooks run in the order added, each on the previous one's result; remove() stops one", function()
    local x = leaf({ 1 })
    local order = {}
    local h1 = x:register_hook(function(g) order[#order + 1] = "first" return g * 2 end)
    x:register_hook(function(g) order[#order + 1] = "second " .. g:item() return g + 1 end)
    tl.sum(x * 5):backward()
    assert.same({ "first", "second 10.0" }, order)
    assert.equal(11, x.grad:item())
    assert.is_true(h1.remove())
    assert.is_false(h1.remove())
    x.grad = nil
    order = {}
    ;(x * 5):sum():backward()
    assert.same({ "second 5.0" }, order)
    assert.equal(6, x.grad:item())
  end)

  it("an error in a hook stops the backward with its message", function()
    local x = leaf({ 1, 2 })
    x:register_hook(function() error("no gradients today") end)
    assert.error_matches(function() (x * 2):sum():backward() end, { "gradient hook", "no gradients today" })
    assert.is_nil(x.grad)
  end)

  it("a replacement of another shape or a non-tensor result is an error", function()
    local x = leaf({ 1, 2 })
    local y = x * 2
    y:register_hook(function() return f64({ 1, 2, 3 }) end)
    assert.error_matches(function() y:sum():backward() end, "returned a gradient of shape %[3%] for a gradient of shape %[2%]")
    local w = leaf({ 1 })
    w:register_hook(function() return 5 end)
    assert.error_matches(function() (w * 2):sum():backward() end, "expected to return nil or a tensor, got number")
  end)

  it("refuses a tensor that does not require grad and a non-function", function()
    assert.error_matches(function() f64({ 1 }):register_hook(function() end) end, "does not require grad")
    assert.error_matches(function() leaf({ 1 }):register_hook(42) end, "register_hook: argument 1 expected a function")
  end)
end)

describe("retain_grad", function()
  it("keeps a non-leaf's gradient, summed over passes; a leaf is unchanged", function()
    local x = leaf({ 1, 2 })
    local y = x * x
    assert.equal(y, y:retain_grad())
    local z = (y * y):sum() -- dz/dy = 2y
    z:backward({ retain_graph = true })
    assert.tensor_equal(f64({ 2, 8 }), y.grad)
    z:backward()
    assert.tensor_equal(f64({ 4, 16 }), y.grad)
    assert.equal(x, x:retain_grad())
    local other = x * 3 -- not retained: no grad kept
    other:sum():backward()
    assert.is_nil(other.grad)
  end)
end)

describe("autograd.grad", function()
  it("gives the gradients without touching any .grad", function()
    local x, w = leaf({ 1, 2, 3 }), leaf({ 0.5, -1, 2 })
    local z = (x * x * w):sum() -- dz/dx = 2 x w, dz/dw = x^2
    local g = tl.autograd.grad(z, { x, w })
    assert.tensor_near(f64({ 1, -4, 12 }), g[1], 0, 0)
    assert.tensor_near(f64({ 1, 4, 9 }), g[2], 0, 0)
    assert.is_nil(x.grad)
    assert.is_nil(w.grad)
  end)

  it("takes several outputs with grad_outputs, non-leaf and repeated inputs", function()
    local x = leaf({ 1, 2 })
    local y = x * 3
    local a, b = y * y, y:sum() -- da/dy = 2y (weighted by v), db/dy = 1 (weighted by 2)
    local v = f64({ 1, 10 })
    local g = tl.autograd.grad({ a, b }, { y, x, y }, { grad_outputs = { v, f64(2) } })
    -- d/dy = 2 y v + 2 = {2*3*1 + 2, 2*6*10 + 2}; d/dx = 3 d/dy
    assert.tensor_equal(f64({ 8, 122 }), g[1])
    assert.tensor_equal(f64({ 24, 366 }), g[2])
    assert.tensor_equal(g[1], g[3])
  end)

  it("runs only the part of the graph between the outputs and the inputs", function()
    local x, w = leaf({ 1 }), leaf({ 2 })
    local other_ran = false
    local wy = w * w
    wy:register_hook(function() other_ran = true end)
    local z = (x * 4):sum() + wy:sum()
    local g = tl.autograd.grad(z, x)
    assert.equal(4, g[1]:item())
    assert.is_false(other_ran)
  end)

  it("frees the graph unless retain_graph, as backward does", function()
    local x = leaf({ 1, 2 })
    local z = (x * x):sum()
    tl.autograd.grad(z, x, { retain_graph = true })
    assert.tensor_equal(f64({ 2, 4 }), tl.autograd.grad(z, x)[1])
    assert.error_matches(function() tl.autograd.grad(z, x) end, "freed")
  end)

  it("an unused input is an error unless allow_unused", function()
    local x, u = leaf({ 1 }), leaf({ 1 })
    local z = (x * 2):sum()
    assert.error_matches(function() tl.autograd.grad(z, { x, u }, { retain_graph = true }) end,
      "input 2 was not used")
    local g = tl.autograd.grad(z, { x, u }, { allow_unused = true })
    assert.equal(2, g[1]:item())
    assert.is_nil(g[2])
  end)

  it("rejects bad use with clear errors", function()
    local x = leaf({ 1, 2 })
    local z = (x * x):sum()
    assert.error_matches(function() tl.autograd.grad(z, x, { retain_grpah = true }) end,
      { "autograd.grad", "'retain_grpah'" })
    assert.error_matches(function() tl.autograd.grad(z, x, { create_graph = 1 }) end,
      "option create_graph expected a boolean")
    assert.error_matches(function() tl.autograd.grad(z, f64({ 1 })) end, "input 1 does not require grad")
    assert.error_matches(function() tl.autograd.grad(f64({ 1 }), x) end, "output 1 does not require grad")
    assert.error_matches(function() tl.autograd.grad(x * 2, x) end, "grad can be omitted only")
    assert.error_matches(function() tl.autograd.grad(z, x, { grad_outputs = { f64(1), f64(1) } }) end,
      "grad_outputs has 2 entries for 1 output")
    assert.error_matches(function() tl.autograd.grad(z, 5) end, "inputs expected a tensor or a list")
  end)

  describe("on CUDA #cuda", function()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the CUDA autograd.grad specs did not run")
      return
    end
    it("matches the analytic gradient and runs hooks", function()
      local x = tl.tensor({ 1, 2, 3 }, { dtype = "float64", device = "cuda" }):requires_grad_()
      local y = x * x
      local seen
      y:register_hook(function(g) seen = g:to("cpu") end)
      local g = tl.autograd.grad((y * 2):sum(), x)[1]
      assert.tensor_equal(f64({ 4, 8, 12 }), g:to("cpu"))
      assert.tensor_equal(f64({ 2, 2, 2 }), seen)
    end)
  end)
end)
