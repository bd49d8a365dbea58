-- The optimizer steps of torch.optim in Lua loops (SGD with momentum, nesterov and weight decay; Adam and AdamW), the kernel sweep cases of the fused steps (one parameter, many at once) and of clip_grad_norm_multi.
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

-- ---------------------------------------------------------------------------
-- Optimizer steps of torch.optim on flat arrays (p is updated in place; state kept in s)
function M.sgd_step(p, g, s, o)
  s.buf = s.buf or {}
  for i = 1, #p do
    local d = g[i] + o.weight_decay * p[i]
    if o.momentum ~= 0 then
      local b = s.buf[i] and s.buf[i] * o.momentum + (1 - o.dampening) * d or d
      s.buf[i] = b
      d = o.nesterov and d + o.momentum * b or b
    end
    p[i] = p[i] - o.lr * d
  end
end

function M.adam_step(p, g, s, o)
  s.step = (s.step or 0) + 1
  s.m, s.v = s.m or {}, s.v or {}
  local c1, c2 = 1 - o.beta1 ^ s.step, 1 - o.beta2 ^ s.step
  for i = 1, #p do
    local pi, gi = p[i], g[i]
    if o.decoupled then pi = pi * (1 - o.lr * o.weight_decay)
    else gi = gi + o.weight_decay * pi end
    local m = (s.m[i] or 0.0) * o.beta1 + (1 - o.beta1) * gi
    local v = (s.v[i] or 0.0) * o.beta2 + (1 - o.beta2) * gi * gi
    s.m[i], s.v[i] = m, v
    p[i] = pi - o.lr / c1 * (m / (math.sqrt(v) / math.sqrt(c2) + o.eps))
  end
end

M.sweep = {}

-- three steps of SGD (momentum, nesterov, weight decay), Adam (L2 decay) and AdamW, one
-- adam_step per parameter (fused = false, state in the parameter's dtype)
local OPTIMIZERS = {
  { "SGD", { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }, M.sgd_step,
    { lr = 0.1, momentum = 0.9, dampening = 0, nesterov = true, weight_decay = 0.01 } },
  { "Adam", { lr = 0.01, weight_decay = 0.01, fused = false, master_weights = false }, M.adam_step,
    { lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01 } },
  { "AdamW", { lr = 0.01, fused = false, master_weights = false }, M.adam_step,
    { lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01, decoupled = true } },
}
M.sweep.optim = {
  inputs = function(G) return { G.normal(3, 4), G.normal(3, 4) } end,
  run = function(p, g)
    local out = {}
    for k, o in ipairs(OPTIMIZERS) do
      local param = p:clone():requires_grad_()
      local opt = tl.optim[o[1]]({ param }, o[2])
      for _ = 1, 3 do
        param.grad = g
        opt:step()
      end
      out[k] = param:detach()
    end
    return out
  end,
  reference = function(_, p, g)
    local fg = ref.flatten(g)
    local out = {}
    for k, o in ipairs(OPTIMIZERS) do
      local fp, shape = ref.flatten(p)
      local state = {}
      for _ = 1, 3 do o[3](fp, fg, state, o[4]) end
      out[k] = ref.unflatten(fp, shape)
    end
    return out
  end,
}

-- three fused steps (one adam_step_multi for both parameters) of Adam (L2 decay) and AdamW
-- (float32 masters for bfloat16/float16 parameters, which are the masters rounded)
M.sweep.adam_step_multi = {
  inputs = function(G) return { G.normal(3, 4), G.normal(3, 4), G.normal(5), G.normal(5) } end,
  run = function(p1, g1, p2, g2)
    local out = {}
    for k, o in ipairs({ OPTIMIZERS[2], OPTIMIZERS[3] }) do
      local a, b = p1:clone():requires_grad_(), p2:clone():requires_grad_()
      local opt = tl.optim[o[1]]({ a, b }, { lr = o[4].lr, weight_decay = o[4].weight_decay })
      for _ = 1, 3 do
        a.grad, b.grad = g1, g2
        opt:step()
      end
      out[2 * k - 1], out[2 * k] = a:detach(), b:detach()
    end
    return out
  end,
  reference = function(_, p1, g1, p2, g2)
    local out = {}
    for k, o in ipairs({ OPTIMIZERS[2], OPTIMIZERS[3] }) do
      for j, pg in ipairs({ { p1, g1 }, { p2, g2 } }) do
        local fp, shape = ref.flatten(pg[1])
        local fg, state = ref.flatten(pg[2]), {}
        for _ = 1, 3 do o[3](fp, fg, state, o[4]) end
        out[2 * k - 2 + j] = ref.unflatten(fp, shape)
      end
    end
    return out
  end,
}

-- clip_grad_norm_multi over two grads: the 2-norm with clipping (every grad scaled by
-- 0.5 / (total + 1e-6)), then the infinity norm of fresh copies without (the grads untouched)
local function clip_reference(lists, max_norm, p)
  local acc = 0
  for _, list in ipairs(lists) do
    for _, x in ipairs(list) do acc = p == math.huge and math.max(acc, math.abs(x)) or acc + math.abs(x) ^ p end
  end
  local total = p == math.huge and acc or acc ^ (1 / p)
  local coef = math.min(1, max_norm / (total + 1e-6))
  local scaled = {}
  for i, list in ipairs(lists) do
    scaled[i] = {}
    for j, x in ipairs(list) do scaled[i][j] = x * coef end
  end
  return total, scaled
end
M.sweep.clip_grad_norm_multi = {
  inputs = function(G) return { G.normal(3, 4), G.normal(5) } end,
  run = function(a, b)
    local a1, b1, a2, b2 = a:clone(), b:clone(), a:clone(), b:clone()
    local t1 = tl._clip_grad_norm_multi({ a1, b1 }, 0.5, 2)
    local t2 = tl._clip_grad_norm_multi({ a2, b2 }, 1e6, math.huge)
    return { t1, a1:view(12), b1, t2, a2:view(12), b2 }
  end,
  reference = function(_, a, b)
    local lists = { (ref.flatten(a)), (ref.flatten(b)) }
    local t1, s1 = clip_reference(lists, 0.5, 2)
    local t2, s2 = clip_reference(lists, 1e6, math.huge)
    return { t1, s1[1], s1[2], t2, s2[1], s2[2] }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  sgd_step = "optim", adam_step = "optim",
}

return M
