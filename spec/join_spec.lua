-- tl.cat and tl.stack against Lua loops: every dtype, each dim (negative ones too), strided
-- pieces, empty pieces skipped as torch skips them; their gradients (each piece's is a slice of
-- the result's) against finite differences; bad input is a clear error naming the op. The same
-- comparisons run on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }

local function values(d, rng, shape)
  return tl.tensor(ref.build(shape, function()
    if d == "bool" then return rng:int(0, 1) == 1 end
    if d == "int32" or d == "int64" then return rng:int(-9, 9) end
    return rng:int(-8, 8) / 4 -- exact in every floating dtype
  end), { dtype = d })
end

-- the Lua join of nested tables along dim (1-based)
local function join(pieces, dim)
  local function at(depth, tables)
    if depth == dim then
      local out = {}
      for _, t in ipairs(tables) do
        for _, v in ipairs(t) do out[#out + 1] = v end
      end
      return out
    end
    local out = {}
    for i = 1, #tables[1] do
      local sub = {}
      for k, t in ipairs(tables) do sub[k] = t[i] end
      out[i] = at(depth + 1, sub)
    end
    return out
  end
  return at(1, pieces)
end

local function compare(device)
  for _, d in ipairs(DTYPES) do
    it("cat and stack in " .. d .. " match the Lua join", function()
      local rng = ref.rng(#d * 31)
      for dim = 1, 3 do
        local shapes = { { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 } }
        shapes[2][dim] = 1
        shapes[3][dim] = 5
        local pieces, stored = {}, {}
        for i, s in ipairs(shapes) do
          pieces[i] = values(d, rng, s)
          stored[i] = pieces[i]:totable()
        end
        local on = {}
        for i, p in ipairs(pieces) do on[i] = p:to(device) end
        on[2] = pieces[2]:transpose(1, 3):contiguous():transpose(1, 3):to(device) -- a strided piece
        local expected = join(stored, dim)
        assert.tensor_equal(expected, tl.cat(on, dim):to("cpu"), d .. " cat dim " .. dim)
        assert.tensor_equal(expected, tl.cat(on, dim - 4):to("cpu"), d .. " cat dim " .. (dim - 4))
        -- empty pieces of any shape are skipped
        local with_empty = { tl.zeros({ 0 }, { device = device }), on[1], tl.zeros({ 2, 0 }, { device = device }), on[2], on[3] }
        assert.tensor_equal(expected, tl.cat(with_empty, dim):to("cpu"), d .. " cat with empty pieces")
      end
      local a, b = values(d, rng, { 2, 3 }), values(d, rng, { 2, 3 })
      local ta, tb = a:totable(), b:totable()
      local stacked = tl.stack({ a:to(device), b:to(device) }):to("cpu")
      assert.tensor_equal({ ta, tb }, stacked, d .. " stack dim 1")
      local last = tl.stack({ a:to(device), b:to(device) }, -1):to("cpu")
      assert.tensor_equal(ref.build({ 2, 3, 2 }, function(i, j, k) return (k == 1 and ta or tb)[i][j] end), last,
        d .. " stack dim -1")
    end)
  end
end

describe("cat and stack on the cpu", function()
  compare("cpu")

  it("gradients: each piece's is its slice of the result's (against finite differences)", function()
    local gradcheck = tl.autograd.gradcheck
    local function input(...) return tl.randn(...):double():requires_grad_() end
    assert.is_true(gradcheck(function(a, b, c) return tl.cat({ a, b, c }, 2) end, { input(2, 1), input(2, 3), input(2, 2) }))
    assert.is_true(gradcheck(function(a, b) return tl.stack({ a, b }, 2) end, { input(3), input(3) }))
    -- a piece that does not require grad gets none; an empty one a zero gradient of its shape
    local a, b = input(2, 2), tl.randn(2, 1):double()
    local e = tl.zeros({ 0 }, { dtype = "float64" }):requires_grad_()
    tl.cat({ a, e, b }, 2):sum():backward()
    assert.tensor_equal(tl.ones(2, 2):double(), a.grad)
    assert.is_nil(b.grad)
    assert.are.same({ 0 }, e.grad.shape)
  end)

  it("rejects bad input with the op, the argument and what was expected", function()
    local a = tl.ones(2, 3)
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, err, 1, true)
    end
    fails("cat: expected a non-empty list of tensors, got 0", function() return tl.cat({}) end)
    fails("cat: tensor 2 has shape [2, 4], expected tensor 1's shape [2, 3] but along dim 1",
      function() return tl.cat({ a, tl.ones(2, 4) }) end)
    fails("cat: tensor 2 has dtype float64, expected float32 (tensor 1's)",
      function() return tl.cat({ a, tl.ones({ 2, 3 }, { dtype = "float64" }) }) end)
    fails("cat: dim 3 is out of range", function() return tl.cat({ a, a }, 3) end)
    fails("cat: cannot join 0-dim tensors", function() return tl.cat({ tl.tensor(1.0), tl.tensor(2.0) }) end)
    fails("cat: list[2] expected a tensor, got number", function() return tl.cat({ a, 3 }) end)
    fails("stack: tensor 2 has shape [3, 2], expected tensor 1's shape [2, 3]", function() return tl.stack({ a, tl.ones(3, 2) }) end)
    fails("stack: expected a non-empty list of tensors", function() return tl.stack({}) end)
  end)
end)

describe("cat and stack on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of cat and stack did not run")
    return
  end
  compare("cuda")

  it("refuses pieces on two devices", function()
    local ok, err = pcall(function() return tl.cat({ tl.ones(2), tl.ones(2, { device = "cuda" }) }) end)
    assert.is_false(ok)
    assert.matches("cat: tensor 2 is on cuda:0, expected cpu (tensor 1's)", err, 1, true)
  end)
end)
