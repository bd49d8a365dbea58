-- Random numbers: manual_seed reproducibility; rand, randn, randint, randperm
-- statistics with tolerances from the standard error (5 sigma).
local tl = require("tlua")

local N = 100000

local function flat(t)
  local v = t:reshape(-1):totable()
  return v
end

local function mean_var(xs)
  local s = 0.0
  for _, x in ipairs(xs) do s = s + x end
  local m = s / #xs
  local q = 0.0
  for _, x in ipairs(xs) do q = q + (x - m) ^ 2 end
  return m, q / (#xs - 1)
end

local function same_values(a, b)
  local va, vb = flat(a), flat(b)
  if #va ~= #vb then return false end
  for i = 1, #va do if va[i] ~= vb[i] then return false end end
  return true
end

describe("manual_seed", function()
  local makers = {
    rand = function() return tl.rand(50) end,
    randn = function() return tl.randn(5, 10) end,
    randint = function() return tl.randint(0, 1000, { 50 }) end,
    randperm = function() return tl.randperm(50) end,
  }
  for _, name in ipairs({ "rand", "randn", "randint", "randperm" }) do
    local make = makers[name]
    it(name .. ": the same seed gives identical tensors", function()
      tl.manual_seed(1234)
      local a = make()
      tl.manual_seed(1234)
      local b = make()
      assert.is_true(same_values(a, b))
      assert.tensor_equal(a, b)
    end)

    it(name .. ": different seeds and consecutive calls differ", function()
      tl.manual_seed(1)
      local a = make()
      local a2 = make()
      tl.manual_seed(2)
      local b = make()
      assert.is_false(same_values(a, b))
      assert.is_false(same_values(a, a2))
    end)
  end

  it("a seed replays a whole sequence of mixed calls", function()
    local function run()
      tl.manual_seed(77)
      return { tl.rand(3), tl.randn(4), tl.randint(-5, 5, { 6 }), tl.randperm(7), tl.rand(2, 2) }
    end
    local first, second = run(), run()
    for i = 1, #first do assert.tensor_equal(first[i], second[i]) end
  end)
end)

describe("get_rng_state and set_rng_state", function()
  local function draws(device)
    local o = { device = device }
    local x = tl.ones(64, o)
    return { tl.rand(5, o), tl.randn(3, o), tl.dropout(x, 0.5), tl.randperm(6, o), tl.randint(0, 9, { 4 }, o) }
  end

  it("restores the stream: the draws after a restore repeat the draws after the save", function()
    tl.manual_seed(123)
    tl.rand(7) -- move the counter off 0
    local state = tl.get_rng_state()
    assert.equal("int64", state.dtype)
    assert.same({ 2 }, state.shape)
    local first = draws("cpu")
    local after = tl.rand(3)
    tl.set_rng_state(state)
    local second = draws("cpu")
    for i = 1, #first do assert.tensor_equal(first[i], second[i]) end
    assert.tensor_equal(after, tl.rand(3))
    -- a state is a value: the counter it holds did not move with the draws
    tl.set_rng_state(state)
    assert.tensor_equal(first[1], tl.rand(5))
  end)

  it("holds a seed of any 64 bits", function()
    tl.manual_seed(-1) -- 2^64 - 1 as a signed integer
    local state = tl.get_rng_state()
    assert.same({ -1, 0 }, state:totable())
    local a = tl.rand(4)
    tl.manual_seed(5)
    tl.set_rng_state(state)
    assert.tensor_equal(a, tl.rand(4))
  end)

  it("rejects anything but the state it returns", function()
    assert.error_matches(function() tl.set_rng_state(tl.zeros(2)) end, "int64 tensor of 2 elements")
    assert.error_matches(function() tl.set_rng_state(tl.zeros(3, { dtype = "int64" })) end, "3 elements")
    assert.error_matches(function() tl.set_rng_state(tl.tensor({ 1, -4 }, { dtype = "int64" })) end,
      "counter must be >= 0")
    assert.error_matches(function() tl.set_rng_state({ 1, 2 }) end, "set_rng_state: argument 1 expected a tensor")
  end)

  describe("on CUDA #cuda", function()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the CUDA generator state specs did not run")
      return
    end
    it("one state serves both devices: a restore repeats CUDA draws too", function()
      tl.manual_seed(9)
      local state = tl.cuda.get_rng_state()
      local first = draws("cuda")
      tl.cuda.set_rng_state(state)
      local second = draws("cuda")
      for i = 1, #first do assert.tensor_equal(first[i]:to("cpu"), second[i]:to("cpu")) end
    end)
  end)
end)

describe("rand", function()
  it("gives shapes, dtypes and options", function()
    assert.same({ 2, 3 }, tl.rand(2, 3).shape)
    assert.same({ 4 }, tl.rand({ 4 }).shape)
    assert.equal("float32", tl.rand(2).dtype)
    assert.equal("float64", tl.rand(2, { dtype = "float64" }).dtype)
  end)

  for _, dt in ipairs({ "float32", "float64" }) do
    it("is uniform in [0, 1): range, mean, variance and a 10-bin histogram (" .. dt .. ")", function()
      tl.manual_seed(42)
      local xs = flat(tl.rand(N, { dtype = dt }))
      local lo, hi = math.huge, -math.huge
      local bins = {}
      for b = 1, 10 do bins[b] = 0 end
      for _, x in ipairs(xs) do
        if x < lo then lo = x end
        if x > hi then hi = x end
        local b = math.floor(x * 10) + 1
        bins[b] = (bins[b] or 0) + 1
      end
      assert.is_true(lo >= 0, "min " .. lo)
      assert.is_true(hi < 1, "max " .. hi)
      assert.is_true(lo < 1e-3 and hi > 1 - 1e-3, "the range is covered")
      local m, v = mean_var(xs)
      -- mean of U(0,1): 0.5, standard error sqrt(1/12/N)
      assert.near(0.5, m, 5 * math.sqrt(1 / 12 / N))
      -- variance 1/12; the standard error of the sample variance is sqrt((mu4 - s^4)/N), mu4 = 1/80
      assert.near(1 / 12, v, 5 * math.sqrt((1 / 80 - 1 / 144) / N))
      -- each bin holds 1/10: binomial standard error sqrt(N p (1-p))
      for b = 1, 10 do
        assert.near(N / 10, bins[b], 5 * math.sqrt(N * 0.1 * 0.9), "bin " .. b)
      end
      assert.is_nil(bins[11])
    end)
  end
end)

describe("randn", function()
  it("has mean 0, variance 1 and the normal's 1-sigma mass", function()
    tl.manual_seed(43)
    local t = tl.randn(N)
    assert.equal("float32", t.dtype)
    local xs = flat(t)
    local m, v = mean_var(xs)
    assert.near(0, m, 5 / math.sqrt(N))
    -- the sample variance of N(0,1) has standard error sqrt(2/N)
    assert.near(1, v, 5 * math.sqrt(2 / N))
    local inside, finite = 0, true
    for _, x in ipairs(xs) do
      if math.abs(x) < 1 then inside = inside + 1 end
      if x ~= x or math.abs(x) == math.huge then finite = false end
    end
    assert.is_true(finite)
    local p = 0.6826894921370859 -- P(|Z| < 1) = erf(1/sqrt 2)
    assert.near(p * N, inside, 5 * math.sqrt(N * p * (1 - p)))
  end)

  it("takes shapes and a float64 dtype", function()
    assert.same({ 3, 2, 2 }, tl.randn(3, 2, 2).shape)
    assert.same({ 3, 2 }, tl.randn({ 3, 2 }).shape)
    assert.equal("float64", tl.randn(5, { dtype = "float64" }).dtype)
  end)
end)

describe("randint", function()
  it("stays in [low, high), hits every value, about uniformly", function()
    tl.manual_seed(44)
    local low, high = -3, 4
    local t = tl.randint(low, high, { 70000 })
    assert.equal("int64", t.dtype)
    assert.same({ 70000 }, t.shape)
    local counts = {}
    for _, x in ipairs(flat(t)) do
      assert.equal("integer", math.type(x))
      assert.is_true(x >= low and x < high, "value " .. x)
      counts[x] = (counts[x] or 0) + 1
    end
    local k = high - low
    for v = low, high - 1 do
      assert.near(70000 / k, counts[v] or 0, 5 * math.sqrt(70000 * (1 / k) * (1 - 1 / k)), "value " .. v)
    end
  end)

  it("takes a shape table and a dtype", function()
    local t = tl.randint(0, 10, { 3, 4 }, { dtype = "int32" })
    assert.equal("int32", t.dtype)
    assert.same({ 3, 4 }, t.shape)
    for _, x in ipairs(flat(t)) do assert.is_true(x >= 0 and x < 10) end
    local one = tl.randint(5, 6, { 10 })
    assert.same({ 5, 5, 5, 5, 5, 5, 5, 5, 5, 5 }, one:totable())
  end)

  it("handles large ranges", function()
    tl.manual_seed(45)
    local t = tl.randint(0, 1 << 40, { 1000 })
    local big = 0
    for _, x in ipairs(flat(t)) do
      assert.is_true(x >= 0 and x < (1 << 40))
      if x >= (1 << 39) then big = big + 1 end
    end
    assert.near(500, big, 5 * math.sqrt(250))
  end)
end)

describe("randperm", function()
  it("is a permutation of 1..n (int64)", function()
    tl.manual_seed(46)
    for _, n in ipairs({ 1, 2, 10, 1000 }) do
      local p = tl.randperm(n)
      assert.equal("int64", p.dtype)
      assert.same({ n }, p.shape)
      local v = p:totable()
      table.sort(v)
      for i = 1, n do assert.equal(i, v[i]) end
    end
    assert.same({ 0 }, tl.randperm(0).shape)
  end)

  it("is not the identity and moves every position about evenly", function()
    tl.manual_seed(47)
    local n, trials = 5, 4000
    local first = {}
    for _ = 1, trials do
      local v = tl.randperm(n):totable()
      first[v[1]] = (first[v[1]] or 0) + 1
    end
    for i = 1, n do
      assert.near(trials / n, first[i] or 0, 5 * math.sqrt(trials * (1 / n) * (1 - 1 / n)), "value " .. i)
    end
  end)

  it("indexes a tensor directly", function()
    local data = tl.tensor({ 10, 20, 30, 40 })
    local p = tl.randperm(4):totable()
    local seen = {}
    for i = 1, 4 do seen[data[p[i]]] = true end
    for _, v in ipairs({ 10, 20, 30, 40 }) do assert.is_true(seen[v]) end
  end)
end)
