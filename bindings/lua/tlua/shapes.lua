-- tlua.shapes: meshgrid, expand_as, view_as and the comparisons isclose, allclose and equal, composed of the engine's views and elementwise ops.
local tl = require("tlua.core")
local options = require("tlua.options")

local M = {}

-- raises at the user's line; level as options.error counts it, for a sandbox (2: the caller's
-- caller of check_tensor)
local function check_tensor(who, t, what, level)
  if not tl.is_tensor(t) then
    options.error(string.format("%s: %s expected a tensor, got %s", who, what, type(t)), (level or 2) + 1)
  end
end

--- meshgrid(list, {indexing = "ij"}) -> a table of tensors, one per tensor of list (each 1-d, or
-- 0-d as one element): tensor i varies along dim i of the grid [n1, n2, ...] (views, expanded);
-- "xy" swaps the roles of the first two dims, as numpy and torch do.
local MESHGRID = { indexing = "string" }
function M.meshgrid(list, opts)
  local who = "meshgrid"
  opts = options.check(opts, who, MESHGRID)
  local indexing = opts.indexing or "ij"
  if indexing ~= "ij" and indexing ~= "xy" then
    options.error(string.format("%s: indexing must be \"ij\" or \"xy\", got \"%s\"", who, tostring(indexing)), 2)
  end
  if type(list) ~= "table" or tl.is_tensor(list) then
    options.error(string.format("%s: argument 1 expected a list of tensors, got %s", who,
      tl.is_tensor(list) and "a tensor" or type(list)), 2)
  end
  if #list == 0 then options.error(who .. ": expected a non-empty list of tensors, got {}", 2) end
  local sizes, place = {}, {}
  for i, t in ipairs(list) do
    check_tensor(who, t, string.format("list[%d]", i))
    if t:dim() > 1 then
      options.error(string.format("%s: list[%d] must be 1-d (or 0-d), got %d dims", who, i, t:dim()), 2)
    end
    sizes[i] = t:numel()
    place[i] = i
  end
  if indexing == "xy" and #list >= 2 then place[1], place[2] = 2, 1 end
  local grid = {}
  for i = 1, #list do grid[place[i]] = sizes[i] end
  local out = {}
  for i, t in ipairs(list) do
    local shape = {}
    for d = 1, #list do shape[d] = d == place[i] and sizes[i] or 1 end
    out[i] = t:reshape(shape):expand(grid)
  end
  return out
end

--- x:expand_as(y): x expanded to y's shape (a view); x:view_as(y): x viewed with y's shape
function M.expand_as(x, y)
  check_tensor("expand_as", x, "argument 1")
  check_tensor("expand_as", y, "argument 2")
  return x:expand(y:size())
end
function M.view_as(x, y)
  check_tensor("view_as", x, "argument 1")
  check_tensor("view_as", y, "argument 2")
  return x:view(y:size())
end

local function either(a, b) return tl.where(a, a, b) end
local function both(a, b) return tl.where(a, b, a) end

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

--- isclose(a, b, {rtol = 1e-5, atol = 1e-8, equal_nan = false}) -> bool tensor (a and b
-- broadcast; one dtype): a == b, or |a - b| <= atol + rtol |b| with |a - b| finite (computed in
-- float64); NaNs equal each other only with equal_nan.
local CLOSE = { rtol = "number", atol = "number", equal_nan = "boolean" }
local function close_elements(a, b, opts, who)
  check_tensor(who, a, "argument 1", 3)
  check_tensor(who, b, "argument 2", 3)
  opts = options.check(opts, who, CLOSE, 3)
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  if rtol < 0 or atol < 0 then
    options.error(string.format("%s: rtol and atol must be >= 0, got %g and %g", who, rtol, atol), 3)
  end
  if a.dtype ~= b.dtype then
    options.error(string.format("%s: a and b must have one dtype, got %s and %s", who, a.dtype, b.dtype), 3)
  end
  local close = a:eq(b)
  if a.dtype == "bool" then return close end
  local ad, bd = a:double(), b:double()
  local err = (ad - bd):abs()
  local finite = (err - err):eq(0)
  close = either(close, both(finite, err:le(bd:abs() * rtol + atol)))
  if opts.equal_nan and floating[a.dtype] then close = either(close, both(a:ne(a), b:ne(b))) end
  return close
end
function M.isclose(a, b, opts)
  local close = close_elements(a, b, opts, "isclose") -- not a tail call: error levels count it
  return close
end

--- allclose(a, b, opts) -> whether every element of isclose(a, b, opts) holds (a boolean)
function M.allclose(a, b, opts)
  return close_elements(a, b, opts, "allclose"):all():item()
end

--- equal(a, b) -> whether a and b have one shape and equal elements (a boolean; NaN is not equal
-- to itself)
function M.equal(a, b)
  check_tensor("equal", a, "argument 1")
  check_tensor("equal", b, "argument 2")
  if a:dim() ~= b:dim() then return false end
  for d = 1, a:dim() do if a:size(d) ~= b:size(d) then return false end end
  return a:eq(b):all():item()
end

return M
