-- Generates text from a checkpoint written by examples/gpt/train.lua --save.
--
--   tlua examples/gpt/sample.lua --checkpoint path [--prompt text] [--tokens N]
--        [--temperature X] [--top-k K] [--seed N] [--device cpu|cuda] [--samples N]
local tl = require("tlua")
local cli = require("tlua.cli")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local gpt = require("model")
local data = require("data")

local usage = [[
usage: tlua examples/gpt/sample.lua --checkpoint path [options]
  --checkpoint path  the model written by train.lua --save (required)
  --prompt text      the text to continue (default: a newline)
  --tokens N         characters to generate per sample (default 300)
  --samples N        how many samples (default 1)
  --temperature X    divides the logits (default 0.8; lower is more conservative)
  --top-k K          sample among the K likeliest characters only (default 40; 0: all)
  --seed N           seed of the sampling (default 1)
  --device cpu|cuda  where to run the model (default cpu)
  --help             this text]]

local numeric = { tokens = "integer", samples = "integer", temperature = "number", top_k = "integer", seed = "integer" }
local opts, fail = cli.parse(arg, { program = "sample.lua", usage = usage, numeric = numeric,
  text = { checkpoint = true, prompt = true, device = true },
  defaults = { prompt = "\n", tokens = 300, samples = 1, temperature = 0.8, top_k = 40, seed = 1, device = "cpu" } })
if not opts.checkpoint then fail("--checkpoint is required") end
if not (opts.temperature > 0) then fail("--temperature must be > 0") end

-- ---- the model from the checkpoint's tensors and metadata ----------------------------------------
local tensors, meta = tl.load(opts.checkpoint)
if not meta.vocab_bytes then fail("'" .. opts.checkpoint .. "' has no vocabulary: was it written by train.lua --save?") end
local chars = {}
for b in meta.vocab_bytes:gmatch("%d+") do chars[#chars + 1] = tonumber(b) end
local vocab = data.Vocab.from_bytes(chars)
local overrides = {}
for k, v in pairs(gpt.defaults) do
  local s = meta["config." .. k]
  if s ~= nil then
    if type(v) == "number" then overrides[k] = math.tointeger(tonumber(s)) or tonumber(s)
    elseif type(v) == "boolean" then overrides[k] = s == "true"
    else overrides[k] = s end
  end
end
overrides.device = opts.device
local model = gpt.GPT(gpt.config(overrides))
model:load_state_dict(tensors)
model:eval()
local context = model.config.context

-- ---- sampling ------------------------------------------------------------------------------------
math.randomseed(opts.seed)

-- a token drawn from logits (a Lua array) with the temperature and top-k
local function draw(logits)
  local order = {}
  for k = 1, #logits do order[k] = k end
  if opts.top_k > 0 and opts.top_k < #logits then
    table.sort(order, function(a, b) return logits[a] > logits[b] end)
    for k = #order, opts.top_k + 1, -1 do order[k] = nil end
  end
  local top = -math.huge
  for _, k in ipairs(order) do top = math.max(top, logits[k]) end
  local weights, total = {}, 0
  for j, k in ipairs(order) do
    weights[j] = math.exp((logits[k] - top) / opts.temperature)
    total = total + weights[j]
  end
  local r, acc = math.random() * total, 0
  for j, k in ipairs(order) do
    acc = acc + weights[j]
    if r <= acc then return k end
  end
  return order[#order]
end

local prompt_ids = vocab:encode(opts.prompt):totable()
tl.no_grad(function()
  for s = 1, opts.samples do
    local ids = {}
    for k, v in ipairs(prompt_ids) do ids[k] = v end
    for _ = 1, opts.tokens do
      local first = math.max(1, #ids - context + 1)
      local window = table.move(ids, first, #ids, 1, {})
      local idx = tl.tensor({ window }, { dtype = "int64", device = opts.device })
      local logits = model(idx):view(vocab.size):to("float32"):to("cpu"):totable()
      ids[#ids + 1] = draw(logits)
    end
    if s > 1 then io.write("\n---\n") end
    io.write(vocab:decode(ids), "\n")
  end
end)
