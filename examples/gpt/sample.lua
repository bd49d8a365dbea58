-- Generates text from a model written by examples/gpt/train.lua --save or --checkpoint.
--
--   tlua examples/gpt/sample.lua --model path [--prompt text] [--tokens N]
--        [--temperature X] [--top-k K] [--top-p P] [--seed N] [--device cpu|cuda] [--samples N]
--
-- --checkpoint path is the same as --model path. The model keeps a KV cache (GPT:generate_step
-- in examples/gpt/model.lua): the prompt is one causal pass, then each character costs one
-- token's forward. At the context the window slides: the cache is recomputed from the last
-- context / 2 characters (one pass), then fills again. Every token is drawn on the model's device
-- (examples/gpt/sampling.lua). One sample is streamed: each character is read back to the host
-- and written as it is drawn (one wait for the device per character: the price of streaming).
-- Several samples are one batch and are written when they are complete, one after the other.
local tl = require("tlua")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local gpt = require("model")
local data = require("data")
local sampling = require("sampling")

local usage = [[
usage: tlua examples/gpt/sample.lua --model path [options]
  --model path       the model: a file of train.lua --save or --checkpoint (required)
  --checkpoint path  the same as --model
  --prompt text      the text to continue (default: a newline)
  --tokens N         characters to generate per sample (default 300); past the context the
                     model sees a window: the last context/2 to context characters
  --samples N        how many samples (default 1: written character by character as drawn;
                     more: drawn as one batch, each written when all are complete)
  --temperature X    divides the logits (default 0.8; lower is more conservative)
  --top-k K          sample among the K likeliest characters only (default 40; 0: all)
  --top-p P          then among the fewest likeliest whose probabilities sum to P or
                     more (nucleus sampling; default 1: off)
  --seed N           seed of the sampling (default 1)
  --device cpu|cuda  where to run the model (default cpu)
  --help             this text]]

local numeric = { tokens = "integer", samples = "integer", temperature = "number", top_k = "integer", top_p = "number",
  seed = "integer" }
local opts, fail = cli.parse(arg, { program = "sample.lua", usage = usage, numeric = numeric,
  text = { model = true, checkpoint = true, prompt = true, device = true },
  defaults = { prompt = "\n", tokens = 300, samples = 1, temperature = 0.8, top_k = 40, top_p = 1, seed = 1,
    device = "cpu" } })
if opts.model and opts.checkpoint and opts.model ~= opts.checkpoint then
  fail("--checkpoint is another name of --model: give one path, not two different ones")
end
local path = opts.model or opts.checkpoint
if not path then fail("--model (or --checkpoint) is required") end
if not (opts.temperature > 0) then fail("--temperature must be > 0") end
if opts.top_k < 0 then fail("--top-k must be >= 0") end
if not (opts.top_p > 0 and opts.top_p <= 1) then fail("--top-p must be in (0, 1]") end
if opts.samples < 1 then fail("--samples must be >= 1") end
if opts.tokens < 0 then fail("--tokens must be >= 0") end
if opts.prompt == "" then fail("--prompt must not be empty") end

-- ---- the model from the file's tensors and metadata (--save's or --checkpoint's) -------------
local tensors, vocab, overrides = data.load_model(path, gpt.defaults, fail)
overrides.device = opts.device
local model = gpt.GPT(gpt.config(overrides))
model:load_state_dict(tensors)
model:eval()

-- ---- sampling ---------------------------------------------------------------------------------
tl.manual_seed(opts.seed)
local rule = { temperature = opts.temperature, top_k = opts.top_k, top_p = opts.top_p }

-- ids [samples, prompt + tokens] on the device: the prompt in every row, then each step's
-- draws written in place; the cache holds the keys and values of the window the model sees
local prompt = vocab:encode(opts.prompt)
local n, S = prompt.shape[1], opts.samples
local ids = tl.empty({ S, n + opts.tokens }, { dtype = "int64", device = opts.device })
local cache = model:new_cache(S)
local stream = S == 1
if stream then
  io.write(opts.prompt)
  io.stdout:flush()
end
tl.no_grad(function()
  ids:narrow(2, 1, n):copy_(prompt:view(1, n):expand(S, n):contiguous():to(opts.device))
  for t = n, n + opts.tokens - 1 do
    local logits = model:generate_step(ids, t, cache)
    local drawn = sampling.sample(logits, rule)
    ids:narrow(2, t + 1, 1):copy_(drawn:view(S, 1))
    if stream then
      io.write(vocab:decode({ drawn:item() })) -- waits for this step's draw
      io.stdout:flush()
    end
  end
end)
if stream then
  io.write("\n")
  return
end
local rows = ids:to("cpu"):totable()
for s = 1, S do
  if s > 1 then io.write("\n---\n") end
  io.write(vocab:decode(rows[s]), "\n")
end
