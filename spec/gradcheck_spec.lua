-- Walks the op table and gradchecks every differentiable op on fresh random
-- float64 inputs (broadcast shapes included); an op without a case fails.
local tl = require("tlua")
local gradcheck = tl.autograd.gradcheck

local function input(...)
  return tl.randn(...):double():requires_grad_()
end

local function positive(...)
  return (tl.rand(...):double() + 0.5):detach():requires_grad_()
end

-- away from the kinks of relu/abs/clamp so finite differences are valid
local function away_from_zero(...)
  local x = tl.randn(...):double()
  local sign = tl.where(x:ge(0), 1.0, -1.0)
  return (x + sign * 0.2):detach():requires_grad_()
end

-- one or more cases per op: {fn, inputs}
local cases = {
  neg = { { tl.neg, { input(3, 4) } } },
  abs = { { tl.abs, { away_from_zero(3, 4) } } },
  relu = { { tl.relu, { away_from_zero(3, 4) } } },
  pow_scalar = { { function(x) return x ^ 3 end, { input(3, 4) } },
                 { function(x) return x:pow(0.5) end, { positive(5) } } },
  clamp = { { function(x) return x:clamp(-0.5, 0.5) end,
              { tl.tensor({ -1.3, -0.2, 0.1, 0.4, 0.9, 2 }, { dtype = "float64", requires_grad = true }) } },
            { function(x) return x:clamp(nil, 0.3) end,
              { tl.tensor({ -1.3, 0.1, 0.9 }, { dtype = "float64", requires_grad = true }) } } },
  add = { { tl.add, { input(3, 1), input(1, 4) } }, { function(a) return a + 2 end, { input(2) } } },
  sub = { { tl.sub, { input(2, 3, 4), input(4) } } },
  mul = { { tl.mul, { input(3, 1), input(3, 4) } }, { function(a) return 3 * a end, { input(2) } } },
  pow = { { tl.pow, { positive(3, 4), input(4) } } },
  where = { { function(a, b) return tl.where(tl.tensor({ true, false, true }), a, b) end,
              { input(2, 3), input(1, 3) } } },
  -- through float32: finite differences need a coarser step and tolerance
  cast = { { function(x) return x:float() * 2 end, { input(3) }, { eps = 1e-3, atol = 1e-3, rtol = 1e-3 } },
           { function(x) return x:float():double() * x end, { input(3) }, { eps = 1e-3, atol = 1e-3, rtol = 1e-3 } } },
  max = { { function(x) return x:max() end, { input(3, 4) } },
          { function(x) return (x:max(2)) end, { input(3, 4) } } },
  min = { { function(x) return x:min() end, { input(3, 4) } },
          { function(x) return (x:min(1, true)) end, { input(3, 4) } } },
  softmax = { { function(x) return x:softmax(2) end, { input(3, 4) } },
              { function(x) return x:softmax(1) end, { input(3, 4) } } },
  log_softmax = { { function(x) return x:log_softmax(-1) end, { input(3, 4) } } },
  view = { { function(x) return x:view(4, 3) * x:view(4, 3) end, { input(3, 4) } } },
  reshape = { { function(x) return x:transpose(1, 2):reshape(-1) end, { input(3, 4) } } },
  transpose = { { function(x) return x:transpose(1, 3) end, { input(2, 3, 4) } } },
  permute = { { function(x) return x:permute(3, 1, 2) end, { input(2, 3, 4) } } },
  narrow = { { function(x) return x:narrow(2, 2, 2) end, { input(3, 4) } } },
  select = { { function(x) return x:select(1, -1) end, { input(3, 4) } } },
  squeeze = { { function(x) return x:squeeze(2) end, { input(3, 1, 4) } },
              { function(x) return x:squeeze() end, { input(1, 3, 1) } } },
  unsqueeze = { { function(x) return x:unsqueeze(1) end, { input(3) } } },
  expand = { { function(x) return x:expand(2, 3, 4) end, { input(3, 1) } } },
  flatten = { { function(x) return x:flatten() end, { input(2, 3, 2) } } },
  contiguous = { { function(x) return x:transpose(1, 2):contiguous() end, { input(3, 4) } } },
  clone = { { function(x) return x:clone() end, { input(3) } } },
}

-- pointwise ops: their line in helpers/pointwise_cases.lua, inputs drawn from its
-- range (kept within [-3, 3]), contiguous and transposed, with the row's default numbers and
-- its other ones (binary and ternary ones: broadcast shapes, and a Lua number in each place)
local function drawer(lo, hi)
  lo, hi = math.max(lo, -3), math.min(hi, 3)
  return function(...) return (tl.rand(...):double() * (hi - lo) + lo):detach():requires_grad_() end
