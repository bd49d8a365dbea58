-- Convolution layers and functionals (Conv1d/2d, ConvTranspose1d/2d: stride, padding, "same",
-- "valid", padding modes, dilation, groups, unbatched inputs): values and gradients against
-- PyTorch (spec/goldens/convolution.py), gradcheck, bad input.
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional

local goldens = dofile("spec/goldens/convolution.lua")

-- the golden's layer in float64 on device, its parameters set to torch's
local function layer_of(case, device)
  local opts = { dtype = "float64", device = device }
  for k, v in pairs(case.options) do opts[k] = v end
  local m = nn[case.cls](case.cin, case.cout, case.kernel, opts)
  tl.no_grad(function()
    m.weight:copy_(tl.tensor(case.weight, { dtype = "float64" }))
    if case.bias then m.bias:copy_(tl.tensor(case.bias, { dtype = "float64" })) end
  end)
  return m
end

local function run(case, device)
  local m = layer_of(case, device)
  local x = tl.tensor(case.x, { dtype = "float64", device = device }):requires_grad_()
  local y = m(x)
  local r = tl.tensor(case.r, { dtype = "float64", device = device })
  tl.sum(y * r):backward()
  return m, x, y
end

describe("convolution layers against PyTorch", function()
  for _, case in ipairs(goldens) do
    it(case.name .. ": values and gradients", function()
      local m, x, y = run(case, "cpu")
      assert.tensor_near(case.y, y, 1e-10, 1e-10)
      assert.tensor_near(case.gx, x.grad, 1e-10, 1e-10)
      assert.tensor_near(case.gweight, m.weight.grad, 1e-10, 1e-10)
      if case.bias then
        assert.tensor_near(case.gbias, m.bias.grad, 1e-10, 1e-10)
      else
        assert.is_nil(m.bias)
      end
    end)


  end

  describe("on CUDA #cuda", function()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the CUDA convolution specs did not run")
      return
    end
    local coverage = require("helpers.coverage")
    local TOLERANCE = { float64 = 1e-10, float32 = 1e-5, bfloat16 = 3e-2, float16 = 5e-3 }

    -- the golden's layer in dtype on CUDA: forward and backward traced, then compared with
    -- PyTorch's float64 values (so the kernels that ran count as checked)
    local function check_on_cuda(case, dtype)
      local tol = TOLERANCE[dtype]
      coverage.compared(function()
        local opts = { dtype = dtype, device = "cuda" }
        for k, v in pairs(case.options) do opts[k] = v end
        local m = nn[case.cls](case.cin, case.cout, case.kernel, opts)
        tl.no_grad(function()
          m.weight:copy_(tl.tensor(case.weight, { dtype = "float64", device = "cuda" }))
          if case.bias then m.bias:copy_(tl.tensor(case.bias, { dtype = "float64", device = "cuda" })) end
        end)
        local x = tl.tensor(case.x, { dtype = dtype, device = "cuda" }):requires_grad_()
        local y = m(x)
        tl.sum(y:to("float64") * tl.tensor(case.r, { dtype = "float64", device = "cuda" })):backward()
        return y:to("cpu"):to("float64"), x.grad:to("cpu"):to("float64"), m.weight.grad:to("cpu"):to("float64")
      end, function(y, gx, gw)
        local scale = dtype == "float64" and 1 or 4
        assert.tensor_near(case.y, y, tol, tol * scale)
        assert.tensor_near(case.gx, gx, tol * 2, tol * 2 * scale)
        assert.tensor_near(case.gweight, gw, tol * 2, tol * 4 * scale)
      end)
    end

    for _, enabled in ipairs({ true, false }) do
      local path = enabled and "cuDNN" or "im2col and cuBLAS (cuDNN off)"
      it(path .. ": every golden in float64, and float32, bfloat16, float16", function()
        tl.cuda.set_cudnn_enabled(enabled)
        local ok, err = pcall(function()
          for _, case in ipairs(goldens) do check_on_cuda(case, "float64") end
          for _, dtype in ipairs({ "float32", "bfloat16", "float16" }) do
            check_on_cuda(goldens[1], dtype) -- groups and dilation
            check_on_cuda(goldens[12], dtype) -- a transposed convolution
          end
        end)
        tl.cuda.set_cudnn_enabled(true)
        assert(ok, err)
      end)
    end

    it("cudnn_enabled is a setting: on by default, a boolean only", function()
      assert.is_true(tl.cuda.cudnn_enabled())
      assert.error_matches(function() tl.cuda.set_cudnn_enabled(1) end, "expected a boolean")
    end)
  end)

  it("float32 and bfloat16 follow the float64 result (the kernels of every floating dtype)", function()
    local case = goldens[1]
    for dtype, tol in pairs({ float32 = 1e-5, bfloat16 = 3e-2, float16 = 5e-3 }) do
      local x = tl.tensor(case.x, { dtype = dtype })
      local w = tl.tensor(case.weight, { dtype = dtype })
      local y = F.conv2d(x, w, tl.tensor(case.bias, { dtype = dtype }), case.options)
      assert.equal(dtype, y.dtype)
      assert.tensor_near(case.y, y:to("float64"), tol, tol * 4)
    end
  end)
end)

