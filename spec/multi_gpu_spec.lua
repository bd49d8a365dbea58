-- Every GPU of one process runs the kernels that keep per-device state (tensor-core attention forward and backward, block-sparse, grouped GEMM, the elementwise kernels launched through the driver: function attributes, handles, workspaces set per device), each against a float64 reference computed on the CPU (#cuda; pending with fewer than two GPUs).
local tl = require("tlua")

local function f64(t) return t:to("cpu"):to("float64") end

-- softmax(q k^T / sqrt(D)) v in float64 on the CPU, heads folded: q [B, H, T, D]
local function attention_reference(q, k, v)
  local scores = tl.matmul(f64(q), f64(k):transpose(3, 4)) * (1 / math.sqrt(q.shape[4]))
  return tl.matmul(tl.softmax(scores, 4), f64(v))
end

describe("kernels with per-device state on every GPU of one process #cuda", function()
  local n = tl.cuda.device_count()
  if n < 2 then
    pending(("%d CUDA device(s): the specs of kernels on several GPUs of one process did not run"):format(n))
    return
  end

  for index = 0, n - 1 do
    local device = "cuda:" .. index
    -- tlua's own tensor-core kernel (cuDNN off: head dim 64 goes to cuDNN's fused attention by
    -- default), then cuDNN's (its plans are kept per device too)
    for _, cudnn in ipairs({ false, true }) do
      it(string.format("bfloat16 attention (%s, head dim 64) on %s", cudnn and "cuDNN" or "tensor cores", device),
        function()
          tl.manual_seed(3 + index)
          local q, k, v = tl.randn(2, 3, 64, 64), tl.randn(2, 3, 64, 64), tl.randn(2, 3, 64, 64)
          local on = function(t) return t:to("bfloat16"):to(device) end
          local was = tl.cuda.cudnn_enabled()
          tl.cuda.set_cudnn_enabled(cudnn)
          local ok, events, y = pcall(tl.trace, function()
            return tl.scaled_dot_product_attention(on(q), on(k), on(v))
          end)
          tl.cuda.set_cudnn_enabled(was)
          assert(ok, events)
          assert.are.equal(device, y.device)
          local took = false
          for _, e in ipairs(events) do
            for _, variant in ipairs(e.variants or {}) do took = took or variant == "mma_d64" end
          end
          assert.are.equal(not cudnn, took, "the tensor-core path ran")
          local want = attention_reference(on(q), on(k), on(v))
          assert.tensor_near(want, f64(y), 3e-2, 3e-2)
        end)
    end

    it("bfloat16 attention backward (tensor cores, head dim 64) on " .. device, function()
      tl.manual_seed(13 + index)
      local q, k, v = tl.randn(2, 3, 64, 64), tl.randn(2, 3, 64, 64), tl.randn(2, 3, 64, 64)
      local g = tl.randn(2, 3, 64, 64)
      local on = function(t) return t:to("bfloat16"):to(device):requires_grad_() end
      local gq, gk, gv = on(q), on(k), on(v)
      tl.scaled_dot_product_attention(gq, gk, gv):backward(g:to("bfloat16"):to(device))
      local leaf = function(t) return f64(t:detach()):requires_grad_() end
      local rq, rk, rv = leaf(gq), leaf(gk), leaf(gv)
      local scores = tl.matmul(rq, rk:transpose(3, 4)) * (1 / math.sqrt(64))
      tl.matmul(tl.softmax(scores, 4), rv):backward(f64(g:to("bfloat16")))
      assert.are.equal(device, gq.grad.device)
      assert.tensor_near(rq.grad, f64(gq.grad), 5e-2, 5e-2)
      assert.tensor_near(rk.grad, f64(gk.grad), 5e-2, 5e-2)
      assert.tensor_near(rv.grad, f64(gv.grad), 5e-2, 5e-2)
    end)

    it("elementwise kernels (the driver's handle of each kernel is per device) on " .. device, function()
      tl.manual_seed(17 + index)
      local a, b = tl.randn(37, 53), tl.randn(37, 53)
      local ga, gb = a:to(device), b:to(device)
      assert.tensor_near(f64(a) + f64(b), f64(ga + gb), 1e-6, 1e-6)
      assert.tensor_near(f64(a):transpose(1, 2) * f64(b):transpose(1, 2),
        f64(ga:transpose(1, 2) * gb:transpose(1, 2)), 1e-6, 1e-6)
      assert.tensor_near(tl.exp(f64(a)), f64(tl.exp(ga)), 1e-6, 1e-6)
      assert.tensor_equal(a:to("bfloat16"), ga:to("bfloat16"):to("cpu"))
      tl.manual_seed(19)
      local dropped = tl.dropout(ga, 0.5)
      tl.manual_seed(19)
      local keep = tl.rand(37, 53):ge(0.5)
      assert.tensor_near(tl.where(keep, f64(a) * 2, tl.zeros(37, 53, { dtype = "float64" })),
        f64(dropped), 1e-6, 1e-6)
    end)

    it("bfloat16 block-sparse linear (blocks of 64) on " .. device, function()
      tl.manual_seed(5 + index)
      local x, blocks = tl.randn(8, 128):to("bfloat16"), tl.randn(3, 64, 64):to("bfloat16")
      local mask = tl.tensor({ { true, false }, { true, true } }, { device = device })
      local layout = tl.nn.block_layout(mask)
      local y = tl.block_sparse_linear(x:to(device), blocks:to(device), layout)
      local w = tl.zeros(128, 128, { dtype = "float64" })
      w:narrow(1, 1, 64):narrow(2, 1, 64):copy_(f64(blocks[1]))
      w:narrow(1, 65, 64):narrow(2, 1, 64):copy_(f64(blocks[2]))
      w:narrow(1, 65, 64):narrow(2, 65, 64):copy_(f64(blocks[3]))
      assert.tensor_near(tl.matmul(f64(x), w:transpose(1, 2)), f64(y), 3e-2, 3e-2)
    end)

    it("bfloat16 grouped_mm on " .. device, function()
      tl.manual_seed(7 + index)
      local a, b = tl.randn(10, 32):to("bfloat16"), tl.randn(3, 32, 16):to("bfloat16")
      local offsets = tl.tensor({ 3, 3, 10 }, { dtype = "int32", device = device })
      local y = tl.grouped_mm(a:to(device), b:to(device), offsets)
      local want = tl.zeros(10, 16, { dtype = "float64" })
      want:narrow(1, 1, 3):copy_(tl.matmul(f64(a):narrow(1, 1, 3), f64(b[1])))
      want:narrow(1, 4, 7):copy_(tl.matmul(f64(a):narrow(1, 4, 7), f64(b[3])))
      assert.tensor_near(want, f64(y), 3e-2, 3e-2)
    end)
  end
end)
