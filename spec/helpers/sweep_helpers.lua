-- What the sweep cases of several families share: nested-table helpers (transpose, add_into, column_sums), leaves and differentiated runs of an op and its gradients, and the input layouts the variant cases lay inputs out by.
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

local function transpose(m)
  local t = {}
  for j = 1, #m[1] do
    t[j] = {}
    for i = 1, #m do t[j][i] = m[i][j] end
  end
  return t
end
local function add_into(acc, m)
  if not acc then return m end
  return ref.broadcast_map(function(a, b) return a + b end, acc, m)
end
local function column_sums(m)
  local s = {}
  for j = 1, #m[1] do
    s[j] = 0.0
    for i = 1, #m do s[j] = s[j] + m[i][j] end
  end
  return s
end
local function leaves(...)
  local out = {}
  for i, x in ipairs({ ... }) do out[i] = x:detach():requires_grad_() end
  return table.unpack(out)
end

-- the run of a case whose inputs are fn's arguments then the output's gradient g: fn's value
-- and the gradient of each argument
local function differentiated(fn)
  return function(...)
    local args = { ... }
    local g = table.remove(args)
    args = { leaves(table.unpack(args)) }
    local y = fn(table.unpack(args))
    y:backward(g)
    local out = { y:detach() }
    for i, a in ipairs(args) do out[i + 1] = a.grad end
    return out
  end
end

-- ---- input layouts --------------------------------------------------------------------------------
-- Input layouts with the values a reference reads back: a view one element into a buffer
-- (misaligned for vectors), rows of a wider buffer (unit stride, aligned rows), the transpose of
-- a transposed copy (no unit stride), the second operand expanded along its last dim.
local layouts = {
  as_is = function(x) return x end,
  offset = function(x)
    local buffer = tl.zeros({ x:numel() + 1 }, { dtype = x.dtype, device = x.device })
    local view = buffer:narrow(1, 2, x:numel()):view(table.unpack(x.shape))
    view:copy_(x)
    return view
  end,
  padded = function(x)
    local buffer = tl.zeros({ x.shape[1], x.shape[2] + 16 }, { dtype = x.dtype, device = x.device })
    local view = buffer:narrow(2, 1, x.shape[2])
    view:copy_(x)
    return view
  end,
  transposed = function(x) return x:transpose(1, 2):contiguous():transpose(1, 2) end,
  broadcast = function(x, i)
    if i == 1 then return x end
    return x:narrow(2, 1, 1):expand(table.unpack(x.shape))
  end,
}

M.transpose, M.add_into, M.column_sums = transpose, add_into, column_sums
M.leaves, M.differentiated = leaves, differentiated
M.layouts = layouts

return M
