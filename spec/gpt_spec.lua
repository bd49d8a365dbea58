-- examples/gpt: the model (fused attention against the composed reference, float64 gradcheck of a tiny GPT, tied weights), the KV cache against the full recompute, the FLOPs per token by hand, a tiny config that trains on the CPU, and train.lua (presets, MFU) / sample.lua end to end.
local tl = require("tlua")
local files = require("helpers.files")
local sh_quote, BIN, ROOT = files.sh_quote, files.BIN, files.ROOT

package.path = ROOT .. "/examples/gpt/?.lua;" .. package.path
local gpt = require("model")
local data = require("data")

local function tiny(overrides)
  local c = { vocab = 11, context = 8, layers = 2, dim = 16, heads = 2, dtype = "float64" }
  for k, v in pairs(overrides or {}) do c[k] = v end
  return gpt.config(c)
end

local function tokens(B, T, vocab) return tl.randint(1, vocab + 1, { B, T }) end

describe("examples/gpt model", function()
  before_each(function() tl.manual_seed(3) end)

  it("gives the composed attention's loss and gradients with the fused kernel (float64)", function()
    local fused = gpt.GPT(tiny { attention = "fused" })
    local composed = gpt.GPT(tiny { attention = "composed" })
    composed:load_state_dict(fused:state_dict())
    local x, y = tokens(3, 8, 11), tokens(3, 8, 11)
    local _, lf = fused(x, y)
    local _, lc = composed(x, y)
    assert.is_true(math.abs(lf:item() - lc:item()) < 1e-12, string.format("%.17g vs %.17g", lf:item(), lc:item()))
    lf:backward()
    lc:backward()
    local pc = {}
    for name, p in composed:named_parameters() do pc[name] = p end
    for name, p in fused:named_parameters() do
      assert.tensor_near(pc[name].grad, p.grad, 1e-9, 1e-12, name)
    end
  end)

  it("gives the plain model's loss and gradients with the fused head and loss and the fused norms (float64)", function()
    local fused = gpt.GPT(tiny { fused_loss = true, fused_norm = true })
    local plain = gpt.GPT(tiny { fused_loss = false, fused_norm = false })
    plain:load_state_dict(fused:state_dict())
    local x, y = tokens(3, 8, 11), tokens(3, 8, 11)
    local none, lf = fused(x, y)
    local logits, lp = plain(x, y)
    assert.is_nil(none)
    assert.are.same({ 3, 8, 11 }, logits.shape)
    assert.is_true(math.abs(lf:item() - lp:item()) < 1e-12, string.format("%.17g vs %.17g", lf:item(), lp:item()))
    lf:backward()
    lp:backward()
    local pp = {}
    for name, p in plain:named_parameters() do pp[name] = p end
    for name, p in fused:named_parameters() do
      assert.tensor_near(pp[name].grad, p.grad, 1e-9, 1e-12, name)
    end
  end)

  it("ties the output head to the token embedding (one tensor, both gradients)", function()
    local m = gpt.GPT(tiny())
    assert.are.equal(m.wte.weight, m.lm_head.weight)
    local n = 0
    for _ in pairs(m:parameters()) do n = n + 1 end
    -- wte, wpe, per layer ln_1, c_attn, c_proj, ln_2, c_fc, c_proj, and ln_f: the head is not counted twice
    assert.are.equal(2 + 6 * 2 + 1, n)
  end)

  it("has the gradients of finite differences (float64 gradcheck of a tiny GPT)", function()
    local c = tiny { layers = 1, dim = 8, heads = 2, context = 4, vocab = 5 }
    local m = gpt.GPT(c)
    local x, y = tokens(2, 4, 5), tokens(2, 4, 5)
    -- every parameter (the tied embedding once): gradcheck perturbs them in place, and the
    -- model reads them at each call
    local params = m:parameters()
    local ok, err = tl.autograd.gradcheck(function()
      local _, loss = m(x, y)
      return loss
    end, params, { eps = 1e-6, atol = 1e-7, rtol = 1e-5, raise = false })
    assert.is_true(ok, err)
  end)

  it("trains on the CPU: a tiny config's loss falls on the bundled corpus", function()
    local ds = data.Dataset.load {}
    local m = gpt.GPT(gpt.config { vocab = ds.vocab.size, context = 32, layers = 1, dim = 32, heads = 2 })
    local opt = tl.optim.AdamW(m:parameters(), { lr = 3e-3 })
    local first, last = 0, 0
    for step = 1, 60 do
      local x, y = ds:batch("train", 8, 32)
      local _, loss = m(x, y)
      loss:backward()
      opt:step()
      opt:zero_grad()
      if step <= 5 then first = first + loss:item() / 5 end
      if step > 55 then last = last + loss:item() / 5 end
    end
    -- from log(vocab) ~ 4.7 to the unigram level and below
    assert.is_true(first > 4.0, "first " .. first)
    assert.is_true(last < 3.3, string.format("loss %.3f -> %.3f", first, last))
  end)

  it("refuses a sequence longer than the context and a dim that heads do not divide", function()
    local m = gpt.GPT(tiny())
    assert.error_matches(function() m(tokens(1, 9, 11)) end, { "gpt", "9", "context", "8" })
    assert.error_matches(function() gpt.config { dim = 10, heads = 3 } end, { "gpt", "dim", "heads" })
    assert.error_matches(function() gpt.config { layer = 2 } end, { "gpt", "unknown", "layer" })
  end)
end)