describe("convolution gradcheck", function()
  local gradcheck = tl.autograd.gradcheck
  local function randn(...) return tl.randn({ ... }, { dtype = "float64" }):requires_grad_() end

  it("conv2d with dilation and groups", function()
    tl.manual_seed(3)
    local x, w, b = randn(2, 4, 6, 5), randn(6, 2, 2, 3), randn(6)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv2d(a, c, d, { stride = { 2, 1 }, padding = { 1, 2 }, dilation = { 2, 1 }, groups = 2 })
    end, { x, w, b }))
  end)

  it("depthwise conv2d: stride 1 (flat correlations) and a stride of 2 (direct loops)", function()
    tl.manual_seed(6)
    local x, w, b = randn(2, 3, 6, 7), randn(6, 1, 3, 2), randn(6)
    for _, options in ipairs({
      { padding = { 2, 1 }, dilation = { 1, 2 }, groups = 3 },
      { stride = { 2, 1 }, padding = 1, groups = 3 },
    }) do
      assert.is_true(gradcheck(function(a, c, d) return F.conv2d(a, c, d, options) end, { x, w, b }))
    end
  end)

  it("conv_transpose2d with output_padding, dilation and groups", function()
    tl.manual_seed(4)
    local x, w, b = randn(2, 4, 3, 4), randn(4, 3, 3, 2), randn(6)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv_transpose2d(a, c, d, { stride = 2, padding = { 1, 0 }, output_padding = { 1, 0 },
        dilation = { 1, 2 }, groups = 2 })
    end, { x, w, b }))
  end)

  it("conv_transpose2d and conv_transpose1d with output_padding >= stride (below the dilation)", function()
    tl.manual_seed(6)
    local x, w, b = randn(2, 4, 3, 2), randn(4, 1, 2, 3), randn(2)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv_transpose2d(a, c, d, { stride = { 1, 2 }, padding = { 2, 0 }, output_padding = { 2, 2 },
        dilation = { 3, 3 }, groups = 2 })
    end, { x, w, b }))
    local xt, wt, bt = randn(1, 2, 4), randn(2, 3, 2), randn(3)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv_transpose1d(a, c, d, { stride = 2, padding = 1, output_padding = 3, dilation = 4 })
    end, { xt, wt, bt }))
  end)

  it("conv1d with padding 'same' and conv_transpose1d", function()
    tl.manual_seed(5)
    local x, w = randn(2, 2, 7), randn(3, 2, 4)
    assert.is_true(gradcheck(function(a, c) return F.conv1d(a, c, nil, { padding = "same", dilation = 2 }) end,
      { x, w }))
    local xt, wt = randn(2, 3, 5), randn(3, 2, 3)
    assert.is_true(gradcheck(function(a, c) return F.conv_transpose1d(a, c, { stride = 2, output_padding = 1 }) end,
      { xt, wt }))
  end)
end)

