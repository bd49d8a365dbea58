-- tl.nn: the nn ops from Lua (values against PyTorch, 1-based indices, errors, every dtype
-- against float64), every module gradchecked in float64, the Module API (parameters, names,
-- train/eval, to, zero_grad, state dicts, printing) and the init helpers.
local tl = require("tlua")
local nn = tl.nn
local gradcheck = tl.autograd.gradcheck

-- exact inputs shared with the golden script below: ((i * mul) % mod - off) / div, i from 0
local function vals(shape, mul, mod, off, div)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local flat = {}
  for i = 0, n - 1 do flat[i + 1] = ((i * mul) % mod - off) / div end
  return tl.tensor(flat, { dtype = "float64" }):view(shape)
end

local function input(...)
  return tl.randn(...):double():requires_grad_()
end

-- equal elementwise, a NaN equal to a NaN (an op outside its domain gives NaN in both)
local function all_equal(a, b)
  local ta, tb = a:detach():double():totable(), b:detach():double():totable()
  local function walk(x, y)
    if type(x) == "table" then
      for i = 1, #x do if not walk(x[i], y[i]) then return false end end
      return true
    end
    return x == y or (x ~= x and y ~= y)
  end
  return walk(ta, tb)
end

-- Golden values from PyTorch 1.13 (torch.nn.functional, float64), computed with
--   /usr/bin/python3 nn_golden.py
-- where nn_golden.py is:
--   import torch; import torch.nn.functional as F; torch.set_default_dtype(torch.float64)
--   def vals(*shape, mul=7, mod=11, off=5, div=4.0):
--       n = 1
--       for s in shape: n *= s
--       return torch.tensor([((i * mul) % mod - off) / div for i in range(n)]).reshape(shape)
--   x = vals(2, 2, 5, 5); w = vals(3, 2, 3, 3, mul=5, mod=7, off=3); b = torch.tensor([0.5, -0.25, 1.0])
--   print(F.conv2d(x, w, b, stride=2, padding=1).tolist())
--   print(F.conv2d(x, w, None, stride=(1, 2), padding=(0, 1)).tolist())
--   xp = vals(1, 2, 5, 5, mul=13, mod=17, off=8); print(F.max_pool2d(xp, 3, stride=2, padding=1).tolist())
--   lg = vals(4, 5, mul=5, mod=17, off=7, div=3.0); t = torch.tensor([0, 4, 2, 1])
--   print(F.cross_entropy(lg, t).item(), F.cross_entropy(lg, t, label_smoothing=0.1).item())
--   xl = vals(3, 4, mul=5, mod=13, off=4); wl = torch.tensor([1.0, 0.5, -1.0, 2.0])
--   bl = torch.tensor([0.0, 0.1, 0.2, 0.3]); print(F.layer_norm(xl, (4,), wl, bl, eps=1e-5).tolist())
local golden = {
  conv2d = {{{{-0.125, -0.0625, -0.625}, {-0.1875, -0.3125, 2.75}, {0.625, -0.3125, 0.25}}, {{-1.9375, 0.6875, -0.4375}, {2.25, 1.5, -0.875}, {-0.75, -1.875, 0.25}}, {{0.4375, 0.375, 2.625}, {0.5625, 0.0625, 1.0}, {0.75, 0.3125, 0.9375}}}, {{{2.3125, 0.3125, 0.1875}, {-2.25, 2.125, -0.875}, {2.3125, 1.875, 0.5}}, {{-1.625, -0.5625, -0.875}, {-2.125, 0.8125, 2.125}, {0.375, -1.3125, -0.75}}, {{-0.5, 2.3125, 0.9375}, {3.5, 1.0625, 1.0}, {1.3125, -0.75, 2.625}}}},
  conv2d_s12_p01 = {{{{-2.75, 1.625, -1.375}, {-0.6875, -0.8125, 2.25}, {1.375, 2.25, 0.375}}, {{-1.875, 1.0625, 2.375}, {2.5, 1.75, -0.625}, {1.375, -2.375, -0.875}}, {{2.5, 0.0625, 0.0}, {-0.4375, -0.9375, 0.0}, {0.0625, -2.625, 1.375}}}, {{{-0.6875, -0.0625, -1.5625}, {-2.75, 1.625, -1.375}, {-0.6875, -0.8125, 2.25}}, {{-2.125, 1.75, 0.5625}, {-1.875, 1.0625, 2.375}, {2.5, 1.75, -0.625}}, {{-0.0625, -1.6875, 1.375}, {2.5, 0.0625, 0.0}, {-0.4375, -0.9375, 0.0}}}},
  max_pool2d = {{{{1.5, 1.25, 1.75}, {1.5, 2.0, 2.0}, {0.0, 1.5, 1.25}}, {{2.0, 1.75, -0.25}, {2.0, 1.75, 1.75}, {0.5, 2.0, 1.75}}}},
  cross_entropy = 2.477845098361512,
  cross_entropy_ls = 2.4928450983615122,
  layer_norm = {{-1.1283232673864263, 0.19955793535762587, -1.32655500881693, -0.8946952242915103}, {-0.3429939421219302, 0.7859878842438603, 1.5719757684877207, 0.9859878842438603}, {-1.1283232673864263, 0.19955793535762587, -1.32655500881693, -0.8946952242915103}},
}

