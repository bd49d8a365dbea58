-- nn.Embedding (padding_idx, max_norm, from_pretrained) against PyTorch goldens; Dropout1d/2d, AlphaDropout and FeatureAlphaDropout (whole channels, statistics, gradients, eval); Flatten and Unflatten; bad inputs (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional

local G = dofile("spec/goldens/activations.lua")

local function t64(v) return tl.tensor(v, { dtype = "float64" }) end
local function idx(v) return tl.tensor(v, { dtype = "int64" }) end

describe("nn.Embedding", function()
  local E = G.embedding

  it("padding_idx: the row starts at zero, the output at padding positions is the row, and it gets no gradient",
    function()
      local m = nn.Embedding(6, 3, { padding_idx = 3 })
      assert.tensor_equal(tl.zeros(3), m.weight[3])
      m = nn.Embedding.from_pretrained(t64(E.weight), { freeze = false, padding_idx = 3 })
      tl.no_grad(function() m.weight[3]:copy_(t64(E.pad_row)) end)
      local y = m(idx(E.idx))
      tl.backward((y * t64(E.gy)):sum())
      assert.tensor_near(E.y, y, 1e-15, 0)
      assert.tensor_near(E.gw, m.weight.grad, 1e-14, 1e-15)
      assert.tensor_equal(tl.zeros(3, { dtype = "float64" }), m.weight.grad[3])
    end)

  it("padding_idx counts from the end when negative", function()
    assert.are.equal(6, nn.Embedding(6, 2, { padding_idx = -1 }).padding_idx)
    assert.tensor_equal(tl.zeros(2), nn.Embedding(6, 2, { padding_idx = -1 }).weight[6])
  end)

  it("max_norm renorms the looked-up rows in place before the lookup (norm_type 2 and 1)", function()
    for _, spec in ipairs({ { "max_norm_2", 1.5, 2 }, { "max_norm_1", 2.0, 1 } }) do
      local case = E[spec[1]]
      local m = nn.Embedding.from_pretrained(t64(E.weight), { freeze = false, max_norm = spec[2], norm_type = spec[3] })
      local y = m(idx(E.idx))
      tl.backward((y * t64(E.gy)):sum())
      assert.tensor_near(case.y, y, 1e-12, 1e-14, spec[1] .. " output")
      assert.tensor_near(case.weight_after, m.weight, 1e-12, 1e-14, spec[1] .. " weight")
      assert.tensor_near(case.gw, m.weight.grad, 1e-12, 1e-14, spec[1] .. " gradient")
    end
  end)

  it("from_pretrained copies the weight and freezes it by default", function()
    local w = t64(E.weight)
    local m = nn.Embedding.from_pretrained(w)
    assert.is_false(m.weight.requires_grad)
    assert.tensor_equal(w, m.weight)
    assert.are.equal("float64", m.weight.dtype)
    tl.no_grad(function() w:fill_(0) end)
    assert.are_not.equal(0, m.weight:abs():sum():item())
    assert.is_true(nn.Embedding.from_pretrained(w, { freeze = false }).weight.requires_grad)
  end)

  it("printing and state dicts", function()
    assert.matches("Embedding%(10, 4, padding_idx=1, max_norm=2%)",
      tostring(nn.Embedding(10, 4, { padding_idx = 1, max_norm = 2 })))
    local m = nn.Embedding(5, 2, { padding_idx = 2 })
    local fresh = nn.Embedding(5, 2, { padding_idx = 2 })
    fresh:load_state_dict(m:state_dict())
    assert.tensor_equal(m.weight, fresh.weight)
  end)

  it("bad options", function()
    assert.error_matches(function() nn.Embedding(10, 4, { padding_index = 1 }) end,
      { "nn.Embedding", "unknown option 'padding_index'" })
    assert.error_matches(function() nn.Embedding(10, 4, { sparse = true }) end, { "nn.Embedding", "'sparse'" })
    assert.error_matches(function() nn.Embedding(10, 4, { scale_grad_by_freq = true }) end,
      { "nn.Embedding", "'scale_grad_by_freq'" })
    assert.error_matches(function() nn.Embedding(10, 4, { padding_idx = 11 }) end, { "nn.Embedding", "1..10" })
    assert.error_matches(function() nn.Embedding(10, 4, { padding_idx = 0 }) end, { "nn.Embedding", "padding_idx" })
    assert.error_matches(function() nn.Embedding(10, 4, { padding_idx = 1.5 }) end, { "nn.Embedding", "integer" })
    assert.error_matches(function() nn.Embedding(10, 4, { max_norm = -1 }) end, { "nn.Embedding", "max_norm" })
    assert.error_matches(function() nn.Embedding.from_pretrained(tl.randn(3)) end,
      { "from_pretrained", "2-dim", "[3]" })
    assert.error_matches(function() nn.Embedding.from_pretrained(tl.randn(3, 2), { frozen = true }) end,
      { "from_pretrained", "unknown option 'frozen'" })
  end)
end)

-- whether every channel (the dims after `channel` of y and x) is either all zero or x scaled by s
local function whole_channels(x, y, channel, s)
  local rows = 1
  for d = 1, channel do rows = rows * x.shape[d] end
  local xs, ys = x:reshape(rows, -1):totable(), y:reshape(rows, -1):totable()
  local dropped = 0
  for r = 1, rows do
    local zero, scaled = true, true
    for i = 1, #xs[r] do
      if ys[r][i] ~= 0 then zero = false end
      if math.abs(ys[r][i] - xs[r][i] * s) > 1e-12 * math.abs(xs[r][i] * s) then scaled = false end
    end
    if not (zero or scaled) then return false end
    if zero then dropped = dropped + 1 end
  end
  return true, dropped / rows, rows
end

describe("nn.Dropout1d and nn.Dropout2d", function()
  it("zero whole channels ([N, C, L], [C, L], [N, C, H, W], [C, H, W]) and scale the rest by 1 / (1 - p)", function()
    tl.manual_seed(41)
    for _, spec in ipairs({ { nn.Dropout1d, { 40, 50, 6 }, 2 }, { nn.Dropout1d, { 400, 5 }, 1 },
      { nn.Dropout2d, { 20, 100, 2, 3 }, 2 }, { nn.Dropout2d, { 300, 3, 2 }, 1 } }) do
      for _, p in ipairs({ 0.25, 0.6 }) do
        local x = tl.randn(spec[2]):double() + 5 -- no zero elements
        local y = spec[1](p)(x)
        local ok, dropped, n = whole_channels(x, y, spec[3], 1 / (1 - p))
        assert.is_true(ok)
        -- the dropped fraction of n channels is within 5 standard deviations of p
        assert.is_true(math.abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n),
          string.format("dropped %.3f of %d channels, p = %g", dropped, n, p))
      end
    end
  end)

  it("the gradient is the same channel mask times 1 / (1 - p); eval mode, p = 0 and p = 1", function()
    tl.manual_seed(42)
    local x = (tl.randn(8, 16, 3, 3):double() + 5):requires_grad_()
    local m = nn.Dropout2d(0.5)
    local y = m(x)
    tl.backward(y:sum())
    -- y = x * g elementwise, where g is the gradient (mask / (1 - p))
    assert.tensor_near(y, x:detach() * x.grad, 1e-15, 0)
    local ok, dropped = whole_channels(tl.ones_like(x), x.grad, 2, 2)
    assert.is_true(ok)
    assert.is_true(dropped > 0 and dropped < 1)
    m:eval()
    assert.are.equal(x, m(x))
    assert.are.equal(x, F.dropout2d(x, 0.5, false))
    local r = tl.randn(2, 3)
    assert.are.equal(r, F.dropout1d(r, 0))
    assert.tensor_equal(tl.zeros(2, 3, 4), F.dropout1d(tl.randn(2, 3, 4), 1))
  end)

  it("bad inputs and options", function()
    assert.error_matches(function() nn.Dropout2d(1.5) end, { "nn.Dropout2d", "[0, 1]" })
    assert.error_matches(function() nn.Dropout1d({ q = 0.1 }) end, { "nn.Dropout1d", "unknown option 'q'" })
    assert.error_matches(function() nn.Dropout(0.1, true) end, { "nn.Dropout", "one argument" })
    assert.error_matches(function() nn.Dropout2d()(tl.randn(2, 3)) end, { "dropout2d", "3D", "4D", "[2, 3]" })
    assert.error_matches(function() nn.Dropout1d()(tl.randn(2, 3, 4, 5)) end, { "dropout1d", "2D", "3D" })
    assert.error_matches(function() F.dropout1d(tl.ones(2, 3, { dtype = "int64" })) end, { "dropout1d", "floating" })
    assert.error_matches(function() F.dropout2d(tl.randn(2, 3, 4), 0.5, 1) end, { "dropout2d", "training" })
    assert.are.equal(0.3, nn.Dropout({ p = 0.3 }).p)
  end)
end)