describe("examples/gpt KV cache", function()
  before_each(function() tl.manual_seed(4) end)

  -- the model and its reference: the same weights with the composed attention (matmul, softmax,
  -- a mask), whose forward over a window is the full recompute the cached logits must equal
  local function pair(overrides)
    local m = gpt.GPT(tiny(overrides))
    local c = {}
    for k, v in pairs(overrides or {}) do c[k] = v end
    c.attention = "composed"
    local ref = gpt.GPT(tiny(c))
    ref:load_state_dict(m:state_dict())
    m:eval()
    ref:eval()
    return m, ref
  end

  -- generate_step over columns `from` .. `to` of ids, each step against the reference's forward
  -- over the window the cache holds; returns the windows' first columns, step by step
  local function check_steps(m, ref, ids, from, to, cache)
    local B, V = ids.shape[1], m.config.vocab
    local firsts = {}
    tl.no_grad(function()
      for t = from, to do
        local got = m:generate_step(ids, t, cache)
        assert.are.same({ B, V }, got.shape)
        local first = cache.first
        assert.are.equal(t - first + 1, cache.length)
        local want = ref(ids:narrow(2, first, t - first + 1)):view(B, V)
        assert.tensor_near(want, got, 1e-12, 1e-12, "step " .. t)
        firsts[#firsts + 1] = first
      end
    end)
    return firsts
  end

  it("gives the full recompute's logits from a prompt of 1 token, sliding past the context (float64)", function()
    local m, ref = pair { bias = true }
    local ids = tokens(3, 24, 11)
    local firsts = check_steps(m, ref, ids, 1, 24, m:new_cache(3))
    -- context 8: columns 1..8 fill the cache; at 9 it slides to the last 4 (6..9), fills to
    -- 6..13, slides to 11..14, and so on
    local want = {}
    for t = 1, 24 do
      want[t] = t <= 8 and 1 or (6 + 5 * ((t - 9) // 5))
    end
    assert.are.same(want, firsts)
  end)

  it("takes a prompt of several tokens in one causal pass, then one token a step (float64)", function()
    local m, ref = pair()
    local ids = tokens(2, 20, 11)
    local cache = m:new_cache(2)
    local firsts = check_steps(m, ref, ids, 5, 20, cache)
    assert.are.same({ 1, 1, 1, 1, 6, 6, 6, 6, 6, 11, 11, 11, 11, 11, 16, 16 }, firsts)
    -- a prompt longer than the context keeps its last 8 tokens, in a fresh cache or an old one
    -- (4..11, full: the next step slides to 9..12)
    firsts = check_steps(m, ref, ids, 11, 13, cache)
    assert.are.same({ 4, 9, 9 }, firsts)
    assert.are.same({ 9 }, check_steps(m, ref, ids, 16, 16, m:new_cache(2)))
  end)

  it("writes keys and values in place in [B, H, context, D] tensors (the composed config too)", function()
    local m, ref = pair { attention = "composed" }
    local ids = tokens(1, 6, 11)
    local cache = m:new_cache(1)
    check_steps(m, ref, ids, 3, 4, cache)
    local k, v = cache.layers[1].k, cache.layers[2].v
    assert.are.same({ 1, 2, 8, 8 }, k.shape)
    assert.are.same({ 1, 2, 8, 8 }, v.shape)
    check_steps(m, ref, ids, 5, 6, cache)
    assert.are.equal(k, cache.layers[1].k) -- the same tensors, written in place
    assert.are.equal(v, cache.layers[2].v)
    -- the first layer's keys at the 6 positions: its c_attn's k part of ln_1(wte + wpe)
    tl.no_grad(function()
      local x = m.wte(ids) + m.wpe(tl.arange(1, 7))
      local want = m.h[1].attn.c_attn(m.h[1].ln_1(x)):view(1, 6, 3, 2, 8):select(3, 2):transpose(2, 3)
      assert.tensor_near(want, k:narrow(3, 1, 6), 1e-14, 1e-14)
    end)
  end)

  it("refuses a batch of other rows, a chunk after a prefix and a prompt over the context", function()
    local m = gpt.GPT(tiny())
    m:eval()
    tl.no_grad(function()
      local cache = m:new_cache(2)
      assert.error_matches(function() m:forward_cached(tokens(3, 2, 11), cache) end, { "gpt", "3 rows", "cache 2" })
      assert.error_matches(function() m:forward_cached(tokens(2, 9, 11), cache) end, { "gpt", "0 + 9", "context (8)" })
      m:forward_cached(tokens(2, 3, 11), cache)
      assert.error_matches(function() m:forward_cached(tokens(2, 2, 11), cache) end, { "gpt", "1 token", "got 2" })
    end)
  end)
end)

describe("examples/gpt FLOPs and MFU", function()
  it("counts 6 FLOPs per active parameter plus the attention's, by hand for a tiny config", function()
    -- vocab 11, dim 16, 2 layers, context 8, no bias: wte 11*16 = 176; per layer ln_1 16,
    -- c_attn 16*48 = 768, c_proj 256, ln_2 16, c_fc 1024, c_proj 1024: 3104; ln_f 16;
    -- 176 + 2 * 3104 + 16 = 6400 (wpe left out); attention 12 * 2 * 8 * 16 = 3072
    local c = tiny()
    assert.are.equal(6400, gpt.active_parameters(c))
    assert.are.equal(6 * 6400 + 3072, gpt.flops_per_token(c))
    -- with biases: + per layer 16 + 48 + 16 + 16 + 64 + 16 = 176, and ln_f's 16
    assert.are.equal(6400 + 2 * 176 + 16, gpt.active_parameters(tiny { bias = true }))
    -- against a built model: every parameter but wpe (num_parameters counts the tied head once)
    for _, bias in ipairs { false, true } do
      local m = gpt.GPT(tiny { bias = bias })
      assert.are.equal(m:num_parameters() - 8 * 16, gpt.active_parameters(tiny { bias = bias }))
    end
    -- GPT-2 small (vocab 50257, context 1024): nanoGPT's 123.65M non-embedding-position
    -- parameters (124.44M with wpe's 0.79M)
    local g = { vocab = 50257, context = 1024, layers = 12, dim = 768, heads = 12, bias = true }
    assert.are.equal(124439808 - 1024 * 768, gpt.active_parameters(g))
  end)

  it("looks up the peak by device name and dtype, nil where unknown", function()
    assert.are.equal(989.4, gpt.peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16"))
    assert.are.equal(67, gpt.peak_tflops("NVIDIA H200", "float32"))
    assert.are.equal(756, gpt.peak_tflops("NVIDIA H100 PCIe", "bfloat16"))
    assert.are.equal(312, gpt.peak_tflops("NVIDIA A100-SXM4-80GB", "float16"))
    assert.is_nil(gpt.peak_tflops("NVIDIA H100 80GB HBM3", "float64"))
    assert.is_nil(gpt.peak_tflops("NVIDIA GeForce RTX 4090", "bfloat16"))
    assert.is_nil(gpt.peak_tflops(nil, "bfloat16"))
  end)
end)

describe("examples/gpt data", function()
  it("encodes and decodes bytes, ids from 1", function()
    local v = data.Vocab.of("hello")
    assert.are.same({ 101, 104, 108, 111 }, v.chars)
    assert.are.same({ 2, 1, 3, 3, 4 }, v:encode("hello"):totable())
    assert.are.equal("hello", v:decode(v:encode("hello")))
    assert.error_matches(function() v:encode("hex") end, { "byte 120" })
  end)

  it("makes windows whose targets are the inputs shifted by one", function()
    local ds = data.Dataset.load {}
    local x, y = ds:batch_at("train", tl.tensor({ 1, 101 }, { dtype = "int64" }), 6)
    local ids = ds.train:view(-1):narrow(1, 1, 120):totable()
    local xt, yt = x:totable(), y:totable()
    for t = 1, 6 do
      assert.are.equal(ids[t], xt[1][t])
      assert.are.equal(ids[t + 1], yt[1][t])
      assert.are.equal(ids[100 + t], xt[2][t])
      assert.are.equal(ids[101 + t], yt[2][t])
    end
  end)
end)

describe("examples/gpt scripts", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. sh_quote(dir)))
  end)
  after_each(function() if dir:match("^/tmp/") then os.execute("rm -rf " .. sh_quote(dir)) end end)

  local function run(cmd)
    local log = dir .. "/log"
    local ok = os.execute(cmd .. " > " .. sh_quote(log) .. " 2>&1")
    return ok, files.read_file(log) or ""
  end

  it("train.lua logs steps, writes the loss CSV and a checkpoint that sample.lua continues", function()
    local ckpt = dir .. "/gpt.safetensors"
    local ok, log = run(string.format("cd %s && TLUA_PROGRESS=off %s %s --steps 40 --layers 1 --dim 32 --heads 2 --context 32 " ..
      "--batch 8 --log-every 10 --eval-every 20 --eval-iters 2 --save %s", sh_quote(dir), sh_quote(BIN),
      sh_quote(ROOT .. "/examples/gpt/train.lua"), sh_quote(ckpt)))
    assert.is_true(ok == true, log)
    local losses = {}
    for step, loss in log:gmatch("step (%d+) loss (%d+%.%d+) %(%d+ tokens/s") do losses[tonumber(step)] = tonumber(loss) end
    assert.is_not_nil(losses[10], log)
    assert.is_not_nil(losses[40], log)
    assert.is_true(losses[40] < losses[10], log)
    assert.matches("step 20 val loss %d+%.%d+", log)
    assert.matches("done: 40 steps .* val loss %d+%.%d+", log)
    local csv = files.read_file(dir .. "/gpt_loss.csv")
    local rows = 0
    for _ in csv:gmatch("\n%d+,[%d.]+,[%deE.+-]+") do rows = rows + 1 end
    assert.are.equal(40, rows)
    local sok, text = run(string.format("%s %s --checkpoint %s --tokens 50 --prompt Q", sh_quote(BIN),
      sh_quote(ROOT .. "/examples/gpt/sample.lua"), sh_quote(ckpt)))
    assert.is_true(sok == true, text)
    assert.are.equal("Q", text:sub(1, 1))
    assert.is_true(#text >= 51, text)
  end)

  it("train.lua --preset gpt2 takes GPT-2's settings under the given options and logs the MFU", function()
    local ckpt = dir .. "/gpt2.safetensors"
    local cmd = string.format("cd %s && TLUA_PROGRESS=off %s %s --preset gpt2 --layers 1 --dim 32 --heads 2 " ..
      "--context 16 --batch 2 --steps 4 --log-every 2 --save %s", sh_quote(dir), sh_quote(BIN),
      sh_quote(ROOT .. "/examples/gpt/train.lua"), sh_quote(ckpt))
    local ok, log = run(cmd .. " --peak-tflops 0.002")
    assert.is_true(ok == true, log)
    assert.matches("preset gpt2, batch 2, 4 steps, lr 0.0006", log, 1, true)
    local _, meta = tl.load(ckpt)
    assert.are.equal("true", meta["config.bias"]) -- the preset's biases
    assert.are.equal("2", meta["config.heads"])
    assert.are.equal("16", meta["config.context"])
    -- MFU = FLOPs per token (gpt.flops_per_token, checked by hand above) * tokens/s / peak
    local fpt = gpt.flops_per_token { vocab = tonumber(meta["config.vocab"]), context = 16, layers = 1, dim = 32,
      heads = 2, bias = true }
    local lines = 0
    for rate, pct in log:gmatch("step %d+ loss [%d.]+ %((%d+) tokens/s, [%d.]+ ms/step, MFU ([%d.]+)%%%)") do
      lines = lines + 1
      local want = 100 * fpt * tonumber(rate) / 0.002e12
      assert.is_true(math.abs(tonumber(pct) - want) <= 0.05 + 1e-3 * want, string.format("%s%% vs %.3f%%", pct, want))
    end
    assert.are.equal(2, lines, log)
    -- no peak on the cpu without --peak-tflops; an unknown preset names the known ones
    ok, log = run(cmd)
    assert.is_true(ok == true, log)
    assert.matches("step 4 loss [%d.]+ %(%d+ tokens/s, [%d.]+ ms/step, MFU %?%)", log)
    ok, log = run(string.format("%s %s --preset gpt3", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("--preset: unknown preset 'gpt3' (known: char, gpt2)", log, 1, true)
  end)

  it("train.lua refuses bad flags with its usage", function()
    local ok, log = run(string.format("%s %s --heads 5 --dim 32", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("--dim must be a multiple of --heads", log, 1, true)
    ok, log = run(string.format("%s %s --stepz 3", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("unknown option --stepz", log, 1, true)
    assert.matches("usage: tlua examples/gpt/train.lua", log, 1, true)
    ok, log = run(string.format("%s %s --graph maybe", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("--graph must be true or false", log, 1, true)
    ok, log = run(string.format("%s %s --graph true", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("--graph true needs --device cuda, and no --moe or --sparse-ffn", log, 1, true)
  end)
end)

describe("examples/gpt on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of examples/gpt did not run")
    return
  end

  it("generates with the KV cache on the GPU as the float64 CPU recompute, past the context", function()
    tl.manual_seed(6)
    local cpu = gpt.GPT(gpt.config { vocab = 13, context = 16, layers = 2, dim = 64, heads = 2, dtype = "float64",
      attention = "composed", bias = true })
    local gpu = gpt.GPT(gpt.config { vocab = 13, context = 16, layers = 2, dim = 64, heads = 2, device = "cuda",
      bias = true })
    gpu:load_state_dict(cpu:state_dict())
    cpu:eval()
    gpu:eval()
    local ids = tokens(3, 40, 13)
    local ids_gpu = ids:to("cuda")
    local cache = gpu:new_cache(3)
    tl.no_grad(function()
      for t = 2, 40 do
        local got = gpu:generate_step(ids_gpu, t, cache)
        assert.are.equal("cuda:0", cache.layers[1].k.device)
        local want = cpu(ids:narrow(2, cache.first, t - cache.first + 1)):view(3, 13)
        assert.tensor_near(want, got:to("cpu"):double(), 1e-4, 1e-5, "step " .. t)
      end
    end)
    -- filled to 16 at t = 16, slid at 17 (to 10..17), 26 (to 19..26), 35 (to 28..35)
    assert.are.equal(28, cache.first)
  end)

  it("loads a CPU state dict and gives the float64 CPU loss under bf16 autocast, gradients too", function()
    tl.manual_seed(5)
    local cpu = gpt.GPT(gpt.config { vocab = 13, context = 16, layers = 2, dim = 64, heads = 2, dtype = "float64",
      attention = "composed" })
    local gpu = gpt.GPT(gpt.config { vocab = 13, context = 16, layers = 2, dim = 64, heads = 2, device = "cuda" })
    gpu:load_state_dict(cpu:state_dict()) -- float64 CPU tensors into float32 CUDA parameters
    local x, y = tokens(4, 16, 13), tokens(4, 16, 13)
    local _, want = cpu(x, y)
    local _, got = tl.autocast("bfloat16", gpu, x:to("cuda"), y:to("cuda"))
    assert.is_true(math.abs(want:item() - got:item()) < 2e-2, string.format("%g vs %g", want:item(), got:item()))
    want:backward()
    got:backward()
    local pc = {}
    for name, p in cpu:named_parameters() do pc[name] = p end
    for name, p in gpu:named_parameters() do
      assert.are.equal("float32", p.grad.dtype)
      assert.tensor_near(pc[name].grad, p.grad:to("cpu"):double(), 1e-1, 2e-3, name)
    end
  end)
end)
