-- create_graph (double backward) through the nn ops: gradgradcheck (second derivatives against finite differences, float64) for conv2d, conv_transpose2d, batch_norm (batch and running statistics), the fused LSTM and GRU cells, the poolings and interpolate, third derivatives through the nodes their formulas record, a gradient penalty through a Conv2d + BatchNorm2d + LSTMCell model checked by finite differences, the error for an nn op still without a formula, and (#cuda) second derivatives on CUDA against the CPU's.
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradgradcheck = tl.autograd.gradgradcheck

local function randn(...)
  return tl.randn({ ... }, { dtype = "float64" }):requires_grad_()
end

local function inputs_of(shapes)
  local list = {}
  for i, shape in ipairs(shapes) do list[i] = randn(table.unpack(shape)) end
  return list
end

-- The second derivatives' cases: name, fn, input shapes.
local function conv2d_case(stride, padding, dilation, groups)
  return function(x, w, b)
    return F.conv2d(x, w, b, { stride = stride, padding = padding, dilation = dilation, groups = groups }):tanh()
  end
end

local function lstm_both(g1, g2, c)
  local h, c2 = tl.lstm_cell_pointwise(g1, g2, c)
  return { h:tanh(), c2 * c2 }
end

local function lstm_one(g, c)
  local h, c2 = tl.lstm_cell_pointwise(g, c)
  return { h * h, c2:sigmoid() }
end

local CASES = {
  { "conv2d: stride 2, padding 1, bias", conv2d_case(2, 1, 1, 1), { { 2, 2, 5, 5 }, { 3, 2, 3, 3 }, { 3 } } },
  { "conv2d: dilation 2, groups 2, an input size the stride leaves a row of", conv2d_case(2, 0, 2, 2),
    { { 1, 4, 6, 7 }, { 4, 2, 2, 2 }, { 4 } } },
  { "conv_transpose2d: stride 2, padding 1, output_padding 1, groups 2", function(x, w, b)
    return F.conv_transpose2d(x, w, b, { stride = 2, padding = 1, output_padding = 1, groups = 2 }):tanh()
  end, { { 1, 4, 3, 3 }, { 4, 1, 3, 3 }, { 2 } } },
  { "conv_transpose2d: output_padding 2 >= stride 2 (< dilation 3), the input widened", function(x, w, b)
    return F.conv_transpose2d(x, w, b, { stride = 2, output_padding = { 2, 1 }, dilation = 3 }):tanh()
  end, { { 1, 2, 3, 2 }, { 2, 2, 2, 2 }, { 2 } } },
  { "batch_norm on the batch's statistics, affine, 4-D", function(x, w, b)
    return F.batch_norm(x, nil, nil, { weight = w, bias = b, training = true, eps = 1e-3 }):tanh()
  end, { { 3, 2, 2, 3 }, { 2 }, { 2 } } },
  { "batch_norm on the batch's statistics, no weight, 2-D, times the input", function(x)
    return F.batch_norm(x, nil, nil, { training = true }) * x
  end, { { 5, 3 } } },
  { "batch_norm on running statistics (eval)", function(x, w, b)
    local rm = tl.tensor({ 0.2, -0.1 }, { dtype = "float64", device = x.device })
    local rv = tl.tensor({ 1.5, 0.7 }, { dtype = "float64", device = x.device })
    return F.batch_norm(x, rm, rv, { weight = w, bias = b, training = false }):tanh()
  end, { { 2, 2, 3 }, { 2 }, { 2 } } },
  { "lstm_cell_pointwise with two gate inputs", lstm_both, { { 3, 8 }, { 3, 8 }, { 3, 2 } } },
  { "lstm_cell_pointwise with one gate input", lstm_one, { { 2, 12 }, { 2, 3 } } },
  { "gru_cell_pointwise", function(gi, gh, h)
    return tl.gru_cell_pointwise(gi, gh, h):tanh()
  end, { { 3, 6 }, { 3, 6 }, { 3, 2 } } },
  { "max_pool2d (stride 2, padding 1)", function(x)
    return tl.max_pool2d(x, 3, { stride = 2, padding = 1 }):tanh()
  end, { { 1, 2, 5, 5 } } },
  { "adaptive_max_pool2d", function(x) return tl.adaptive_max_pool2d(x, { 2, 3 }):tanh() end, { { 2, 1, 5, 6 } } },
  { "avg_pool2d (ceil_mode, padding, count_include_pad = false)", function(x)
    return tl.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false }):tanh()
  end, { { 1, 2, 6, 5 } } },
  { "adaptive_avg_pool2d", function(x) return tl.adaptive_avg_pool2d(x, { 2, 3 }):tanh() end, { { 1, 2, 5, 7 } } },
  { "interpolate: bilinear, scale_factor 2", function(x)
    return F.interpolate(x, { scale_factor = 2, mode = "bilinear" }):tanh()
  end, { { 1, 2, 3, 2 } } },
  { "interpolate: bilinear, align_corners, size", function(x)
    return F.interpolate(x, { size = { 4, 5 }, mode = "bilinear", align_corners = true }):tanh()
  end, { { 1, 1, 3, 3 } } },
  { "interpolate: nearest, size", function(x)
    return F.interpolate(x, { size = { 5, 3 }, mode = "nearest" }):tanh()
  end, { { 1, 2, 2, 2 } } },
}

