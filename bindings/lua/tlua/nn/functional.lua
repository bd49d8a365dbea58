-- tl.nn.functional: the ops of the op table that map a tensor to a tensor (tl.ops(): families unary, pointwise, softmax), the nn ops, losses and dropout.
local tl = require("tlua")

local F = {}

-- every op of these families that tlua binds as tl.<name>: F.relu, F.gelu, F.exp, F.softmax, ...
local families = { unary = true, pointwise = true, softmax = true }
for _, op in ipairs(tl.ops()) do
  if families[op.family] and type(tl[op.name]) == "function" then F[op.name] = tl[op.name] end
end

-- nn ops whose rows in the op table name their kernels (linear_forward, conv2d_forward, ...)
F.linear = tl.linear
F.conv2d = tl.conv2d
F.max_pool2d = tl.max_pool2d
F.embedding = tl.embedding
F.layer_norm = tl.layer_norm
--- cross_entropy(logits [N, C], target [N] (classes 1..C), {label_smoothing = 0})
F.cross_entropy = tl.cross_entropy

--- mse_loss(input, target): mean of the squared differences
function F.mse_loss(input, target)
  local d = input - target
  return (d * d):mean()
end

--- dropout(x, p = 0.5, training = true): zeroes elements with probability p and scales the
-- rest by 1 / (1 - p) when training; identity otherwise
function F.dropout(x, p, training)
  p = p or 0.5
  if not (p >= 0 and p <= 1) then error("dropout: p must be in [0, 1], got " .. tostring(p), 2) end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = tl.rand(x.shape, { dtype = x.dtype, device = x.device }):ge(p)
  return x * (keep:to(x.dtype) * (1 / (1 - p)))
end

return F
