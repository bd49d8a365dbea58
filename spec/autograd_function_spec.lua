-- tl.autograd.Function over Lua tables of tensors: arguments and results as (nested) tables,
-- needs_input_grad and saved tensors in the structure of the arguments, gradients in the
-- structure of the outputs and inputs, nodes of more than 4 inputs (64 tensors in a table),
-- the error messages (no-grad reasons naming the function, wrong gradient structures).
local tl = require("tlua")

local function randn(...)
  return tl.randn(...):double()
end

local function leaf(...)
  return randn(...):requires_grad_()
end

local function T(m)
  return m:transpose(1, 2)
end

-- Lua reference of d sum(A @ B) / dA and / dB: dA[i][k] = sum_j B[k][j], dB[k][j] = sum_i A[i][k]
local function sum_matmul_grads(A, B)
  local n, k, m = A.shape[1], A.shape[2], B.shape[2]
  -- a rows x cols table of value(r, c)
  local function table_of(rows, cols, value)
    local t = {}
    for r = 1, rows do
      t[r] = {}
      for c = 1, cols do t[r][c] = value(r, c) end
    end
    return t
  end
  -- term(1) + ... + term(count), in that order
  local function sum_of(count, term)
    local s = 0
    for i = 1, count do s = s + term(i) end
    return s
  end
  local dA = table_of(n, k, function(_, kk) return sum_of(m, function(j) return B[kk][j] end) end)
  local dB = table_of(k, m, function(kk, _) return sum_of(n, function(i) return A[i][kk] end) end)
  return dA, dB
end

-- Cs[g] = As[g] @ Bs[g]; backward computes only the gradients asked for
local GroupMM = tl.autograd.Function {
  name = "GroupMM",
  forward = function(ctx, As, Bs)
    ctx:save_for_backward(As, Bs)
    local Cs = {}
    for g = 1, #As do Cs[g] = As[g]:matmul(Bs[g]) end
    return Cs
  end,
  backward = function(ctx, gCs)
    local As, Bs = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local needA, needB = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
    local gA, gB = {}, {}
    for g = 1, #As do
      if needA[g] then gA[g] = gCs[g]:matmul(T(Bs[g])) end
      if needB[g] then gB[g] = T(As[g]):matmul(gCs[g]) end
    end
    return gA, gB
  end,
}

