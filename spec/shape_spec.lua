-- The shape ops (tril, triu, flip, roll, tile, repeat_interleave, pad in its four modes, diagonal, diag, diag_embed, unfold, movedim, one_hot, expand_as, view_as) against Lua loops in every dtype, on strided inputs, with their gradients, and bad input (a clear error naming the op and the argument, the input unchanged); the same values and gradients on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local S = require("helpers.shape_cases")

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

-- x of shape in dtype d: exact values (small integers, halves for floating dtypes), so every
-- dtype holds them and the ops, which only move elements, must give them back exactly
local function values(d, seed, shape)
  local rng = ref.rng(seed)
  return tl.tensor(ref.build(shape, function()
    if d == "bool" then return rng:int(0, 1) == 1 end
    if floating[d] then return rng:int(-8, 8) / 2 end
    return rng:int(-9, 9)
  end), { dtype = d })
end

-- the same elements laid out transposed in memory (a strided view of another buffer)
local function strided(x)
  if x:dim() < 2 then return x end
  return x:transpose(1, 2):contiguous():transpose(1, 2)
end

local function same(expected, got, what)
  assert.tensor_equal(expected, got:to("cpu"), what)
end

-- each case: a name, the input shape, the op on a tensor, its Lua reference on a nested table
local CASES = {
  { "tril", { 3, 4 }, function(x) return x:tril() end, function(t) return S.tril(t, 0) end },
  { "tril(-1) batched", { 2, 3, 3 }, function(x) return tl.tril(x, -1) end, function(t) return S.tril(t, -1) end },
  { "tril(2)", { 4, 3 }, function(x) return x:tril(2) end, function(t) return S.tril(t, 2) end },
  { "triu", { 3, 4 }, function(x) return x:triu() end, function(t) return S.tril(t, 0, true) end },
  { "triu(1) batched", { 2, 4, 3 }, function(x) return x:triu(1) end, function(t) return S.tril(t, 1, true) end },
  { "triu(-5)", { 3, 4 }, function(x) return x:triu(-5) end, function(t) return S.tril(t, -5, true) end },
  { "flip", { 3, 4 }, function(x) return x:flip(1) end, function(t) return S.flip(t, { 1 }) end },
  { "flip of two dims", { 2, 3, 4 }, function(x) return x:flip({ 3, -3 }) end, function(t) return S.flip(t, { 3, 1 }) end },
  { "flip varargs", { 3, 4 }, function(x) return tl.flip(x, 1, 2) end, function(t) return S.flip(t, { 1, 2 }) end },
  { "roll", { 3, 4 }, function(x) return x:roll(1, 2) end, function(t) return S.roll(t, { 1 }, { 2 }) end },
  { "roll of two dims", { 3, 4 }, function(x) return x:roll({ -1, 6 }, { 1, -1 }) end,
    function(t) return S.roll(t, { -1, 6 }, { 1, 2 }) end },
  { "roll of one dim twice", { 5, 2 }, function(x) return x:roll({ 2, 4 }, { 1, 1 }) end,
    function(t) return S.roll(t, { 6 }, { 1 }) end },
  { "roll flattened", { 3, 4 }, function(x) return x:roll(-5) end, function(t) return S.roll(t, { -5 }) end },
  { "tile", { 2, 3 }, function(x) return x:tile(2, 3) end, function(t) return S.tile(t, { 2, 3 }) end },
  { "tile with fewer reps", { 2, 3 }, function(x) return x:tile({ 2 }) end, function(t) return S.tile(t, { 2 }) end },
  { "tile with more reps", { 2, 3 }, function(x) return tl.tile(x, { 2, 1, 2 }) end,
    function(t) return S.tile(t, { 2, 1, 2 }) end },
  { "tile by ones (a copy)", { 2, 3 }, function(x) return x:tile(1, 1) end, function(t) return t end },
  { "repeat_interleave", { 2, 3 }, function(x) return x:repeat_interleave(2, 2) end,
    function(t) return S.repeat_interleave(t, 2, 2) end },
  { "repeat_interleave flattened", { 2, 3 }, function(x) return x:repeat_interleave(3) end,
    function(t) return S.repeat_interleave(t, 3) end },
  { "repeat_interleave by counts", { 4, 2 }, function(x)
      return x:repeat_interleave(tl.tensor({ 2, 0, 3, 1 }, { device = x.device }), 1)
    end, function(t) return S.repeat_interleave(t, { 2, 0, 3, 1 }, 1) end },
  { "repeat_interleave by int32 counts, last zero", { 2, 3 }, function(x)
      return x:repeat_interleave(tl.tensor({ 1, 2, 0 }, { dtype = "int32", device = x.device }), -1)
    end, function(t) return S.repeat_interleave(t, { 1, 2, 0 }, 2) end },
  { "repeat_interleave by one count", { 3 }, function(x)
      return x:repeat_interleave(tl.tensor({ 2 }, { device = x.device }))
    end, function(t) return S.repeat_interleave(t, 2) end },
  { "pad constant", { 3, 4 }, function(x) return tl.pad(x, { 1, 2 }) end,
    function(t) return S.pad(t, { 1, 2 }, "constant") end },
  { "pad constant two dims with a value", { 2, 3 }, function(x)
      return tl.pad(x, { 0, 1, 2, 1 }, { value = x.dtype == "bool" and 1 or 3 })
    end, function(t) return S.pad(t, { 0, 1, 2, 1 }, "constant", type(S.zero_of(t)) == "boolean" or 3) end },
  { "pad constant, negative pads cut", { 3, 4 }, function(x) return tl.pad(x, { -1, 2, 1, -2 }) end,
    function(t) return S.pad(t, { -1, 2, 1, -2 }, "constant") end },
  { "pad reflect", { 3, 4 }, function(x) return tl.nn.functional.pad(x, { 3, 2, 1, 2 }, { mode = "reflect" }) end,
    function(t) return S.pad(t, { 3, 2, 1, 2 }, "reflect") end },
  { "pad replicate", { 2, 3 }, function(x) return tl.pad(x, { 2, 4, 1, 0 }, { mode = "replicate" }) end,
    function(t) return S.pad(t, { 2, 4, 1, 0 }, "replicate") end },
  { "pad circular", { 2, 3 }, function(x) return tl.pad(x, { 3, 1, 0, 2 }, { mode = "circular" }) end,
    function(t) return S.pad(t, { 3, 1, 0, 2 }, "circular") end },
  { "pad of a 3-d tensor's last dim", { 2, 2, 3 }, function(x) return x:pad({ 1, 1 }, { mode = "reflect" }) end,
    function(t) return S.pad(t, { 1, 1 }, "reflect") end },
  { "diagonal", { 3, 4 }, function(x) return x:diagonal() end, function(t) return S.diagonal(t, 0, 1, 2) end },
  { "diagonal above", { 3, 4 }, function(x) return x:diagonal(2) end, function(t) return S.diagonal(t, 2, 1, 2) end },
  { "diagonal below, dims 3 and 1", { 4, 2, 3 }, function(x) return x:diagonal(-1, 3, 1) end,
    function(t) return S.diagonal(t, -1, 3, 1) end },
  { "diagonal past the corner", { 3, 4 }, function(x) return x:diagonal(5):contiguous() end,
    function(t) return S.diagonal(t, 5, 1, 2) end },
  { "diag of a matrix", { 3, 4 }, function(x) return tl.diag(x, 1) end, function(t) return S.diagonal(t, 1, 1, 2) end },
  { "diag of a vector", { 3 }, function(x) return x:diag(-1) end, function(t) return S.diag_embed(t, -1, 1, 2) end },
  { "diag_embed", { 2, 3 }, function(x) return tl.diag_embed(x) end, function(t) return S.diag_embed(t, 0, 2, 3) end },
  { "diag_embed offset, dims 1 and 3", { 2, 3 }, function(x) return x:diag_embed(2, 1, 3) end,
    function(t) return S.diag_embed(t, 2, 1, 3) end },
  { "diag_embed below, dims 3 and 2", { 2, 3 }, function(x) return x:diag_embed(-1, 3, 2) end,
    function(t) return S.diag_embed(t, -1, 3, 2) end },
  { "unfold", { 2, 7 }, function(x) return x:unfold(2, 3, 2) end, function(t) return S.unfold(t, 2, 3, 2) end },
  { "unfold overlapping, dim 1", { 5, 2 }, function(x) return tl.unfold(x, 1, 2, 1) end,
    function(t) return S.unfold(t, 1, 2, 1) end },
  { "unfold to empty windows", { 2, 3 }, function(x) return x:unfold(-1, 0, 1) end,
    function(t) return S.unfold(t, 2, 0, 1) end },
  { "movedim", { 2, 3, 4 }, function(x) return x:movedim(1, 3) end, function(t) return S.permute(t, { 2, 3, 1 }) end },
  { "movedim of two", { 2, 3, 4 }, function(x) return tl.movedim(x, { 3, 1 }, { 1, 2 }) end,
    function(t) return S.permute(t, { 3, 1, 2 }) end },
  { "expand_as", { 3, 1 }, function(x) return x:expand_as(tl.empty(2, 3, 4)) end,
    function(t) return ref.build({ 2, 3, 4 }, function(_, i) return t[i][1] end) end },
  { "view_as", { 3, 4 }, function(x) return x:contiguous():view_as(tl.empty(2, 6)) end,
    function(t) return ref.unflatten((ref.flatten(t)), { 2, 6 }) end },
}