describe("convolution shapes and options", function()
  it("gives torch's output sizes (the issue's example: dilation 2 gives 3x3)", function()
    local c = nn.Conv2d(1, 2, 3, { dilation = 2 })
    assert.same({ 1, 2, 3, 3 }, c(tl.randn(1, 1, 7, 7)).shape)
    assert.same({ 2, 2, 3, 3 }, nn.Conv2d(4, 2, 3, { groups = 2 }).weight.shape)
    assert.same({ 6, 1, 3, 3 }, nn.Conv2d(3, 6, 3, { groups = 3 }).weight.shape)
    assert.same({ 4, 3, 2 }, nn.ConvTranspose1d(4, 6, 2, { groups = 2 }).weight.shape)
  end)

  it("initialises as torch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in from the weight", function()
    tl.manual_seed(0)
    local c = nn.Conv2d(8, 16, 3, { groups = 4 }) -- fan_in = 2 * 9
    local bound = 1 / math.sqrt(18)
    assert.is_true(c.weight:abs():max():item() <= bound)
    assert.is_true(c.weight:abs():max():item() > 0.9 * bound)
    assert.is_true(c.bias:abs():max():item() <= bound)
    local t = nn.ConvTranspose2d(4, 6, 3) -- weight [4, 6, 3, 3]: fan_in = 6 * 9
    assert.is_true(t.weight:abs():max():item() <= 1 / math.sqrt(54))
  end)

  it("rejects unknown and bad options with the key named", function()
    assert.error_matches(function() nn.Conv2d(1, 2, 3, { paddin = 1 }) end, { "nn.Conv2d", "'paddin'", "padding_mode" })
    assert.error_matches(function() nn.Conv1d(1, 2, 3, { output_padding = 1 }) end, { "'output_padding'" })
    assert.error_matches(function() nn.Conv2d(4, 6, 3, { groups = 4 }) end, "divisible by groups")
    assert.error_matches(function() nn.Conv2d(2, 2, 3, { padding_mode = "mirror" }) end, "padding_mode must be")
    assert.error_matches(function() nn.Conv2d(2, 2, 3, { padding = "same", stride = 2 }) end, "'same' needs stride 1")
    assert.error_matches(function() nn.Conv2d(2, 2, 3, { padding = "full" }) end, "'full'")
    assert.error_matches(function() nn.ConvTranspose2d(2, 2, 3, { stride = 2, output_padding = 2 }) end,
      { "nn.ConvTranspose2d: output_padding must be >= 0 and smaller than max(stride, dilation) = (2, 2), got (2, 2)" })
    assert.error_matches(function() nn.ConvTranspose1d(1, 1, 3, { dilation = 2, output_padding = 2 }) end,
      { "nn.ConvTranspose1d: output_padding must be >= 0 and smaller than max(stride, dilation) = (2,), got (2,)" })
    assert.error_matches(function()
      nn.ConvTranspose2d(1, 1, 3, { stride = { 1, 3 }, dilation = 2, output_padding = { 1, 3 } })
    end, { "max(stride, dilation) = (2, 3), got (1, 3)" })
    assert.error_matches(function() nn.ConvTranspose2d(2, 2, 3, { padding_mode = "reflect" }) end, "only padding_mode")
    assert.error_matches(function() F.conv2d(tl.randn(1, 2, 4, 4), tl.randn(2, 2, 3, 3), { strid = 1 }) end,
      { "conv2d", "'strid'" })
    assert.error_matches(function() tl.conv2d(tl.randn(1, 2, 4, 4), tl.randn(2, 2, 3, 3), { dilate = 1 }) end,
      { "conv2d", "dilate" })
  end)

  it("rejects bad shapes and geometry with clear errors", function()
    local x = tl.randn(1, 4, 5, 5)
    assert.error_matches(function() F.conv2d(x, tl.randn(2, 3, 3, 3), nil, { groups = 2 }) end, "with 2 groups")
    assert.error_matches(function() F.conv2d(x, tl.randn(3, 2, 3, 3), nil, { groups = 2 }) end, "divisible")
    assert.error_matches(function() F.conv2d(x, tl.randn(2, 4, 3, 3), nil, { dilation = 0 }) end,
      "dilation must be >= 1")
    assert.error_matches(function() F.conv2d(x, tl.randn(2, 4, 3, 3), nil, { dilation = 3 }) end,
      "larger than the padded input")
    assert.error_matches(function() F.conv2d(x, tl.randn(2, 4, 3, 3), nil, { groups = 0 }) end, "groups must be >= 1")
    assert.error_matches(function() F.conv1d(x, tl.randn(2, 4, 3)) end, "input must have 3 dims")
    assert.error_matches(function() F.conv_transpose2d(x, tl.randn(3, 2, 3, 3)) end, "input has 4 channels")
    assert.error_matches(function() F.conv_transpose2d(x, tl.randn(4, 2, 3, 3), tl.randn(3)) end,
      "bias must have shape %[2%]")
    assert.error_matches(function()
      F.conv_transpose2d(tl.randn(1, 1, 1, 1), tl.randn(1, 1, 1, 1), nil, { padding = 1 })
    end, "must be >= 1")
    -- output_padding: below max(stride, dilation) per dim (torch's rule); at it, an error
    local xt = tl.randn(1, 1, 3, 4)
    local before = xt:clone()
    assert.same({ 1, 2, 8, 9 }, F.conv_transpose2d(xt, tl.randn(1, 2, 2, 2), nil,
      { dilation = { 3, 1 }, stride = { 1, 2 }, output_padding = { 2, 1 } }).shape)
    assert.error_matches(function()
      F.conv_transpose2d(xt, tl.randn(1, 2, 2, 2), nil, { dilation = { 3, 1 }, output_padding = { 3, 0 } })
    end, { "conv_transpose2d: output_padding must be >= 0 and smaller than max(stride, dilation) = 3, got 3 " ..
      "(height)" })
    assert.error_matches(function()
      F.conv_transpose1d(tl.randn(1, 1, 4), tl.randn(1, 1, 2), nil, { stride = 2, dilation = 3, output_padding = 3 })
    end, { "smaller than max(stride, dilation) = 3, got 3 (width)" })
    assert.tensor_equal(before, xt)
  end)
end)
