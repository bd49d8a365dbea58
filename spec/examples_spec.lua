-- The example training scripts: tiny runs of examples/resnet and examples/lstm train (the loss falls), fashion_mnist's figures do not depend on --log-every (1 and several ranks), and every example stopped after a few steps (--stop-after, --checkpoint) and resumed (--resume) ends bitwise where the uninterrupted run ends, CSV included (CPU).
local files = require("helpers.files")
local sh_quote, read_file, BIN, ROOT = files.sh_quote, files.read_file, files.BIN, files.ROOT

local dir
before_each(function() dir = files.make_temp_dir() end)
after_each(function() files.remove_dir(dir) end)

-- runs an example with arguments in dir (on nproc CPU ranks when given: tlua --nproc); returns
-- whether it succeeded and its output
local function run(script, args, nproc)
  local log = dir .. "/log"
  local launch = nproc and string.format("timeout 300 %s --nproc %d", sh_quote(BIN), nproc) or sh_quote(BIN)
  local ok = os.execute(string.format("cd %s && TLUA_PROGRESS=off %s %s %s > %s 2>&1", sh_quote(dir), launch,
    sh_quote(ROOT .. "/examples/" .. script), args, sh_quote(log)))
  return ok == true or ok == 0, read_file(log) or ""
end

-- the loss column of a CSV (column `col`), in order
local function losses(path, col)
  local out = {}
  for line in (read_file(path) or ""):gmatch("[^\n]+") do
    local fields = {}
    for f in line:gmatch("[^,]+") do fields[#fields + 1] = f end
    out[#out + 1] = tonumber(fields[col])
  end
  return out
end

local function mean(list, from, to)
  local s = 0
  for i = from, to do s = s + list[i] end
  return s / (to - from + 1)
end

-- the uninterrupted run (--save a.safetensors, --csv a.csv) against one stopped after `stop`
-- steps and resumed (--save b.safetensors, --csv b.csv): the same model file, byte for byte
local function check_resume(script, args, stop, nproc)
  local ok, log = run(script, args .. " --csv a.csv --save a.safetensors", nproc)
  assert.is_true(ok, log)
  local full_log = log
  ok, log = run(script, args .. " --csv b.csv --checkpoint ck.safetensors --checkpoint-every 3 --stop-after " .. stop,
    nproc)
  assert.is_true(ok, log)
  assert.matches("stopped after step " .. stop .. " %(%-%-stop%-after%)", log)
  ok, log = run(script, args .. " --csv b.csv --checkpoint ck.safetensors --resume ck.safetensors --save b.safetensors",
    nproc)
  assert.is_true(ok, log)
  assert.matches("resumed from ck.safetensors", log, 1, true)
  local a, b = read_file(dir .. "/a.safetensors"), read_file(dir .. "/b.safetensors")
  assert.is_truthy(a, full_log)
  assert.is_true(a == b, "the resumed run's model differs from the uninterrupted run's")
  assert.are.equal(read_file(dir .. "/a.csv"), read_file(dir .. "/b.csv"))
  -- other options than the checkpoint's are refused
  ok, log = run(script, args .. " --seed 99 --resume ck.safetensors", nproc)
  assert.is_false(ok)
  assert.matches("--resume: the checkpoint's run had seed = ", log, 1, true)
  return full_log
end

describe("examples resume bitwise (CPU)", function()
  it("fashion_mnist/train.lua", function()
    check_resume("fashion_mnist/train.lua", "--limit 256 --epochs 2 --batch 32", 5)
  end)

  it("gpt/train.lua (with dropout)", function()
    check_resume("gpt/train.lua", "--steps 10 --layers 1 --dim 16 --heads 2 --context 16 --batch 4 --log-every 4 " ..
      "--eval-every 6 --eval-iters 1 --dropout 0.1", 7)
  end)

  it("gpt/train.lua on 2 ranks (each its own dropout masks: every rank's RNG state resumed)", function()
    check_resume("gpt/train.lua", "--steps 10 --layers 1 --dim 16 --heads 2 --context 16 --batch 4 --log-every 4 " ..
      "--eval-every 6 --eval-iters 1 --dropout 0.1", 7, 2)
    local info = select(2, require("tlua").checkpoint.read(dir .. "/ck.safetensors"))
    assert.are.same({ 2, 2 }, info.rng.shape)
  end)
end)

-- the figures of a log's epoch lines (loss and accuracies, not the times)
local function epoch_figures(log)
  local out = {}
  for line in log:gmatch("epoch %d+/%d+: train loss [^\n]-test accuracy [%d.]+%%") do out[#out + 1] = line end
  return out
end

describe("examples/fashion_mnist/train.lua", function()
  -- 300 images in batches of 32: 10 steps an epoch, the last of 12 images
  local ARGS = "--limit 300 --epochs 2 --batch 32"

  it("--log-every only changes when the figures are read: the same CSV, epoch lines and model for 1 and 7 " ..
    "(a --stop-after and checkpoints between its flushes, resumed)", function()
    -- check_resume: --checkpoint-every 3 and --stop-after 12 (not multiples of 7), then --resume
    local log7 = check_resume("fashion_mnist/train.lua", ARGS .. " --log-every 7", 12)
    local ok, log1 = run("fashion_mnist/train.lua", ARGS .. " --log-every 1 --csv one.csv --save one.safetensors")
    assert.is_true(ok, log1)
    local csv = read_file(dir .. "/one.csv")
    assert.are.equal(csv, read_file(dir .. "/a.csv"))
    assert.are.equal(read_file(dir .. "/one.safetensors"), read_file(dir .. "/a.safetensors"))
    local rows = {}
    for line in csv:gmatch("[^\n]+") do rows[#rows + 1] = line end
    assert.are.equal(1 + 20, #rows)
    assert.are.equal("epoch,batch,step,loss,accuracy", rows[1])
    assert.matches("^1,10,10,[%d.]+,[%d.]+$", rows[11])
    assert.matches("^2,10,20,[%d.]+,[%d.]+$", rows[21])
    -- a run with --limit and several epochs prints every epoch's line (bench/data_parallel.lua reads
    -- its samples/s), with the same figures whatever --log-every is
    local figures = epoch_figures(log1)
    assert.are.equal(2, #figures, log1)
    assert.are.same(figures, epoch_figures(log7))
    assert.matches("epoch 2/2: train loss [%d.]+, train accuracy [%d.]+%%, test accuracy [%d.]+%% " ..
      "%([%d.]+ s, %d+ samples/s%)", log1)

    -- a crash after the checkpoint of step 6 (steps 1-6 not yet read by --log-every 7): the
    -- checkpoint and the CSV on disk then hold them, so a run resumed from there ends as the others
    local wrapper = io.open(dir .. "/crash.lua", "w")
    wrapper:write(string.format([[
      local tl = require("tlua")
      local save, saves = tl.checkpoint.save, 0
      tl.checkpoint.save = function(...)
        save(...)
        saves = saves + 1
        if saves == 2 then assert(os.execute("cp ck.safetensors mid.safetensors && cp c.csv mid.csv")) end
      end
      dofile(%q)
    ]], ROOT .. "/examples/fashion_mnist/train.lua"))
    wrapper:close()
    ok = os.execute(string.format("cd %s && TLUA_PROGRESS=off %s crash.lua %s > log 2>&1", sh_quote(dir), sh_quote(BIN),
      ARGS .. " --log-every 7 --csv c.csv --checkpoint ck.safetensors --checkpoint-every 3 --stop-after 8"))
    assert.is_true(ok == true or ok == 0, read_file(dir .. "/log"))
    local log
    ok, log = run("fashion_mnist/train.lua", ARGS .. " --log-every 7 --csv mid.csv --resume mid.safetensors " ..
      "--save mid_end.safetensors")
    assert.is_true(ok, log)
    assert.matches("resumed from mid.safetensors: epoch 1, step 6", log, 1, true)
    assert.are.equal(csv, read_file(dir .. "/mid.csv"))
    assert.are.equal(read_file(dir .. "/one.safetensors"), read_file(dir .. "/mid_end.safetensors"))
    assert.are.same(figures, epoch_figures(log))
  end)

  it("on 2 ranks: one all_reduce per read gives the CSV of --log-every 1 (--bucket-mb given)", function()
    -- 150 images a rank: 5 steps, read at steps 2, 4 and at the epoch's end
    local args = "--limit 300 --epochs 1 --batch 32"
    local ok, log = run("fashion_mnist/train.lua", args .. " --log-every 1 --csv one.csv", 2)
    assert.is_true(ok, log)
    local ok2, log2 = run("fashion_mnist/train.lua", args .. " --log-every 2 --bucket-mb 0.5 --csv two.csv", 2)
    assert.is_true(ok2, log2)
    local csv = read_file(dir .. "/one.csv")
    assert.are.equal(1 + 5, select(2, csv:gsub("\n", "")))
    assert.are.equal(csv, read_file(dir .. "/two.csv"))
    -- the ranks' losses averaged (the first near ln 10), the hits summed over the global batch
    local l, acc = losses(dir .. "/one.csv", 4), losses(dir .. "/one.csv", 5)
    assert.is_true(math.abs(l[1] - math.log(10)) < 0.3, csv)
    assert.are.equal(5, #l)
    for i = 1, 5 do assert.is_true(l[i] > 0 and l[i] < 3 and acc[i] >= 0 and acc[i] <= 1, csv) end
    assert.are.equal(1, #epoch_figures(log2), log2)
    assert.are.same(epoch_figures(log), epoch_figures(log2))
  end)

  it("refuses a bad --log-every, --bucket-mb or --graph with its usage; --shard-optimizer on one rank says so", function()
    for value, message in pairs({ ["0"] = "--bucket-mb must be a number of MiB > 0",
      ["-2"] = "--bucket-mb must be a number of MiB > 0", ["lots"] = "--bucket-mb expects a number, got 'lots'" }) do
      local ok, log = run("fashion_mnist/train.lua", "--bucket-mb " .. value)
      assert.is_false(ok)
      assert.matches(message, log, 1, true)
      assert.matches("usage: tlua examples/fashion_mnist/train.lua", log, 1, true)
      assert.matches("--bucket-mb X", log, 1, true)
    end
    for value, message in pairs({ ["0"] = "--log-every must be >= 1", ["2.5"] = "--log-every expects an integer",
      ["1 --graph maybe"] = "--graph must be true or false", ["1 --graph true"] = "--graph true needs --device cuda" }) do
      local ok, log = run("fashion_mnist/train.lua", "--log-every " .. value)
      assert.is_false(ok)
      assert.matches(message, log, 1, true)
      assert.matches("usage: tlua examples/fashion_mnist/train.lua", log, 1, true)
    end
    local ok, log = run("fashion_mnist/train.lua", "--limit 64 --epochs 1 --batch 32 --shard-optimizer --bucket-mb 1")
    assert.is_true(ok, log)
    assert.matches("shard-optimizer: one rank, nothing to shard", log, 1, true)
  end)
end)

describe("examples/resnet/train.lua", function()
  it("a tiny ResNet trains (the loss falls), and resumes bitwise", function()
    local args = "--limit 192 --test-limit 100 --width 4 --blocks 1 --epochs 2 --batch 24 --optimizer adamw " ..
      "--lr 0.02 --label-smoothing 0"
    local log = check_resume("resnet/train.lua", args, 10)
    assert.matches("resnet: widths 4/8/16, 1 blocks a stage", log, 1, true)
    assert.matches("epoch 2/2: train loss [%d.]+, train accuracy [%d.]+%%, test accuracy [%d.]+%%", log)
    assert.matches("done: resnet, 2 epochs, test accuracy", log, 1, true)
    local l = losses(dir .. "/a.csv", 4)
    assert.are.equal(16, #l)
    assert.is_true(mean(l, 13, 16) < mean(l, 1, 4) - 0.05, log)
  end)

  it("refuses bad options with its usage", function()
    local ok, log = run("resnet/train.lua", "--optimizer lion")
    assert.is_false(ok)
    assert.matches("--optimizer must be sgd or adamw", log, 1, true)
    ok, log = run("resnet/train.lua", "--widht 8")
    assert.is_false(ok)
    assert.matches("usage: tlua examples/resnet/train.lua", log, 1, true)
  end)
end)

describe("examples/lstm", function()
  it("train.lua: a tiny LSTM trains (the loss falls), samples, resumes bitwise; sample.lua continues it", function()
    local args = "--steps 24 --hidden 32 --embed 16 --bptt 16 --batch 8 --lr 0.01 --log-every 8 --eval-every 12 " ..
      "--eval-chunks 2 --dropout 0.1 --sample-tokens 20"
    local log = check_resume("lstm/train.lua", args, 10)
    assert.matches("step 12 val loss [%d.]+ %([%d.]+ bits/char%)", log)
    assert.matches("done: 24 steps .* val loss [%d.]+", log)
    assert.matches("sample %(temperature 0.8%):", log)
    local l = losses(dir .. "/a.csv", 2)
    assert.are.equal(24, #l)
    assert.is_true(mean(l, 19, 24) < mean(l, 1, 6) - 0.3, log)
    local ok, text = run("lstm/sample.lua", "--model a.safetensors --tokens 30 --samples 2 --prompt Q")
    assert.is_true(ok, text)
    assert.are.equal("Q", text:sub(1, 1))
    assert.matches("\n%-%-%-\nQ", text)
  end)

  it("refuses bad options with its usage", function()
    local ok, log = run("lstm/train.lua", "--bptt 0")
    assert.is_false(ok)
    assert.matches("--bptt must be at least 1", log, 1, true)
    ok, log = run("lstm/sample.lua", "--tokens 3")
    assert.is_false(ok)
    assert.matches("--model (or --checkpoint) is required", log, 1, true)
  end)
end)

describe("sample.lua reads the model from a file of --save or of --checkpoint", function()
  local TINY = {
    gpt = "--steps 2 --layers 1 --dim 16 --heads 2 --context 16 --batch 4 --log-every 1 --eval-every 2 --eval-iters 1",
    lstm = "--steps 2 --hidden 16 --embed 8 --bptt 8 --batch 4 --log-every 1 --eval-every 2 --eval-chunks 1 " ..
      "--sample-tokens 0",
  }
  for _, name in ipairs({ "gpt", "lstm" }) do
    it(name .. ": both files, under --model and --checkpoint, give the same text", function()
      local ok, log = run(name .. "/train.lua", TINY[name] .. " --save w.safetensors --checkpoint ck.safetensors")
      assert.is_true(ok, log)
      -- one run wrote both files at its end: the same weights, so the same seed draws the same text
      local texts = {}
      for _, how in ipairs({ "--model w.safetensors", "--checkpoint w.safetensors", "--model ck.safetensors",
        "--checkpoint ck.safetensors", "--model ck.safetensors --checkpoint ck.safetensors" }) do
        local sok, text = run(name .. "/sample.lua", how .. " --tokens 12 --samples 2 --prompt Q --seed 3")
        assert.is_true(sok, how .. ": " .. text)
        texts[#texts + 1] = text
      end
      assert.are.equal("Q", texts[1]:sub(1, 1))
      assert.matches("\n%-%-%-\nQ", texts[1])
      for i = 2, #texts do assert.are.equal(texts[1], texts[i]) end
    end)
  end

  it("refuses a file without a vocabulary, a checkpoint without a model, and two different paths", function()
    local script = io.open(dir .. "/make.lua", "w")
    script:write([[
      local tl = require("tlua")
      tl.save("plain.safetensors", { w = tl.zeros(2) })
      tl.checkpoint.save("nomodel.safetensors", { step = 1 })
    ]])
    script:close()
    assert.is_true(os.execute(string.format("cd %s && %s make.lua", sh_quote(dir), sh_quote(BIN))))
    for _, name in ipairs({ "gpt", "lstm" }) do
      local ok, log = run(name .. "/sample.lua", "--model plain.safetensors")
      assert.is_false(ok)
      assert.matches("'plain.safetensors' has no vocabulary: was it written by train.lua --save or --checkpoint?",
        log, 1, true)
      ok, log = run(name .. "/sample.lua", "--checkpoint nomodel.safetensors")
      assert.is_false(ok)
      assert.matches("'nomodel.safetensors' is a checkpoint without a model", log, 1, true)
      ok, log = run(name .. "/sample.lua", "--model a.safetensors --checkpoint b.safetensors")
      assert.is_false(ok)
      assert.matches("--checkpoint is another name of --model", log, 1, true)
    end
  end)
end)
