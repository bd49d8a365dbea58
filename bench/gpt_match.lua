-- Same numbers as PyTorch, the tlua side: replays bench/gpt_match.py's file (initial weights, batch offsets, PyTorch's losses) with examples/gpt's model and prints both loss curves and their distance.
--
--   tlua bench/gpt_match.lua --ref ref.safetensors [--device cpu|cuda] [--tol X] [--data path]
--       [--fused_loss 0|1] [--fused_norm 0|1] (examples/gpt's config: the fused paths, on by default)
--       [--fused_mlp 0|1] (the MLP as one tl.linear_gelu_linear; on by default) [--gelu_epilogue 0|1] (its GELU
--       in the first GEMM's epilogue; off by default)
--
-- float64: passes when every step's loss is within --tol (default 1e-9) of PyTorch's.
-- bfloat16: passes when the mean distance to PyTorch's bf16 curve over the steps is within the bf16
-- noise, the mean distance between PyTorch's own bf16 and float32 curves (times --noise, default
-- 1.5); a mean, not a maximum, so one loss spike of one run does not decide. The largest
-- distances are printed too. The learning rate follows the file's linear warm-up (meta.warmup).
local tl = require("tlua")
package.path = (os.getenv("TLUA_GPT_DIR") or ((arg[0]:match("^(.*)/") or ".") .. "/../examples/gpt")) .. "/?.lua;" .. package.path
local gpt = require("model")
local data = require("data")

local opts = { device = "cpu", noise = 1.5 }
local i = 1
while i <= #arg do
  local k = arg[i]:match("^%-%-([%w_]+)$")
  if not k or arg[i + 1] == nil then error("gpt_match.lua: bad argument '" .. tostring(arg[i]) .. "'", 0) end
  opts[k] = tonumber(arg[i + 1]) or arg[i + 1]
  i = i + 2
end
if not opts.ref then error("gpt_match.lua: --ref FILE (written by bench/gpt_match.py) is required", 0) end

local ref, meta = tl.load(opts.ref)
local dtype = meta.dtype
local config = gpt.config {
  vocab = tonumber(meta.vocab), context = tonumber(meta.context), layers = tonumber(meta.layers),
  dim = tonumber(meta.dim), heads = tonumber(meta.heads), bias = meta.bias == "True", dropout = 0,
  dtype = dtype == "float64" and "float64" or "float32", device = opts.device,
  fused_loss = opts.fused_loss ~= 0, fused_norm = opts.fused_norm ~= 0, fused_mlp = (opts.fused_mlp or 1) ~= 0,
  gelu_epilogue = (opts.gelu_epilogue or 0) ~= 0,
}
local ds = data.Dataset.load { path = opts.data, device = opts.device }
assert(ds.vocab.size == config.vocab, "the corpus differs from the one PyTorch read (vocabulary size)")

local model = gpt.GPT(config)
local init = {}
for name in pairs(model:state_dict()) do
  assert(ref[name], "the reference file lacks " .. name)
  init[name] = ref[name]
end
model:load_state_dict(init)

local decay, no_decay = {}, {}
for _, p in ipairs(model:parameters()) do
  if #p.shape >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
end
local wd, lr, clip = tonumber(meta.weight_decay), tonumber(meta.lr), tonumber(meta.grad_clip)
local warmup = tonumber(meta.warmup) or 0
local opt = tl.optim.AdamW({ { params = decay, weight_decay = wd }, { params = no_decay, weight_decay = 0 } },
  { lr = lr, betas = { 0.9, 0.99 }, eps = 1e-8 })
local params = model:parameters()
local offsets = ref.offsets + 1 -- 0-based in PyTorch
local steps, T = offsets.shape[1], config.context
local torch_losses = ref.losses:totable()
local float32_losses = ref.losses_float32 and ref.losses_float32:totable()

local worst, worst_noise, sum_diff, sum_noise, sum_to_float32 = 0, 0, 0, 0, 0
print(string.format("%-6s %-20s %-20s %-12s", "step", "torch", "tlua", "|diff|"))
for step = 1, steps do
  for _, group in ipairs(opt.param_groups) do group.lr = warmup > 0 and lr * math.min(1, step / warmup) or lr end
  local x, y = ds:batch_at("train", offsets:select(1, step), T)
  local loss
  if dtype == "bfloat16" then
    local _
    _, loss = tl.autocast("bfloat16", model, x, y)
  else
    _, loss = model(x, y)
  end
  loss:backward()
  if clip > 0 then tl.optim.clip_grad_norm(params, clip) end
  opt:step()
  opt:zero_grad()
  local v = loss:item()
  local d = math.abs(v - torch_losses[step])
  worst, sum_diff = math.max(worst, d), sum_diff + d
  if float32_losses then
    local noise = math.abs(torch_losses[step] - float32_losses[step])
    worst_noise, sum_noise = math.max(worst_noise, noise), sum_noise + noise
    sum_to_float32 = sum_to_float32 + math.abs(v - float32_losses[step])
  end
  if step <= 10 or step % 20 == 0 or step == steps then
    print(string.format("%-6d %-20.12f %-20.12f %-12.3g", step, torch_losses[step], v, d))
  end
end

local ok
if dtype == "float64" then
  local tol = opts.tol or 1e-9
  ok = worst <= tol
  print(string.format("gpt_match: float64, %d steps: max |tlua - torch| = %.3g (tolerance %.0e)  %s", steps, worst, tol,
    ok and "PASS" or "FAIL"))
else
  local mean_diff, mean_noise = sum_diff / steps, sum_noise / steps
  ok = mean_diff <= opts.noise * mean_noise
  -- for information: tlua's own distance to PyTorch's float32 curve, beside PyTorch bf16's (the noise)
  print(string.format("gpt_match: bfloat16, %d steps (warm-up %d): mean |tlua - torch| = %.4f (max %.4f); bf16 noise, "
    .. "mean |torch bf16 - torch f32| = %.4f (max %.4f); mean within %.1fx the noise: %s; mean |tlua - torch f32| = %.4f",
    steps, warmup, mean_diff, worst, mean_noise, worst_noise, opts.noise, ok and "PASS" or "FAIL", sum_to_float32 / steps))
end
os.exit(ok and 0 or 1)
