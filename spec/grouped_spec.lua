-- Grouped products: tl.grouped_matmul(As, Bs) and tl.grouped_mm(A, B, offsets), values and
-- gradients against a per-group loop of float64 matmuls on the CPU (a different op and path),
-- in every floating dtype, on the CPU and (tagged #cuda) on CUDA; one grouped kernel per
-- direction in the trace, gradients run only when needed; every bad input refused clearly with
-- the engine usable after. The lists themselves are also checked by the kernel sweep and
-- gradcheck (helpers/grouped_cases.lua).
local tl = require("tlua")

local TOL = { float64 = { 1e-12, 1e-12 }, float32 = { 1e-4, 1e-4 }, bfloat16 = { 3e-2, 3e-2 },
              float16 = { 5e-3, 5e-3 } }

local function draw(_, shape, dtype, device)
  return tl.randn(shape):to(dtype):to(device)
end

local function f64(t) return t:detach():to("cpu"):double() end

local function loop_matmul(As, Bs)
  local out = {}
  for i = 1, #As do out[i] = f64(As[i]):matmul(f64(Bs[i])) end
  return out
end

-- the per-group loop of grouped_mm in float64: rows of each segment times B[g], zeros elsewhere
local function loop_mm(A, B, ends)
  local a, b = f64(A), f64(B)
  local out = tl.zeros({ a.shape[1], b.shape[3] }, { dtype = "float64" })
  local start = 0
  for g, e in ipairs(ends) do
    if e > start then out:narrow(1, start + 1, e - start):copy_(a:narrow(1, start + 1, e - start):matmul(b[g])) end
    start = e
  end
  return out
end

local function ops_of(events)
  local seen = {}
  for _, e in ipairs(events) do seen[#seen + 1] = e.op end
  return seen
end

local function count(list, value)
  local n = 0
  for _, v in ipairs(list) do if v == value then n = n + 1 end end
  return n
end

local function values_and_gradients(device)
  for _, dtype in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
    local rtol, atol = TOL[dtype][1], TOL[dtype][2]

    it(("grouped_matmul in %s: free sizes, transposed views, an empty group"):format(dtype), function()
      tl.manual_seed(11)
      local sizes = { { 3, 4, 5 }, { 1, 7, 2 }, { 6, 2, 6 }, { 0, 3, 4 }, { 4, 0, 3 } }
      local As, Bs = {}, {}
      for i, s in ipairs(sizes) do
        As[i] = draw(gen, { s[1], s[2] }, dtype, device)
        Bs[i] = draw(gen, { s[2], s[3] }, dtype, device)
      end
      As[3] = draw(gen, { 2, 6 }, dtype, device):transpose(1, 2) -- [6, 2] column-major
      Bs[2] = draw(gen, { 2, 7 }, dtype, device):transpose(1, 2) -- [7, 2] column-major
      local Cs = tl.grouped_matmul(As, Bs)
      local expected = loop_matmul(As, Bs)
      assert.are.equal(#sizes, #Cs)
      for i = 1, #sizes do
        assert.are.equal(dtype, Cs[i].dtype)
        assert.are.equal(As[1].device, Cs[i].device)
        assert.tensor_near(expected[i], f64(Cs[i]), rtol, atol, "group " .. i)
      end
    end)

    it(("grouped_matmul gradients in %s against the loop's"):format(dtype), function()
      tl.manual_seed(12)
      local sizes = { { 3, 4, 5 }, { 2, 3, 1 }, { 5, 2, 4 } }
      local As, Bs, Gs, As64, Bs64 = {}, {}, {}, {}, {}
      for i, s in ipairs(sizes) do
        As[i] = draw(gen, { s[1], s[2] }, dtype, device):requires_grad_()
        Bs[i] = draw(gen, { s[2], s[3] }, dtype, device):requires_grad_()
        Gs[i] = draw(gen, { s[1], s[3] }, dtype, device)
        As64[i], Bs64[i] = f64(As[i]):requires_grad_(), f64(Bs[i]):requires_grad_()
      end
      local Cs = tl.grouped_matmul(As, Bs)
      local loss, loss64 = nil, nil
      for i = 1, #sizes do
        local term = (Cs[i] * Gs[i]):sum()
        local term64 = (As64[i]:matmul(Bs64[i]) * f64(Gs[i])):sum()
        loss = loss and loss + term or term
        loss64 = loss64 and loss64 + term64 or term64
      end
      loss:backward()
      loss64:backward()
      for i = 1, #sizes do
        assert.tensor_near(As64[i].grad, f64(As[i].grad), rtol, atol, "dA " .. i)
        assert.tensor_near(Bs64[i].grad, f64(Bs[i].grad), rtol, atol, "dB " .. i)
        assert.are.equal(dtype, As[i].grad.dtype)
      end
    end)

    it(("grouped_mm in %s: uneven segments, an empty group, rows past the last end"):format(dtype), function()
      tl.manual_seed(13)
      local A = draw(gen, { 12, 5 }, dtype, device)
      local B = draw(gen, { 4, 5, 3 }, dtype, device)
      local ends = { 3, 3, 8, 10 }
      local expected = loop_mm(A, B, ends)
      for _, offsets in ipairs({ ends, tl.tensor(ends, { dtype = "int32" }),
                                 tl.tensor(ends, { dtype = "int64" }):to(device) }) do
        local y = tl.grouped_mm(A, B, offsets)
        assert.are.same({ 12, 3 }, y.shape)
        assert.tensor_near(expected, f64(y), rtol, atol)
      end
      -- B read transposed ([G, N, K] storage) and A a strided view
      local Bt = draw(gen, { 4, 3, 5 }, dtype, device):transpose(2, 3)
      local Aw = draw(gen, { 12, 10 }, dtype, device):narrow(2, 3, 5)
      assert.tensor_near(loop_mm(Aw, Bt, ends), f64(tl.grouped_mm(Aw, Bt, ends)), rtol, atol)
    end)

    it(("grouped_mm gradients in %s against the loop's, empty groups included"):format(dtype), function()
      tl.manual_seed(14)
      local A = draw(gen, { 9, 4 }, dtype, device):requires_grad_()
      local B = draw(gen, { 5, 4, 6 }, dtype, device):requires_grad_()
      local G = draw(gen, { 9, 6 }, dtype, device)
      local ends = { 0, 4, 4, 7, 8 } -- groups 1 and 3 empty, row 9 past the end
      local y = tl.grouped_mm(A, B, tl.tensor(ends, { dtype = "int64" }):to(device))
      y:backward(G)
      local A64, B64 = f64(A):requires_grad_(), f64(B):requires_grad_()
      local start, loss64 = 0, nil
      for g, e in ipairs(ends) do
        if e > start then
          local rows = A64:narrow(1, start + 1, e - start):matmul(B64:select(1, g))
          local term = (rows * f64(G):narrow(1, start + 1, e - start)):sum()
          loss64 = loss64 and loss64 + term or term
        end
        start = e
      end
      loss64:backward()
      assert.tensor_near(loop_mm(A, B, ends), f64(y), rtol, atol)
      assert.tensor_near(A64.grad, f64(A.grad), rtol, atol, "dA")
      assert.tensor_near(B64.grad, f64(B.grad), rtol, atol, "dB")
      assert.tensor_equal(tl.zeros({ 4, 6 }, { dtype = "float64" }), f64(B.grad[1]))
      assert.tensor_equal(tl.zeros({ 4 }, { dtype = "float64" }), f64(A.grad[9]))
    end)
  end

  it("64 groups of random sizes: the loop's values and one grouped kernel per direction", function()
    tl.manual_seed(15)
    local ends, total = {}, 0
    for g = 1, 64 do
      total = total + (g % 7 == 0 and 0 or tl.randint(1, 9, { 1 })[1])
      ends[g] = total
    end
    local A = draw(gen, { total + 3, 16 }, "float32", device):requires_grad_()
    local B = draw(gen, { 64, 16, 8 }, "float32", device):requires_grad_()
    local y
    local forward = ops_of(tl.trace(function() y = tl.grouped_mm(A, B, ends) end))
    assert.are.equal(1, count(forward, "grouped_mm"))
    assert.tensor_near(loop_mm(A, B, ends), f64(y), 1e-4, 1e-4)
    local backward = ops_of(tl.trace(function() y:sum():backward() end))
    assert.are.equal(1, count(backward, "grouped_mm_backward_input"))
    assert.are.equal(1, count(backward, "grouped_mm_backward_weight"))
    assert.are.equal(0, count(backward, "matmul"))
  end)

  it("runs only the gradient kernels that are needed", function()
    tl.manual_seed(16)
    local A = draw(gen, { 6, 3 }, "float32", device)
    local B = draw(gen, { 2, 3, 4 }, "float32", device):requires_grad_()
    local seen = ops_of(tl.trace(function() tl.grouped_mm(A, B, { 2, 6 }):sum():backward() end))
    assert.are.equal(1, count(seen, "grouped_mm_backward_weight"))
    assert.are.equal(0, count(seen, "grouped_mm_backward_input"))
    local As = { draw(gen, { 2, 3 }, "float32", device):requires_grad_(), draw(gen, { 4, 3 }, "float32", device) }
    local Bs = { draw(gen, { 3, 5 }, "float32", device), draw(gen, { 3, 1 }, "float32", device) }
    seen = ops_of(tl.trace(function()
      local Cs = tl.grouped_matmul(As, Bs)
      local loss = Cs[1]:sum() + Cs[2]:sum()
      loss:backward()
    end))
    assert.are.equal(1, count(seen, "grouped_matmul"))
    assert.are.equal(1, count(seen, "grouped_matmul_backward_input"))
    assert.are.equal(0, count(seen, "grouped_matmul_backward_other"))
    assert.is_nil(As[2].grad)
    assert.tensor_near(f64(tl.ones(2, 5)):matmul(f64(Bs[1]):transpose(1, 2)), f64(As[1].grad), 1e-5, 1e-5)
  end)

  it("outputs of inputs that need no gradient need none, and under no_grad neither", function()
    local A, B = tl.ones(2, 2):to(device), tl.ones(1, 2, 2):to(device)
    assert.is_false(tl.grouped_mm(A, B, { 2 }).requires_grad)
    local Ar = A:clone():requires_grad_()
    assert.is_true(tl.grouped_mm(Ar, B, { 2 }).requires_grad)
    assert.is_false(tl.no_grad(function() return tl.grouped_mm(Ar, B, { 2 }) end).requires_grad)
    assert.is_false(tl.grouped_matmul({ A }, { A })[1].requires_grad)
    assert.are.same({}, tl.grouped_matmul({}, {}))
  end)
end

describe("grouped products on the cpu", function()
  values_and_gradients("cpu")
end)

-- ---------------------------------------------------------------------------------------------
describe("grouped products refuse bad input", function()
  local A, B = tl.randn(6, 4), tl.randn(3, 4, 5)
  local cases = {
    { "K mismatch in grouped_mm", function() return tl.grouped_mm(A, tl.randn(3, 5, 5), { 1, 2, 6 }) end,
      { "grouped_mm", "B has 5 at dim 2", "expected 4" } },
    { "K mismatch in grouped_matmul", function()
        return tl.grouped_matmul({ tl.randn(2, 3), tl.randn(2, 4) }, { tl.randn(3, 1), tl.randn(5, 1) })
      end, { "grouped_matmul", "size mismatch in group 2", "4 vs 5" } },
    { "decreasing offsets", function() return tl.grouped_mm(A, B, { 3, 2, 6 }) end,
      { "grouped_mm", "offsets must not decrease", "got 2 after 3" } },
    { "offsets past T", function() return tl.grouped_mm(A, B, { 1, 2, 7 }) end,
      { "grouped_mm", "offsets[3] is 7, past the 6 rows" } },
    { "a negative first end", function() return tl.grouped_mm(A, B, { -1, 2, 6 }) end,
      { "offsets must not decrease" } },
    { "one end per group", function() return tl.grouped_mm(A, B, { 2, 6 }) end,
      { "offsets must be 1-D with one end per group (3)", "[2]" } },
    { "integer offsets only", function() return tl.grouped_mm(A, B, { 1, 2.5, 6 }) end,
      { "offsets[2] expected an integer, got 2.5" } },
    { "an integer offsets tensor", function() return tl.grouped_mm(A, B, tl.tensor({ 1, 2, 6 }, { dtype = "float32" })) end,
      { "offsets must be int32 or int64, got float32" } },
    { "a 2-D B", function() return tl.grouped_mm(A, tl.randn(4, 5), { 6 }) end,
      { "grouped_mm", "B must be 3-D", "[4, 5]" } },
    { "a 3-D A", function() return tl.grouped_mm(tl.randn(1, 6, 4), B, { 1, 2, 6 }) end,
      { "grouped_mm", "A must be 2-D" } },
    { "dtype mixing", function() return tl.grouped_mm(A, B:double(), { 1, 2, 6 }) end,
      { "grouped_mm", "B is float64, expected float32" } },
    { "an integer A", function() return tl.grouped_mm(A:int(), B, { 1, 2, 6 }) end,
      { "grouped_mm", "floating dtype", "int32" } },
    { "lists of different lengths", function() return tl.grouped_matmul({ A }, {}) end,
      { "grouped_matmul", "one matrix per group, got 1 and 0" } },
    { "a non-tensor in a list", function() return tl.grouped_matmul({ A, 3 }, { A, A }) end,
      { "grouped_matmul", "As[2] expected a tensor, got number" } },
    { "a 1-D matrix in a list", function() return tl.grouped_matmul({ tl.randn(4) }, { tl.randn(4, 2) }) end,
      { "grouped_matmul", "As[1] must be 2-D" } },
    { "dtype mixing in a list", function()
        return tl.grouped_matmul({ tl.randn(2, 3), tl.randn(2, 3) }, { tl.randn(3, 1), tl.randn(3, 1):double() })
      end, { "grouped_matmul", "Bs[2] is float64, expected float32" } },
    { "not a list", function() return tl.grouped_matmul(A, { A }) end,
      { "grouped_matmul", "a table of tensors" } },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": a clear error, inputs unchanged, the engine usable after", function()
      local a_before, b_before = A:clone(), B:clone()
      assert.error_matches(c[2], c[3])
      assert.tensor_equal(a_before, A)
      assert.tensor_equal(b_before, B)
      assert.tensor_near(loop_mm(A, B, { 1, 2, 6 }), f64(tl.grouped_mm(A, B, { 1, 2, 6 })), 1e-5, 1e-5)
    end)
  end
end)

-- ---------------------------------------------------------------------------------------------
describe("grouped products on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of grouped products did not run")
    return
  end
  values_and_gradients("cuda")

  it("refuses operands on two devices", function()
    assert.error_matches(function() return tl.grouped_mm(tl.randn(4, 2):cuda(), tl.randn(1, 2, 3), { 4 }) end,
      { "grouped_mm", "B is on cpu, expected cuda:0" })
    assert.error_matches(function()
      return tl.grouped_matmul({ tl.randn(2, 2):cuda(), tl.randn(2, 2) }, { tl.randn(2, 2):cuda(), tl.randn(2, 2) })
    end, { "grouped_matmul", "As[2] is on cpu, expected cuda:0" })
  end)

  it("equal groups (one strided batch) and uneven ones agree with the CPU in bfloat16", function()
    tl.manual_seed(17)
    local A = draw(gen, { 256, 64 }, "bfloat16", "cpu")
    local B = draw(gen, { 8, 64, 32 }, "bfloat16", "cpu")
    for _, ends in ipairs({ { 32, 64, 96, 128, 160, 192, 224, 256 }, { 5, 40, 41, 100, 100, 180, 250, 256 } }) do
      local y = tl.grouped_mm(A:cuda(), B:cuda(), tl.tensor(ends, { dtype = "int32" }):cuda())
      assert.tensor_near(loop_mm(A, B, ends), f64(y), 2e-2, 2e-2)
    end
  end)
end)
