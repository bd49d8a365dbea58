-- In-place ops under autograd: gradients of the in-place chain on h = leaf * 1 against its
-- out-of-place twin and by gradcheck, and the errors that keep gradients right (leaf, views,
-- shared storage, saved tensors changed in place, matmul_'s w, layer_norm_'s zero weight).
local tl = require("tlua")
local ref = require("helpers.reference")
local pointwise_cases = require("helpers.pointwise_cases")
local gradcheck = tl.autograd.gradcheck
local H = require("helpers.inplace")
local is_tensor, seed_of, draw = H.is_tensor, H.seed_of, H.draw
local on, assert_fails_unchanged = H.on, H.assert_fails_unchanged
local row_of, column_of, pointwise_names = H.row_of, H.column_of, H.pointwise_names

-- ---------------------------------------------------------------------------------------------
-- Autograd. Each case: x (float64, shape [3, 4] unless said), operands (tensors that require
-- grad get a gradient; others are constants), the in-place chain on h = leaf * 1 and its
-- out-of-place twin.
local function f64(rng, shape, lo, hi) return draw(rng, shape, "float64", lo, hi) end
-- values in [-2, 2] at least 0.2 away from 0 (the kinks of relu and abs)
local function away_from_zero(rng, shape)
  return tl.tensor(ref.map(ref.random_table(rng, shape, -1.8, 1.8),
    function(v) return v >= 0 and v + 0.2 or v - 0.2 end), { dtype = "float64" })
end
-- values at least 0.1 away from the bounds +-0.5 of clamp_(-0.5, 0.5)
local function away_from_half(rng, shape)
  return tl.tensor(ref.map(ref.random_table(rng, shape, -1.5, 1.5), function(v)
    if math.abs(math.abs(v) - 0.5) < 0.1 then return v * 1.5 end
    return v
  end), { dtype = "float64" })
end
local function needs_grad(t) return t:requires_grad_() end

