-- tl.batch_norm, the engine op under nn.BatchNorm1d/2d and F.batch_norm: values, gradients and running statistics against the composed float64 reference in every floating dtype and rank, the kernels each backward runs, bad input (nothing changed), empty inputs, and CPU-vs-CUDA (#cuda). Torch goldens: spec/normalization_spec.lua.
local tl = require("tlua")
local trace = require("helpers.trace")

local EPS = 1e-5
-- {rtol, atol} of each dtype against the float64 reference (16-bit: the inputs' rounding and the
-- output's)
local TOL = { float64 = { 1e-11, 1e-12 }, float32 = { 2e-5, 2e-5 }, bfloat16 = { 3e-2, 3e-2 },
  float16 = { 4e-3, 4e-3 } }

-- {1, C, 1, ...} of rank n
local function channel_view(t, n)
  local shape = { 1, t.shape[1] }
  for d = 3, n do shape[d] = 1 end
  return t:view(shape)
end

-- the composed float64 reference (tensor ops, autograd through them): y of x with the batch's
-- statistics (training) or the running ones; the running statistics updated in place
local function composed(x, w, b, rm, rv, training, momentum)
  local n, c = #x.shape, x.shape[2]
  local dims = { 1 }
  for d = 3, n do dims[#dims + 1] = d end
  local mean, invstd
  if training then
    mean = x:mean(dims, true)
    local var = x:var(dims, { keepdim = true, correction = 0 })
    invstd = (var + EPS):rsqrt()
    if rm then
      local per = x:numel() // c
      tl.no_grad(function()
        rm:mul_(1 - momentum):add_(mean:detach():view(c) * momentum)
        rv:mul_(1 - momentum):add_(var:detach():view(c) * (per / (per - 1)) * momentum)
      end)
    end
  else
    mean = channel_view(rm, n)
    invstd = (channel_view(rv, n) + EPS):rsqrt()
  end
  local y = (x - mean) * invstd
  if w then y = y * channel_view(w, n) end
  if b then y = y + channel_view(b, n) end
  return y
end

local function f64(t) return t and t:to("float64") or nil end

-- the op in dtype and the reference in float64 on the same (rounded) values: outputs, the
-- gradients of x, w, b and the running statistics
local function compare(shape, dtype, opts)
  opts = opts or {}
  local c = shape[2]
  local x = tl.randn(shape):to(dtype)
  local g = tl.randn(shape):to(dtype)
  local w = opts.affine ~= false and tl.randn(c):to(opts.param_dtype or dtype) or nil
  local b = opts.affine ~= false and tl.randn(c):to(opts.param_dtype or dtype) or nil
  local stats_dtype = opts.stats_dtype or "float32"
  local rm = tl.randn(c):to(stats_dtype)
  local rv = tl.rand(c):add(0.5):to(stats_dtype)
  local rm64, rv64 = f64(rm):clone(), f64(rv):clone()
  local training = opts.training ~= false
  local xl, wl, bl = x:clone():requires_grad_(), w and w:clone():requires_grad_(), b and b:clone():requires_grad_()
  local y = tl.batch_norm(xl, rm, rv, { weight = wl, bias = bl, training = training, momentum = 0.2 })
  y:backward(g)
  local x64, w64, b64 = f64(x):requires_grad_(), w and f64(w):requires_grad_(), b and f64(b):requires_grad_()
  local y64 = composed(x64, w64, b64, rm64, rv64, training, 0.2)
  y64:backward(f64(g))
  local what = string.format("%s %s %s", dtype, table.concat(shape, "x"), training and "training" or "eval")
  local tol = TOL[dtype]
  assert.are.equal(dtype, y.dtype, what .. ": output dtype")
  assert.tensor_near(y64, y:double(), tol[1], tol[2], what .. ": output")
  assert.tensor_near(x64.grad, xl.grad:double(), tol[1], tol[2], what .. ": input gradient")
  if w then
    assert.are.equal(w.dtype, wl.grad.dtype, what .. ": weight gradient dtype")
    -- the sums over N * S elements: their error grows with their count
    assert.tensor_near(w64.grad, wl.grad:double(), tol[1] * 4, tol[2] * 4, what .. ": weight gradient")
    assert.tensor_near(b64.grad, bl.grad:double(), tol[1] * 4, tol[2] * 4, what .. ": bias gradient")
  end
  -- the running statistics move in the statistics dtype (float32 but for float64 input)
  local stol = TOL[(stats_dtype == "float64" and dtype ~= "float64") and "float32" or stats_dtype]
  assert.are.equal(stats_dtype, rm.dtype)
  assert.tensor_near(rm64, rm:double(), stol[1], stol[2], what .. ": running_mean")
  assert.tensor_near(rv64, rv:double(), stol[1], stol[2], what .. ": running_var")
end

describe("tl.batch_norm against the composed float64 reference", function()
  local shapes = { { 7, 3 }, { 4, 3, 5 }, { 2, 3, 4, 5 }, { 2, 2, 3, 2, 3 }, { 2, 3, 9, 10 } }

  it("every floating dtype and rank, training and eval, with the running statistics", function()
    tl.manual_seed(11)
    for _, dtype in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
      for _, shape in ipairs(shapes) do
        for _, training in ipairs({ true, false }) do
          compare(shape, dtype, { training = training, stats_dtype = dtype == "float64" and "float64" or "float32" })
        end
      end
    end
  end)

  it("without weight and bias; parameters and running statistics of another dtype than the input", function()
    tl.manual_seed(12)
    compare({ 4, 3, 5 }, "float32", { affine = false })
    compare({ 4, 3, 5 }, "float32", { affine = false, training = false })
    -- bfloat16 input with bfloat16 weight, bias and running statistics (stats computed in float32)
    compare({ 4, 3, 6 }, "bfloat16", { stats_dtype = "bfloat16" })
    -- float32 input with float64 parameters and running statistics
    compare({ 4, 3, 6 }, "float32", { param_dtype = "float64", stats_dtype = "float64" })
    compare({ 4, 3, 6 }, "float16", { param_dtype = "float32", training = false })
  end)

  it("a strided input gives what its contiguous copy gives", function()
    tl.manual_seed(13)
    local x = tl.randn(3, 4, 5, { dtype = "float64" }):transpose(1, 2) -- [4, 3, 5], not contiguous
    assert.is_false(x:is_contiguous())
    local xc = x:contiguous()
    local rm1, rv1 = tl.zeros(3, { dtype = "float64" }), tl.ones(3, { dtype = "float64" })
    local rm2, rv2 = rm1:clone(), rv1:clone()
    local y1 = tl.batch_norm(x, rm1, rv1, { training = true })
    local y2 = tl.batch_norm(xc, rm2, rv2, { training = true })
    assert.tensor_equal(y2, y1)
    assert.tensor_equal(rm2, rm1)
    assert.tensor_equal(rv2, rv1)
  end)

  it("training without running statistics leaves nothing to update; momentum 0 and 1", function()
    local x = tl.tensor({ { 1, 2 }, { 3, 6 }, { 5, 7 } }, { dtype = "float64" })
    local y = tl.batch_norm(x, nil, nil, { training = true })
    assert.tensor_near(composed(x, nil, nil, nil, nil, true), y, 1e-12, 1e-12)
    local rm, rv = tl.tensor({ 1, 1 }, { dtype = "float64" }), tl.tensor({ 2, 2 }, { dtype = "float64" })
    tl.batch_norm(x, rm, rv, { training = true, momentum = 0 })
    assert.tensor_equal(tl.tensor({ 1, 1 }, { dtype = "float64" }), rm)
    tl.batch_norm(x, rm, rv, { training = true, momentum = 1 })
    -- the batch's mean (3, 5) and unbiased variance (4, 7)
    assert.tensor_near({ 3, 5 }, rm, 1e-15, 1e-15)
    assert.tensor_near({ 4, 7 }, rv, 1e-15, 1e-15)
  end)
end)

describe("tl.batch_norm's backward runs only the kernels the needed gradients read", function()
  local function kernels_of(fn)
    local counts = trace.op_counts(fn)
    return counts.batch_norm_backward_reduce or 0, counts.batch_norm_backward_input or 0
  end
  local function run(needs, training)
    local x = tl.randn(4, 3, 5)
    local w, b = tl.randn(3), tl.randn(3)
    if needs.x then x:requires_grad_() end
    if needs.w then w:requires_grad_() end
    if needs.b then b:requires_grad_() end
    local rm, rv = tl.zeros(3), tl.ones(3)
    local y = tl.batch_norm(x, rm, rv, { weight = w, bias = b, training = training })
    return kernels_of(function() y:sum():backward() end)
  end

  it("training: the input's gradient needs the sums, once for all three gradients", function()
    assert.are.same({ 1, 1 }, { run({ x = true, w = true, b = true }, true) })
    assert.are.same({ 1, 1 }, { run({ x = true }, true) })
    assert.are.same({ 1, 0 }, { run({ w = true }, true) })
    assert.are.same({ 1, 0 }, { run({ b = true }, true) })
  end)

  it("eval: the input's gradient alone needs no sums", function()
    assert.are.same({ 0, 1 }, { run({ x = true }, false) })
    assert.are.same({ 1, 1 }, { run({ x = true, b = true }, false) })
    assert.are.same({ 1, 0 }, { run({ w = true, b = true }, false) })
  end)

  it("the forward is one op, the running statistics' update included", function()
    local x, rm, rv = tl.randn(4, 3, 5, 5), tl.zeros(3), tl.ones(3)
    local counts = trace.op_counts(function() tl.batch_norm(x, rm, rv, { training = true }) end)
    assert.are.same({ batch_norm = 1 }, counts)
  end)
end)

describe("tl.batch_norm's bad input: errors naming the op, nothing changed", function()
  local function running() return tl.zeros(3), tl.ones(3) end

  it("shapes, dtypes, options", function()
    local x = tl.randn(4, 3, 2)
    local rm, rv = running()
    local cases = {
      { function() tl.batch_norm(tl.ones({ 4, 3 }, { dtype = "int64" }), rm, rv) end, "batch_norm: input must have a floating dtype" },
      { function() tl.batch_norm(tl.randn(3), rm, rv) end, "batch_norm: input must have at least 2 dims" },
      { function() tl.batch_norm(x, rm, rv, { weight = tl.ones(4) }) end, "batch_norm: weight must be [3]" },
      { function() tl.batch_norm(x, rm, rv, { bias = tl.ones(3, 1) }) end, "batch_norm: bias must be [3]" },
      { function() tl.batch_norm(x, tl.zeros(2), rv, { training = true }) end, "batch_norm: running_mean must be [3]" },
      { function() tl.batch_norm(x, rm, nil, { training = true }) end, "running_mean and running_var must be both" },
      { function() tl.batch_norm(x, nil, nil) end, "are required when not training" },
      { function() tl.batch_norm(x, rm, rv, { eps = -1 }) end, "batch_norm: eps must be >= 0" },
      { function() tl.batch_norm(x, rm, rv, { training = true, momentum = 1.5 }) end, "momentum must be in [0, 1]" },
      { function() tl.batch_norm(tl.randn(1, 3), rm, rv, { training = true }) end, "more than 1 value per channel" },
      { function() tl.batch_norm(x, rm, rv, { trainng = true }) end, "unknown option 'trainng'" },
      { function() tl.batch_norm(x, rm, rv, { weight = tl.ones({ 3 }, { dtype = "int32" }) }) end, "weight must have a floating dtype" },
      { function() tl.batch_norm(x, tl.zeros(1):expand(3), rv, { training = true }) end, "batch_norm: running_mean" },
    }
    for _, case in ipairs(cases) do
      assert.error_matches(case[1], { case[2] })
      assert.tensor_equal(tl.zeros(3), rm)
      assert.tensor_equal(tl.ones(3), rv)
    end
  end)
end)

describe("tl.batch_norm on empty inputs", function()
  it("no sample: an empty output; in eval the gradients of weight and bias are zeros", function()
    local x = tl.zeros({ 0, 3, 4 }):requires_grad_()
    local w, b = tl.ones(3):requires_grad_(), tl.zeros(3):requires_grad_()
    local rm, rv = tl.zeros(3), tl.ones(3)
    local y = tl.batch_norm(x, rm, rv, { weight = w, bias = b })
    assert.are.same({ 0, 3, 4 }, y.shape)
    y:sum():backward()
    assert.tensor_equal(tl.zeros(3), w.grad)
    assert.tensor_equal(tl.zeros(3), b.grad)
    -- training on no element: the running statistics stay
    local y2 = tl.batch_norm(tl.zeros({ 0, 3 }), rm, rv, { training = true })
    assert.are.same({ 0, 3 }, y2.shape)
    assert.tensor_equal(tl.zeros(3), rm)
    assert.tensor_equal(tl.ones(3), rv)
  end)

  it("no channel: an empty output", function()
    local y = tl.batch_norm(tl.zeros({ 4, 0, 2 }), tl.zeros(0), tl.ones(0), { training = true })
    assert.are.same({ 4, 0, 2 }, y.shape)
  end)
end)

describe("tl.batch_norm on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    it("needs a CUDA device", function() pending("no CUDA device: tl.batch_norm's CUDA specs did not run") end)
    return
  end
  -- the CPU's result in dtype against CUDA's: outputs, gradients, running statistics (the sums
  -- run in another order: float32 and float64 within a few roundings)
  local CTOL = { float64 = { 1e-12, 1e-12 }, float32 = { 1e-5, 1e-5 }, bfloat16 = { 2e-2, 2e-2 },
    float16 = { 2e-3, 2e-3 } }
  local function on(device, x, w, b, g, rm, rv, training)
    local function leaf(t) return t:to(device):detach():clone():requires_grad_() end
    x, w, b, g = leaf(x), leaf(w), leaf(b), g:to(device)
    rm, rv = rm:to(device):clone(), rv:to(device):clone() -- updated in place: each device its own
    local y = tl.batch_norm(x, rm, rv, { weight = w, bias = b, training = training, momentum = 0.3 })
    y:backward(g)
    return { y:detach(), x.grad, w.grad, b.grad, rm, rv }
  end

  -- planes (S >= 64, chunks over N), columns (S < 64, [N, C] included), large N (many chunks)
  local shapes = { { 2, 3, 8, 9 }, { 4, 5, 33, 35 }, { 5, 3, 2 }, { 6, 4 }, { 600, 5 }, { 3, 2, 7, 7 },
    { 40, 3, 16, 16 } }

  it("CPU and CUDA agree in every dtype, training and eval, on both paths", function()
    tl.manual_seed(21)
    for _, dtype in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
      local sd = dtype == "float64" and "float64" or "float32"
      for _, shape in ipairs(shapes) do
        for _, training in ipairs({ true, false }) do
          local c = shape[2]
          local x = (tl.randn(shape) * 2 + 3):to(dtype)
          local g = tl.randn(shape):to(dtype)
          local w, b = tl.randn(c):to(sd), tl.randn(c):to(sd)
          local rm, rv = tl.randn(c):to(sd), (tl.rand(c) + 0.5):to(sd)
          local cpu = on("cpu", x, w, b, g, rm, rv, training)
          local gpu = on("cuda", x, w, b, g, rm, rv, training)
          local what = string.format("%s %s %s", dtype, table.concat(shape, "x"), tostring(training))
          local tol = CTOL[dtype]
          for i = 1, #cpu do
            -- y and the input's gradient in dtype; the sums and running statistics in sd
            local t = i <= 2 and tol or CTOL[sd]
            local scale = (i == 3 or i == 4) and 4 or 1
            assert.tensor_near(cpu[i], gpu[i]:to("cpu"), t[1] * scale, t[2] * scale, what .. ": result " .. i)
          end
        end
      end
    end
  end)

  it("nn.BatchNorm2d under bf16 autocast-like inputs: float32 parameters and running statistics", function()
    local m = tl.nn.BatchNorm2d(4):to("cuda")
    local x = tl.randn(8, 4, 10, 10, { device = "cuda" }):to("bfloat16")
    local y = m(x)
    assert.are.equal("bfloat16", y.dtype)
    assert.are.equal("float32", m.running_mean.dtype)
    local ref = tl.nn.BatchNorm2d(4)
    local yc = ref(x:to("cpu"))
    assert.tensor_near(yc:double(), y:to("cpu"):double(), 2e-2, 2e-2)
    assert.tensor_near(ref.running_mean, m.running_mean:to("cpu"), 1e-5, 1e-6)
    assert.tensor_near(ref.running_var, m.running_var:to("cpu"), 1e-5, 1e-6)
  end)
end)