describe("nn.AlphaDropout and nn.FeatureAlphaDropout", function()
  it("the kept and dropped values of PyTorch on ones (p = 0.3)", function()
    tl.manual_seed(43)
    local y = nn.AlphaDropout(0.3)(tl.ones(4000, { dtype = "float64" }))
    local dropped_value, kept_value = G.alpha_dropout_ones_p03[1], G.alpha_dropout_ones_p03[2]
    local dropped = 0
    for _, v in ipairs(y:totable()) do
      if math.abs(v - dropped_value) < 1e-12 then
        dropped = dropped + 1
      else
        assert.is_true(math.abs(v - kept_value) < 1e-12, "a value neither kept nor dropped: " .. v)
      end
    end
    assert.is_true(math.abs(dropped / 4000 - 0.3) < 5 * math.sqrt(0.21 / 4000))
  end)

  it("keeps a standard normal input's mean and variance; channels drop whole; the gradient; eval", function()
    tl.manual_seed(44)
    local x = tl.randn(200000):double()
    local y = F.alpha_dropout(x, 0.2)
    assert.is_true(math.abs(y:mean():item()) < 0.02)
    assert.is_true(math.abs(y:var():item() - 1) < 0.02)
    local xc = tl.randn(50, 40, 3):double()
    local yc = nn.FeatureAlphaDropout(0.5)(xc)
    -- SELU's negative saturation alpha * scale, times a = 1 / sqrt((alpha^2 p + 1) (1 - p)), times (p - 1)
    local alpha = 1.7580993408473766
    local dropped_value = alpha / math.sqrt((alpha ^ 2 * 0.5 + 1) * 0.5) * (0.5 - 1)
    -- a channel is either a x + b (kept) or constant (dropped)
    local rows, kept, yrows = xc:totable(), 0, yc:totable()
    for n = 1, 50 do
      for c = 1, 40 do
        local r, yr = rows[n][c], yrows[n][c]
        if yr[1] == yr[2] and yr[2] == yr[3] then
          assert.is_true(math.abs(yr[1] - dropped_value) < 1e-12, "a dropped channel's value: " .. yr[1])
        else
          kept = kept + 1
          local slope = (yr[2] - yr[1]) / (r[2] - r[1])
          assert.is_true(math.abs((yr[3] - yr[1]) - slope * (r[3] - r[1])) < 1e-9)
        end
      end
    end
    assert.is_true(math.abs(kept / 2000 - 0.5) < 5 * math.sqrt(0.25 / 2000))
    local a = tl.randn(30, 4):double():requires_grad_()
    local m = nn.AlphaDropout(0.4)
    tl.manual_seed(45)
    local out = m(a)
    tl.backward(out:sum())
    -- the gradient is a on kept elements and 0 on dropped ones
    local scale = 1 / math.sqrt((1.7580993408473766 ^ 2 * 0.4 + 1) * 0.6)
    for i, g in ipairs(a.grad:flatten():totable()) do
      assert.is_true(g == 0 or math.abs(g - scale) < 1e-14, "gradient " .. i .. ": " .. g)
    end
    m:eval()
    assert.are.equal(a, m(a))
    assert.error_matches(function() F.feature_alpha_dropout(tl.randn(3)) end, { "feature_alpha_dropout", "2 dims" })
    assert.error_matches(function() nn.AlphaDropout(-0.1) end, { "nn.AlphaDropout", "[0, 1]" })
  end)
end)

