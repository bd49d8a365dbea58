-- tl.distributed.reduce_scatter and all_gather (and their _start forms): CPU ranks started by
-- tlua --nproc 2 and 3 against values computed here from each rank's known inputs (in place and
-- out of place, float64, float32, int64, sum/avg/max/min/product, empty tensors), a size that
-- differs between ranks, the world of one of this process with every argument error, and a #cuda
-- block through NCCL (2 ranks need 2 GPUs).
local tl = require("tlua")

local dist = tl.distributed

local ranks = require("helpers.ranks")
local run = ranks.run
local scratch = ranks.scratch(before_each, after_each)
local script, launch = scratch.script, scratch.launch

-- Each rank's script: rank r's input element i (counted from 0 over the whole input) is
-- value(r, i); the expected results are reduced here, in Lua, over every rank's values.
local collectives = [[
local dist = tl.distributed
local r, w = dist.rank(), dist.world_size()
assert(w == tonumber(arg[1]), "world size " .. w)
local device = arg[2] or "cpu"
local n = 7 -- a chunk: not a multiple of anything special
local function value(dtype, rank, i)
  local v = (i * 7 + rank * 5) % 11 - 5
  if dtype == "int64" then return v end
  return v + 0.25 * rank
end
local combine = {
  sum = function(a, b) return a + b end,
  avg = function(a, b) return a + b end,
  product = function(a, b) return a * b end,
  min = math.min,
  max = math.max,
}
local function reduced(dtype, op, i)
  local acc = value(dtype, 0, i)
  for k = 1, w - 1 do acc = combine[op](acc, value(dtype, k, i)) end
  if op == "avg" then acc = acc / w end
  return acc
end
local function tensor(list, dtype)
  if dtype == "int64" then for i, v in ipairs(list) do list[i] = math.tointeger(v) end end
  return tl.tensor(list, { dtype = dtype, device = device })
end
local function check(t, expected, tol, what)
  local got = t:double():cpu():view(-1):totable()
  assert(#got == #expected, what .. ": " .. #got .. " elements, expected " .. #expected)
  for i, v in ipairs(expected) do
    if math.abs(got[i] - v) > tol * math.max(1, math.abs(v)) then
      error(string.format("%s: element %d is %.17g, expected %.17g", what, i, got[i], v))
    end
  end
end
local function wait(work, out)
  assert(work.tensor == out, "the work holds out")
  work:wait()
  local queued, comm = work:timing()
  assert(queued >= comm and comm >= 0, "timings " .. queued .. " " .. comm)
  if device == "cpu" then assert(queued == 0 and comm == 0) end
end

for _, dtype in ipairs({ "float64", "float32", "int64" }) do
  for _, op in ipairs({ "sum", "avg", "max", "min", "product" }) do
    if not (op == "avg" and dtype == "int64") then
      local tol = dtype == "float32" and 1e-6 or ((op == "avg" and device ~= "cpu") and 1e-15 or 0)
      local mine, expected = {}, {}
      for i = 0, w * n - 1 do mine[i + 1] = value(dtype, r, i) end
      for j = 0, n - 1 do expected[j + 1] = reduced(dtype, op, r * n + j) end
      for _, mode in ipairs({ "out of place", "in place", "started" }) do
        local what = string.format("reduce_scatter %s %s %s", dtype, op, mode)
        local t = tensor(mine, dtype):view(w, n) -- any shapes: only the sizes count
        local out = mode == "in place" and t:view(-1):narrow(1, r * n + 1, n)
          or tl.zeros(n, { dtype = dtype, device = device })
        if mode == "started" then
          wait(dist.reduce_scatter_start(out, t, op), out)
        else
          assert(rawequal(dist.reduce_scatter(out, t, op), out), what .. ": returns out")
        end
        check(out, expected, tol, what)
        -- in's other chunks stay as they were
        local left = {}
        for i = 0, w * n - 1 do
          left[i + 1] = (mode == "in place" and i // n == r) and expected[i % n + 1] or mine[i + 1]
        end
        check(t, left, tol, what .. " (in)")
      end
    end
  end
  local expected = {}
  for i = 0, w * n - 1 do expected[i + 1] = value(dtype, i // n, i % n) end
  for _, mode in ipairs({ "out of place", "in place", "started" }) do
    local what = string.format("all_gather %s %s", dtype, mode)
    local mine = {}
    for j = 0, n - 1 do mine[j + 1] = value(dtype, r, j) end
    local out = tl.zeros(w * n, { dtype = dtype, device = device })
    local t = tensor(mine, dtype)
    if mode == "in place" then t = out:narrow(1, r * n + 1, n):copy_(t) end
    if mode == "started" then
      wait(dist.all_gather_start(out, t), out)
    else
      assert(rawequal(dist.all_gather(out, t), out), what .. ": returns out")
    end
    check(out, expected, 0, what)
  end
end
-- empty tensors: nothing to do, on every rank
local empty = tl.zeros(0, { device = device })
assert(rawequal(dist.reduce_scatter(empty, tl.zeros(0, { device = device }), "avg"), empty))
assert(rawequal(dist.all_gather(empty, tl.zeros(0, { device = device })), empty))
dist.all_gather_start(empty, tl.zeros(0, { device = device })):wait()
-- the collectives still line up after them
local sum = dist.reduce_scatter(tl.zeros(1, { dtype = "float64", device = device }),
  tl.ones(w, { dtype = "float64", device = device }) * (r + 1))
check(sum, { w * (w + 1) / 2 }, 0, "after the empty ones")
print(string.format("ok rank %d of %d", r, w))
]]

describe("tl.distributed.reduce_scatter and all_gather over several CPU ranks", function()
  for _, nproc in ipairs({ 2, 3 }) do
    it(nproc .. " ranks: every op and three dtypes, in place and not, started, empty", function()
      local code, out = launch(nproc, script("collectives.lua", collectives), tostring(nproc))
      assert.are.equal(0, code, out)
      for r = 0, nproc - 1 do
        assert.matches(string.format("ok rank %d of %d", r, nproc), out, 1, true)
      end
    end)
  end

  it("a chunk size that differs between ranks is a clear error, and the job ends", function()
    local code, out = launch(2, script("mismatch.lua", [[
      local n = 3 + tl.distributed.rank()
      tl.distributed.reduce_scatter(tl.zeros(n), tl.zeros(2 * n), "sum")
    ]]))
    assert.are_not.equal(0, code)
    assert.matches("reduce_scatter: rank %d sent %d+ bytes but this rank's out holds %d+", out)
    assert.matches("every rank must pass the same shape and dtype", out, 1, true)
    assert.matches("tlua %-%-nproc: rank %d", out)
  end)
end)

describe("tl.distributed.reduce_scatter and all_gather in a world of one", function()
  it("copy in to out (avg divides by 1), in place or not, started or not, empty or not", function()
    local t = tl.tensor({ 1.5, -2, 3 }, { dtype = "float64" })
    for _, op in ipairs({ "sum", "avg", "mean", "product", "min", "max" }) do
      local out = tl.zeros(3, { dtype = "float64" })
      assert.are.equal(out, dist.reduce_scatter(out, t, op))
      assert.tensor_near({ 1.5, -2, 3 }, out, 0, 0)
    end
    assert.are.equal(t, dist.reduce_scatter(t, t, "avg")) -- chunk 0 of a world of one is all of t
    assert.tensor_near({ 1.5, -2, 3 }, t, 0, 0)
    local g = tl.zeros(1, 3, { dtype = "int64" })
    assert.are.equal(g, dist.all_gather(g, tl.tensor({ 4, 5, 6 }, { dtype = "int64" })))
    assert.tensor_near({ { 4, 5, 6 } }, g, 0, 0)
    assert.are.equal(g, dist.all_gather(g, g:view(3)))
    assert.tensor_near({ { 4, 5, 6 } }, g, 0, 0)
    local out = tl.zeros(3, { dtype = "float64" })
    local w = dist.reduce_scatter_start(out, t)
    assert.are.equal(out, w.tensor)
    assert.are.equal(t, w.input)
    w:wait()
    assert.are.same({ 0, 0 }, { w:timing() })
    assert.tensor_near({ 1.5, -2, 3 }, out, 0, 0)
    local flags = tl.zeros(2, { dtype = "bool" })
    dist.all_gather_start(flags, tl.tensor({ true, false })):wait()
    assert.are.same({ true, false }, flags:totable())
    dist.reduce_scatter(flags, tl.tensor({ false, true }), "max")
    assert.are.same({ false, true }, flags:totable())
    local empty = tl.zeros(0)
    assert.are.equal(empty, dist.reduce_scatter(empty, tl.zeros(0, 4), "avg"))
    assert.are.equal(empty, dist.all_gather(empty, tl.zeros(0)))
  end)

  it("give clear errors and leave the tensors as they were", function()
    local function errors(fn, message) assert.error_matches(fn, { message }) end
    local t = tl.tensor({ 1.0, 2.0, 3.0 })
    local out = tl.zeros(3)
    errors(function() dist.reduce_scatter(tl.zeros(2), t) end,
      "reduce_scatter: in has 3 elements, expected 2 (the world size 1 times out's 2)")
    errors(function() dist.all_gather(tl.zeros(4), t) end,
      "all_gather: out has 4 elements, expected 3 (the world size 1 times in's 3)")
    errors(function() dist.reduce_scatter(out:double(), t) end,
      "reduce_scatter: out has dtype float64, expected in's dtype float32")
    errors(function() dist.all_gather_start(out, t:long()) end,
      "all_gather: out has dtype float32, expected in's dtype int64")
    errors(function() dist.all_gather(tl.zeros(3, 2):t(), tl.zeros(6)) end,
      "all_gather: expected a contiguous out (pass a contiguous tensor and copy it where it belongs)")
    errors(function() dist.reduce_scatter(tl.zeros(6), tl.zeros(3, 2):t()) end,
      "reduce_scatter: expected a contiguous in (pass a contiguous tensor and copy it where it belongs)")
    local buffer = tl.arange(0, 8):float()
    errors(function() dist.reduce_scatter(buffer:narrow(1, 2, 3), buffer:narrow(1, 1, 3)) end,
      "reduce_scatter: out overlaps in but is not in's chunk of this rank (rank 0: its elements 0 to 2, " ..
      "counted from 0); in place, out must be exactly that chunk")
    errors(function() dist.all_gather_start(buffer:narrow(1, 1, 3), buffer:narrow(1, 3, 3)) end,
      "all_gather: in overlaps out but is not out's chunk of this rank (rank 0: its elements 0 to 2, " ..
      "counted from 0); in place, in must be exactly that chunk")
    assert.tensor_near({ 0, 1, 2, 3, 4, 5, 6, 7 }, buffer, 0, 0)
    errors(function() dist.reduce_scatter(out, t, "median") end,
      'reduce_scatter: op expected "sum", "avg", "product", "min" or "max", got "median"')
    errors(function() dist.reduce_scatter_start(out, t, "median") end,
      'reduce_scatter: op expected "sum", "avg", "product", "min" or "max", got "median"')
    local ids = tl.tensor({ 1, 2 }, { dtype = "int64" })
    errors(function() dist.reduce_scatter(tl.zeros(2, { dtype = "int64" }), ids, "avg") end,
      'reduce_scatter: op "avg" needs a floating dtype, got int64 (use "sum")')
    errors(function() dist.reduce_scatter(tl.zeros(1, { dtype = "bool" }), tl.tensor({ true }), "sum") end,
      'reduce_scatter: op "sum" does not take bool tensors (use "min" for all, "max" for any)')
    errors(function() dist.reduce_scatter(3, t) end, "tl.distributed.reduce_scatter: expected a tensor as out, got number")
    errors(function() dist.reduce_scatter(out, {}) end, "tl.distributed.reduce_scatter: expected a tensor as t, got table")
    errors(function() dist.all_gather(nil, t) end, "tl.distributed.all_gather: expected a tensor as out, got nil")
    errors(function() dist.all_gather_start(out) end, "tl.distributed.all_gather_start: expected a tensor as t, got nil")
    errors(function() dist.reduce_scatter_start(out, "t") end,
      "tl.distributed.reduce_scatter_start: expected a tensor as t, got string")
    assert.tensor_near({ 0, 0, 0 }, out, 0, 0)
    assert.tensor_near({ 1, 2, 3 }, t, 0, 0)
  end)
end)

-- ---- CUDA: NCCL ---------------------------------------------------------------------------------
describe("tl.distributed.reduce_scatter and all_gather on GPUs #cuda", function()
  local gpus = tl.cuda.device_count()
  if gpus == 0 or not dist.nccl_available() then
    pending("no CUDA device or no NCCL: the NCCL specs of reduce_scatter and all_gather did not run")
    return
  end

  it("go through NCCL in a world of one: copies, in place, started, device errors", function()
    for _, dtype in ipairs({ "float32", "float64", "bfloat16", "float16", "int32", "int64" }) do
      local t = tl.tensor({ 1, -2, 3, 4 }, { dtype = dtype, device = "cuda" })
      for _, op in ipairs({ "sum", "product", "min", "max" }) do
        local out = tl.zeros(4, { dtype = dtype, device = "cuda" })
        assert.are.equal(out, dist.reduce_scatter(out, t, op))
        assert.tensor_near({ 1, -2, 3, 4 }, out:double():cpu(), 0, 0)
      end
      local g = tl.zeros(2, 2, { dtype = dtype, device = "cuda" })
      dist.all_gather(g, t)
      assert.tensor_near({ { 1, -2 }, { 3, 4 } }, g:double():cpu(), 0, 0)
    end
    local f = tl.tensor({ 0.5, 2, -1 }, { device = "cuda" })
    dist.reduce_scatter(f, f, "avg")
    assert.tensor_near({ 0.5, 2, -1 }, f:cpu(), 0, 0)
    local out = tl.zeros(3, { device = "cuda" })
    local w = dist.reduce_scatter_start(out, f, "sum")
    w:wait()
    local queued, comm = w:timing()
    assert.is_true(queued >= comm and comm >= 0)
    assert.tensor_near({ 0.5, 2, -1 }, out:cpu(), 0, 0)
    local g = tl.zeros(3, { device = "cuda" })
    dist.all_gather_start(g, f):wait()
    assert.tensor_near({ 0.5, 2, -1 }, g:cpu(), 0, 0)
    assert.error_matches(function() dist.reduce_scatter(tl.zeros(3), f) end,
      { "reduce_scatter: out is on cpu, expected in's device cuda:" })
    assert.error_matches(function() dist.all_gather(g, tl.zeros(3)) end,
      { "all_gather: out is on cuda:", "expected in's device cpu" })
  end)

  if gpus == 1 then
    pending("one GPU: reduce_scatter and all_gather across ranks did not run (NCCL needs a GPU per rank)")
    return
  end
  it("2 ranks: every op and three dtypes, in place and not, started, empty, through NCCL", function()
    local code, out = launch(2, script("collectives.lua", collectives), "2 cuda")
    assert.are.equal(0, code, out)
    assert.matches("ok rank 0 of 2", out, 1, true)
    assert.matches("ok rank 1 of 2", out, 1, true)
  end)
end)
