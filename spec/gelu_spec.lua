-- nn.functional.gelu(x, {approximate}) and nn.GELU({approximate}): "none" (tl.gelu) and "tanh" (tl.gelu_tanh) against float64 Lua references.
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local ref = require("helpers.reference")

local gelu_tanh, gelu_tanh_derivative = ref.gelu_tanh, ref.gelu_tanh_derivative

local ops_of = require("helpers.trace").ops

local VALUES = { -6, -3.5, -2, -1.25, -0.5, -1e-3, 0, 1e-3, 0.3, 1, 1.7, 2.5, 4, 6 }

describe("nn.functional.gelu", function()
  it("approximate = 'tanh' is PyTorch's 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))", function()
    local x = tl.tensor(VALUES, { dtype = "float64" })
    local expected = {}
    for i, v in ipairs(VALUES) do expected[i] = gelu_tanh(v) end
    assert.tensor_near(expected, F.gelu(x, { approximate = "tanh" }), 1e-14, 1e-15)
    assert.tensor_near(expected, F.gelu(x:float(), { approximate = "tanh" }), 2e-6, 1e-7)
    assert.tensor_near(expected, F.gelu(x, "tanh"), 1e-14, 1e-15)
    assert.tensor_equal(tl.gelu_tanh(x), F.gelu(x, { approximate = "tanh" }))
    assert.are.same({ "gelu_tanh" }, ops_of(function() return F.gelu(x, { approximate = "tanh" }) end))
  end)

  it("approximate = 'none' (the default) is the exact form, which the tanh form differs from", function()
    local x = tl.tensor(VALUES, { dtype = "float64" })
    assert.tensor_equal(tl.gelu(x), F.gelu(x))
    assert.tensor_equal(tl.gelu(x), F.gelu(x, { approximate = "none" }))
    assert.tensor_equal(tl.gelu(x), F.gelu(x, {}))
    local exact = {}
    for i, v in ipairs(VALUES) do exact[i] = ref.gelu(v) end
    assert.tensor_near(exact, F.gelu(x), 1e-14, 1e-15)
    local gap = (F.gelu(x) - F.gelu(x, { approximate = "tanh" })):abs():max():item()
    assert.is_true(gap > 1e-4 and gap < 1e-2, "max |gelu - gelu_tanh| = " .. gap)
  end)

  it("differentiates the tanh form with its fused backward kernel", function()
    local x = tl.tensor(VALUES, { dtype = "float64", requires_grad = true })
    local y = F.gelu(x, { approximate = "tanh" })
    assert.are.equal("gelu_tanh", y.grad_fn)
    local events = tl.trace(function() y:sum():backward() end)
    local ran = {}
    for _, e in ipairs(events) do ran[e.op] = true end
    assert.is_true(ran.gelu_tanh_backward)
    local expected = {}
    for i, v in ipairs(VALUES) do expected[i] = gelu_tanh_derivative(v) end
    assert.tensor_near(expected, x.grad, 1e-13, 1e-14)
  end)

  it("refuses an unknown approximate or option, naming gelu", function()
    local x = tl.randn(3)
    assert.error_matches(function() F.gelu(x, { approximate = "fast" }) end,
      { "gelu", "approximate must be 'none' or 'tanh'", "'fast'" })
    assert.error_matches(function() F.gelu(x, { approximate = true }) end, { "gelu", "approximate", "boolean" })
    assert.error_matches(function() F.gelu(x, 3) end, { "gelu", "approximate", "number" })
    assert.error_matches(function() F.gelu(x, { approx = "tanh" }) end, { "gelu", "unknown option 'approx'" })
  end)
end)

describe("nn.GELU", function()
  it("takes {approximate = 'none' | 'tanh'} and prints it", function()
    local x = tl.randn(4, 5):double()
    assert.tensor_equal(tl.gelu(x), nn.GELU()(x))
    assert.tensor_equal(tl.gelu(x), nn.GELU({ approximate = "none" })(x))
    assert.tensor_equal(tl.gelu_tanh(x), nn.GELU({ approximate = "tanh" })(x))
    assert.tensor_equal(tl.gelu_tanh(x), nn.GELU_tanh()(x))
    assert.are.equal("GELU()", tostring(nn.GELU()))
    assert.are.equal("GELU(approximate='tanh')", tostring(nn.GELU({ approximate = "tanh" })))
    local seq = nn.Sequential(nn.Linear(5, 3), nn.GELU({ approximate = "tanh" }))
    assert.are.equal(2, #seq:parameters())
  end)

  it("refuses a bad approximate at construction, naming nn.GELU", function()
    assert.error_matches(function() nn.GELU({ approximate = "erf" }) end, { "nn.GELU", "'none' or 'tanh'", "'erf'" })
    assert.error_matches(function() nn.GELU({ approximat = "tanh" }) end, { "nn.GELU", "unknown option" })
  end)
end)
