-- nn.init: calculate_gain, eye_, dirac_ and orthogonal_'s matrix against PyTorch goldens; the random initialisers by statistics with fixed seeds and bounds from their distributions (a wrong fan mode or gain fails); orthogonality; truncation bounds; bad arguments (#cuda).
local tl = require("tlua")
local nn = tl.nn
local init = nn.init

local G = dofile("spec/goldens/init.lua")

local function t64(v) return tl.tensor(v, { dtype = "float64" }) end

-- sample mean and standard deviation of t's elements (float64)
local function moments(t)
  local d = t:double()
  return d:mean():item(), d:flatten():std(1, { correction = 0 }):item()
end

-- |sample std / sigma - 1| within 6 standard errors (1 / sqrt(2 N) for a normal sample)
local function assert_std(t, sigma, what)
  local n = t:numel()
  local mean, std = moments(t)
  assert.is_true(math.abs(mean) < 6 * sigma / math.sqrt(n), string.format("%s: mean %g", what, mean))
  assert.is_true(math.abs(std / sigma - 1) < 6 / math.sqrt(2 * n),
    string.format("%s: std %g, expected %g", what, std, sigma))
end

-- every |x| <= bound, the largest near it, and the std that of U(-bound, bound)
local function assert_uniform(t, bound, what)
  local top = t:abs():max():item()
  assert.is_true(top <= bound * (1 + 1e-6), string.format("%s: %g above the bound %g", what, top, bound))
  assert.is_true(top > bound * 0.99, string.format("%s: the largest %g is far below the bound %g", what, top, bound))
  assert_std(t, bound / math.sqrt(3), what)
end

describe("nn.init against PyTorch (deterministic)", function()
  it("calculate_gain of every nonlinearity", function()
    for name, gain in pairs(G.gains) do
      if name == "leaky_relu_02" then
        assert.is_true(math.abs(init.calculate_gain("leaky_relu", 0.2) - gain) < 1e-15)
      else
        assert.is_true(math.abs(init.calculate_gain(name) - gain) < 1e-15, name)
      end
    end
  end)

  it("eye_ (square and rectangular) and dirac_ (3, 4 and 5 dims, groups)", function()
    assert.tensor_equal(t64(G.eye_3x5), init.eye_(tl.empty(3, 5, { dtype = "float64" })))
    assert.tensor_equal(t64(G.eye_4x2), init.eye_(tl.empty(4, 2, { dtype = "float64" })))
    assert.tensor_equal(t64(G.dirac_3d), init.dirac_(tl.empty(4, 3, 3, { dtype = "float64" })))
    assert.tensor_equal(t64(G.dirac_4d_groups2), init.dirac_(tl.empty(6, 2, 3, 2, { dtype = "float64" }), 2))
    assert.tensor_equal(t64(G.dirac_5d), init.dirac_(tl.empty(2, 3, 1, 3, 3, { dtype = "float64" })))
  end)

  it("orthogonal_'s matrix from a given draw equals torch's Q * sign(diag(R))", function()
    for _, case in ipairs(G.orthogonal) do
      assert.tensor_near(case.q, init._orthogonal_matrix(t64(case.a)), 1e-12, 1e-13)
    end
  end)
end)

