-- Pooling and interpolate (max/avg/adaptive 1d and 2d, nearest/linear/bilinear) against PyTorch golden values (spec/goldens/pooling.py) in float64, float32 and bfloat16, gradcheck, modules, bad inputs and CPU-vs-CUDA (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradcheck = tl.autograd.gradcheck

local GOLDEN = dofile("spec/goldens/pooling.lua")

local function tensor(flat, shape, dtype, device)
  return tl.tensor(flat, { dtype = dtype or "float64", device = device }):view(shape)
end

-- the case's op on x (values, and indices for the cases that ask for them)
local function run(c, x) return F[c.op](x, table.unpack(c.args)) end

local function max_kind(c) return c.op:find("max") ~= nil end

-- tolerances per dtype: float64 PyTorch's own rounding, float32 and bfloat16 the inputs' rounding
local TOL = { float64 = { 1e-12, 1e-12 }, float32 = { 1e-5, 1e-5 }, bfloat16 = { 2e-2, 3e-2 } }

describe("pooling and interpolate against PyTorch (float64)", function()
  for _, c in ipairs(GOLDEN) do
    it(c.op .. ": " .. c.name, function()
      local x = tensor(c.x, c.shape):requires_grad_()
      local y, idx = run(c, x)
      assert.are.same(c.out_shape, y.shape)
      assert.tensor_near(tensor(c.out, c.out_shape), y, 1e-12, 1e-12)
      if c.indices then
        assert.are.equal("int64", idx.dtype)
        assert.tensor_equal(tl.tensor(c.indices, { dtype = "int64" }):view(c.out_shape), idx)
      end
      y:backward(tensor(c.g, c.out_shape))
      assert.tensor_near(tensor(c.grad, c.shape), x.grad, 1e-12, 1e-12)
    end)
  end
end)

describe("pooling and interpolate in float32 and bfloat16 (every CPU kernel)", function()
  for _, dtype in ipairs({ "float32", "bfloat16" }) do
    it(dtype .. ": values and gradients near PyTorch's float64", function()
      local rtol, atol = TOL[dtype][1], TOL[dtype][2]
      for _, c in ipairs(GOLDEN) do
        local x = tensor(c.x, c.shape, dtype):requires_grad_()
        local y = run(c, x)
        assert.are.equal(dtype, y.dtype)
        assert.tensor_near(tensor(c.out, c.out_shape), y:double(), rtol, atol, c.op .. ": " .. c.name)
        -- a max's argmax may move between values that round alike in bfloat16
        if not (dtype == "bfloat16" and max_kind(c)) then
          y:backward(tensor(c.g, c.out_shape, dtype))
          assert.are.equal(dtype, x.grad.dtype)
          assert.tensor_near(tensor(c.grad, c.shape), x.grad:double(), rtol, atol, c.op .. " grad: " .. c.name)
        end
      end
    end)
  end
end)

describe("max pooling details", function()
  it("a NaN wins its window, as in PyTorch; padding never wins", function()
    local x = tl.tensor({ { { { 1, 0 / 0 }, { 3, 2 } } } }, { dtype = "float64" })
    local y, i = tl.max_pool2d(x, 2, { return_indices = true })
    assert.is_true(y:item() ~= y:item())
    assert.are.equal(2, i:item())
    local neg = tl.full({ 1, 1, 3, 3 }, -5.0, { dtype = "float64" })
    assert.tensor_equal(tl.full({ 1, 1, 2, 2 }, -5.0, { dtype = "float64" }),
      tl.max_pool2d(neg, 2, { stride = 2, padding = 1 }))
  end)

  it("ceil_mode adds a last window only when it starts inside the input or the left padding", function()
    local x = tl.randn(1, 1, 5, 5)
    assert.are.same({ 1, 1, 2, 2 }, tl.max_pool2d(x, 2).shape)
    assert.are.same({ 1, 1, 3, 3 }, tl.max_pool2d(x, 2, { ceil_mode = true }).shape)
    -- (5 + 2 - 2) / 2 = 2.5 rounds up to 3 windows after the first, but the fourth would start at 6 = 5 + 1
    assert.are.same({ 1, 1, 3, 3 }, tl.max_pool2d(x, 2, { padding = 1, ceil_mode = true }).shape)
    assert.are.same({ 1, 1, 3, 3 }, tl.avg_pool2d(x, 2, { padding = 1, ceil_mode = true }).shape)
  end)

  it("MaxPool modules return values and 1-based indices with return_indices", function()
    local x = tl.randn(2, 3, 6, 6)
    local y, i = nn.MaxPool2d(2, { return_indices = true })(x)
    local y2, i2 = tl.max_pool2d(x, 2, { return_indices = true })
    assert.tensor_equal(y2, y)
    assert.tensor_equal(i2, i)
    assert.is_nil(select(2, nn.MaxPool2d(2)(x)))
    local v, j = nn.MaxPool1d(3, { stride = 2, return_indices = true })(tl.randn(2, 3, 9))
    assert.are.same({ 2, 3, 4 }, v.shape)
    assert.are.same({ 2, 3, 4 }, j.shape)
    -- the indices gather the values back (positions in each plane, from 1)
    local flat = x:view(2, 3, 36)
    assert.tensor_equal(y:view(2, 3, 9), flat:gather(3, i:view(2, 3, 9)))
  end)
end)

describe("gradcheck (float64)", function()
  local function input(...) return tl.randn(...):double():requires_grad_() end

  it("max pooling: dilation, ceil_mode, adaptive, 1d", function()
    assert.is_true(gradcheck(function(x) return tl.max_pool2d(x, 3, { stride = 2, padding = 1, dilation = 2 }) end,
      { input(1, 2, 7, 8) }))
    assert.is_true(gradcheck(function(x) return tl.max_pool2d(x, 2, { stride = 2, ceil_mode = true }) end,
      { input(1, 2, 5, 5) }))
    assert.is_true(gradcheck(function(x) return tl.adaptive_max_pool2d(x, { 3, 2 }) end, { input(2, 2, 5, 7) }))
    assert.is_true(gradcheck(function(x) return F.max_pool1d(x, 3, { stride = 2, padding = 1 }) end,
      { input(2, 2, 8) }))
  end)

  it("average pooling: padding both ways, ceil_mode, divisor_override, adaptive, 1d", function()
    for _, cip in ipairs({ true, false }) do
      assert.is_true(gradcheck(function(x)
        return tl.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = cip })
      end, { input(1, 2, 6, 7) }))
    end
    assert.is_true(gradcheck(function(x) return tl.avg_pool2d(x, { 2, 3 }, { divisor_override = 4 }) end,
      { input(1, 2, 4, 6) }))
    assert.is_true(gradcheck(function(x) return tl.adaptive_avg_pool2d(x, { 3, 4 }) end, { input(2, 2, 7, 5) }))
    assert.is_true(gradcheck(function(x) return F.adaptive_avg_pool1d(x, 4) end, { input(2, 3, 7) }))
    assert.is_true(gradcheck(function(x) return F.avg_pool1d(x, 2) end, { input(3, 7) }))
  end)

  it("interpolate: nearest, bilinear both ways, linear", function()
    assert.is_true(gradcheck(function(x) return F.interpolate(x, { scale_factor = 1.5 }) end, { input(1, 2, 3, 4) }))
    for _, align in ipairs({ false, true }) do
      assert.is_true(gradcheck(function(x)
        return F.interpolate(x, { size = { 5, 3 }, mode = "bilinear", align_corners = align })
      end, { input(1, 2, 3, 4) }))
      assert.is_true(gradcheck(function(x)
        return F.interpolate(x, { scale_factor = 2, mode = "linear", align_corners = align })
      end, { input(2, 2, 3) }))
    end
  end)