-- fn's first derivatives at inputs for fixed output weights, with or without create_graph
local function first_derivatives_at(fn, inputs, create_graph)
  local outputs = fn(table.unpack(inputs))
  if tl.is_tensor(outputs) then outputs = { outputs } end
  local v = {}
  for o, out in ipairs(outputs) do
    v[o] = tl.arange(1, out:numel() + 1, { dtype = "float64" }):mul(0.3 + o):sin():reshape(out.shape)
  end
  return tl.autograd.grad(outputs, inputs, { grad_outputs = v, create_graph = create_graph })
end

describe("gradgradcheck through the nn ops", function()
  for _, case in ipairs(CASES) do
    it(case[1], function()
      tl.manual_seed(5)
      local inputs = inputs_of(case[3])
      -- the recorded formulas give the first derivatives the kernels give (which gradcheck_spec
      -- checks against finite differences) ...
      local plain, recorded = first_derivatives_at(case[2], inputs, false), first_derivatives_at(case[2], inputs, true)
      for i = 1, #inputs do
        assert.is_true(recorded[i].requires_grad)
        assert.tensor_near(plain[i], recorded[i], 1e-12, 1e-13)
      end
      -- ... and their own derivatives match finite differences
      assert.is_true(gradgradcheck(case[2], inputs))
    end)
  end
end)

-- fn's first derivatives, themselves differentiable: the third derivatives go through the nodes
-- the nn formulas record (conv2d's weight gradient, the poolings' adjoints)
local function first_derivatives(fn)
  return function(...)
    local args = { ... }
    return tl.enable_grad(function()
      local out = fn(table.unpack(args))
      local v = tl.arange(1, out:numel() + 1, { dtype = "float64" }):mul(0.9):cos():reshape(out.shape)
      return tl.autograd.grad(out, args, { grad_outputs = v, create_graph = true })
    end)
  end
end

describe("third derivatives through the nodes the nn formulas record", function()
  local cases = {
    { "conv2d (conv_transpose2d and conv2d_backward_weight)", conv2d_case(2, 1, 1, 1),
      { { 1, 2, 4, 5 }, { 2, 2, 3, 3 }, { 2 } } },
    { "conv_transpose2d", function(x, w)
      return F.conv_transpose2d(x, w, nil, { stride = 2, padding = 1 }):tanh()
    end, { { 1, 2, 3, 3 }, { 2, 2, 3, 3 } } },
    { "avg_pool2d (avg_pool2d_backward)", function(x)
      return tl.avg_pool2d(x, 2, { stride = 1, padding = 1, count_include_pad = false }):tanh()
    end, { { 1, 1, 3, 4 } } },
    { "adaptive_avg_pool2d (adaptive_avg_pool2d_backward)", function(x)
      return tl.adaptive_avg_pool2d(x, { 2, 2 }):tanh()
    end, { { 1, 2, 3, 5 } } },
    { "interpolate (upsample_bilinear2d_backward)", function(x)
      return F.interpolate(x, { size = { 3, 4 }, mode = "bilinear" }):tanh()
    end, { { 1, 1, 2, 3 } } },
  }
  for _, case in ipairs(cases) do
    it(case[1], function()
      tl.manual_seed(9)
      local inputs, fn = inputs_of(case[3]), first_derivatives(case[2])
      -- the second derivatives the recorded nodes' formulas give are their plain gradients' ...
      local plain, recorded = first_derivatives_at(fn, inputs, false), first_derivatives_at(fn, inputs, true)
      for i = 1, #inputs do assert.tensor_near(plain[i], recorded[i], 1e-12, 1e-13) end
      -- ... and their derivatives match finite differences
      assert.is_true(gradgradcheck(fn, inputs))
    end)
  end
end)

