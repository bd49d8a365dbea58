-- Generation speed of examples/gpt with its KV cache, as sample.lua streams it; bench/gpt_sample.py is the same in torch eager.
--
--   tlua bench/gpt_sample.lua [--device cpu|cuda] [--layers 6 --dim 384 --heads 6 --context 256
--       --vocab 65] [--tokens 500] [--dtype float32|bfloat16] [--threads N] [--repeats 3]
--
-- Random weights of the given shape (examples/gpt/model.lua, bias false), a prompt of 1 token,
-- then --tokens tokens, each from GPT:generate_step (one token's forward over the cache; at the
-- context the cache slides to the last context/2 tokens, one causal pass) and drawn on the device
-- by examples/gpt/sampling.lua (temperature 0.8, top-k 40: sample.lua's defaults), then read back
-- to the host as sample.lua does to print it. Prints `key value` lines: tokens_per_s (--tokens over
-- the median of --repeats generations, after one short warm-up), ms_per_token.
local tl = require("tlua")
local bench_dir = arg[0]:match("^(.*)/") or "."
local common = dofile(bench_dir .. "/common.lua")
package.path = bench_dir .. "/../examples/gpt/?.lua;" .. package.path
local gpt = require("model")
local sampling = require("sampling")

local o = common.options("bench/gpt_sample.lua", { device = "cpu", layers = 6, dim = 384, heads = 6, context = 256,
  vocab = 65, tokens = 500, dtype = "float32", threads = 0, repeats = 3 })
if o.threads > 0 then tl.set_num_threads(o.threads) end
if o.dtype ~= "float32" and o.dtype ~= "bfloat16" then error("bench/gpt_sample.lua: --dtype float32 or bfloat16", 0) end

tl.manual_seed(1)
local model = gpt.GPT(gpt.config { vocab = o.vocab, context = o.context, layers = o.layers, dim = o.dim,
  heads = o.heads, dtype = o.dtype, device = o.device })
model:eval()
local rule = { temperature = 0.8, top_k = 40 }

-- one generation of n tokens after a 1-token prompt; returns the seconds it took
local function generate(n)
  local ids = tl.ones({ 1, 1 + n }, { dtype = "int64", device = o.device })
  local cache = model:new_cache(1)
  local text = {}
  local start = tl.clock()
  tl.no_grad(function()
    for t = 1, n do
      local drawn = sampling.sample(model:generate_step(ids, t, cache), rule)
      ids:narrow(2, t + 1, 1):copy_(drawn:view(1, 1))
      text[t] = drawn:item() -- what sample.lua prints: one read back per token
    end
  end)
  return tl.clock() - start
end

generate(math.min(o.tokens, 20))
local times = {}
for r = 1, o.repeats do times[r] = generate(o.tokens) end
local t = common.median(times)
print(string.format("tokens_per_s %.1f\nms_per_token %.3f", o.tokens / t, 1000 * t / o.tokens))