describe("nn ops from Lua", function()
  it("conv2d matches PyTorch with stride, padding and bias (numbers or {h, w})", function()
    local x = vals({ 2, 2, 5, 5 }, 7, 11, 5, 4)
    local w = vals({ 3, 2, 3, 3 }, 5, 7, 3, 4)
    local b = tl.tensor({ 0.5, -0.25, 1.0 }, { dtype = "float64" })
    assert.tensor_near(golden.conv2d, tl.conv2d(x, w, b, { stride = 2, padding = 1 }), 1e-12, 1e-12)
    assert.tensor_near(golden.conv2d_s12_p01, tl.conv2d(x, w, nil, { stride = { 1, 2 }, padding = { 0, 1 } }), 1e-12, 1e-12)
    -- the options table may take the bias's place
    assert.tensor_near(golden.conv2d_s12_p01, tl.conv2d(x, w, { stride = { 1, 2 }, padding = { 0, 1 } }), 1e-12, 1e-12)
  end)

  it("max_pool2d matches PyTorch; the stride defaults to the kernel size", function()
    local x = vals({ 1, 2, 5, 5 }, 13, 17, 8, 4)
    assert.tensor_near(golden.max_pool2d, tl.max_pool2d(x, 3, { stride = 2, padding = 1 }), 0, 0)
    local y = tl.tensor({ { { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 }, { 13, 14, 15, 16 } } } }, { dtype = "float32" })
    assert.tensor_equal(tl.tensor({ { { { 6, 8 }, { 14, 16 } } } }, { dtype = "float32" }), tl.max_pool2d(y, 2))
    assert.tensor_equal(tl.tensor({ { { { 6, 7, 8 }, { 10, 11, 12 }, { 14, 15, 16 } } } }, { dtype = "float32" }),
      tl.max_pool2d(y, { 2, 2 }, { stride = 1 }))
  end)

  it("cross_entropy takes 1-based classes and matches PyTorch, with label smoothing", function()
    local logits = vals({ 4, 5 }, 5, 17, 7, 3)
    local target = tl.tensor({ 1, 5, 3, 2 })
    assert.tensor_near(golden.cross_entropy, tl.cross_entropy(logits, target), 1e-12, 1e-12)
    assert.tensor_near(golden.cross_entropy_ls, tl.cross_entropy(logits, target, { label_smoothing = 0.1 }), 1e-12, 1e-12)
    assert.tensor_near(golden.cross_entropy_ls, tl.cross_entropy(logits, target:int(), 0.1), 1e-12, 1e-12)
    assert.tensor_near(golden.cross_entropy_ls, nn.functional.cross_entropy(logits, target, { label_smoothing = 0.1 }), 1e-12, 1e-12)
    assert.tensor_near(golden.cross_entropy_ls, nn.CrossEntropyLoss({ label_smoothing = 0.1 })(logits, target), 1e-12, 1e-12)
  end)

  it("layer_norm matches PyTorch", function()
    local x = vals({ 3, 4 }, 5, 13, 4, 4)
    local w = tl.tensor({ 1.0, 0.5, -1.0, 2.0 }, { dtype = "float64" })
    local b = tl.tensor({ 0.0, 0.1, 0.2, 0.3 }, { dtype = "float64" })
    assert.tensor_near(golden.layer_norm, tl.layer_norm(x, w, b, 1e-5), 1e-10, 1e-10)
    -- without weight and bias: zero mean, unit variance rows
    local y = tl.layer_norm(x)
    assert.tensor_near(tl.zeros(3, { dtype = "float64" }), y:mean(2), 0, 1e-12)
    assert.tensor_near(tl.ones(3, { dtype = "float64" }), (y * y):mean(2), 1e-4, 0)
  end)

  it("embedding takes 1-based indices of any shape", function()
    local w = tl.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { dtype = "float32" })
    local out = tl.embedding(tl.tensor({ { 3, 1 }, { 2, 2 } }), w)
    assert.tensor_equal(tl.tensor({ { { 5, 6 }, { 1, 2 } }, { { 3, 4 }, { 3, 4 } } }, { dtype = "float32" }), out)
    assert.tensor_equal(tl.tensor({ { 3, 4 } }, { dtype = "float32" }), tl.embedding(tl.tensor({ 2 }, { dtype = "int32" }), w))
  end)

  it("rejects out-of-range indices and classes in 1-based terms", function()
    local w = tl.randn(3, 2)
    assert.error_matches(function() tl.embedding(tl.tensor({ 1, 0 }), w) end,
      { "embedding", "holds 0 at position 2", "1 <= index <= 3" })
    assert.error_matches(function() tl.embedding(tl.tensor({ 4 }), w) end, { "embedding", "holds 4", "1 <= index <= 3" })
    assert.error_matches(function() tl.embedding(tl.tensor({ 1.0 }), w) end, { "embedding", "int64 or int32", "float32" })
    assert.error_matches(function() tl.cross_entropy(tl.randn(2, 3), tl.tensor({ 1, 4 })) end,
      { "cross_entropy", "target holds 4 at position 2", "1 <= index <= 3" })
    assert.error_matches(function() tl.cross_entropy(tl.randn(2, 3), tl.tensor({ 0, 1 })) end,
      { "cross_entropy", "holds 0 at position 1" })
  end)

  it("names the op and the argument in option errors", function()
    local x, w = tl.randn(1, 1, 4, 4), tl.randn(1, 1, 3, 3)
    assert.error_matches(function() tl.conv2d(x, w, nil, { strides = 2 }) end, { "conv2d", "unknown option 'strides'" })
    assert.error_matches(function() tl.conv2d(x, w, nil, { stride = { 1 } }) end, { "conv2d", "stride", "{h, w}" })
    assert.error_matches(function() tl.conv2d(x, w, nil, { padding = 0.5 }) end, { "conv2d", "padding", "integer" })
    assert.error_matches(function() tl.conv2d(x, tl.randn(1, 2, 3, 3)) end, { "conv2d" })
    assert.error_matches(function() tl.max_pool2d(x) end, { "max_pool2d", "kernel_size" })
    assert.error_matches(function() tl.cross_entropy(tl.randn(2, 3), tl.tensor({ 1, 2 }), { reduction = "sum" }) end,
      { "cross_entropy", "reduction 'sum'" })
    assert.error_matches(function() tl.layer_norm(x, 3) end, { "layer_norm", "weight", "tensor or nil" })
  end)