describe("create_graph through nn models", function()
  it("a gradient penalty through Conv2d + BatchNorm2d + LSTMCell: its parameter gradients match finite differences", function()
    tl.manual_seed(21)
    local conv = nn.Conv2d(2, 3, 3, { padding = 1, dtype = "float64" })
    local bn = nn.BatchNorm2d(3, { dtype = "float64" })
    local cell = nn.LSTMCell(3, 2, { dtype = "float64" })
    local head = nn.Linear(2, 1, { dtype = "float64" })
    local params = {}
    for _, m in ipairs({ conv, bn, cell, head }) do
      for _, p in ipairs(m:parameters()) do params[#params + 1] = p end
    end
    -- bn's weight and bias start at 1 and 0: move them off those for a general point
    tl.no_grad(function()
      bn.weight:copy_(tl.tensor({ 0.8, 1.3, -0.6 }, { dtype = "float64" }))
      bn.bias:copy_(tl.tensor({ 0.1, -0.2, 0.3 }, { dtype = "float64" }))
    end)
    local x = tl.randn(2, 2, 3, 3, { dtype = "float64" })
    local function critic(xi)
      local y = bn(conv(xi)):tanh()
      local seq = tl.avg_pool2d(y, 3):reshape(2, 3)
      local h, c = cell(seq)
      h = cell(seq * 0.5, { h, c })
      return head(h):sum()
    end
    -- mean over samples of (|d critic / d x| - 1)^2 (enable_grad: gradcheck's finite
    -- differences run it under no_grad)
    local function penalty()
      return tl.enable_grad(function()
        local xi = x:detach():requires_grad_()
        local gx = tl.autograd.grad(critic(xi), xi, { create_graph = true })[1]
        local norm = ((gx * gx):sum({ 2, 3, 4 }) + 1e-12):sqrt()
        local d = norm - 1
        return (d * d):mean()
      end)
    end
    assert.is_true(tl.autograd.gradcheck(function() return penalty() end, params))
    -- backward of the penalty reaches every parameter but the head's bias (d critic / d x does
    -- not depend on it)
    for _, p in ipairs(params) do p.grad = nil end
    penalty():backward()
    for i, p in ipairs(params) do
      if p ~= head.bias then assert.is_not_nil(p.grad, "parameter " .. i .. " got no gradient") end
    end
    assert.is_nil(head.bias.grad)
  end)

  it("an nn op still without a differentiable gradient is an error naming it", function()
    local logits = randn(3, 4)
    local target = tl.tensor({ 1, 4, 2 }, { dtype = "int64" })
    local loss = F.cross_entropy(logits, target)
    assert.error_matches(function() tl.autograd.grad(loss, logits, { create_graph = true }) end,
      { "create_graph", "'cross_entropy'", "not differentiable yet", "conv2d", "batch_norm" })
    -- without create_graph the same graph is fine
    assert.are.same({ 3, 4 }, tl.autograd.grad(loss, logits)[1].shape)
  end)
end)

describe("create_graph through the nn ops on CUDA #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA double-backward nn specs did not run")
    return
  end
  -- A Hessian-vector product of fn at the inputs (CPU float64 tensors) on device: the first
  -- derivatives for fixed pseudo-random output weights, recorded, then the derivative of their
  -- product with fixed pseudo-random directions, back on the CPU
  local function hvp(fn, inputs, device)
    local args = {}
    for i, t in ipairs(inputs) do args[i] = t:detach():to(device):requires_grad_() end
    local outputs = fn(table.unpack(args))
    if tl.is_tensor(outputs) then outputs = { outputs } end
    local v = {}
    for o, out in ipairs(outputs) do
      v[o] = tl.arange(1, out:numel() + 1, { dtype = "float64" }):mul(0.3 + o):sin():reshape(out.shape):to(device)
    end
    local grads = tl.autograd.grad(outputs, args, { grad_outputs = v, create_graph = true, allow_unused = true })
    local total
    for i, g in ipairs(grads) do
      if g and g.requires_grad then
        local u = tl.arange(1, g:numel() + 1, { dtype = "float64" }):mul(0.7 + i):cos():reshape(g.shape):to(device)
        local term = (g * u):sum()
        total = total and total + term or term
      end
    end
    local second = tl.autograd.grad(total, args, { allow_unused = true })
    local out = {}
    for i = 1, #args do out[i] = second[i] and second[i]:to("cpu") or false end
    return out
  end
  for _, case in ipairs(CASES) do
    it(case[1] .. ": CUDA's second derivatives match the CPU's", function()
      tl.manual_seed(5)
      local inputs = inputs_of(case[3])
      local cpu, cuda = hvp(case[2], inputs, "cpu"), hvp(case[2], inputs, "cuda")
      for i = 1, #inputs do
        assert.are.equal(not cpu[i], not cuda[i])
        if cpu[i] then assert.tensor_near(cpu[i], cuda[i], 1e-9, 1e-10) end
      end
    end)
  end
  it("cuDNN off: conv2d's second derivatives through im2col and cuBLAS match the CPU's", function()
    local was = tl.cuda.cudnn_enabled()
    tl.cuda.set_cudnn_enabled(false)
    local ok, err = pcall(function()
      tl.manual_seed(5)
      local inputs = inputs_of(CASES[2][3])
      local cpu, cuda = hvp(CASES[2][2], inputs, "cpu"), hvp(CASES[2][2], inputs, "cuda")
      for i = 1, #inputs do assert.tensor_near(cpu[i], cuda[i], 1e-9, 1e-10) end
    end)
    tl.cuda.set_cudnn_enabled(was)
    assert(ok, err)
  end)
end)
