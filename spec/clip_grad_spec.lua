-- Fused gradient-norm clipping (tl._clip_grad_norm_multi, optim.clip_grad_norm): against float64 Lua and PyTorch (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local optim = tl.optim

local ROUND = { float32 = ref.round_f32, float64 = function(x) return x end, bfloat16 = ref.round_bf16,
  float16 = ref.round_f16 }
-- {rtol, atol} of a scaled gradient against the float64 reference (the coefficient is rounded to
-- the grad's dtype first for bfloat16/float16, as torch's mul_ does)
local TOL = { float32 = { 1e-6, 1e-7 }, float64 = { 1e-13, 1e-15 }, bfloat16 = { 1e-2, 1e-3 },
  float16 = { 2e-3, 1e-4 } }

-- n values of N(0, scale) exact in dtype
local function values(rng, n, dtype, scale)
  local out = {}
  for i = 1, n do out[i] = ROUND[dtype]((scale or 1) * rng:normal()) end
  return out
end

local function flat(t) return ref.flatten(t:to("cpu"):double():totable()) end

local function count_kernels(events, op)
  local n = 0
  for _, e in ipairs(events) do if e.op == op then n = n + 1 end end
  return n
end

-- the float64 reference of torch.nn.utils.clip_grad_norm_ over lists of values: total, coefficient
local function reference(lists, max_norm, p)
  local acc = 0
  for _, list in ipairs(lists) do
    for _, x in ipairs(list) do
      if p == math.huge then
        acc = math.max(acc, math.abs(x))
      else
        acc = acc + math.abs(x) ^ p
      end
    end
  end
  local total = p == math.huge and acc or acc ^ (1 / p)
  return total, max_norm / (total + 1e-6)
end

-- grads of the given dtypes and sizes (values of N(0, 0.5) exact in each dtype), on device
local function make_grads(seed, dtypes, sizes, device)
  local rng, lists, grads = ref.rng(seed), {}, {}
  for i, n in ipairs(sizes) do
    local dtype = dtypes[(i - 1) % #dtypes + 1]
    lists[i] = values(rng, n, dtype, 0.5)
    grads[i] = n == 0 and tl.zeros(0, { dtype = dtype, device = device or "cpu" })
        or tl.tensor(lists[i], { dtype = dtype, device = device or "cpu" })
    if i % 3 == 0 and n % 2 == 0 then grads[i] = grads[i]:view(2, n // 2) end
  end
  return grads, lists
end

-- The coefficient torch makes from a total (a value of its dtype): max_norm * (1 / (total + 1e-6))
-- in that dtype (float32 rounding after each operation: double rounding is innocuous for them).
local function coef_of(total)
  local max_norm, value = total.max_norm, total.value
  if total.dtype == "float64" then return max_norm * (1 / (value + 1e-6)) end
  local f = ref.round_f32
  return f(f(max_norm) * f(1 / f(value + f(1e-6))))
end

-- Every grad's values against the reference: when coef < 1, x * coef with coef rounded to the
-- grad's dtype and the product rounded once (x * coef is exact in float64, and in float32 for
-- bfloat16/float16 values: what the kernels compute); else bit-identical to the values before.
local function check_grads(grads, lists, coef, what)
  for i, g in ipairs(grads) do
    local got = flat(g)
    local round = ROUND[g.dtype]
    local c = round(coef)
    for j, x in ipairs(lists[i]) do
      local expected = coef >= 1 and x or round(x * c)
      if got[j] ~= expected then
        assert.are.equal(expected, got[j], ("%s: grad %d (%s) element %d"):format(what, i, g.dtype, j))
      end
    end
  end
end

-- the op's total as coef_of takes it
local function total_of(t, max_norm) return { value = t:item(), dtype = t.dtype, max_norm = max_norm } end

local NORMS = { { "2", 2 }, { "1", 1 }, { "3", 3 }, { "inf", math.huge } }

-- 150 sizes: odd ones, under a vector, empty, several chunks (16384 elements) every 50th
local function many_sizes(rng)
  local sizes = {}
  for i = 1, 150 do
    sizes[i] = i % 50 == 0 and rng:int(40000, 70001) or i % 7 == 0 and rng:int(0, 3) or rng:int(1, 3000)
  end
  return sizes
end

-- the checks of the specs below, on a device
local function value_specs(device)
  for _, norm in ipairs(NORMS) do
    for _, clipped in ipairs({ true, false }) do
      it(("norm %s: total and %s against float64 Lua (mixed dtypes, empty grads)"):format(norm[1],
        clipped and "scaled grads" or "untouched grads"), function()
        local dtypes = { "float32", "float64", "bfloat16", "float16" }
        local grads, lists = make_grads(17 + #norm[1], dtypes, { 7, 33, 0, 12, 1, 181 * 23, 5, 0, 4 }, device)
        local total_ref = reference(lists, 1, norm[2])
        local max_norm = clipped and 0.5 * total_ref or 2 * total_ref
        local total = tl._clip_grad_norm_multi(grads, max_norm, norm[2])
        local coef = coef_of(total_of(total, max_norm))
        assert.are.equal("float32", total.dtype)
        assert.are.equal(device, total.device)
        assert.are.equal(0, total:dim())
        assert.is_true(math.abs(total:item() - total_ref) <= 2e-6 * total_ref, "total " .. total:item())
        check_grads(grads, lists, coef, "norm " .. norm[1])
      end)
    end
  end

  it("float64 grads give a float64 total, to float64 accuracy", function()
    for _, norm in ipairs(NORMS) do
      local grads, lists = make_grads(5, { "float64" }, { 5, 0, 3000, 17 }, device)
      local total_ref, _ = reference(lists, 1, norm[2])
      local total = tl._clip_grad_norm_multi(grads, 0.25 * total_ref, norm[2])
      local coef = coef_of(total_of(total, 0.25 * total_ref))
      assert.are.equal("float64", total.dtype)
      assert.is_true(math.abs(total:item() - total_ref) <= 1e-13 * total_ref, "norm " .. norm[1])
      check_grads(grads, lists, coef, "float64 norm " .. norm[1])
    end
  end)

  it("150 grads of odd sizes (several chunks, empty ones): one kernel, the float64 reference", function()
    local sizes = many_sizes(ref.rng(3))
    for _, norm in ipairs({ NORMS[1], NORMS[4] }) do
      local grads, lists = make_grads(11, { "float32", "bfloat16" }, sizes, device)
      local total_ref = reference(lists, 1, norm[2])
      local total
      local events = tl.trace(function() total = tl._clip_grad_norm_multi(grads, 0.3 * total_ref, norm[2]) end)
      local coef = coef_of(total_of(total, 0.3 * total_ref))
      assert.are.equal(1, count_kernels(events, "clip_grad_norm_multi"))
      assert.are.equal(1, #events)
      assert.is_true(math.abs(total:item() - total_ref) <= 2e-6 * total_ref, "total " .. total:item())
      check_grads(grads, lists, coef, "150 grads, norm " .. norm[1])
    end
  end)

  it("empty grads only give 0 and change nothing; an empty list a CPU float32 0", function()
    local grads = { tl.zeros(0, { device = device }), tl.zeros(3, 0, { dtype = "bfloat16", device = device }) }
    local total = tl._clip_grad_norm_multi(grads, 1.0)
    assert.are.equal(0, total:item())
    assert.are.equal(device, total.device)
    local none = tl._clip_grad_norm_multi({}, 1.0)
    assert.are.same({ 0, "float32", "cpu", 0 }, { none:item(), none.dtype, none.device, none:dim() })
    assert.are.equal(0, #tl.trace(function() tl._clip_grad_norm_multi({}, 1.0) end))
  end)

  -- Golden values from PyTorch 1.13 (float32 grads; float64 for "f64"), made by
  --   /usr/bin/python3 -c '
  --   import torch; from torch.nn.utils import clip_grad_norm_
  --   inf, nan = float("inf"), float("nan")
  --   def run(gs, mx, p, dtype=torch.float32):
  --       ps = []
  --       for g in gs:
  --           t = torch.zeros(len(g), dtype=dtype); t.grad = torch.tensor(g, dtype=dtype); ps.append(t)
  --       print(repr(clip_grad_norm_(ps, mx, p).item()), [[repr(v) for v in x.grad.tolist()] for x in ps])
  --   run([[3.0, -4.0], [1.0, 2.0, -2.0]], 1.0, 2)   # and with p = 1, 3, "inf"; float64; the rows below'
  -- The coefficient is max_norm * (1 / (total + 1e-6)) in the total's dtype (Tensor.__rtruediv__ is
  -- reciprocal() * other), clamped to at most 1 (a NaN stays NaN) and multiplied in: an infinite total
  -- zeroes the grads (NaN where a grad is infinite), a NaN total makes them NaN, float32 squares that
  -- overflow give an infinite total.
  local nan, inf = 0 / 0, math.huge
  local GOLDEN = {
    { "l2", { { 3, -4 }, { 1, 2, -2 } }, 1.0, 2, 5.830951690673828,
      { { 0.5144957304000854, -0.6859942674636841 }, { 0.17149856686592102, 0.34299713373184204, -0.34299713373184204 } } },
    { "l1", { { 3, -4 }, { 1, 2, -2 } }, 1.0, 1, 12.0,
      { { 0.2499999850988388, -0.3333333134651184 }, { 0.0833333283662796, 0.1666666567325592, -0.1666666567325592 } } },
    { "l3", { { 3, -4 }, { 1, 2, -2 } }, 1.0, 3, 4.762203216552734,
      { { 0.6299603581428528, -0.8399471640586853 }, { 0.20998679101467133, 0.41997358202934265, -0.41997358202934265 } },
      1e-6 },
    { "linf", { { 3, -4 }, { 1, 2, -2 } }, 1.0, inf, 4.0,
      { { 0.7499998211860657, -0.9999997615814209 }, { 0.24999994039535522, 0.49999988079071045, -0.49999988079071045 } } },
    { "f64", { { 3, -4 }, { 1, 2, -2 } }, 1.0, 2, 5.830951894845301,
      { { 0.5144956671922475, -0.6859942229229966 }, { 0.17149855573074915, 0.3429971114614983, -0.3429971114614983 } },
      nil, "float64" },
    { "inf total, norm 2", { { 1, inf }, { 2 } }, 1.0, 2, inf, { { 0, nan }, { 0 } } },
    { "inf total, norm inf", { { 1, -inf }, { 2 } }, 1.0, inf, inf, { { 0, nan }, { 0 } } },
    { "nan total, norm 2", { { 1, nan }, { 2 } }, 1.0, 2, nan, { { nan, nan }, { nan } } },
    { "nan total, norm inf", { { 1, nan }, { 2 } }, 1.0, inf, nan, { { nan, nan }, { nan } } },
    { "float32 squares overflow", { { 1e20, 1e20 }, { 1 } }, 1.0, 2, inf, { { 0, 0 }, { 0 } } },
    { "max_norm inf", { { 3, -4 } }, inf, 2, 5.0, { { 3, -4 } } },
  }
  local function same(expected, got, rtol)
    if expected ~= expected then return got ~= got end
    if rtol and expected ~= 0 and expected == expected and math.abs(expected) ~= inf then
      return math.abs(got - expected) <= rtol * math.abs(expected)
    end
    return got == expected
  end
  for _, case in ipairs(GOLDEN) do
    it("as torch.nn.utils.clip_grad_norm_: " .. case[1], function()
      local dtype = case[8] or "float32"
      local grads = {}
      for i, list in ipairs(case[2]) do grads[i] = tl.tensor(list, { dtype = dtype, device = device }) end
      local total = tl._clip_grad_norm_multi(grads, case[3], case[4])
      assert.are.equal(dtype, total.dtype)
      assert.is_true(same(case[5], total:item(), case[7]), ("%s: total %s, torch %s"):format(case[1], total:item(), case[5]))
      for i, g in ipairs(grads) do
        local got = flat(g)
        for j, v in ipairs(case[6][i]) do
          assert.is_true(same(v, got[j], case[7]), ("%s: grad %d [%d] = %s, torch %s"):format(case[1], i, j, got[j], v))
        end
      end
    end)
  end

  it("optim.clip_grad_norm: one kernel for every grad, a tensor total; foreach = false agrees", function()
    local sizes = { 13, 400, 0, 3, 2000 }
    local ps, qs = {}, {}
    local grads = make_grads(23, { "float32", "bfloat16" }, sizes, device)
    local again = make_grads(23, { "float32", "bfloat16" }, sizes, device)
    for i, g in ipairs(grads) do
      ps[i] = tl.zeros(g.shape, { dtype = g.dtype, device = device }):requires_grad_()
      qs[i] = tl.zeros(g.shape, { dtype = g.dtype, device = device }):requires_grad_()
      ps[i].grad, qs[i].grad = g, again[i]
    end
    ps[#ps + 1] = tl.zeros(3, { device = device }):requires_grad_() -- no grad: skipped
    local total
    local events = tl.trace(function() total = optim.clip_grad_norm(ps, 0.5) end)
    assert.are.equal(1, #events)
    assert.are.equal("clip_grad_norm_multi", events[1].op)
    local old = optim.clip_grad_norm(qs, 0.5, 2, { foreach = false })
    assert.are.same({ "float32", device, 0 }, { old.dtype, old.device, old:dim() })
    assert.is_true(math.abs(total:item() - old:item()) <= 1e-6 * old:item())
    for i = 1, #sizes do
      local tol = TOL[ps[i].grad.dtype]
      assert.tensor_near(qs[i].grad:to("cpu"):double(), ps[i].grad:to("cpu"):double(), tol[1], tol[2], "grad " .. i)
    end
  end)
end

describe("tl._clip_grad_norm_multi on the CPU", function()
  value_specs("cpu")

  it("optim.clip_grad_norm takes a strided grad through the per-grad path", function()
    local p, q = tl.zeros(4, 3):requires_grad_(), tl.zeros(3, 4):requires_grad_()
    local g = tl.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }, { dtype = "float32" })
    p.grad, q.grad = g:transpose(1, 2), g:clone()
    local a = optim.clip_grad_norm({ p }, 1.0)
    local b = optim.clip_grad_norm({ q }, 1.0)
    assert.is_true(math.abs(a:item() - b:item()) <= 1e-6 * b:item())
    assert.tensor_near(q.grad:transpose(1, 2), p.grad, 1e-6, 1e-7)
    local none = optim.clip_grad_norm({ tl.zeros(2):requires_grad_() }, 1)
    assert.are.equal(0, none:item())
    local r = tl.zeros(2):requires_grad_()
    r.grad = tl.tensor({ 3.0, -4.0 })
    assert.are.equal(5, optim.clip_grad_norm({ r, r }, 10):item()) -- a parameter listed twice counts once
  end)

  it("checks every argument before writing anything", function()
    local a, b = tl.tensor({ 3.0, -4.0 }), tl.tensor({ 1.0, 2.0, -2.0 })
    local before = { a:totable(), b:totable() }
    local m = tl.zeros(4, 3)
    local cases = {
      { function() tl._clip_grad_norm_multi({ a, tl.tensor({ 1, 2 }, { dtype = "int32" }) }, 1.0) end,
        { "clip_grad_norm_multi", "grad 2", "floating", "int32" } },
      { function() tl._clip_grad_norm_multi({ a, m:transpose(1, 2) }, 1.0) end, { "grad 2", "contiguous" } },
      { function() tl._clip_grad_norm_multi({ a, b }, 0) end, { "max_norm", "> 0", "got 0" } },
      { function() tl._clip_grad_norm_multi({ a, b }, -1) end, { "max_norm", "> 0", "got -1" } },
      { function() tl._clip_grad_norm_multi({ a, b }, 0 / 0) end, { "max_norm", "> 0", "got nan" } },
      { function() tl._clip_grad_norm_multi({ a, b }, 1, 0.5) end, { "norm_type", ">= 1", "got 0.5" } },
      { function() tl._clip_grad_norm_multi({ a, b }, 1, 0 / 0) end, { "norm_type", ">= 1", "got nan" } },
      { function() tl._clip_grad_norm_multi({ a, b, a }, 1) end, { "grads 1 and 3 share memory" } },
      { function() tl._clip_grad_norm_multi({ a, b, m[1], m:view(12):narrow(1, 2, 4) }, 1) end,
        { "grads 3 and 4 share memory" } },
      { function() tl._clip_grad_norm_multi({ a, 3 }, 1) end, { "_clip_grad_norm_multi", "grads[2]", "expected a tensor" } },
      { function() tl._clip_grad_norm_multi(a, 1) end, { "_clip_grad_norm_multi", "a table of tensors" } },
      { function() tl._clip_grad_norm_multi({ a }, "x") end, { "_clip_grad_norm_multi", "max_norm", "number" } },
      { function() tl._clip_grad_norm_multi({ a }, 1, "x") end, { "_clip_grad_norm_multi", "norm_type", "number" } },
      { function() optim.clip_grad_norm({ a }, 0) end, { "clip_grad_norm", "max_norm", "> 0" } },
      { function() optim.clip_grad_norm({ a }, 1, 0.5) end, { "clip_grad_norm", "norm_type", ">= 1" } },
      { function() optim.clip_grad_norm({ a }, 1, 2, 5) end, { "clip_grad_norm", "opts", "table" } },
      { function() optim.clip_grad_norm({ a }, 1, 2, { foreach = 1 }) end, { "clip_grad_norm", "foreach", "boolean" } },
      { function() optim.clip_grad_norm(3, 1) end, { "clip_grad_norm", "argument 1" } },
    }
    for k, case in ipairs(cases) do
      assert.error_matches(case[1], case[2])
      assert.are.same(before, { a:totable(), b:totable() }, "case " .. k)
    end
  end)

  it("is deterministic: the same grads give the same bits", function()
    local sizes = many_sizes(ref.rng(9))
    local totals = {}
    for k = 1, 2 do
      local grads = make_grads(31, { "float32" }, sizes)
      totals[k] = tl._clip_grad_norm_multi(grads, 1e9):item()
    end
    assert.are.equal(totals[1], totals[2])
  end)
end)

-- ---- CUDA -------------------------------------------------------------------------------------------
describe("tl._clip_grad_norm_multi on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of clip_grad_norm_multi did not run")
    return
  end

  value_specs("cuda:0")

  it("agrees with the CPU op (totals and scaled grads) for every norm and dtype", function()
    local sizes = many_sizes(ref.rng(4))
    for _, norm in ipairs(NORMS) do
      for _, dtypes in ipairs({ { "float32" }, { "float64" }, { "bfloat16" }, { "float16" },
        { "float32", "float64", "bfloat16", "float16" } }) do
        local what = ("norm %s, %s"):format(norm[1], table.concat(dtypes, "+"))
        local cpu = make_grads(41, dtypes, sizes)
        local gpu = make_grads(41, dtypes, sizes, "cuda")
        local a = tl._clip_grad_norm_multi(cpu, 0.5, norm[2])
        local b = tl._clip_grad_norm_multi(gpu, 0.5, norm[2])
        assert.are.equal(a.dtype, b.dtype, what)
        local rtol = a.dtype == "float64" and 1e-14 or 1e-6
        assert.is_true(math.abs(a:item() - b:item()) <= rtol * a:item(), what .. ": total")
        for i = 1, #sizes do
          local tol = cpu[i].dtype == "float64" and 1e-14 or cpu[i].dtype == "float32" and 1e-6 or 1e-2
          assert.tensor_near(cpu[i]:double(), gpu[i]:to("cpu"):double(), tol, 1e-7, what .. ": grad " .. i)
        end
      end
    end
  end)

  it("gives the same bits on every run, and leaves the total on the device", function()
    local sizes = many_sizes(ref.rng(8))
    local totals = {}
    for k = 1, 3 do
      local grads = make_grads(32, { "float32", "bfloat16" }, sizes, "cuda")
      local t = tl._clip_grad_norm_multi(grads, 1e9)
      assert.are.equal("cuda:0", t.device)
      totals[k] = t:item()
    end
    assert.are.same({ totals[1], totals[1] }, { totals[2], totals[3] })
  end)

  it("refuses grads on two devices before writing anything", function()
    local a, b = tl.tensor({ 3.0, -4.0 }), tl.tensor({ 1.0, 2.0 }, { device = "cuda" })
    assert.error_matches(function() tl._clip_grad_norm_multi({ a, b }, 0.1) end,
      { "clip_grad_norm_multi", "grad 2 is on cuda:0", "grad 1 is on cpu" })
    assert.are.same({ 3, -4 }, a:totable())
    assert.are.same({ 1, 2 }, b:to("cpu"):totable())
  end)
end)
