-- tl.einsum and tl.tensordot against the sums of their definitions in Lua loops (every floating dtype; diagonals, traces, ellipses, broadcasting, implicit outputs, three operands), their gradients, what they lower to (one batched matmul over views for attention's scores), bad specs; tl.meshgrid, isclose, allclose and equal against Lua; the same values on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local S = require("helpers.shape_cases")
local trace = require("helpers.trace")

local TOL = { float64 = 1e-12, float32 = 1e-5, bfloat16 = 2e-2, float16 = 4e-3 }

local function values(d, seed, shape)
  local rng = ref.rng(seed)
  return tl.tensor(ref.build(shape, function() return rng:uniform(-1, 1) end), { dtype = d })
end

-- { the spec tl.einsum gets, the explicit spec of the reference, operand shapes }
local CASES = {
  { "bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", { { 2, 3, 4, 5 }, { 2, 3, 6, 5 } } },
  { "ij,jk->ik", "ij,jk->ik", { { 3, 4 }, { 4, 2 } } },
  { "ij,jk", "ij,jk->ik", { { 3, 4 }, { 4, 2 } } },                -- implicit output
  { "ba,ca", "ba,ca->bc", { { 3, 4 }, { 2, 4 } } },                 -- implicit: sorted labels
  { "ij->ji", "ij->ji", { { 3, 4 } } },
  { "ii->i", "ii->i", { { 3, 3 } } },
  { "ii", "ii->", { { 4, 4 } } },                                   -- a trace
  { "iij->j", "iij->j", { { 3, 3, 2 } } },
  { "ij->", "ij->", { { 3, 4 } } },
  { "i,i->", "i,i->", { { 5 }, { 5 } } },
  { "i,j->ij", "i,j->ij", { { 3 }, { 4 } } },
  { "bij,bjk->bik", "bij,bjk->bik", { { 2, 3, 4 }, { 2, 4, 5 } } },
  { "bij,jk->bik", "bij,jk->bik", { { 2, 3, 4 }, { 4, 5 } } },
  { "ij,ij->ij", "ij,ij->ij", { { 3, 4 }, { 3, 4 } } },             -- elementwise, no contraction
  { "ijk,jil->kl", "ijk,jil->kl", { { 2, 3, 4 }, { 3, 2, 5 } } },   -- two contracted labels
  { "ij,jk,kl->il", "ij,jk,kl->il", { { 2, 3 }, { 3, 4 }, { 4, 5 } } },
  { "ab,bc,ca->", "ab,bc,ca->", { { 2, 3 }, { 3, 4 }, { 4, 2 } } },
  { "i,ij,j->i", "i,ij,j->i", { { 3 }, { 3, 4 }, { 4 } } },
  { "ij,kj->ikj", "ij,kj->ikj", { { 2, 3 }, { 4, 3 } } },           -- a batch label last
  { "i j , j k -> i k", "ij,jk->ik", { { 2, 3 }, { 3, 2 } } },       -- spaces
  { "...ij,...jk->...ik", "bij,bjk->bik", { { 2, 3, 4 }, { 2, 4, 5 } } },
  { "...ij,jk", "bij,jk->bik", { { 2, 3, 4 }, { 4, 5 } } },           -- implicit with an ellipsis
  { "ij,...j->...i", "ij,bj->bi", { { 3, 4 }, { 2, 4 } } },
  { "bij,bjk->bik", "bij,bjk->bik", { { 1, 3, 4 }, { 2, 4, 5 } } },   -- a size-1 label broadcasts
  { "ij,j->i", "ij,j->i", { { 3, 4 }, { 1 } } },                      -- a contracted size-1 label
}

local function compare(device)
  for _, d in ipairs({ "float64", "float32", "bfloat16", "float16" }) do
    it("einsum in " .. d .. " matches the sums of its definition", function()
      for i, case in ipairs(CASES) do
        local operands, tables = {}, {}
        for k, shape in ipairs(case[3]) do
          local t = values(d, 10 * i + k, shape)
          operands[k], tables[k] = t:to(device), t:totable()
        end
        local expected = S.einsum(case[2], table.unpack(tables))
        local got = tl.einsum(case[1], table.unpack(operands))
        assert.are.equal(d, got.dtype)
        if type(expected) ~= "table" then expected = { expected } got = got:reshape(1) end
        assert.tensor_near(expected, got:to("cpu"), TOL[d], TOL[d], case[1] .. " in " .. d .. " on " .. device)
        -- the operands as a list, and transposed operands (strided views) give the same
        local strided = {}
        for k, t in ipairs(operands) do
          strided[k] = t:dim() >= 2 and t:transpose(1, 2):contiguous():transpose(1, 2) or t
        end
        local again = tl.einsum(case[1], strided)
        if again:dim() == 0 then again = again:reshape(1) end
        assert.tensor_near(expected, again:to("cpu"), TOL[d], TOL[d], case[1] .. " of strided operands")
      end
    end)
  end

  it("tensordot matches the sums of its definition", function()
    local a, b = values("float64", 1, { 2, 3, 4 }), values("float64", 2, { 3, 4, 5 })
    local c = values("float64", 3, { 4, 3, 2 })
    local at, bt, ct = a:totable(), b:totable(), c:totable()
    assert.tensor_near(S.einsum("ijk,jkl->il", at, bt), tl.tensordot(a:to(device), b:to(device)):to("cpu"), 1e-12, 1e-12)
    local e = values("float64", 4, { 4, 5, 2 })
    assert.tensor_near(S.einsum("ijk,klm->ijlm", at, e:totable()),
      tl.tensordot(a:to(device), e:to(device), 1):to("cpu"), 1e-12, 1e-12)
    assert.tensor_near(S.einsum("ijk,kjm->im", at, ct),
      tl.tensordot(a:to(device), c:to(device), { { 3, -2 }, { 1, 2 } }):to("cpu"), 1e-12, 1e-12)
    assert.tensor_near(S.einsum("ijk,lmn->ijklmn", at, ct),
      tl.tensordot(a:to(device), c:to(device), 0):to("cpu"), 1e-12, 1e-12)
  end)

  it("gradients of einsum match the CPU's", function()
    local a, b, c = values("float64", 5, { 2, 3, 3 }), values("float64", 6, { 3, 4 }), values("float64", 7, { 4 })
    local grads = {}
    for _, dev in ipairs({ "cpu", device }) do
      local la, lb, lc = a:detach():to(dev):requires_grad_(), b:detach():to(dev):requires_grad_(),
        c:detach():to(dev):requires_grad_()
      local y = tl.einsum("bii,ij,j->bi", la, lb, lc)
      y:sum():backward()
      grads[dev] = { la.grad:to("cpu"), lb.grad:to("cpu"), lc.grad:to("cpu") }
    end
    for k = 1, 3 do assert.tensor_near(grads.cpu[k], grads[device][k], 1e-12, 1e-12, "gradient " .. k) end
  end)
end

describe("einsum and tensordot on the cpu", function()
  compare("cpu")

  it("gradients against finite differences", function()
    local gradcheck = tl.autograd.gradcheck
    local function input(...) return tl.randn(...):double():requires_grad_() end
    assert.is_true(gradcheck(function(q, k) return tl.einsum("bhqd,bhkd->bhqk", q, k) end,
      { input(2, 2, 3, 4), input(2, 2, 5, 4) }))
    assert.is_true(gradcheck(function(x) return tl.einsum("iij->ji", x) end, { input(3, 3, 2) }))
    assert.is_true(gradcheck(function(a, b, c) return tl.einsum("ij,jk,kl->il", a, b, c) end,
      { input(2, 3), input(3, 4), input(4, 2) }))
    assert.is_true(gradcheck(function(a, b) return tl.einsum("...ij,jk", a, b) end, { input(2, 3, 4), input(4, 2) }))
    assert.is_true(gradcheck(function(a, b) return tl.tensordot(a, b, { { 1, 3 }, { 2, 1 } }) end,
      { input(3, 2, 4), input(4, 3, 2) }))
  end)

  it("lowers bhqd,bhkd->bhqk to one matmul over views: no copy, no other kernel", function()
    local q, k = tl.randn(2, 3, 8, 16), tl.randn(2, 3, 10, 16)
    local ops = trace.ops(function() tl.einsum("bhqd,bhkd->bhqk", q, k) end)
    assert.are.same({ "matmul" }, ops)
    local expected = tl.matmul(q, k:transpose(3, 4))
    assert.tensor_near(expected, tl.einsum("bhqd,bhkd->bhqk", q, k), 1e-6, 1e-6)
    -- three operands: two matmuls, the cheaper pair first
    local a, b, c = tl.randn(50, 2), tl.randn(2, 50), tl.randn(50, 3)
    assert.are.same({ "matmul", "matmul" }, trace.ops(function() tl.einsum("ij,jk,kl->il", a, b, c) end))
  end)

  it("replays a spec's plan for operands of the same shapes: new values, a repeated operand", function()
    local a, b = tl.tensor({ 1, 2, 3 }, { dtype = "float64" }), tl.tensor({ 4, 5, 6 }, { dtype = "float64" })
    assert.are.equal(14, tl.einsum("i,i->", a, a):item())
    assert.are.equal(32, tl.einsum("i,i->", a, b):item())
    assert.are.equal(77, tl.einsum("i,i->", b, b):item())
    assert.are.equal(32, tl.einsum("i,i->", b, a):item())
    local m = tl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
    assert.are.same({ { 7, 10 }, { 15, 22 } }, tl.einsum("ij,jk->ik", m, m):totable())
    assert.are.same({ { 1, 3 }, { 2, 4 } }, tl.einsum("ij->ji", m):totable())
    local n = m * 2
    assert.are.same({ { 2, 6 }, { 4, 8 } }, tl.einsum("ij->ji", n):totable())
    assert.are.same({ { 14, 20 }, { 30, 44 } }, tl.einsum("ij,jk->ik", m, n):totable())
  end)

  it("rejects bad specs naming the operand or the label, the operands unchanged", function()
    local a, b = tl.ones(2, 3), tl.ones(3, 4)
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, tostring(err), 1, true)
      assert.are.same({ { 1, 1, 1 }, { 1, 1, 1 } }, a:totable())
    end
    fails("einsum: the spec 'ij->i' names 1 operand but 2 tensors were given", function() return tl.einsum("ij->i", a, b) end)
    fails("einsum: operand 2 has 2 dims but its subscripts 'jkl' name 3", function() return tl.einsum("ij,jkl", a, b) end)
    fails("einsum: operand 1 has 2 dims but its subscripts '...ijk' name at least 3",
      function() return tl.einsum("...ijk", a) end)
    fails("einsum: label 'j' has size 3 in operand 1 but 2 in operand 2",
      function() return tl.einsum("ij,jk", a, tl.ones(2, 2)) end)
    fails("einsum: output label 'z' appears in no operand", function() return tl.einsum("ij,jk->iz", a, b) end)
    fails("einsum: label 'i' appears twice in the output 'ii'", function() return tl.einsum("ij->ii", a) end)
    fails("einsum: invalid character '1' in the subscripts of operand 2 ('j1')", function() return tl.einsum("ij,j1", a, b) end)
    fails("einsum: the subscripts of operand 1 ('...i...') has two ellipses", function() return tl.einsum("...i...", a) end)
    fails("einsum: label 'i' has size 2 in operand 1 but 3 in operand 1", function() return tl.einsum("ii", a) end)
    fails("einsum: operand 2 expected a tensor, got number", function() return tl.einsum("ij,j", a, 3) end)
    fails("einsum: operand 2 is float64 on cpu, expected operand 1's float32 on cpu",
      function() return tl.einsum("ij,jk", a, b:double()) end)
    fails("tensordot: b is float64 on cpu, expected a's float32 on cpu", function() return tl.tensordot(a, b:double(), 1) end)
    fails("einsum: argument 1 expected a spec (a string), got a tensor", function() return tl.einsum(a, b) end)
    fails("einsum: the spec 'i->i->i' has more than one '->'", function() return tl.einsum("i->i->i", tl.ones(2)) end)
    fails("tensordot: dim 2 of a has size 3 but dim 1 of b has size 2",
      function() return tl.tensordot(a, tl.ones(2, 2), 1) end)
    fails("tensordot: dims 3 is out of range for tensors of 2 and 2 dims", function() return tl.tensordot(a, b, 3) end)
    fails("tensordot: dim 3 of a is out of range for a tensor of 2 dims",
      function() return tl.tensordot(a, b, { { 3 }, { 1 } }) end)
    fails("tensordot: got 2 dims of a but 1 of b", function() return tl.tensordot(a, b, { { 1, 2 }, { 1 } }) end)
    fails("tensordot: dim 2 of a appears twice", function() return tl.tensordot(a, tl.ones(3, 3), { { 2, 2 }, { 1, 2 } }) end)
  end)
end)

