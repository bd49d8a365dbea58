-- Generates text from a model written by examples/lstm/train.lua --save or --checkpoint (--checkpoint path is the same as --model path): the prompt is read once, then each character is drawn (temperature, top-k, top-p: examples/gpt/sampling.lua) and fed back with the LSTM's state.
--
--   tlua examples/lstm/sample.lua --model path [--prompt text] [--tokens N] [--temperature X]
--        [--top-k K] [--top-p P] [--seed N] [--samples N] [--device cpu|cuda]
local tl = require("tlua")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../gpt/?.lua;" .. package.path
local lstm = require("model")
local data = require("data")
local sampling = require("sampling")

local usage = [[
usage: tlua examples/lstm/sample.lua --model path [options]
  --model path       the model: a file of train.lua --save or --checkpoint (required)
  --checkpoint path  the same as --model
  --prompt text      the text to continue (default: a newline)
  --tokens N         characters to generate per sample (default 300)
  --samples N        how many samples, drawn side by side (default 1)
  --temperature X    divides the logits (default 0.8; lower is more conservative)
  --top-k K          sample among the K likeliest characters only (default 0: all)
  --top-p P          nucleus sampling (default 1: off)
  --seed N           seed of the sampling (default 1)
  --device cpu|cuda  where to run the model (default cpu)
  --help             this text]]

local numeric = { tokens = "integer", samples = "integer", temperature = "number", top_k = "integer", top_p = "number",
  seed = "integer" }
local opts, fail = cli.parse(arg, { program = "sample.lua", usage = usage, numeric = numeric,
  text = { model = true, checkpoint = true, prompt = true, device = true },
  defaults = { prompt = "\n", tokens = 300, samples = 1, temperature = 0.8, top_k = 0, top_p = 1, seed = 1,
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
local tensors, vocab, overrides = data.load_model(path, lstm.defaults, fail)
local config = lstm.config(overrides)
local model = lstm.CharLSTM(config):to(opts.device)
model:load_state_dict(tensors)
model:eval()

-- ---- sampling ---------------------------------------------------------------------------------
tl.manual_seed(opts.seed)
local rule = { temperature = opts.temperature, top_k = opts.top_k, top_p = opts.top_p }
local S = opts.samples
local prompt = vocab:encode(opts.prompt):to(opts.device)
local n = prompt.shape[1]
local drawn = {}
tl.no_grad(function()
  local logits, state = model(prompt:view(1, n):expand(S, n):contiguous())
  local last = logits:narrow(2, n, 1):reshape(S, config.vocab)
  for t = 1, opts.tokens do
    local ids = sampling.sample(last, rule):view(S, 1)
    drawn[t] = ids
    logits, state = model(ids, state)
    last = logits:reshape(S, config.vocab)
  end
end)
local rows = opts.tokens > 0 and tl.cat(drawn, 2):to("cpu"):totable() or {}
for s = 1, S do
  if s > 1 then io.write("\n---\n") end
  io.write(opts.prompt, rows[s] and vocab:decode(rows[s]) or "", "\n")
end
