-- tl.optim.clip_grad_norm: scales the gradients of a list of parameters to a maximum total norm.
local tl = require("tlua")

local is_tensor = tl.is_tensor

--- clip_grad_norm(parameters, max_norm, norm_type = 2) -> the total norm (a number) of all the
-- gradients together, as torch.nn.utils.clip_grad_norm_: when it exceeds max_norm, every
-- gradient is scaled in place by max_norm / (total + 1e-6). norm_type: a number >= 1 or math.huge.
local function clip_grad_norm(parameters, max_norm, norm_type)
  if is_tensor(parameters) then parameters = { parameters } end
  if type(parameters) ~= "table" then
    error("clip_grad_norm: argument 1 expected a tensor or a list of tensors, got " .. type(parameters), 2)
  end
  if type(max_norm) ~= "number" then
    error("clip_grad_norm: argument 2 (max_norm) expected a number, got " .. type(max_norm), 2)
  end
  norm_type = norm_type or 2
  if type(norm_type) ~= "number" or not (norm_type >= 1) then
    error("clip_grad_norm: norm_type must be a number >= 1 or math.huge, got " .. tostring(norm_type), 2)
  end
  local grads = {}
  for _, p in ipairs(parameters) do
    local g = p.grad
    if g ~= nil then grads[#grads + 1] = g end
  end
  if #grads == 0 then return 0.0 end
  local total
  tl.no_grad(function()
    if norm_type == math.huge then
      total = 0
      for _, g in ipairs(grads) do total = math.max(total, g:abs():max():item()) end
    else
      local acc
      for _, g in ipairs(grads) do
        local s = norm_type == 2 and (g * g):sum() or (g:abs() ^ norm_type):sum()
        s = s:double()
        acc = acc and acc + s or s
      end
      total = acc:item() ^ (1 / norm_type)
    end
    local coef = max_norm / (total + 1e-6)
    if coef < 1 then
      for _, g in ipairs(grads) do g:copy_(g * coef) end
    end
  end)
  return total
end

return clip_grad_norm
