-- tl.optim (require("tlua.optim")): the optimizers, the learning-rate schedulers and clip_grad_norm, as torch.optim defines them.
--
--   local opt = tl.optim.Adam(model:parameters(), { lr = 1e-3 })
--   local sched = tl.optim.StepLR(opt, 30, { gamma = 0.1 })
--   opt:zero_grad(); loss:backward(); opt:step(); sched:step()
--
--   optimizer.lua          optim.Optimizer: parameter groups, all-or-nothing step(), state dicts
--   optimizers.lua         SGD (a fused C step per parameter), Adam, AdamW (one multi-tensor step for all)
--   composed.lua           the shared checks, and the base of the optimizers composed of tensor ops:
--   rmsprop.lua adagrad.lua adamax.lua nadam.lua radam.lua   RMSprop, Adagrad, Adamax, NAdam, RAdam
--   scheduler.lua          optim.Scheduler: stepping, get_last_lr, state dicts, arguments
--   schedulers.lua         StepLR MultiStepLR ExponentialLR ConstantLR LinearLR LambdaLR CosineAnnealingLR
--                          WarmupCosineLR
--   schedulers_cyclic.lua  CosineAnnealingWarmRestarts OneCycleLR SequentialLR
--   plateau.lua            ReduceLROnPlateau
--   clip_grad.lua          clip_grad_norm
local optim = {
  Optimizer = require("tlua.optim.optimizer"),
  clip_grad_norm = require("tlua.optim.clip_grad"),
  RMSprop = require("tlua.optim.rmsprop"),
  Adagrad = require("tlua.optim.adagrad"),
  Adamax = require("tlua.optim.adamax"),
  NAdam = require("tlua.optim.nadam"),
  RAdam = require("tlua.optim.radam"),
}

for _, file in ipairs({ "optimizers", "schedulers", "schedulers_cyclic", "plateau" }) do
  for name, value in pairs(require("tlua.optim." .. file)) do
    if not name:match("^_") then optim[name] = value end
  end
end

return optim
