-- The Hopper GEMM core (engine/kernels/cuda/hopper_gemm.cu) through tl.grouped_mm and its two
-- gradients, on a Hopper GPU (#cuda; pending elsewhere): values and gradients against float64
-- loops on the CPU (a different op and path) in bfloat16 and float16, for groups of 0, 1 and 7 rows,
-- sizes that are no multiple of any tile, k not a multiple of 64, rows past the last end; offsets
-- on the GPU (int32, int64) and on the host; the variants taken (tl.trace); no host wait with
-- offsets on the GPU (tl.cuda.host_waits); misaligned or strided operands on the old path; bad
-- offsets on the GPU raised by their queued checks.
local tl = require("tlua")

local function f64(t) return t:detach():to("cpu"):double() end

-- float64 reference of y = grouped_mm(A, B, ends), dA and dB for the output gradient G
local function reference(A, B, G, ends)
  local a, b, g = f64(A), f64(B), f64(G)
  local y = tl.zeros({ a.shape[1], b.shape[3] }, { dtype = "float64" })
  local da = tl.zeros(a.shape, { dtype = "float64" })
  local db = tl.zeros(b.shape, { dtype = "float64" })
  local start = 0
  for i, e in ipairs(ends) do
    if e > start then
      local rows_a, rows_g = a:narrow(1, start + 1, e - start), g:narrow(1, start + 1, e - start)
      y:narrow(1, start + 1, e - start):copy_(rows_a:matmul(b[i]))
      da:narrow(1, start + 1, e - start):copy_(rows_g:matmul(b[i]:t()))
      db[i]:copy_(rows_a:t():matmul(rows_g))
    end
    start = e
  end
  return y, da, db
end

-- the variants of the trace's events, as a set of "op:label"
local function variants_of(events)
  local taken = {}
  for _, e in ipairs(events) do
    for _, name in ipairs(e.variants or {}) do taken[e.op .. ":" .. name] = true end
  end
  return taken
end

local function took(taken, op, name)
  for key in pairs(taken) do
    if key:find(op .. ":", 1, true) == 1 and key:find(name, 1, true) then return true end
  end
  return false
end

local function with_hopper(on, fn)
  local before = tl.cuda.hopper_gemm_enabled()
  tl.cuda.set_hopper_gemm_enabled(on)
  local ok, err = pcall(fn)
  tl.cuda.set_hopper_gemm_enabled(before)
  if not ok then error(err, 0) end
end

-- bf16/f16 rounding of sums of k products of N(0, 1) numbers: relative 2^-7, and an absolute
-- part that grows as sqrt(k)
local function tolerance(dtype, k)
  local r = dtype == "bfloat16" and 2e-2 or 4e-3
  return r, r * math.sqrt(k)
end

-- y, dA, dB of grouped_mm on cuda (offsets as given), and the variants taken
local function run(A, B, G, offsets)
  local a, b = A:cuda():requires_grad_(), B:cuda():requires_grad_()
  local y
  local events = tl.trace(function()
    y = tl.grouped_mm(a, b, offsets)
    y:backward(G:cuda())
  end)
  return y, a.grad, b.grad, variants_of(events)
end

-- true on a Hopper GPU; else the block's specs are pending, saying why
local function on_hopper()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the Hopper GEMM core's specs did not run")
    return false
  end
  local major, minor = tl.cuda.get_device_capability()
  if major ~= 9 or minor ~= 0 then
    pending(("not a Hopper GPU (compute capability %d.%d): the core's specs did not run"):format(major, minor))
    return false
  end
  return true
end

describe("the Hopper GEMM core through grouped_mm #cuda", function()
  if not on_hopper() then return end

  -- T rows in 8 groups of 0, 1, 7, 300, 0, 64, 129 and 19 rows, then 20 rows past the last end
  local ends = { 0, 1, 8, 308, 308, 372, 501, 520 }
  local T = 540
  local shapes = {
    { K = 200, N = 312 }, -- k no multiple of 64, n no multiple of 256 (the reduction's m neither of 128)
    { K = 64, N = 256 },  -- exact tiles
    { K = 136, N = 8 },   -- one narrow column tile
  }
  for _, dtype in ipairs({ "bfloat16", "float16" }) do
    for _, s in ipairs(shapes) do
      it(("%s, K = %d, N = %d: values and gradients, offsets on the GPU and the host"):format(dtype, s.K, s.N), function()
        tl.manual_seed(31)
        local A = tl.randn(T, s.K):to(dtype)
        local B = tl.randn(#ends, s.K, s.N):to(dtype)
        local G = tl.randn(T, s.N):to(dtype)
        local y64, da64, db64 = reference(A, B, G, ends)
        local offsets = { tl.tensor(ends, { dtype = "int64" }):cuda(), tl.tensor(ends, { dtype = "int32" }):cuda(), ends }
        for _, o in ipairs(offsets) do
          local y, da, db, taken = run(A, B, G, o)
          local rtol, atol = tolerance(dtype, s.K)
          assert.tensor_near(y64, f64(y), rtol, atol, "y")
          rtol, atol = tolerance(dtype, s.N)
          assert.tensor_near(da64, f64(da), rtol, atol, "dA")
          rtol, atol = tolerance(dtype, 300)
          assert.tensor_near(db64, f64(db), rtol, atol, "dB")
          assert.is_true(took(taken, "grouped_mm", "hopper_rows"), "forward on the core")
          assert.is_true(took(taken, "grouped_mm_backward_input", "hopper_rows"), "dA on the core")
          assert.is_true(took(taken, "grouped_mm_backward_weight", "hopper_reduction"), "dB on the core")
        end
      end)
    end
  end

  it("many tiles: 7 groups of free sizes over 2000 rows, k = 576, n = 520, in bfloat16", function()
    tl.manual_seed(32)
    local e = { 150, 151, 900, 900, 1337, 1990, 2000 }
    local A, B = tl.randn(2000, 576):bfloat16(), tl.randn(7, 576, 520):bfloat16()
    local G = tl.randn(2000, 520):bfloat16()
    local y64, da64, db64 = reference(A, B, G, e)
    local y, da, db, taken = run(A, B, G, tl.tensor(e, { dtype = "int64" }):cuda())
    local rtol, atol = tolerance("bfloat16", 576)
    assert.tensor_near(y64, f64(y), rtol, atol, "y")
    rtol, atol = tolerance("bfloat16", 520)
    assert.tensor_near(da64, f64(da), rtol, atol, "dA")
    rtol, atol = tolerance("bfloat16", 750)
    assert.tensor_near(db64, f64(db), rtol, atol, "dB")
    assert.is_true(took(taken, "grouped_mm", "hopper_rows"))
  end)

  it("no host wait, forward or backward, with offsets on the GPU", function()
    tl.manual_seed(33)
    local a = tl.randn(512, 128):bfloat16():cuda():requires_grad_()
    local b = tl.randn(4, 128, 256):bfloat16():cuda():requires_grad_()
    local g = tl.randn(512, 256):bfloat16():cuda()
    local offsets = tl.tensor({ 100, 100, 333, 512 }, { dtype = "int32" }):cuda()
    tl.cuda.synchronize()
    local waits = tl.cuda.host_waits()
    local y = tl.grouped_mm(a, b, offsets)
    assert.are.equal(waits, tl.cuda.host_waits(), "forward")
    y:backward(g)
    assert.are.equal(waits, tl.cuda.host_waits(), "backward")
    local y64, da64, db64 = reference(a, b, g, { 100, 100, 333, 512 })
    assert.tensor_near(y64, f64(y), tolerance("bfloat16", 128))
    assert.tensor_near(da64, f64(a.grad), tolerance("bfloat16", 256))
    assert.tensor_near(db64, f64(b.grad), tolerance("bfloat16", 233))
    -- the old path reads the offsets on the host: one wait a product
    with_hopper(false, function()
      local before = tl.cuda.host_waits()
      tl.grouped_mm(a:detach(), b:detach(), offsets)
      assert.is_true(tl.cuda.host_waits() > before)
    end)
  end)

  it("the same numbers with the core turned off (cuBLAS, the offsets read on the host)", function()
    tl.manual_seed(34)
    local A, B, G = tl.randn(300, 72):half(), tl.randn(3, 72, 40):half(), tl.randn(300, 40):half()
    local e = { 7, 7, 290 }
    local y64, da64, db64 = reference(A, B, G, e)
    with_hopper(false, function()
      local y, da, db, taken = run(A, B, G, tl.tensor(e, { dtype = "int64" }):cuda())
      assert.tensor_near(y64, f64(y), tolerance("float16", 72))
      assert.tensor_near(da64, f64(da), tolerance("float16", 40))
      assert.tensor_near(db64, f64(db), tolerance("float16", 283))
      assert.is_false(took(taken, "grouped_mm", "hopper_rows"))
      assert.is_true(took(taken, "grouped_mm", "segments_on_host"))
      assert.is_true(took(taken, "grouped_mm_backward_weight", "segments_on_host"))
    end)
  end)

  it("misaligned or strided operands take the old path, with the same numbers", function()
    tl.manual_seed(35)
    local e = { 10, 40, 64 }
    local B, G = tl.randn(3, 24, 16):bfloat16(), tl.randn(64, 16):bfloat16()
    -- rows of 20 bytes (k = 10) cannot be read by TMA
    local A10, B10 = tl.randn(64, 10):bfloat16(), tl.randn(3, 10, 16):bfloat16()
    local y64 = reference(A10, B10, G, e)
    local y, _, _, taken = run(A10, B10, G, tl.tensor(e, { dtype = "int64" }):cuda())
    assert.tensor_near(y64, f64(y), tolerance("bfloat16", 10))
    assert.is_true(took(taken, "grouped_mm", "segments_on_host"))
    -- a view one element into its storage: 2-byte aligned
    local wide = tl.randn(64, 25):bfloat16():cuda()
    local A = wide:narrow(2, 2, 24)
    local events = tl.trace(function() y = tl.grouped_mm(A, B:cuda(), tl.tensor(e, { dtype = "int64" }):cuda()) end)
    assert.tensor_near((reference(A, B, G, e)), f64(y), tolerance("bfloat16", 24))
    assert.is_true(took(variants_of(events), "grouped_mm", "segments_on_host"))
  end)

  it("bad offsets on the GPU are raised by their queued checks", function()
    local A, B = tl.randn(6, 8):bfloat16():cuda(), tl.randn(3, 8, 8):bfloat16():cuda()
    local before = tl.sync_checks()
    tl.set_sync_checks(true)
    local ok1, err1 = pcall(tl.grouped_mm, A, B, tl.tensor({ 3, 2, 6 }, { dtype = "int64" }):cuda())
    local ok2, err2 = pcall(tl.grouped_mm, A, B, tl.tensor({ 1, 2, 7 }, { dtype = "int32" }):cuda())
    tl.set_sync_checks(before)
    assert.is_false(ok1)
    assert.matches("grouped_mm", tostring(err1), 1, true)
    assert.matches("offsets must not decrease", tostring(err1), 1, true)
    assert.is_false(ok2)
    assert.matches("offsets holds 7", tostring(err2), 1, true)
    -- the core off: the offsets are read on the host, and checked there at once
    with_hopper(false, function()
      assert.error_matches(function() tl.grouped_mm(A, B, tl.tensor({ 3, 2, 6 }, { dtype = "int64" }):cuda()) end,
        { "grouped_mm", "the steps between offsets holds -1", "offsets must not decrease" })
    end)
    -- asynchronously: raised by the next synchronization, the engine usable after
    tl.grouped_mm(A, B, tl.tensor({ 1, 2, 9 }, { dtype = "int64" }):cuda())
    assert.error_matches(function() tl.cuda.synchronize() end, { "grouped_mm", "offsets holds 9" })
    local y = tl.grouped_mm(A, B, tl.tensor({ 1, 2, 6 }, { dtype = "int64" }):cuda())
    assert.tensor_near((reference(A, B, tl.zeros(6, 8), { 1, 2, 6 })), f64(y), tolerance("bfloat16", 8))
  end)
end)

describe("the Hopper GEMM core through matmul_ (in place) #cuda", function()
  if not on_hopper() then return end

  local function inplace_variants(fn)
    local taken = variants_of(tl.trace(fn))
    return took(taken, "matmul_inplace", "hopper"), took(taken, "matmul_inplace", "tiles")
  end

  for _, dtype in ipairs({ "bfloat16", "float16" }) do
    -- n: one narrow tile, k not a multiple of 64, exact tiles, a partial last column tile, 4 and
    -- 9 CTAs sharing rows
    for _, n in ipairs({ 8, 200, 256, 520, 1024, 2056 }) do
      it(("%s, n = %d: x <- x @ w over 300 rows (and w read transposed), against float64"):format(dtype, n), function()
        tl.manual_seed(41 + n)
        local x0 = tl.randn(300, n):to(dtype)
        local w = (tl.randn(n, n) / math.sqrt(n)):to(dtype)
        local expected = f64(x0):matmul(f64(w))
        local x = x0:cuda()
        local hopper = inplace_variants(function() x:matmul_(w:cuda()) end)
        assert.is_true(hopper, "on the core")
        local rtol, atol = tolerance(dtype, 1)
        assert.tensor_near(expected, f64(x), rtol, atol * 2)
        -- w^T as a view (column-major): the core reads it K-major
        local wt = w:cuda():t()
        local y = x0:cuda()
        hopper = inplace_variants(function() y:matmul_(wt) end)
        assert.is_true(hopper, "w^T on the core")
        assert.tensor_near(f64(x0):matmul(f64(w):t()), f64(y), rtol, atol * 2)
      end)
    end
  end

  it("a chain of 8 in place over rows of a wider tensor (several rounds of tiles), and frozen-W training", function()
    tl.manual_seed(50)
    local n = 512
    local ws = {}
    for i = 1, 8 do ws[i] = (tl.randn(n, n) / math.sqrt(n)):bfloat16() end
    local wide = tl.randn(9000, n + 64):bfloat16()
    local x0 = wide:narrow(2, 1, n) -- rows n + 64 elements apart (16-byte aligned)
    local h64 = f64(x0)
    for i = 1, 8 do h64 = f64(h64:matmul(f64(ws[i])):bfloat16()) end
    local x = wide:cuda():narrow(2, 1, n)
    local hopper = inplace_variants(function()
      for i = 1, 8 do x:matmul_(ws[i]:cuda()) end
    end)
    assert.is_true(hopper)
    assert.tensor_near(h64, f64(x), 3e-2, 3e-2)
    -- training with the weights frozen: backward runs g <- g @ w^T in place too
    local a = tl.randn(384, n):bfloat16():cuda():requires_grad_()
    local h = a:clone()
    local hopper_bwd
    local taken = variants_of(tl.trace(function()
      for i = 1, 3 do h:matmul_(ws[i]:cuda()) end
      h:float():sum():backward()
    end))
    hopper_bwd = took(taken, "matmul_inplace", "hopper")
    assert.is_true(hopper_bwd)
    local g64 = tl.ones(384, n, { dtype = "float64" })
    for i = 3, 1, -1 do g64 = g64:matmul(f64(ws[i]):t()) end
    assert.tensor_near(g64, f64(a.grad), 3e-2, 3e-2 * math.sqrt(n))
  end)

  it("many rounds of rows: the read counters taken in turn (6000 rows, n = 2048)", function()
    tl.manual_seed(52)
    -- 8 CTAs a block of 128 rows, 16 blocks a round, counters for 32 blocks: 47 blocks reuse them
    local x0 = tl.randn(6000, 2048):bfloat16()
    local w = (tl.randn(2048, 2048) / math.sqrt(2048)):bfloat16()
    local x = x0:cuda()
    local hopper = inplace_variants(function() x:matmul_(w:cuda()) end)
    assert.is_true(hopper)
    assert.tensor_near(f64(x0):matmul(f64(w)), f64(x), tolerance("bfloat16", 1))
  end)

  it("what the core does not take runs by tiles, with the same numbers", function()
    tl.manual_seed(51)
    -- n past 32 tiles of 256 columns; n not a multiple of 8; rows 2-byte aligned; the core off
    for _, c in ipairs({
      { x = tl.randn(8, 8200):bfloat16(), n = 8200 },
      { x = tl.randn(130, 100):bfloat16(), n = 100 },
      { x = tl.randn(130, 65):bfloat16(), n = 64, view = function(t) return t:narrow(2, 2, 64) end },
    }) do
      local w = (tl.randn(c.n, c.n) / math.sqrt(c.n)):bfloat16()
      local view = c.view or function(t) return t end
      local expected = f64(view(c.x)):matmul(f64(w))
      local x = view(c.x:cuda())
      local hopper, tiles = inplace_variants(function() x:matmul_(w:cuda()) end)
      assert.is_false(hopper)
      assert.is_true(tiles)
      assert.tensor_near(expected, f64(x), 2e-2, 4e-2)
    end
    with_hopper(false, function()
      local x0, w = tl.randn(200, 256):half(), (tl.randn(256, 256) / 16):half()
      local x = x0:cuda()
      local hopper, tiles = inplace_variants(function() x:matmul_(w:cuda()) end)
      assert.is_false(hopper)
      assert.is_true(tiles)
      assert.tensor_near(f64(x0):matmul(f64(w)), f64(x), 4e-3, 8e-3)
    end)
  end)
end)