describe("nn.init random initialisers (statistics, fixed seeds)", function()
  it("uniform_ and normal_", function()
    tl.manual_seed(1)
    local t = init.uniform_(tl.empty(300, 400), -2, 3)
    assert.is_true(t:min():item() >= -2 and t:max():item() <= 3)
    local mean = moments(t)
    assert.is_true(math.abs(mean - 0.5) < 6 * (5 / math.sqrt(12)) / math.sqrt(t:numel()))
    t = init.normal_(tl.empty(300, 400), 5, 0.5)
    assert_std(t - 5, 0.5, "normal_")
  end)

  it("kaiming_normal_: std gain / sqrt(fan) for each mode and nonlinearity (a wrong fan fails)", function()
    tl.manual_seed(2)
    local w = tl.empty(256, 128, 2, 2) -- fan_in 512, fan_out 1024
    assert_std(init.kaiming_normal_(w), math.sqrt(2 / 512), "default (leaky_relu, a = 0, fan_in)")
    assert_std(init.kaiming_normal_(w, { mode = "fan_out", nonlinearity = "relu" }), math.sqrt(2 / 1024), "fan_out")
    assert_std(init.kaiming_normal_(w, 0.2, "fan_out"), math.sqrt(2 / (1 + 0.04)) / math.sqrt(1024),
      "positional a = 0.2, fan_out")
    assert_std(init.kaiming_normal_(w, { nonlinearity = "tanh" }), 5 / 3 / math.sqrt(512), "tanh")
  end)

  it("kaiming_uniform_: U(-bound, bound), bound = gain sqrt(3 / fan)", function()
    tl.manual_seed(3)
    local w = tl.empty(200, 600)
    assert_uniform(init.kaiming_uniform_(w), math.sqrt(2) * math.sqrt(3 / 600), "default")
    assert_uniform(init.kaiming_uniform_(w, { a = math.sqrt(5) }), math.sqrt(1 / 600), "a = sqrt(5) (Linear's)")
    assert_uniform(init.kaiming_uniform_(w, 0, "fan_out", "relu"), math.sqrt(2) * math.sqrt(3 / 200), "fan_out")
  end)

  it("xavier_uniform_ and xavier_normal_ with a gain", function()
    tl.manual_seed(4)
    local w = tl.empty(300, 100, 3) -- fan_in 300, fan_out 900
    assert_uniform(init.xavier_uniform_(w), math.sqrt(6 / 1200), "xavier_uniform_")
    assert_uniform(init.xavier_uniform_(w, 2), 2 * math.sqrt(6 / 1200), "xavier_uniform_ gain 2")
    assert_std(init.xavier_normal_(w, init.calculate_gain("relu")), math.sqrt(2) * math.sqrt(2 / 1200),
      "xavier_normal_")
  end)

  it("trunc_normal_: inside [a, b], the truncated distribution's mean and std", function()
    tl.manual_seed(5)
    for _, spec in ipairs({ { G.trunc_default, {} }, { G.trunc_shifted, { 1, 2, -1, 2 } } }) do
      local want, args = spec[1], spec[2]
      for _, dtype in ipairs({ "float32", "float64" }) do
        local t = init.trunc_normal_(tl.empty(400, 500, { dtype = dtype }), table.unpack(args))
        local a, b = args[3] or -2, args[4] or 2
        assert.is_true(t:min():item() >= a and t:max():item() <= b)
        local mean, std = moments(t)
        local n = t:numel()
        assert.is_true(math.abs(mean - want.mean) < 6 * want.std / math.sqrt(n), "mean " .. mean)
        assert.is_true(math.abs(std / want.std - 1) < 6 / math.sqrt(2 * n), "std " .. std)
        -- both ends are reached (within 1% of the width)
        assert.is_true(t:min():item() < a + 0.01 * (b - a) and t:max():item() > b - 0.01 * (b - a))
      end
    end
  end)

  it("orthogonal_: W W^T = gain^2 I (rows <= columns), W^T W (rows > columns); conv weights flattened", function()
    tl.manual_seed(6)
    local function gram(w, rows_first)
      local m = w:double():reshape(w.shape[1], w:numel() // w.shape[1])
      if rows_first then return m:matmul(m:t()) end
      return m:t():matmul(m)
    end
    local w = init.orthogonal_(tl.empty(20, 50, { dtype = "float64" }))
    assert.tensor_near(tl.eye(20, { dtype = "float64" }), gram(w, true), 0, 1e-12)
    w = init.orthogonal_(tl.empty(50, 20, { dtype = "float64" }), 3)
    assert.tensor_near(tl.eye(20, { dtype = "float64" }) * 9, gram(w, false), 0, 1e-11)
    w = init.orthogonal_(tl.empty(8, 4, 3, 3))
    assert.are.equal("float32", w.dtype)
    assert.tensor_near(tl.eye(8, { dtype = "float64" }), gram(w, true), 0, 1e-6)
    w = init.orthogonal_(tl.empty(64, 64, { dtype = "float64" }))
    assert.tensor_near(tl.eye(64, { dtype = "float64" }), gram(w, true), 0, 1e-12)
    assert.tensor_near(tl.eye(64, { dtype = "float64" }), gram(w, false), 0, 1e-12)
  end)

  it("the same seed gives the same values; they change in place and keep requires_grad", function()
    local p = tl.empty(10, 20):requires_grad_()
    tl.manual_seed(9)
    init.kaiming_uniform_(p)
    local first = p:detach():clone()
    tl.manual_seed(9)
    init.kaiming_uniform_(p)
    assert.tensor_equal(first, p:detach())
    assert.is_true(p.requires_grad and p.is_leaf)
    tl.manual_seed(9)
    assert.tensor_equal(first, init.kaiming_uniform_(tl.empty(10, 20)))
    init.trunc_normal_(p)
    init.orthogonal_(p)
    assert.is_true(p.requires_grad and p.is_leaf)
  end)

  it("16-bit tensors", function()
    tl.manual_seed(10)
    for _, dtype in ipairs({ "bfloat16", "float16" }) do
      local w = init.kaiming_normal_(tl.empty(256, 256, { dtype = dtype }))
      assert.are.equal(dtype, w.dtype)
      local _, std = moments(w)
      assert.is_true(math.abs(std / math.sqrt(2 / 256) - 1) < 0.03)
      w = init.trunc_normal_(tl.empty(100, 100, { dtype = dtype }))
      assert.is_true(w:double():abs():max():item() <= 2)
    end
  end)
end)

describe("nn.init bad arguments", function()
  it("errors name the function and the argument", function()
    local w = tl.empty(4, 5)
    assert.error_matches(function() init.kaiming_uniform_(w, { mode = "fan_avg" }) end,
      { "kaiming_uniform_", "fan_avg" })
    assert.error_matches(function() init.kaiming_normal_(w, { mod = "fan_out" }) end,
      { "nn.init.kaiming_normal_", "unknown option 'mod'" })
    assert.error_matches(function() init.kaiming_normal_(w, "0.1") end, { "kaiming_normal_", "a must be a number" })
    assert.error_matches(function() init.kaiming_normal_(w, { nonlinearity = "swish" }) end,
      { "calculate_gain", "unsupported nonlinearity 'swish'" })
    assert.error_matches(function() init.calculate_gain("leaky_relu", true) end, { "calculate_gain", "slope" })
    assert.error_matches(function() init.xavier_uniform_(w, "2") end, { "xavier_uniform_", "gain must be a number" })
    assert.error_matches(function() init.xavier_normal_(tl.empty(3)) end, { "xavier_normal_", "at least 2 dims" })
    assert.error_matches(function() init.normal_(tl.zeros(3, { dtype = "int64" })) end, { "normal_", "floating" })
    assert.error_matches(function() init.normal_(w, 0, -1) end, { "normal_", "std" })
    assert.error_matches(function() init.uniform_(w, 2, 1) end, { "uniform_", "a <= b" })
    assert.error_matches(function() init.uniform_("w") end, { "uniform_", "expected a tensor" })
    assert.error_matches(function() init.constant_(w, "1") end, { "constant_", "value must be a number" })
    assert.error_matches(function() init.trunc_normal_(w, 0, 1, 2, -2) end, { "trunc_normal_", "a < b" })
    assert.error_matches(function() init.trunc_normal_(w, 0, 0) end, { "trunc_normal_", "std" })
    assert.error_matches(function() init.eye_(tl.empty(2, 2, 2)) end, { "eye_", "2-dim" })
    assert.error_matches(function() init.dirac_(tl.empty(4, 4)) end, { "dirac_", "3-, 4- or 5-dim" })
    assert.error_matches(function() init.dirac_(tl.empty(5, 2, 3), 2) end, { "dirac_", "groups" })
    assert.error_matches(function() init.orthogonal_(tl.empty(5)) end, { "orthogonal_", "at least 2 dims" })
  end)
end)

describe("nn.init on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of nn.init did not run")
    return
  end

  it("the initialisers fill CUDA tensors in place with the same statistics", function()
    tl.manual_seed(12)
    local w = tl.empty(256, 512, { device = "cuda" })
    assert_std(init.kaiming_normal_(w):to("cpu"), math.sqrt(2 / 512), "kaiming_normal_ cuda")
    assert_uniform(init.xavier_uniform_(w):to("cpu"), math.sqrt(6 / 768), "xavier_uniform_ cuda")
    local t = init.trunc_normal_(w, 0, 1, -1, 1):to("cpu")
    assert.is_true(t:min():item() >= -1 and t:max():item() <= 1)
    local q = init.orthogonal_(tl.empty(32, 48, { device = "cuda" })):to("cpu"):double()
    assert.tensor_near(tl.eye(32, { dtype = "float64" }), q:matmul(q:t()), 0, 1e-5)
    assert.are.equal("cuda", init.eye_(tl.empty(3, 3, { device = "cuda" })).device:sub(1, 4))
  end)
end)