describe("nn.Flatten and nn.Unflatten", function()
  it("Flatten's dims (1-based, negative from the end) and Unflatten inverting it (with -1)", function()
    local x = tl.randn(2, 3, 4, 5)
    assert.are.same({ 2, 60 }, nn.Flatten()(x).shape)
    assert.are.same({ 6, 4, 5 }, nn.Flatten(1, 2)(x).shape)
    assert.are.same({ 2, 3, 20 }, nn.Flatten(-2)(x).shape)
    local y = nn.Unflatten(2, { 3, 4, 5 })(nn.Flatten()(x))
    assert.tensor_equal(x, y)
    assert.are.same({ 2, 3, 2, 2, 5 }, nn.Unflatten(-2, { 2, -1 })(x).shape)
    assert.are.same({ 2, 3, 4, 5, 1 }, nn.Unflatten(4, { 5, 1 })(x).shape)
    assert.matches("Unflatten%(dim=2, unflattened_size=%[3, 4%]%)", tostring(nn.Unflatten(2, { 3, 4 })))
    -- the gradient passes through
    local a = tl.randn(2, 6):double():requires_grad_()
    assert.is_true(tl.autograd.gradcheck(function(t) return nn.Unflatten(2, { 2, 3 })(t) end, { a }))
  end)

  it("bad arguments", function()
    assert.error_matches(function() nn.Flatten(0) end, { "nn.Flatten", "start_dim" })
    assert.error_matches(function() nn.Flatten(1, "x") end, { "nn.Flatten", "end_dim" })
    assert.error_matches(function() nn.Flatten(1, 2, 3) end, { "nn.Flatten", "at most 2" })
    assert.error_matches(function() nn.Unflatten(2, 3) end, { "nn.Unflatten", "sizes" })
    assert.error_matches(function() nn.Unflatten(2, { -1, -1 }) end, { "nn.Unflatten", "only one" })
    assert.error_matches(function() nn.Unflatten(2, { 0, 3 }) end, { "nn.Unflatten", "positive" })
    assert.error_matches(function() nn.Unflatten(2, { 4, 2 })(tl.randn(2, 6)) end, { "nn.Unflatten", "multiply", "6" })
    assert.error_matches(function() nn.Unflatten(2, { 4, -1 })(tl.randn(2, 6)) end, { "nn.Unflatten", "multiply" })
    assert.error_matches(function() nn.Unflatten(3, { 2, 3 })(tl.randn(2, 6)) end, { "nn.Unflatten", "out of range" })
  end)
end)

