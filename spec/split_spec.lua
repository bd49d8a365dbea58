-- x:split, x:chunk and x:unbind against Lua slicing: every dtype, each dim (negative ones too),
-- torch's piece counts, views of x; their one-node backward (each piece's gradient in its slice of
-- one buffer, a view without a kernel when the gradients already lie side by side, as attention's
-- q, k and v do) against finite differences and the kernels tl.trace sees; bad input is a clear
-- error. The same comparisons run on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }

local function values(d, rng, shape, device)
  return tl.tensor(ref.build(shape, function()
    if d == "bool" then return rng:int(0, 1) == 1 end
    if d == "int32" or d == "int64" then return rng:int(-9, 9) end
    return rng:int(-8, 8) / 4 -- exact in every floating dtype
  end), { dtype = d, device = device })
end

-- the Lua slice of nested table t along dim (1-based) from first to last (keep = false: the one
-- index first, without the dim)
local function slice(t, dim, first, last, keep)
  local function at(depth, sub)
    if depth == dim then
      if not keep then return sub[first] end
      local out = {}
      for i = first, last do out[#out + 1] = sub[i] end
      return out
    end
    local out = {}
    for i = 1, #sub do out[i] = at(depth + 1, sub[i]) end
    return out
  end
  return at(1, t)
end

local function lengths(pieces, dim)
  local out = {}
  for i, p in ipairs(pieces) do out[i] = p.shape[dim] end
  return out
end

local function check_pieces(pieces, stored, dim, sizes, what)
  assert.are.equal(#sizes, #pieces, what .. ": number of pieces")
  local at = 1
  for i, size in ipairs(sizes) do
    assert.are.equal(size, pieces[i].shape[dim], what .. ": piece " .. i .. "'s size")
    if size > 0 then
      assert.tensor_equal(slice(stored, dim, at, at + size - 1, true), pieces[i]:to("cpu"), what .. " piece " .. i)
    end
    at = at + size
  end
end

local function compare(device)
  for _, d in ipairs(DTYPES) do
    it("split, chunk and unbind in " .. d .. " match Lua slices", function()
      local rng = ref.rng(#d * 17)
      local shape = { 5, 4, 6 }
      local x = values(d, rng, shape, device)
      local stored = x:to("cpu"):totable()
      for dim = 1, 3 do
        local n = shape[dim]
        -- split(size): pieces of size, the last what is left (torch's counts)
        local sizes = {}
        for at = 1, n, 2 do sizes[#sizes + 1] = math.min(2, n - at + 1) end
        check_pieces(x:split(2, dim), stored, dim, sizes, d .. " split(2) dim " .. dim)
        check_pieces(tl.split(x, 2, dim - 4), stored, dim, sizes, d .. " split(2) dim " .. (dim - 4))
        -- split(sizes), a zero size among them
        local given = { 1, 0, n - 1 }
        check_pieces(x:split(given, dim), stored, dim, given, d .. " split sizes dim " .. dim)
        -- chunk(3): ceil(n / 3) each, so 4 into 3 gives 2, 2 and 6 into 4 gives 2, 2, 2
        local per = (n + 2) // 3
        local chunks = {}
        for at = 1, n, per do chunks[#chunks + 1] = math.min(per, n - at + 1) end
        check_pieces(x:chunk(3, dim), stored, dim, chunks, d .. " chunk(3) dim " .. dim)
        -- unbind: each slice without the dim
        local slices = x:unbind(dim)
        assert.are.equal(n, #slices)
        for i = 1, n do
          assert.tensor_equal(slice(stored, dim, i, i, false), slices[i]:to("cpu"), d .. " unbind " .. i)
        end
      end
      -- the pieces are views: a later write to x shows through them
      local pieces = x:split(3)
      x:fill_(d == "bool" and true or 1)
      assert.tensor_equal(ref.build({ 3, 4, 6 }, function() return d == "bool" and true or 1 end), pieces[1]:to("cpu"))
      -- an empty dim: split gives one empty piece, chunk(3) three, unbind none
      local e = tl.zeros({ 0, 2 }, { dtype = d, device = device })
      assert.are.same({ 0 }, lengths(e:split(2), 1))
      assert.are.same({ 0, 0, 0 }, lengths(e:chunk(3), 1))
      assert.are.equal(0, #e:unbind(1))
      assert.are.same({ 2, 2, 2 }, lengths(tl.zeros({ 6 }, { dtype = d, device = device }):chunk(4), 1))
    end)
  end

  it("gradients against finite differences: pieces used, unused, reused", function()
    local gradcheck = tl.autograd.gradcheck
    local function input(...) return tl.randn(...):double():to(device):requires_grad_() end
    assert.is_true(gradcheck(function(x)
      local p = x:split({ 1, 2, 2 }, 2)
      return p[1] * 3 + p[3]:sum(2, true), p[2]:exp()
    end, { input(3, 5) }))
    assert.is_true(gradcheck(function(x)
      local p = x:chunk(2, -1)
      return p[2] * p[2] -- the first piece unused: a zero gradient in its slice
    end, { input(2, 4) }))
    assert.is_true(gradcheck(function(x)
      local s = x:unbind(1)
      return s[1] * s[3] + s[1]
    end, { input(3, 4) }))
  end)

  it("backward writes each piece's gradient into one buffer, and adopts one already joined", function()
    local x = tl.randn(6, 4, { device = device }):requires_grad_()
    local w = x * 1 -- a non-leaf, so that x's gradient is the mul's and nothing is cloned for it
    local p = w:split(2)
    local loss = (p[1] * 2):sum() + (p[3] * 3):sum()
    local events = tl.trace(function() loss:backward() end)
    local copies = 0
    for _, e in ipairs(events) do
      if e.op == "cast" then copies = copies + 1 end -- copy_ runs the cast kernels
      assert.is_not.equal("add", e.op, "no full-size gradient is added up per piece")
    end
    -- p[2]'s gradient is a zero piece the engine made; the three pieces are copied into place
    assert.are.equal(3, copies)
    local expected = ref.build({ 6, 4 }, function(i) return i <= 2 and 2 or i <= 4 and 0 or 3 end)
    assert.tensor_equal(expected, x.grad:to("cpu"))

    -- pieces whose gradients are slices of one buffer in order (cat's backward makes them): the
    -- input's gradient is that buffer, no kernel
    x.grad = nil
    local y = tl.cat((x * 1):split({ 1, 3, 2 }), 1)
    local g = tl.randn(6, 4, { device = device })
    events = tl.trace(function() y:backward(g) end)
    for _, e in ipairs(events) do assert.is_not.equal("cast", e.op, "no copy joins adjacent pieces") end
    assert.tensor_equal(g:to("cpu"), x.grad:to("cpu"))
    -- out of order, they are copied into a new buffer
    x.grad = nil
    local q = (x * 1):split({ 1, 3, 2 })
    y = tl.cat({ q[3], q[1], q[2] }, 1)
    y:backward(g)
    local gt = g:to("cpu"):totable()
    assert.tensor_equal(ref.build({ 6, 4 }, function(i, j)
      if i == 1 then return gt[3][j] elseif i <= 4 then return gt[i + 2][j] else return gt[i - 4][j] end
    end), x.grad:to("cpu"))
  end)

  it("attention's q, k and v unbound from one projection cost no kernel in backward", function()
    local B, T, H, D = 2, 5, 2, 4
    local C = H * D
    local function run(cut)
      tl.manual_seed(3)
      local w = tl.randn(3 * C, C, { dtype = "float64", device = device }):requires_grad_()
      local x = tl.randn(B, T, C, { dtype = "float64", device = device })
      local qkv = tl.nn.functional.linear(x, w):view(B, T, 3, H, D)
      local q, k, v = cut(qkv)
      local y = tl.scaled_dot_product_attention(q:transpose(2, 3), k:transpose(2, 3), v:transpose(2, 3), { causal = true })
      local loss = (y * y):sum()
      local events = tl.trace(function() loss:backward() end)
      return w.grad:to("cpu"), events
    end
    local grad, events = run(function(qkv) return table.unpack(qkv:unbind(3)) end)
    local seen = {}
    for _, e in ipairs(events) do seen[#seen + 1] = e.op end
    -- the seed, y * y's backward, attention's and the projection's: nothing between the last two
    assert.are.same({ "fill", "mul", "mul", "add", "scaled_dot_product_attention_backward",
      "linear_backward_weight" }, seen)
    -- the same gradient as q, k, v copied apart (select's backward, another path)
    local apart = run(function(qkv)
      return qkv:select(3, 1):contiguous(), qkv:select(3, 2):contiguous(), qkv:select(3, 3):contiguous()
    end)
    assert.tensor_near(apart, grad, 1e-12, 1e-12)
  end)
end

describe("split, chunk and unbind on the cpu", function()
  compare("cpu")

  it("rejects bad input with the op, the argument and what was expected", function()
    local x = tl.ones(4, 3)
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, err, 1, true)
    end
    fails("split: size 0 cannot cut dim 1 of size 4 (expected a size >= 1, or 0 for an empty dim)",
      function() return x:split(0) end)
    fails("split: size -1 cannot cut dim 1 of size 4", function() return x:split(-1) end)
    fails("split: the sizes add up to 3, expected dim 1's size 4", function() return x:split({ 1, 2 }) end)
    fails("split: size 2 is -1, expected a size >= 0", function() return x:split({ 5, -1 }) end)
    fails("split: sizes[2] expected an integer, got string", function() return x:split({ 1, "a" }) end)
    fails("split: expected 1 to 65536 sizes, got 0", function() return x:split({}) end)
    fails("split: dim 3 is out of range", function() return x:split(1, 3) end)
    fails("split: expected a tensor with at least 1 dim, got a 0-dim one", function() return tl.tensor(1.0):split(1) end)
    fails("chunk: expected a number of chunks >= 1, got 0", function() return x:chunk(0) end)
    fails("chunk: 70000 chunks of dim 1 (size 0) make 70000 pieces, more than 65536",
      function() return tl.zeros(0, 2):chunk(70000) end)
    fails("chunk: dim -3 is out of range", function() return x:chunk(2, -3) end)
    fails("unbind: dim 3 is out of range", function() return x:unbind(3) end)
    fails("unbind: expected a tensor with at least 1 dim", function() return tl.tensor(1.0):unbind() end)
    -- a piece of a tensor that requires grad cannot change in place (as torch)
    local p = tl.ones(4, 3):requires_grad_():split(2)
    fails("mul_: x is a view (made by 'split') of a tensor that requires grad", function() p[1]:mul_(2) end)
  end)
end)

describe("split, chunk and unbind on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of split, chunk and unbind did not run")
    return
  end
  compare("cuda")
end)
