-- examples/gpt/sampling.lua against a Lua reference of its rule (temperature, top-k, top-p, one draw per row): the distributions exactly, the draws' support and frequencies under a seed, greedy top_k = 1, ties at the top-p boundary, errors; sample.lua's --top-p and its streamed single sample end to end; the same on CUDA (#cuda) with a check that drawing a token makes the host wait for nothing.
local tl = require("tlua")
local files = require("helpers.files")
local sh_quote, BIN, ROOT = files.sh_quote, files.BIN, files.ROOT

package.path = ROOT .. "/examples/gpt/?.lua;" .. package.path
local sampling = require("sampling")

-- The rule in Lua (float64) over one row of logits: the probability of drawing each id.
local function reference(row, o)
  local V = #row
  local T, k, p = o.temperature or 1, o.top_k or 0, o.top_p or 1
  local z, order = {}, {}
  for i = 1, V do z[i], order[i] = row[i] / T, i end
  table.sort(order, function(a, b)
    if z[a] ~= z[b] then return z[a] > z[b] end
    return a < b
  end)
  local m = (k > 0 and k < V) and k or V
  local w, total = {}, 0
  for j = 1, m do
    w[j] = math.exp(z[order[j]] - z[order[1]])
    total = total + w[j]
  end
  local kept = m
  if p < 1 then
    local before = 0
    for j = 1, m do
      if before >= p then
        kept = j - 1
        break
      end
      before = before + w[j] / total
    end
  end
  local probs, sum = {}, 0
  for i = 1, V do probs[i] = 0 end
  for j = 1, kept do sum = sum + w[j] end
  for j = 1, kept do probs[order[j]] = w[j] / sum end
  return probs
end

local function support(probs)
  local ids = {}
  for i, q in ipairs(probs) do if q > 0 then ids[#ids + 1] = i end end
  return ids
end

-- how often each id was drawn from n copies of row (a Lua array of logits)
local function counts(row, o, n, device, dtype)
  local x = tl.tensor({ row }, { dtype = dtype or "float64", device = device }):expand(n, #row):contiguous()
  local ids = sampling.sample(x, o)
  assert.are.same({ n }, ids.shape)
  return tl.bincount(ids:to("cpu"), { minlength = #row }):totable()
end

-- the draws land on the reference's support only, and each kept id about as often as it should
local function assert_draws(row, o, n, device, dtype)
  local want = reference(row, o)
  local got = counts(row, o, n, device, dtype)
  assert.are.equal(#row, #got)
  for i, q in ipairs(want) do
    local what = string.format("id %d: drawn %d of %d, probability %.4f", i, got[i], n, q)
    if q == 0 then
      assert.are.equal(0, got[i], what)
    else
      local sigma = math.sqrt(q * (1 - q) / n)
      assert.is_true(math.abs(got[i] / n - q) <= 5 * sigma + 1e-3, what)
      if q * n >= 20 then assert.is_true(got[i] > 0, what) end
    end
  end
end

-- logits of hand-made probabilities: ids 2, then 3 and 4 tied, then 1 and 5 tied
local HAND = { 0.1, 0.4, 0.2, 0.2, 0.1 }
local HAND_LOGITS = {}
for i, q in ipairs(HAND) do HAND_LOGITS[i] = math.log(q) end
-- top_p -> the ids kept: the shortest prefix of 2, 3, 4, 1, 5 whose sum reaches top_p
local HAND_CASES = {
  { 0.3, { 2 } },
  { 0.5, { 2, 3 } }, -- 3 and 4 tie at the boundary: 0.4 + 0.2 reaches 0.5 with 3, the lower id
  { 0.7, { 2, 3, 4 } },
  { 0.85, { 1, 2, 3, 4 } }, -- 1 and 5 tie at the boundary: 0.8 + 0.1 reaches 0.85 with 1
  { 0.95, { 1, 2, 3, 4, 5 } },
  { 1, { 1, 2, 3, 4, 5 } },
}

local SETTINGS = {
  {},
  { temperature = 0.5 },
  { temperature = 2 },
  { top_k = 1 },
  { top_k = 5 },
  { top_k = 20 }, -- k >= V: every token
  { top_p = 0.9 },
  { top_p = 0.5, temperature = 0.7 },
  { top_p = 0.1 },
  { top_k = 8, top_p = 0.8, temperature = 1.3 },
}

local function describe_setting(o)
  return string.format("temperature %s, top_k %s, top_p %s", tostring(o.temperature or 1), tostring(o.top_k or 0),
    tostring(o.top_p or 1))
end

local function check_device(device)
  it("with top_k = 1 gives each row's argmax (the first of tied maxima), whatever temperature and top_p", function()
    tl.manual_seed(11)
    for _, dtype in ipairs({ "float32", "float64", "bfloat16" }) do
      local x = tl.randn(16, 50, { device = device }):to(dtype)
      for _, o in ipairs({ { top_k = 1 }, { top_k = 1, temperature = 0.3, top_p = 0.2 } }) do
        local ids = sampling.sample(x, o)
        assert.are.equal("int64", ids.dtype)
        assert.are.equal(x.device, ids.device)
        assert.are.same(x:argmax(-1):to("cpu"):totable(), ids:to("cpu"):totable())
      end
    end
    local tied = tl.tensor({ { 1, 3, 3, 2 }, { 5, 0, 5, 5 } }, { dtype = "float32", device = device })
    assert.are.same({ 2, 1 }, sampling.sample(tied, { top_k = 1 }):to("cpu"):totable())
  end)

  it("draws from the Lua reference's distribution (temperature, top_k, top_p and together)", function()
    tl.manual_seed(12)
    local x64 = tl.randn(6, 20, { dtype = "float64" }) * 2
    local x32 = x64:to("float32")
    local rows = x64:totable()
    for _, o in ipairs(SETTINGS) do
      local want = {}
      for r, row in ipairs(rows) do want[r] = reference(row, o) end
      local got = sampling.probs(x64:to(device), o)
      assert.are.equal("float64", got.dtype)
      assert.tensor_near(want, got:to("cpu"), 1e-12, 1e-14, describe_setting(o))
      -- float32 logits: the same rule in float32 (no case here sits near a top-p boundary)
      assert.tensor_near(want, sampling.probs(x32:to(device), o):to("cpu"):double(), 1e-5, 1e-6, describe_setting(o))
    end
  end)

  it("draws only among the k largest under top_k, each about as often as the reference says", function()
    tl.manual_seed(13)
    local row = { 0.3, 2.0, -1.0, 1.5, 0.0, 1.9, -0.5, 0.7, 1.0, -2.0, 0.1, 0.2 }
    assert.are.same({ 2, 4, 6 }, support(reference(row, { top_k = 3 })))
    assert_draws(row, { top_k = 3 }, 4000, device)
    assert_draws(row, { top_k = 3, temperature = 0.5 }, 4000, device)
    assert_draws(row, { top_k = 6, temperature = 2 }, 4000, device, "float32")
    assert_draws(row, {}, 4000, device)
  end)

  it("under top_p keeps the shortest sorted prefix that reaches p, ties to the lower ids", function()
    tl.manual_seed(14)
    local x = tl.tensor({ HAND_LOGITS }, { dtype = "float64", device = device })
    for _, case in ipairs(HAND_CASES) do
      local o, kept = { top_p = case[1] }, case[2]
      local what = "top_p " .. case[1]
      assert.are.same(kept, support(reference(HAND_LOGITS, o)), what .. " (the reference)")
      local probs = sampling.probs(x, o):to("cpu"):totable()[1]
      assert.are.same(kept, support(probs), what)
      assert.tensor_near(reference(HAND_LOGITS, o), tl.tensor(probs, { dtype = "float64" }), 1e-12, 1e-14, what)
      assert_draws(HAND_LOGITS, o, 3000, device)
      assert_draws(HAND_LOGITS, o, 3000, device, "float32")
    end
    -- after top_k = 4 the kept are renormalised (2: 4/9, 3 and 4: 2/9, 1: 1/9): 0.85 stops before 1
    assert.are.same({ 2, 3, 4 }, support(reference(HAND_LOGITS, { top_k = 4, top_p = 0.85 })))
    assert.are.same({ 2, 3, 4 }, support(sampling.probs(x, { top_k = 4, top_p = 0.85 }):to("cpu"):totable()[1]))
    assert_draws(HAND_LOGITS, { top_k = 4, top_p = 0.85 }, 3000, device)
  end)

  it("divides the logits by the temperature before top_k and top_p", function()
    tl.manual_seed(15)
    local x = tl.randn(5, 30, { device = device })
    for _, o in ipairs({ { top_k = 5, top_p = 0.8 }, { top_p = 0.6 }, {} }) do
      local scaled = { temperature = 2, top_k = o.top_k, top_p = o.top_p }
      assert.tensor_equal(sampling.probs(x * 0.5, o), sampling.probs(x, scaled))
    end
    -- a low temperature sharpens the draws, a high one flattens them, as the reference says
    local row = { 1.0, 0.5, 0.0, -0.5, -1.0, 0.25 }
    assert_draws(row, { temperature = 0.25 }, 4000, device)
    assert_draws(row, { temperature = 4 }, 4000, device)
  end)

  it("gives int64 [B] on the logits' device, the same draws for a seed, each row its own draw", function()
    local x = tl.zeros({ 64, 40 }, { device = device }) -- uniform: rows should disagree
    tl.manual_seed(16)
    local a = sampling.sample(x, { top_k = 0 })
    tl.manual_seed(16)
    local b = sampling.sample(x, { top_k = 0 })
    assert.are.equal("int64", a.dtype)
    assert.are.same({ 64 }, a.shape)
    assert.are.equal(x.device, a.device)
    assert.tensor_equal(a, b)
    local distinct, seen = 0, {}
    for _, id in ipairs(a:to("cpu"):totable()) do
      assert.is_true(id >= 1 and id <= 40)
      if not seen[id] then distinct, seen[id] = distinct + 1, true end
    end
    assert.is_true(distinct > 10, "distinct ids " .. distinct)
    local c = sampling.sample(x:to("bfloat16"), { top_k = 7, top_p = 0.5, temperature = 0.9 })
    assert.are.same({ 64 }, c.shape)
    assert.are.equal("int64", c.dtype)
  end)

  it("runs every kernel of a draw on the logits' device", function()
    local x = tl.randn(4, 65, { device = device })
    for _, o in ipairs(SETTINGS) do
      local events = tl.trace(function() return sampling.sample(x, o) end)
      assert.is_true(#events > 0)
      for _, e in ipairs(events) do
        assert.are.equal(x.device, e.device, describe_setting(o) .. ": " .. e.kernel)
      end
    end
  end)
end

describe("examples/gpt sampling", function()
  check_device("cpu")

  it("refuses bad logits and options, naming them", function()
    local x = tl.randn(2, 5)
    assert.error_matches(function() sampling.sample(x, { temperature = 0 }) end,
      { "sampling.sample", "temperature", "> 0" })
    assert.error_matches(function() sampling.sample(x, { temperature = -1 }) end, { "temperature" })
    assert.error_matches(function() sampling.sample(x, { top_k = -1 }) end, { "top_k", "integer >= 0", "-1" })
    assert.error_matches(function() sampling.sample(x, { top_k = 2.5 }) end, { "top_k", "2.5" })
    assert.error_matches(function() sampling.sample(x, { top_p = 0 }) end, { "top_p", "(0, 1]", "got 0" })
    assert.error_matches(function() sampling.sample(x, { top_p = 1.5 }) end, { "top_p", "1.5" })
    assert.error_matches(function() sampling.sample(x, { topk = 3 }) end, { "unknown option 'topk'" })
    assert.error_matches(function() sampling.sample(tl.randn(5)) end, { "2-d [B, V]", "got 1 dims" })
    assert.error_matches(function() sampling.sample(tl.zeros({ 2, 5 }, { dtype = "int64" })) end,
      { "floating", "int64" })
    assert.error_matches(function() sampling.probs({ 1, 2 }) end, { "sampling.probs", "tensor", "table" })
  end)
end)

-- a tiny untrained model saved as train.lua --save writes it
local function save_tiny_checkpoint(path)
  local gpt = require("model")
  local data = require("data")
  tl.manual_seed(1)
  local vocab = data.Vocab.of("QAB: \nhello world")
  local config = gpt.config { vocab = vocab.size, context = 8, layers = 1, dim = 16, heads = 2 }
  local chars = {}
  for k, b in ipairs(vocab.chars) do chars[k] = tostring(b) end
  local meta = { vocab_bytes = table.concat(chars, ",") }
  for k, v in pairs(config) do if k ~= "device" then meta["config." .. k] = tostring(v) end end
  tl.save(path, gpt.GPT(config):state_dict(), meta)
end

local function describe_script(device)
  local dir, ckpt
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. sh_quote(dir)))
    ckpt = dir .. "/tiny.safetensors"
    save_tiny_checkpoint(ckpt)
  end)
  after_each(function() if dir:match("^/tmp/") then os.execute("rm -rf " .. sh_quote(dir)) end end)

  local function sample(flags)
    local log = dir .. "/log"
    local ok = os.execute(string.format("%s %s --checkpoint %s --device %s %s > %s 2>&1", sh_quote(BIN),
      sh_quote(ROOT .. "/examples/gpt/sample.lua"), sh_quote(ckpt), device, flags, sh_quote(log)))
    return ok == true, files.read_file(log) or ""
  end

  local function pieces(text)
    local out = {}
    for piece in (text .. "\n---\n"):gmatch("(.-)\n\n%-%-%-\n") do out[#out + 1] = piece end
    return out
  end

  it("sample.lua takes --top-p beside --top-k and writes one text per sample", function()
    local ok, text = sample("--prompt Q --tokens 20 --samples 3 --top-p 0.9 --top-k 0 --temperature 1.2")
    assert.is_true(ok, text)
    local texts = pieces(text)
    assert.are.equal(3, #texts, text)
    for _, t in ipairs(texts) do
      assert.are.equal(21, #t, text)
      assert.are.equal("Q", t:sub(1, 1))
    end
    local again_ok, again = sample("--prompt Q --tokens 20 --samples 3 --top-p 0.9 --top-k 0 --temperature 1.2")
    assert.is_true(again_ok, again)
    assert.are.equal(text, again) -- the same seed, the same text
    -- greedy: every sample the same, whatever the seed; a prompt longer than the context
    local g_ok, greedy = sample("--prompt 'hello world' --tokens 12 --samples 2 --top-k 1 --seed 5")
    assert.is_true(g_ok, greedy)
    local g = pieces(greedy)
    assert.are.equal(2, #g, greedy)
    assert.are.equal(g[1], g[2])
    assert.are.equal(23, #g[1])
    local g2_ok, greedy2 = sample("--prompt 'hello world' --tokens 12 --samples 2 --top-k 1 --seed 9")
    assert.is_true(g2_ok, greedy2)
    assert.are.equal(greedy, greedy2)
  end)

  it("sample.lua streams one sample: the batch's text, the full recompute's greedy continuation", function()
    local ok, one = sample("--prompt 'hello wo' --tokens 9 --top-k 1")
    assert.is_true(ok, one)
    local b_ok, batch = sample("--prompt 'hello wo' --tokens 9 --top-k 1 --samples 2")
    assert.is_true(b_ok, batch)
    assert.are.equal(17, #one - 1, one)
    assert.are.equal(pieces(batch)[1], one:sub(1, -2))
    -- the reference within the context (8): the argmax of GPT:forward over all the ids so far,
    -- recomputed per character
    local gpt, data = require("model"), require("data")
    local tensors, vocab, overrides = data.load_model(ckpt, gpt.defaults, error)
    overrides.device = device
    local m = gpt.GPT(gpt.config(overrides))
    m:load_state_dict(tensors)
    m:eval()
    local text = "hello"
    tl.no_grad(function()
      for _ = 1, 3 do
        local ids = vocab:encode(text):view(1, #text):to(device)
        text = text .. vocab:decode({ m(ids):view(-1):argmax():item() })
      end
    end)
    local r_ok, got = sample("--prompt hello --tokens 3 --top-k 1")
    assert.is_true(r_ok, got)
    assert.are.equal(text .. "\n", got)
  end)

  it("sample.lua refuses a --top-p outside (0, 1] with its usage", function()
    for _, bad in ipairs({ "0", "1.5", "-0.2" }) do
      local ok, log = sample("--top-p " .. bad)
      assert.is_false(ok, log)
      assert.matches("--top-p must be in (0, 1]", log, 1, true)
      assert.matches("--top-p P", log, 1, true)
    end
    local ok, log = sample("--top-k -3")
    assert.is_false(ok, log)
    assert.matches("--top-k must be >= 0", log, 1, true)
  end)
end

describe("examples/gpt sample.lua", function() describe_script("cpu") end)

describe("examples/gpt sampling on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of examples/gpt/sampling.lua did not run")
    return
  end

  check_device("cuda")

  it("draws a token with no host wait: a pending index failure is raised by reading the ids, not before", function()
    -- every host wait (a copy to the host, item(), synchronize) raises the failures of the
    -- queued index checks; one queued before the draws survives them, so they waited for nothing
    local before = tl.sync_checks()
    finally(function() tl.set_sync_checks(before) end)
    tl.set_sync_checks(false)
    local x = tl.randn(4, 65, { device = "cuda" })
    local rows = tl.randn(2, 3, { device = "cuda" })
    local _ = tl._gather_rows(rows, tl.tensor({ 3 }, { device = "cuda" })) -- fails, queued
    local ids
    for _, o in ipairs(SETTINGS) do
      local ok, err = pcall(function() ids = sampling.sample(x, o) end)
      assert.is_true(ok, describe_setting(o) .. ": the draw waited for the device: " .. tostring(err))
    end
    local ok, err = pcall(function() return ids:to("cpu") end)
    assert.is_false(ok, "the read back raised nothing")
    assert.matches("holds 3 at position 1", tostring(err), 1, true)
    assert.are.equal(4, #ids:to("cpu"):totable())
  end)

  describe("sample.lua --device cuda", function() describe_script("cuda") end)
end)