describe("embedding and channel dropout on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of Embedding and the channel dropouts did not run")
    return
  end

  it("Embedding with padding_idx and max_norm: CUDA against the CPU", function()
    local E = G.embedding
    for _, opts in ipairs({ { freeze = false, padding_idx = 3 }, { freeze = false, max_norm = 1.5 } }) do
      local cpu = nn.Embedding.from_pretrained(t64(E.weight):float(), opts)
      local gpu = nn.Embedding.from_pretrained(t64(E.weight):float():to("cuda"), opts)
      local ya, yb = cpu(idx(E.idx)), gpu(idx(E.idx):to("cuda"))
      tl.backward((ya * t64(E.gy):float()):sum())
      tl.backward((yb * t64(E.gy):float():to("cuda")):sum())
      assert.tensor_near(ya, yb:to("cpu"), 1e-5, 1e-6)
      assert.tensor_near(cpu.weight.grad, gpu.weight.grad:to("cpu"), 1e-5, 1e-6)
      assert.tensor_near(cpu.weight, gpu.weight:to("cpu"), 1e-5, 1e-6)
    end
  end)

  it("Dropout2d and AlphaDropout on CUDA: whole channels, the same rule", function()
    tl.manual_seed(46)
    local x = tl.randn(20, 30, 2, 2, { device = "cuda", dtype = "float64" }) + 5
    local y = nn.Dropout2d(0.4)(x)
    assert.is_true((whole_channels(x:to("cpu"):double(), y:to("cpu"):double(), 2, 1 / 0.6)))
    local z = F.alpha_dropout(tl.randn(100000, { device = "cuda" }), 0.2)
    assert.is_true(math.abs(z:mean():item()) < 0.03)
  end)
end)