describe("meshgrid, isclose, allclose, equal", function()
  it("meshgrid gives each tensor along its dim of the grid, ij and xy", function()
    local x, y = tl.tensor({ 1, 2, 3 }), tl.tensor({ 10, 20 })
    local g = tl.meshgrid({ x, y })
    assert.are.same(ref.build({ 3, 2 }, function(i) return i end), g[1]:totable())
    assert.are.same(ref.build({ 3, 2 }, function(_, j) return 10 * j end), g[2]:totable())
    g = tl.meshgrid({ x, y, tl.tensor(7) }, { indexing = "xy" })
    assert.are.same(ref.build({ 2, 3, 1 }, function(_, j) return j end), g[1]:totable())
    assert.are.same(ref.build({ 2, 3, 1 }, function(i) return 10 * i end), g[2]:totable())
    assert.are.same(ref.build({ 2, 3, 1 }, function() return 7 end), g[3]:totable())
    local ok, err = pcall(tl.meshgrid, { x, tl.ones(2, 2) })
    assert.is_false(ok)
    assert.matches("meshgrid: list[2] must be 1-d (or 0-d), got 2 dims", err, 1, true)
    ok, err = pcall(tl.meshgrid, { x }, { indexing = "yx" })
    assert.matches('meshgrid: indexing must be "ij" or "xy", got "yx"', err, 1, true)
    ok, err = pcall(tl.meshgrid, {})
    assert.matches("meshgrid: expected a non-empty list of tensors, got {}", err, 1, true)
  end)

  it("isclose follows |a - b| <= atol + rtol |b|, infinities equal, NaN only with equal_nan", function()
    local inf, nan = math.huge, 0 / 0
    local a = { 1, 1 + 2e-5, 1e-9, inf, -inf, nan, nan, 100 }
    local b = { 1, 1, 0, inf, inf, nan, 1, 100.0005 }
    for _, d in ipairs({ "float64", "float32" }) do
      local ta, tb = tl.tensor(a, { dtype = d }), tl.tensor(b, { dtype = d })
      local function lua_close(rtol, atol, equal_nan)
        local out = {}
        for i = 1, #a do
          local x, y = ta:totable()[i], tb:totable()[i]
          local err = math.abs(x - y)
          out[i] = x == y or (err == err and err ~= inf and err <= atol + rtol * math.abs(y))
            or (equal_nan and x ~= x and y ~= y) or false
        end
        return out
      end
      assert.are.same(lua_close(1e-5, 1e-8, false), tl.isclose(ta, tb):totable())
      assert.are.same(lua_close(1e-5, 1e-8, true), ta:isclose(tb, { equal_nan = true }):totable())
      assert.are.same(lua_close(1e-3, 0, false), tl.isclose(ta, tb, { rtol = 1e-3, atol = 0 }):totable())
    end
    assert.are.same({ true, false, true }, tl.isclose(tl.tensor({ 1, 5, 9 }), tl.tensor({ 1, 6, 9 })):totable())
    assert.are.same({ true, false }, tl.isclose(tl.tensor({ 10, 5 }), tl.tensor({ 11, 7 }), { atol = 1 }):totable())
    local ok, err = pcall(tl.isclose, tl.ones(2), tl.ones(2, { dtype = "float64" }))
    assert.is_false(ok)
    assert.matches("isclose: a and b must have one dtype, got float32 and float64", err, 1, true)
  end)

  it("allclose and equal answer with a boolean", function()
    local a = tl.tensor({ 1, 2, 3 }, { dtype = "float32" })
    assert.is_true(tl.allclose(a, a + 1e-7))
    assert.is_false(tl.allclose(a, a + 1e-3))
    assert.is_true(a:allclose(a + 1e-3, { rtol = 1e-2 }))
    assert.is_true(tl.equal(a, tl.tensor({ 1, 2, 3 }, { dtype = "float32" })))
    assert.is_false(a:equal(tl.tensor({ 1, 2, 4 })))
    assert.is_false(tl.equal(a, tl.tensor({ { 1, 2, 3 } })))
    assert.is_false(tl.equal(tl.tensor({ 0 / 0 }), tl.tensor({ 0 / 0 })))
  end)
end)

describe("einsum and tensordot on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of einsum did not run")
    return
  end
  compare("cuda")

  it("lowers bhqd,bhkd->bhqk to one matmul on the GPU too", function()
    local q, k = tl.randn(2, 3, 8, 16, { device = "cuda" }), tl.randn(2, 3, 10, 16, { device = "cuda" })
    assert.are.same({ "matmul" }, trace.ops(function() tl.einsum("bhqd,bhkd->bhqk", q, k) end))
  end)
end)
