-- examples/gpt/sampling.lua: the next tokens drawn on the logits' device: temperature, top-k and top-p (nucleus) filtering of logits [B, V], then one multinomial draw per row; only token ids [B] (int64, 1-based) come out, on the logits' device.
--
--   local sampling = require("sampling")
--   local ids = sampling.sample(logits, { temperature = 0.8, top_k = 40, top_p = 0.95 })
--
-- The rule, row by row (the Lua reference in spec/gpt_sampling_spec.lua is the same rule):
--   1. z = logits / temperature (bfloat16 and float16 logits are computed in float32).
--   2. top_k = k with 0 < k < V: the candidates are the k largest z (ties: the lower id first);
--      top_k = 0 or k >= V: every token.
--   3. p = softmax of z over the candidates. top_p < 1: the candidates in order of p, largest
--      first and equal p in id order (a stable descending sort), keep the shortest prefix whose
--      sum reaches top_p: a candidate stays when the sum of the p before it is < top_p, so the
--      first always stays, and of tied candidates straddling the boundary the lower ids stay.
--      top_p applies to the distribution that top-k left (renormalised over the k), as in
--      Hugging Face's warpers.
--   4. one candidate drawn in proportion to the p kept (tl.multinomial, so tl.manual_seed fixes
--      the draws, on the CPU and CUDA alike). top_k = 1 is greedy: the argmax, no draw.
--
-- Every step is a tensor op on the logits' device (topk or sort, softmax, cumsum, a compare,
-- masked_fill, multinomial, gather): nothing is read back to the host here. The caller reads
-- the ids when it wants them (sample.lua only at the end of a whole generation).
local tl = require("tlua")

local M = {}

M.defaults = { temperature = 1, top_k = 0, top_p = 1 }

local KEYS = { temperature = true, top_k = true, top_p = true }

-- checks logits and opts; returns B, V and the resolved options (top_k 0 when it keeps all)
local function resolve(who, logits, opts)
  if not tl.is_tensor(logits) then
    error(string.format("sampling.%s: logits must be a tensor, got %s", who, type(logits)), 3)
  end
  if logits.ndim ~= 2 then
    error(string.format("sampling.%s: logits must be 2-d [B, V], got %d dims", who, logits.ndim), 3)
  end
  local dtype = logits.dtype
  if dtype ~= "float32" and dtype ~= "float64" and dtype ~= "bfloat16" and dtype ~= "float16" then
    error(string.format("sampling.%s: logits must be floating, got %s", who, dtype), 3)
  end
  local B, V = logits.shape[1], logits.shape[2]
  if V == 0 then error(string.format("sampling.%s: logits have no token (V = 0)", who), 3) end
  opts = opts or {}
  if type(opts) ~= "table" then
    error(string.format("sampling.%s: opts must be a table, got %s", who, type(opts)), 3)
  end
  for k in pairs(opts) do
    if not KEYS[k] then
      error(string.format("sampling.%s: unknown option '%s' (expected temperature, top_k, top_p)", who, tostring(k)), 3)
    end
  end
  local t = opts.temperature == nil and M.defaults.temperature or opts.temperature
  local k = opts.top_k == nil and M.defaults.top_k or opts.top_k
  local p = opts.top_p == nil and M.defaults.top_p or opts.top_p
  if type(t) ~= "number" or not (t > 0) or t == math.huge then
    error(string.format("sampling.%s: temperature must be a finite number > 0, got %s", who, tostring(t)), 3)
  end
  if math.type(k) ~= "integer" or k < 0 then
    error(string.format("sampling.%s: top_k must be an integer >= 0 (0: every token), got %s", who, tostring(k)), 3)
  end
  if type(p) ~= "number" or not (p > 0 and p <= 1) then
    error(string.format("sampling.%s: top_p must be a number in (0, 1] (1: off), got %s", who, tostring(p)), 3)
  end
  if k >= V then k = 0 end
  return B, V, { temperature = t, top_k = k, top_p = p }
end

-- the candidates' probabilities [B, m] (zero where top-p drops them, not renormalised) and
-- their token ids [B, m], or nil when the candidates are every token in id order
local function candidates(logits, o)
  local z = logits
  if z.dtype ~= "float32" and z.dtype ~= "float64" then z = z:to("float32") end
  if o.temperature ~= 1 then z = z / o.temperature end
  local ids
  if o.top_k > 0 then
    z, ids = z:topk(o.top_k, -1) -- largest first, ties in id order
  elseif o.top_p < 1 then
    z, ids = z:sort(-1, { descending = true }) -- stable: ties in id order
  end
  local p = z:softmax(-1)
  if o.top_p < 1 then
    -- the sum of the probabilities before each candidate: the inclusive sum shifted right by one
    local before = tl.pad(p:cumsum(-1), { 1, -1 })
    p = p:masked_fill(before:ge(o.top_p), 0)
  end
  return p, ids
end

--- sample(logits [B, V], {temperature = 1, top_k = 0, top_p = 1}?) -> int64 [B], 1-based token
--- ids on the logits' device, each row drawn by the rule above
function M.sample(logits, opts)
  local B, _, o = resolve("sample", logits, opts)
  if o.top_k == 1 then
    local _, ids = logits:topk(1, -1)
    return ids:view(B)
  end
  local p, ids = candidates(logits, o)
  local pick = tl.multinomial(p, 1) -- [B, 1], positions among the candidates
  if ids then pick = ids:gather(2, pick) end
  return pick:view(B)
end

--- probs(logits [B, V], opts?) -> [B, V]: the distribution sample draws from (the logits' dtype,
--- float32 for bfloat16/float16; zero outside the kept tokens, each row summing to 1)
function M.probs(logits, opts)
  local B, V, o = resolve("probs", logits, opts)
  local p, ids = candidates(logits, o)
  p = p / p:sum(-1, true)
  if not ids then return p end
  return tl.zeros({ B, V }, { dtype = p.dtype, device = p.device }):scatter(2, ids, p)
end

return M
