-- examples/gpt: the model (fused attention against the composed reference, float64 gradcheck of a tiny GPT, tied weights), a tiny config that trains on the CPU, and train.lua / sample.lua end to end.
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

  it("gives the logits-then-cross_entropy loss and gradients with the fused head and loss (float64)", function()
    local fused = gpt.GPT(tiny { fused_loss = true })
    local plain = gpt.GPT(tiny { fused_loss = false })
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

  it("train.lua refuses bad flags with its usage", function()
    local ok, log = run(string.format("%s %s --heads 5 --dim 32", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("--dim must be a multiple of --heads", log, 1, true)
    ok, log = run(string.format("%s %s --stepz 3", sh_quote(BIN), sh_quote(ROOT .. "/examples/gpt/train.lua")))
    assert.is_not_true(ok == true)
    assert.matches("unknown option --stepz", log, 1, true)
    assert.matches("usage: tlua examples/gpt/train.lua", log, 1, true)
  end)
end)

describe("examples/gpt on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of examples/gpt did not run")
    return
  end

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
