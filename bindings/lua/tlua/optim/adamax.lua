-- tl.optim.Adamax (torch.optim.Adamax's rule, composed of tensor ops; optim/composed.lua).
local composed = require("tlua.optim.composed")

local nonnegative, boolean, all, addcdiv_ = composed.nonnegative, composed.boolean, composed.all, composed.addcdiv_

local function check(group, name)
  return all(group, name, nonnegative, "lr", "eps", "weight_decay") or composed.betas(group, name) or
      boolean(group, "maximize", name)
end

--- Adamax(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- maximize = false}): Adam with the infinity norm: exp_avg <- beta1 exp_avg + (1 - beta1) g,
-- exp_inf <- max(beta2 exp_inf, |g| + eps), p <- p - lr / (1 - beta1^step) exp_avg / exp_inf.
-- State per parameter: step, exp_avg, exp_inf.
return composed.subclass("Adamax",
  { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false },
  check, {
    scalars = { step = 0 },
    tensors = function() return { "exp_avg", "exp_inf" } end,
    step = function(group, p, g, s)
      local beta1, beta2 = group.betas[1], group.betas[2]
      if group.maximize then g = -g end
      if group.weight_decay ~= 0 then g = g + p * group.weight_decay end
      s.exp_avg:mul_(beta1):add_(g * (1 - beta1))
      s.exp_inf:mul_(beta2):maximum_(g:abs():add_(group.eps))
      local clr = group.lr / (1 - beta1 ^ s.step)
      addcdiv_(p, s.exp_avg, s.exp_inf, -clr)
    end,
  })
