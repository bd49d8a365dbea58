-- torch.optim.Adam / AdamW (amsgrad = False) in float64 on flat arrays: the reference of the fused steps' specs.
local M = {}

--- step(p, g, s, o): one step of parameter p (a flat array, updated in place) with gradient g; s holds the
-- moments and the step count (made on the first step); o = {lr, beta1, beta2, eps, weight_decay, decoupled}
function M.step(p, g, s, o)
  s.step = (s.step or 0) + 1
  s.m, s.v = s.m or {}, s.v or {}
  local bias1, bias2 = 1 - o.beta1 ^ s.step, 1 - o.beta2 ^ s.step
  for i = 1, #p do
    local pi, gi = p[i], g[i]
    if o.decoupled then
      pi = pi * (1 - o.lr * o.weight_decay)
    elseif o.weight_decay ~= 0 then
      gi = gi + o.weight_decay * pi
    end
    local m = o.beta1 * (s.m[i] or 0) + (1 - o.beta1) * gi
    local v = o.beta2 * (s.v[i] or 0) + (1 - o.beta2) * gi * gi
    s.m[i], s.v[i] = m, v
    p[i] = pi - o.lr / bias1 * m / (math.sqrt(v) / math.sqrt(bias2) + o.eps)
  end
end

return M
