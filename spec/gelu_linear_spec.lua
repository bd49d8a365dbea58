-- tl.gelu_linear: linear(gelu(pre), W, b) as one node keeping pre, not gelu(pre): values against float64 Lua
-- loops, gradients by finite differences, the gated backward, the memory it keeps, bad input.
local tl = require("tlua")
local ref = require("helpers.reference")
local trace = require("helpers.trace")

local GELU = { none = ref.gelu, tanh = ref.gelu_tanh }

local function flat(t) return ref.flatten(t:to("cpu"):double():totable()) end

-- out[r][o] = sum_i gelu(pre[r][i]) W[o][i] + b[o], in float64 Lua
local function reference(pre, W, b, rows, n_in, n_out, form)
  local out = {}
  for r = 1, rows do
    for o = 1, n_out do
      local s = b and b[o] or 0
      for i = 1, n_in do s = s + GELU[form](pre[(r - 1) * n_in + i]) * W[(o - 1) * n_in + i] end
      out[#out + 1] = s
    end
  end
  return out
end

local function randoms(rng, n)
  local t = {}
  for i = 1, n do t[i] = 2 * rng:normal() end
  return t
end

describe("gelu_linear", function()
  for _, form in ipairs({ "none", "tanh" }) do
    for _, with_bias in ipairs({ true, false }) do
      it(("matches float64 Lua loops (%s form%s), on a 3-D pre"):format(form, with_bias and ", bias" or ""), function()
        local rng = ref.rng(form == "tanh" and 3 or 4)
        local pre, W, b = randoms(rng, 2 * 3 * 7), randoms(rng, 5 * 7), with_bias and randoms(rng, 5) or nil
        local out = tl.gelu_linear(tl.tensor(pre, { dtype = "float64" }):view(2, 3, 7),
          tl.tensor(W, { dtype = "float64" }):view(5, 7), b and tl.tensor(b, { dtype = "float64" }),
          { approximate = form })
        assert.are.same({ 2, 3, 5 }, out.shape)
        local expected, got = reference(pre, W, b, 6, 7, 5, form), flat(out)
        for i = 1, #expected do assert.is_true(math.abs(expected[i] - got[i]) <= 1e-12 * (1 + math.abs(expected[i]))) end
      end)
    end

    it("has every gradient right by finite differences (" .. form .. ")", function()
      tl.manual_seed(5)
      local pre = tl.randn(3, 6, { dtype = "float64", requires_grad = true })
      local W = tl.randn(4, 6, { dtype = "float64", requires_grad = true })
      local b = tl.randn(4, { dtype = "float64", requires_grad = true })
      assert.is_true(tl.autograd.gradcheck(function(p, w, c) return tl.gelu_linear(p, w, c, { approximate = form }) end,
        { pre, W, b }))
    end)
  end

  it("computes only the gradients asked for: gelu again only for the weight's, its derivative only for pre's",
    function()
      tl.manual_seed(6)
      local function counts(pre_grad, weight_grad)
        local pre = tl.randn(4, 8, { dtype = "float64", requires_grad = pre_grad })
        local W = tl.randn(3, 8, { dtype = "float64", requires_grad = weight_grad })
        local y = tl.gelu_linear(pre, W, nil, { approximate = "tanh" })
        local g = tl.ones(4, 3, { dtype = "float64" })
        return trace.op_counts(function() y:backward(g) end), pre, W
      end
      local only_w, pre1, w1 = counts(false, true)
      assert.are.equal(1, only_w.gelu_tanh)
      assert.is_nil(only_w.gelu_tanh_backward)
      assert.is_nil(pre1.grad)
      assert.is_not_nil(w1.grad)
      local only_pre, pre2, w2 = counts(true, false)
      assert.is_nil(only_pre.gelu_tanh)
      -- the tanh form's derivative by the GEMM's epilogue, no kernel of its own
      assert.is_nil(only_pre.gelu_tanh_backward)
      assert.are.equal(1, only_pre.linear_backward_input_dgelu)
      assert.is_not_nil(pre2.grad)
      assert.is_nil(w2.grad)
    end)

  it("keeps pre and not gelu(pre): the composed pair keeps one activation more", function()
    local function held(fused)
      local pre = tl.randn(64, 128, { requires_grad = true })
      local W = tl.randn(32, 128, { requires_grad = true })
      return trace.bytes_kept(function() return fused and tl.gelu_linear(pre, W) or tl.linear(tl.gelu(pre), W) end)
    end
    local fused, composed = held(true), held(false)
    assert.are.equal(64 * 128 * 4, composed - fused)
  end)

  it("refuses bad input, naming gelu_linear", function()
    local pre = tl.randn(3, 5)
    assert.has_error(function() tl.gelu_linear(pre, tl.randn(4, 6)) end,
      "gelu_linear: pre has 5 features but weight expects 6")
    assert.has_error(function() tl.gelu_linear(pre, tl.randn(5)) end, "gelu_linear: weight must be 2-D [out, in], got 1 dims")
    assert.has_error(function() tl.gelu_linear(pre, tl.randn(4, 5), tl.randn(3)) end,
      "gelu_linear: bias has 3 elements but weight has 4 rows")
    assert.has_error(function() tl.gelu_linear(pre, tl.randn(4, 5), tl.randn(4, 1)) end,
      "gelu_linear: bias must be 1-D [4], got 2 dims")
    assert.has_error(function() tl.gelu_linear(pre, tl.randn(4, 5), nil, { approximate = "fast" }) end,
      'gelu_linear: option approximate expected "tanh" or "none", got "fast"')
    local ok, message = pcall(tl.gelu_linear, pre, tl.randn(4, 5), nil, { aproximate = "tanh" })
    assert.is_false(ok)
    assert.truthy(message:find("unknown option 'aproximate'", 1, true), message)
  end)
end)

describe("gelu_linear on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of gelu_linear did not run")
    return
  end

  it("matches the CPU in float64 with every gradient", function()
    tl.manual_seed(9)
    local pre, W, b = tl.randn(6, 24, { dtype = "float64" }), tl.randn(10, 24, { dtype = "float64" }),
        tl.randn(10, { dtype = "float64" })
    local function run(device)
      local p, w, c = pre:to(device):detach():requires_grad_(), W:to(device):detach():requires_grad_(),
          b:to(device):detach():requires_grad_()
      local y = tl.gelu_linear(p, w, c, { approximate = "tanh" })
      y:square():sum():backward()
      return { flat(y), flat(p.grad), flat(w.grad), flat(c.grad) }
    end
    local cpu, gpu = run("cpu"), run("cuda")
    for k = 1, 4 do
      for i = 1, #cpu[k] do assert.is_true(math.abs(cpu[k][i] - gpu[k][i]) <= 1e-10 * (1 + math.abs(cpu[k][i]))) end
    end
  end)

  it("under bf16 autocast gives float32 parameter gradients close to the composed pair's", function()
    tl.manual_seed(10)
    local pre = tl.randn(64, 96, { device = "cuda" })
    local function run(fused)
      tl.manual_seed(11)
      local W = tl.randn(32, 96, { device = "cuda" }):mul_(0.1):requires_grad_()
      local p = pre:detach():requires_grad_()
      local y = tl.autocast("bfloat16", function()
        local h = p:bfloat16()
        return fused and tl.gelu_linear(h, W, nil, { approximate = "tanh" }) or tl.linear(tl.gelu_tanh(h), W)
      end)
      y:float():square():sum():backward()
      return W.grad, p.grad, y
    end
    local wf, pf, yf = run(true)
    local wc, pc, yc = run(false)
    assert.are.equal("float32", wf.dtype)
    assert.are.equal("bfloat16", yf.dtype)
    assert.is_true(((wf - wc):abs():max() / wc:abs():max()):item() < 1e-2)
    assert.is_true(((pf - pc):abs():max() / pc:abs():max()):item() < 1e-2)
    assert.is_true(((yf:float() - yc:float()):abs():max()):item() == 0)
  end)
end)
