-- busted helper: tensor assertions for the specs.
--   (each takes an optional message as its last argument)
--   assert.tensor_near(expected, actual, rtol?, atol?, message?)
--       expected: a tensor, a nested Lua table or a number (a 0-dim value);
--       same shape, and every element |a - e| <= atol + rtol * |e|; NaN matches
--       only where expected is NaN; +-Inf must match exactly. Defaults:
--       rtol = 1e-5, atol = 1e-6. On failure the message gives the worst
--       element's 1-based index, both values, the shapes and the mismatch count.
--   assert.tensor_equal(expected, actual)
--       exact (NaN matches NaN), and the same dtype when expected is a tensor.
--   local msg = assert.error_matches(fn, pattern_or_list)
--       fn must raise an error whose message matches the Lua pattern, or, for
--       a list, contains every string of it (plain substrings); returns the message.
local say = require("say")
local luassert = require("luassert")

local DEFAULT_RTOL, DEFAULT_ATOL = 1e-5, 1e-6

local function is_tensor(v)
  if type(v) ~= "userdata" then return false end
  local ok, fn = pcall(function() return v.totable end)
  return ok and type(fn) == "function"
end

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end

-- { shape = {...}, data = flat row-major array, dtype = string or nil } or nil, error
local function normalize(v, what)
  if type(v) == "number" or type(v) == "boolean" then
    return { shape = {}, data = { v } }
  end
  if is_tensor(v) then
    local shape = v.shape
    local tbl = v:totable()
    local flat = {}
    if #shape == 0 then
      flat[1] = tbl
    else
      local function walk(x, depth)
        if depth > #shape then flat[#flat + 1] = x return end
        for i = 1, shape[depth] do walk(x[i], depth + 1) end
      end
      walk(tbl, 1)
    end
    return { shape = shape, data = flat, dtype = v.dtype }
  end
  if type(v) == "table" then
    local shape, x = {}, v
    while type(x) == "table" do
      shape[#shape + 1] = #x
      x = x[1]
    end
    local flat = {}
    local bad
    local function walk(y, depth)
      if bad then return end
      if depth > #shape then
        if type(y) ~= "number" and type(y) ~= "boolean" then
          bad = ("%s has a %s where a number was expected"):format(what, type(y))
          return
        end
        flat[#flat + 1] = y
        return
      end
      if type(y) ~= "table" or #y ~= shape[depth] then
        bad = ("%s is a ragged nested table (dim %d)"):format(what, depth)
        return
      end
      for i = 1, #y do walk(y[i], depth + 1) end
    end
    walk(v, 1)
    if bad then return nil, bad end
    return { shape = shape, data = flat }
  end
  return nil, ("%s is a %s, expected a tensor, a table or a number"):format(what, type(v))
end

local same_shape = require("helpers.reference").same_shape

-- 1-based multi-index of flat position p (1-based) in shape
local function index_str(shape, p)
  if #shape == 0 then return "[] (0-dim)" end
  local idx, rem = {}, p - 1
  for d = #shape, 1, -1 do
    idx[d] = rem % shape[d] + 1
    rem = rem // shape[d]
  end
  return shape_str(idx)
end

local function fmt(v)
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return ("%.9g"):format(v)
  end
  return tostring(v)
end

-- compares; returns ok, message
local function compare(expected, actual, rtol, atol, exact)
  local e, err = normalize(expected, "expected")
  if not e then return false, err end
  local a
  a, err = normalize(actual, "actual")
  if not a then return false, err end
  local shapes = ("expected shape %s, actual shape %s"):format(shape_str(e.shape), shape_str(a.shape))
  if not same_shape(e.shape, a.shape) then
    return false, "shapes differ: " .. shapes
  end
  if exact and e.dtype and e.dtype ~= a.dtype then
    return false, ("dtypes differ: expected %s, actual %s (%s)"):format(e.dtype, tostring(a.dtype), shapes)
  end
  local bad, worst, worst_excess = 0, nil, -math.huge
  for p = 1, #e.data do
    local ev, av = e.data[p], a.data[p]
    local excess -- > 0 means a mismatch; larger is worse
    if type(ev) == "boolean" or type(av) == "boolean" then
      excess = (ev == av) and -1 or math.huge
    elseif ev ~= ev then
      excess = (av ~= av) and -1 or math.huge
    elseif av ~= av then
      excess = math.huge
    elseif exact then
      excess = (ev == av) and -1 or math.abs(av - ev)
      if excess ~= excess then excess = math.huge end
    elseif ev == math.huge or ev == -math.huge or av == math.huge or av == -math.huge then
      excess = (ev == av) and -1 or math.huge
    else
      local diff = math.abs(av - ev)
      excess = diff - (atol + rtol * math.abs(ev))
      if excess <= 0 then excess = -1 end
    end
    if excess > 0 then
      bad = bad + 1
      if excess > worst_excess then worst, worst_excess = p, excess end
    end
  end
  if bad == 0 then return true end
  local ev, av = e.data[worst], a.data[worst]
  local diff = (type(ev) == "number" and type(av) == "number") and math.abs(av - ev) or nil
  local msg = ("%d of %d elements differ; worst at index %s: expected %s, got %s"):format(
    bad, #e.data, index_str(e.shape, worst), fmt(ev), fmt(av))
  if diff and diff == diff and not exact then
    msg = msg .. (" (|diff| %.3g, allowed %.3g = atol %g + rtol %g * |expected|)"):format(
      diff, atol + rtol * math.abs(ev), atol, rtol)
  end
  return false, msg .. "; " .. shapes .. (a.dtype and (", actual dtype " .. a.dtype) or "")
end

-- luassert formats the arguments into the message; the detail replaces them
local function with_detail(arguments, detail)
  for i = 1, (arguments.n or #arguments) do arguments[i] = nil end
  arguments[1] = detail
  arguments.n = 1
  arguments.nofmt = { true }
end

local function set_message(state, msg)
  if msg ~= nil then rawset(state, "failure_message", msg) end
end

local function tensor_near(state, arguments)
  set_message(state, arguments[5])
  local expected, actual = arguments[1], arguments[2]
  local rtol = arguments[3] or DEFAULT_RTOL
  local atol = arguments[4] or DEFAULT_ATOL
  local ok, detail = compare(expected, actual, rtol, atol, false)
  with_detail(arguments, detail or "all elements are within the tolerance")
  return ok
end

local function tensor_equal(state, arguments)
  set_message(state, arguments[3])
  local ok, detail = compare(arguments[1], arguments[2], 0, 0, true)
  with_detail(arguments, detail or "all elements are equal")
  return ok
end

local function error_matches(state, arguments)
  set_message(state, arguments[3])
  local fn, want = arguments[1], arguments[2]
  if type(fn) ~= "function" then
    with_detail(arguments, "error_matches: argument 1 must be a function, got " .. type(fn))
    return false
  end
  local ok, err = pcall(fn)
  if ok then
    with_detail(arguments, "expected an error, but the call succeeded")
    return false
  end
  local msg = tostring(err)
  local missing = {}
  if type(want) == "string" then
    if not msg:find(want) then missing[1] = "pattern '" .. want .. "'" end
  elseif type(want) == "table" then
    for _, s in ipairs(want) do
      if not msg:find(s, 1, true) then missing[#missing + 1] = "'" .. s .. "'" end
    end
  else
    with_detail(arguments, "error_matches: argument 2 must be a pattern or a list of strings")
    return false
  end
  if #missing > 0 then
    with_detail(arguments, ("the error message lacks %s\n  message: %s"):format(table.concat(missing, ", "), msg))
    return false, { msg }
  end
  with_detail(arguments, "the error message matches\n  message: " .. msg)
  return true, { msg }
end

say:set("assertion.tensor_near.positive", "Expected tensors to be near:\n%s")
say:set("assertion.tensor_near.negative", "Expected tensors not to be near:\n%s")
say:set("assertion.tensor_equal.positive", "Expected tensors to be equal:\n%s")
say:set("assertion.tensor_equal.negative", "Expected tensors to differ:\n%s")
say:set("assertion.error_matches.positive", "Expected a matching error:\n%s")
say:set("assertion.error_matches.negative", "Expected no matching error:\n%s")

luassert:register("assertion", "tensor_near", tensor_near,
  "assertion.tensor_near.positive", "assertion.tensor_near.negative")
luassert:register("assertion", "tensor_equal", tensor_equal,
  "assertion.tensor_equal.positive", "assertion.tensor_equal.negative")
luassert:register("assertion", "error_matches", error_matches,
  "assertion.error_matches.positive", "assertion.error_matches.negative")
require("helpers.coverage")