end
local function middle(range) return (range[1] + range[2]) / 2 + 0.125 end
for name, case in pairs(require("helpers.pointwise_cases")) do
  local other = case.other or {}
  if case.ranges and #case.ranges == 3 then
    local d = { drawer(table.unpack(case.ranges[1])), drawer(table.unpack(case.ranges[2])),
                drawer(table.unpack(case.ranges[3])) }
    cases[name] = { { tl[name], { d[1](3, 1), d[2](1, 4), d[3](4) } },
                    { function(a, b, c) return tl[name](a, b, c, table.unpack(other)) end,
                      { d[1](2, 3), d[2](2, 3), d[3](3) } },
                    { function(a, c) return tl[name](a, middle(case.ranges[2]), c) end, { d[1](5), d[3](5) } },
                    { function(b) return tl[name](middle(case.ranges[1]), b, middle(case.ranges[3])) end,
                      { d[2](5) } } }
  elseif case.ranges then
    local da, db = drawer(table.unpack(case.ranges[1])), drawer(table.unpack(case.ranges[2]))
    local a_number, b_number = middle(case.ranges[1]), middle(case.ranges[2])
    cases[name] = { { tl[name], { da(3, 1), db(1, 4) } },
                    { tl[name], { da(2, 3, 4), db(4) } },
                    { function(a) return tl[name](a, b_number) end, { da(5) } },
                    { function(b) return tl[name](a_number, b) end, { db(5) } } }
  elseif case.lo then
    local draw = drawer(case.lo, case.hi)
    cases[name] = { { tl[name], { draw(3, 4) } },
                    { function(x) return tl[name](x:transpose(1, 2)) end, { draw(2, 3) } } }
    if case.other then
      table.insert(cases[name], { function(x) return tl[name](x, table.unpack(other)) end, { draw(3, 4) } })
    end
  end
end

-- value reductions: their line in helpers/reduce_cases.lua, over every element, one dim, several
-- dims with keepdim, and with the op's other number
local R = require("helpers.reduce_cases")
for name, case in pairs(R.cases) do
  local draw = drawer(case.lo, case.hi)
  cases[name] = { { function(x) return R.call(x, name) end, { draw(3, 4) } },
                  { function(x) return R.call(x, name, 2) end, { draw(3, 4) } } }
  for _, other in ipairs(case.number and (case.others or { case.other }) or { true }) do
    local last = case.number and { keepdim = true, [case.number] = other } or true
    table.insert(cases[name], { function(x) return R.call(x, name, { 1, 3 }, last) end, { draw(2, 3, 4) } })
  end
end

-- the cases families keep beside their specs (helpers/family_cases.lua)
for name, list in pairs(require("helpers.family_cases").gradcheck) do cases[name] = list end

describe("gradcheck of every differentiable op in the op table", function()
  tl.manual_seed(1234)
  for _, op in ipairs(tl.ops()) do
    if op.differentiable then
      it(op.name, function()
        local op_cases = cases[op.name]
        assert(op_cases, "differentiable op '" .. op.name .. "' has no gradcheck case")
        for _, case in ipairs(op_cases) do
          assert.is_true(gradcheck(case[1], case[2], case[3]))
        end
      end)
    end
  end
end)

describe("gradcheck itself", function()
  it("reports the worst element when a gradient is wrong", function()
    local wrong = tl.autograd.Function {
      name = "wrong_square",
      forward = function(ctx, x) ctx:save_for_backward(x) return x * x end,
      backward = function(ctx, g) local x = ctx.saved_tensors[1] return g * x * 3 end,
    }
    local ok, message = gradcheck(wrong, { input(3) }, { raise = false })
    assert.is_false(ok)
    assert.matches("input 1", message)
    assert.matches("analytical", message)
    assert.matches("numerical", message)
  end)
end)

describe("custom functions", function()
  local cube = tl.autograd.Function {
    name = "cube",
    forward = function(ctx, x, scale)
      ctx:save_for_backward(x)
      ctx.scale = scale
      return x * x * x * scale
    end,
    backward = function(ctx, g)
      local x = ctx.saved_tensors[1]
      return g * x * x * (3 * ctx.scale), nil
    end,
  }

  it("joins the graph like a built-in op and passes gradcheck", function()
    local x = input(4)
    local y = cube(x, 2)
    assert.are.equal("cube", y.grad_fn)
    assert.is_true(gradcheck(function(t) return cube(t, 2) end, { x }))
    local z = (cube(x, 1) + x):sum()
    z:backward()
    assert.tensor_near(x:detach() * x:detach() * 3 + 1, x.grad, 1e-12, 1e-12)
  end)

  it("sees needs_input_grad and may return nil gradients", function()
    local seen
    local pick = tl.autograd.Function {
      forward = function(ctx, a, b)
        seen = { ctx.needs_input_grad[1], ctx.needs_input_grad[2] }
        return a * b
      end,
      backward = function(ctx, g) return g, nil end,
    }
    local a, b = input(2), tl.randn(2):double()
    pick(a, b):sum():backward()
    assert.are.same({ true, false }, seen)
    assert.tensor_near({ 1, 1 }, a.grad, 0, 0)
  end)

  it("turns an error in backward into a Lua error naming the function", function()
    local bad = tl.autograd.Function {
      name = "bad_backward",
      forward = function(ctx, x) return x * 1 end,
      backward = function(ctx, g) error("deliberate") end,
    }
    local ok, err = pcall(function() bad(input(2)):sum():backward() end)
    assert.is_false(ok)
    assert.matches("bad_backward", err)
    assert.matches("deliberate", err)
  end)

  it("gradchecks a function with two outputs", function()
    local split = tl.autograd.Function {
      name = "sin_cos_like",
      forward = function(ctx, x) ctx:save_for_backward(x) return x:exp(), x * x end,
      backward = function(ctx, ga, gb)
        local x = ctx.saved_tensors[1]
        return ga * x:exp() + gb * x * 2
      end,
    }
    assert.is_true(gradcheck(function(x) local a, b = split(x) return { a, b } end, { input(3) }))
  end)
end)
