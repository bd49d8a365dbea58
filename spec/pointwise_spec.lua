-- Every pointwise op of the op table (families pointwise, pointwise_binary and
-- pointwise_ternary) against its Lua reference (helpers/pointwise_cases.lua): values in
-- each floating dtype, integer and bool inputs by the row's dtypes rule (tl.ops()'s
-- dtypes: float computes them in float32, float_only and bits refuse what they cannot
-- take, int keeps integers exactly, bool_out gives bool), the row's numbers positionally
-- and as an options table, strided inputs, broadcasting and Lua numbers, the method form,
-- bad arguments. Edge cases against PyTorch's values close the file.
local tl = require("tlua")
local ref = require("helpers.reference")
local cases = require("helpers.pointwise_cases")

local FLOAT_DTYPES, TOL = ref.FLOAT_DTYPES, ref.ELEMENTWISE_TOL

local families = { pointwise = {}, pointwise_binary = {}, pointwise_ternary = {} }
for _, op in ipairs(tl.ops()) do
  if families[op.family] then table.insert(families[op.family], op) end
end

-- the numbers a case's reference takes by default in dtype
local function defaults(case, dtype)
  local n = case.numbers or {}
  if type(n) == "function" then n = n(dtype) end
  return n
end
local function as_number(v) if type(v) == "boolean" then return v and 1 or 0 end return v end
-- ref(x..., numbers...) over a flat list of inputs (each a list, or a number for all)
local function expect(f, inputs, numbers)
  local n = 0
  for _, list in ipairs(inputs) do if type(list) == "table" then n = math.max(n, #list) end end
  local out = {}
  for i = 1, n do
    local args = {}
    for k, list in ipairs(inputs) do
      if type(list) == "table" then args[k] = list[i] else args[k] = list end
    end
    for k = 1, #numbers do args[#inputs + k] = numbers[k] end
    out[i] = f(table.unpack(args, 1, #inputs + #numbers))
  end
  return out
end
-- n values drawn from [lo, hi] with the case's specials after them, in dtype; and their stored values
local function draw(rng, n, lo, hi, dtype, specials)
  local values = ref.random_table(rng, { n }, lo, hi)
  for _, v in ipairs(specials or {}) do values[#values + 1] = v end
  local t = tl.tensor(values, { dtype = dtype })
  return t, t:totable()
end
-- integers of an op's integer inputs: its ints range, else its float range rounded in
local function int_range(case, k)
  if case.ints then return case.ints[1], case.ints[2] end
  local r = case.ranges and case.ranges[k] or { case.lo, case.hi }
  local lo, hi = math.ceil(r[1]), math.floor(r[2])
  return lo, math.max(lo, hi)
end
local function int_values(case, k, n)
  local lo, hi = int_range(case, k)
  local list = {}
  for i = 1, n do list[i] = lo + ((i - 1) * 7 + k * 3) % (hi - lo + 1) end
  return list
end
local function check_values(expected, got, dtype)
  if got.dtype == "bool" or not ref.ELEMENTWISE_TOL[got.dtype] then
    assert.tensor_equal(expected, got)
  else
    local tol = TOL[dtype] or TOL.float32
    assert.tensor_near(expected, got, tol.rtol, tol.atol)
  end
end

-- the numbers checks every op of a row with numbers gets (inputs: the tensors, stored: their
-- values, call(numbers...) -> the op's result)
local function numbers_checks(name, op, case, arity)
  local names = op.numbers
  if #names == 0 then
    it("takes no numbers: an extra argument is an error naming the op", function()
      local args = {}
      for i = 1, arity do args[i] = tl.ones(2) end
      args[arity + 1] = 3
      assert.error_matches(function() tl[name](table.unpack(args)) end, name .. ": takes no numbers")
    end)
    return
  end
  it(("takes its numbers (%s) positionally and as an options table"):format(table.concat(names, ", ")), function()
    assert(case.other, name .. ": its line needs `other` numbers")
    local rng = ref.rng(#name * 7)
    local inputs, stored = {}, {}
    for k = 1, arity do
      local r = case.ranges and case.ranges[k] or { case.lo, case.hi }
      inputs[k], stored[k] = draw(rng, 12, r[1], r[2], "float64")
    end
    local expected = expect(case.reference, stored, case.other)
    local positional = { table.unpack(inputs) }
    for i, v in ipairs(case.other) do positional[arity + i] = v end
    assert.tensor_near(expected, tl[name](table.unpack(positional, 1, arity + #case.other)), 1e-12, 1e-14)
    local options = {}
    for i, key in ipairs(names) do options[key] = case.other[i] end
    local with_table = { table.unpack(inputs) }
    with_table[arity + 1] = options
    assert.tensor_near(expected, tl[name](table.unpack(with_table, 1, arity + 1)), 1e-12, 1e-14)
    assert.tensor_near(expected, inputs[1][name](table.unpack(with_table, 1, arity + 1)), 1e-12, 1e-14)
  end)
  it("refuses an unknown option and too many numbers, naming the op", function()
    local args = {}
    for i = 1, arity do args[i] = tl.ones(2) end
    args[arity + 1] = { no_such_number = 1 }
    assert.error_matches(function() tl[name](table.unpack(args, 1, arity + 1)) end,
      name .. ": unknown option 'no_such_number'")
    for i = 1, #names + 1 do args[arity + i] = 0.5 end
    assert.error_matches(function() tl[name](table.unpack(args, 1, arity + #names + 1)) end,
      name .. ": expected at most")
  end)
end

describe("pointwise ops", function()
  it("are listed in the op table (family pointwise) with their dtypes rule and numbers", function()
    assert.is_true(#families.pointwise >= 30)
    for _, op in ipairs(families.pointwise) do
      assert.is_function(tl[op.name], op.name)
      assert.is_string(op.dtypes, op.name)
      assert.is_table(op.numbers, op.name)
      local predicate = op.dtypes == "bool_out" or op.dtypes == "bits"
      assert.are.equal(not predicate, op.differentiable, op.name)
    end
  end)

  for _, op in ipairs(families.pointwise) do
    local name, case, rule = op.name, cases[op.name], op.dtypes
    describe(name, function()
      it("has a case in helpers/pointwise_cases.lua", function()
        assert(case, "pointwise op '" .. name .. "' has no line in spec/helpers/pointwise_cases.lua")
      end)
      if not case then return end
      local one = function(x, ...) return case.reference(as_number(x), ...) end

      if rule ~= "bits" then
        for _, dt in ipairs(FLOAT_DTYPES) do
          it(("in %s matches the Lua reference, as tl.%s(t) and t:%s()"):format(dt, name, name), function()
            local t, stored = draw(ref.rng(#name * 31 + #dt), 40, case.lo, case.hi, dt, case.specials)
            local a, b = tl[name](t), t[name](t)
            assert.equal(rule == "bool_out" and "bool" or dt, a.dtype)
            check_values(expect(one, { stored }, defaults(case, dt)), a, dt)
            assert.tensor_equal(a, b)
          end)
        end
      end

      it(("takes integer and bool inputs by its rule (%s)"):format(rule), function()
        local ints = int_values(case, 1, 9)
        for _, dt in ipairs({ "int32", "int64", "bool" }) do
          local t = dt == "bool" and tl.tensor({ true, false, true }) or tl.tensor(ints, { dtype = dt })
          local stored = t:totable()
          if rule == "float_only" then
            assert.error_matches(function() tl[name](t) end, name .. ": expected a of a floating dtype, got " .. dt)
          elseif rule == "float" then
            local out = tl[name](t)
            assert.equal("float32", out.dtype)
            if dt ~= "bool" or (case.lo <= 0 and case.hi >= 1) then
              assert.tensor_near(expect(one, { stored }, defaults(case, "float32")), out, 1e-5, 1e-6)
            end
          elseif rule == "int" then
            local out = tl[name](t)
            assert.equal(dt == "bool" and "int64" or dt, out.dtype)
            assert.tensor_equal(expect(function(x, ...) return math.tointeger(one(x, ...)) or one(x, ...) end,
              { stored }, defaults(case, out.dtype)), out)
          elseif rule == "bool_out" then
            local out = tl[name](t)
            assert.equal("bool", out.dtype)
            assert.tensor_equal(expect(one, { stored }, {}), out)
          else -- bits
            local out = tl[name](t)
            assert.equal(dt, out.dtype)
            assert.tensor_equal(expect(case.reference, { stored }, {}), out)
          end
        end
        if rule == "bits" then
          assert.error_matches(function() tl[name](tl.ones(2)) end,
            name .. ": expected a of an integer or bool dtype, got float32")
        end
      end)

      it("reads strided and broadcast inputs", function()
        local dt = rule == "bits" and "int64" or "float64"
        local values = rule == "bits" and ref.random_int_table(ref.rng(#name), { 5, 4 }, -50, 50)
          or ref.random_table(ref.rng(#name), { 5, 4 }, case.lo, case.hi)
        local t = tl.tensor(values, { dtype = dt })
        local nums = defaults(case, dt)
        local f = function(x) return one(x, table.unpack(nums)) end
        local tt = t:transpose(1, 2)
        assert.is_false(tt:is_contiguous())
        check_values(ref.map(tt:totable(), f), tl[name](tt), "float64")
        local row = t[1]:view(1, 4):expand(3, 4)
        check_values(ref.map(row:totable(), f), tl[name](row), "float64")
      end)

      numbers_checks(name, op, case, 1)

      it("rejects a non-tensor argument with a message naming the op", function()
        assert.error_matches(function() tl[name]("x") end, name .. ": argument 1")
        assert.error_matches(function() tl[name]() end, name .. ": argument 1")
      end)
    end)
  end
end)

-- the inputs of a binary or ternary op's case in dtype: float ranges, or its integers
local function operand(case, k, n, dtype, rng)
  if dtype == "bool" then
    local list = {}
    for i = 1, n do list[i] = (i + k) % 3 ~= 0 end
    local t = tl.tensor(list)
    return t, t:totable()
  end
  if dtype == "int32" or dtype == "int64" or not case.ranges then
    local t = tl.tensor(int_values(case, k, n), { dtype = dtype })
    return t, t:totable()
  end
  local r = case.ranges[k]
  return draw(rng, n, r[1], r[2], dtype)
end

describe("pointwise binary ops", function()
  it("are listed in the op table (family pointwise_binary)", function()
    assert.is_true(#families.pointwise_binary >= 2)
    for _, op in ipairs(families.pointwise_binary) do assert.is_function(tl[op.name], op.name) end
  end)

  for _, op in ipairs(families.pointwise_binary) do
    local name, case, rule = op.name, cases[op.name], op.dtypes
    describe(name, function()
      it("has a case with its input ranges (or integers) in helpers/pointwise_cases.lua", function()
        assert(case and (case.ranges or case.ints),
          "pointwise binary op '" .. name .. "' has no line with ranges in spec/helpers/pointwise_cases.lua")
      end)
      if not (case and (case.ranges or case.ints)) then return end
      local two = function(a, b) return case.reference(as_number(a), as_number(b)) end

      if rule ~= "bits" then
        local ra, rb = case.ranges[1], case.ranges[2]
        for _, dt in ipairs(FLOAT_DTYPES) do
          it(("in %s broadcasts [7, 1] with [1, 9] and matches the Lua reference"):format(dt), function()
            local rng = ref.rng(#name * 17 + #dt)
            local a = tl.tensor(ref.random_table(rng, { 7, 1 }, ra[1], ra[2]), { dtype = dt })
            local b = tl.tensor(ref.random_table(rng, { 1, 9 }, rb[1], rb[2]), { dtype = dt })
            local av, bv = a:totable(), b:totable()
            local expected = {}
            for i = 1, 7 do
              expected[i] = {}
              for j = 1, 9 do expected[i][j] = two(av[i][1], bv[1][j]) end
            end
            local out = tl[name](a, b)
            assert.equal(rule == "bool_out" and "bool" or dt, out.dtype)
            assert.same({ 7, 9 }, out.shape)
            check_values(expected, out, dt)
            assert.tensor_equal(out, a[name](a, b))
          end)
        end

        it("takes a Lua number on either side, in the tensor's dtype", function()
          local rng = ref.rng(#name)
          local a, av = draw(rng, 6, ra[1], ra[2], "float64")
          local b, bv = draw(rng, 6, rb[1], rb[2], "float64")
          local x, y = (ra[1] + ra[2]) / 2 + 0.25, (rb[1] + rb[2]) / 2 + 0.25
          local left, right = tl[name](x, b), tl[name](a, y)
          assert.equal(rule == "bool_out" and "bool" or "float64", left.dtype)
          check_values(expect(two, { x, bv }, {}), left, "float64")
          check_values(expect(two, { av, y }, {}), right, "float64")
        end)
      end

      it(("takes integer and bool inputs by its rule (%s), and promotes mixed dtypes"):format(rule), function()
        for _, dt in ipairs({ "int32", "int64", "bool" }) do
          local a, av = operand(case, 1, 9, dt)
          local b, bv = operand(case, 2, 9, dt)
          if rule == "float" then
            local out = tl[name](a, b)
            assert.equal("float32", out.dtype)
            assert.tensor_near(expect(two, { av, bv }, {}), out, 1e-5, 1e-6)
          elseif rule == "int" then
            local out = tl[name](a, b)
            assert.equal(dt == "bool" and "int64" or dt, out.dtype)
            if dt ~= "bool" then
              assert.tensor_equal(expect(function(x, y) return math.tointeger(two(x, y)) end, { av, bv }, {}), out)
            end
          elseif rule == "bool_out" then
            local out = tl[name](a, b)
            assert.equal("bool", out.dtype)
            assert.tensor_equal(expect(two, { av, bv }, {}), out)
          else
            local out = tl[name](a, b)
            assert.equal(dt, out.dtype)
            assert.tensor_equal(expect(case.reference, { av, bv }, {}), out)
          end
        end
        if rule == "bits" then
          assert.error_matches(function() tl[name](tl.ones(2), tl.ones(2, { dtype = "int64" })) end,
            name .. ": expected a and b of an integer or bool dtype, got float32")
          local mixed = tl[name](tl.tensor({ 6, 3 }, { dtype = "int32" }), tl.tensor({ 5, 1 }, { dtype = "int64" }))
          assert.equal("int64", mixed.dtype)
        else
          local a, b = operand(case, 1, 3, "float32", ref.rng(3)), operand(case, 2, 3, "float64", ref.rng(4))
          assert.equal(rule == "bool_out" and "bool" or "float64", tl[name](a, b).dtype)
        end
      end)

      it("reads strided inputs", function()
        local dt = rule == "bits" and "int64" or "float64"
        local a = operand(case, 1, 12, dt, ref.rng(#name + 5)):view(4, 3)
        local b = operand(case, 2, 12, dt, ref.rng(#name + 6)):view(3, 4)
        local at = a:transpose(1, 2)
        local av, bv = at:totable(), b:totable()
        local expected = {}
        for i = 1, 3 do
          expected[i] = {}
          for j = 1, 4 do expected[i][j] = (rule == "bits" and case.reference or two)(av[i][j], bv[i][j]) end
        end
        check_values(expected, tl[name](at, b), "float64")
      end)

      it("rejects shapes that do not broadcast and non-tensor arguments, naming the op", function()
        assert.error_matches(function() tl[name](tl.ones(3), tl.ones(4)) end, name)
        assert.error_matches(function() tl[name]("x", tl.ones(2)) end, name)
        assert.error_matches(function() tl[name](1, 2) end, name .. ": expected a tensor")
      end)
    end)
  end
end)

describe("pointwise ternary ops", function()
  it("are listed in the op table (family pointwise_ternary), each differentiable", function()
    assert.is_true(#families.pointwise_ternary >= 3)
    for _, op in ipairs(families.pointwise_ternary) do
      assert.is_true(op.differentiable, op.name)
      assert.is_function(tl[op.name], op.name)
    end
  end)

  for _, op in ipairs(families.pointwise_ternary) do
    local name, case, rule = op.name, cases[op.name], op.dtypes
    describe(name, function()
      it("has a case with three input ranges in helpers/pointwise_cases.lua", function()
        assert(case and case.ranges and #case.ranges == 3, "pointwise ternary op '" .. name .. "' has no line")
      end)
      if not (case and case.ranges) then return end
      local r = case.ranges

      for _, dt in ipairs(FLOAT_DTYPES) do
        it(("in %s broadcasts [4, 1], [1, 5] and [5] and matches the Lua reference"):format(dt), function()
          local rng = ref.rng(#name * 13 + #dt)
          local a = tl.tensor(ref.random_table(rng, { 4, 1 }, r[1][1], r[1][2]), { dtype = dt })
          local b = tl.tensor(ref.random_table(rng, { 1, 5 }, r[2][1], r[2][2]), { dtype = dt })
          local c = tl.tensor(ref.random_table(rng, { 5 }, r[3][1], r[3][2]), { dtype = dt })
          local av, bv, cv = a:totable(), b:totable(), c:totable()
          local nums = defaults(case, dt)
          local expected = {}
          for i = 1, 4 do
            expected[i] = {}
            for j = 1, 5 do expected[i][j] = case.reference(av[i][1], bv[1][j], cv[j], table.unpack(nums)) end
          end
          local out = tl[name](a, b, c)
          assert.equal(dt, out.dtype)
          assert.same({ 4, 5 }, out.shape)
          check_values(expected, out, dt)
          assert.tensor_equal(out, a[name](a, b, c))
        end)
      end

      it("takes a Lua number in any place, in the tensors' dtype", function()
        local rng = ref.rng(#name)
        local inputs, stored = {}, {}
        for k = 1, 3 do inputs[k], stored[k] = draw(rng, 6, r[k][1], r[k][2], "float64") end
        for k = 1, 3 do
          local args, values = { table.unpack(inputs) }, { table.unpack(stored) }
          local x = (r[k][1] + r[k][2]) / 2 + 0.125
          args[k], values[k] = x, x
          local out = tl[name](table.unpack(args))
          assert.equal("float64", out.dtype)
          assert.tensor_near(expect(case.reference, values, defaults(case, "float64")), out, 1e-12, 1e-14)
        end
      end)

      it(("takes integer inputs by its rule (%s)"):format(rule), function()
        local ints = {}
        for k = 1, 3 do ints[k] = tl.tensor(int_values(case, k, 6), { dtype = "int32" }) end
        local out = tl[name](ints[1], ints[2], ints[3])
        local values = { ints[1]:totable(), ints[2]:totable(), ints[3]:totable() }
        if rule == "int" then
          assert.equal("int32", out.dtype)
          assert.tensor_equal(expect(function(...) return math.tointeger(case.reference(...)) end, values,
            defaults(case, "int32")), out)
        else
          assert.equal("float32", out.dtype)
          assert.tensor_near(expect(case.reference, values, defaults(case, "float32")), out, 1e-5, 1e-6)
        end
      end)

      numbers_checks(name, op, case, 3)

      it("rejects shapes that do not broadcast and non-tensor arguments, naming the op", function()
        assert.error_matches(function() tl[name](tl.ones(3), tl.ones(4), tl.ones(3)) end, name)
        assert.error_matches(function() tl[name](tl.ones(3), "x", tl.ones(3)) end, name)
        assert.error_matches(function() tl[name](1, 2, 3) end, name .. ": expected a tensor")
      end)
    end)
  end
end)

-- Edge cases against PyTorch 1.13 (values from /usr/bin/python3 with torch, the expressions
-- beside each)
describe("pointwise edge cases, as torch", function()
  local NAN, INF = 0 / 0, math.huge
  local function long(t) return tl.tensor(t, { dtype = "int64" }) end

  it("round is half to even, with decimals", function()
    -- torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 1.2345])) and decimals=2
    local x = tl.tensor({ 0.5, 1.5, 2.5, -0.5, -1.5, 1.2345 }, { dtype = "float64" })
    assert.tensor_equal({ 0, 2, 2, -0.0, -2, 1 }, tl.round(x))
    assert.tensor_near({ 0.5, 1.5, 2.5, -0.5, -1.5, 1.23 }, tl.round(x, 2), 1e-15, 1e-15)
    assert.tensor_near({ 0, 0, 0, 0, 0, 0 }, x:round({ decimals = -1 }), 0, 1e-15)
    assert.tensor_equal(long({ -3, 0, 5 }), tl.round(long({ -3, 0, 5 })))
  end)

  it("keeps integers exact where torch does: floor, sign, square of int64", function()
    -- torch.square(torch.tensor([3037000499, -2**40])) = [9223372030926249001, 1208925819614629174706176 wraps]
    local big = long({ 3037000499, -(1 << 40) })
    assert.tensor_equal(long({ 9223372030926249001, 0 }), tl.square(big))
    assert.tensor_equal(big, tl.floor(big))
    assert.tensor_equal(long({ 1, -1 }), tl.sign(big))
  end)

  it("divides integers as torch: fmod takes a's sign, remainder b's, floor_divide floors", function()
    -- torch.fmod / remainder / floor_divide of [-7, 7, 5] by [2, -2, 3]
    local a, b = long({ -7, 7, 5 }), long({ 2, -2, 3 })
    assert.tensor_equal(long({ -1, 1, 2 }), tl.fmod(a, b))
    assert.tensor_equal(long({ 1, -1, 2 }), tl.remainder(a, b))
    assert.tensor_equal(long({ -4, -4, 1 }), tl.floor_divide(a, b))
    local x, y = tl.tensor({ -7.0, 7.0 }), tl.tensor({ 2.0, -2.0 })
    assert.tensor_equal({ -1, 1 }, tl.fmod(x, y))
    assert.tensor_equal({ 1, -1 }, tl.remainder(x, y))
    assert.tensor_equal({ -4, -4 }, tl.floor_divide(x, y))
    -- an integer divisor of 0 gives 0 (torch raises ZeroDivisionError on the CPU); the most
    -- negative integer over -1 wraps
    assert.tensor_equal(long({ 0, 0, 0 }), tl.floor_divide(long({ 5, -5, 0 }), 0))
    assert.tensor_equal(long({ 0, 0 }), tl.fmod(long({ 5, -5 }), 0))
    assert.tensor_equal(long({ 0, 0 }), tl.remainder(long({ 5, -5 }), 0))
    assert.tensor_equal(long({ math.mininteger }), tl.floor_divide(long({ math.mininteger }), -1))
  end)

  it("propagates NaN in maximum and minimum, ignores it in fmax and fmin", function()
    -- torch.maximum(torch.tensor([nan, 1.]), torch.tensor([1., nan])) = [nan, nan]; fmax = [1, 1]
    local a, b = tl.tensor({ NAN, 1.0, 2.0 }), tl.tensor({ 1.0, NAN, 3.0 })
    assert.tensor_equal({ NAN, NAN, 3 }, tl.maximum(a, b))
    assert.tensor_equal({ NAN, NAN, 2 }, tl.minimum(a, b))
    assert.tensor_equal({ 1, 1, 3 }, tl.fmax(a, b))
    assert.tensor_equal({ 1, 1, 2 }, tl.fmin(a, b))
  end)

  it("splits the gradient of maximum and minimum evenly on ties", function()
    -- torch: a = [1, 2, 3], b = [1, 5, 0]; maximum(a, b).sum().backward(): a.grad [0.5, 0, 1]
    for _, pair in ipairs({ { "maximum", { 0.5, 0, 1 }, { 0.5, 1, 0 } }, { "minimum", { 0.5, 1, 0 }, { 0.5, 0, 1 } },
                            { "fmax", { 0.5, 0, 1 }, { 0.5, 1, 0 } } }) do
      local a = tl.tensor({ 1.0, 2.0, 3.0 }):requires_grad_()
      local b = tl.tensor({ 1.0, 5.0, 0.0 }):requires_grad_()
      tl[pair[1]](a, b):sum():backward()
      assert.tensor_equal(pair[2], a.grad, pair[1])
      assert.tensor_equal(pair[3], b.grad, pair[1])
    end
  end)

  it("clamps with tensor bounds, its gradient by torch's rule, and with one bound", function()
    -- torch.clamp(x, lo, hi) with x = [1, 5, 9, 3], lo = [2, 2, 2, 6], hi = [4, 4, 4, 4]:
    -- [2, 4, 4, 4]; x.grad [0, 0, 0, 0], lo.grad [1, 0, 0, 0], hi.grad [0, 1, 1, 1]
    local x = tl.tensor({ 1.0, 5.0, 9.0, 3.0 }):requires_grad_()
    local lo = tl.tensor({ 2.0, 2.0, 2.0, 6.0 }):requires_grad_()
    local hi = tl.tensor({ 4.0, 4.0, 4.0, 4.0 }):requires_grad_()
    local y = x:clamp(lo, hi)
    assert.tensor_equal({ 2, 4, 4, 4 }, y)
    y:sum():backward()
    assert.tensor_equal({ 0, 0, 0, 0 }, x.grad)
    assert.tensor_equal({ 1, 0, 0, 0 }, lo.grad)
    assert.tensor_equal({ 0, 1, 1, 1 }, hi.grad)
    local v = tl.tensor({ 1, 5, 9 }, { dtype = "int64" })
    assert.tensor_equal(long({ 2, 5, 9 }), v:clamp(long({ 2, 2, 2 })))
    assert.tensor_equal(long({ 1, 4, 4 }), v:clamp(nil, long({ 4, 4, 4 })))
    assert.tensor_equal(long({ 2, 5, 6 }), tl.clamp(v, 2, long({ 6, 6, 6 })))
    local w = tl.tensor({ 1.0, 5.0, 9.0 })
    w:clamp_(tl.tensor({ 2.0, 2.0, 2.0 }), tl.tensor({ 4.0, 6.0, 8.0 }))
    assert.tensor_equal({ 2, 5, 8 }, w)
  end)

  it("gives xlogy 0 where x = 0 unless y is NaN, copysign -0's sign", function()
    -- torch.xlogy(torch.tensor([0., 0., 1.]), torch.tensor([0., nan, 0.])) = [0, nan, -inf]
    assert.tensor_equal({ 0, NAN, -INF }, tl.xlogy(tl.tensor({ 0.0, 0.0, 1.0 }), tl.tensor({ 0.0, NAN, 0.0 })))
    assert.tensor_equal({ -2, 2 }, tl.copysign(tl.tensor({ 2.0, -2.0 }), tl.tensor({ -0.0, 0.0 })))
  end)

  it("gives sign 0 for NaN, nan_to_num the dtype's range, logit -inf and inf at 0 and 1", function()
    -- torch.sign(torch.tensor([nan, -0., 2.])) = [0, 0, 1] (torch 1.13)
    assert.tensor_equal({ 0, 0, 1 }, tl.sign(tl.tensor({ NAN, -0.0, 2.0 })))
    -- torch.nan_to_num(torch.tensor([nan, inf, -inf], dtype=torch.float16)) = [0, 65504, -65504]
    local h = tl.nan_to_num(tl.tensor({ NAN, INF, -INF }, { dtype = "float16" }))
    assert.equal("float16", h.dtype)
    assert.tensor_equal({ 0, 65504, -65504 }, h:double())
    local b = tl.nan_to_num(tl.tensor({ NAN, INF, -INF }, { dtype = "bfloat16" }))
    assert.tensor_equal({ 0, 3.3895313892515355e38, -3.3895313892515355e38 }, b:double())
    assert.tensor_equal({ 1, 2, -3 }, tl.nan_to_num(tl.tensor({ NAN, INF, -INF }), 1, 2, -3))
    assert.tensor_equal({ 1, INF, -3 }, tl.nan_to_num(tl.tensor({ NAN, INF, -INF }), { nan = 1, neginf = -3, posinf = INF }))
    -- torch.logit(torch.tensor([0., 0.3, 1.])) = [-inf, -0.8473, inf]; eps=0.1: [-2.1972, -0.8473, 2.1972]
    assert.tensor_near({ -INF, -0.84729786, INF }, tl.logit(tl.tensor({ 0.0, 0.3, 1.0 })), 1e-6, 1e-6)
    assert.tensor_near({ -2.19722458, -0.84729786, 2.19722458 }, tl.logit(tl.tensor({ 0.0, 0.3, 1.0 }), 0.1), 1e-6, 1e-6)
  end)

  it("computes logical ops on any dtypes and bitwise ops on integers and bool", function()
    -- torch.logical_xor(torch.tensor([0, 2, 0]), torch.tensor([0., 0., 1.5])) = [F, T, T]
    assert.tensor_equal({ false, true, true }, tl.logical_xor(long({ 0, 2, 0 }), tl.tensor({ 0.0, 0.0, 1.5 })))
    assert.tensor_equal({ true, false }, tl.logical_not(tl.tensor({ 0.0, NAN })))
    assert.tensor_equal({ false, true, false }, tl.bitwise_not(tl.tensor({ true, false, true })))
    assert.tensor_equal(long({ 0, 6, 1 }), tl.bitwise_and(long({ -7, 7, 5 }), long({ 2, -2, 3 })))
    assert.error_matches(function() tl.bitwise_or(tl.ones(2), 1) end, "bitwise_or: expected a and b of an integer or bool dtype")
    assert.error_matches(function() tl.frac(long({ 1 })) end, "frac: expected a of a floating dtype, got int64")
  end)

  it("in place: a predicate stores 0 and 1 in a floating x, bits refuse a floating x unchanged", function()
    local x = tl.tensor({ NAN, 1.0 })
    x:isnan_()
    assert.tensor_equal({ 1, 0 }, x)
    local y = tl.tensor({ 1.5, 2.0 })
    assert.error_matches(function() y:bitwise_not_() end, "bitwise_not_: expected x of an integer or bool dtype")
    assert.tensor_equal({ 1.5, 2.0 }, y)
    local z = tl.tensor({ -1.0, 2.0 })
    z:leaky_relu_(0.5)
    assert.tensor_equal({ -0.5, 2.0 }, z)
    local i = long({ -3, 4 })
    assert.error_matches(function() i:erf_() end, "erf_: the result has dtype float32")
    i:floor_()
    assert.tensor_equal(long({ -3, 4 }), i)
  end)
end)

-- On CUDA: every pointwise op of the three families against its Lua reference, with its default
-- and its other numbers, in float32 and float64, and on integer and bool inputs where its rule
-- has kernels for them (the kernel sweep runs each kernel once with the default numbers)
describe("pointwise ops on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of the pointwise ops did not run")
    return
  end
  local ARITY = { pointwise = 1, pointwise_binary = 2, pointwise_ternary = 3 }
  for family, list in pairs(families) do
    for _, op in ipairs(list) do
      local name, case, rule, arity = op.name, cases[op.name], op.dtypes, ARITY[family]
      it(("%s matches the Lua reference on cuda, with its numbers"):format(name), function()
        local dtypes = rule == "bits" and { "int32", "int64", "bool" }
          or rule == "bool_out" and { "float32", "float64", "int64", "bool" }
          or rule == "int" and { "float32", "float64", "int32", "int64" } or { "float32", "float64" }
        for _, dt in ipairs(dtypes) do
          local sets = { defaults(case, dt) }
          if case.other and (dt == "float32" or dt == "float64") then sets[2] = case.other end
          for _, numbers in ipairs(sets) do
            local inputs, stored = {}, {}
            for k = 1, arity do
              local t
              if arity == 1 and (dt == "float32" or dt == "float64") then
                t = draw(ref.rng(#name + k), 24, case.lo, case.hi, dt, case.specials)
              else
                t = operand(case, k, 24, dt, ref.rng(#name + k))
              end
              inputs[k], stored[k] = t:to("cuda"), t:totable()
            end
            local f = rule == "bits" and case.reference or function(...)
              local args = table.pack(...)
              for i = 1, arity do args[i] = as_number(args[i]) end
              local v = case.reference(table.unpack(args, 1, args.n))
              return (dt == "int32" or dt == "int64") and type(v) == "number" and math.tointeger(v) or v
            end
            local args = { table.unpack(inputs) }
            for i = 1, #numbers do args[arity + i] = numbers[i] end
            local out = tl[name](table.unpack(args, 1, arity + #numbers))
            assert.equal("cuda", out.device:match("^%a+"))
            check_values(expect(f, stored, numbers), out:to("cpu"), dt)
          end
        end
      end)
    end
  end
end)
