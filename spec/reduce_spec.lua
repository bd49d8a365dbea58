-- The value reductions of the op table (REDUCE_OP rows, family "fold": sum, mean, ...): every
-- dtype with a kernel, over one dim, several and all, with keepdim and the op's number, against
-- the Lua folds of helpers/reduce_cases.lua applied to the stored input values; bad input is a
-- clear error naming the op. On a GPU machine the same comparisons run on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local R = require("helpers.reduce_cases")

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local tolerance = { float64 = 1e-12, float32 = 1e-5, bfloat16 = 2e-2, float16 = 2e-3 }
local SHAPE = { 2, 3, 4 }
local DIMS = { {}, { 1 }, { -1 }, { 2 }, { 1, 3 }, { 3, 1 }, { 2, 3 }, { 1, 2, 3 } }

local function folds()
  local list = {}
  for _, op in ipairs(tl.ops()) do
    if op.family == "fold" then list[#list + 1] = op.name end
  end
  return list
end

local function dtypes_of(name, device)
  local list = {}
  for _, k in ipairs(tl.kernels()) do
    if k.op == name and k.device == device then list[#list + 1] = k.dtype end
  end
  return list
end

-- inputs in dtype d: floating values from the case's range, small integers (ties), booleans
local function make_input(case, d, rng)
  return tl.tensor(ref.build(SHAPE, function()
    if floating[d] then return rng:uniform(case.lo, case.hi) end
    if d == "bool" then return rng:int(0, 1) == 1 end
    return rng:int(-4, 4)
  end), { dtype = d })
end

local function check(name, case, d, device, x, dims, keepdim, number)
  local what = string.format("%s of %s over {%s} keepdim %s%s on %s", name, d,
    table.concat(dims, ","), tostring(keepdim), number and (" " .. case.number .. " " .. number) or "", device)
  local reduced = {}
  for _, dim in ipairs(dims) do reduced[dim < 0 and #SHAPE + 1 + dim or dim] = true end
  local expected = R.reduce(x:totable(), SHAPE, reduced, keepdim,
    function(v) return case.fold(v, #v, number or case.default) end)
  local arg = #dims == 1 and dims[1] or (#dims > 0 and dims or nil)
  local last = keepdim
  if number then last = { keepdim = keepdim, [case.number] = number } end
  local got = R.call(x:to(device), name, arg, last):to("cpu")
  if floating[got.dtype] then
    assert.tensor_near(expected, got, tolerance[got.dtype], tolerance[got.dtype], what)
  else
    if got.dtype == "bool" then -- the Lua folds give 1 and 0
      expected = type(expected) == "number" and expected ~= 0 or ref.map(expected, function(v) return v ~= 0 end)
    end
    assert.tensor_equal(expected, got, what)
  end
end

local function compare_all(device)
  for _, name in ipairs(folds()) do
    local case = R.cases[name]
    for _, d in ipairs(dtypes_of(name, device:match("^%a+"))) do
      it(string.format("%s in %s over one dim, several and all, with keepdim, matches the Lua fold", name, d),
        function()
          assert.is_not_nil(case, "no case for " .. name .. " in spec/helpers/reduce_cases.lua")
          local x = make_input(case, d, ref.rng(#name * 7919 + #d))
          for _, dims in ipairs(DIMS) do
            for _, keepdim in ipairs({ false, true }) do
              check(name, case, d, device, x, dims, keepdim)
              for _, number in ipairs(case.number and (case.others or { case.other }) or {}) do
                check(name, case, d, device, x, dims, keepdim, number)
              end
            end
          end
        end)
    end
  end
end

describe("value reductions on the cpu", function()
  compare_all("cpu")

  it("every REDUCE_OP row has a case and its Lua form", function()
    for _, name in ipairs(folds()) do
      assert.is_not_nil(R.cases[name], "no case for " .. name .. " in spec/helpers/reduce_cases.lua")
      assert.are.equal("function", type(tl[name]), "tl." .. name)
      assert.are.equal("function", type(tl.zeros(1)[name]), "x:" .. name)
    end
  end)

  it("reject bad dims, options and dtypes, naming the op", function()
    local x = tl.zeros(2, 3)
    for _, name in ipairs(folds()) do
      local function fails(pattern, ...)
        local args = table.pack(...)
        local ok, err = pcall(function() return R.call(x, name, table.unpack(args, 1, args.n)) end)
        assert.is_false(ok, name .. " should fail")
        assert.matches(name .. ": " .. pattern, err, 1, false)
      end
      fails("dim 0 is out of range", 0)
      fails("dim 3 is out of range", 3)
      fails("dim 1 is given twice", { 1, -2 })
      fails("expected a dim or a non%-empty table of dims, got {}", {})
      fails("unknown option 'keep_dim'", 1, { keep_dim = true })
      fails("expected at most %d arguments", 1, true, 2)
      if #dtypes_of(name, "cpu") == 4 then -- a FLOATING row refuses integers
        local i = tl.zeros({ 2 }, { dtype = "int32" })
        local ok, err = pcall(function() return i[name](i) end)
        assert.is_false(ok)
        assert.matches(name .. ": expected a floating dtype, got int32", err, 1, true)
      end
    end
  end)

  it("an empty dim folds to the op's value of no element, or is an error where there is none", function()
    local x = tl.zeros({ 0, 3 })
    for _, name in ipairs(folds()) do
      local case = R.cases[name]
      local expected = case.fold({}, 0, case.default)
      if expected == nil then -- no value for no element (amax): an error, as torch
        for _, call in ipairs({ function() return R.call(x, name, 1) end, function() return R.call(x, name, { 1, 2 }) end,
          function() return R.call(x, name) end }) do
          local ok, err = pcall(call)
          assert.is_false(ok, name)
          assert.matches(name .. ": cannot reduce", err, 1, true)
        end
      else
        local got = R.call(x, name, 1)
        assert.are.same({ 3 }, got.shape)
        local values = got:totable()
        if got.dtype == "bool" then expected = expected ~= 0 end
        for j = 1, 3 do
          local v = values[j]
          if expected ~= expected then assert.is_true(v ~= v, name) else assert.are.equal(expected, v, name) end
        end
      end
    end
  end)
end)

describe("prod, norm, std_mean and var_mean beyond the generic cases", function()
  local gradcheck = tl.autograd.gradcheck
  local function f64(t) return tl.tensor(t, { dtype = "float64" }) end

  it("prod's gradient with zeros in a line: the product of the others (finite differences)", function()
    -- a line without zero, one with one zero, one with two
    local x = f64({ { 1.5, -2, 0.5 }, { 0, 3, -1.25 }, { 0, 2, 0 } }):requires_grad_()
    assert.is_true(gradcheck(function(t) return t:prod(2) end, { x }))
    assert.is_true(gradcheck(function(t) return t:prod() end, { f64({ 2, 0, 3 }):requires_grad_() }))
    x:prod(2):sum():backward()
    assert.tensor_near({ { -1, 0.75, -3 }, { -3.75, 0, 0 }, { 0, 0, 0 } }, x.grad, 1e-12, 0)
  end)

  it("norm's gradients match torch's golden values (ties of inf split, zeros get none)", function()
    -- golden values from PyTorch 1.13: x = torch.tensor(v, requires_grad=True); x.norm(p).backward(); x.grad
    local goldens = {
      { p = math.huge, x = { 4, 3, -4 }, grad = { 0.5, 0, -0.5 } },
      { p = math.huge, x = { 0, 3, -4 }, grad = { 0, 0, -1 } },
      { p = 0.5, x = { 0, 3, -4 }, grad = { 0, 2.1547005383792515, -1.8660254037844386 } },
      { p = -1, x = { 0, 3, 0 }, grad = { 0, 0, 0 } },
      { p = 2, x = { 0, 0, 0 }, grad = { 0, 0, 0 } },
      { p = 3, x = { 0, 0, 0 }, grad = { 0, 0, 0 } },
      { p = 1, x = { 0, 2, 0 }, grad = { 0, 1, 0 } },
    }
    for _, case in ipairs(goldens) do
      local x = f64(case.x):requires_grad_()
      x:norm(case.p):backward()
      assert.tensor_near(case.grad, x.grad, 1e-7, 0, "norm p = " .. case.p)
    end
    assert.tensor_near({ 5, 7, 2, 4, 0, 4.497941445275415 },
      { tl.norm(f64({ 0, 3, -4 })):item(), f64({ 0, 3, -4 }):norm(1):item(), f64({ 0, 3, -4 }):norm(0):item(),
        f64({ 0, 3, -4 }):norm(math.huge):item(), f64({ 0, 3, -4 }):norm(-math.huge):item(),
        f64({ 0, 3, -4 }):norm(3):item() }, 1e-12, 0)
    -- p first, then dims and keepdim (or options); "fro" is 2
    local m = f64({ { 3, 4 }, { 6, 8 } })
    assert.tensor_near({ { 5 }, { 10 } }, m:norm(2, 2, true), 1e-12, 0)
    assert.tensor_near({ 5, 10 }, m:norm("fro", -1), 1e-12, 0)
    assert.tensor_near({ 9, 12 }, m:norm(1, 1), 1e-12, 0)
    assert.tensor_near({ { 5 }, { 10 } }, m:norm(nil, 2, { keepdim = true }), 1e-12, 0)
    local ok, err = pcall(function() return m:norm("nuc") end)
    assert.is_false(ok)
    assert.matches('norm: p expected a number or "fro", got "nuc"', err, 1, true)
  end)

  it("std_mean and var_mean give the statistic and the mean over the same dims", function()
    local rng = ref.rng(5)
    local x = tl.tensor(ref.build(SHAPE, function() return rng:uniform(-3, 3) end), { dtype = "float64" })
    local stored = x:totable()
    for _, pair in ipairs({ { "std_mean", "std" }, { "var_mean", "var" } }) do
      local name, stat = pair[1], pair[2]
      for _, correction in ipairs({ 1, 0 }) do
        local s, m = x[name](x, { 1, 3 }, { keepdim = true, correction = correction })
        local reduced = { [1] = true, [3] = true }
        local es = R.reduce(stored, SHAPE, reduced, true, function(v) return R.cases[stat].fold(v, #v, correction) end)
        local em = R.reduce(stored, SHAPE, reduced, true, function(v) return R.cases.mean.fold(v, #v) end)
        assert.tensor_near(es, s, 1e-12, 1e-12, name)
        assert.tensor_near(em, m, 1e-12, 1e-12, name .. "'s mean")
      end
      local s, m = tl[name](x)
      assert.tensor_near(R.cases[stat].fold(ref.flatten(stored), 24, 1), s, 1e-12, 1e-12)
      assert.are.same({}, m.shape)
      local ok, err = pcall(function() return x[name](x, 1, { keep_dim = true }) end)
      assert.is_false(ok)
      assert.matches(name .. ": unknown option 'keep_dim'", err, 1, true)
    end
    assert.is_true(gradcheck(function(t) local s, m = t:std_mean(2) return s + m end,
      { tl.randn(3, 4):double():requires_grad_() }))
  end)
end)

describe("value reductions on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of the value reductions did not run")
    return
  end
  compare_all("cuda")
end)
