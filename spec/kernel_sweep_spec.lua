-- Every registered kernel of a device against an independent reference computed in Lua: one case
-- per op (helpers/sweep_cases.lua, and each family's helpers/<family>_cases.lua found by
-- helpers/family_cases.lua: its sweep cases, the ops each covers, its variants) runs in each dtype that has a
-- kernel, its results compared with Lua loops over the inputs' stored values (float64 numbers,
-- integers wrapping as the engine defines, booleans); the random kernels against Philox4x32-10
-- written in Lua. Each comparison marks the kernels it traced as compared (helpers/coverage.lua),
-- and each case checks that it ran the kernels it stands for. On a GPU machine the same cases
-- run on CUDA (tagged #cuda) against the same references.
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local coverage = require("helpers.coverage")
local sweep_cases = require("helpers.sweep_cases")
local variant_cases = require("helpers.sweep_variant_cases")
local family_cases = require("helpers.family_cases")

local cases = {}
for name, case in pairs(sweep_cases.cases) do cases[name] = case end
for name, case in pairs(family_cases.sweep) do cases[name] = case end
local case_of_op = family_cases.case_of_op
local random_ops = { rand = true, randn = true, randint = true }

-- {rtol, atol} of a floating result against the float64 Lua reference
local tolerance = {
  float64 = { 1e-12, 1e-12 }, float32 = { 1e-5, 1e-5 }, bfloat16 = { 2e-2, 2e-2 }, float16 = { 2e-3, 2e-3 },
}

local function seed_of(name)
  local h = 7
  for i = 1, #name do h = (h * 31 + name:byte(i)) % 1000003 end
  return h
end

local function check_result(i, expected, got, dtype, what, tolerances)
  got = got:to("cpu")
  local label = string.format("%s: result %d", what, i)
  if type(expected) == "table" and expected.exact then
    if expected.dtype then assert.are.equal(expected.dtype, got.dtype, label .. " dtype") end
    assert.tensor_equal(expected.value, got, label)
  elseif not sweep_cases.floating[got.dtype] then
    -- a Lua reference may give a bool result as 1 and 0
    if got.dtype == "bool" and type(expected) ~= "boolean" then
      expected = type(expected) == "number" and expected ~= 0
        or ref.map(expected, function(v) return v ~= 0 and v ~= false end)
    end
    assert.tensor_equal(expected, got, label)
  else
    local tol = (tolerances or {})[dtype] or tolerance[dtype] or tolerance[got.dtype]
    assert.tensor_near(expected, got, tol[1], tol[2], label)
  end
end

-- every kernel of `kernels` must appear in the trace
local function check_ran(events, kernels, what)
  local ran = {}
  for _, e in ipairs(events) do ran[e.op .. " " .. e.kernel] = true end
  for _, k in ipairs(kernels) do
    assert.is_true(ran[k.op .. " " .. k.kernel] == true,
      string.format("%s did not run kernel %s of op %s", what, k.kernel, k.op))
  end
end

-- case.layout(x, i), when present, lays input i out as the path under test needs (a view into
-- a larger buffer, transposed, expanded): on the CPU for the reference's values, on the device
-- for the run
local function run_case(name, case, dtype, device, kernels)
  local what = string.format("%s in %s on %s", name, dtype, device)
  local G = sweep_cases.maker(dtype, ref.rng(seed_of(name .. dtype)))
  local inputs = case.inputs(G, dtype)
  local layout = case.layout or function(x) return x end
  local stored, on_device = {}, {}
  for i, x in ipairs(inputs) do
    stored[i] = layout(x, i):totable()
    on_device[i] = layout(x:to(device), i)
  end
  local expected = case.reference(dtype, table.unpack(stored, 1, #inputs))
  local events = coverage.compared(function() return case.run(table.unpack(on_device, 1, #inputs)) end,
    function(results)
      assert.are.equal(#expected, #results, what .. ": number of results")
      for i = 1, #expected do check_result(i, expected[i], results[i], dtype, what, case.tolerance) end
    end)
  check_ran(events, kernels, what)
  return events
end

-- the kernels of a device grouped by the case that covers them, in registry order
local function groups(device)
  local list, by_key = {}, {}
  for _, k in ipairs(tl.kernels()) do
    if k.device == device:match("^%a+") and not random_ops[k.op] then
      local name = case_of_op[k.op] or k.op
      local key = name .. "/" .. k.dtype
      if not by_key[key] then
        by_key[key] = { name = name, dtype = k.dtype, kernels = {} }
        list[#list + 1] = by_key[key]
      end
      table.insert(by_key[key].kernels, k)
    end
  end
  return list
end

local function sweep(device)
  for _, group in ipairs(groups(device)) do
    it(string.format("%s in %s matches the Lua reference", group.name, group.dtype), function()
      local case = cases[group.name]
      assert.is_not_nil(case, string.format("no sweep case covers op %s (kernel %s): add one to "
        .. "spec/helpers/sweep_cases.lua or the family's cases file (its sweep, or its case_of_op naming the "
        .. "case that covers it)", group.kernels[1].op, group.kernels[1].kernel))
      run_case(group.name, case, group.dtype, device, group.kernels)
    end)
  end
end

-- The paths of kernels that have several (tl.kernel_variants()): each variant of a device in
-- each of its dtypes, by a case of helpers/sweep_variant_cases.lua that takes it, against the
-- case's Lua reference; the trace must show the variant (so the coverage report marks it). A
-- path of a loop many kernels share (v.loop) is reached through one op whose kernel runs it. A
-- case whose path needs what the device lacks (a Hopper GPU) says why in case.unavailable(device):
-- pending there.
local function variant_case(v)
  if v.loop then
    local make = (variant_cases.loops[v.loop] or {})[v.variant]
    return make and make(v.dtype), string.format("%s loop path %s", v.loop, v.variant)
  end
  local cases_of_op = variant_cases[v.op] or family_cases.variants[v.op] or {}
  return cases_of_op[v.variant], string.format("%s path %s", v.op, v.variant)
end

local function took_variant(events, v)
  for _, e in ipairs(events) do
    for _, taken in ipairs(e.variants or {}) do
      if v.loop and e.dtype == v.dtype and taken == v.loop .. "." .. v.variant then return true end
      if not v.loop and e.kernel == v.kernel and taken == v.variant then return true end
    end
  end
  return false
end

local function variant_sweep(device)
  for _, v in ipairs(tl.kernel_variants()) do
    if v.device == device:match("^%a+") then
      local case, name = variant_case(v)
      local unavailable = case and case.unavailable and case.unavailable(device)
      if unavailable then
        pending(string.format("%s in %s: %s", name, v.dtype, unavailable))
      else
      it(string.format("%s in %s matches the Lua reference", name, v.dtype), function()
        assert.is_not_nil(case, string.format("no sweep case reaches variant %s of %s (%s): add one to "
          .. "spec/helpers/sweep_variant_cases.lua or the family's cases file", v.variant, v.kernel or v.loop .. " loop", v.condition))
        local events = run_case(name, case, v.dtype, device, v.loop and {} or { v })
        assert.is_true(took_variant(events, v), string.format("%s in %s did not take variant %s of %s", name,
          v.dtype, v.variant, v.kernel or v.loop .. " loop"))
      end)
      end
    end
  end
end

-- Random kernels: two consecutive draws after tl.manual_seed, the second past the threshold of
-- the parallel loop, against Philox4x32-10 in Lua: rand and randint exactly (every value is
-- exact in its dtype); randn (Box-Muller through the C library's log, cos, sin) to within
-- one rounding of the dtype.
local SEED = 0x123456789ABCDEF -- both 32-bit halves of the key in use
local RANDN_TOL = { float64 = 1e-12, float32 = 2 ^ -23, bfloat16 = 2 ^ -8, float16 = 2 ^ -11 }
local function random_sweep(device)
  local sizes = { 7, 16389 }
  local function draw(op, dtype, n)
    local opts = { dtype = dtype, device = device }
    if op == "randint" then return tl.randint(-3, 9, { n }, opts) end
    return tl[op](n, opts)
  end
  for _, k in ipairs(tl.kernels()) do
    if random_ops[k.op] and k.device == device:match("^%a+") then
      it(string.format("%s in %s follows Philox4x32-10 written in Lua", k.op, k.dtype), function()
        local what = string.format("%s in %s on %s", k.op, k.dtype, device)
        local events = coverage.compared(function()
          tl.manual_seed(SEED)
          local out = {}
          for i, n in ipairs(sizes) do out[i] = draw(k.op, k.dtype, n) end
          return out
        end, function(out)
          local counter = 0
          for i, n in ipairs(sizes) do
            local expected
            expected, counter = K.random(k.op, k.dtype, n, SEED, counter, -3, 9)
            local got = out[i]:to("cpu")
            if k.op == "randn" then
              local tol = RANDN_TOL[k.dtype]
              assert.tensor_near(expected, got, tol, 1e-12, what)
            else
              assert.tensor_equal(expected, got, what)
            end
          end
        end)
        check_ran(events, { k }, what)
      end)
    end
  end
end

describe("kernel sweep on the cpu", function()
  random_sweep("cpu")
  sweep("cpu")
  variant_sweep("cpu")
end)

describe("kernel sweep on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of this block did not run")
    return
  end
  sweep("cuda")
  variant_sweep("cuda")
  random_sweep("cuda")
end)