local AG = {}
local function ag(t) AG[#AG + 1] = t end
local function unary_ag(name, make)
  ag { label = name .. "_", op = name .. "_", x = make, operands = function() return {} end,
       inplace = function(h) return h[name .. "_"](h) end, twin = function(h) return h[name](h) end }
end
unary_ag("relu", away_from_zero)
unary_ag("abs", away_from_zero)
unary_ag("neg", function(rng, s) return f64(rng, s, -2, 2) end)
for _, name in ipairs(pointwise_names) do
  local pc = pointwise_cases[name]
  local lo, hi = math.max(pc.lo, -3), math.min(pc.hi, 3)
  if name == "log" or name == "sqrt" then lo = 0.5 end
  unary_ag(name, function(rng, s) return f64(rng, s, lo, hi) end)
end
ag { label = "clamp_(-0.5, 0.5)", op = "clamp_", x = away_from_half, operands = function() return {} end,
     inplace = function(h) return h:clamp_(-0.5, 0.5) end, twin = function(h) return h:clamp(-0.5, 0.5) end }
ag { label = "clamp_(nil, 0.1)", op = "clamp_", x = away_from_zero, operands = function() return {} end,
     inplace = function(h) return h:clamp_(nil, 0.1) end, twin = function(h) return h:clamp(nil, 0.1) end }
for _, name in ipairs({ "softmax", "log_softmax" }) do
  for _, dim in ipairs({ 1, -1 }) do
    ag { label = ("%s_(%d)"):format(name, dim), op = name .. "_",
         x = function(rng, s) return f64(rng, s, -2, 2) end, operands = function() return {} end,
         inplace = function(h) return h[name .. "_"](h, dim) end, twin = function(h) return h[name](h, dim) end }
  end
end
ag { label = "layer_norm_(weight, bias), both requiring grad", op = "layer_norm_",
     x = function(rng, s) return f64(rng, s, -2, 2) end,
     operands = function(rng) return { needs_grad(f64(rng, { 4 }, 0.5, 1.5)), needs_grad(f64(rng, { 4 }, -1, 1)) } end,
     inplace = function(h, w, b) return h:layer_norm_(w, b) end,
     twin = function(h, w, b) return tl.layer_norm(h, w, b) end }
ag { label = "layer_norm_() with eps 1e-3", op = "layer_norm_",
     x = function(rng, s) return f64(rng, s, -2, 2) end, operands = function() return {} end,
     inplace = function(h) return h:layer_norm_(nil, nil, 1e-3) end,
     twin = function(h) return tl.layer_norm(h, nil, nil, 1e-3) end }
ag { label = "layer_norm_(a constant negative weight) of a 3-dim x", op = "layer_norm_", shape = { 2, 3, 4 },
     x = function(rng, s) return f64(rng, s, -2, 2) end,
     operands = function(rng) return { f64(rng, { 4 }, -1.5, -0.5) } end,
     inplace = function(h, w) return h:layer_norm_(w) end, twin = function(h, w) return tl.layer_norm(h, w) end }
ag { label = "matmul_(a constant w)", op = "matmul_", x = function(rng, s) return f64(rng, s, -1, 1) end,
     operands = function(rng) return { f64(rng, { 4, 4 }, -1, 1) } end,
     inplace = function(h, w) return h:matmul_(w) end, twin = function(h, w) return h:matmul(w) end }
ag { label = "matmul_(a constant transposed w) of a 3-dim x", op = "matmul_", shape = { 2, 3, 4 },
     x = function(rng, s) return f64(rng, s, -1, 1) end,
     operands = function(rng) return { f64(rng, { 4, 4 }, -1, 1):transpose(1, 2) } end,
     inplace = function(h, w) return h:matmul_(w) end, twin = function(h, w) return h:matmul(w) end }
for _, name in ipairs({ "add", "sub", "mul", "div", "atan2" }) do
  local lo = (name == "div" or name == "atan2") and 0.5 or -2
  ag { label = name .. "_ of a row that requires grad", op = name .. "_",
       x = function(rng, s) return f64(rng, s, -2, 2) end,
       operands = function(rng, s) return { needs_grad(f64(rng, row_of(s), lo, 2)) } end,
       inplace = function(h, o) return h[name .. "_"](h, o) end, twin = function(h, o) return h[name](h, o) end }
  ag { label = name .. "_ of a column that requires grad", op = name .. "_",
       x = function(rng, s) return f64(rng, s, -2, 2) end,
       operands = function(rng, s) return { needs_grad(f64(rng, column_of(s), lo, 2)) } end,
       inplace = function(h, o) return h[name .. "_"](h, o) end, twin = function(h, o) return h[name](h, o) end }
  ag { label = name .. "_ of a constant tensor", op = name .. "_",
       x = function(rng, s) return f64(rng, s, -2, 2) end,
       operands = function(rng, s) return { f64(rng, s, lo, 2) } end,
       inplace = function(h, o) return h[name .. "_"](h, o) end, twin = function(h, o) return h[name](h, o) end }
  ag { label = name .. "_ of a number", op = name .. "_",
       x = function(rng, s) return f64(rng, s, -2, 2) end, operands = function() return {} end,
       inplace = function(h) return h[name .. "_"](h, 1.75) end, twin = function(h) return h[name](h, 1.75) end }
end
ag { label = "copy_ of a row that requires grad", op = "copy_",
     x = function(rng, s) return f64(rng, s, -2, 2) end,
     operands = function(rng, s) return { needs_grad(f64(rng, row_of(s), -2, 2)) } end,
     inplace = function(h, src) return h:copy_(src) end,
     twin = function(h, src) return h * 0 + src end }
ag { label = "copy_ of a constant", op = "copy_",
     x = function(rng, s) return f64(rng, s, -2, 2) end,
     operands = function(rng, s) return { f64(rng, s, -2, 2) } end,
     inplace = function(h, src) return h:copy_(src) end,
     twin = function(h, src) return h * 0 + src end }
ag { label = "fill_", op = "fill_", x = function(rng, s) return f64(rng, s, -2, 2) end,
     operands = function() return {} end,
     inplace = function(h) return h:fill_(1.5) end, twin = function(h) return h * 0 + 1.5 end }

local function grad_or_zeros(t)
  return t.grad or tl.zeros(t.shape, { dtype = t.dtype })
end

-- the gradients of sum(g * chain(leaf * 1, operands...)) for the leaf and each operand that requires
-- grad (fresh leaves copied from x0 and the operands), and the chain's output
local function gradients(chain, x0, operands, g)
  local leaf = x0:detach():clone():requires_grad_()
  local args = {}
  for i, o in ipairs(operands) do
    args[i] = (is_tensor(o) and o.requires_grad) and o:detach():clone():requires_grad_() or o
  end
  local y = chain(leaf * 1, table.unpack(args, 1, #operands))
  local loss = (y * g):sum()
  loss:backward()
  local grads = { grad_or_zeros(leaf) }
  for i, o in ipairs(operands) do
    if is_tensor(o) and o.requires_grad then grads[#grads + 1] = grad_or_zeros(args[i]) end
  end
  return grads, y
end

describe("in-place ops under autograd", function()
  describe("gradients equal the out-of-place chain's", function()
    for _, c in ipairs(AG) do
      it(c.label, function()
        local rng = ref.rng(seed_of(c.label))
        local shape = c.shape or { 3, 4 }
        local x0 = c.x(rng, shape)
        local operands = c.operands(rng, shape)
        local g = f64(rng, shape, -1, 1)
        local got, y = gradients(function(h, ...)
          local r = c.inplace(h, ...)
          assert.is_true(rawequal(h, r), c.op .. " returns x itself")
          assert.equal(c.op, h.grad_fn)
          return r
        end, x0, operands, g)
        local want, y_twin = gradients(c.twin, x0, operands, g)
        assert.tensor_near(y_twin:detach(), y:detach(), 1e-12, 1e-12)
        assert.equal(#want, #got)
        for i = 1, #want do
          assert.tensor_near(want[i], got[i], 1e-10, 1e-12, ("gradient %d of %d"):format(i, #want))
        end
      end)
    end
  end)

  describe("gradcheck (float64, finite differences)", function()
    for _, c in ipairs(AG) do
      it(c.label, function()
        local rng = ref.rng(seed_of(c.label .. "gradcheck"))
        local shape = c.shape or { 3, 4 }
        local x = c.x(rng, shape):requires_grad_()
        local operands = c.operands(rng, shape)
        local inputs = { x, table.unpack(operands) } -- constants (requiring no grad) pass unperturbed
        assert.is_true(gradcheck(function(t, ...) return c.inplace(t * 1, ...) end, inputs))
      end)
    end
  end)

  it("x that does not require grad takes a history from an operand that does (mul_ keeps x's old values)", function()
    local rng = ref.rng(31)
    local x0, o0, g = f64(rng, { 3, 4 }, -2, 2), f64(rng, { 1, 4 }, 0.5, 2), f64(rng, { 3, 4 }, -1, 1)
    for _, name in ipairs({ "add", "sub", "mul", "div" }) do
      local x, o = x0:clone(), o0:clone():requires_grad_()
      x[name .. "_"](x, o)
      assert.is_true(x.requires_grad)
      x:add_(1) -- after the op: x's old values must not be read from x at backward
      local loss = (x * g):sum()
      loss:backward()
      local o2 = o0:clone():requires_grad_()
      local loss2 = (x0[name](x0, o2) * g):sum()
      loss2:backward()
      assert.tensor_near(o2.grad, o.grad, 1e-10, 1e-12, name .. "_")
    end
  end)

  describe("refuses a leaf that requires grad, and works on it under no_grad", function()
    local W4 = f64(ref.rng(9), { 4, 4 }, -1, 1)
    for _, e in ipairs({
      { "add_", function(x) return x:add_(1) end, function(x) return x + 1 end },
      { "mul_", function(x) return x:mul_(tl.ones(4):double() * 2) end, function(x) return x * 2 end },
      { "neg_", function(x) return x:neg_() end, function(x) return -x end },
      { "exp_", function(x) return x:exp_() end, function(x) return x:exp() end },
      { "relu_", function(x) return x:relu_() end, function(x) return x:relu() end },
      { "clamp_", function(x) return x:clamp_(-0.5, 0.5) end, function(x) return x:clamp(-0.5, 0.5) end },
      { "softmax_", function(x) return x:softmax_(1) end, function(x) return x:softmax(1) end },
      { "log_softmax_", function(x) return x:log_softmax_(-1) end, function(x) return x:log_softmax(-1) end },
      { "layer_norm_", function(x) return x:layer_norm_() end, function(x) return tl.layer_norm(x) end },
      { "matmul_", function(x) return x:matmul_(W4) end, function(x) return x:matmul(W4) end },
      { "fill_", function(x) return x:fill_(3) end, function(x) return x * 0 + 3 end },
      { "copy_", function(x) return x:copy_(tl.ones(4):double()) end, function(x) return x * 0 + 1 end },
    }) do
      it(e[1], function()
        local rng = ref.rng(seed_of(e[1] .. "leaf"))
        local x = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
        assert_fails_unchanged(x, function() e[2](x) end, { e[1], "leaf" })
        assert.is_nil(x.grad_fn)
        local expected = e[3](x:detach():clone())
        tl.no_grad(function() assert.is_true(rawequal(x, e[2](x))) end)
        assert.tensor_near(expected, x:detach(), 1e-12, 1e-12)
        assert.is_true(x.requires_grad)
        assert.is_nil(x.grad_fn)
      end)
    end
  end)

  describe("saved tensors changed in place", function()
    local function setup(seed)
      local rng = ref.rng(seed)
      local x0 = f64(rng, { 3, 4 }, 0.5, 2)
      local leaf = x0:clone():requires_grad_()
      return leaf, leaf * 1, f64(rng, { 3, 4 }, -1, 1), x0
    end

    it("exp saves its result: its input may change in place afterwards", function()
      local leaf, h, g, x0 = setup(41)
      local y = h:exp()
      h:add_(1)
      local loss = (y * g):sum()
      loss:backward()
      local want = gradients(function(t) return t:exp() end, x0, {}, g)
      assert.tensor_near(want[1], leaf.grad, 1e-10, 1e-12)
    end)

    it("sin saves its input: a change of it in place fails at backward, naming sin", function()
      local leaf, h, g = setup(42)
      local y = h:sin()
      h:add_(1)
      local loss = (y * g):sum()
      assert.error_matches(function() loss:backward() end, { "sin", "modified in place" })
      assert.is_nil(leaf.grad)
    end)

    it("relu_ then softmax_ of the same x: backward fails naming relu_ (it saved its result)", function()
      local leaf, h = setup(43)
      h:relu_()
      h:softmax_(-1)
      local loss = h:sum()
      assert.error_matches(function() loss:backward() end, { "relu_", "modified in place" })
      assert.is_nil(leaf.grad)
    end)

    for _, op in ipairs({ "relu_", "sigmoid_", "tanh_", "exp_", "sqrt_", "softmax_", "log_softmax_", "layer_norm_" }) do
      it(op .. " saves its result: a later in-place change of x fails at backward, naming " .. op, function()
        local leaf, h = setup(seed_of(op))
        if op == "softmax_" or op == "log_softmax_" then h[op](h, -1) else h[op](h) end
        h:mul_(2)
        local loss = h:sum()
        assert.error_matches(function() loss:backward() end, { op, "modified in place" })
        assert.is_nil(leaf.grad)
      end)
    end

    for _, op in ipairs({ "mul_", "div_" }) do
      it(op .. " keeps a copy of x's old values: later changes of x do not change the gradients", function()
        local rng = ref.rng(seed_of(op .. "copy"))
        local x0, o0, g = f64(rng, { 3, 4 }, -2, 2), f64(rng, { 1, 4 }, 0.5, 2), f64(rng, { 3, 4 }, -1, 1)
        local name = op:sub(1, -2)
        local got = gradients(function(h, o)
          h[op](h, o)
          h:add_(3)
          h:mul_(0.5)
          return h
        end, x0, { needs_grad(o0:clone()) }, g)
        local want = gradients(function(h, o) return (h[name](h, o) + 3) * 0.5 end, x0, { needs_grad(o0:clone()) }, g)
        assert.tensor_near(want[1], got[1], 1e-10, 1e-12)
        assert.tensor_near(want[2], got[2], 1e-10, 1e-12)
      end)
    end

    for _, op in ipairs({ "gelu_", "silu_", "abs_", "clamp_", "log_", "sin_", "cos_" }) do
      it(op .. " keeps what it needs: later changes of x do not change the gradient", function()
        local rng = ref.rng(seed_of(op .. "later"))
        local x0, g = f64(rng, { 3, 4 }, 0.5, 2), f64(rng, { 3, 4 }, -1, 1)
        local name = op:sub(1, -2)
        local args = op == "clamp_" and { 0.3, 1.5 } or {}
        local got = gradients(function(h)
          h[op](h, table.unpack(args))
          h:add_(3)
          return h
        end, x0, {}, g)
        local want = gradients(function(h) return h[name](h, table.unpack(args)) + 3 end, x0, {}, g)
        assert.tensor_near(want[1], got[1], 1e-10, 1e-12)
      end)
    end

    -- ops that save their operand for x's gradient: the operand (drawn in [lo, hi]) changed in place
    for _, case in ipairs({
      { op = "mul_", operand = "other", seed = 44, shape = { 3, 4 }, lo = -2, hi = 2,
        change = function(o) o:add_(1) end },
      { op = "matmul_", operand = "w", seed = 45, shape = { 4, 4 }, lo = -1, hi = 1,
        change = function(w) w:mul_(2) end },
    }) do
      local op, operand = case.op, case.operand
      it(op .. " saves " .. operand .. " for x's gradient: a change of " .. operand
        .. " in place fails at backward, naming " .. op, function()
        local rng = ref.rng(case.seed)
        local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
        local o = f64(rng, case.shape, case.lo, case.hi)
        local h = leaf * 1
        h[op](h, o)
        case.change(o)
        local loss = h:sum()
        assert.error_matches(function() loss:backward() end, { op, "modified in place" })
      end)
    end

    it("matmul_ saves no x: x may change in place after it", function()
      local rng = ref.rng(46)
      local x0, w, g = f64(rng, { 3, 4 }, -2, 2), f64(rng, { 4, 4 }, -1, 1), f64(rng, { 3, 4 }, -1, 1)
      local got = gradients(function(h) h:matmul_(w) h:add_(1) return h end, x0, {}, g)
      assert.tensor_near(g:matmul(w:transpose(1, 2)), got[1], 1e-12, 1e-12) -- grad @ w^T
    end)
  end)

  describe("matmul_ by a w that requires grad", function()
    it("fails naming matmul_ and why, leaving x unchanged", function()
      local rng = ref.rng(47)
      local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
      local w = f64(rng, { 4, 4 }, -1, 1):requires_grad_()
      local h = leaf * 1
      assert_fails_unchanged(h, function() h:matmul_(w) end, { "matmul_", "w requires grad" })
      local x = f64(rng, { 3, 4 }, -2, 2) -- x requiring no grad: the same
      assert_fails_unchanged(x, function() x:matmul_(w) end, { "matmul_", "w requires grad" })
      -- under no_grad it is a plain product
      local expected = x:matmul(w:detach())
      tl.no_grad(function() x:matmul_(w) end)
      assert.tensor_near(expected, x, 1e-12, 1e-12)
    end)
  end)

  describe("views", function()
    it("an in-place op on a view of a tensor that requires grad fails, naming the view", function()
      local rng = ref.rng(51)
      local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
      local h = leaf * 1
      for _, v in ipairs({ h:narrow(1, 1, 2), h:select(2, 3), h:transpose(1, 2), leaf:narrow(2, 2, 2) }) do
        assert_fails_unchanged(v, function() v:exp_() end, { "exp_", "view" })
        assert_fails_unchanged(v, function() v:add_(1) end, { "add_", "view" })
      end
      assert.tensor_equal(leaf:detach(), h:detach())
    end)

    it("a view taken before its base changed in place cannot enter a new op", function()
      local rng = ref.rng(52)
      local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
      local h = leaf * 1
      local v = h:narrow(1, 1, 2)
      h:add_(1)
      assert.error_matches(function() return v * 2 end, { "view", "in place" })
      assert.error_matches(function() return v:exp() end, { "exp", "view", "in place" })
    end)

    it("a view used before its base changed in place gets the right gradient", function()
      local rng = ref.rng(53)
      local x0, g1, g2 = f64(rng, { 3, 4 }, -2, 2), f64(rng, { 2, 4 }, -1, 1), f64(rng, { 3, 4 }, -1, 1)
      local function run(inplace)
        local leaf = x0:clone():requires_grad_()
        local h = leaf * 1
        local z = h:narrow(1, 1, 2):exp()
        local h2
        if inplace then h:tanh_() h2 = h else h2 = h:tanh() end
        local loss = (z * g1):sum() + (h2 * g2):sum()
        loss:backward()
        return leaf.grad
      end
      assert.tensor_near(run(false), run(true), 1e-12, 1e-12)
    end)
  end)

  describe("x that requires no grad but shares its storage, with an operand that requires grad", function()
    it("a view of another tensor fails, leaving both unchanged", function()
      local rng = ref.rng(61)
      local base = f64(rng, { 3, 4 }, -2, 2)
      local before = base:clone()
      local o = f64(rng, { 4 }, -2, 2):requires_grad_()
      local v = base:narrow(1, 1, 2)
      assert_fails_unchanged(v, function() v:add_(o) end, { "add_", "shares" })
      assert_fails_unchanged(v, function() v:mul_(o) end, { "mul_", "shares" })
      assert.tensor_equal(before, base)
    end)

    it("a base whose view is alive fails", function()
      local rng = ref.rng(62)
      local base = f64(rng, { 3, 4 }, -2, 2)
      local v = base:narrow(1, 1, 2)
      local o = f64(rng, { 4 }, -2, 2):requires_grad_()
      assert_fails_unchanged(base, function() base:add_(o) end, { "add_", "shares" })
      assert.is_not_nil(v)
    end)

    it("a detached copy of the operand itself fails, leaving the operand unchanged", function()
      local rng = ref.rng(63)
      local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
      local x = leaf:detach()
      assert_fails_unchanged(x, function() x:add_(leaf) end, { "add_" })
      assert_fails_unchanged(x, function() x:copy_(leaf * 2) end, { "copy_" })
    end)
  end)

  it("layer_norm_ with a weight holding a zero fails at backward with a clear message", function()
    local rng = ref.rng(71)
    local leaf = f64(rng, { 3, 4 }, -2, 2):requires_grad_()
    local w = tl.tensor({ 1.5, 0, -0.5, 2 }, { dtype = "float64" })
    local h = leaf * 1
    local expected = tl.layer_norm(h:detach(), w)
    h:layer_norm_(w)
    assert.tensor_near(expected, h:detach(), 1e-12, 1e-12) -- the forward is fine
    local loss = h:sum()
    assert.error_matches(function() loss:backward() end, { "layer_norm_", "weight", "zero" })
  end)
end)