describe("autograd.Function over tables of tensors", function()
  before_each(function() tl.manual_seed(20240611) end)

  it("differentiates F({A1}, {B1}) (the reference report) against d sum(A@B)", function()
    local A1, B1 = leaf(2, 3), leaf(3, 4)
    local Cs = GroupMM({ A1 }, { B1 })
    assert.are.equal(1, #Cs)
    assert.is_true(Cs[1].requires_grad)
    assert.are.equal("GroupMM", Cs[1].grad_fn)
    assert.tensor_near(A1:detach():matmul(B1:detach()), Cs[1], 1e-12, 1e-12)
    Cs[1]:sum():backward()
    local dA, dB = sum_matmul_grads(A1, B1)
    assert.tensor_near(dA, A1.grad, 1e-12, 1e-12)
    assert.tensor_near(dB, B1.grad, 1e-12, 1e-12)
  end)

  it("matches the ordinary ops on three groups of different sizes, with a weighted loss", function()
    local sizes = { { 2, 3, 4 }, { 1, 5, 2 }, { 3, 1, 3 } }
    local As, Bs, refA, refB = {}, {}, {}, {}
    for g, s in ipairs(sizes) do
      As[g], Bs[g] = leaf(s[1], s[2]), leaf(s[2], s[3])
      refA[g] = As[g]:detach():clone():requires_grad_()
      refB[g] = Bs[g]:detach():clone():requires_grad_()
    end
    local Cs = GroupMM(As, Bs)
    local loss, ref = nil, nil
    for g = 1, #sizes do
      local w = tl.arange(1, sizes[g][3] + 1):double() * g
      local term = (Cs[g] * w):sum()
      local ref_term = (refA[g]:matmul(refB[g]) * w):sum()
      loss, ref = loss and loss + term or term, ref and ref + ref_term or ref_term
    end
    loss:backward()
    ref:backward()
    for g = 1, #sizes do
      assert.tensor_near(refA[g].grad, As[g].grad, 1e-12, 1e-12)
      assert.tensor_near(refB[g].grad, Bs[g].grad, 1e-12, 1e-12)
    end
  end)

  it("walks nested tables in arguments and results", function()
    -- out = { x * y, { y * z } }; loss = sum(2 out[1]) + sum(3 out[2][1])
    local Nested = tl.autograd.Function {
      name = "Nested",
      forward = function(ctx, t)
        local x, y, z = t[1], t[2][1], t[2][2][1]
        ctx:save_for_backward(x, y, z)
        return { x * y, { y * z } }
      end,
      backward = function(ctx, g)
        local x, y, z = table.unpack(ctx.saved_tensors, 1, 3)
        local gp, gq = g[1], g[2][1]
        return { gp * y, { gp * x + gq * z, { gq * y } } }
      end,
    }
    local x, y, z = leaf(4), leaf(4), leaf(4)
    local out = Nested({ x, { y, { z } } })
    assert.is_true(out[1].requires_grad and out[2][1].requires_grad)
    ;((out[1] * 2):sum() + (out[2][1] * 3):sum()):backward()
    local xv, yv, zv = x:detach(), y:detach(), z:detach()
    for i = 1, 4 do
      assert.near(2 * yv[i], x.grad[i], 1e-12)
      assert.near(2 * xv[i] + 3 * zv[i], y.grad[i], 1e-12)
      assert.near(3 * yv[i], z.grad[i], 1e-12)
    end
  end)

  it("passes numbers and strings through, inside tables and beside them", function()
    local seen_args, seen_needs, seen_grads
    local Mixed = tl.autograd.Function {
      name = "Mixed",
      forward = function(ctx, scale, t, mode)
        seen_args, seen_needs = { scale, t, mode }, ctx.needs_input_grad
        return { t[1] * scale + t[4], "tag", 7 }, 5
      end,
      backward = function(ctx, ...)
        local g, five = ...
        seen_grads = { g[1], g[2], g[3], five, n = select("#", ...) }
        -- a value for a non-tensor argument or entry is ignored
        return "ignored", { g[1] * 2, 42, "ignored", g[1] }, {}
      end,
    }
    local x, y = leaf(3), leaf(3)
    local arg = { x, "label", 3, y }
    local out, five = Mixed(2, arg, "mode")
    assert.are.equal(5, five)
    assert.are.same({ "tag", 7 }, { out[2], out[3] })
    assert.is_true(rawequal(arg, seen_args[2]))
    assert.are.same({ 2, "mode" }, { seen_args[1], seen_args[3] })
    assert.are.same({ false, { true, false, false, true }, false }, seen_needs)
    out[1]:sum():backward()
    assert.tensor_near({ 1, 1, 1 }, seen_grads[1], 0, 0)
    assert.are.same({ nil, nil, nil }, { seen_grads[2], seen_grads[3], seen_grads[4] })
    assert.are.equal(2, seen_grads.n)
    assert.tensor_near({ 2, 2, 2 }, x.grad, 0, 0)
    assert.tensor_near({ 1, 1, 1 }, y.grad, 0, 0)
  end)

  it("mirrors the arguments in needs_input_grad and leaves gradients of the others out", function()
    local seen
    local Add = tl.autograd.Function {
      name = "Add",
      forward = function(ctx, pair, c, single, empty)
        seen = ctx.needs_input_grad
        return pair[1] + pair[2] + c + single[1]
      end,
      backward = function(ctx, g)
        local n = ctx.needs_input_grad
        return { n[1][1] and g or nil, n[1][2] and g or nil }, n[2] and g or nil,
          { n[3][1] and g or nil }, nil
      end,
    }
    local a, b, c, d = leaf(2), randn(2), leaf(2), randn(2)
    local out = Add({ a, b }, c, { d }, {})
    assert.are.same({ { true, false }, true, { false }, {} }, seen)
    ;(out * tl.tensor({ 3.0, 5.0 }, { dtype = "float64" })):sum():backward()
    assert.tensor_near({ 3, 5 }, a.grad, 0, 0)
    assert.tensor_near({ 3, 5 }, c.grad, 0, 0)
    assert.is_nil(b.grad)
    assert.is_nil(d.grad)
    -- with grad mode off every entry is false, and the result does not require grad
    local off = tl.no_grad(function() return Add({ a, b }, c, { d }, {}) end)
    assert.are.same({ { false, false }, false, { false }, {} }, seen)
    assert.is_false(off.requires_grad)
  end)

  it("takes nil entries and a whole nil for a table argument", function()
    local A1, A2, B1, B2 = leaf(2, 3), leaf(2, 3), leaf(3, 2), leaf(3, 2)
    local Partial = tl.autograd.Function {
      name = "Partial",
      forward = function(ctx, As, Bs)
        ctx:save_for_backward(As)
        return { As[1]:matmul(Bs[1]), As[2]:matmul(Bs[2]) }
      end,
      backward = function(ctx, gCs)
        local As = ctx.saved_tensors[1]
        return nil, { nil, T(As[2]):matmul(gCs[2]) }
      end,
    }
    local Cs = Partial({ A1, A2 }, { B1, B2 })
    ;(Cs[1]:sum() + Cs[2]:sum()):backward()
    assert.is_nil(A1.grad)
    assert.is_nil(A2.grad)
    assert.is_nil(B1.grad)
    local _, dB2 = sum_matmul_grads(A2, B2)
    assert.tensor_near(dB2, B2.grad, 1e-12, 1e-12)
  end)

  it("returns results as several tables, and gives backward one table of gradients each", function()
    local got
    local Split = tl.autograd.Function {
      name = "Split",
      forward = function(ctx, x)
        ctx:save_for_backward(x)
        return { x * 2, x * x }, { x:exp() }
      end,
      backward = function(ctx, g1, g2)
        got = { #g1, #g2 }
        local x = ctx.saved_tensors[1]
        return g1[1] * 2 + g1[2] * x * 2 + g2[1] * x:exp()
      end,
    }
    local x = leaf(3)
    local first, second = Split(x)
    assert.are.same({ "Split", "Split", "Split" }, { first[1].grad_fn, first[2].grad_fn, second[1].grad_fn })
    ;(first[1]:sum() + (first[2] * 3):sum() + (second[1] * 5):sum()):backward()
    assert.are.same({ 2, 1 }, got)
    local xv = x:detach()
    for i = 1, 3 do assert.near(2 + 6 * xv[i] + 5 * math.exp(xv[i]), x.grad[i], 1e-12) end
  end)

  it("returns new tables holding the connected tensors, forward's own untouched", function()
    local kept
    local Keep = tl.autograd.Function {
      name = "Keep",
      forward = function(ctx, x)
        kept = { x * 3, extra = "field" }
        return kept
      end,
      backward = function(ctx, g) return g[1] * 3 end,
    }
    local x = leaf(2)
    local out = Keep(x)
    assert.is_false(rawequal(out, kept))
    assert.are.equal("field", out.extra)
    assert.is_false(kept[1].requires_grad)
    assert.are.equal("Keep", out[1].grad_fn)
    assert.tensor_near(kept[1], out[1], 0, 0)
  end)

  it("runs a Function over 64 tensors in a table (128 inputs, 64 outputs) against each pair", function()
    local G = 64
    local Scale = tl.autograd.Function {
      name = "Scale",
      forward = function(ctx, Xs, Ws)
        ctx:save_for_backward(Xs, Ws)
        local out = {}
        for g = 1, #Xs do out[g] = Xs[g] * Ws[g]:exp() end
        return out
      end,
      backward = function(ctx, gs)
        local Xs, Ws = ctx.saved_tensors[1], ctx.saved_tensors[2]
        local gX, gW = {}, {}
        for g = 1, #Xs do
          gX[g] = gs[g] * Ws[g]:exp()
          gW[g] = gs[g] * Xs[g] * Ws[g]:exp()
        end
        return gX, gW
      end,
    }
    local Xs, Ws, rX, rW = {}, {}, {}, {}
    for g = 1, G do
      Xs[g], Ws[g] = leaf(3), leaf(3)
      rX[g], rW[g] = Xs[g]:detach():clone():requires_grad_(), Ws[g]:detach():clone():requires_grad_()
    end
    local out = Scale(Xs, Ws)
    assert.are.equal(G, #out)
    local loss
    for g = 1, G do
      local term = (out[g] * g):sum()
      loss = loss and loss + term or term
      ;(rX[g] * rW[g]:exp() * g):sum():backward()
    end
    loss:backward()
    for g = 1, G do
      assert.tensor_near(rX[g].grad, Xs[g].grad, 1e-12, 1e-12, "x " .. g)
      assert.tensor_near(rW[g].grad, Ws[g].grad, 1e-12, 1e-12, "w " .. g)
    end
  end)

  it("gradchecks a table-taking Function in float64, wrapped in a function of tensors", function()
    local function f(a1, a2, b1, b2)
      return GroupMM({ a1, a2 }, { b1, b2 })
    end
    assert.is_true(tl.autograd.gradcheck(f, { leaf(2, 3), leaf(1, 2), leaf(3, 2), leaf(2, 4) }))
    local Wrong = tl.autograd.Function {
      name = "Wrong",
      forward = function(ctx, t) ctx:save_for_backward(t) return { t[1] * t[2] } end,
      backward = function(ctx, g)
        local t = ctx.saved_tensors[1]
        return { g[1] * t[2], g[1] * t[2] } -- the second should be g * t[1]
      end,
    }
    local ok, message = tl.autograd.gradcheck(function(p, q) return Wrong({ p, q }) end,
      { leaf(3), leaf(3) }, { raise = false })
    assert.is_false(ok)
    assert.matches("input 2", message)
  end)

  it("backs twice with retain_graph, then says the graph was freed", function()
    local A1, B1 = leaf(2, 2), leaf(2, 2)
    local loss = GroupMM({ A1 }, { B1 })[1]:sum()
    loss:backward({ retain_graph = true })
    loss:backward()
    local dA, dB = sum_matmul_grads(A1, B1)
    for i = 1, 2 do
      for j = 1, 2 do dA[i][j], dB[i][j] = 2 * dA[i][j], 2 * dB[i][j] end
    end
    assert.tensor_near(dA, A1.grad, 1e-12, 1e-12)
    assert.tensor_near(dB, B1.grad, 1e-12, 1e-12)
    assert.error_matches(function() loss:backward() end, { "second time", "retain_graph" })
  end)
end)

describe("save_for_backward of tables", function()
  it("gives the tables back as saved, and refuses a tensor in them changed in place", function()
    local saved
    local Prod = tl.autograd.Function {
      name = "Prod",
      forward = function(ctx, t, z)
        ctx:save_for_backward(t, z, "note")
        saved = ctx.saved_tensors
        return t[1] * t[2][1] * z
      end,
      backward = function(ctx, g)
        local t, z = ctx.saved_tensors[1], ctx.saved_tensors[2]
        local x, y = t[1], t[2][1]
        return { g * y * z, { g * x * z } }, g * x * y
      end,
    }
    local x, y, z = leaf(2), leaf(2), leaf(2)
    local arg = { x, { y } }
    local out = Prod(arg, z)
    assert.is_true(rawequal(arg, saved[1]))
    assert.are.equal("note", saved[3])
    assert.are.equal(3, saved.n)
    tl.no_grad(function() y:add_(1) end)
    assert.has_error(function() out:sum():backward() end,
      "Prod backward: saved tensor 1 [2][1] was modified in place after it was saved " ..
      "(version 0, now 1); clone it before changing it")
    assert.is_nil(x.grad)
    -- the engine is usable after the error: a fresh call gives exact gradients
    local out2 = Prod({ x, { y } }, z)
    out2:sum():backward()
    local xv, yv, zv = x:detach(), y:detach(), z:detach()
    for i = 1, 2 do
      assert.near(yv[i] * zv[i], x.grad[i], 1e-12)
      assert.near(xv[i] * zv[i], y.grad[i], 1e-12)
      assert.near(xv[i] * yv[i], z.grad[i], 1e-12)
    end
  end)

  it("refuses a table that contains itself, naming the function and the argument", function()
    local loop = { tl.ones(1) }
    loop[2] = { loop }
    assert.has_error(function() GroupMM(loop, {}) end,
      "GroupMM: argument 1 [2][1] contains itself (a table of tensors must not hold a cycle)")
  end)
end)

describe("outputs that do not require grad name the reason", function()
  local DOES_NOT = "backward: the tensor does not require grad: "

  it("names the function when none of its inputs required grad", function()
    local As, Bs = { randn(2, 3) }, { randn(3, 2) }
    local Cs = GroupMM(As, Bs)
    assert.is_false(Cs[1].requires_grad)
    assert.is_nil(Cs[1].grad_fn)
    assert.error_matches(function() Cs[1]:backward(tl.ones(2, 2, { dtype = "float64" })) end,
      "^[^\n]*" .. DOES_NOT .. "it was computed by 'GroupMM', none of whose inputs required grad " ..
      "%(set requires_grad = true on the leaves to differentiate%)$")
    assert.error_matches(function() Cs[1]:sum():backward() end,
      DOES_NOT .. "it was computed from a result of 'GroupMM', none of whose inputs required grad")
    -- a Function of a plain tensor says the same
    local Double = tl.autograd.Function {
      name = "Double",
      forward = function(ctx, x) return x * 2 end,
      backward = function(ctx, g) return g * 2 end,
    }
    assert.error_matches(function() Double(tl.ones(1)):backward() end,
      DOES_NOT .. "it was computed by 'Double', none of whose inputs required grad")
  end)

  it("still says no_grad around the call, and detach for detached inputs", function()
    local A1, B1 = leaf(2, 2), leaf(2, 2)
    local Cs = tl.no_grad(function() return GroupMM({ A1 }, { B1 }) end)
    assert.is_false(Cs[1].requires_grad)
    assert.error_matches(function() Cs[1]:sum():backward() end,
      DOES_NOT .. "it was computed while gradients were disabled %(inside no_grad%)$")
    local Ds = GroupMM({ A1:detach() }, { B1:detach() })
    assert.error_matches(function() Ds[1]:sum():backward() end,
      DOES_NOT .. "it was detached from the graph %(detach%(%)%)$")
    -- one input requiring grad is enough, and the engine is usable after the errors
    local Es = GroupMM({ A1:detach() }, { B1 })
    Es[1]:sum():backward()
    local _, dB = sum_matmul_grads(A1, B1)
    assert.tensor_near(dB, B1.grad, 1e-12, 1e-12)
    assert.is_nil(A1.grad)
  end)
end)

describe("gradients of the wrong structure", function()
  local function returning(name, grads)
    return tl.autograd.Function {
      name = name,
      forward = function(ctx, t, x) return t[1] * 2 + t[2] + x end,
      backward = function(ctx, g) return grads(g) end,
    }
  end

  local function run(F)
    local a, b, x = leaf(3), leaf(3), leaf(3)
    local ok, err = pcall(function() F({ a, b }, x):sum():backward() end)
    assert.is_nil(a.grad) -- never half-written
    assert.is_nil(x.grad)
    return ok, err
  end

  local cases = {
    { "a tensor for a table", function(g) return g, g end,
      "TensorForTable backward: gradient for argument 1 must be a table %(the argument was a " ..
      "table%) or nil, got tensor$" },
    { "a table for a tensor", function(g) return { g, g }, { g } end,
      "TableForTensor backward: gradient for argument 2 must be a tensor or nil, got table$" },
    { "a string inside a table", function(g) return { g, "g" }, g end,
      "StringInside backward: gradient for argument 1 %[2%] must be a tensor or nil, got string$" },
    { "a number for a tensor", function(g) return { g }, 3 end,
      "NumberForTensor backward: gradient for argument 2 must be a tensor or nil, got number$" },
    { "more entries than the argument", function(g) return { g, g, g }, g end,
      "TooMany backward: gradient for argument 1 has 3 entries, the argument had 2$" },
    { "a wrong shape inside a table", function(g) return { g, tl.ones(2, { dtype = "float64" }) }, g end,
      "WrongShape backward: gradient for argument 1 %[2%] has shape %[2%], expected %[3%] " ..
      "%(the input's shape%)$" },
    { "a wrong dtype inside a table", function(g) return { g:float() }, g end,
      "WrongDtype backward: gradient for argument 1 %[1%] has dtype float32, expected float64 " ..
      "%(the input's dtype%)$" },
  }
  local names = { "TensorForTable", "TableForTensor", "StringInside", "NumberForTensor", "TooMany",
    "WrongShape", "WrongDtype" }
  for i, case in ipairs(cases) do
    it("refuses " .. case[1] .. ", naming the function and the argument", function()
      local ok, err = run(returning(names[i], case[2]))
      assert.is_false(ok)
      assert.matches(case[3], err)
    end)
  end

  it("leaves the engine usable: the same inputs then give exact gradients", function()
    local bad = returning("Bad", function(g) return g, g end)
    local good = returning("Good", function(g) return { g * 2, g }, g end)
    local a, b, x = leaf(3), leaf(3), leaf(3)
    assert.has_error(function() bad({ a, b }, x):sum():backward() end)
    good({ a, b }, x):sum():backward()
    assert.tensor_near({ 2, 2, 2 }, a.grad, 0, 0)
    assert.tensor_near({ 1, 1, 1 }, b.grad, 0, 0)
    assert.tensor_near({ 1, 1, 1 }, x.grad, 0, 0)
  end)
end)
