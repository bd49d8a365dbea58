-- tl.scaled_dot_product_attention against a composed float64 reference (matmul, softmax, where, a dropout mask from tl.rand): values, gradients, layouts, dropout, memory, errors (#cuda).
local tl = require("tlua")

local DTYPES = { "float64", "float32", "bfloat16", "float16" }
-- {rtol, atol} against the float64 reference: outputs are rounded once to the dtype; gradients
-- are computed from the rounded output (delta = rowsum(dO * O)), hence the 16-bit atol
local TOL = { float64 = { 1e-10, 1e-10 }, float32 = { 1e-4, 1e-4 }, bfloat16 = { 3e-2, 3e-2 },
              float16 = { 5e-3, 5e-3 } }

local function f64(t) return t:detach():to("cpu"):double() end

local function concat(a, b)
  local s = {}
  for _, v in ipairs(a) do s[#s + 1] = v end
  for _, v in ipairs(b) do s[#s + 1] = v end
  return s
end

local ops_of = require("helpers.trace").op_counts

-- the dropout mask tl.rand(lead..., T, S) >= p draws after tl.manual_seed(seed)
local function rand_mask(seed, lead, T, S, p)
  tl.manual_seed(seed)
  return tl.rand(concat(lead, { T, S })):ge(p)
end

-- softmax(scale q k^T) v composed of float64 ops (differentiable): causal by -inf above the
-- diagonal (top-left: query i sees keys j <= i), dropout by the given bool mask keep, times
-- 1 / (1 - p)
local function reference(q, k, v, opts, keep)
  opts = opts or {}
  local n = #q.shape
  local T, S, D = q.shape[n - 1], k.shape[n - 1], q.shape[n]
  local scores = q:matmul(k:transpose(-2, -1)) * (opts.scale or 1 / math.sqrt(D))
  if opts.causal then
    local above = tl.arange(S, { dtype = "float64" }):view(1, S):gt(tl.arange(T, { dtype = "float64" }):view(T, 1))
    scores = tl.where(above, -math.huge, scores)
  end
  local p = scores:softmax(-1)
  if keep then p = p * (keep:double() * (1 / (1 - opts.dropout))) end
  return p:matmul(v)
end

-- a [shape] tensor in dtype on device; layout "contiguous", "heads" (the transpose of a
-- [..., R, H, D] tensor: strided heads and rows that still fold), "unfoldable" (the first two
-- leading dims swapped: a copy), "strided_last" (the transpose of [..., D, R]), "expanded" (one
-- head broadcast over the others, stride 0)
local function draw(shape, dtype, device, layout)
  local n = #shape
  local function base(s) return tl.randn(s):to(dtype):to(device or "cpu") end
  local t
  if layout == "heads" and n >= 3 then
    local s = concat(shape, {})
    s[n - 2], s[n - 1] = shape[n - 1], shape[n - 2]
    t = base(s):transpose(n - 2, n - 1)
  elseif layout == "unfoldable" and n >= 4 then
    local s = concat(shape, {})
    s[1], s[2] = shape[2], shape[1]
    t = base(s):transpose(1, 2)
  elseif layout == "strided_last" then
    local s = concat(shape, {})
    s[n - 1], s[n] = shape[n], shape[n - 1]
    t = base(s):transpose(n - 1, n)
  elseif layout == "expanded" and n >= 3 then
    local s = concat(shape, {})
    s[n - 2] = 1
    t = base(s):expand(shape)
  else
    t = base(shape)
  end
  return t:detach():requires_grad_()
end

-- runs the op on case c = {lead, T, S, D, causal, scale, dropout, seed, layout} in dtype on
-- device and compares the output and the q, k, v gradients with the float64 reference
local function check(c, dtype, device)
  device = device or "cpu"
  local rtol, atol = TOL[dtype][1], TOL[dtype][2]
  local lead = c.lead or {}
  local q = draw(concat(lead, { c.T, c.D }), dtype, device, c.layout)
  local k = draw(concat(lead, { c.S, c.D }), dtype, device, c.layout)
  local v = draw(concat(lead, { c.S, c.D }), dtype, device, c.layout)
  local g = tl.randn(concat(lead, { c.T, c.D })):to(dtype):to(device)
  local opts = { causal = c.causal, scale = c.scale, dropout = c.dropout }
  local keep
  if c.dropout then
    keep = rand_mask(c.seed, lead, c.T, c.S, c.dropout)
    tl.manual_seed(c.seed)
  end
  local y = tl.scaled_dot_product_attention(q, k, v, opts)
  local what = ("lead {%s}, T %d, S %d, D %d, causal %s, dropout %s, %s, %s, %s"):format(
    table.concat(lead, ", "), c.T, c.S, c.D, tostring(c.causal), tostring(c.dropout), c.layout or "contiguous",
    dtype, device)
  assert.are.same(concat(lead, { c.T, c.D }), y.shape, what)
  assert.are.equal(dtype, y.dtype, what)
  assert.are.equal(q.device, y.device, what)
  -- laid out positions first ([..., T, H, D] in memory, as torch's flash attention), so that
  -- y:transpose(H, T) is contiguous; without a head dim, contiguous
  if #lead >= 1 then
    assert.is_true(y:transpose(#lead, #lead + 1):is_contiguous(), what .. ": heads of a position together")
  else
    assert.is_true(y:is_contiguous(), what)
  end
  local rq, rk, rv = f64(q):requires_grad_(), f64(k):requires_grad_(), f64(v):requires_grad_()
  local ry = reference(rq, rk, rv, opts, keep)
  assert.tensor_near(ry:detach(), f64(y), rtol, atol, what .. ": output")
  y:backward(g)
  ry:backward(f64(g))
  assert.tensor_near(rq.grad, f64(q.grad), rtol, atol, what .. ": dq")
  assert.tensor_near(rk.grad, f64(k.grad), rtol, atol, what .. ": dk")
  assert.tensor_near(rv.grad, f64(v.grad), rtol, atol, what .. ": dv")
  assert.are.equal(dtype, q.grad.dtype)
  return y
end

-- shapes that cross the 64-row tiles of the CPU kernels (and the GPU's), with T == S, T < S,
-- T > S
local SHAPES = {
  { lead = { 2, 3 }, T = 5, S = 5, D = 8 },
  { lead = { 2 }, T = 3, S = 7, D = 4 },
  { lead = {}, T = 9, S = 4, D = 6 },
  { lead = { 1, 2 }, T = 130, S = 130, D = 16 },
  { lead = { 3 }, T = 70, S = 150, D = 8 },
  { lead = { 2, 1 }, T = 150, S = 65, D = 5 },
}

describe("scaled_dot_product_attention against the composed float64 reference", function()
  for _, dtype in ipairs(DTYPES) do
    for _, causal in ipairs({ false, true }) do
      it(("%s, causal %s: values and gradients for T == S, T < S, T > S"):format(dtype, tostring(causal)), function()
        tl.manual_seed(11)
        for _, s in ipairs(SHAPES) do
          check({ lead = s.lead, T = s.T, S = s.S, D = s.D, causal = causal }, dtype)
        end
      end)
    end
  end

  it("0, 1, 2 and 3 leading dims, a given scale", function()
    tl.manual_seed(12)
    for _, lead in ipairs({ {}, { 3 }, { 2, 3 }, { 2, 2, 3 } }) do
      for _, dtype in ipairs({ "float64", "float32" }) do
        check({ lead = lead, T = 6, S = 9, D = 5, scale = 0.3 }, dtype)
        check({ lead = lead, T = 9, S = 6, D = 5, scale = 2.5, causal = true }, dtype)
      end
    end
  end)

  it("non-contiguous inputs: strided heads, unfoldable leading dims, a strided last dim, expanded heads", function()
    tl.manual_seed(13)
    for _, layout in ipairs({ "heads", "unfoldable", "strided_last", "expanded" }) do
      for _, dtype in ipairs({ "float64", "float32", "bfloat16" }) do
        check({ lead = { 2, 3 }, T = 7, S = 5, D = 4, causal = true, layout = layout }, dtype)
        check({ lead = { 2, 2, 3 }, T = 70, S = 67, D = 6, layout = layout }, dtype)
      end
    end
    -- [B, T, H, D] activations as [B, H, T, D] heads: the usual layout of a transformer
    local x = tl.randn(2, 9, 4, 8):double()
    local q = x:transpose(2, 3)
    assert.is_false(q:is_contiguous())
    assert.tensor_near(reference(q, q, q), tl.scaled_dot_product_attention(q, q, q), 1e-10, 1e-10)
  end)

  it("is one kernel (no matmul or softmax kernels) and tl.nn.functional has it", function()
    local q, k, v = tl.randn(2, 4, 8), tl.randn(2, 6, 8), tl.randn(2, 6, 8)
    local seen = ops_of(function() return tl.scaled_dot_product_attention(q, k, v, { causal = true }) end)
    assert.are.same({ scaled_dot_product_attention = 1 }, seen)
    assert.are.equal(tl.scaled_dot_product_attention, tl.nn.functional.scaled_dot_product_attention)
    assert.tensor_equal(tl.scaled_dot_product_attention(q, k, v, { scale = 0.25 }),
      tl.nn.functional.scaled_dot_product_attention(q, k, v, { scale = 0.25 }))
    -- scale nil is 1 / sqrt(D)
    assert.tensor_equal(tl.scaled_dot_product_attention(q, k, v, { scale = 1 / math.sqrt(8) }),
      tl.scaled_dot_product_attention(q, k, v, {}))
  end)

  it("empty inputs give empty results (and zeros for S = 0) without a kernel", function()
    local function run(lead, T, S, D)
      local q = tl.randn(concat(lead, { T, D })):requires_grad_()
      local k = tl.randn(concat(lead, { S, D })):requires_grad_()
      local v = tl.randn(concat(lead, { S, D })):requires_grad_()
      local y
      local seen = ops_of(function()
        y = tl.scaled_dot_product_attention(q, k, v, { causal = true, dropout = 0.5 })
        return y
      end)
      assert.is_nil(seen.scaled_dot_product_attention)
      assert.are.same(concat(lead, { T, D }), y.shape)
      assert.tensor_equal(tl.zeros(concat(lead, { T, D })), y)
      y:sum():backward()
      assert.tensor_equal(tl.zeros(q.shape), q.grad)
      assert.tensor_equal(tl.zeros(k.shape), k.grad)
      assert.tensor_equal(tl.zeros(v.shape), v.grad)
    end
    run({ 2 }, 0, 4, 3)
    run({ 2 }, 3, 0, 3)
    run({ 2 }, 3, 4, 0)
    run({ 0, 2 }, 3, 4, 3)
    run({}, 0, 0, 0)
  end)

  it("gradients of only the inputs that need them; a saved input changed in place is an error", function()
    tl.manual_seed(14)
    local q, k = tl.randn(2, 5, 4):double(), tl.randn(2, 6, 4):double()
    local v = tl.randn(2, 6, 4):double():requires_grad_()
    local y = tl.scaled_dot_product_attention(q, k, v, { causal = true })
    assert.are.equal("scaled_dot_product_attention", y.grad_fn)
    y:sum():backward()
    local rv = v:detach():clone():requires_grad_()
    reference(q, k, rv, { causal = true }):sum():backward()
    assert.tensor_near(rv.grad, v.grad, 1e-10, 1e-10)
    assert.is_nil(q.grad)

    local q2 = tl.randn(2, 5, 4):double():requires_grad_()
    local k2 = tl.randn(2, 6, 4):double()
    local y2 = tl.scaled_dot_product_attention(q2, k2, k2)
    k2:add_(1)
    assert.error_matches(function() y2:sum():backward() end,
      { "scaled_dot_product_attention", "modified in place" })
    -- usable after
    local y3 = tl.scaled_dot_product_attention(q2, k2, k2)
    y3:sum():backward()
    assert.are.same({ 2, 5, 4 }, q2.grad.shape)
  end)

  it("passes a float64 gradcheck on small shapes (causal, T != S, dropout under a fixed seed)", function()
    local function input(...) return tl.randn(...):double():requires_grad_() end
    local gradcheck = tl.autograd.gradcheck
    assert.is_true(gradcheck(tl.scaled_dot_product_attention, { input(2, 3, 4), input(2, 5, 4), input(2, 5, 4) }))
    assert.is_true(gradcheck(function(q, k, v)
      return tl.scaled_dot_product_attention(q, k, v, { causal = true, scale = 0.8 })
    end, { input(2, 1, 6, 3), input(2, 1, 4, 3), input(2, 1, 4, 3) }))
    assert.is_true(gradcheck(function(q, k, v)
      tl.manual_seed(3)
      return tl.scaled_dot_product_attention(q, k, v, { dropout = 0.4 })
    end, { input(5, 2), input(3, 2), input(3, 2) }))
  end)
end)

describe("scaled_dot_product_attention's dropout", function()
  it("equals the reference whose mask is tl.rand(lead..., T, S) >= p under the same seed", function()
    for _, dtype in ipairs(DTYPES) do
      for _, causal in ipairs({ false, true }) do
        check({ lead = { 2, 2 }, T = 5, S = 7, D = 4, causal = causal, dropout = 0.3, seed = 21 }, dtype)
        check({ lead = { 3 }, T = 70, S = 66, D = 5, causal = causal, dropout = 0.5, seed = 22 }, dtype)
        check({ lead = {}, T = 6, S = 3, D = 2, causal = causal, dropout = 0.1, seed = 23 }, dtype)
      end
    end
    check({ lead = { 2, 2, 2 }, T = 65, S = 9, D = 3, dropout = 0.2, seed = 24, layout = "heads" }, "float64")
  end)

  it("takes the stream as tl.rand of the mask's shape would", function()
    local q, k, v = tl.randn(2, 3, 5, 4), tl.randn(2, 3, 7, 4), tl.randn(2, 3, 7, 4)
    tl.manual_seed(31)
    tl.rand(2, 3, 5, 7)
    local after_rand = tl.rand(9)
    tl.manual_seed(31)
    tl.scaled_dot_product_attention(q, k, v, { dropout = 0.25 })
    assert.tensor_equal(after_rand, tl.rand(9))
    -- two calls draw two masks; no dropout draws nothing
    tl.manual_seed(31)
    local a = tl.scaled_dot_product_attention(q, k, v, { dropout = 0.25 })
    local b = tl.scaled_dot_product_attention(q, k, v, { dropout = 0.25 })
    assert.is_true((a - b):abs():max():item() > 0)
    tl.manual_seed(31)
    tl.scaled_dot_product_attention(q, k, v, { dropout = 0 })
    local first = tl.rand(9)
    tl.manual_seed(31)
    assert.tensor_equal(tl.rand(9), first)
  end)

  it("compares in float32 as rand >= p does (an element drawn exactly at float32(0.7) is kept)", function()
    -- with seed 101 the uniform of element 1081 is 0.699999988 = float32(0.7) < 0.7: rand >= 0.7
    -- keeps it (the comparison is in float32); element (1, 481) of [2, 600]
    tl.manual_seed(101)
    local u = tl.rand(1082)
    assert.are.equal(tl.tensor({ 0.7 })[1], u[1082])
    assert.is_true(u[1082] < 0.7)
    local keep = rand_mask(101, {}, 2, 600, 0.7)
    assert.is_true(keep[2][482])
    local q, k = tl.randn(2, 2):double(), tl.randn(600, 2):double()
    local v = tl.zeros(600, 1, { dtype = "float64" })
    v[482][1] = 1.0 -- the output reads that one element of the probabilities
    v = v:expand(600, 2):contiguous()
    tl.manual_seed(101)
    local y = tl.scaled_dot_product_attention(q, k, v, { dropout = 0.7 })
    local expected = reference(q, k, v, { dropout = 0.7 }, keep)
    assert.is_true(expected[2][1] > 0)
    assert.tensor_near(expected, y, 1e-12, 1e-15)
  end)
end)

describe("scaled_dot_product_attention's memory", function()
  it("T = S = 4096, D = 16, one head: the CPU peak stays far below a T x S float32 matrix (64 MiB)", function()
    local MiB = 1024 * 1024
    tl.manual_seed(41)
    local q = tl.randn(1, 1, 4096, 16):requires_grad_()
    local k = tl.randn(1, 1, 4096, 16):requires_grad_()
    local v = tl.randn(1, 1, 4096, 16):requires_grad_()
    local g = tl.randn(1, 1, 4096, 16)
    collectgarbage("collect")
    collectgarbage("collect")
    local before = tl.memory_stats("cpu").allocated
    tl.reset_peak_memory_stats("cpu")
    local y = tl.scaled_dot_product_attention(q, k, v, { causal = true, dropout = 0.1 })
    y:backward(g)
    local peak = tl.memory_stats("cpu").peak - before
    -- out, lse, the three gradients and delta: about 1.1 MiB; [4096, 4096] float32 is 64 MiB
    assert.is_true(peak < 4 * MiB, ("forward and backward took %.2f MiB"):format(peak / MiB))
    assert.are.same({ 1, 1, 4096, 16 }, q.grad.shape)
    -- rows near the end against the reference on the last 70 queries (all 4096 keys)
    local rows = q:detach():narrow(3, 4027, 70)
    local expected = reference(rows:double(), k:detach():double(), v:detach():double())
    local y2 = tl.scaled_dot_product_attention(q:detach(), k:detach(), v:detach())
    assert.tensor_near(expected, y2:narrow(3, 4027, 70):double(), 1e-4, 1e-4)
  end)
end)

describe("scaled_dot_product_attention's errors", function()
  local sdpa = tl.scaled_dot_product_attention
  local q, k, v = tl.randn(2, 3, 4), tl.randn(2, 5, 4), tl.randn(2, 5, 4)

  -- after an error the op still computes (and, when the bad call asked for dropout, the stream
  -- was not taken)
  local function still_usable()
    tl.manual_seed(5)
    local first = tl.rand(4)
    tl.manual_seed(5)
    local y = sdpa(q, k, v, { causal = true })
    assert.tensor_near(reference(q:double(), k:double(), v:double(), { causal = true }), y:double(), 1e-5, 1e-5)
    assert.tensor_equal(first, tl.rand(4))
  end

  local bad = {
    { "q not a tensor", function() return sdpa(3, k, v) end, { "scaled_dot_product_attention", "argument 1 (q)", "tensor" } },
    { "k not a tensor", function() return sdpa(q, nil, v) end, { "argument 2 (k)", "tensor", "nil" } },
    { "v not a tensor", function() return sdpa(q, k, "v") end, { "argument 3 (v)", "tensor", "string" } },
    { "integer q", function() return sdpa(q:long(), k, v) end, { "scaled_dot_product_attention", "q", "floating", "int64" } },
    { "dtype mismatch", function() return sdpa(q, k:double(), v) end, { "scaled_dot_product_attention", "q is float32 but k is float64" } },
    { "v's dtype", function() return sdpa(q, k, v:bfloat16()) end, { "q is float32 but v is bfloat16" } },
    { "1-D q", function() return sdpa(tl.randn(4), tl.randn(5, 4), tl.randn(5, 4)) end, { "q must have at least 2 dims", "[4]" } },
    { "0-dim q", function() return sdpa(tl.tensor(1.0), k, v) end, { "q must have at least 2 dims" } },
    { "k's dims", function() return sdpa(q, tl.randn(5, 4), v) end, { "k must be [..., S, D] with q's leading dims", "[5, 4]" } },
    { "leading dims", function() return sdpa(q, tl.randn(3, 5, 4), v) end, { "k must be [..., S, D]", "q is [2, 3, 4]", "[3, 5, 4]" } },
    { "v's leading dims", function() return sdpa(q, k, tl.randn(1, 5, 4)) end, { "v must be [..., S, D]" } },
    { "k's D", function() return sdpa(q, tl.randn(2, 5, 3), v) end, { "k's last dim must be q's head dim D = 4", "[2, 5, 3]" } },
    { "v's D", function() return sdpa(q, k, tl.randn(2, 5, 6)) end, { "v's last dim", "D = 4", "Dv must equal D" } },
    { "v's S", function() return sdpa(q, k, tl.randn(2, 6, 4)) end, { "v must have k's number of keys S = 5", "[2, 6, 4]" } },
    { "dropout -0.1", function() return sdpa(q, k, v, { dropout = -0.1 }) end, { "scaled_dot_product_attention", "dropout must be in [0, 1)", "-0.1" } },
    { "dropout 1", function() return sdpa(q, k, v, { dropout = 1 }) end, { "dropout must be in [0, 1), got 1" } },
    { "dropout NaN", function() return sdpa(q, k, v, { dropout = 0 / 0 }) end, { "dropout must be in [0, 1)" } },
    { "dropout string", function() return sdpa(q, k, v, { dropout = "0.1" }) end, { "option dropout expected a number, got string" } },
    { "scale 0", function() return sdpa(q, k, v, { scale = 0 }) end, { "scaled_dot_product_attention", "option scale must be a finite number > 0", "got 0" } },
    { "scale -1", function() return sdpa(q, k, v, { scale = -1 }) end, { "option scale", "got -1" } },
    { "scale inf", function() return sdpa(q, k, v, { scale = math.huge }) end, { "option scale", "inf" } },
    { "scale NaN", function() return sdpa(q, k, v, { scale = 0 / 0 }) end, { "option scale" } },
    { "scale table", function() return sdpa(q, k, v, { scale = {} }) end, { "option scale expected a number, got table" } },
    { "causal number", function() return sdpa(q, k, v, { causal = 1 }) end, { "option causal expected a boolean, got number" } },
    { "unknown option", function() return sdpa(q, k, v, { casual = true }) end, { "unknown option 'casual'", "causal, scale, dropout" } },
    { "options a number", function() return sdpa(q, k, v, 0.1) end, { "argument 4", "options table", "number" } },
    { "options a tensor", function() return sdpa(q, k, v, q) end, { "argument 4", "options table" } },
  }
  for _, case in ipairs(bad) do
    it(case[1] .. " is an error naming the op and the argument; the op stays usable", function()
      local msg = assert.error_matches(case[2], case[3])
      assert.is_truthy(msg:find("scaled_dot_product_attention", 1, true), msg)
      still_usable()
    end)
  end

  it("a bad call with dropout takes nothing from the stream; a failed backward leaves the graph usable", function()
    local bad_v = tl.randn(2, 5, 3)
    tl.manual_seed(6)
    local first = tl.rand(3)
    tl.manual_seed(6)
    assert.error_matches(function() return sdpa(q, k, bad_v, { dropout = 0.5 }) end, { "v's last dim" })
    assert.tensor_equal(first, tl.rand(3))
    local x = q:detach():clone():requires_grad_()
    local y = sdpa(x, k, v)
    assert.error_matches(function() y:backward(tl.randn(2, 3)) end, { "backward" })
    y:backward(tl.ones(2, 3, 4))
    assert.are.same({ 2, 3, 4 }, x.grad.shape)
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("scaled_dot_product_attention on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of scaled_dot_product_attention did not run")
    return
  end

  -- the 16-bit dtypes on cuDNN's fused attention where it takes the problem, and on tlua's kernels
  local function with_cudnn(enabled, fn)
    local was = tl.cuda.cudnn_enabled()
    tl.cuda.set_cudnn_enabled(enabled)
    local ok, err = pcall(fn)
    tl.cuda.set_cudnn_enabled(was)
    if not ok then error(err, 0) end
  end
  for _, dtype in ipairs(DTYPES) do
    for _, causal in ipairs({ false, true }) do
      for _, cudnn in ipairs(dtype:match("16") and { true, false } or { true }) do
        local on = dtype:match("16") and (cudnn and ", cuDNN" or ", tlua's kernels") or ""
        it(("%s, causal %s%s: values and gradients against the float64 reference"):format(dtype, tostring(causal), on), function()
          with_cudnn(cudnn, function()
            tl.manual_seed(51)
            for _, s in ipairs(SHAPES) do
              check({ lead = s.lead, T = s.T, S = s.S, D = s.D, causal = causal }, dtype, "cuda")
            end
            check({ lead = { 2, 2 }, T = 200, S = 260, D = 64, causal = causal }, dtype, "cuda")
            check({ lead = { 1, 3 }, T = 257, S = 129, D = 128, causal = causal, layout = "heads" }, dtype, "cuda")
          end)
        end)
      end
    end
  end

  it("runs on cuDNN where it takes the problem (q, k, v views of one projection), else on tlua's kernels", function()
    tl.manual_seed(52)
    local B, T, H, D = 2, 96, 3, 64
    local qkv = tl.randn(B, T, 3, H, D):bfloat16():cuda()
    local function variants(opts, cudnn)
      local q, k, v = table.unpack(qkv:permute(3, 1, 4, 2, 5):unbind(1))
      q, k, v = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
      local taken, y = {}, nil
      with_cudnn(cudnn, function()
        local events = tl.trace(function()
          tl.manual_seed(53)
          y = tl.scaled_dot_product_attention(q, k, v, opts)
          y:float():sum():backward()
        end)
        for _, e in ipairs(events) do
          for _, name in ipairs(e.variants or {}) do taken[e.op .. ":" .. name] = true end
        end
      end)
      return taken, y, q.grad
    end
    local on, y_on, gq_on = variants({ causal = true }, true)
    assert.is_true(on["scaled_dot_product_attention:cudnn"])
    assert.is_true(on["scaled_dot_product_attention_backward:cudnn"])
    local off, y_off, gq_off = variants({ causal = true }, false)
    assert.is_nil(off["scaled_dot_product_attention:cudnn"])
    assert.is_true(off["scaled_dot_product_attention:mma_d64"])
    -- both against each other within bf16's rounding (each against the reference above)
    assert.tensor_near(y_off:float():cpu(), y_on:float():cpu(), 2e-2, 2e-2)
    assert.tensor_near(gq_off:float():cpu(), gq_on:float():cpu(), 3e-2, 3e-2)
    -- dropout: tlua's Philox mask, not cuDNN's
    local dropout = variants({ causal = true, dropout = 0.2 }, true)
    assert.is_nil(dropout["scaled_dot_product_attention:cudnn"])
    -- a head dim cuDNN does not take (not a multiple of 8) falls back to tlua's kernels
    local q = tl.randn(1, 2, 16, 12):bfloat16():cuda()
    with_cudnn(true, function()
      local events = tl.trace(function() tl.scaled_dot_product_attention(q, q, q) end)
      for _, e in ipairs(events) do
        for _, name in ipairs(e.variants or {}) do assert.are_not.equal("cudnn", name) end
      end
    end)
  end)

  it("dropout: the mask is tl.rand(lead..., T, S) >= p (CPU or GPU rand), as on the CPU", function()
    for _, dtype in ipairs(DTYPES) do
      for _, causal in ipairs({ false, true }) do
        check({ lead = { 2, 2 }, T = 70, S = 90, D = 32, causal = causal, dropout = 0.3, seed = 61 }, dtype, "cuda")
      end
    end
    local q, k, v = tl.randn(2, 3, 70, 16), tl.randn(2, 3, 90, 16), tl.randn(2, 3, 90, 16)
    tl.manual_seed(62)
    local cpu = tl.scaled_dot_product_attention(q, k, v, { dropout = 0.4, causal = true })
    tl.manual_seed(62)
    local gpu = tl.scaled_dot_product_attention(q:cuda(), k:cuda(), v:cuda(), { dropout = 0.4, causal = true })
    assert.tensor_near(cpu, gpu:to("cpu"), 1e-4, 1e-4)
    -- the same mask elementwise: zero where the CPU's mask dropped with v = ones
    tl.manual_seed(63)
    local mask_cpu = tl.rand(2, 3, 70, 90):ge(0.4)
    tl.manual_seed(63)
    assert.tensor_equal(mask_cpu, tl.rand({ 2, 3, 70, 90 }, { device = "cuda" }):ge(0.4):to("cpu"))
    -- and the float32 comparison of the element drawn exactly at float32(0.7)
    local keep = rand_mask(101, {}, 2, 600, 0.7)
    local qd, kd = tl.randn(2, 2):double(), tl.randn(600, 2):double()
    local vd = tl.zeros(600, 1, { dtype = "float64" })
    vd[482][1] = 1.0
    vd = vd:expand(600, 2):contiguous()
    tl.manual_seed(101)
    local y = tl.scaled_dot_product_attention(qd:cuda(), kd:cuda(), vd:cuda(), { dropout = 0.7 })
    assert.tensor_near(reference(qd, kd, vd, { dropout = 0.7 }, keep), y:to("cpu"), 1e-12, 1e-15)
  end)

  it("errors: inputs on two devices", function()
    local q, k, v = tl.randn(2, 3, 4), tl.randn(2, 5, 4), tl.randn(2, 5, 4)
    assert.error_matches(function() return tl.scaled_dot_product_attention(q:cuda(), k, v) end,
      { "scaled_dot_product_attention", "q is on cuda:0 but k is on cpu" })
    assert.error_matches(function() return tl.scaled_dot_product_attention(q:cuda(), k:cuda(), v) end,
      { "scaled_dot_product_attention", "but v is on cpu" })
    local y = tl.scaled_dot_product_attention(q:cuda(), k:cuda(), v:cuda())
    assert.tensor_near(reference(q:double(), k:double(), v:double()), y:to("cpu"):double(), 1e-4, 1e-4)
  end)

  it("T = S = 4096, D = 64, 4 heads: no T x S matrix on the GPU", function()
    local MiB = 1024 * 1024
    local q = tl.randn(1, 4, 4096, 64, { device = "cuda" }):requires_grad_()
    local k = tl.randn(1, 4, 4096, 64, { device = "cuda" }):requires_grad_()
    local v = tl.randn(1, 4, 4096, 64, { device = "cuda" }):requires_grad_()
    tl.cuda.synchronize()
    tl.cuda.reset_peak_memory_stats()
    local before = tl.cuda.memory_stats()
    local y = tl.scaled_dot_product_attention(q, k, v, { causal = true })
    y:sum():backward()
    tl.cuda.synchronize()
    local peak = tl.cuda.memory_stats().peak - before.allocated
    assert.is_true(peak < 64 * MiB, ("took %.1f MiB"):format(peak / MiB))
  end)
end)