local function compare(device)
  for _, d in ipairs(tl.dtypes) do
    it("every op in " .. d .. " matches its Lua loops, contiguous and strided", function()
      for i, case in ipairs(CASES) do
        local name, shape, op, reference = case[1], case[2], case[3], case[4]
        local x = values(d, 100 * i + #d, shape)
        local expected = reference(x:totable())
        same(expected, op(x:to(device)), name .. " in " .. d .. " on " .. device)
        same(expected, op(strided(x):to(device)), name .. " of a strided x in " .. d .. " on " .. device)
      end
    end)
  end

  it("one_hot of int64 and int32 indices, inferred or given classes", function()
    for _, d in ipairs({ "int64", "int32" }) do
      local idx = tl.tensor({ { 1, 3 }, { 4, 2 } }, { dtype = d })
      same(S.one_hot(idx:totable(), 4), tl.one_hot(idx:to(device)), "one_hot inferred " .. d)
      local got = tl.nn.functional.one_hot(idx:to(device), 6)
      assert.are.equal("int64", got.dtype)
      same(S.one_hot(idx:totable(), 6), got, "one_hot of 6 classes " .. d)
    end
  end)

  it("gradients match the CPU's (tril, flip, roll, tile, repeat_interleave, pad, diag_embed, unfold)", function()
    local fns = {
      function(x) return x:tril(-1) end, function(x) return x:flip({ 1, 2 }) end,
      function(x) return x:roll({ 1, 2 }, { 2, 1 }) end, function(x) return x:tile(2, 2) end,
      function(x) return x:repeat_interleave(tl.tensor({ 3, 0, 1 }, { device = x.device }), 1) end,
      function(x) return x:pad({ 2, 1, 1, 1 }, { mode = "reflect" }) end,
      function(x) return x:pad({ 1, 2 }, { mode = "replicate" }) end,
      function(x) return x:pad({ 1, -1 }, { value = 2 }) end,
      function(x) return x:diag_embed(1) end, function(x) return x:unfold(2, 2, 1) end,
      function(x) return x:diagonal(1) end,
    }
    for i, fn in ipairs(fns) do
      local x = values("float64", 7 + i, { 3, 4 })
      local w = values("float64", 70 + i, fn(x):size())
      local grads = {}
      for _, dev in ipairs({ "cpu", device }) do
        local leaf = x:detach():to(dev):requires_grad_()
        local y = fn(leaf) * w:to(dev)
        y:sum():backward()
        grads[dev] = leaf.grad:to("cpu")
      end
      assert.tensor_near(grads.cpu, grads[device], 1e-12, 1e-12, "gradient of case " .. i .. " on " .. device)
    end
  end)
end

describe("shape ops on the cpu", function()
  compare("cpu")

  it("copy: tile, repeat_interleave, pad and flip give new tensors; diagonal, unfold, movedim are views", function()
    local x = tl.zeros(2, 3)
    local copies = { x:tile(1, 1), x:repeat_interleave(1, 1), x:pad({ 0, 0 }), x:flip(1),
      x:pad({ 0, 0 }, { mode = "reflect" }), x:roll(0, 1), x:tril(5) }
    for _, y in ipairs(copies) do y:fill_(1) end
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, x:totable())
    x:diagonal():fill_(1)
    x:unfold(2, 2, 1):select(2, 2):select(2, 2):fill_(2)
    x:movedim(1, 2):select(1, 2):fill_(3)
    assert.are.same({ { 1, 3, 2 }, { 0, 3, 2 } }, x:totable())
  end)

  it("gradients against finite differences: diag and every pad mode at the edges", function()
    local gradcheck = tl.autograd.gradcheck
    local function input(...) return tl.randn(...):double():requires_grad_() end
    assert.is_true(gradcheck(function(x) return tl.diag(x, -1) end, { input(3, 4) }))
    assert.is_true(gradcheck(function(x) return tl.diag(x, 2) end, { input(3) }))
    assert.is_true(gradcheck(function(x) return tl.pad(x, { 2, 2 }, { mode = "reflect" }) end, { input(3) }))
    assert.is_true(gradcheck(function(x) return tl.pad(x, { 3, 3 }, { mode = "circular" }) end, { input(3) }))
    assert.is_true(gradcheck(function(x) return tl.pad(x, { -2, 3 }) end, { input(2, 3) }))
    assert.is_true(gradcheck(function(x) return x:repeat_interleave(2) end, { input(2, 2) }))
    assert.is_true(gradcheck(function(x) return x:tile(2) end, { input(3) }))
  end)

  it("a composition whose recorded step fails (a stale view) raises that step's error, nothing released twice",
    function()
      local base = tl.randn(2, 3, { requires_grad = true }):mul(1)
      local v = base:view(6)
      base:add_(1)
      for _, run in ipairs({ function() return v:tile({ 0, 2 }) end, function() return v:repeat_interleave(2) end }) do
        local ok, message = pcall(run)
        assert.is_false(ok)
        assert.truthy(message:find("reshape: input 1 is a view (made by 'view') of a tensor that was changed in place",
          1, true), message)
      end
    end)

  it("rejects bad input naming the op and the argument, the input unchanged", function()
    local x = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    local before = x:totable()
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, tostring(err), 1, true)
      assert.are.same(before, x:totable())
    end
    fails("tril: expected a tensor of at least 2 dims, got 1", function() return tl.ones(3):tril() end)
    fails("triu: argument 1 (k) expected an integer, got string", function() return x:triu("a") end)
    fails("flip: dim 1 appears twice in dims", function() return x:flip({ 1, -2 }) end)
    fails("flip: dim 3 is out of range", function() return x:flip(3) end)
    fails("roll: got 2 shifts for 1 dims", function() return x:roll({ 1, 2 }, 1) end)
    fails("roll: without dims expected one shift, got 2", function() return x:roll({ 1, 2 }) end)
    fails("roll: dim -3 is out of range", function() return x:roll(1, -3) end)
    fails("tile: reps[1] is -1, expected >= 0", function() return x:tile({ -1, 2 }) end)
    fails("repeat_interleave: repeats must be >= 0, got -1", function() return x:repeat_interleave(-1, 1) end)
    fails("repeat_interleave: repeats must be >= 0, got -2",
      function() return x:repeat_interleave(tl.tensor({ 1, -2 }), 1) end)
    fails("repeat_interleave: repeats must be 1-d with one count per slice (3) or one count, got 2 counts",
      function() return x:repeat_interleave(tl.tensor({ 1, 2 }), 2) end)
    fails("repeat_interleave: repeats must be an int64 or int32 tensor, got float32",
      function() return x:repeat_interleave(tl.tensor({ 1.0, 2.0 }), 1) end)
    fails("pad: expected an even number of pads, two per padded dim, at most 4 for a tensor of 2 dims, got 3",
      function() return x:pad({ 1, 1, 1 }) end)
    fails("pad: expected an even number of pads", function() return x:pad({ 1, 1, 1, 1, 1, 1 }) end)
    fails("pad: pads 3 and 0 do not fit dim 2 of size 3 in reflect mode (expected each < the size)",
      function() return x:pad({ 3, 0 }, { mode = "reflect" }) end)
    fails("pad: pads 0 and 4 do not fit dim 2 of size 3 in circular mode (expected each <= the size)",
      function() return x:pad({ 0, 4 }, { mode = "circular" }) end)
    fails("pad: reflect mode takes pads >= 0, got -1 and 0 for dim 2",
      function() return x:pad({ -1, 0 }, { mode = "reflect" }) end)
    fails("pad: pads 1 and 1 do not fit dim 2 of size 0 in replicate mode (expected a dim with elements)",
      function() return tl.ones(2, 0):pad({ 1, 1 }, { mode = "replicate" }) end)
    fails("pad: dim 2 of size 3 padded by -2 and -2 has no valid size", function() return x:pad({ -2, -2 }) end)
    fails("pad: unknown mode 'mirror' (expected constant, reflect, replicate or circular)",
      function() return x:pad({ 1, 1 }, { mode = "mirror" }) end)
    fails("pad: a value is only used by constant mode, got mode 'reflect'",
      function() return x:pad({ 1, 1 }, { mode = "reflect", value = 2 }) end)
    fails("diagonal: dim1 and dim2 are both dim 2", function() return x:diagonal(0, 2, -1) end)
    fails("diagonal: expected a tensor of at least 2 dims, got 1", function() return tl.ones(3):diagonal() end)
    fails("diag: expected a 1-d or 2-d tensor, got 3 dims", function() return tl.diag(tl.ones(2, 2, 2)) end)
    fails("diag_embed: dim1 and dim2 are both dim 3", function() return x:diag_embed(0, 3, -1) end)
    fails("unfold: size 4 does not fit dim 2 of size 3 (expected 0 to 3)", function() return x:unfold(2, 4, 1) end)
    fails("unfold: step must be > 0, got 0", function() return x:unfold(2, 2, 0) end)
    fails("movedim: source dim 1 appears twice", function() return x:movedim({ 1, -2 }, { 1, 2 }) end)
    fails("movedim: destination dim 2 appears twice", function() return x:movedim({ 1, 2 }, { 2, 2 }) end)
    fails("movedim: got 2 source dims and 1 destinations", function() return x:movedim({ 1, 2 }, 1) end)
    fails("one_hot: index holds 4 at position 2", function() return tl.one_hot(tl.tensor({ 1, 4 }), 3) end)
    fails("one_hot: index holds 0", function() return tl.one_hot(tl.tensor({ 0, 1 })) end)
    fails("one_hot: index must be an int64 or int32 tensor", function() return tl.one_hot(tl.tensor({ 1.0 })) end)
    fails("one_hot: cannot infer the number of classes from an empty index",
      function() return tl.one_hot(tl.zeros(0, { dtype = "int64" })) end)
    fails("view: shape [2, 3] has 6 elements, the requested shape 4", function() return x:view_as(tl.ones(4)) end)
    fails("expand: dim 2 of shape [2, 3] has size 3, which cannot be expanded to 4",
      function() return x:expand_as(tl.ones(2, 4)) end)
  end)
end)

describe("shape ops on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of the shape ops did not run")
    return
  end
  compare("cuda")

  it("an index out of one_hot's range is raised at the next synchronization, in Lua's terms", function()
    local ok, err = pcall(function() return tl.one_hot(tl.tensor({ 1, 5 }, { device = "cuda" }), 3):to("cpu") end)
    assert.is_false(ok)
    assert.matches("one_hot: index holds 5", err, 1, true)
  end)
end)
