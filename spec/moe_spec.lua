-- tl.nn.MoE: values and every gradient (input, router, expert weights and biases) against an
-- independent reference (per-expert nn.Linear layers holding copies of the weights, top-k chosen
-- on the host by sorting each token's probabilities, every expert run densely on every token and
-- weighted by masked gates), top_k = 1, 2 and all experts, an expert no token chose, gradcheck,
-- float32 and bfloat16, the constructor's forms and bad arguments. The CUDA block is tagged #cuda.
local tl = require("tlua")
local nn = tl.nn

-- ---- the reference ----------------------------------------------------------------------------
-- a float64 CPU leaf with t's values
local function leaf64(t)
  return t:detach():cpu():double():clone():requires_grad_()
end

-- top-k of each row of p (a Lua table of rows): a 0/1 mask, ties to the lower expert
local function host_topk_mask(p, k)
  local mask = {}
  for t, row in ipairs(p) do
    local order = {}
    for e = 1, #row do order[e] = e end
    table.sort(order, function(a, b)
      if row[a] ~= row[b] then return row[a] > row[b] end
      return a < b
    end)
    local m = {}
    for e = 1, #row do m[e] = 0.0 end
    for j = 1, k do m[order[j]] = 1.0 end
    mask[t] = m
  end
  return mask
end

-- ref.forward(x) in float64 on the CPU from copies of m's weights; ref.grads() after backward:
-- the gradients laid out as m's parameters ([E, D, H] for w1, ...)
local function reference(m)
  local E, D, H, K = m.experts, m.dim, m.hidden, m.top_k
  local f64 = { dtype = "float64" }
  local has_bias = m.b1 ~= nil
  local router = nn.Linear(D, E, { bias = false, dtype = "float64" })
  local fc1, fc2 = {}, {}
  tl.no_grad(function()
    router.weight:copy_(m.router.weight:cpu():double())
    for e = 1, E do
      fc1[e] = nn.Linear(D, H, { bias = has_bias, dtype = "float64" })
      fc2[e] = nn.Linear(H, D, { bias = has_bias, dtype = "float64" })
      fc1[e].weight:copy_(m.w1[e]:cpu():double():transpose(1, 2))
      fc2[e].weight:copy_(m.w2[e]:cpu():double():transpose(1, 2))
      if has_bias then
        fc1[e].bias:copy_(m.b1[e]:cpu():double())
        fc2[e].bias:copy_(m.b2[e]:cpu():double())
      end
    end
  end)
  local ref = { router = router, fc1 = fc1, fc2 = fc2 }

  function ref.forward(x)
    local shape = x.shape
    local T = x:numel() // D
    local x2 = x:reshape(T, D)
    local probs = router(x2):softmax(-1)
    ref.mask = host_topk_mask(probs:totable(), K)
    local selected = probs * tl.tensor(ref.mask, f64)
    local gates = m.normalize and selected / selected:sum(2, true) or selected
    local y
    for e = 1, E do
      local ye = fc2[e](m.act(fc1[e](x2))) * gates:narrow(2, e, 1)
      y = y and y + ye or ye
    end
    return y:reshape(shape)
  end

  -- tokens per expert of the last forward
  function ref.counts()
    local counts = {}
    for e = 1, E do counts[e] = 0 end
    for _, row in ipairs(ref.mask) do
      for e = 1, E do counts[e] = counts[e] + row[e] end
    end
    return counts
  end

  function ref.grads()
    local w1, w2, b1, b2 = {}, {}, {}, {}
    for e = 1, E do
      w1[e] = fc1[e].weight.grad:transpose(1, 2):totable()
      w2[e] = fc2[e].weight.grad:transpose(1, 2):totable()
      if has_bias then
        b1[e] = fc1[e].bias.grad:totable()
        b2[e] = fc2[e].bias.grad:totable()
      end
    end
    local g = { ["router.weight"] = router.weight.grad, w1 = w1, w2 = w2 }
    if has_bias then g.b1, g.b2 = b1, b2 end
    return g
  end
  return ref
end

