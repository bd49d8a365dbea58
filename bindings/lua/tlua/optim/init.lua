-- tl.optim (require("tlua.optim")): the optimizers SGD, Adam, AdamW, learning-rate schedulers and clip_grad_norm.
--
--   local opt = tl.optim.Adam(model:parameters(), { lr = 1e-3 })
--   opt:zero_grad(); loss:backward(); opt:step()
--
--   optimizer.lua   optim.Optimizer: parameter groups, all-or-nothing step(), state dicts
--   optimizers.lua  SGD (a fused C step per parameter), Adam, AdamW (one multi-tensor step for all)
--   schedulers.lua  optim.Scheduler, StepLR, LambdaLR, CosineAnnealingLR, WarmupCosineLR
--   clip_grad.lua   clip_grad_norm
local optim = {
  Optimizer = require("tlua.optim.optimizer"),
  clip_grad_norm = require("tlua.optim.clip_grad"),
}

for _, file in ipairs({ "optimizers", "schedulers" }) do
  for name, value in pairs(require("tlua.optim." .. file)) do optim[name] = value end
end

return optim
