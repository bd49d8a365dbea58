-- tl.optim.RAdam (torch.optim.RAdam's rule, composed of tensor ops; optim/composed.lua).
local composed = require("tlua.optim.composed")

local nonnegative, boolean, all = composed.nonnegative, composed.boolean, composed.all

local function check(group, name)
  return all(group, name, nonnegative, "lr", "eps", "weight_decay") or composed.betas(group, name) or
      boolean(group, "maximize", name)
end

--- RAdam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- maximize = false}): Adam whose adaptive step is rectified by the variance of its estimate
-- (Liu et al.), a plain momentum step while that variance is intractable (rho_t <= 5).
-- State per parameter: step, exp_avg, exp_avg_sq. maximize (torch 1.13's RAdam has none)
-- negates the gradient.
return composed.subclass("RAdam",
  { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false },
  check, {
    scalars = { step = 0 },
    tensors = function() return { "exp_avg", "exp_avg_sq" } end,
    step = function(group, p, g, s)
      local beta1, beta2, step, lr = group.betas[1], group.betas[2], s.step, group.lr
      if group.maximize then g = -g end
      local bias_correction1, bias_correction2 = 1 - beta1 ^ step, 1 - beta2 ^ step
      if group.weight_decay ~= 0 then g = g + p * group.weight_decay end
      s.exp_avg:mul_(beta1):add_(g * (1 - beta1))
      composed.addcmul_(s.exp_avg_sq:mul_(beta2), g, g, 1 - beta2)
      local corrected = s.exp_avg / bias_correction1
      local rho_inf = 2 / (1 - beta2) - 1
      local rho_t = rho_inf - 2 * step * (beta2 ^ step) / bias_correction2
      if rho_t > 5 then
        local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        local adaptive = math.sqrt(bias_correction2) / s.exp_avg_sq:sqrt():add_(group.eps)
        p:sub_(corrected * lr * adaptive * rect)
      else
        p:sub_(corrected * lr)
      end
    end,
  })