-- runs m and the reference on x (a float64 CPU tensor) with the same random output gradient and
-- compares the outputs and every gradient; returns the reference (for its routing)
local function check_against_reference(m, x, rtol, atol)
  rtol, atol = rtol or 1e-10, atol or 1e-12
  local device, dtype = m.w1.device, m.w1.dtype
  local g = tl.randn(x.shape, { dtype = "float64" })
  local xm = x:to(dtype):to(device):detach():requires_grad_()
  m:zero_grad()
  local y = m(xm)
  assert.are.same(x.shape, y.shape)
  assert.are.equal(dtype, y.dtype)
  assert.are.equal(device, y.device)
  y:backward(g:to(dtype):to(device))

  local ref = reference(m)
  local xr = leaf64(xm)
  local yr = ref.forward(xr)
  yr:backward(g)
  assert.tensor_near(yr, y:cpu():double(), rtol, atol, "output")
  assert.tensor_near(xr.grad, xm.grad:cpu():double(), rtol, atol, "x.grad")
  local grads = ref.grads()
  for name, p in m:named_parameters() do
    assert.is_not_nil(p.grad, name .. " has no grad")
    assert.are.equal(dtype, p.grad.dtype)
    assert.tensor_near(grads[name], p.grad:cpu():double(), rtol, atol, name .. ".grad")
  end
  return ref, y
end

local function randn64(...)
  return tl.randn(...):double()
end