end)

-- every nn kernel in every floating dtype against the same computation in float64
describe("nn kernels in every dtype match float64", function()
  local tolerance = { float32 = { 1e-5, 1e-5 }, float64 = { 1e-12, 1e-12 }, bfloat16 = { 3e-2, 3e-2 }, float16 = { 3e-3, 3e-3 } }
  local cases = {
    conv2d = function(d)
      local x, w, b = tl.randn(2, 2, 5, 5), tl.randn(3, 2, 3, 3) * 0.3, tl.randn(3)
      local g = tl.randn(2, 3, 3, 3)
      return { x:to(d), w:to(d), b:to(d), g:to(d) }, function(xx, ww, bb, gg)
        xx, ww, bb = xx:detach():requires_grad_(), ww:detach():requires_grad_(), bb:detach():requires_grad_()
        local y = tl.conv2d(xx, ww, bb, { stride = 2, padding = 1 })
        y:backward(gg)
        return { y, xx.grad, ww.grad, bb.grad }
      end
    end,
    max_pool2d = function(d)
      local x, g = tl.randn(2, 3, 6, 6), tl.randn(2, 3, 3, 3)
      return { x:to(d), g:to(d) }, function(xx, gg)
        xx = xx:detach():requires_grad_()
        local y = tl.max_pool2d(xx, 2)
        y:backward(gg)
        return { y, xx.grad }
      end
    end,
    embedding = function(d)
      local w, g = tl.randn(5, 4), tl.randn(2, 3, 4)
      return { w:to(d), g:to(d) }, function(ww, gg)
        ww = ww:detach():requires_grad_()
        local y = tl.embedding(tl.tensor({ { 1, 5, 2 }, { 5, 5, 3 } }), ww)
        y:backward(gg)
        return { y, ww.grad }
      end
    end,
    cross_entropy = function(d)
      local l = tl.randn(6, 5)
      return { l:to(d) }, function(ll)
        ll = ll:detach():requires_grad_()
        local y = tl.cross_entropy(ll, tl.tensor({ 1, 2, 3, 4, 5, 1 }), 0.1)
        y:backward()
        return { y, ll.grad }
      end
    end,
    layer_norm = function(d)
      local x, w, b, g = tl.randn(4, 6), tl.randn(6), tl.randn(6), tl.randn(4, 6)
      return { x:to(d), w:to(d), b:to(d), g:to(d) }, function(xx, ww, bb, gg)
        xx, ww, bb = xx:detach():requires_grad_(), ww:detach():requires_grad_(), bb:detach():requires_grad_()
        local y = tl.layer_norm(xx, ww, bb)
        y:backward(gg)
        return { y, xx.grad, ww.grad, bb.grad }
      end
    end,
  }
  for _, name in ipairs({ "conv2d", "max_pool2d", "embedding", "cross_entropy", "layer_norm" }) do
    for _, d in ipairs({ "float32", "float64", "bfloat16", "float16" }) do
      it(name .. " forward and backward in " .. d, function()
        tl.manual_seed(21)
        local inputs, run = cases[name](d)
        local reference = {}
        for i, x in ipairs(inputs) do reference[i] = x:double() end
        local got, expected = run(table.unpack(inputs)), run(table.unpack(reference))
        for i = 1, #expected do
          assert.are.equal(d, got[i].dtype)
          local tol = tolerance[d]
          -- 16-bit results: relative to the output's scale
          local scale = expected[i]:abs():max():item()
          assert.tensor_near(expected[i], got[i]:double(), tol[1], tol[2] * math.max(1, scale),
            string.format("%s output %d in %s", name, i, d))
        end
      end)
    end
  end
end)

