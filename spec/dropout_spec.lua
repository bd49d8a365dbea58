-- tl.dropout, x:dropout_, nn.functional.dropout and nn.Dropout against x * (tl.rand(shape) >= p) / (1 - p) drawn under the same seed (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional

local FLOATING = { "float32", "float64", "bfloat16", "float16" }
-- p whose 1 - p is exact in every dtype (the reference divides by 1 - p in x's dtype, the kernel
-- in float32 for the 16-bit dtypes), and other p for float32 and float64
local P_EXACT = { 0.25, 0.5, 0.75 }
local P_WIDE = { 0.1, 0.3, 0.9 }

local function ps_for(dtype)
  if dtype == "float32" or dtype == "float64" then
    local all = { table.unpack(P_EXACT) }
    for _, p in ipairs(P_WIDE) do all[#all + 1] = p end
    return all
  end
  return P_EXACT
end

-- the mask tl.rand draws after tl.manual_seed(seed), as bool, for shape
local function rand_mask(seed, shape, p, device)
  tl.manual_seed(seed)
  return tl.rand(shape, { device = device }):ge(p)
end

-- x * mask / (1 - p) by other ops, in x's dtype (a bool mask multiplies as 0 or 1)
local function masked(x, mask, p)
  return x * mask:to(x.device) / (1 - p)
end

local ops_of = require("helpers.trace").ops

describe("tl.dropout", function()
  it("equals x * (rand(shape) >= p) / (1 - p) drawn under the same seed, exactly, in every floating dtype", function()
    for _, dtype in ipairs(FLOATING) do
      for _, shape in ipairs({ { 37 }, { 3, 5, 7 }, { 301, 300 } }) do -- odd sizes; past the parallel threshold
        for i, p in ipairs(ps_for(dtype)) do
          tl.manual_seed(100 + i)
          local x = tl.randn(shape, { dtype = dtype })
          tl.manual_seed(7 * i)
          local y = tl.dropout(x, p)
          local what = ("%s %s p=%g"):format(dtype, table.concat(shape, "x"), p)
          assert.are.equal(dtype, y.dtype, what)
          assert.are.same(shape, y.shape, what)
          assert.tensor_equal(masked(x, rand_mask(7 * i, shape, p), p), y, what)
        end
      end
    end
  end)

  it("drops about p of the elements", function()
    tl.manual_seed(11)
    local y = tl.dropout(tl.ones(200000), 0.3)
    local dropped = y:eq(0):sum():item() / 200000
    assert.is_true(math.abs(dropped - 0.3) < 0.005, "fraction dropped " .. dropped)
  end)

  it("draws ceil(n / 4) Philox blocks as rand does: consecutive calls continue the stream", function()
    local a, b = tl.randn(7):double(), tl.randn(2, 9):double()
    tl.manual_seed(5)
    local ya, yb = tl.dropout(a, 0.4), tl.dropout(b, 0.4)
    tl.manual_seed(5)
    local ma, mb = tl.rand(7):ge(0.4), tl.rand(2, 9):ge(0.4)
    assert.tensor_equal(masked(a, ma, 0.4), ya)
    assert.tensor_equal(masked(b, mb, 0.4), yb)
  end)

  it("is one kernel, the op 'dropout', from nn.functional and nn.Dropout alike", function()
    local x = tl.randn(4, 6)
    assert.are.same({ "dropout" }, ops_of(function() return tl.dropout(x, 0.3) end))
    assert.are.same({ "dropout" }, ops_of(function() return F.dropout(x, 0.3) end))
    assert.are.same({ "dropout" }, ops_of(function() return nn.Dropout(0.3)(x) end))
    local c = x:clone()
    assert.are.same({ "dropout" }, ops_of(function() return c:dropout_(0.3) end))
  end)

  it("reads strided and expanded x by x's row-major index", function()
    tl.manual_seed(3)
    local base = tl.randn(6, 5)
    local cases = { base:transpose(1, 2), base:narrow(2, 2, 3), tl.randn(4, 1):expand(4, 6),
                    base:select(2, 3), tl.tensor(2.5),
                    tl.randn(200, 3, 300):permute(3, 1, 2) } -- many chunks, past the parallel threshold
    for i, x in ipairs(cases) do
      tl.manual_seed(40 + i)
      local y = tl.dropout(x, 0.3)
      assert.is_true(y:is_contiguous(), "case " .. i)
      assert.tensor_equal(masked(x:contiguous(), rand_mask(40 + i, x.shape, 0.3), 0.3), y, "case " .. i)
    end
  end)

  it("p = 0 returns x itself and draws nothing; p = 1 gives x * 0 and draws nothing", function()
    local x = tl.randn(3, 4)
    tl.manual_seed(9)
    local y0 = tl.dropout(x, 0)
    assert.are.same({}, ops_of(function() return tl.dropout(x, 0) end))
    y0:fill_(2) -- the same tensor
    assert.tensor_equal(tl.full({ 3, 4 }, 2), x)
    local after = tl.rand(5)
    tl.manual_seed(9)
    assert.tensor_equal(tl.rand(5), after, "p = 0 advanced the generator")

    local z = tl.tensor({ 1.5, -2, 0 / 0, 1 / 0 })
    tl.manual_seed(9)
    local y1 = tl.dropout(z, 1)
    assert.tensor_equal(z * 0, y1) -- zeros, and NaN for NaN and inf as x * 0
    assert.is_true(y1[1] == 0 and y1[2] == 0)
    local after1 = tl.rand(5)
    tl.manual_seed(9)
    assert.tensor_equal(tl.rand(5), after1, "p = 1 advanced the generator")
  end)

  it("keeps NaN and inf in kept elements and gives x * 0 in dropped ones", function()
    local x = tl.full({ 64 }, 0 / 0)
    tl.manual_seed(2)
    local y = tl.dropout(x, 0.5)
    assert.are.equal(64, y:ne(y):sum():item(), "NaN * 0 is NaN, NaN / (1 - p) is NaN")
    local inf = tl.full({ 64 }, 1 / 0)
    local expected = masked(inf, rand_mask(2, { 64 }, 0.5), 0.5)
    tl.manual_seed(2)
    assert.tensor_equal(expected, tl.dropout(inf, 0.5))
  end)

  it("handles empty tensors without drawing", function()
    tl.manual_seed(4)
    local y = tl.dropout(tl.zeros(0, 3), 0.5)
    assert.are.same({ 0, 3 }, y.shape)
    local after = tl.rand(3)
    tl.manual_seed(4)
    assert.tensor_equal(tl.rand(3), after)
  end)

  it("refuses a bad p and non-floating x, naming the op and the argument", function()
    local x = tl.randn(3)
    for _, p in ipairs({ -0.1, 1.5, 0 / 0, math.huge }) do
      assert.error_matches(function() tl.dropout(x, p) end, { "dropout", "p must be a probability in [0, 1]" })
      assert.error_matches(function() F.dropout(x, p) end, { "dropout", "p must be a probability in [0, 1]" })
      assert.error_matches(function() F.dropout(x, p, false) end, { "dropout", "[0, 1]" })
      assert.error_matches(function() x:dropout_(p) end, { "dropout_", "p must be a probability in [0, 1]" })
    end
    assert.error_matches(function() tl.dropout(x, "half") end, { "dropout", "argument 2 (p)", "number" })
    assert.error_matches(function() tl.dropout(x, {}) end, { "dropout", "(p)", "number" })
    assert.error_matches(function() F.dropout(x, "half") end, { "dropout", "p must be a probability" })
    assert.error_matches(function() tl.dropout("x", 0.5) end, { "dropout", "tensor" })
    for _, dtype in ipairs({ "int32", "int64", "bool" }) do
      local t = tl.zeros(3, { dtype = dtype })
      assert.error_matches(function() tl.dropout(t, 0.5) end, { "dropout", "x", "floating", dtype })
      assert.error_matches(function() t:dropout_(0.5) end, { "dropout_", "floating", dtype })
    end
    assert.error_matches(function() tl.dropout(tl.zeros(2, { dtype = "int64" }), 0) end, { "dropout", "floating" })
    assert.error_matches(function() nn.Dropout(-1) end, { "nn.Dropout", "[0, 1]" })
  end)
end)

describe("dropout's gradient", function()
  it("is the forward's mask times g / (1 - p), in every floating dtype", function()
    for _, dtype in ipairs(FLOATING) do
      for i, p in ipairs(ps_for(dtype)) do
        local x = tl.randn(5, 9, { dtype = dtype }):requires_grad_()
        local g = tl.randn(5, 9, { dtype = dtype })
        tl.manual_seed(60 + i)
        local y = tl.dropout(x, p)
        assert.are.equal("dropout", y.grad_fn)
        y:backward(g)
        local what = ("%s p=%g"):format(dtype, p)
        assert.are.equal(dtype, x.grad.dtype, what)
        assert.tensor_equal(masked(g, rand_mask(60 + i, { 5, 9 }, p), p), x.grad, what)
      end
    end
  end)

  it("redraws the forward's mask from the saved stream, whatever was drawn or seeded since", function()
    local x = tl.randn(7, 11):double():requires_grad_()
    tl.manual_seed(21)
    local y = tl.dropout(x, 0.35)
    tl.manual_seed(999)
    tl.rand(1000)
    tl.dropout(tl.randn(50), 0.5)
    local g = tl.randn(7, 11):double()
    y:backward(g)
    assert.tensor_equal(masked(g, rand_mask(21, { 7, 11 }, 0.35), 0.35), x.grad)
  end)

  it("reads an expanded gradient (sum's) by the same row-major index", function()
    local x = tl.randn(3, 50):requires_grad_()
    tl.manual_seed(8)
    tl.dropout(x, 0.6):sum():backward()
    assert.tensor_equal(masked(tl.ones(3, 50), rand_mask(8, { 3, 50 }, 0.6), 0.6), x.grad)
  end)

  it("flows through a strided input to its base", function()
    local base = tl.randn(4, 6):requires_grad_()
    tl.manual_seed(13)
    local y = tl.dropout(base:transpose(1, 2), 0.5)
    local g = tl.randn(6, 4)
    y:backward(g)
    local gt = masked(g, rand_mask(13, { 6, 4 }, 0.5), 0.5)
    assert.tensor_equal(gt:transpose(1, 2), base.grad)
  end)

  it("keeps no tensor for backward: the forward allocates its output and nothing else", function()
    local x = tl.randn(1000):requires_grad_()
    collectgarbage()
    collectgarbage()
    local before = tl.memory_stats("cpu").allocated
    local y = tl.dropout(x, 0.5)
    collectgarbage()
    assert.are.equal(1000 * 4, tl.memory_stats("cpu").allocated - before, "a saved mask would add to this")
    y:sum():backward()
  end)

  it("is zero at p = 1 and g at p = 0 (x passes through)", function()
    local x = tl.randn(6):requires_grad_()
    local g = tl.randn(6)
    tl.dropout(x, 1):backward(g)
    assert.tensor_equal(tl.zeros(6), x.grad)
    x.grad = nil
    tl.dropout(x, 0):backward(g)
    assert.tensor_equal(g, x.grad)
  end)

  it("passes gradcheck under a fixed seed", function()
    local x = tl.randn(4, 5):double():requires_grad_()
    assert.is_true(tl.autograd.gradcheck(function(t)
      tl.manual_seed(17)
      return tl.dropout(t, 0.4)
    end, { x }))
  end)
end)

describe("x:dropout_(p)", function()
  it("writes tl.dropout(x, p)'s values into x (the same mask) and returns x", function()
    for _, dtype in ipairs(FLOATING) do
      local x = tl.randn(9, 7, { dtype = dtype })
      local expected = masked(x, rand_mask(31, { 9, 7 }, 0.5), 0.5)
      tl.manual_seed(31)
      local r = x:dropout_(0.5)
      assert.is_true(rawequal(r, x) or r:data_ptr() == x:data_ptr())
      assert.tensor_equal(expected, x, dtype)
    end
  end)

  it("writes a strided view through to its base, elements outside it untouched", function()
    local base = tl.randn(5, 6)
    local old = base:clone()
    local v = base:narrow(2, 2, 3)
    local expected = masked(v:contiguous(), rand_mask(12, { 5, 3 }, 0.25), 0.25)
    tl.manual_seed(12)
    v:dropout_(0.25)
    assert.tensor_equal(expected, base:narrow(2, 2, 3))
    assert.tensor_equal(old:narrow(2, 1, 1), base:narrow(2, 1, 1))
    assert.tensor_equal(old:narrow(2, 5, 2), base:narrow(2, 5, 2))
  end)

  it("records a node whose gradient is the mask times g / (1 - p)", function()
    local leaf = tl.randn(4, 8):requires_grad_()
    local a = leaf * 1
    tl.manual_seed(14)
    a:dropout_(0.3)
    assert.are.equal("dropout_", a.grad_fn)
    tl.manual_seed(1)
    local g = tl.randn(4, 8)
    a:backward(g)
    assert.tensor_equal(masked(g, rand_mask(14, { 4, 8 }, 0.3), 0.3), leaf.grad)
  end)

  it("refuses a leaf that requires grad, an expanded x and a bad p, leaving x unchanged", function()
    local leaf = tl.randn(3):requires_grad_()
    assert.error_matches(function() leaf:dropout_(0.5) end, "dropout_")
    local e = tl.randn(3, 1):expand(3, 4)
    assert.error_matches(function() e:dropout_(0.5) end, "dropout_")
    local x = tl.randn(5)
    local old = x:clone()
    assert.error_matches(function() x:dropout_(2) end, { "dropout_", "[0, 1]" })
    assert.tensor_equal(old, x)
  end)
end)

describe("nn.functional.dropout and nn.Dropout", function()
  it("call tl.dropout when training: the same values under the same seed", function()
    local x = tl.randn(6, 10)
    tl.manual_seed(23)
    local expected = tl.dropout(x, 0.2)
    tl.manual_seed(23)
    assert.tensor_equal(expected, F.dropout(x, 0.2))
    tl.manual_seed(23)
    assert.tensor_equal(expected, F.dropout(x, 0.2, true))
    tl.manual_seed(23)
    assert.tensor_equal(expected, nn.Dropout(0.2)(x))
    local half = masked(x, rand_mask(23, { 6, 10 }, 0.5), 0.5)
    tl.manual_seed(23)
    assert.tensor_equal(half, F.dropout(x)) -- p = 0.5
  end)

  it("are the identity in eval mode: x itself, no kernel", function()
    local x = tl.randn(3, 4)
    local m = nn.Dropout(0.7)
    m:eval()
    assert.are.same({}, ops_of(function() return m(x) end))
    local y = m(x)
    y:fill_(3)
    assert.tensor_equal(tl.full({ 3, 4 }, 3), x)
    assert.are.same({}, ops_of(function() return F.dropout(x, 0.7, false) end))
  end)

  it("F.dropout checks training as dropout1d and dropout2d do: a boolean or nil", function()
    local x = tl.randn(2, 3, 4)
    for _, fn in ipairs({ "dropout", "dropout1d" }) do
      assert.error_matches(function() return F[fn](x, 0.5, "no") end, { fn .. ": training must be a boolean, got string" })
      assert.error_matches(function() return F[fn](x, 0.5, 0) end, { fn .. ": training must be a boolean, got number" })
    end
    local ok, err = pcall(function() local y = F.dropout(x, 0.5, "no") return y end)
    assert.is_false(ok)
    assert.matches("^spec/dropout_spec%.lua:%d+: dropout: ", err)
    assert.are.equal(x, F.dropout(x, 0.5, false)) -- still the identity in eval mode
    tl.manual_seed(4)
    local expected = tl.dropout(x, 0.5)
    tl.manual_seed(4)
    assert.tensor_equal(expected, F.dropout(x, 0.5, nil))
  end)
end)

describe("dropout on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of dropout did not run")
    return
  end

  -- p = 0.25: 1 - p is exact in every dtype, so the composed reference is exact too
  it("draws the CPU's mask for one seed, in every floating dtype, dense and strided", function()
    for _, dtype in ipairs(FLOATING) do
      for _, shape in ipairs({ { 1 }, { 37 }, { 3, 129 }, { 1000003 } }) do
        local x = tl.randn(shape, { dtype = dtype })
        local what = ("%s %s"):format(dtype, table.concat(shape, "x"))
        tl.manual_seed(77)
        local cpu = tl.dropout(x, 0.25)
        tl.manual_seed(77)
        local gpu = tl.dropout(x:to("cuda"), 0.25)
        assert.are.equal(dtype, gpu.dtype, what)
        assert.tensor_equal(cpu, gpu:to("cpu"), what)
        -- the mask is the one CUDA's own rand draws
        tl.manual_seed(77)
        local m = tl.rand(shape, { device = "cuda" }):ge(0.25)
        assert.tensor_equal(masked(x, m:to("cpu"), 0.25), gpu:to("cpu"), what .. " against rand on cuda")
      end
      local base = tl.randn(33, 20, { dtype = dtype })
      for i, view in ipairs({ function(t) return t:transpose(1, 2) end, function(t) return t:narrow(2, 3, 7) end }) do
        tl.manual_seed(5)
        local cpu = tl.dropout(view(base), 0.5)
        tl.manual_seed(5)
        local gpu = tl.dropout(view(base:to("cuda")), 0.5)
        assert.tensor_equal(cpu, gpu:to("cpu"), dtype .. " strided " .. i)
      end
    end
  end)

  it("backward, in-place and p = 1 match the CPU", function()
    for _, dtype in ipairs(FLOATING) do
      local x = tl.randn(17, 23, { dtype = dtype })
      local g = tl.randn(17, 23, { dtype = dtype })
      local grads = {}
      for _, device in ipairs({ "cpu", "cuda" }) do
        local xd = x:to(device):detach():requires_grad_()
        tl.manual_seed(19)
        local y = tl.dropout(xd, 0.25)
        tl.rand(100, { device = device })
        y:backward(g:to(device))
        grads[device] = xd.grad:to("cpu")
      end
      assert.tensor_equal(grads.cpu, grads.cuda, dtype .. " gradient")
      assert.tensor_equal(masked(g, rand_mask(19, { 17, 23 }, 0.25), 0.25), grads.cuda, dtype)
      tl.manual_seed(3)
      local expected = tl.dropout(x, 0.75)
      local xc = x:to("cuda")
      tl.manual_seed(3)
      xc:dropout_(0.75)
      assert.tensor_equal(expected, xc:to("cpu"), dtype .. " in place")
      assert.tensor_equal(x * 0, tl.dropout(x:to("cuda"), 1):to("cpu"), dtype .. " p = 1")
    end
  end)
end)