end)

describe("pooling modules", function()
  it("forward the functional forms with their options", function()
    local x = tl.randn(2, 3, 7, 6)
    assert.tensor_equal(tl.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }),
      nn.AvgPool2d(3, { stride = 2, padding = 1, count_include_pad = false })(x))
    assert.tensor_equal(tl.adaptive_avg_pool2d(x, { 2, 3 }), nn.AdaptiveAvgPool2d({ 2, 3 })(x))
    assert.tensor_equal(tl.adaptive_max_pool2d(x, 2), nn.AdaptiveMaxPool2d(2)(x))
    local s = tl.randn(2, 3, 9)
    assert.tensor_equal(F.avg_pool1d(s, 3, { stride = 2 }), nn.AvgPool1d(3, { stride = 2 })(s))
    assert.tensor_equal(F.adaptive_avg_pool1d(s, 4), nn.AdaptiveAvgPool1d(4)(s))
    assert.tensor_equal(F.adaptive_max_pool1d(s, 4), nn.AdaptiveMaxPool1d(4)(s))
    assert.tensor_equal(F.interpolate(x, { scale_factor = 2 }), nn.Upsample({ scale_factor = 2 })(x))
    assert.tensor_equal(F.interpolate(x, { size = { 4, 5 }, mode = "bilinear", align_corners = true }),
      nn.UpsamplingBilinear2d({ size = { 4, 5 } })(x))
    assert.tensor_equal(F.interpolate(x, { scale_factor = 3 }), nn.UpsamplingNearest2d({ scale_factor = 3 })(x))
  end)

  it("print like PyTorch's", function()
    assert.are.equal("MaxPool2d(kernel_size=3, stride=2, padding=1, ceil_mode=true)",
      tostring(nn.MaxPool2d(3, { stride = 2, padding = 1, ceil_mode = true })))
    assert.are.equal("AdaptiveAvgPool2d(output_size=(2, 3))", tostring(nn.AdaptiveAvgPool2d({ 2, 3 })))
    assert.are.equal("Upsample(scale_factor=2, mode=bilinear)",
      tostring(nn.Upsample({ scale_factor = 2, mode = "bilinear" })))
  end)

  it("check their options strictly", function()
    assert.error_matches(function() nn.MaxPool2d(2, { strides = 1 }) end, { "nn.MaxPool2d", "strides" })
    assert.error_matches(function() nn.AvgPool1d(2, { divisor_override = 2 }) end,
      { "nn.AvgPool1d", "divisor_override" })
    assert.error_matches(function() nn.AdaptiveMaxPool2d(2, { indices = true }) end,
      { "nn.AdaptiveMaxPool2d", "indices" })
    assert.error_matches(function() nn.AdaptiveAvgPool2d(2, {}) end, { "nn.AdaptiveAvgPool2d", "one argument" })
    assert.error_matches(function() nn.Upsample({ scale = 2 }) end, { "nn.Upsample", "scale" })
    assert.error_matches(function() nn.UpsamplingBilinear2d({ mode = "nearest" }) end,
      { "nn.UpsamplingBilinear2d", "mode" })
    assert.error_matches(function() nn.MaxPool2d() end, { "nn.MaxPool2d", "kernel_size" })
  end)

  it("Upsample checks its mode, size and scale_factor when it is built, not at forward", function()
    local cases = {
      { { mode = "cubic", size = 2 }, "nn.Upsample: mode must be 'nearest', 'linear' or 'bilinear', got 'cubic'" },
      { { size = 2, align_corners = true }, "nn.Upsample: align_corners can only be set with the modes linear and bilinear" },
      { {}, "nn.Upsample: give exactly one of size and scale_factor" },
      { { size = 2, scale_factor = 2 }, "nn.Upsample: give exactly one of size and scale_factor" },
      { { size = 0 }, "nn.Upsample: size must be an integer >= 1 (or a table of them), got 0" },
      { { size = { 2, 3, 4 } }, "nn.Upsample: size must have 1 or 2 entries for mode nearest, got 3" },
      { { size = { 2, 3 }, mode = "linear" }, "nn.Upsample: size must have 1 entry for mode linear, got 2" },
      { { size = { 2, 0 }, mode = "bilinear" }, "nn.Upsample: size[2] must be an integer >= 1, got 0" },
      { { scale_factor = -1 }, "nn.Upsample: scale_factor must be a finite number > 0 (or a table of them), got -1" },
      { { scale_factor = { 2, 0 } }, "nn.Upsample: scale_factor[2] must be a finite number > 0, got 0" },
    }
    for _, case in ipairs(cases) do
      assert.error_matches(function() return nn.Upsample(case[1]) end, { case[2] })
    end
    local ok, err = pcall(function() local m = nn.Upsample({ mode = "cubic", size = 2 }) return m end)
    assert.is_false(ok)
    assert.matches("^spec/pooling_spec%.lua:%d+: nn%.Upsample: ", err)
    assert.error_matches(function() return nn.UpsamplingBilinear2d({ size = { 2 } }) end,
      { "nn.UpsamplingBilinear2d: size must have 2 entries for mode bilinear, got 1" })
    assert.error_matches(function() return nn.UpsamplingNearest2d({}) end,
      { "nn.UpsamplingNearest2d: give exactly one of size and scale_factor" })
    -- the good forms still build and run
    local x = tl.randn(1, 2, 3)
    assert.tensor_equal(F.interpolate(x, { size = 5, mode = "linear" }), nn.Upsample({ size = { 5 }, mode = "linear" })(x))
    assert.are.same({ 1, 2, 6 }, nn.Upsample({ scale_factor = 2 })(x).shape)
  end)
