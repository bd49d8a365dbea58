-- Size arithmetic at the edges: element counts, strides, start + length and window geometry are
-- checked for overflow (engine/core/size.c), so huge or wrapping sizes are clear errors, never a
-- wrapped count, a write outside the buffer or a wrong shape.
local tl = require("tlua")

local function shape_of(t)
  local s = {}
  for i = 1, t:dim() do s[i] = t:size(i) end
  return s
end

describe("element counts and strides", function()
  it("refuses shapes whose sizes multiply past 2^62, zero sizes counted as 1", function()
    assert.has_error(function() tl.zeros(0, 2 ^ 40, 2 ^ 23) end,
      "zeros: shape [0, 1099511627776, 8388608] has too many elements (at most 2^62, zero sizes " ..
      "counted as 1)")
    assert.has_error(function() tl.zeros(3 * 2 ^ 30, 0, 2 ^ 33) end,
      "zeros: shape [3221225472, 0, 8589934592] has too many elements (at most 2^62, zero sizes " ..
      "counted as 1)")
    assert.has_error(function() tl.empty(0, math.maxinteger) end)
  end)

  it("accepts an empty tensor whose other sizes still fit, with strides that fit", function()
    local t = tl.zeros(0, 2 ^ 30, 2 ^ 31)
    assert.are.same({ 0, 2 ^ 30, 2 ^ 31 }, shape_of(t))
    assert.are.equal(0, t:numel())
    assert.are.same({ 1 << 61, 1 << 31, 1 }, t:stride())
    assert.are.equal(1 << 31, t:stride(-2))
  end)

  it("checks a view's requested shape before comparing element counts", function()
    local e = tl.zeros(0)
    assert.has_error(function() e:view(2 ^ 33, 2 ^ 31) end,
      "view: shape [8589934592, 2147483648] has too many elements (at most 2^62, zero sizes " ..
      "counted as 1)")
    assert.has_error(function() e:reshape(2 ^ 20, 2 ^ 44) end,
      "reshape: shape [1048576, 17592186044416] has too many elements (at most 2^62, zero sizes " ..
      "counted as 1)")
    -- 2^32 * 2^32 wraps to 0 in 64 bits: the count that matched before
    assert.has_error(function() e:view(2 ^ 32, 2 ^ 32) end)
    assert.are.same({ 0, 5 }, shape_of(e:view(-1, 5)))
  end)

  it("checks an expanded shape", function()
    local t = tl.ones(1, 8)
    assert.has_error(function() t:expand(2 ^ 60, 8) end,
      "expand: shape [1152921504606846976, 8] has too many elements (at most 2^62, zero sizes " ..
      "counted as 1)")
    local e = t:expand(2 ^ 20, 8)
    assert.are.equal(2 ^ 23, e:numel())
    assert.are.equal(2 ^ 23, e:sum():item())
  end)
end)

describe("narrow", function()
  it("refuses a start + length past the end without forming the overflowing sum", function()
    local t = tl.zeros(6)
    assert.has_error(function() t:narrow(1, math.maxinteger - 1, 3):fill_(1) end,
      "narrow: start 9223372036854775806 and length 3 do not lie within dim 1 of size 6 " ..
      "(expected 1 <= start and start + length - 1 <= 6)")
    assert.has_error(function() t:narrow(1, 3, math.maxinteger) end,
      "narrow: start 3 and length 9223372036854775807 do not lie within dim 1 of size 6 " ..
      "(expected 1 <= start and start + length - 1 <= 6)")
    assert.has_error(function() t:narrow(1, 2, -1) end)
    assert.are.equal(0, t:sum():item()) -- nothing was written
  end)

  it("still takes every legal range, including an empty one at the end", function()
    local t = tl.arange(1, 7)
    local n = t:narrow(1, 4, 3)
    assert.are.same({ 4, 5, 6 }, { n[1], n[2], n[3] })
    assert.are.equal(0, t:narrow(1, 7, 0):numel())
  end)
end)

describe("window geometry (conv2d, max_pool2d)", function()
  local x = tl.ones(1, 1, 5, 5)
  local w = tl.ones(1, 1, 3, 3)

  it("refuses paddings and kernels whose arithmetic would overflow", function()
    assert.has_error(function() tl.conv2d(x, w, nil, { padding = math.maxinteger - 3 }) end,
      "conv2d: height: size 5 with padding 9223372036854775804, kernel 3 and dilation 1 is too large")
    assert.has_error(function() tl.max_pool2d(x, (1 << 62) + 1) end,
      "max_pool2d: height: size 5 with padding 0, kernel 4611686018427387905 and dilation 1 is " ..
      "too large")
    assert.has_error(function() tl.max_pool2d(x, 3, { padding = 2 ^ 61 }) end)
  end)

  it("computes the output size floor((H + 2p - k) / s) + 1 for large strides", function()
    local y = tl.conv2d(x, w, nil, { stride = math.maxinteger, padding = 1 })
    assert.are.same({ 1, 1, 1, 1 }, shape_of(y))
    assert.are.equal(4, y[1][1][1][1]) -- the top-left window covers 2x2 ones
    local p = tl.max_pool2d(x, 2, { stride = math.maxinteger })
    assert.are.same({ 1, 1, 1, 1 }, shape_of(p))
    local q = tl.conv2d(x, w, nil, { stride = 2, padding = 2 })
    assert.are.same({ 1, 1, 4, 4 }, shape_of(q)) -- (5 + 4 - 3) / 2 + 1
  end)

  it("refuses a window larger than the padded input", function()
    assert.has_error(function() tl.conv2d(tl.ones(1, 1, 2, 2), w) end,
      "conv2d: height: the window (kernel 3, dilation 1) is larger than the padded input (size 2, " ..
      "padding 0)")
  end)
end)

describe("totable of an empty tensor with a huge dim", function()
  it("refuses instead of building one empty table per row", function()
    local t0 = os.clock()
    assert.has_error(function() tl.zeros(2 ^ 35, 0):totable() end,
      "totable: shape [34359738368, 0] needs more than 268435456 nested tables")
    assert.is_true(os.clock() - t0 < 1)
    local rows = tl.zeros(4, 0):totable()
    assert.are.same({ {}, {}, {}, {} }, rows)
    assert.are.same({}, tl.zeros(0, 2 ^ 35):totable())
  end)
end)