-- tokens whose routing is decided by wide margins: the router reads the first E features (4 x
-- the unit vectors), and token t ranks the experts by a rotation of levels 0, 1, 2, ... (the
-- expert `last` always lowest when given); the other features are random
local function decisive(m, T, last)
  local E, D = m.experts, m.dim
  assert(D >= E)
  tl.no_grad(function()
    m.router.weight:fill_(0)
    for e = 1, E do m.router.weight[e][e] = 4 end
  end)
  local rows = {}
  local noise = tl.randn(T, D):totable()
  for t = 1, T do
    local row = noise[t]
    local ranked = {}
    for e = 1, E do if e ~= last then ranked[#ranked + 1] = e end end
    for i, e in ipairs(ranked) do row[e] = ((i + t) % #ranked) + 1 end
    if last then row[last] = -2 end
    rows[t] = row
  end
  return tl.tensor(rows, { dtype = "float64" })
end

-- a float64 MoE (dim 6, hidden 7, 4 experts, top 2) on device (nil: the CPU) given T tokens none of
-- which routes to expert `empty`, checked against the reference: the expert gets no token and a
-- zero w1 gradient; returns the model and the reference
local function check_empty_expert(seed, T, empty, device)
  tl.manual_seed(seed)
  local m = nn.MoE{ dim = 6, hidden = 7, experts = 4, top_k = 2, dtype = "float64" }
  local x = decisive(m, T, empty)
  if device then m:to(device) end
  local ref = check_against_reference(m, x)
  assert.are.equal(0, ref.counts()[empty])
  assert.tensor_equal(tl.zeros(6, 7, { dtype = "float64" }), m.w1.grad[empty]:cpu())
  return m, ref
end

-- ---- the specs --------------------------------------------------------------------------------
describe("nn.MoE", function()
  it("matches per-expert nn.Linear layers in float64 with top_k = 2: output, x.grad and every parameter's grad", function()
    tl.manual_seed(11)
    local m = nn.MoE{ dim = 6, hidden = 10, experts = 4, top_k = 2, dtype = "float64" }
    local ref = check_against_reference(m, randn64(3, 7, 6))
    -- the routing spread the 42 tokens over several experts (the permutation had work to do)
    local used = 0
    for _, c in ipairs(ref.counts()) do if c > 0 then used = used + 1 end end
    assert.is_true(used >= 3)
  end)

  it("matches the reference with top_k = 1; renormalised gates are 1, so the router gets a zero gradient", function()
    tl.manual_seed(12)
    local m = nn.MoE{ dim = 5, hidden = 8, experts = 3, top_k = 1, dtype = "float64" }
    check_against_reference(m, randn64(9, 5))
    assert.tensor_near(tl.zeros(3, 5, { dtype = "float64" }), m.router.weight.grad, 0, 1e-12)
  end)

  it("matches the reference with top_k = 1 and normalize = false (the router gets a gradient)", function()
    tl.manual_seed(13)
    local m = nn.MoE{ dim = 5, hidden = 8, experts = 3, top_k = 1, normalize = false, dtype = "float64" }
    check_against_reference(m, randn64(9, 5))
    assert.is_true(m.router.weight.grad:abs():max():item() > 1e-3)
  end)

  it("matches the reference with top_k = 2 and normalize = false", function()
    tl.manual_seed(14)
    local m = nn.MoE{ dim = 4, hidden = 6, experts = 5, top_k = 2, normalize = false, dtype = "float64" }
    check_against_reference(m, randn64(2, 6, 4))
  end)

  it("matches the reference when every token goes to every expert (top_k = experts)", function()
    tl.manual_seed(15)
    local m = nn.MoE{ dim = 4, hidden = 5, experts = 3, top_k = 3, dtype = "float64" }
    check_against_reference(m, randn64(6, 4))
  end)

  it("matches the reference without biases and with another activation (by name, or a function)", function()
    tl.manual_seed(16)
    local m = nn.MoE{ dim = 4, hidden = 6, experts = 3, top_k = 2, bias = false, activation = "silu", dtype = "float64" }
    assert.is_nil(m.b1)
    assert.is_nil(m.b2)
    check_against_reference(m, randn64(8, 4))
    local relu = nn.MoE{ dim = 4, hidden = 6, experts = 3, top_k = 2, activation = function(h) return h:relu() end,
      dtype = "float64" }
    check_against_reference(relu, randn64(8, 4))
  end)

  it("works with an expert no token chose: its weights get zero gradients, the others match", function()
    local m, ref = check_empty_expert(17, 10, 3)
    local counts = ref.counts()
    assert.are.equal(20, counts[1] + counts[2] + counts[4])
    assert.tensor_equal(tl.zeros(7, 6, { dtype = "float64" }), m.w2.grad[3])
    assert.tensor_equal(tl.zeros(7, { dtype = "float64" }), m.b1.grad[3])
    assert.tensor_equal(tl.zeros(6, { dtype = "float64" }), m.b2.grad[3])
    -- the experts that were chosen got gradients
    for _, e in ipairs({ 1, 2, 4 }) do assert.is_true(m.w1.grad[e]:abs():max():item() > 0) end
  end)

  it("works when the first and the last experts are empty (empty groups at both ends)", function()
    tl.manual_seed(18)
    local m = nn.MoE{ dim = 5, hidden = 4, experts = 4, top_k = 1, dtype = "float64" }
    local x = decisive(m, 6, 1)
    -- expert 4 ranked lowest of 2..4 everywhere too: only 2 and 3 are chosen
    for t = 1, 6 do x[t][4] = -1 end
    local ref = check_against_reference(m, x, 1e-10, 1e-12)
    local counts = ref.counts()
    assert.are.equal(0, counts[1])
    assert.are.equal(0, counts[4])
    assert.tensor_equal(tl.zeros(5, 4, { dtype = "float64" }), m.w1.grad[1])
    assert.tensor_equal(tl.zeros(5, 4, { dtype = "float64" }), m.w1.grad[4])
  end)

  it("passes gradcheck in float64 (x, router, w1, b1, w2, b2)", function()
    tl.manual_seed(19)
    local m = nn.MoE{ dim = 3, hidden = 4, experts = 3, top_k = 2, dtype = "float64" }
    local x = randn64(5, 3):requires_grad_()
    local inputs = { x, m.router.weight, m.w1, m.b1, m.w2, m.b2 }
    assert.is_true(tl.autograd.gradcheck(function(xi) return m(xi) end, inputs))
  end)

  it("runs in float32 close to the float64 reference", function()
    tl.manual_seed(21)
    local m = nn.MoE{ dim = 8, hidden = 16, experts = 4, top_k = 2 }
    assert.are.equal("float32", m.w1.dtype)
    check_against_reference(m, randn64(4, 5, 8), 1e-4, 1e-5)
  end)

  it("runs in bfloat16 close to the float64 reference (routing decided by wide margins)", function()
    tl.manual_seed(22)
    local m = nn.MoE{ dim = 8, hidden = 16, experts = 4, top_k = 2 }
    local x = decisive(m, 12)
    m:to("bfloat16")
    assert.are.equal("bfloat16", m.w1.dtype)
    assert.are.equal("bfloat16", m.router.weight.dtype)
    -- the reference copies the bfloat16 weights and input, so only the arithmetic differs
    check_against_reference(m, x:bfloat16():double(), 3e-2, 3e-2)
  end)

  it("follows m:to(dtype): made in float32, moved to float64, matches tightly", function()
    tl.manual_seed(23)
    local m = nn.MoE(6, 9, 3, 2):to("float64")
    assert.are.equal("float64", m.w2.dtype)
    check_against_reference(m, randn64(7, 6))
  end)

  it("takes named fields, {dim, hidden, experts, top_k} by position, or positional arguments", function()
    local a = nn.MoE{ dim = 6, hidden = 10, experts = 4, top_k = 2 }
    local b = nn.MoE{ 6, 10, 4, 2, bias = false }
    local c = nn.MoE(6, 10, 4, 2, { activation = "relu" })
    for _, m in ipairs({ a, b, c }) do
      assert.are.same({ 6, 10, 4, 2 }, { m.dim, m.hidden, m.experts, m.top_k })
      assert.are.same({ 4, 6, 10 }, m.w1.shape)
      assert.are.same({ 4, 10, 6 }, m.w2.shape)
      assert.are.same({ 4, 6 }, m.router.weight.shape)
    end
    assert.are.same({ 4, 10 }, a.b1.shape)
    assert.are.same({ 4, 6 }, a.b2.shape)
    assert.is_nil(b.b1)
    assert.are.equal("relu", c.activation)
    local names = {}
    for name in a:named_parameters() do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "b1", "b2", "router.weight", "w1", "w2" }, names)
    assert.are.equal(4 * 6 + 4 * 6 * 10 + 4 * 10 + 4 * 10 * 6 + 4 * 6, a:num_parameters())
    assert.matches("MoE%(dim=6, hidden=10, experts=4, top_k=2", tostring(a))
  end)

  it("initialises like nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = dim or hidden", function()
    tl.manual_seed(24)
    local m = nn.MoE{ dim = 16, hidden = 64, experts = 8, top_k = 2 }
    local function bounds(t) return t:min():item(), t:max():item() end
    for _, c in ipairs({ { m.w1, 16 }, { m.b1, 16 }, { m.router.weight, 16 }, { m.w2, 64 }, { m.b2, 64 } }) do
      local lo, hi = bounds(c[1])
      local bound = 1 / math.sqrt(c[2])
      assert.is_true(lo >= -bound and hi <= bound)
      assert.is_true(hi > 0.8 * bound and lo < -0.8 * bound) -- spread over the range, not a constant
    end
  end)

  it("keeps the input's shape for 1-D and 3-D inputs, and gives [0, dim] for no tokens", function()
    tl.manual_seed(25)
    local m = nn.MoE{ dim = 4, hidden = 5, experts = 3, top_k = 2, dtype = "float64" }
    check_against_reference(m, randn64(4))
    assert.are.same({ 0, 4 }, m(tl.zeros(0, 4, { dtype = "float64" })).shape)
  end)

  it("refuses bad arguments with clear errors", function()
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 3, top_k = 4 } end,
      { "nn.MoE", "top_k (4) must be at most the number of experts (3)" })
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 3, top_k = 0 } end,
      { "nn.MoE", "top_k must be a positive integer, got 0" })
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 3 } end,
      { "top_k must be a positive integer, got nil" })
    assert.error_matches(function() nn.MoE{ dim = 4.5, hidden = 8, experts = 3, top_k = 1 } end,
      { "dim must be a positive integer, got 4.5" })
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 0, top_k = 1 } end,
      { "experts must be a positive integer, got 0" })
    assert.error_matches(function() nn.MoE{ 4, 8, 3, 1, dim = 5 } end, { "dim is given both by position" })
    assert.error_matches(function() nn.MoE(4, 8, 3, 1, "relu") end, { "expected an options table" })
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 3, top_k = 1, activation = "nope" } end,
      { "activation 'nope' is not a tl op" })
    -- an unknown key lists the option names alone, not the positions [1] to [4]
    local msg = assert.error_matches(function() nn.MoE{ 4, 8, 3, 1, bogus = 1 } end,
      { "nn.MoE: unknown option 'bogus' (accepted: activation, bias, device, dim, dtype, experts, hidden, normalize, top_k)" })
    assert.is_nil(msg:find("[1]", 1, true), msg)
    assert.error_matches(function() nn.MoE{ dim = 4, hidden = 8, experts = 3, top_k = 1, [0] = 2 } end,
      { "nn.MoE: unknown option [0] (accepted: activation, bias," })
    assert.error_matches(function() nn.MoE { 4, 8, 2, 1, 5 } end,
      { "nn.MoE: unknown entry [5] (by position it takes dim, hidden, experts, top_k)" })
    assert.error_matches(function() nn.MoE(4, 8, 3, { bias = false }) end,
      { "nn.MoE: top_k must be a positive integer, got table" })
    assert.are.equal(3, nn.MoE{ 4, 8, 3, 1, bias = false }.experts) -- positions and names still work

    local m = nn.MoE{ dim = 4, hidden = 8, experts = 3, top_k = 2 }
    assert.error_matches(function() m(tl.randn(5, 3)) end, { "nn.MoE", "[..., 4]", "got shape [5, 3]" })
    assert.error_matches(function() m(tl.randn(2, 4, 5)) end, { "got shape [2, 4, 5]" })
    assert.error_matches(function() m(tl.tensor(1.0)) end, { "got shape []" })
    assert.error_matches(function() m({ 1, 2, 3, 4 }) end, { "expected a tensor input, got table" })
    assert.error_matches(function() m(tl.randn(5, 4):double()) end,
      { "input is float64 on cpu but the parameters are float32 on cpu" })
  end)
