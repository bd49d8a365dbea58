-- Tensor methods of autograd: t:register_hook(fn) (a handle with remove()) and t:retain_grad().
local core = require("tlua.core")

local hooks = {}

local Tensor = core.Tensor

--- t:register_hook(fn) -> a handle with remove(): each backward (and autograd.grad) calls fn(grad)
-- with t's whole gradient of that pass before it is used (a leaf's before it is added into t.grad,
-- a non-leaf's before it flows on); fn may return a tensor of t's shape to use instead. Hooks run
-- in the order they were added; an error in one stops the backward.
function Tensor.register_hook(t, fn)
  local id = core._add_grad_hook(t, fn)
  local target = setmetatable({ t }, { __mode = "v" }) -- the handle does not keep t alive
  return {
    id = id,
    --- remove() -> whether the hook was still there
    remove = function()
      local x = target[1]
      return x ~= nil and core._remove_grad_hook(x, id)
    end,
  }
end

local retaining = setmetatable({}, { __mode = "k" })

--- t:retain_grad() -> t: a non-leaf keeps its gradient in t.grad after backward, summed over
-- passes as a leaf's is (a leaf does so already: this is a no-op there)
function Tensor.retain_grad(t)
  if t.is_leaf or retaining[t] then return t end
  retaining[t] = true
  local target = setmetatable({ t }, { __mode = "v" })
  core._add_grad_hook(t, function(g)
    local x = target[1]
    if x == nil then return nil end
    local old = x.grad
    x.grad = old and (old + g) or g:clone()
    return nil
  end)
  return t
end

return hooks
