-- Index range checks (tl_check_index_range) behind embedding, cross_entropy, max_pool2d's backward and _gather_rows: exact messages on the CPU; on CUDA (#cuda) the failure raised by the next synchronization (zero rows, NaN loss meanwhile), and tl.set_sync_checks.
local tl = require("tlua")
local coverage = require("helpers.coverage")

-- the message a failed check gives (tlua/nn.h), built here from its parts
local function message(op, what, value, position, shape, range_of, first, last)
  local dims = {}
  for i, d in ipairs(shape) do dims[i] = tostring(d) end
  return string.format("%s: %s holds %d at position %d (shape [%s]), out of range for %s (expected %d <= index <= %d; indices count from 1)",
    op, what, value, position, table.concat(dims, ", "), range_of, first, last)
end

-- the error of fn, or nil when it succeeds
local function error_of(fn)
  local ok, err = pcall(fn)
  if ok then return nil end
  return tostring(err)
end

local function assert_has(err, expected, what)
  assert(err, what .. ": expected an error")
  assert(err:find(expected, 1, true), what .. ": expected\n  " .. expected .. "\ngot\n  " .. err)
end

describe("index checks on the cpu", function()
  it("name the first offending value and its 1-based position, in int32 and int64", function()
    local w = tl.randn(5, 3)
    for _, dtype in ipairs({ "int64", "int32" }) do
      local cases = {
        { { 1, 6, 2, 0 }, 6, 2 }, -- the first of two bad ones
        { { 0, 1 }, 0, 1 },
        { { 5, 5, -3 }, -3, 3 },
      }
      for _, c in ipairs(cases) do
        local idx = tl.tensor(c[1], { dtype = dtype })
        coverage.compared(function() return error_of(function() return tl.embedding(idx, w) end) end, function(err)
          assert_has(err, message("embedding", "indices", c[2], c[3], { #c[1] }, "the weight's rows", 1, 5), dtype)
        end)
      end
      local good = tl.tensor({ { 1, 5 }, { 3, 2 } }, { dtype = dtype })
      coverage.compared(function() return tl.embedding(good, w) end, function(out)
        assert.tensor_equal(w:select(1, 5), out[1][2])
      end)
    end
  end)

  it("count positions row-major through any shape and strides", function()
    local w = tl.randn(4, 2)
    local idx = tl.tensor({ { 1, 2, 3 }, { 4, 9, 1 } }):transpose(1, 2) -- [3, 2]; row-major: 1 4 2 9 3 1
    assert_has(error_of(function() return tl.embedding(idx, w) end),
      message("embedding", "indices", 9, 4, { 3, 2 }, "the weight's rows", 1, 4), "transposed")
  end)

  it("guard cross_entropy's targets and _gather_rows' rows", function()
    local logits = tl.randn(3, 4)
    assert_has(error_of(function() return tl.cross_entropy(logits, tl.tensor({ 1, 5, 2 })) end),
      message("cross_entropy", "target", 5, 2, { 3 }, "the logits' classes", 1, 4), "cross_entropy")
    assert_has(error_of(function() return tl._gather_rows(tl.randn(3, 2), tl.tensor({ 2, 4 })) end),
      "_gather_rows: index 4 at position 2 is out of range for a tensor with 3 rows", "_gather_rows")
  end)

  it("are synchronous on the cpu whatever set_sync_checks says, and the setting reads back", function()
    assert.is_false(tl.sync_checks())
    tl.set_sync_checks(true)
    assert.is_true(tl.sync_checks())
    tl.set_sync_checks(false)
    assert.is_false(tl.sync_checks())
    assert.error_matches(function() tl.set_sync_checks(1) end, { "set_sync_checks", "boolean", "number" })
    assert.error_matches(function() tl.set_sync_checks() end, { "set_sync_checks", "boolean", "no value" })
  end)
end)

describe("index checks on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA index checks did not run")
    return
  end

  after_each(function() tl.set_sync_checks(false) end)

  it("raise a failure at the next synchronization, once, with the op's message", function()
    for _, dtype in ipairs({ "int64", "int32" }) do
      local w = tl.randn(5, 3, { device = "cuda" })
      local idx = tl.tensor({ 2, 7, 1 }, { dtype = dtype, device = "cuda" })
      local out
      coverage.compared(function()
        out = tl.embedding(idx, w) -- queued: no error yet
        return error_of(function() tl.cuda.synchronize() end)
      end, function(err)
        assert_has(err, message("embedding", "indices", 7, 2, { 3 }, "the weight's rows", 1, 5), dtype)
      end)
      -- the failed row reads zeros, the others the weight's rows
      local host = out:to("cpu")
      assert.tensor_equal(w:to("cpu"):select(1, 2), host[1])
      assert.tensor_equal(tl.zeros(3), host[2])
      assert.tensor_equal(w:to("cpu"):select(1, 1), host[3])
      -- raised once: the device works on
      assert.is_nil(error_of(function() tl.cuda.synchronize() end))
      local good = tl.tensor({ 5, 1 }, { dtype = dtype, device = "cuda" })
      coverage.compared(function() return tl.embedding(good, w) end, function(r)
        assert.tensor_equal(w:to("cpu"):select(1, 5), r:to("cpu")[1])
      end)
    end
  end)

  it("are raised by item() and copies to the host, naming the op given the index", function()
    local logits = tl.randn(3, 4, { device = "cuda" })
    local target = tl.tensor({ 1, 0, 2 }, { device = "cuda" })
    local loss = tl.cross_entropy(logits, target)
    assert_has(error_of(function() return loss:item() end),
      message("cross_entropy", "target", 0, 2, { 3 }, "the logits' classes", 1, 4), "item")
    -- the loss itself is NaN (the bad row), and reading it again raises nothing
    assert.is_true(loss:item() ~= loss:item())
    local x = tl.randn(2, 3, { device = "cuda" })
    local _ = tl._gather_rows(x, tl.tensor({ 3 }, { device = "cuda" }))
    assert_has(error_of(function() return x:to("cpu") end), "holds 3 at position 1", "to(cpu)")
  end)

  it("keep the first failure when several checks fail before a synchronization", function()
    local w = tl.randn(4, 2, { device = "cuda" })
    local _ = tl.embedding(tl.tensor({ 9 }, { device = "cuda" }), w)
    local _ = tl.embedding(tl.tensor({ 1, 8 }, { device = "cuda" }), w)
    local err = error_of(function() tl.cuda.synchronize() end)
    assert_has(err, "holds 9 at position 1 (shape [1])", "first failure")
    assert.is_nil(error_of(function() tl.cuda.synchronize() end))
  end)

  it("of gather are made by its kernel as it reads, on each of its paths", function()
    -- the line (along the last dim), the walk ([2, 3] along dim 1), quads (a contiguous [2, 8]
    -- along dim 1) and rows (index_select's expanded index, whose 1-d check fails first): the
    -- bad element reads zero, the others x's
    local x = tl.randn(3, 9, { device = "cuda" })
    local host = x:to("cpu")
    for _, case in ipairs({ { 2, 2, 3 }, { 1, 2, 3 }, { 1, 2, 8 } }) do
      local dim, rows, cols = case[1], case[2], case[3]
      local index = tl.ones(rows, cols, { dtype = "int64" })
      index[2][cols] = 12
      local out
      coverage.compared(function()
        out = x:gather(dim, index:to("cuda")) -- queued: no error yet
        return error_of(function() tl.cuda.synchronize() end)
      end, function(err)
        assert_has(err, message("gather", "index", 12, 2 * cols, { rows, cols }, "the size along dim", 1,
          x.shape[dim]), string.format("gather along %d by [%d, %d]", dim, rows, cols))
      end)
      local got = out:to("cpu")
      assert.are.equal(0, got[2][cols])
      assert.are.equal(dim == 2 and host[2][1] or host[1][1], got[2][1])
    end
    local w = tl.randn(2, 3, 40, { device = "cuda" })
    local picked
    coverage.compared(function()
      picked = w:index_select(2, tl.tensor({ 3, 4 }, { device = "cuda" }))
      return error_of(function() tl.cuda.synchronize() end)
    end, function(err)
      assert_has(err, message("index_select", "index", 4, 2, { 2 }, "the size along dim", 1, 3), "index_select")
    end)
    local got = picked:to("cpu")
    assert.tensor_equal(w:to("cpu"):select(2, 3), got:select(2, 1))
    assert.tensor_equal(tl.zeros(2, 40), got:select(2, 2))
    assert.is_nil(error_of(function() tl.cuda.synchronize() end))
  end)

  it("with set_sync_checks(true) raise at the op itself", function()
    tl.set_sync_checks(true)
    local w = tl.randn(5, 3, { device = "cuda" })
    local failure = error_of(function() return tl.embedding(tl.tensor({ 6 }, { device = "cuda" }), w) end)
    tl.set_sync_checks(false) -- the specs after this one run with queued checks
    assert_has(failure, message("embedding", "indices", 6, 1, { 1 }, "the weight's rows", 1, 5), "sync mode")
    assert.is_nil(error_of(function() tl.cuda.synchronize() end))
  end)

  it("leave the gradient of an out-of-range index out of the embedding's backward", function()
    local w = tl.randn(4, 2, { device = "cuda" }):requires_grad_()
    local idx = tl.tensor({ 2, 11, 2, 4 }, { device = "cuda" })
    local out = tl.embedding(idx, w)
    out:sum():backward()
    assert_has(error_of(function() tl.cuda.synchronize() end), "holds 11 at position 2", "forward check")
    -- rows 2 (twice) and 4 get their sums; row 1 and 3 none; the bad index adds nowhere
    local want = tl.tensor({ { 0, 0 }, { 2, 2 }, { 0, 0 }, { 1, 1 } }, { dtype = "float32" })
    assert.tensor_equal(want, w.grad:to("cpu"))
  end)
end)