end)

describe("bad inputs", function()
  local x = tl.randn(1, 2, 5, 5)

  it("name the function, the option and what was expected", function()
    assert.error_matches(function() tl.max_pool2d(x, 2, { dilations = 2 }) end, { "max_pool2d", "dilations" })
    assert.error_matches(function() tl.avg_pool2d(x, 2, { dilation = 2 }) end, { "avg_pool2d", "dilation" })
    assert.error_matches(function() tl.max_pool2d(x, 2, { padding = 2 }) end, { "max_pool2d", "half the kernel" })
    assert.error_matches(function() tl.avg_pool2d(x, 3, { padding = 2 }) end, { "avg_pool2d", "half the kernel" })
    assert.error_matches(function() tl.max_pool2d(x, 2, { dilation = 0 }) end, { "max_pool2d", "dilation", ">= 1" })
    assert.error_matches(function() tl.max_pool2d(x, 6) end, { "max_pool2d", "larger than the padded" })
    -- an output size whose windows' bounds would overflow (found by the API fuzzer)
    assert.error_matches(function() tl.adaptive_max_pool2d(x, { math.maxinteger, 2 }) end,
      { "adaptive_max_pool2d", "too large" })
    assert.error_matches(function() tl.adaptive_avg_pool2d(x, { 2, math.maxinteger }) end,
      { "adaptive_avg_pool2d", "too large" })
    assert.error_matches(function() tl.avg_pool2d(x, 2, { divisor_override = 0 }) end,
      { "avg_pool2d", "divisor_override", ">= 1" })
    assert.error_matches(function() tl.avg_pool2d(x) end, { "avg_pool2d", "kernel_size" })
    assert.error_matches(function() tl.adaptive_avg_pool2d(x, -1) end, { "adaptive_avg_pool2d", "output_size" })
    assert.error_matches(function() tl.adaptive_avg_pool2d(x) end, { "adaptive_avg_pool2d", "output_size" })
    assert.error_matches(function() tl.adaptive_max_pool2d(x, 2, { return_index = true }) end,
      { "adaptive_max_pool2d", "return_index" })
  end)

  it("a dilated window of padding only is refused", function()
    -- kernel 2, dilation 6, padding 1 over 5: output 0's taps are -1 and 5, both padding
    assert.error_matches(function() tl.max_pool2d(x, 2, { padding = 1, dilation = 6, stride = 5 }) end,
      { "max_pool2d", "reads only padding" })
  end)

  it("shapes and dtypes", function()
    assert.error_matches(function() tl.max_pool2d(tl.randn(5, 5), 2) end, { "max_pool2d", "[N, C, H, W]" })
    assert.error_matches(function() tl.avg_pool2d(tl.randn(1, 1, 2, 3, 4), 2) end, { "avg_pool2d", "[N, C, H, W]" })
    assert.error_matches(function() tl.max_pool2d(tl.ones(1, 1, 4, 4, { dtype = "int64" }), 2) end,
      { "max_pool2d", "floating", "int64" })
    assert.error_matches(function() tl.adaptive_avg_pool2d(tl.ones(1, 1, 4, 4, { dtype = "int32" }), 2) end,
      { "adaptive_avg_pool2d", "floating", "int32" })
    assert.error_matches(function() F.max_pool1d(tl.randn(1, 2, 3, 4), 2) end, { "max_pool1d", "[N, C, L]" })
    assert.error_matches(function() F.max_pool1d(tl.randn(1, 2, 4), { 2, 2 }) end, { "max_pool1d", "kernel_size" })
    assert.error_matches(function() F.avg_pool1d(tl.randn(1, 2, 4), 2, { padding = 2 }) end,
      { "avg_pool1d", "half the kernel" })
  end)

  it("interpolate's options", function()
    assert.error_matches(function() F.interpolate(x, { size = 3, sizes = 2 }) end, { "interpolate", "sizes" })
    assert.error_matches(function() F.interpolate(x, {}) end, { "interpolate", "exactly one of size and scale_factor" })
    assert.error_matches(function() F.interpolate(x, { size = 3, scale_factor = 2 }) end,
      { "interpolate", "exactly one" })
    assert.error_matches(function() F.interpolate(x, { size = 3, mode = "linear" }) end,
      { "interpolate", "linear", "4D" })
    assert.error_matches(function() F.interpolate(tl.randn(1, 2, 3), { size = 3, mode = "bilinear" }) end,
      { "interpolate", "bilinear", "3D" })
    assert.error_matches(function() F.interpolate(x, { size = 3, mode = "bicubic" }) end, { "interpolate", "bicubic" })
    assert.error_matches(function() F.interpolate(x, { size = 3, align_corners = true }) end,
      { "interpolate", "align_corners" })
    assert.error_matches(function() F.interpolate(x, { size = 3, mode = "bilinear", antialias = true }) end,
      { "interpolate", "antialias" })
    assert.error_matches(function() F.interpolate(x, { size = { 3, 4, 5 } }) end,
      { "interpolate", "size", "2 entries" })
    assert.error_matches(function() F.interpolate(x, { size = 0 }) end, { "interpolate", "size", ">= 1" })
    assert.error_matches(function() F.interpolate(x, { scale_factor = -2 }) end, { "interpolate", "scale_factor" })
    assert.error_matches(function() F.interpolate(x, { scale_factor = 0.1 }) end,
      { "interpolate", "output size 0" })
    assert.error_matches(function() F.interpolate(tl.randn(2, 5), { size = 3 }) end, { "interpolate", "3-D" })
    assert.error_matches(function() F.interpolate(tl.ones(1, 1, 2, 2, { dtype = "int64" }), { size = 3 }) end,
      { "upsample_nearest2d", "floating" })
  end)

  it("empty batches give empty results and zero gradients", function()
    local e = tl.randn(0, 2, 5, 5):requires_grad_()
    assert.are.same({ 0, 2, 2, 2 }, tl.max_pool2d(e, 2).shape)
    assert.are.same({ 0, 2, 3, 3 }, tl.adaptive_avg_pool2d(e, 3).shape)
    local y = F.interpolate(e, { scale_factor = 2, mode = "bilinear" })
    assert.are.same({ 0, 2, 10, 10 }, y.shape)
    y:sum():backward()
    assert.are.same({ 0, 2, 5, 5 }, e.grad.shape)
  end)
end)

