-- nn.BatchNorm1d/2d, GroupNorm, RMSNorm and their functional forms against PyTorch goldens (float64 values, gradients, running statistics over several steps), gradcheck, state dicts, options and bad inputs (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradcheck = tl.autograd.gradcheck

local G = dofile("spec/goldens/normalization.lua")

local function t64(v) return tl.tensor(v, { dtype = "float64" }) end

-- output and gradients of m(x) against the golden: y, and the gradient of sum(y * gy)
local function run(m, x, gy)
  x = t64(x):requires_grad_()
  local y = m(x)
  tl.backward((y * t64(gy)):sum())
  return x, y
end

-- a batch norm module of cls set as the golden's: weight and bias copied, float64
local function batch_norm_from(cls, case, c, opts)
  local m = cls(c, opts):double()
  if #case.weight > 0 then
    tl.no_grad(function()
      m.weight:copy_(t64(case.weight))
      m.bias:copy_(t64(case.bias))
    end)
  end
  return m
end

-- trains m over the golden's steps, checking each step's output and gradients and the running
-- statistics after it, then eval
local function check_batch_norm_case(m, case)
  for step = 1, #case.xs do
    local x, y = run(m, case.xs[step], case.gys[step])
    assert.tensor_near(case.ys[step], y, 1e-10, 1e-12, "output, step " .. step)
    assert.tensor_near(case.gxs[step], x.grad, 1e-9, 1e-11, "input gradient, step " .. step)
    if m.affine then
      assert.tensor_near(case.gws[step], m.weight.grad, 1e-9, 1e-11, "weight gradient, step " .. step)
      assert.tensor_near(case.gbs[step], m.bias.grad, 1e-9, 1e-11, "bias gradient, step " .. step)
      m:zero_grad()
    end
    if m.track_running_stats then
      assert.tensor_near(case.running_means[step], m.running_mean, 1e-12, 1e-13, "running_mean, step " .. step)
      assert.tensor_near(case.running_vars[step], m.running_var, 1e-12, 1e-13, "running_var, step " .. step)
    end
  end
  m:eval()
  local x, y = run(m, case.eval_x, case.eval_gy)
  assert.tensor_near(case.eval_y, y, 1e-10, 1e-12, "eval output")
  assert.tensor_near(case.eval_gx, x.grad, 1e-9, 1e-11, "eval input gradient")
  if m.track_running_stats then
    assert.are.equal(case.num_batches_tracked, m.num_batches_tracked:item())
    assert.are.equal("int64", m.num_batches_tracked.dtype)
  end
end

describe("nn.BatchNorm1d and nn.BatchNorm2d against PyTorch", function()
  it("BatchNorm2d: three training steps (outputs, gradients, running statistics), then eval", function()
    check_batch_norm_case(batch_norm_from(nn.BatchNorm2d, G.bn2d, 3), G.bn2d)
  end)

  it("BatchNorm2d with momentum = 0.3 and eps = 1e-3", function()
    local case = G.bn2d_m03_eps
    check_batch_norm_case(batch_norm_from(nn.BatchNorm2d, case, 2, { momentum = 0.3, eps = 1e-3 }), case)
  end)

  it("BatchNorm1d on [N, C] and on [N, C, L]", function()
    check_batch_norm_case(batch_norm_from(nn.BatchNorm1d, G.bn1d_nc, 4), G.bn1d_nc)
    check_batch_norm_case(batch_norm_from(nn.BatchNorm1d, G.bn1d_ncl, 2), G.bn1d_ncl)
  end)

  it("momentum = false is torch's momentum=None: a cumulative moving average over num_batches_tracked", function()
    local case = G.bn1d_cumulative
    local m = batch_norm_from(nn.BatchNorm1d, case, 2, { momentum = false })
    assert.matches("momentum=None", m:extra_repr())
    check_batch_norm_case(m, case)
  end)

  it("track_running_stats = false: no buffers, the batch's statistics in eval too", function()
    local case = G.bn2d_untracked
    local m = batch_norm_from(nn.BatchNorm2d, case, 3, { track_running_stats = false })
    assert.are.equal(0, #m:buffers())
    assert.is_nil(m.running_mean)
    check_batch_norm_case(m, case)
  end)

  it("affine = false: no parameters", function()
    local case = G.bn2d_no_affine
    local m = batch_norm_from(nn.BatchNorm2d, case, 2, { affine = false })
    assert.are.equal(0, #m:parameters())
    check_batch_norm_case(m, case)
  end)

  it("gradcheck in training and in eval mode (input, weight, bias)", function()
    tl.manual_seed(7)
    for _, spec in ipairs({ { nn.BatchNorm1d, { 4, 3 } }, { nn.BatchNorm1d, { 3, 2, 4 } },
      { nn.BatchNorm2d, { 2, 3, 2, 2 } } }) do
      local m = spec[1](spec[2][2]):double()
      tl.no_grad(function()
        m.weight:copy_(tl.randn(spec[2][2]):double())
        m.bias:copy_(tl.randn(spec[2][2]):double())
      end)
      local x = tl.randn(spec[2]):double():requires_grad_()
      -- training mode moves the running statistics at each call; the output does not depend on them
      assert.is_true(gradcheck(function(a, w, b)
        m.weight, m.bias = w, b
        return m(a)
      end, { x, m.weight, m.bias }))
      m:eval()
      assert.is_true(gradcheck(function(a) return m(a) end, { x }))
    end
  end)

  it("buffers appear in the state dict and load back into a fresh module", function()
    local m = nn.BatchNorm2d(3):double()
    for _ = 1, 3 do m(tl.randn(4, 3, 2, 2):double() * 2 + 1) end
    local sd = m:state_dict()
    assert.are.same({ "weight", "bias", "running_mean", "running_var", "num_batches_tracked" }, nn.keys(sd))
    local fresh = nn.BatchNorm2d(3):double()
    fresh:load_state_dict(sd)
    assert.tensor_equal(m.running_mean, fresh.running_mean)
    assert.tensor_equal(m.running_var, fresh.running_var)
    assert.are.equal(3, fresh.num_batches_tracked:item())
    -- to(dtype) casts the floating buffers and keeps the counter an integer
    fresh:to("float32")
    assert.are.equal("float32", fresh.running_mean.dtype)
    assert.are.equal("int64", fresh.num_batches_tracked.dtype)
    local x = tl.randn(2, 3, 2, 2):double()
    m:eval()
    fresh:double():eval()
    assert.tensor_near(m(x), fresh(x), 1e-6, 1e-6)
  end)

  it("reset_running_stats and reset_parameters", function()
    local m = nn.BatchNorm1d(2)
    m(tl.randn(4, 2) * 3 + 2)
    m:reset_running_stats()
    assert.tensor_equal(tl.zeros(2), m.running_mean)
    assert.tensor_equal(tl.ones(2), m.running_var)
    assert.are.equal(0, m.num_batches_tracked:item())
  end)

  it("float32 follows float64; bfloat16 and float16 compute in float32 and keep their dtype", function()
    tl.manual_seed(3)
    local x = tl.randn(6, 3, 4) * 2 + 1
    local ref = nn.BatchNorm1d(3):double()
    local want = ref(x:double())
    for _, dtype in ipairs({ "float32", "bfloat16", "float16" }) do
      local m = nn.BatchNorm1d(3)
      local y = m(x:to(dtype))
      assert.are.equal(dtype, y.dtype)
      local tol = dtype == "float32" and 1e-5 or 2e-2
      assert.tensor_near(want, y:double(), tol, tol, dtype)
      assert.tensor_near(ref.running_var, m.running_var:double(), tol, tol, dtype .. " running_var")
    end
  end)

  it("printing", function()
    assert.matches("BatchNorm2d%(8, eps=1e%-05, momentum=0.1, affine=true, track_running_stats=true%)",
      tostring(nn.BatchNorm2d(8)))
  end)

  it("bad options and inputs: errors naming the class, nothing changed", function()
    assert.error_matches(function() nn.BatchNorm2d(3, { momentun = 0.1 }) end,
      { "nn.BatchNorm2d", "unknown option 'momentun'" })
    assert.error_matches(function() nn.BatchNorm2d(3, { momentum = true }) end, { "nn.BatchNorm2d", "momentum" })
    assert.error_matches(function() nn.BatchNorm2d(3, { momentum = 1.5 }) end, { "nn.BatchNorm2d", "[0, 1]" })
    assert.error_matches(function() nn.BatchNorm2d(3, { eps = -1 }) end, { "nn.BatchNorm2d", "eps" })
    assert.error_matches(function() nn.BatchNorm1d(0) end, { "nn.BatchNorm1d", "num_features" })
    assert.error_matches(function() nn.BatchNorm1d(2.5) end, { "nn.BatchNorm1d", "num_features" })
    local m = nn.BatchNorm2d(3)
    assert.error_matches(function() m(tl.randn(2, 3, 4)) end, { "nn.BatchNorm2d", "4D", "[2, 3, 4]" })
    assert.error_matches(function() m(tl.randn(2, 4, 2, 2)) end, { "nn.BatchNorm2d", "3 channels" })
    assert.error_matches(function() m(tl.randn(1, 3, 1, 1)) end, { "nn.BatchNorm2d", "more than 1 value" })
    assert.error_matches(function() m(tl.ones(2, 3, 2, 2, { dtype = "int64" })) end, { "nn.BatchNorm2d", "floating" })
    assert.error_matches(function() nn.BatchNorm1d(3)(tl.randn(2, 3, 4, 5)) end, { "nn.BatchNorm1d", "2D", "3D" })
    assert.are.equal(0, m.num_batches_tracked:item())
    assert.tensor_equal(tl.zeros(3), m.running_mean)
    -- eval mode takes a single value per channel
    m:eval()
    assert.are.same({ 1, 3, 1, 1 }, m(tl.randn(1, 3, 1, 1)).shape)
  end)
end)

describe("nn.functional.batch_norm", function()
  it("not training: the running statistics, weight and bias (torch values)", function()
    local c = G.f_bn_eval
    local y = F.batch_norm(t64(c.x), t64(c.rm), t64(c.rv), { weight = t64(c.w), bias = t64(c.b), eps = 1e-4 })
    assert.tensor_near(c.y, y, 1e-12, 1e-12)
  end)

  it("training: batch statistics, the running ones updated in place with the momentum given", function()
    local c, g = G.f_bn_eval, G.f_bn_train
    local rm, rv = t64(c.rm), t64(c.rv)
    local y = F.batch_norm(t64(c.x), rm, rv, { training = true, momentum = 0.25 })
    assert.tensor_near(g.y, y, 1e-10, 1e-12)
    assert.tensor_near(g.rm, rm, 1e-12, 1e-13)
    assert.tensor_near(g.rv, rv, 1e-12, 1e-13)
    -- without running statistics
    assert.tensor_near(g.y, F.batch_norm(t64(c.x), nil, nil, { training = true }), 1e-10, 1e-12)
  end)

  it("bad arguments", function()
    local x = tl.randn(3, 4)
    assert.error_matches(function() F.batch_norm(x, nil, nil) end, { "batch_norm", "required when not training" })
    assert.error_matches(function() F.batch_norm(x, tl.zeros(4), nil, { training = true }) end,
      { "batch_norm", "both" })
    assert.error_matches(function() F.batch_norm(x, tl.zeros(3), tl.ones(3)) end,
      { "batch_norm", "running_mean", "[4]", "[3]" })
    assert.error_matches(function() F.batch_norm(x, tl.zeros(4), tl.ones(4), { weight = tl.ones(5) }) end,
      { "batch_norm", "weight", "[4]", "[5]" })
    assert.error_matches(function() F.batch_norm(x, nil, nil, { training = true, momentun = 0.1 }) end,
      { "batch_norm", "unknown option 'momentun'" })
    assert.error_matches(function() F.batch_norm(tl.randn(3), nil, nil, { training = true }) end,
      { "batch_norm", "at least 2 dims" })
  end)
end)

describe("nn.GroupNorm against PyTorch", function()
  local function check(case, groups, c, opts)
    local m = nn.GroupNorm(groups, c, opts):double()
    if case.weight then
      tl.no_grad(function()
        m.weight:copy_(t64(case.weight))
        m.bias:copy_(t64(case.bias))
      end)
    end
    local x, y = run(m, case.x, case.gy)
    assert.tensor_near(case.y, y, 1e-10, 1e-12, "output")
    assert.tensor_near(case.gx, x.grad, 1e-9, 1e-11, "input gradient")
    if case.weight then
      assert.tensor_near(case.gw, m.weight.grad, 1e-9, 1e-11, "weight gradient")
      assert.tensor_near(case.gb, m.bias.grad, 1e-9, 1e-11, "bias gradient")
    else
      assert.are.equal(0, #m:parameters())
    end
  end

  it("[N, C, L], [N, C, H, W], [N, C] and affine = false: values and gradients", function()
    check(G.gn_ncl, 2, 4)
    check(G.gn_nchw, 3, 6, { eps = 1e-3 })
    check(G.gn_nc, 4, 4)
    check(G.gn_no_affine, 1, 4, { affine = false })
  end)

  it("gradcheck", function()
    tl.manual_seed(11)
    local x, w, b = tl.randn(2, 4, 3):double():requires_grad_(), tl.randn(4):double():requires_grad_(),
      tl.randn(4):double():requires_grad_()
    assert.is_true(gradcheck(function(a, ww, bb) return F.group_norm(a, 2, { weight = ww, bias = bb }) end,
      { x, w, b }))
  end)

  it("bad options and inputs", function()
    assert.error_matches(function() nn.GroupNorm(3, 4) end, { "nn.GroupNorm", "divisible" })
    assert.error_matches(function() nn.GroupNorm(2, 4, { afine = false }) end,
      { "nn.GroupNorm", "unknown option 'afine'" })
    assert.error_matches(function() nn.GroupNorm(2, 4)(tl.randn(2, 6, 3)) end, { "nn.GroupNorm", "[N, 4, ...]" })
    assert.error_matches(function() F.group_norm(tl.randn(2, 6), 4) end, { "group_norm", "divisible" })
    assert.error_matches(function() F.group_norm(tl.randn(2, 6), 0) end, { "group_norm", "num_groups" })
    assert.error_matches(function() F.group_norm(tl.randn(2, 6), 2, { weight = tl.ones(3) }) end,
      { "group_norm", "weight", "[6]" })
  end)
end)

describe("nn.RMSNorm against PyTorch's formula", function()
  local function check(case, shape, opts)
    local m = nn.RMSNorm(shape, opts):double()
    if case.weight then tl.no_grad(function() m.weight:copy_(t64(case.weight)) end) end
    local x, y = run(m, case.x, case.gy)
    assert.tensor_near(case.y, y, 1e-10, 1e-12, "output")
    assert.tensor_near(case.gx, x.grad, 1e-9, 1e-11, "input gradient")
    if case.weight then assert.tensor_near(case.gw, m.weight.grad, 1e-9, 1e-11, "weight gradient") end
  end

  it("the last dim with eps = finfo eps, two dims with eps = 1e-3, elementwise_affine = false", function()
    check(G.rms_last, 5)
    check(G.rms_two, { 2, 4 }, { eps = 1e-3 })
    check(G.rms_no_affine, 6, { eps = 1e-6, elementwise_affine = false })
  end)

  it("the default eps is the input dtype's machine epsilon", function()
    -- zeros: y = 0 * rsqrt(eps) = 0 and the gradient of sum(y) is rsqrt(eps) at every element
    for dtype, eps in pairs({ float64 = 2 ^ -52, float32 = 2 ^ -23 }) do
      local a = tl.zeros(2, 3, { dtype = dtype }):requires_grad_()
      tl.backward(F.rms_norm(a, 3):sum())
      assert.tensor_near(tl.full({ 2, 3 }, 1 / math.sqrt(eps), { dtype = "float64" }), a.grad:double(), 1e-6, 0)
    end
  end)

  it("gradcheck", function()
    tl.manual_seed(13)
    local x, w = tl.randn(3, 2, 4):double():requires_grad_(), tl.randn(2, 4):double():requires_grad_()
    assert.is_true(gradcheck(function(a, ww) return F.rms_norm(a, { 2, 4 }, { weight = ww, eps = 1e-5 }) end, { x, w }))
  end)

  it("bad options and inputs", function()
    assert.error_matches(function() nn.RMSNorm(4, { epsilon = 1e-5 }) end, { "nn.RMSNorm", "unknown option 'epsilon'" })
    assert.error_matches(function() nn.RMSNorm(0) end, { "nn.RMSNorm", "normalized_shape" })
    assert.error_matches(function() nn.RMSNorm(4)(tl.randn(2, 5)) end, { "rms_norm", "[4]", "[2, 5]" })
    assert.error_matches(function() F.rms_norm(tl.randn(2, 4), 4, { weight = tl.ones(5) }) end,
      { "rms_norm", "weight" })
    assert.error_matches(function() F.rms_norm(tl.ones(2, 4, { dtype = "int64" }), 4) end, { "rms_norm", "floating" })
  end)
end)

describe("normalization on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the normalization layers did not run")
    return
  end

  it("BatchNorm2d (train then eval), GroupNorm and RMSNorm: CPU and CUDA agree, gradients included", function()
    tl.manual_seed(21)
    local x = tl.randn(4, 6, 5, 5) * 2 + 1
    for _, make in ipairs({
      function() return nn.BatchNorm2d(6) end,
      function() return nn.BatchNorm2d(6, { momentum = false }) end,
      function() return nn.GroupNorm(3, 6) end,
      function() return nn.RMSNorm(5) end,
    }) do
      local cpu, gpu = make(), make():to("cuda")
      for step = 1, 3 do
        local a, b = x:clone():requires_grad_(), x:to("cuda"):requires_grad_()
        local ya, yb = cpu(a * step), gpu(b * step)
        assert.tensor_near(ya, yb:to("cpu"), 1e-4, 1e-4)
        tl.backward((ya * ya):sum())
        tl.backward((yb * yb):sum())
        assert.tensor_near(a.grad, b.grad:to("cpu"), 1e-3, 1e-3)
      end
      for _, buf in ipairs({ "running_mean", "running_var" }) do
        if cpu[buf] then assert.tensor_near(cpu[buf], gpu[buf]:to("cpu"), 1e-4, 1e-4) end
      end
      cpu:eval()
      gpu:eval()
      assert.tensor_near(cpu(x), gpu(x:to("cuda")):to("cpu"), 1e-4, 1e-4)
    end
  end)
end)
