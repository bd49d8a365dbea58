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
  local got = x:to(device)[name](x:to(device), arg, last):to("cpu")
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
              if case.number then check(name, case, d, device, x, dims, keepdim, case.other) end
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
        local ok, err = pcall(function() return x[name](x, table.unpack(args, 1, args.n)) end)
        assert.is_false(ok, name .. " should fail")
        assert.matches(name .. ": " .. pattern, err, 1, false)
      end
      fails("dim 0 is out of range", 0)
      fails("dim 3 is out of range", 3)
      fails("dim 1 is given twice", { 1, -2 })
      fails("expected a dim or a non%-empty table of dims, got {}", {})
      fails("unknown option 'keep_dim'", 1, { keep_dim = true })
      fails("expected at most 3 arguments", 1, true, 2)
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
        for _, call in ipairs({ function() return x[name](x, 1) end, function() return x[name](x, { 1, 2 }) end,
          function() return x[name](x) end }) do
          local ok, err = pcall(call)
          assert.is_false(ok, name)
          assert.matches(name .. ": cannot reduce", err, 1, true)
        end
      else
        local got = x[name](x, 1)
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

describe("value reductions on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of the value reductions did not run")
    return
  end
  compare_all("cuda")
end)
