-- tl.optim.RMSprop (torch.optim.RMSprop's rule, composed of tensor ops; optim/composed.lua).
local composed = require("tlua.optim.composed")

local nonnegative, boolean, all, addcmul_, addcdiv_ =
  composed.nonnegative, composed.boolean, composed.all, composed.addcmul_, composed.addcdiv_

local function check(group, name)
  return all(group, name, nonnegative, "lr", "alpha", "eps", "weight_decay", "momentum") or
      all(group, name, boolean, "centered", "maximize")
end

--- RMSprop(params, {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
-- centered = false, maximize = false}): square_avg <- alpha square_avg + (1 - alpha) g^2 (g with
-- the L2 weight decay, negated by maximize); centered subtracts the square of the mean gradient
-- (grad_avg); with momentum > 0 the step g / (sqrt(.) + eps) goes through momentum_buffer.
-- State per parameter: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
return composed.subclass("RMSprop",
  { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false, maximize = false },
  check, {
    scalars = { step = 0 },
    tensors = function(group)
      local keys = { "square_avg" }
      if group.momentum > 0 then keys[#keys + 1] = "momentum_buffer" end
      if group.centered then keys[#keys + 1] = "grad_avg" end
      return keys
    end,
    step = function(group, p, g, s)
      if group.maximize then g = -g end
      if group.weight_decay ~= 0 then g = g + p * group.weight_decay end
      local alpha = group.alpha
      addcmul_(s.square_avg:mul_(alpha), g, g, 1 - alpha)
      local avg
      if group.centered then
        s.grad_avg:mul_(alpha):add_(g * (1 - alpha))
        avg = s.square_avg - s.grad_avg * s.grad_avg
        avg:sqrt_()
      else
        avg = s.square_avg:sqrt()
      end
      avg:add_(group.eps)
      if group.momentum > 0 then
        addcdiv_(s.momentum_buffer:mul_(group.momentum), g, avg, 1)
        p:add_(s.momentum_buffer * -group.lr)
      else
        addcdiv_(p, g, avg, -group.lr)
      end
    end,
  })