describe("every module passes gradcheck in float64", function()
  local function check_module(m, x, extra)
    m:double()
    local inputs = { x }
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    assert.is_true(gradcheck(function(xx) return m(xx, extra) end, inputs))
  end

  it("Linear (with and without bias)", function()
    tl.manual_seed(3)
    check_module(nn.Linear(4, 3), input(5, 4))
    check_module(nn.Linear(4, 2, { bias = false }), input(2, 3, 4))
  end)

  it("Conv2d", function()
    tl.manual_seed(3)
    check_module(nn.Conv2d(2, 3, 3, { stride = 2, padding = 1 }), input(2, 2, 5, 5))
    check_module(nn.Conv2d(1, 2, { 2, 3 }, { bias = false }), input(1, 1, 4, 5))
  end)

  it("MaxPool2d, Flatten and the activations", function()
    tl.manual_seed(3)
    check_module(nn.MaxPool2d(2), input(1, 2, 4, 4))
    check_module(nn.MaxPool2d(3, { stride = 2, padding = 1 }), input(1, 1, 5, 5))
    check_module(nn.Flatten(), input(2, 3, 2))
    check_module(nn.Flatten(1, 2), input(2, 3, 2))
    check_module(nn.GELU(), input(3, 4))
    check_module(nn.Tanh(), input(3, 4))
    check_module(nn.Sigmoid(), input(3, 4))
    local x = tl.randn(3, 4):double()
    x = (x + tl.where(x:ge(0), 0.2, -0.2)):detach():requires_grad_() -- away from relu's kink
    check_module(nn.ReLU(), x)
  end)

  it("Dropout (a fixed mask in training mode, the identity in eval mode)", function()
    local m = nn.Dropout(0.4)
    local x = input(4, 5)
    -- the same mask on every call: reseed before each forward
    assert.is_true(gradcheck(function(xx) tl.manual_seed(9) return m(xx) end, { x }))
    m:eval()
    assert.is_true(gradcheck(function(xx) return m(xx) end, { x }))
  end)

  it("LayerNorm (one and two normalized dims) and Embedding", function()
    tl.manual_seed(3)
    local ln = nn.LayerNorm(5)
    check_module(ln, input(3, 5))
    local ln2 = nn.LayerNorm({ 2, 3 })
    ln2:double()
    tl.no_grad(function()
      ln2.weight:copy_(tl.randn(2, 3))
      ln2.bias:copy_(tl.randn(2, 3))
    end)
    check_module(ln2, input(4, 2, 3))
    local emb = nn.Embedding(5, 3):double()
    local idx = tl.tensor({ { 1, 5 }, { 5, 2 } })
    assert.is_true(gradcheck(function() return emb(idx) end, { emb.weight }))
  end)

  it("Sequential, ModuleList in a custom module, and the losses", function()
    tl.manual_seed(3)
    check_module(nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)), input(3, 4))
    local Net = nn.Module:extend("Net")
    function Net:init()
      self.layers = nn.ModuleList({ nn.Linear(3, 3), nn.Linear(3, 2) })
    end
    function Net:forward(x)
      for _, layer in ipairs(self.layers) do x = tl.tanh(layer(x)) end
      return x
    end
    check_module(Net(), input(2, 3))
    local target = tl.tensor({ 2, 1, 3 })
    local ce = nn.CrossEntropyLoss({ label_smoothing = 0.1 })
    assert.is_true(gradcheck(function(l) return ce(l, target) end, { input(3, 3) }))
    local mse = nn.MSELoss()
    assert.is_true(gradcheck(function(a, b) return mse(a, b) end, { input(3, 2), input(3, 2) }))
    assert.tensor_near(tl.tensor(2.5, { dtype = "float64" }),
      mse(tl.tensor({ 1, 2 }, { dtype = "float64" }), tl.tensor({ 0, 4 }, { dtype = "float64" })), 0, 1e-15)
  end)
end)

describe("Linear", function()
  it("runs the split linear kernels forward and backward", function()
    local m = nn.Linear(8, 4)
    local x = tl.randn(16, 8)
    local forward = tl.trace(function() m(x) end)
    local ops = {}
    for _, e in ipairs(forward) do ops[e.op] = true end
    assert.is_true(ops.linear_forward)
    local backward_x = tl.trace(function() m(x:detach():requires_grad_()):sum():backward() end)
    ops = {}
    for _, e in ipairs(backward_x) do ops[e.op] = (ops[e.op] or 0) + 1 end
    assert.are.equal(1, ops.linear_backward_input)
    assert.are.equal(1, ops.linear_backward_weight)
    -- the bias's gradient comes from the weight's GEMM (its bias-gradient epilogue)
    assert.is_nil(ops.linear_backward_bias)
    -- no input gradient needed: no linear_backward_input
    m.weight.grad, m.bias.grad = nil, nil
    local backward = tl.trace(function() m(x):sum():backward() end)
    ops = {}
    for _, e in ipairs(backward) do ops[e.op] = true end
    assert.is_nil(ops.linear_backward_input)
    assert.is_true(ops.linear_backward_weight)
  end)

  it("initialises as PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias", function()
    tl.manual_seed(5)
    local m = nn.Linear(400, 300)
    local bound = 1 / math.sqrt(400)
    local w = m.weight:double()
    assert.is_true(w:abs():max():item() <= bound)
    -- a uniform on [-b, b] has std b / sqrt(3) and mean 0
    local std = math.sqrt((w * w):mean():item())
    assert.is_true(math.abs(std - bound / math.sqrt(3)) < 0.01 * bound, "std " .. std)
    assert.is_true(math.abs(w:mean():item()) < 0.01 * bound)
    assert.is_true(m.bias:abs():max():item() <= bound)
    assert.is_true(m.bias:abs():max():item() > 0.8 * bound)
    assert.are.same({ 300, 400 }, m.weight.shape)
    assert.is_true(m.weight.requires_grad and m.bias.requires_grad)
  end)
end)

