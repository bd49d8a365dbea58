-- tl.autocast: which ops change dtype (GEMMs and attention down, norms, softmax and losses up), values against float64 references of the rounded operands, float32 gradients, scopes and errors.
local tl = require("tlua")


-- float64 copy of a tensor rounded to dtype first: what an op sees after autocast's cast
local function rounded(t, dtype) return t:to(dtype):to("float64") end

local ops_of = require("helpers.trace").op_counts

describe("autocast", function()
  before_each(function() tl.manual_seed(7) end)

  for _, dtype in ipairs { "bfloat16", "float16" } do
    it("runs linear in " .. dtype .. " and gives float32 parameters float32 gradients", function()
      local x = tl.randn(5, 8)
      local w = tl.randn(6, 8, { requires_grad = true })
      local b = tl.randn(6, { requires_grad = true })
      local y = tl.autocast(dtype, tl.linear, x, w, b)
      assert.are.equal(dtype, y.dtype)
      -- reference: the rounded operands in float64, the result rounded once to dtype
      local want = tl.matmul(rounded(x, dtype), rounded(w, dtype):transpose(1, 2)) + rounded(b, dtype)
      assert.tensor_near(want, y:to("float64"), 1e-2, 1e-2)
      local g = tl.randn(5, 6)
      y:backward(g:to(dtype))
      assert.are.equal("float32", w.grad.dtype)
      assert.are.equal("float32", b.grad.dtype)
      -- dW = g^T x over the rounded values, computed in float64
      local dw = tl.matmul(rounded(g, dtype):transpose(1, 2), rounded(x, dtype))
      assert.tensor_near(dw, w.grad:to("float64"), 2e-2, 2e-2)
      assert.tensor_near(rounded(g, dtype):sum(1), b.grad:to("float64"), 2e-2, 2e-2)
    end)

    it("runs matmul and outer in " .. dtype .. " and leaves other ops alone", function()
      local a, b = tl.randn(4, 3), tl.randn(3, 5)
      tl.autocast(dtype, function()
        local m = tl.matmul(a, b)
        assert.are.equal(dtype, m.dtype)
        assert.tensor_near(tl.matmul(rounded(a, dtype), rounded(b, dtype)), m:to("float64"), 1e-2, 1e-2)
        assert.are.equal(dtype, tl.outer(tl.randn(3), tl.randn(4)).dtype)
        -- not on autocast's lists: computed in the inputs' dtype
        assert.are.equal("float32", (a + a).dtype)
        assert.are.equal("float32", tl.gelu(a).dtype)
        assert.are.equal("float32", (m:to("float32") + a:sum()).dtype)
        -- a bfloat16 GEMM result added to a float32 tensor promotes to float32
        assert.are.equal("float32", (m + tl.zeros(4, 5)).dtype)
      end)
    end)

    it("runs layer_norm, softmax, log_softmax and cross_entropy in float32 on " .. dtype .. " inputs", function()
      local x = tl.randn(4, 6):to(dtype)
      local target = tl.tensor({ 1, 6, 3, 2 }, { dtype = "int64" })
      tl.autocast(dtype, function()
        local ln = tl.layer_norm(x, tl.ones(6), tl.zeros(6), 1e-5)
        assert.are.equal("float32", ln.dtype)
        assert.are.equal("float32", tl.softmax(x, 2).dtype)
        assert.are.equal("float32", tl.log_softmax(x, 2).dtype)
        local loss = tl.cross_entropy(x, target)
        assert.are.equal("float32", loss.dtype)
        -- the loss of the float32 values x holds, not of a second rounding
        local lsm = tl.autocast(false, tl.log_softmax, x:to("float64"), 2):totable()
        local want = 0
        for r, t in ipairs { 1, 6, 3, 2 } do want = want - lsm[r][t] end
        assert.is_true(math.abs(loss:item() - want / 4) < 1e-5)
      end)
    end)
  end

  it("never casts float64", function()
    local a = tl.randn(3, 3, { dtype = "float64" })
    tl.autocast("bfloat16", function()
      assert.are.equal("float64", tl.matmul(a, a).dtype)
      assert.are.equal("float64", tl.softmax(a, 1).dtype)
    end)
  end)

  it("records the casts it makes (the trace shows them; none without autocast)", function()
    local x, w = tl.randn(4, 8), tl.randn(3, 8)
    local with = ops_of(function() tl.autocast("bfloat16", tl.linear, x, w) end)
    assert.are.equal(2, with.cast) -- x's (recorded) and w's (not: the node keeps w itself)
    local without = ops_of(function() tl.linear(x, w) end)
    assert.is_nil(without.cast)
  end)

  it("gives linear's and linear_cross_entropy's float32 parameters float32 gradients from the GEMMs, no cast", function()
    -- dW = g^T x in float32 from the bfloat16 operands: the float64 sum of the rounded operands
    -- within float32 rounding (a bfloat16 dW cast up would be off by about 4e-3)
    local x = tl.randn(6, 8):requires_grad_()
    local w, b = tl.randn(5, 8):requires_grad_(), tl.randn(5):requires_grad_()
    local c = tl.randn(6, 5)
    local out = tl.autocast("bfloat16", tl.linear, x, w, b)
    local events = tl.trace(function() (out:float() * c):sum():backward() end)
    for _, e in ipairs(events) do
      if e.op == "cast" then
        for _, shape in ipairs(e.shapes) do
          assert.is_false(#shape == 2 and shape[1] == 5 and shape[2] == 8, "a cast of the weight's shape ran")
        end
      end
    end
    assert.are.equal("float32", w.grad.dtype)
    assert.are.equal("float32", b.grad.dtype)
    local g, xr = c:bfloat16():double(), x:detach():bfloat16():double()
    assert.tensor_near(tl.matmul(g:t(), xr), w.grad:double(), 1e-6, 1e-6)
    assert.tensor_near(g:sum(1), b.grad:double(), 1e-6, 1e-6)
    -- the classifier: its float32 weight gets the float32 sums of its chunks
    local w2 = tl.randn(7, 8):requires_grad_()
    local t = tl.tensor({ 1, 7, 3, 3, 2, 6 })
    local loss = tl.autocast("bfloat16", tl.linear_cross_entropy, x:detach(), w2, t)
    events = tl.trace(function() loss:backward() end)
    assert.are.equal("float32", w2.grad.dtype)
    for _, e in ipairs(events) do assert.are_not.equal("cast", e.op == "cast" and e.shapes[1][1] == 7 and e.op or "") end
  end)

  it("reaches grouped_mm, conv2d and block_sparse_linear", function()
    tl.autocast("bfloat16", function()
      local a, b = tl.randn(6, 4), tl.randn(2, 4, 3)
      local offsets = tl.tensor({ 2, 6 }, { dtype = "int32" })
      assert.are.equal("bfloat16", tl.grouped_mm(a, b, offsets).dtype)
      local outs = tl.grouped_matmul({ tl.randn(2, 3), tl.randn(4, 3) }, { tl.randn(3, 5), tl.randn(3, 2) })
      assert.are.equal("bfloat16", outs[1].dtype)
      assert.are.equal("bfloat16", outs[2].dtype)
      local img, k = tl.randn(1, 2, 5, 5), tl.randn(3, 2, 3, 3)
      assert.are.equal("bfloat16", tl.conv2d(img, k).dtype)
      local lin = tl.nn.BlockSparseLinear(64, 64, { block = 32, density = 0.5 })
      assert.are.equal("bfloat16", lin(tl.randn(2, 64)).dtype)
      assert.are.equal("float32", lin.blocks.dtype)
      local q = tl.randn(2, 3, 5, 8, { requires_grad = true })
      local att = tl.scaled_dot_product_attention(q, q, q, { causal = true })
      assert.are.equal("bfloat16", att.dtype)
      att:to("float32"):sum():backward()
      assert.are.equal("float32", q.grad.dtype)
    end)
  end)

  describe("mixed-dtype backward (a gradient reaches each node in its output's dtype)", function()
    -- float64 references of the rounded operands; the gradients of an affine map are sums of
    -- products that bfloat16 holds within its rounding
    it("differentiates a bfloat16 product plus a float32 bias under autocast", function()
      local A = tl.randn(5, 7, { requires_grad = true })
      local W = tl.randn(7, 3, { requires_grad = true })
      local bias = tl.randn(3, { requires_grad = true })
      local out = tl.autocast("bfloat16", function() return A:matmul(W) + bias end)
      assert.are.equal("float32", out.dtype)
      local g = tl.randn(5, 3)
      out:backward(g)
      local A64, W64, g64 = rounded(A:detach(), "bfloat16"), rounded(W:detach(), "bfloat16"), rounded(g, "bfloat16")
      assert.are.equal("float32", A.grad.dtype)
      assert.tensor_near(g64:matmul(W64:transpose(1, 2)), A.grad:to("float64"), 3e-2, 3e-2)
      assert.tensor_near(A64:transpose(1, 2):matmul(g64), W.grad:to("float64"), 3e-2, 3e-2)
      assert.tensor_near(g:to("float64"):sum(1), bias.grad:to("float64"), 1e-5, 1e-5)
    end)

    it("differentiates bfloat16 products times float32 tensors without autocast", function()
      local a = tl.randn(4, 6, { requires_grad = true })
      local W = tl.randn(6, 5, { requires_grad = true })
      local b = tl.randn(4, 5, { requires_grad = true })
      local out = a:bfloat16():matmul(W:bfloat16()) * b
      assert.are.equal("float32", out.dtype)
      out:sum():backward()
      local prod = rounded(a:detach(), "bfloat16"):matmul(rounded(W:detach(), "bfloat16"))
      assert.tensor_near(prod, b.grad:to("float64"), 3e-2, 3e-2)
      local gb = rounded(b:detach(), "bfloat16")
      assert.tensor_near(gb:matmul(rounded(W:detach(), "bfloat16"):transpose(1, 2)), a.grad:to("float64"), 5e-2, 5e-2)
      assert.tensor_near(rounded(a:detach(), "bfloat16"):transpose(1, 2):matmul(gb), W.grad:to("float64"), 5e-2, 5e-2)
    end)

    it("differentiates grouped_mm and grouped_matmul plus a float32 bias under autocast", function()
      local a = tl.randn(6, 4, { requires_grad = true })
      local b = tl.randn(2, 4, 3, { requires_grad = true })
      local bias = tl.randn(3, { requires_grad = true })
      local offsets = tl.tensor({ 2, 6 }, { dtype = "int32" })
      local out = tl.autocast("bfloat16", function() return tl.grouped_mm(a, b, offsets) + bias end)
      out:sum():backward()
      -- d/db[g] = a[rows of g]^T 1, d/da[row] = 1 b[g]^T
      local a64, b64 = rounded(a:detach(), "bfloat16"), rounded(b:detach(), "bfloat16")
      local ones = tl.ones(6, 3, { dtype = "float64" })
      assert.tensor_near(a64:narrow(1, 1, 2):transpose(1, 2):matmul(ones:narrow(1, 1, 2)), b.grad[1]:to("float64"), 3e-2, 3e-2)
      assert.tensor_near(a64:narrow(1, 3, 4):transpose(1, 2):matmul(ones:narrow(1, 3, 4)), b.grad[2]:to("float64"), 3e-2, 3e-2)
      assert.tensor_near(ones:narrow(1, 1, 2):matmul(b64[1]:transpose(1, 2)), a.grad:narrow(1, 1, 2):to("float64"), 3e-2, 3e-2)
      assert.tensor_near(tl.full({ 3 }, 6, { dtype = "float64" }), bias.grad:to("float64"), 1e-6, 1e-6)

      local x, y = tl.randn(2, 3, { requires_grad = true }), tl.randn(3, 4, { requires_grad = true })
      local outs = tl.autocast("bfloat16", function() return tl.grouped_matmul({ x }, { y }) end)
      ;(outs[1] * tl.ones(2, 4)):sum():backward()
      assert.tensor_near(tl.ones(2, 4, { dtype = "float64" }):matmul(rounded(y:detach(), "bfloat16"):transpose(1, 2)),
        x.grad:to("float64"), 3e-2, 3e-2)
    end)

    it("trains nn.MoE with its default bias under autocast", function()
      local moe = tl.nn.MoE { dim = 8, hidden = 16, experts = 4, top_k = 2 }
      local x = tl.randn(10, 8)
      local out = tl.autocast("bfloat16", function() return moe(x) end)
      out:float():pow(2):mean():backward()
      local seen = 0
      for _, p in ipairs(moe:parameters()) do
        if p.grad then
          seen = seen + 1
          assert.are.equal(p.dtype, p.grad.dtype)
          local size = p.grad:abs():sum():item()
          assert.is_true(size == size and size < math.huge, "a finite gradient")
        end
      end
      assert.are.equal(#moe:parameters(), seen, "every parameter (b1 and b2 too) got a gradient")
    end)
  end)

  it("trains an MLP: float32 parameters, bfloat16 activations, the loss falls", function()
    local nn = tl.nn
    local model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    local opt = tl.optim.AdamW(model:parameters(), { lr = 1e-2 })
    local x = tl.randn(64, 10)
    local y = (x:narrow(2, 1, 3):argmax(2)):view(64)
    local first, last
    for step = 1, 60 do
      local loss = tl.autocast("bfloat16", function() return tl.cross_entropy(model(x), y) end)
      assert.are.equal("float32", loss.dtype)
      loss:backward()
      for _, p in ipairs(model:parameters()) do assert.are.equal("float32", p.grad.dtype) end
      opt:step()
      opt:zero_grad()
      if step == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(last < 0.5 * first, string.format("loss %g -> %g", first, last))
  end)

  describe("state", function()
    it("is off by default, restored after the function, and nests", function()
      assert.is_false(tl.autocast_dtype())
      tl.autocast("bfloat16", function()
        assert.are.equal("bfloat16", tl.autocast_dtype())
        tl.autocast("float16", function() assert.are.equal("float16", tl.autocast_dtype()) end)
        tl.autocast(false, function()
          assert.is_false(tl.autocast_dtype())
          assert.are.equal("float32", tl.matmul(tl.randn(2, 2), tl.randn(2, 2)).dtype)
        end)
        assert.are.equal("bfloat16", tl.autocast_dtype())
      end)
      assert.is_false(tl.autocast_dtype())
    end)

    it("returns the function's results", function()
      local a, b, c = tl.autocast("bfloat16", function(x, y) return x, y, x + y end, 1, 2)
      assert.are.same({ 1, 2, 3 }, { a, b, c })
    end)

    it("is restored when the function raises, the error unchanged", function()
      local ok, err = pcall(tl.autocast, "bfloat16", function() error("boom from inside") end)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("boom from inside"))
      assert.is_false(tl.autocast_dtype())
    end)

    it("has a scope form closed by <close> or close()", function()
      do
        local ac <close> = tl.autocast("bfloat16")
        assert.are.equal("bfloat16", tl.autocast_dtype())
        assert.are.equal("bfloat16", tl.matmul(tl.randn(2, 2), tl.randn(2, 2)).dtype)
      end
      assert.is_false(tl.autocast_dtype())
      local scope = tl.autocast("float16")
      assert.are.equal("float16", tl.autocast_dtype())
      scope:close()
      scope:close() -- twice is harmless
      assert.is_false(tl.autocast_dtype())
    end)

    it("is off while backward runs (a custom backward sees it off)", function()
      local seen
      local Probe = tl.autograd.Function {
        name = "probe",
        forward = function(ctx, x) return x * 1 end,
        backward = function(ctx, g)
          seen = tl.autocast_dtype()
          return g
        end,
      }
      local x = tl.randn(3, { requires_grad = true })
      tl.autocast("bfloat16", function() Probe(x):sum():backward() end)
      assert.is_false(seen)
      assert.is_false(tl.autocast_dtype())
    end)

    it("refuses dtypes other than bfloat16 and float16, and non-functions", function()
      assert.error_matches(function() tl.autocast("float32", function() end) end, { "autocast", "bfloat16", "float32" })
      assert.error_matches(function() tl.autocast("int8") end, { "autocast", "int8" })
      assert.error_matches(function() tl.autocast("bfloat16", 42) end, { "autocast", "function" })
      assert.is_false(tl.autocast_dtype())
    end)
  end)
end)

describe("mixed-dtype backward on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of mixed-dtype backward did not run")
    return
  end

  it("differentiates a bfloat16 product plus a float32 bias under autocast", function()
    tl.manual_seed(17)
    local A = tl.randn(5, 7, { device = "cuda", requires_grad = true })
    local W = tl.randn(7, 3, { device = "cuda", requires_grad = true })
    local bias = tl.randn(3, { device = "cuda", requires_grad = true })
    local out = tl.autocast("bfloat16", function() return A:matmul(W) + bias end)
    local g = tl.randn(5, 3, { device = "cuda" })
    out:backward(g)
    local A64, W64, g64 = rounded(A:detach():cpu(), "bfloat16"), rounded(W:detach():cpu(), "bfloat16"),
      rounded(g:cpu(), "bfloat16")
    assert.tensor_near(g64:matmul(W64:transpose(1, 2)), A.grad:cpu():to("float64"), 3e-2, 3e-2)
    assert.tensor_near(A64:transpose(1, 2):matmul(g64), W.grad:cpu():to("float64"), 3e-2, 3e-2)
    assert.tensor_near(g:cpu():to("float64"):sum(1), bias.grad:cpu():to("float64"), 1e-5, 1e-5)
  end)
end)
