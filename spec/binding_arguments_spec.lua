-- Arguments and messages of the C binding: tl.release of a non-tensor, copy_ of a number an integer tensor
-- cannot hold, method arguments counted after self (t:register_hook), custom_function naming itself once.
local tl = require("tlua")

-- fn raises an error whose message contains text (plain)
local function raises(fn, text)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error containing: " .. text)
  assert.truthy(tostring(err):find(text, 1, true), "message: " .. tostring(err) .. "\nlacks: " .. text)
end

describe("tl.release", function()
  it("drops a tensor's memory, once or twice", function()
    local t = tl.ones(3)
    tl.release(t)
    assert.is_true(tl.is_released(t))
    tl.release(t) -- a released tensor stays released
    assert.is_true(tl.is_released(t))
  end)

  it("refuses what is not a tensor, as is_released does", function()
    for _, v in ipairs({ 3, "t", {}, true }) do
      raises(function() tl.release(v) end,
        "release: argument 1 expected a tensor, got " .. type(v))
      raises(function() tl.is_released(v) end,
        "is_released: argument 1 expected a tensor, got " .. type(v))
    end
    raises(function() tl.release() end, "release: argument 1 expected a tensor, got no value")
  end)
end)

describe("copy_ into an integer tensor", function()
  it("refuses a number the dtype cannot hold, as fill_ does, and writes nothing", function()
    local t = tl.tensor({ 7, 8 }, { dtype = "int32" })
    raises(function() t:copy_(1e10) end,
      "copy_: value 1e+10 cannot be converted to int32 without overflow")
    raises(function() tl.copy_(t, -1e10) end,
      "copy_: value -1e+10 cannot be converted to int32 without overflow")
    raises(function() t:copy_(10000000000) end,
      "copy_: value 10000000000 cannot be converted to int32 without overflow")
    raises(function() t:copy_(0 / 0) end, "cannot be converted to int32")
    raises(function() t:fill_(1e10) end,
      "fill_: value 1e+10 cannot be converted to int32 without overflow")
    assert.same({ 7, 8 }, t:totable())
  end)

  it("takes a number that fits (a float truncates toward zero, as fill_)", function()
    local t = tl.zeros(2, { dtype = "int32" })
    t:copy_(-2.7)
    assert.same({ -2, -2 }, t:totable())
    local u = tl.zeros(2, { dtype = "int64" })
    u:copy_(1e10)
    assert.same({ 10000000000, 10000000000 }, u:totable())
  end)

  it("casts a tensor src as tl.cast does: truncated and saturated, NaN as 0", function()
    local src = tl.tensor({ 1e10, -1e10, 0 / 0, 2.9 }, { dtype = "float64" })
    local t = tl.zeros(4, { dtype = "int32" })
    t:copy_(src)
    assert.same({ 2147483647, -2147483648, 0, 2 }, t:totable())
    assert.same(t:totable(), src:to("int32"):totable())
  end)
end)

describe("method arguments count after self", function()
  it("t:register_hook(v) names v argument 1; the function form argument 2", function()
    local t = tl.ones(2, { requires_grad = true })
    raises(function() t:register_hook(1) end,
      "register_hook: argument 1 expected a function, got number")
    raises(function() tl.Tensor.register_hook(t, 1) end,
      "register_hook: argument 2 expected a function, got number")
  end)
end)

describe("custom_function's messages", function()
  it("name the function once: list entries by position, backward's result by what it is", function()
    local x = tl.tensor({ 1.0, 2.0 }, { requires_grad = true })
    local ok, err = pcall(tl.custom_function, "mine", { x, 5 }, { x:detach() * 2 }, function(g) return { g } end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("mine: inputs[2] expected a tensor, got number", 1, true), err)
    local y = tl.custom_function("bad", { x }, { x:detach() * 2 }, function() return 5 end)[1]
    ok, err = pcall(function() y:sum():backward() end)
    assert.is_false(ok)
    err = tostring(err)
    assert.truthy(err:find("bad backward: expected a table of input gradients, got number", 1, true), err)
    assert.is_nil(err:find("bad backward: bad backward", 1, true), err)
    assert.equal(6, (tl.tensor({ 1.0, 2.0 }) * 2):sum():item()) -- the engine still works
  end)
end)
