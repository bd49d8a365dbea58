-- tl.optim.NAdam (torch.optim.NAdam's rule, composed of tensor ops; optim/composed.lua).
local composed = require("tlua.optim.composed")

local nonnegative, boolean, all, addcmul_, addcdiv_ =
  composed.nonnegative, composed.boolean, composed.all, composed.addcmul_, composed.addcdiv_

local function check(group, name)
  return all(group, name, nonnegative, "lr", "eps", "weight_decay", "momentum_decay") or
      composed.betas(group, name) or boolean(group, "maximize", name)
end

--- NAdam(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- momentum_decay = 4e-3, maximize = false}): Adam with Nesterov momentum (Dozat), the momentum
-- schedule mu_t = beta1 (1 - 0.5 * 0.96^(t momentum_decay)). State per parameter: step,
-- mu_product (a number, float64: torch 1.13 keeps it in the default dtype), exp_avg, exp_avg_sq.
-- maximize (torch 1.13's NAdam has none) negates the gradient.
return composed.subclass("NAdam",
  { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3, maximize = false },
  check, {
    scalars = { step = 0, mu_product = 1.0 },
    tensors = function() return { "exp_avg", "exp_avg_sq" } end,
    step = function(group, p, g, s)
      local beta1, beta2, step = group.betas[1], group.betas[2], s.step
      if group.maximize then g = -g end
      local bias_correction2 = 1 - beta2 ^ step
      if group.weight_decay ~= 0 then g = g + p * group.weight_decay end
      local mu = beta1 * (1 - 0.5 * 0.96 ^ (step * group.momentum_decay))
      local mu_next = beta1 * (1 - 0.5 * 0.96 ^ ((step + 1) * group.momentum_decay))
      s.mu_product = s.mu_product * mu
      local mu_product_next = s.mu_product * mu * mu_next
      s.exp_avg:mul_(beta1):add_(g * (1 - beta1))
      addcmul_(s.exp_avg_sq:mul_(beta2), g, g, 1 - beta2)
      local denom = s.exp_avg_sq:div(bias_correction2):sqrt_():add_(group.eps)
      addcdiv_(p, g, denom, -group.lr * (1 - mu) / (1 - s.mu_product))
      addcdiv_(p, s.exp_avg, denom, -group.lr * mu_next / (1 - mu_product_next))
    end,
  })
