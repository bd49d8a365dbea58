-- Sorting and selection against Lua references (helpers/sort_cases.lua): sort, argsort, topk,
-- kthvalue and median in every dtype along every dim, with ties (stable: position order), NaN
-- (above +inf, as torch) and -0; unique, searchsorted, bincount; multinomial against its
-- algorithm written in Lua over Philox4x32-10 (so a seed gives the same draws on every device);
-- the values' gradients; empty inputs; bad input is a clear error naming the op and what was
-- expected, the inputs unchanged. The same comparisons run on CUDA (#cuda), and CUDA against the
-- CPU at sizes that take the kernels' fast paths.
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local C = require("helpers.sort_cases")

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local nan = 0 / 0

local function dtypes_of(op, device)
  local list = {}
  for _, k in ipairs(tl.kernels()) do
    if k.op == op and k.device == device then list[#list + 1] = k.dtype end
  end
  return list
end

-- values with many ties: small integers (booleans), halves for floating dtypes
local function values(d, rng, shape)
  return tl.tensor(ref.build(shape, function()
    if d == "bool" then return rng:int(0, 1) == 1 end
    if floating[d] then return rng:int(-6, 6) / 2 end
    return rng:int(-4, 4)
  end), { dtype = d })
end

local function lines_of(x, shape, dim)
  local flat, lines = ref.flatten(x), ref.lines(shape, dim)
  local out = {}
  for l, line in ipairs(lines) do
    out[l] = {}
    for i, p in ipairs(line) do out[l][i] = flat[p] end
  end
  return out
end

local SHAPES = { { { 7 }, 1 }, { { 3, 5 }, 1 }, { { 3, 5 }, 2 }, { { 2, 3, 4 }, 2 }, { { 2, 3, 4 }, -1 } }

local function compare(device)
  for _, d in ipairs(dtypes_of("sort", device)) do
    it("sort, argsort, topk, kthvalue and median in " .. d .. " match the Lua references", function()
      local rng = ref.rng(5 + #d)
      for _, c in ipairs(SHAPES) do
        local shape, dim = c[1], c[2]
        local nd = dim < 0 and #shape + 1 + dim or dim
        local x = values(d, rng, shape)
        local t, xd = x:totable(), x:to(device)
        local what = string.format("%s dim %d on %s", d, dim, device)
        for _, descending in ipairs({ false, true }) do
          local ev, ei = C.sorted(t, shape, nd, descending)
          local v, i = xd:sort(dim, { descending = descending })
          assert.tensor_equal(ev, v:to("cpu"), "sort values " .. what)
          assert.tensor_equal(ei, i:to("cpu"), "sort indices " .. what)
          assert.tensor_equal(ei, xd:argsort(dim, { descending = descending }):to("cpu"), "argsort " .. what)
        end
        local n = shape[nd]
        for _, k in ipairs({ 1, math.max(1, n // 2), n }) do
          for _, largest in ipairs({ true, false }) do
            local ev, ei = C.sorted(t, shape, nd, largest, k)
            local v, i = xd:topk(k, dim, { largest = largest })
            assert.tensor_equal(ev, v:to("cpu"), "topk values " .. what)
            assert.tensor_equal(ei, i:to("cpu"), "topk indices " .. what)
          end
          -- kthvalue: the k-th of the stably sorted line
          local sv, si = C.sorted(t, shape, nd, false)
          local v, i = xd:kthvalue(k, dim, { keepdim = true })
          local ev, ei = {}, {}
          for l, line in ipairs(lines_of(sv, shape, nd)) do ev[l] = line[k] end
          for l, line in ipairs(lines_of(si, shape, nd)) do ei[l] = line[k] end
          assert.tensor_equal(ev, v:flatten():to("cpu"), "kthvalue values " .. what)
          assert.tensor_equal(ei, i:flatten():to("cpu"), "kthvalue indices " .. what)
        end
        -- median along dim (keepdim and not) and of every element
        local mv, mi = {}, {}
        for l, line in ipairs(lines_of(t, shape, nd)) do mv[l], mi[l] = C.median(line) end
        local v, i = xd:median(dim)
        assert.tensor_equal(mv, v:flatten():to("cpu"), "median values " .. what)
        assert.tensor_equal(mi, i:flatten():to("cpu"), "median indices " .. what)
        local kept = xd:median(dim, { keepdim = true })
        local kshape = { table.unpack(shape) }
        kshape[nd] = 1
        assert.are.same(kshape, kept:size())
        assert.tensor_equal(C.median(ref.flatten(t)), xd:median():to("cpu"), "median of all " .. what)
      end
    end)
  end

  for _, d in ipairs(dtypes_of("sort", device)) do
    if floating[d] then
      it("sort, topk, kthvalue and median in " .. d .. " put NaN above +inf and keep -0 beside +0", function()
        local list = { 1, nan, -math.huge, -0.0, 2, nan, 0.0, math.huge, -1, 0.0 }
        local x = tl.tensor(list, { dtype = d, device = device })
        for _, descending in ipairs({ false, true }) do
          local ev, ei = C.sorted(list, { #list }, 1, descending)
          local v, i = x:sort({ descending = descending })
          assert.tensor_equal(ev, v:to("cpu"))
          assert.tensor_equal(ei, i:to("cpu"))
        end
        local v, i = x:topk(3)
        assert.tensor_equal({ nan, nan, math.huge }, v:to("cpu"))
        assert.tensor_equal({ 2, 6, 8 }, i:to("cpu"))
        v, i = x:topk(4, { largest = false })
        assert.tensor_equal({ -math.huge, -1, -0.0, 0.0 }, v:to("cpu"))
        assert.tensor_equal({ 3, 9, 4, 7 }, i:to("cpu"))
        v, i = x:kthvalue(10)
        assert.tensor_equal(nan, v:to("cpu"))
        assert.are.equal(6, i:item())
        -- a line with a NaN has the median NaN, at its first NaN (as torch)
        v, i = x:median(1)
        assert.tensor_equal(nan, v:to("cpu"))
        assert.are.equal(2, i:item())
        assert.tensor_equal(nan, x:median():to("cpu"))
        local rows = tl.tensor({ { 3, nan, 1 }, { 2, 5, 4 } }, { dtype = d, device = device })
        v, i = rows:median(2)
        assert.tensor_equal({ nan, 4 }, v:to("cpu"))
        assert.tensor_equal({ 2, 3 }, i:to("cpu"))
      end)
    end
  end

  for _, d in ipairs(dtypes_of("sort", device)) do
    it("unique in " .. d .. " gives the sorted distinct values, the inverse and the counts", function()
      local rng = ref.rng(77 + #d)
      local x = values(d, rng, { 3, 4 })
      local flat = ref.flatten(x:totable())
      local order = C.order(flat)
      local expected, counts, group = {}, {}, {}
      for _, p in ipairs(order) do
        local v = flat[p]
        if #expected == 0 or C.less(expected[#expected], v) then
          expected[#expected + 1], counts[#expected + 1] = v, 0
        end
        counts[#expected] = counts[#expected] + 1
        group[p] = #expected
      end
      local u, inverse, cnt = x:to(device):unique({ return_inverse = true, return_counts = true })
      assert.tensor_equal(expected, u:to("cpu"))
      assert.tensor_equal(ref.unflatten(group, { 3, 4 }), inverse:to("cpu"))
      assert.tensor_equal(counts, cnt:to("cpu"))
      assert.tensor_equal(expected, x:to(device):unique():to("cpu"))
      local _, only_counts = x:to(device):unique({ return_counts = true })
      assert.tensor_equal(counts, only_counts:to("cpu"))
    end)
  end

  for _, d in ipairs(dtypes_of("searchsorted", device)) do
    it("searchsorted in " .. d .. " gives 1-based insertion points, batched or one sorted row", function()
      local rng = ref.rng(91 + #d)
      local s = values(d, rng, { 2, 6 }):sort()
      local v = values(d, rng, { 2, 5 })
      local rows, vals = s:totable(), v:totable()
      for _, right in ipairs({ false, true }) do
        local got = tl.searchsorted(s:to(device), v:to(device), { right = right })
        assert.tensor_equal(C.searchsorted(rows, vals, right), got:to("cpu"))
        local one = s:select(1, 1):contiguous():to(device)
        got = tl.searchsorted(one, v:to(device), { right = right })
        assert.tensor_equal(C.searchsorted({ rows[1] }, vals, right), got:to("cpu"))
      end
      local five = tl.searchsorted(tl.tensor({ 1, 2, 2, 3 }, { dtype = d, device = device }), 2)
      assert.are.equal(2, five:item())
      assert.are.same({}, five:size())
      if floating[d] then -- NaN sorts last: values search in the same order
        local sorted = tl.tensor({ 1, 2, nan }, { dtype = d, device = device })
        local got = tl.searchsorted(sorted, tl.tensor({ nan, 2, 5 }, { dtype = d, device = device }))
        assert.tensor_equal({ 3, 2, 3 }, got:to("cpu"))
        got = tl.searchsorted(sorted, tl.tensor({ nan, 2, 5 }, { dtype = d, device = device }), { right = true })
        assert.tensor_equal({ 4, 3, 3 }, got:to("cpu"))
      end
    end)
  end

  for _, d in ipairs(dtypes_of("bincount", device)) do
    it("bincount of " .. d .. " counts value v in bin v, with minlength and weights", function()
      local bins = { 2, 5, 2, 1, 7, 2 }
      local b = tl.tensor(bins, { dtype = d, device = device })
      assert.tensor_equal(C.bincount(bins), tl.bincount(b):to("cpu"))
      assert.tensor_equal(C.bincount(bins, 10), tl.bincount(b, { minlength = 10 }):to("cpu"))
      for _, w in ipairs({ "float32", "float64", "bfloat16", "float16" }) do
        local weights = { 0.5, 1, 2, 4, 0.25, 8 }
        local got = tl.bincount(b, { weights = tl.tensor(weights, { dtype = w, device = device }) })
        assert.are.equal(w == "float64" and "float64" or "float32", got.dtype)
        assert.tensor_equal(C.bincount(bins, 0, weights), got:to("cpu"))
      end
      local empty = tl.tensor({}, { dtype = d, device = device })
      assert.tensor_equal({ 0, 0, 0 }, tl.bincount(empty, { minlength = 3 }):to("cpu"))
      assert.are.same({ 0 }, tl.bincount(empty):size())
    end)
  end

  it("multinomial follows its algorithm over Philox4x32-10 in Lua, the same for a seed", function()
    local probs = { { 0.1, 0, 0.5, 0.2, 0.2 }, { 1, 3, 0, 0, 2 } }
    local p = tl.tensor(probs, { dtype = "float64", device = device })
    local seed = 0x5EED
    -- with replacement: u * total against the float64 cumulative sums
    tl.manual_seed(seed)
    local got = tl.multinomial(p, 7, { replacement = true })
    local u = K.random("rand", "float64", 2 * 7, seed, 0)
    local expected = {}
    for r = 1, 2 do
      expected[r] = {}
      local cdf, total = {}, 0
      for c = 1, 5 do
        total = total + probs[r][c]
        cdf[c] = total
      end
      for j = 1, 7 do
        local target = u[(r - 1) * 7 + j] * total
        local c = 1
        while cdf[c] <= target do c = c + 1 end
        expected[r][j] = c
      end
    end
    assert.tensor_equal(expected, got:to("cpu"))
    -- without replacement: the n smallest keys -log(1 - u) / p, in order
    tl.manual_seed(seed)
    got = tl.multinomial(p, 3)
    u = K.random("rand", "float64", 2 * 5, seed, 0)
    for r = 1, 2 do
      local keys = {}
      for c = 1, 5 do keys[c] = -math.log(1 - u[(r - 1) * 5 + c]) / probs[r][c] end
      local order = C.order(keys)
      expected[r] = { order[1], order[2], order[3] }
    end
    assert.tensor_equal(expected, got:to("cpu"))
    -- 1-d probs, float32, the same draws again for the same seed; zeros never drawn
    local q = tl.tensor({ 0, 2, 0, 1 }, { dtype = "float32", device = device })
    tl.manual_seed(3)
    local a = tl.multinomial(q, 50, { replacement = true })
    tl.manual_seed(3)
    local b = tl.multinomial(q, 50, { replacement = true })
    assert.are.same({ 50 }, a:size())
    assert.tensor_equal(a:to("cpu"), b:to("cpu"))
    for _, c in ipairs(a:to("cpu"):totable()) do assert.is_true(c == 2 or c == 4) end
    local draw = tl.multinomial(q, 2):to("cpu"):totable()
    table.sort(draw)
    assert.are.same({ 2, 4 }, draw)
  end)
end

local function fails(x, pattern, f)
  local before = x:to("cpu"):totable()
  local ok, err = pcall(f)
  assert.is_false(ok, pattern)
  assert.matches(pattern, err, 1, true)
  assert.are.same(before, x:to("cpu"):totable())
end

describe("sorting and selection on the cpu", function()
  it("topk of long rows (keys made in blocks of 2048) matches the Lua sort, ties in position order", function()
    -- rows of 5000 (k = 300: 3 blocks) and 17000 (k = 2100: the first k span two blocks), values in
    -- 0 .. 99 (many ties)
    local rng = ref.rng(91)
    for _, c in ipairs({ { 5000, 300 }, { 17000, 2100 } }) do
      local n, k = c[1], c[2]
      local row = {}
      for j = 1, n do row[j] = math.floor(rng:random() * 100) end
      local x = tl.tensor({ row }, { dtype = "float32" })
      for _, largest in ipairs({ true, false }) do
        local order = {}
        for j = 1, n do order[j] = j end
        table.sort(order, function(a, b)
          if row[a] ~= row[b] then return largest and row[a] > row[b] or (not largest and row[a] < row[b]) end
          return a < b
        end)
        local ev, ei = {}, {}
        for j = 1, k do ev[j], ei[j] = row[order[j]], order[j] end
        local v, i = x:topk(k, 2, { largest = largest })
        assert.are.same({ ev }, v:totable(), "values n " .. n)
        assert.are.same({ ei }, i:totable(), "indices n " .. n)
      end
    end
  end)

  compare("cpu")

  it("gradients of the values go back through the indices (against finite differences)", function()
    local gradcheck = tl.autograd.gradcheck
    local function input(...) return tl.randn(...):double():requires_grad_() end
    assert.is_true(gradcheck(function(x) return (x:sort(1)) end, { input(4, 3) }))
    assert.is_true(gradcheck(function(x) return (x:topk(2, 1, { largest = false })) end, { input(5, 2) }))
    assert.is_true(gradcheck(function(x) return (x:kthvalue(3, 2)) end, { input(2, 5) }))
    assert.is_true(gradcheck(function(x) return (x:median(2)) end, { input(3, 4) }))
    assert.is_true(gradcheck(function(x) return x:median() end, { input(3, 3) }))
    -- the gradient lands where the value was taken from
    local x = tl.tensor({ 3.0, 1.0, 2.0 }, { requires_grad = true })
    local v = x:topk(2)
    v:backward(tl.tensor({ 10.0, 20.0 }))
    assert.tensor_equal({ 10, 0, 20 }, x.grad)
  end)

  it("handles empty inputs and 0-dim tensors as torch does", function()
    local v, i = tl.zeros(0):sort()
    assert.are.same({ 0 }, v:size())
    assert.are.same({ 0 }, i:size())
    v, i = tl.zeros(2, 0):topk(0)
    assert.are.same({ 2, 0 }, v:size())
    v, i = tl.zeros(0, 3):sort(1)
    assert.are.same({ 0, 3 }, i:size())
    v, i = tl.tensor(5.0):sort()
    assert.are.equal(5, v:item())
    assert.are.equal(1, i:item())
    v, i = tl.tensor(5.0):topk(1)
    assert.are.equal(1, i:item())
    assert.tensor_equal(nan, tl.zeros(0):median())
    assert.are.same({ 0 }, tl.zeros(0):unique():size())
    local _, inverse, counts = tl.zeros(2, 0):unique({ return_inverse = true, return_counts = true })
    assert.are.same({ 2, 0 }, inverse:size())
    assert.are.same({ 0 }, counts:size())
    assert.are.same({ 0, 3 }, tl.multinomial(tl.ones(0, 4), 3):size())
    assert.are.same({ 3 }, tl.searchsorted(tl.zeros(0), tl.ones(3)):size())
    assert.tensor_equal({ 1, 1, 1 }, tl.searchsorted(tl.zeros(0), tl.ones(3)))
  end)

  it("rejects bad input with the op, the argument and what was expected; inputs unchanged", function()
    local x = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float32" })
    fails(x, "topk: k = 4 is out of range for dim 2 of size 3 (expected 0 <= k <= 3)", function() return x:topk(4) end)
    fails(x, "topk: k = -1 is out of range", function() return x:topk(-1) end)
    fails(x, "topk: dim 3 is out of range", function() return x:topk(1, 3) end)
    fails(x, "sort: dim -3 is out of range", function() return x:sort(-3) end)
    fails(x, "sort: unknown option 'decending' (accepted: descending, stable)",
      function() return x:sort({ decending = true }) end)
    fails(x, "topk: unknown option 'smallest'", function() return x:topk(1, 2, { smallest = true }) end)
    fails(x, "kthvalue: k = 0 is out of range for dim 2 of size 3 (expected 1 <= k <= 3)",
      function() return x:kthvalue(0) end)
    fails(x, "kthvalue: k = 3 is out of range for dim 1 of size 2", function() return x:kthvalue(3, 1) end)
    fails(x, "median: dim 2 has no element", function() return tl.zeros(2, 0):median(2) end)
    fails(x, "unique: unknown option 'dim'", function() return x:unique({ dim = 1 }) end)
    -- searchsorted
    fails(x, "searchsorted: values must have sorted's dtype float32, got int64",
      function() return tl.searchsorted(x, tl.tensor({ 1 })) end)
    fails(x, "searchsorted: values (shape [3, 1]) must have the leading dims of sorted (shape [2, 3])",
      function() return tl.searchsorted(x, tl.zeros(3, 1)) end)
    fails(x, "searchsorted: sorted must have at least one dim", function() return tl.searchsorted(tl.tensor(1.0), x) end)
    fails(x, "searchsorted: sorted must be a numeric tensor, got bool",
      function() return tl.searchsorted(x:gt(2), x:gt(1)) end)
    -- bincount
    local bins = tl.tensor({ 1, 3, 2 })
    fails(bins, "bincount: bins holds 0 at position 2 (shape [3]), out of range for the bins (values >= 1)",
      function() return tl.bincount(tl.tensor({ 1, 0, 2 })) end)
    fails(bins, "bincount: bins must be an int64 or int32 tensor of 1-based indices, got float32",
      function() return tl.bincount(x) end)
    fails(bins, "bincount: bins must be a 1-d tensor, got 2 dims", function() return tl.bincount(tl.tensor({ { 1 } })) end)
    fails(bins, "bincount: minlength must be >= 0, got -1", function() return tl.bincount(bins, { minlength = -1 }) end)
    fails(bins, "bincount: weights must be a floating tensor, got int64",
      function() return tl.bincount(bins, { weights = tl.tensor({ 1, 2, 3 }) }) end)
    fails(bins, "bincount: weights (shape [2]) must have bins' shape [3]",
      function() return tl.bincount(bins, { weights = tl.ones(2) }) end)
    -- multinomial
    local p = tl.tensor({ { 0.5, 0.5 }, { 1, 0 } })
    fails(p, "multinomial: probs must be a floating tensor, got int64",
      function() return tl.multinomial(tl.tensor({ 1, 2 }), 1) end)
    fails(p, "multinomial: probs must be a 1-d or 2-d tensor, got 3 dims",
      function() return tl.multinomial(tl.ones(1, 1, 2), 1) end)
    fails(p, "multinomial: n must be >= 1, got 0", function() return tl.multinomial(p, 0) end)
    fails(p, "multinomial: cannot draw 3 samples without replacement from 2 categories",
      function() return tl.multinomial(p, 3) end)
    fails(p, "multinomial: row 2 of probs has fewer non-zero probabilities than the 2 samples drawn without replacement",
      function() return tl.multinomial(p, 2) end)
    fails(p, "multinomial: row 1 of probs holds a negative, infinite or NaN probability",
      function() return tl.multinomial(tl.tensor({ 0.5, -0.1 }), 1) end)
    fails(p, "multinomial: row 2 of probs holds a negative, infinite or NaN probability",
      function() return tl.multinomial(tl.tensor({ { 1.0, 1.0 }, { nan, 1.0 } }), 1) end)
    fails(p, "multinomial: row 1 of probs holds a negative, infinite or NaN probability",
      function() return tl.multinomial(tl.tensor({ math.huge, 1.0 }), 1, { replacement = true }) end)
    fails(p, "multinomial: row 1 of probs has every probability 0 (expected a positive sum)",
      function() return tl.multinomial(tl.zeros(2), 1, { replacement = true }) end)
    fails(p, "multinomial: probs has no category", function() return tl.multinomial(tl.zeros(2, 0), 1) end)
    fails(p, "multinomial: unknown option 'replace'", function() return tl.multinomial(p, 1, { replace = true }) end)
  end)
end)

describe("sorting and selection on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of sorting and selection did not run")
    return
  end
  compare("cuda")

  it("matches the cpu on large inputs: sort of one long row and many rows, topk's block select", function()
    tl.manual_seed(11)
    local long = tl.randn(1 << 20)
    local v, i = long:to("cuda"):sort()
    local cv, ci = long:sort()
    assert.tensor_equal(cv, v:to("cpu"))
    assert.tensor_equal(ci, i:to("cpu"))
    local rows = tl.randn(64, 50304):bfloat16()
    for _, k in ipairs({ 1, 50, 512, 600 }) do
      local gv, gi = rows:to("cuda"):topk(k)
      local ev, ei = rows:topk(k)
      assert.tensor_equal(ev, gv:to("cpu"), "topk values k = " .. k)
      assert.tensor_equal(ei, gi:to("cpu"), "topk indices k = " .. k)
    end
    -- a row of ties at the threshold takes the exact select: ties in position order
    local ties = tl.randint(0, 3, { 4, 20000 }):float()
    local gv, gi = ties:to("cuda"):topk(100, -1, { largest = false })
    local ev, ei = ties:topk(100, -1, { largest = false })
    assert.tensor_equal(ev, gv:to("cpu"))
    assert.tensor_equal(ei, gi:to("cpu"))
    local sv, si = rows:to("cuda"):sort(1, { descending = true })
    local esv, esi = rows:sort(1, { descending = true })
    assert.tensor_equal(esv, sv:to("cpu"))
    assert.tensor_equal(esi, si:to("cpu"))
  end)

  it("draws the same multinomial samples as the cpu for a seed", function()
    local probs = tl.rand(8, 1000):double()
    for _, replacement in ipairs({ true, false }) do
      tl.manual_seed(21)
      local cpu = tl.multinomial(probs, 40, { replacement = replacement })
      tl.manual_seed(21)
      local gpu = tl.multinomial(probs:to("cuda"), 40, { replacement = replacement })
      assert.tensor_equal(cpu, gpu:to("cpu"))
    end
  end)

  it("a bad distribution is raised at the next synchronization, naming the row", function()
    local p = tl.tensor({ { 1.0, 2.0 }, { 0.0, 0.0 } }, { device = "cuda" })
    local ok, err = pcall(function() return tl.multinomial(p, 1):to("cpu") end)
    assert.is_false(ok)
    assert.matches("multinomial: the check of each row of probs holds 3 at position 2", err, 1, true)
    ok, err = pcall(function() return tl.bincount(tl.tensor({ 1, 0 }, { device = "cuda" })) end)
    assert.is_false(ok)
    assert.matches("bincount: bins holds 0 at position 2", err, 1, true)
  end)
end)
