-- tl.linear_cross_entropy, the chunked classifier loss: values and gradients against the float64 Lua loops of helpers/cross_entropy_cases.lua and against linear then cross_entropy, chunk sizes, options, the gated gradients, the loss's gradient, autocast, errors, and CUDA against the CPU (#cuda).
local tl = require("tlua")
local cases = require("helpers.cross_entropy_cases")

local function leaf(t) return t:clone():requires_grad_() end

-- the loss and the gradients of x, w and b (b may be nil) for these options
local function run(x, w, b, target, o)
  x, w = leaf(x), leaf(w)
  b = b and leaf(b)
  local opts = { bias = b }
  for k, v in pairs(o or {}) do opts[k] = v end
  local loss = tl.linear_cross_entropy(x, w, target, opts)
  loss:backward()
  return loss, x.grad, w.grad, b and b.grad
end

local function check_against_loops(x, w, b, target, o, rtol)
  local loss, gx, gw, gb = run(x, w, b, target, o)
  local flat_x = x:reshape(-1, x.shape[#x.shape])
  local want = { cases.linear_cross_entropy(flat_x:totable(), w:totable(), b and b:totable(),
    target:reshape(-1):totable(), o or {}) }
  assert.tensor_near(want[1], loss, rtol, rtol, "loss")
  assert.tensor_near(want[2], gx:reshape(-1, x.shape[#x.shape]), rtol, rtol, "input's gradient")
  assert.tensor_near(want[3], gw, rtol, rtol, "weight's gradient")
  if b then assert.tensor_near(want[4], gb, rtol, rtol, "bias's gradient") end
end

describe("linear_cross_entropy", function()
  tl.manual_seed(3)
  local x, w, b = tl.randn(13, 6):double(), tl.randn(9, 6):double(), tl.randn(9):double()
  local target = tl.randint(1, 10, { 13 })

  it("matches the float64 loops for every chunk size, with and without a bias", function()
    for _, chunk in ipairs({ 0, 1, 4, 13, 100 }) do
      check_against_loops(x, w, b, target, { chunk = chunk }, 1e-12)
      check_against_loops(x, w, nil, target, { chunk = chunk }, 1e-12)
    end
  end)

  it("takes label smoothing, reduction sum and ignore_index as cross_entropy does", function()
    local t = target:clone()
    t[2], t[7], t[8] = 0, 0, 0
    check_against_loops(x, w, b, target, { label_smoothing = 0.3, chunk = 5 }, 1e-12)
    check_against_loops(x, w, b, target, { reduction = "sum", chunk = 3 }, 1e-12)
    check_against_loops(x, w, b, t, { ignore_index = 0, chunk = 4 }, 1e-12)
    check_against_loops(x, w, b, t, { ignore_index = 0, reduction = "sum", label_smoothing = 0.1 }, 1e-12)
    -- and equals the functional cross_entropy of the linear's logits
    local want = tl.nn.functional.cross_entropy(tl.linear(x, w, b), t, { ignore_index = 0, label_smoothing = 0.1 })
    local got = tl.nn.functional.linear_cross_entropy(x, w, t, { bias = b, ignore_index = 0, label_smoothing = 0.1 })
    assert.tensor_near(want, got, 1e-12, 1e-12)
  end)

  it("takes leading dims and int32 targets", function()
    local x3 = tl.randn(2, 5, 6):double()
    local t2 = tl.randint(1, 10, { 2, 5 })
    check_against_loops(x3, w, b, t2, { chunk = 3 }, 1e-12)
    local a = tl.linear_cross_entropy(x3, w, t2, { bias = b })
    local c = tl.linear_cross_entropy(x3, w, t2:int(), { bias = b })
    assert.tensor_equal(a, c)
  end)

  it("computes only the gradients asked for, and none without grad", function()
    local xl, wl = leaf(x), w:clone()
    tl.linear_cross_entropy(xl, wl, target):backward()
    assert.is_not_nil(xl.grad)
    assert.is_nil(wl.grad)
    local xn, wn = x:clone(), leaf(w)
    tl.linear_cross_entropy(xn, wn, target, { bias = b }):backward()
    assert.is_nil(xn.grad)
    assert.tensor_near(select(3, run(x, w, b, target)), wn.grad, 1e-12, 1e-12)
    local under = tl.no_grad(function() return tl.linear_cross_entropy(leaf(x), leaf(w), target) end)
    assert.is_false(under.requires_grad)
    assert.tensor_near(tl.cross_entropy(tl.linear(x, w), target), under, 1e-12, 1e-12)
  end)

  it("scales the gradients made in the forward by the loss's gradient", function()
    local _, gx, gw, gb = run(x, w, b, target)
    local xl, wl, bl = leaf(x), leaf(w), leaf(b)
    local loss = tl.linear_cross_entropy(xl, wl, target, { bias = bl })
    loss:backward(tl.tensor(0.375, { dtype = "float64" }))
    assert.tensor_near(gx * 0.375, xl.grad, 1e-12, 1e-12)
    assert.tensor_near(gw * 0.375, wl.grad, 1e-12, 1e-12)
    assert.tensor_near(gb * 0.375, bl.grad, 1e-12, 1e-12)
    -- a tied weight (another use of w) adds up
    local wt = leaf(w)
    local l2 = tl.linear_cross_entropy(x, wt, target) + (wt * wt):sum()
    l2:backward()
    assert.tensor_near(select(3, run(x, w, nil, target)) + w * 2, wt.grad, 1e-12, 1e-12)
  end)

  it("gives NaN for the mean over no rows kept, zero gradients, and sums of none", function()
    local t = tl.zeros({ 13 }, { dtype = "int64" })
    local loss, gx, gw = run(x, w, nil, t, { ignore_index = 0 })
    assert.is_true(loss:item() ~= loss:item())
    assert.tensor_equal(tl.zeros({ 13, 6 }, { dtype = "float64" }), gx)
    assert.tensor_equal(tl.zeros({ 9, 6 }, { dtype = "float64" }), gw)
    local empty = tl.empty({ 0, 6 }, { dtype = "float64" })
    local s, ge, gwe, gbe = run(empty, w, b, tl.empty({ 0 }, { dtype = "int64" }), { reduction = "sum" })
    assert.are.equal(0, s:item())
    assert.are.same({ 0, 6 }, ge.shape)
    assert.tensor_equal(tl.zeros({ 9, 6 }, { dtype = "float64" }), gwe)
    assert.tensor_equal(tl.zeros({ 9 }, { dtype = "float64" }), gbe)
  end)

  it("gives a float32 loss for 16-bit inputs and runs its GEMMs in the autocast dtype", function()
    local xf, wf = x:float(), w:float()
    local lb = tl.linear_cross_entropy(xf:bfloat16(), wf:bfloat16(), target)
    assert.are.equal("float32", lb.dtype)
    local want = tl.cross_entropy(tl.linear(xf, wf), target)
    assert.tensor_near(want, lb, 2e-2, 2e-2)
    local xl, wl = leaf(xf), leaf(wf)
    local la = tl.autocast("bfloat16", function() return tl.linear_cross_entropy(xl, wl, target) end)
    la:backward()
    assert.are.equal("float32", la.dtype)
    assert.are.equal("float32", xl.grad.dtype)
    assert.are.equal("float32", wl.grad.dtype)
    local _, gx, gw = run(x, w, nil, target)
    assert.tensor_near(gx, xl.grad:double(), 3e-2, 3e-3)
    assert.tensor_near(gw, wl.grad:double(), 3e-2, 3e-3)
  end)

  it("refuses bad inputs and options, naming them", function()
    local function fails(pattern, f) assert.error_matches(f, pattern) end
    fails("linear_cross_entropy: weight must be %[V, 6%]", function() tl.linear_cross_entropy(x, tl.randn(9, 5):double(), target) end)
    fails("linear_cross_entropy: bias must be %[9%]", function() tl.linear_cross_entropy(x, w, target, { bias = tl.randn(8):double() }) end)
    fails("linear_cross_entropy: input is float64 but weight is float32", function() tl.linear_cross_entropy(x, w:float(), target) end)
    fails("linear_cross_entropy: target must have input's shape without its last dim", function()
      tl.linear_cross_entropy(x, w, tl.ones({ 12 }, { dtype = "int64" })) end)
    fails("linear_cross_entropy: target must be an int64 or int32 tensor", function() tl.linear_cross_entropy(x, w, target:double()) end)
    fails("linear_cross_entropy: target .* 10 .*classes count from 1", function()
      local t = target:clone(); t[4] = 10; tl.linear_cross_entropy(x, w, t) end)
    fails("linear_cross_entropy: target .* 0 .*classes count from 1", function()
      local t = target:clone(); t[4] = 0; tl.linear_cross_entropy(x, w, t) end)
    fails("linear_cross_entropy: reduction must be 'mean' or 'sum', got 'none'", function()
      tl.linear_cross_entropy(x, w, target, { reduction = "none" }) end)
    fails("linear_cross_entropy: label_smoothing must be in %[0, 1%], got 1.5", function()
      tl.linear_cross_entropy(x, w, target, { label_smoothing = 1.5 }) end)
    fails("linear_cross_entropy: chunk must be >= 0 rows", function() tl.linear_cross_entropy(x, w, target, { chunk = -1 }) end)
    fails("linear_cross_entropy: unknown option 'weights'", function() tl.linear_cross_entropy(x, w, target, { weights = b }) end)
    fails("linear_cross_entropy: input must have a floating dtype", function()
      tl.linear_cross_entropy(tl.ones({ 2, 6 }, { dtype = "int64" }), w, tl.ones({ 2 }, { dtype = "int64" })) end)
    fails("create_graph = true: the gradient of 'linear_cross_entropy' is not", function()
      local xl = leaf(x)
      tl.autograd.grad(tl.linear_cross_entropy(xl, w, target), { xl }, { create_graph = true })
    end)
  end)
end)

describe("linear_cross_entropy on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of linear_cross_entropy did not run")
    return
  end
  tl.manual_seed(5)
  -- 50 classes: padded to 64 columns; 300 rows in chunks of 64 and automatic
  local x, w, b = tl.randn(300, 24):double(), tl.randn(50, 24):double(), tl.randn(50):double()
  local target = tl.randint(1, 51, { 300 })
  target[17], target[200] = -1, -1

  it("matches the float64 loops in float64 and float32, every option", function()
    for _, o in ipairs({ { chunk = 64 }, {}, { ignore_index = -1, label_smoothing = 0.2, chunk = 100 },
                         { reduction = "sum", ignore_index = -1 } }) do
      local t = o.ignore_index and target or target:clamp(1, 50)
      local want = { cases.linear_cross_entropy(x:totable(), w:totable(), b:totable(), t:totable(), o) }
      local got = { run(x:cuda(), w:cuda(), b:cuda(), t:cuda(), o) }
      for i = 1, 4 do assert.tensor_near(want[i], got[i]:to("cpu"), 1e-10, 1e-12, "float64 result " .. i) end
      local got32 = { run(x:float():cuda(), w:float():cuda(), b:float():cuda(), t:cuda(), o) }
      for i = 1, 4 do assert.tensor_near(want[i], got32[i]:to("cpu"):double(), 1e-4, 1e-5, "float32 result " .. i) end
    end
  end)

  it("under bfloat16 autocast stays near the float64 loops", function()
    local t = target:clamp(1, 50)
    local want = { cases.linear_cross_entropy(x:totable(), w:totable(), nil, t:totable(), {}) }
    local xl, wl = x:float():cuda():requires_grad_(), w:float():cuda():requires_grad_()
    local loss = tl.autocast("bfloat16", function() return tl.linear_cross_entropy(xl, wl, t:cuda()) end)
    loss:backward()
    assert.tensor_near(want[1], loss:to("cpu"):double(), 1e-2, 1e-2, "loss")
    assert.tensor_near(want[2], xl.grad:to("cpu"):double(), 5e-2, 2e-4, "input's gradient")
    assert.tensor_near(want[3], wl.grad:to("cpu"):double(), 5e-2, 2e-4, "weight's gradient")
  end)

  it("reports a target out of range at the next synchronization", function()
    local t = target:clamp(1, 50):cuda()
    t[3] = 51
    assert.error_matches(function()
      tl.linear_cross_entropy(x:cuda(), w:cuda(), t)
      tl.cuda.synchronize()
    end, "linear_cross_entropy: target")
  end)
end)