describe("pooling and interpolate on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of pooling did not run")
    return
  end
  for _, dtype in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
    it(dtype .. ": every golden case, values and gradients, CUDA against the CPU", function()
      local rtol, atol = 1e-6, 1e-6
      if dtype == "bfloat16" or dtype == "float16" then rtol, atol = 1e-2, 1e-2 end
      if dtype == "float64" then rtol, atol = 1e-12, 1e-12 end
      for _, c in ipairs(GOLDEN) do
        local xc = tensor(c.x, c.shape, dtype):requires_grad_()
        local xg = tensor(c.x, c.shape, dtype, "cuda"):requires_grad_()
        local yc, ic = run(c, xc)
        local yg, ig = run(c, xg)
        assert.are.equal("cuda", yg.device:sub(1, 4))
        assert.tensor_near(yc, yg:to("cpu"), rtol, atol, c.op .. ": " .. c.name)
        if ic then assert.tensor_equal(ic, ig:to("cpu"), c.op .. " indices: " .. c.name) end
        yc:backward(tensor(c.g, c.out_shape, dtype))
        yg:backward(tensor(c.g, c.out_shape, dtype, "cuda"))
        assert.tensor_near(xc.grad, xg.grad:to("cpu"), rtol, atol, c.op .. " grad: " .. c.name)
      end
    end)
  end

  it("large planes and many outputs per input (the backward's paths)", function()
    tl.manual_seed(5)
    local x = tl.randn(2, 3, 150, 170)
    for _, f in ipairs({
      function(t) return tl.max_pool2d(t, 3, { stride = 1, padding = 1, dilation = 1 }) end,
      function(t) return tl.avg_pool2d(t, 5, { stride = 2, padding = 2, ceil_mode = true }) end,
      function(t) return tl.adaptive_avg_pool2d(t, { 7, 9 }) end,
      function(t) return tl.adaptive_max_pool2d(t, { 200, 30 }) end,
      function(t) return F.interpolate(t, { scale_factor = 2.5 }) end,
      function(t) return F.interpolate(t, { size = { 40, 333 }, mode = "bilinear" }) end,
      function(t) return F.interpolate(t, { scale_factor = 0.3, mode = "bilinear", align_corners = true }) end,
    }) do
      local xc, xg = x:clone():requires_grad_(), x:cuda():requires_grad_()
      local yc, yg = f(xc), f(xg)
      assert.tensor_near(yc, yg:to("cpu"), 1e-5, 1e-5)
      local g = tl.randn(table.unpack(yc.shape))
      yc:backward(g)
      yg:backward(g:cuda())
      assert.tensor_near(xc.grad, xg.grad:to("cpu"), 1e-4, 1e-4)
    end
  end)
end)
