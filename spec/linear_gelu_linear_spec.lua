-- tl.linear_gelu_linear: a feed-forward, linear(gelu(linear(x, W1, b1)), W2, b2), as one node on the GEMM epilogues:
-- values against float64 Lua loops, gradients by finite differences, the kernels each gradient runs, the memory it
-- keeps, autocast, bad input, the GPT example's fused_mlp; on CUDA both GEMM paths (cuBLASLt's fused epilogues on
-- aligned operands, the product then the epilogue's kernels otherwise) against the CPU.
local tl = require("tlua")
local ref = require("helpers.reference")
local trace = require("helpers.trace")

local GELU = { none = ref.gelu, tanh = ref.gelu_tanh }

local function flat(t) return ref.flatten(t:to("cpu"):double():totable()) end

local function randoms(rng, n)
  local t = {}
  for i = 1, n do t[i] = rng:normal() end
  return t
end

-- rows x n_out of sum_h gelu(sum_i x[r][i] W1[h][i] + b1[h]) W2[o][h] + b2[o], in float64 Lua
local function reference(x, W1, b1, W2, b2, rows, n_in, n_hidden, n_out, form)
  local out = {}
  for r = 1, rows do
    local h = {}
    for j = 1, n_hidden do
      local s = b1 and b1[j] or 0
      for i = 1, n_in do s = s + x[(r - 1) * n_in + i] * W1[(j - 1) * n_in + i] end
      h[j] = GELU[form](s)
    end
    for o = 1, n_out do
      local s = b2 and b2[o] or 0
      for j = 1, n_hidden do s = s + h[j] * W2[(o - 1) * n_hidden + j] end
      out[#out + 1] = s
    end
  end
  return out
end

local function f64(values, ...) return tl.tensor(values, { dtype = "float64" }):view(...) end

describe("linear_gelu_linear", function()
  for _, form in ipairs({ "none", "tanh" }) do
    for _, with_bias in ipairs({ true, false }) do
      it(("matches float64 Lua loops (%s form%s), on a 3-D input"):format(form, with_bias and ", biases" or ""),
        function()
          local rng = ref.rng(form == "tanh" and 13 or 14)
          local x, W1, W2 = randoms(rng, 2 * 3 * 5), randoms(rng, 7 * 5), randoms(rng, 4 * 7)
          local b1, b2 = with_bias and randoms(rng, 7) or nil, with_bias and randoms(rng, 4) or nil
          local out = tl.linear_gelu_linear(f64(x, 2, 3, 5), f64(W1, 7, 5), b1 and f64(b1, 7), f64(W2, 4, 7),
            b2 and f64(b2, 4), { approximate = form })
          assert.are.same({ 2, 3, 4 }, out.shape)
          local expected, got = reference(x, W1, b1, W2, b2, 6, 5, 7, 4, form), flat(out)
          for i = 1, #expected do
            assert.is_true(math.abs(expected[i] - got[i]) <= 1e-12 * (1 + math.abs(expected[i])))
          end
        end)
    end

    it("has every gradient right by finite differences (" .. form .. ")", function()
      tl.manual_seed(15)
      local function leaf(...) return tl.randn(...):double():requires_grad_() end
      for _, gelu_epilogue in ipairs({ false, true }) do
        assert.is_true(tl.autograd.gradcheck(function(x, w1, b1, w2, b2)
          return tl.linear_gelu_linear(x, w1, b1, w2, b2, { approximate = form, gelu_epilogue = gelu_epilogue })
        end, { leaf(3, 5), leaf(6, 5), leaf(6), leaf(4, 6), leaf(4) }))
      end
    end)
  end

  it("runs gelu's derivative inside a GEMM (tanh form) and only the products a gradient needs", function()
    tl.manual_seed(16)
    local function counts(wanted, gelu_epilogue)
      local function t(name, ...) return tl.randn(...):double():requires_grad_(wanted[name] or false) end
      local x, w1, b1, w2, b2 = t("x", 4, 8), t("w1", 6, 8), t("b1", 6), t("w2", 3, 6), t("b2", 3)
      local y
      local forward = trace.op_counts(function()
        y = tl.linear_gelu_linear(x, w1, b1, w2, b2, { approximate = "tanh", gelu_epilogue = gelu_epilogue })
      end)
      local backward = trace.op_counts(function() y:backward(tl.ones(4, 3, { dtype = "float64" })) end)
      return forward, backward, { x = x.grad, w1 = w1.grad, b1 = b1.grad, w2 = w2.grad, b2 = b2.grad }
    end
    local forward, all, grads = counts({ x = true, w1 = true, b1 = true, w2 = true, b2 = true })
    -- forward: gelu's kernel on the stored pre, or with gelu_epilogue the first GEMM's epilogue
    assert.are.same({ 2, 1 }, { forward.linear_forward, forward.gelu_tanh })
    assert.is_nil(forward.linear_gelu_forward)
    local fused_forward, fused_all = counts({ x = true, w1 = true, b1 = true, w2 = true, b2 = true }, true)
    assert.are.same({ 1, 1 }, { fused_forward.linear_gelu_forward, fused_forward.linear_forward })
    assert.is_nil(fused_forward.gelu_tanh)
    assert.are.same(all, fused_all)
    -- every gradient: gelu made again once for W2's; dpre by one GEMM; W and b of each linear by one GEMM
    assert.are.equal(1, all.gelu_tanh)
    assert.is_nil(all.gelu_tanh_backward)
    assert.are.equal(1, all.linear_backward_input_dgelu)
    assert.are.equal(2, all.linear_backward_weight)
    assert.is_nil(all.linear_backward_bias)
    assert.are.equal(1, all.linear_backward_input)
    for _, name in ipairs({ "x", "w1", "b1", "w2", "b2" }) do assert.is_not_nil(grads[name], name) end
    -- only W2's: gelu again and one GEMM, nothing through the first linear
    local _, only_w2, g2 = counts({ w2 = true })
    assert.are.same({ gelu_tanh = 1, linear_backward_weight = 1 }, {
      gelu_tanh = only_w2.gelu_tanh, linear_backward_weight = only_w2.linear_backward_weight })
    assert.is_nil(only_w2.linear_backward_input_dgelu)
    assert.is_nil(g2.x)
    -- only x's: no gelu kernel, no weight GEMM
    local _, only_x = counts({ x = true })
    assert.is_nil(only_x.gelu_tanh)
    assert.is_nil(only_x.linear_backward_weight)
    assert.is_nil(only_x.linear_backward_bias)
    assert.are.equal(1, only_x.linear_backward_input_dgelu)
    assert.are.equal(1, only_x.linear_backward_input)
    -- only b1's: its own sums over dpre
    local _, only_b1 = counts({ b1 = true })
    assert.are.equal(1, only_b1.linear_backward_bias)
    assert.is_nil(only_b1.linear_backward_weight)
  end)

  it("runs the exact form as linear, gelu, linear forward (with or without gelu_epilogue) and gelu_backward in backward",
    function()
    local x = tl.randn(4, 8, { requires_grad = true })
    local w1, w2 = tl.randn(6, 8), tl.randn(3, 6)
    local y
    local forward = trace.op_counts(function() y = tl.linear_gelu_linear(x, w1, nil, w2, nil) end)
    assert.are.same(forward, trace.op_counts(function()
      tl.linear_gelu_linear(x, w1, nil, w2, nil, { gelu_epilogue = true })
    end))
    assert.are.equal(1, forward.gelu)
    assert.are.equal(2, forward.linear_forward)
    assert.is_nil(forward.linear_gelu_forward)
    local backward = trace.op_counts(function() y:sum():backward() end)
    assert.are.equal(1, backward.gelu_backward)
  end)

  it("keeps the first linear's output and not the GELU's: the composed chain keeps one activation more", function()
    local function held(fused)
      local x = tl.randn(64, 32, { requires_grad = true })
      local w1, w2 = tl.randn(128, 32, { requires_grad = true }), tl.randn(16, 128, { requires_grad = true })
      return trace.bytes_kept(function()
        if fused then return tl.linear_gelu_linear(x, w1, nil, w2, nil, { approximate = "tanh" }) end
        return tl.linear(tl.gelu_tanh(tl.linear(x, w1)), w2)
      end)
    end
    local fused, composed = held(true), held(false)
    assert.are.equal(64 * 128 * 4, composed - fused)
  end)

  it("under bf16 autocast runs bf16 GEMMs and gives float32 parameter gradients close to the composed chain's",
    function()
      tl.manual_seed(17)
      local x0 = tl.randn(16, 32)
      local function run(fused)
        tl.manual_seed(18)
        local w1, b1 = (tl.randn(64, 32) * 0.2):requires_grad_(), (tl.randn(64) * 0.1):requires_grad_()
        local w2, b2 = (tl.randn(24, 64) * 0.2):requires_grad_(), (tl.randn(24) * 0.1):requires_grad_()
        local x = x0:detach():requires_grad_()
        local y = tl.autocast("bfloat16", function()
          if fused then return tl.linear_gelu_linear(x, w1, b1, w2, b2, { approximate = "tanh" }) end
          return tl.linear(tl.gelu_tanh(tl.linear(x, w1, b1)), w2, b2)
        end)
        y:float():square():sum():backward()
        return y, { x.grad, w1.grad, b1.grad, w2.grad, b2.grad }
      end
      local yf, gf = run(true)
      local yc, gc = run(false)
      assert.are.equal("bfloat16", yf.dtype)
      assert.is_true(((yf:float() - yc:float()):abs():max() / yc:float():abs():max()):item() < 2e-2)
      for i = 1, 5 do
        assert.are.equal("float32", gf[i].dtype)
        assert.is_true(((gf[i] - gc[i]):abs():max() / gc[i]:abs():max()):item() < 3e-2, "gradient " .. i)
      end
    end)

  it("refuses bad input, naming linear_gelu_linear", function()
    local x = tl.randn(3, 5)
    local function call(...)
      local args = table.pack(...)
      return function() tl.linear_gelu_linear(table.unpack(args, 1, args.n)) end
    end
    assert.has_error(call(x, tl.randn(4, 6), nil, tl.randn(2, 4)),
      "linear_gelu_linear: input has 5 features but weight1 expects 6")
    assert.has_error(call(x, tl.randn(4, 5), nil, tl.randn(2, 3)),
      "linear_gelu_linear: the hidden layer has 4 features but weight2 expects 3")
    assert.has_error(call(x, tl.randn(4, 5), tl.randn(3), tl.randn(2, 4)),
      "linear_gelu_linear: bias1 has 3 elements but weight1 has 4 rows")
    assert.has_error(call(x, tl.randn(4, 5), nil, tl.randn(2, 4), tl.randn(2, 1)),
      "linear_gelu_linear: bias2 must be 1-D [2], got 2 dims")
    assert.has_error(call(x, tl.randn(4, 5), nil, tl.randn(4)),
      "linear_gelu_linear: weight2 must be 2-D [out, in], got 1 dims")
    assert.has_error(call(x, tl.randn(4, 5, { dtype = "float64" }), nil, tl.randn(2, 4)),
      "linear: input is float32 but weight is float64")
    assert.has_error(call(x, tl.randn(4, 5), nil, tl.randn(2, 4), nil, { approximate = "fast" }),
      'linear_gelu_linear: option approximate expected "tanh" or "none", got "fast"')
    local bad_ok, bad_message = pcall(tl.linear_gelu_linear, x, tl.randn(4, 5), nil, tl.randn(2, 4), nil,
      { gelu_epilogue = "yes" })
    assert.is_false(bad_ok)
    assert.truthy(bad_message:find("gelu_epilogue", 1, true), bad_message)
    local ok, message = pcall(tl.linear_gelu_linear, x, tl.randn(4, 5), nil, tl.randn(2, 4), nil, { aprox = "tanh" })
    assert.is_false(ok)
    assert.truthy(message:find("unknown option 'aprox'", 1, true), message)
  end)

  it("is the GPT example's MLP with fused_mlp: the same loss and gradients in float64", function()
    package.path = "examples/gpt/?.lua;" .. package.path
    local gpt = require("model")
    local function run(fused)
      tl.manual_seed(7)
      local model = gpt.GPT(gpt.config { vocab = 11, context = 8, layers = 2, dim = 16, heads = 2, dtype = "float64",
        fused_mlp = fused, bias = true })
      tl.manual_seed(8)
      local x, y = tl.randint(1, 12, { 2, 8 }), tl.randint(1, 12, { 2, 8 })
      local _, loss = model(x, y)
      local ops = trace.op_counts(function() loss:backward() end)
      local grads = {}
      for i, p in ipairs(model:parameters()) do grads[i] = flat(p.grad) end
      return loss:item(), grads, ops
    end
    local loss_f, grads_f, ops_f = run(true)
    local loss_c, grads_c = run(false)
    assert.are.equal(2, ops_f.linear_backward_input_dgelu)
    assert.is_true(math.abs(loss_f - loss_c) <= 1e-12)
    for i = 1, #grads_c do
      for j = 1, #grads_c[i] do assert.is_true(math.abs(grads_f[i][j] - grads_c[i][j]) <= 1e-12) end
    end
  end)
end)

describe("linear_gelu_linear on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of linear_gelu_linear did not run")
    return
  end

  -- the CPU's and CUDA's values and gradients; sizes multiples of 8 take cuBLASLt's fused epilogues on CUDA
  -- (16-byte aligned rows), odd ones the product then the epilogue's kernels
  local function both(dtype, rows, n_in, n_hidden, n_out, tol, gelu_epilogue)
    tl.manual_seed(19)
    local values = { tl.randn(rows, n_in), tl.randn(n_hidden, n_in) * 0.3, tl.randn(n_hidden) * 0.1,
      tl.randn(n_out, n_hidden) * 0.3, tl.randn(n_out) * 0.1 }
    local g = tl.randn(rows, n_out)
    local function run(device)
      local t = {}
      for i, v in ipairs(values) do t[i] = v:to(device):to(dtype):detach():requires_grad_() end
      local y = tl.linear_gelu_linear(t[1], t[2], t[3], t[4], t[5], { approximate = "tanh", gelu_epilogue = gelu_epilogue })
      y:backward(g:to(device):to(dtype))
      local out = { flat(y) }
      for i = 1, 5 do out[i + 1] = flat(t[i].grad) end
      return out
    end
    local cpu, gpu = run("cpu"), run("cuda")
    for k = 1, #cpu do
      local scale = 0
      for i = 1, #cpu[k] do scale = math.max(scale, math.abs(cpu[k][i])) end
      for i = 1, #cpu[k] do
        assert.is_true(math.abs(cpu[k][i] - gpu[k][i]) <= tol * (1 + scale),
          ("%s result %d element %d: cpu %g cuda %g"):format(dtype, k, i, cpu[k][i], gpu[k][i]))
      end
    end
  end

  it("matches the CPU in float64 with every gradient (the epilogue's kernels)", function()
    both("float64", 6, 24, 40, 10, 1e-10)
    both("float64", 6, 24, 40, 10, 1e-10, true)
  end)
  for _, case in ipairs({ { "float32", 1e-4 }, { "bfloat16", 2e-2 }, { "float16", 5e-3 } }) do
    it("matches the CPU in " .. case[1] .. " on aligned sizes (cuBLASLt's fused epilogues)", function()
      both(case[1], 64, 32, 128, 48, case[2])
      both(case[1], 64, 32, 128, 48, case[2], true)
    end)
    it("matches the CPU in " .. case[1] .. " on odd sizes (the product, then the epilogue's kernels)", function()
      both(case[1], 7, 13, 21, 5, case[2])
    end)
  end
end)