describe("Module", function()
  local function mlp()
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
  end

  it("lists parameters and names in a stable order", function()
    local m = mlp()
    local names = {}
    for name, p in m:named_parameters() do names[#names + 1] = name .. ":" .. table.concat(p.shape, "x") end
    assert.are.same({ "2.weight:5x6", "2.bias:5", "4.weight:3x5", "4.bias:3" }, names)
    local params = m:parameters()
    assert.are.equal(4, #params)
    assert.are.equal(m[2].weight, params[1])
    assert.are.equal(m[4].bias, params[4])
    assert.are.equal(4, #m:children())
    assert.are.equal(5, #m:modules())
    assert.are.equal(#m, 4)
    assert.are.equal(6 * 5 + 5 + 5 * 3 + 3, m:num_parameters())
  end)

  it("registers fields of custom modules: submodules, tensors that require grad, buffers", function()
    local Net = nn.Module:extend("Net")
    function Net:init()
      self.encoder = nn.Linear(3, 4)
      self.scale = tl.ones(4):requires_grad_()
      self.not_a_parameter = tl.ones(2)
      self:register_buffer("running", tl.zeros(4))
      self.head = nn.Sequential(nn.Linear(4, 2))
      self.head2 = self.encoder -- shared: listed once
    end
    function Net:forward(x)
      self.last_hidden = self.encoder(x) * self.scale -- not a leaf: not a parameter
      return self.head(self.last_hidden + self.running)
    end
    local net = Net()
    local names = {}
    for name in net:named_parameters() do names[#names + 1] = name end
    assert.are.same({ "scale", "encoder.weight", "encoder.bias", "head.1.weight", "head.1.bias" }, names)
    local sd_names = {}
    for name in pairs(net:state_dict()) do sd_names[#sd_names + 1] = name end
    assert.are.same({ "scale", "running", "encoder.weight", "encoder.bias", "head.1.weight", "head.1.bias" }, sd_names)
    assert.are.same({ 2, 1 }, { #net:children(), #net:buffers() }) -- head2 is encoder
    assert.are.same({ 2, 2 }, net(tl.randn(2, 3)).shape)
    assert.are.equal(5, #net:parameters())
  end)

  it("switches train and eval mode recursively", function()
    local m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5)))
    assert.is_true(m[2][1].training)
    m:eval()
    assert.is_false(m.training)
    assert.is_false(m[2][1].training)
    local x = tl.randn(3, 2)
    assert.tensor_equal(m[1](x), m(x)) -- dropout is the identity in eval mode
    m:train()
    assert.is_true(m[2][1].training)
  end)

  it("Dropout zeroes about p of the elements and scales the rest by 1 / (1 - p)", function()
    tl.manual_seed(2)
    local m = nn.Dropout(0.3)
    local x = tl.ones(100000)
    local y = m(x)
    local zeros = y:eq(0):sum():item() / 100000
    assert.is_true(math.abs(zeros - 0.3) < 0.01, "fraction of zeros " .. zeros)
    local kept = y:max():item()
    assert.are.equal(tl.tensor(1 / 0.7):item(), kept)
    assert.are.equal(0, (y:ne(0):float() * (y - kept)):abs():sum():item())
  end)

  it("to(dtype) casts the floating parameters and keeps requires_grad and grads", function()
    local m = mlp()
    local old = m[2].weight
    m[2].weight.grad = tl.ones(5, 6)
    m:to("float64")
    assert.are_not.equal(old, m[2].weight)
    assert.are.equal("float64", m[2].weight.dtype)
    assert.is_true(m[2].weight.requires_grad)
    assert.is_true(m[2].weight.is_leaf)
    assert.are.equal("float64", m[2].weight.grad.dtype)
    assert.tensor_near(old:double(), m[2].weight, 0, 0)
    assert.are.equal(m[2].weight, m:parameters()[1])
    -- a parameter shared by two modules stays shared (and is listed once)
    local tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[2].weight = tied[1].weight
    assert.are.equal(3, #tied:parameters())
    tied:to("float64")
    assert.are.equal(tied[1].weight, tied[2].weight)
    assert.are.equal("float64", tied[2].weight.dtype)
    local same = m[4].bias
    m:to("cpu") -- nothing to do: the same tensors
    assert.are.equal(same, m[4].bias)
    assert.are.same({ 2, 3 }, m(tl.randn(2, 6):double()).shape)
  end)

  it("zero_grad sets every grad to nil", function()
    local m = mlp()
    m(tl.randn(2, 6)):sum():backward()
    assert.is_not_nil(m[2].weight.grad)
    m:zero_grad()
    for _, p in ipairs(m:parameters()) do assert.is_nil(p.grad) end
  end)

  it("state_dict / load_state_dict round-trip the values", function()
    tl.manual_seed(1)
    local a = mlp()
    tl.manual_seed(2)
    local b = mlp()
    local x = tl.randn(4, 6)
    assert.is_false(all_equal(a(x), b(x)))
    local keys = nn.keys(a:state_dict())
    assert.are.same({ "2.weight", "2.bias", "4.weight", "4.bias" }, keys)
    local result = b:load_state_dict(a:state_dict())
    assert.are.same({ missing = {}, unexpected = {} }, result)
    assert.tensor_equal(a(x), b(x))
    -- the loaded values are copies: changing a does not change b
    tl.no_grad(function() a[2].weight:fill_(0) end)
    assert.is_false(all_equal(a(x), b(x)))
  end)

  it("load_state_dict in strict mode lists missing and unexpected keys and shape mismatches", function()
    local m = mlp()
    local sd = m:state_dict()
    sd["4.bias"] = nil
    sd["9.weight"] = tl.zeros(1)
    sd["2.weight"] = tl.zeros(6, 5)
    local before = m[4].weight:clone()
    sd["4.weight"] = tl.zeros(3, 5)
    local msg = assert.error_matches(function() m:load_state_dict(sd) end,
      { "load_state_dict", "missing key: 4.bias", "unexpected key: 9.weight",
        "2.weight: the module has shape [5, 6], the state dict [6, 5]" })
    assert.is_string(msg)
    assert.tensor_equal(before, m[4].weight) -- nothing was copied
    -- not strict: missing and unexpected keys are reported, shape mismatches still raise
    assert.error_matches(function() m:load_state_dict(sd, false) end, { "2.weight" })
    sd["2.weight"] = nil
    local result = m:load_state_dict(sd, false)
    assert.are.same({ "2.weight", "4.bias" }, result.missing)
    assert.are.same({ "9.weight" }, result.unexpected)
    assert.tensor_equal(tl.zeros(3, 5), m[4].weight)
  end)

  it("load_state_dict names a value that is not a tensor without calling it a size mismatch", function()
    local m = nn.Linear(2, 2)
    local before = m.weight:clone()
    local msg = assert.error_matches(function() m:load_state_dict({ weight = 5, bias = tl.zeros(2) }) end,
      { "load_state_dict: error(s) loading the state dict into Linear: weight: expected a tensor, got number" })
    assert.is_nil(msg:find("size mismatch", 1, true), msg)
    -- with a shape mismatch too: each under its own heading
    assert.error_matches(function() m:load_state_dict({ weight = "w", bias = tl.zeros(3) }) end,
      { "weight: expected a tensor, got string; size mismatch for bias: the module has shape [2], the state dict [3]" })
    assert.tensor_equal(before, m.weight) -- nothing was copied
    m:load_state_dict({ weight = tl.ones(2, 2), bias = tl.zeros(2) })
    assert.tensor_equal(tl.ones(2, 2), m.weight)
  end)

  it("prints the module tree with parameter counts", function()
    local s = tostring(mlp())
    assert.matches("^Sequential%(%)  %-%- 53 parameters {", s)
    assert.matches("%(2%): Linear%(in_features=6, out_features=5, bias=true%)  %-%- 35 parameters", s)
    assert.matches("%(3%): ReLU%(%)\n", s)
    assert.matches("%(1%): Flatten%(start_dim=2, end_dim=%-1%)", s)
    local cnn = tostring(nn.Sequential(nn.Conv2d(1, 2, 3, { padding = 1 }), nn.MaxPool2d(2), nn.LayerNorm(4),
      nn.Embedding(10, 4), nn.Dropout(0.25)))
    assert.matches("Conv2d%(1, 2, kernel_size=%(3, 3%), stride=%(1, 1%), padding=%(1, 1%)%)  %-%- 20 parameters", cnn)
    assert.matches("MaxPool2d%(kernel_size=2, stride=2, padding=0%)", cnn)
    assert.matches("LayerNorm%(%[4%], eps=1e%-05, elementwise_affine=true%)  %-%- 8 parameters", cnn)
    assert.matches("Embedding%(10, 4%)  %-%- 40 parameters", cnn)
    assert.matches("Dropout%(p=0.25%)", cnn)
  end)

  it("refuses a dtype that cannot hold trainable parameters, naming the module", function()
    local makers = {
      { "nn.Linear", function(dtype) return nn.Linear(2, 2, { dtype = dtype }) end },
      { "nn.Conv2d", function(dtype) return nn.Conv2d(1, 1, 3, { dtype = dtype }) end },
      { "nn.Embedding", function(dtype) return nn.Embedding(3, 2, { dtype = dtype }) end },
      { "nn.LayerNorm", function(dtype) return nn.LayerNorm(3, { dtype = dtype }) end },
      { "nn.BatchNorm1d", function(dtype) return nn.BatchNorm1d(3, { dtype = dtype }) end },
      { "nn.LSTM", function(dtype) return nn.LSTM(3, 3, { dtype = dtype }) end },
      { "nn.MultiheadAttention", function(dtype) return nn.MultiheadAttention(4, 2, { dtype = dtype }) end },
      { "nn.MoE", function(dtype) return nn.MoE(4, 8, 2, 1, { dtype = dtype }) end },
      { "nn.PReLU", function(dtype) return nn.PReLU({ dtype = dtype }) end },
      { "nn.TransformerEncoderLayer", function(dtype) return nn.TransformerEncoderLayer(4, 2, { dtype = dtype }) end },
    }
    for _, case in ipairs(makers) do
      for _, dtype in ipairs({ "int64", "int32", "bool" }) do
        local ok, err = pcall(case[2], dtype)
        assert.is_false(ok, case[1] .. " took " .. dtype)
        local wanted = case[1] .. ": dtype " .. dtype .. " cannot hold trainable parameters (expected a floating dtype"
        assert.truthy(tostring(err):find(wanted, 1, true), tostring(err))
        assert.matches("^spec/nn_spec%.lua:%d+: ", err)
      end
      assert.are.equal("float64", case[2]("float64"):parameters()[1].dtype) -- a floating dtype still works
    end
    assert.error_matches(function() nn.Embedding(3, 2, { dtype = "long" }) end,
      { "nn.Embedding: dtype int64 cannot hold trainable parameters" })
    -- a custom module registering an integer tensor: named by its class
    local Int = nn.Module:extend("IntThing")
    function Int:init() self:register_parameter("w", tl.zeros(2, { dtype = "int64" })) end
    assert.error_matches(function() Int() end, { "nn.IntThing: dtype int64 cannot hold trainable parameters" })
    assert.are.same({ 1, 2 }, nn.Linear(2, 2)(tl.ones(1, 2)).shape) -- the engine still works
  end)

  it("Embedding.from_pretrained names itself for a weight of an integer dtype", function()
    local msg = assert.error_matches(function() nn.Embedding.from_pretrained(tl.ones(3, 2, { dtype = "int64" })) end,
      { "nn.Embedding.from_pretrained: weight must be of a floating dtype (float32, float64, bfloat16 or float16), " ..
        "got int64" })
    assert.is_nil(msg:find("randn", 1, true), msg)
    assert.matches("^spec/nn_spec%.lua:%d+: ", msg)
    local e = nn.Embedding.from_pretrained(tl.ones(3, 2, { dtype = "float64" }))
    assert.tensor_equal(tl.ones(1, 2, { dtype = "float64" }), e(tl.tensor({ 2 })))
  end)

  it("reports bad constructor arguments at the caller's line", function()
    assert.error_matches(function() nn.Linear(0, 3) end, { "nn.Linear", "in_features", "positive integer" })
    assert.error_matches(function() nn.Sequential(nn.ReLU(), 3) end, { "nn.Sequential", "argument 2", "module" })
    assert.error_matches(function() nn.Dropout(1.5) end, { "nn.Dropout", "[0, 1]" })
    assert.error_matches(function() nn.Module()(1) end, { "Module", "forward is not implemented" })
    for _, make in ipairs({ function() return nn.Linear(0, 3) end, function() return nn.Conv2d(1, 1, "k") end,
      function() return nn.Linear(2, 3, 5) end, function() return nn.ModuleList({ 1 }) end }) do
      local ok, err = pcall(function() local m = make() return m end)
      assert.is_false(ok)
      assert.matches("^spec/nn_spec%.lua:%d+: nn%.", err)
    end
  end)
end)

describe("nn.init", function()
  it("kaiming, xavier, uniform, normal, zeros, ones fill in place with the right spread", function()
    tl.manual_seed(7)
    local t = tl.empty(256, 128, 3, 3) -- fan_in 1152, fan_out 2304
    local function std(x) return math.sqrt((x:double() * x:double()):mean():item()) end
    nn.init.kaiming_uniform_(t)
    assert.is_true(t:abs():max():item() <= math.sqrt(6 / 1152))
    assert.is_true(math.abs(std(t) / math.sqrt(2 / 1152) - 1) < 0.02)
    nn.init.kaiming_normal_(t, { mode = "fan_out", nonlinearity = "relu" })
    assert.is_true(math.abs(std(t) / math.sqrt(2 / 2304) - 1) < 0.02)
    nn.init.xavier_uniform_(t)
    assert.is_true(t:abs():max():item() <= math.sqrt(6 / (1152 + 2304)))
    assert.is_true(math.abs(std(t) / math.sqrt(2 / (1152 + 2304)) - 1) < 0.02)
    nn.init.xavier_normal_(t, 2)
    assert.is_true(math.abs(std(t) / (2 * math.sqrt(2 / (1152 + 2304))) - 1) < 0.02)
    nn.init.uniform_(t, 2, 3)
    assert.is_true(t:min():item() >= 2 and t:max():item() < 3)
    nn.init.normal_(t, 5, 0.5)
    assert.is_true(math.abs(t:mean():item() - 5) < 0.01)
    nn.init.zeros_(t)
    assert.are.equal(0, t:abs():max():item())
    nn.init.ones_(t)
    assert.are.equal(1, t:min():item())
    assert.are.equal(math.sqrt(2), nn.init.calculate_gain("relu"))
    assert.are.equal(5 / 3, nn.init.calculate_gain("tanh"))
  end)

  it("leaves requires_grad alone and records nothing", function()
    local w = tl.zeros(4, 4):requires_grad_()
    nn.init.kaiming_uniform_(w)
    assert.is_true(w.requires_grad)
    assert.is_true(w.is_leaf)
    assert.error_matches(function() nn.init.xavier_uniform_(tl.zeros(3)) end, { "xavier_uniform_", "at least 2 dims" })
  end)
end)

describe("activations and nn.functional from the op table", function()
  -- the one-tensor ops of tl.ops() with a gradient: families unary and pointwise, less those
  -- taking more arguments
  local with_arguments = { clamp = true, pow_scalar = true }
  local ops = {}
  for _, op in ipairs(tl.ops()) do
    if (op.family == "unary" or op.family == "pointwise") and op.differentiable and not with_arguments[op.name] then
      ops[#ops + 1] = op.name
    end
  end

  it("gives every one-tensor op a functional form and a module class (its name, case aside)", function()
    assert.is_true(#ops >= 12)
    for _, name in ipairs(ops) do
      if name == "gelu" then -- F.gelu(x, {approximate}) wraps tl.gelu (gelu_spec.lua)
        assert.are.equal("function", type(nn.functional.gelu))
      else
        assert.are.equal(tl[name], nn.functional[name], "nn.functional." .. name)
      end
      local cls
      for key, value in pairs(nn) do
        if type(value) == "table" and key:lower():gsub("_", "") == name:gsub("_", "") and rawget(value, "_class_name") then
          cls = value
        end
      end
      assert.is_not_nil(cls, "no module class for " .. name)
      local x = (tl.rand(3, 4, { dtype = "float64" }) + 0.5):requires_grad_()
      local m = cls()
      assert.is_true(all_equal(tl[name](x), m(x)), name)
      assert.are.equal(cls._class_name .. "()", tostring(m))
    end
    assert.are.same({ "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "Hardtanh" },
      { nn.ReLU._class_name, nn.GELU._class_name, nn.SiLU._class_name, nn.Tanh._class_name, nn.Sigmoid._class_name,
        nn.LeakyReLU._class_name, nn.ELU._class_name, nn.Hardtanh._class_name })
    assert.are.equal(tl.softmax, nn.functional.softmax)
    assert.are.equal(tl.log_softmax, nn.functional.log_softmax)
  end)

  it("gives a class of an op with numbers those numbers, positionally or by name", function()
    local x = tl.tensor({ -2.0, -0.5, 0.5, 3.0 })
    assert.is_true(all_equal(tl.leaky_relu(x, 0.2), nn.LeakyReLU(0.2)(x)))
    assert.is_true(all_equal(tl.hardtanh(x, 0, 2), nn.Hardtanh { min_val = 0, max_val = 2 }(x)))
    assert.is_true(all_equal(tl.softplus(x, 2), nn.Softplus { beta = 2 }(x)))
    assert.are.equal("LeakyReLU(negative_slope=0.2)", tostring(nn.LeakyReLU(0.2)))
    assert.error_matches(function() nn.LeakyReLU { slope = 0.2 } end, "nn.LeakyReLU: unknown option 'slope'")
    assert.error_matches(function() nn.Mish { beta = 1 } end, "nn.Mish: unknown option 'beta'")
  end)
end)

describe("tlua.class", function()
  local class = require("tlua.class")

  it("makes classes whose instances inherit methods and metamethods; cls(...) runs init", function()
    local Base = class("test.Base")
    function Base:init(x) self.x = x end
    function Base:double() return 2 * self.x end
    function Base:__len() return self.x end
    function Base:__tostring() return "Base(" .. self.x .. ")" end
    local Derived = class("test.Derived", Base)
    function Derived:triple() return 3 * self.x end
    local d = Derived(7)
    assert.are.equal(Derived, getmetatable(d))
    assert.are.same({ 14, 21, 7, "Base(7)" }, { d:double(), d:triple(), #d, tostring(d) })
    assert.are.equal("test.Derived", tostring(Derived))
    assert.are.equal("test.Derived", Derived.__name)
    -- a class with its own new (how nn.Module, optimizers and schedulers build instances)
    function Base.new(cls, x) return setmetatable({ x = x + 1 }, cls) end
    assert.are.equal(9, Base(8).x)
    assert.error_matches(function() class(3) end, "class: expected a class name")
  end)

  it("is the class system of nn modules, optimizers, schedulers and data sets", function()
    -- (busted reloads the modules a spec file requires, so tl.nn and tl.optim may hold two loads of
    -- tlua.class: compare where the constructor's code comes from)
    local function origin(cls)
      local info = debug.getinfo(getmetatable(cls).__call, "S")
      return info.source .. ":" .. info.linedefined
    end
    local make = origin(class("test.Any"))
    assert.matches("tlua/class%.lua:%d+$", make)
    for _, cls in ipairs({ nn.Module, nn.Linear, nn.ReLU, tl.optim.SGD, tl.optim.Adam, tl.optim.StepLR,
      tl.optim.LambdaLR, tl.data.DataLoader, tl.data.TensorDataset }) do
      assert.are.equal(make, origin(cls), tostring(cls))
    end
    assert.are.equal("nn.Linear", tostring(nn.Linear))
    assert.are.equal("optim.Adam", tostring(tl.optim.Adam))
    assert.are.equal("optim.StepLR", tostring(tl.optim.StepLR))
  end)
end)
