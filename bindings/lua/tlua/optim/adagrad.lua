-- tl.optim.Adagrad (torch.optim.Adagrad's rule, composed of tensor ops; optim/composed.lua).
local tl = require("tlua")
local composed = require("tlua.optim.composed")

local nonnegative, boolean, all, addcmul_, addcdiv_ =
  composed.nonnegative, composed.boolean, composed.all, composed.addcmul_, composed.addcdiv_

local function check(group, name)
  return all(group, name, nonnegative, "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps") or
      boolean(group, "maximize", name)
end

--- Adagrad(params, {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0,
-- eps = 1e-10, maximize = false}): sum <- sum + g^2 (g with the L2 weight decay, negated by
-- maximize; sum starts at initial_accumulator_value), p <- p - clr g / (sqrt(sum) + eps) with
-- clr = lr / (1 + (step - 1) lr_decay). State per parameter: step, sum (made at its first step,
-- from its group's initial_accumulator_value, where torch 1.13 takes the constructor's for all).
return composed.subclass("Adagrad",
  { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10, maximize = false },
  check, {
    scalars = { step = 0 },
    tensors = function() return { "sum" } end,
    init = function(group, p) return tl.full_like(p, group.initial_accumulator_value) end,
    step = function(group, p, g, s)
      if group.maximize then g = -g end
      if group.weight_decay ~= 0 then g = g + p * group.weight_decay end
      local clr = group.lr / (1 + (s.step - 1) * group.lr_decay)
      addcmul_(s.sum, g, g, 1)
      local std = s.sum:sqrt():add_(group.eps)
      addcdiv_(p, g, std, -clr)
    end,
  })