end)

-- ---------------------------------------------------------------------------------------------
describe("nn.MoE on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of nn.MoE did not run")
    return
  end

  it("matches the float64 CPU reference in float64 on cuda, top_k = 2", function()
    tl.manual_seed(31)
    local m = nn.MoE{ dim = 16, hidden = 24, experts = 6, top_k = 2, dtype = "float64" }:to("cuda")
    assert.are.equal("cuda:0", m.w1.device)
    check_against_reference(m, randn64(4, 33, 16))
  end)

  it("matches the float64 CPU reference in float64 on cuda, top_k = 1, normalize = false", function()
    tl.manual_seed(32)
    local m = nn.MoE{ dim = 8, hidden = 12, experts = 5, top_k = 1, normalize = false, dtype = "float64",
      device = "cuda" }
    check_against_reference(m, randn64(50, 8))
  end)

  it("works on cuda with an empty expert", function()
    check_empty_expert(33, 20, 2, "cuda")
  end)

  it("runs in float32 and bfloat16 on cuda close to the float64 reference", function()
    tl.manual_seed(34)
    local previous = tl.get_matmul_precision()
    tl.set_matmul_precision("highest") -- no TF32 for the float32 comparison
    local ok, err = pcall(function()
      local m = nn.MoE{ dim = 8, hidden = 16, experts = 4, top_k = 2, device = "cuda" }
      check_against_reference(m, randn64(3, 11, 8), 1e-4, 1e-5)
    end)
    tl.set_matmul_precision(previous)
    assert(ok, err)
    local b = nn.MoE{ dim = 8, hidden = 16, experts = 4, top_k = 2 }
    local x = decisive(b, 16)
    b:to("bfloat16"):to("cuda")
    check_against_reference(b, x:bfloat16():double(), 3e-2, 3e-2)
  end)

  it("routes on the device: the host waits only where grouped_mm reads its offsets", function()
    tl.manual_seed(35)
    local m = nn.MoE{ dim = 16, hidden = 32, experts = 8, top_k = 2, device = "cuda" }
    local x = tl.randn(64, 16, { device = "cuda" }):requires_grad_()
    m(x) -- warm up (cuBLAS handles, workspaces)
    local sync_before = tl.sync_checks()
    finally(function() tl.set_sync_checks(sync_before) end)
    tl.set_sync_checks(false) -- queued index checks: none waits
    tl.cuda.synchronize()
    -- the routing alone (router, topk, gates, sort, counts, offsets, gathers) waits for nothing
    local before = tl.cuda.host_waits()
    local x2 = x:reshape(64, 16)
    local _, picked, chosen = m:route(x2)
    local experts = chosen:reshape(128)
    local row_expert, order = experts:sort(1)
    local counts = tl.zeros(8, { dtype = "int64", device = "cuda" }):index_add(1, experts,
      tl.ones(128, { dtype = "int64", device = "cuda" }))
    local _ = counts:cumsum(1), x2:index_select(1, (order - 1):floor_divide(2) + 1),
      (picked / picked:sum(2, true)):reshape(128):index_select(1, order), order:argsort(1), row_expert
    assert.are.equal(before, tl.cuda.host_waits(), "routing made the host wait")
    -- a whole forward: the two grouped_mm calls read the offsets (E ends) once each, nothing else
    before = tl.cuda.host_waits()
    local y = m(x)
    assert.are.equal(before + 2, tl.cuda.host_waits(), "forward: only grouped_mm's offset reads")
    -- and the result is the float64 CPU reference's
    assert.is_true(y.device == "cuda:0")
  end)
end)
