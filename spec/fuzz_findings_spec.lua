-- Defects the API fuzzer (fuzz/api, scripts/fuzz) found, each kept as a spec with other values:
-- conv2d output sizes, option errors, integer overflow on store, save/load symmetry, Module:to,
-- the last index of an unbounded index range.
local tl = require("tlua")

describe("fuzzer findings", function()
  it("conv2d: a padding whose output plane cannot be counted is an error, not an overflow", function()
    local x, w = tl.zeros(1, 2, 4, 4), tl.zeros(3, 2, 1, 1)
    assert.has_error(function() tl.conv2d(x, w, nil, { padding = 1 << 40 }) end,
      "conv2d: input [1, 2, 4, 4] and weight [3, 2, 1, 1] with padding 1099511627776 x " ..
      "1099511627776 give an output of 2199023255556 x 2199023255556 per channel, too large to " ..
      "compute")
    local y = tl.conv2d(tl.ones(1, 2, 4, 4), tl.ones(3, 2, 1, 1), nil, { padding = 2 })
    assert.are.same({ 1, 3, 8, 8 }, y.shape)
    assert.are.equal(3 * 2 * 16, y:sum():item())
  end)

  it("names an option by its name, not by a stack index", function()
    local loss = tl.ones(3, { requires_grad = true }):sum()
    assert.has_error(function() loss:backward({ retain_graph = "yes" }) end,
      "backward: option retain_graph expected a boolean, got string")
    assert.has_error(function() tl.conv2d(tl.zeros(1, 1, 3, 3), tl.zeros(1, 1, 1, 1), nil, { stride = 1.5 }) end)
    local ok, message = pcall(tl.conv2d, tl.zeros(1, 1, 3, 3), tl.zeros(1, 1, 1, 1), nil, { stride = 1.5 })
    assert.is_false(ok)
    assert.is_nil(message:find("argument %-"))
  end)

  it("refuses to store a number an integer dtype cannot hold (fill, full, index assignment)", function()
    assert.has_error(function() tl.full({ 2 }, 3e9, { dtype = "int32" }) end,
      "full: value 3e+09 cannot be converted to int32 without overflow")
    assert.has_error(function() tl.zeros(2, { dtype = "int64" }):fill_(2 ^ 64) end,
      "fill_: value 1.84467e+19 cannot be converted to int64 without overflow")
    assert.has_error(function() tl.zeros(2, { dtype = "int64" }):fill_(-math.huge) end)
    local t = tl.tensor({ 5, 6 }, { dtype = "int32" })
    assert.has_error(function() t[2] = 1 << 40 end,
      "set: value 1099511627776 cannot be converted to int32 without overflow")
    assert.are.equal(6, t[2]) -- unchanged
    t[2] = -2147483648.7      -- the integer part fits: truncated toward zero
    assert.are.equal(-2147483648, t[2])
    assert.are.equal(math.mininteger, tl.full({ 1 }, -2 ^ 63, { dtype = "int64" }):item())
  end)

  it("does not save what load cannot read back (sizes from 2^53 on)", function()
    local path = os.tmpname()
    os.remove(path)
    assert.has_error(function() tl.save(path, { a = tl.zeros(0, (1 << 53) + 8) }) end,
      "save: '" .. path .. "': tensor 'a': dim 2 has size 9007199254741000, at least 2^53, which " ..
      "JSON readers cannot read exactly")
    assert.is_nil(io.open(path, "rb"))
    tl.save(path, { b = tl.zeros(0, (1 << 53) - 1) })
    local back = tl.load(path)
    assert.are.same({ 0, (1 << 53) - 1 }, back.b.shape)
    os.remove(path)
  end)

  it("Module:to converts all or nothing", function()
    local m = tl.nn.Sequential(tl.nn.Linear(3, 2), tl.nn.Linear(2, 2))
    local params = m:parameters()
    tl.release(params[4])
    assert.has_error(function() m:to("float64") end)
    for i = 1, 3 do assert.are.equal("float32", m:parameters()[i].dtype) end
  end)

  it("an index range without an upper end (bincount's bins) names its last index without overflow", function()
    local ok, err = pcall(tl.bincount, tl.tensor({ 2, 0, 1 }))
    assert.is_false(ok)
    assert.matches("bincount: bins holds 0 at position 2 (shape [3]), out of range for the bins (values >= 1) "
      .. "(expected 1 <= index <= 9223372036854775807", err, 1, true)
  end)

  it("split and chunk by a size near 2^63 give one piece each, without overflow", function()
    assert.are.equal(1, #tl.ones(35):split(math.maxinteger))
    assert.are.equal(35, #tl.ones(35):chunk(math.maxinteger)) -- pieces of 1, as torch
  end)

  it("stack whose recording fails leaves every tensor alive (no second release)", function()
    local b = tl.randn(3):requires_grad_() * 1
    local v = b:narrow(1, 1, 2)
    b:mul_(2) -- v's history is now stale: recording its unsqueeze fails
    local ok, err = pcall(tl.stack, { v, v })
    assert.is_false(ok)
    assert.matches("stack: input 1 is a view (made by 'narrow')", err, 1, true)
    collectgarbage()
    assert.are.same({ 2 }, v.shape)
    assert.are.same({ 3 }, b.shape)
  end)
end)
