-- Statement makers of the API fuzzer for the tensor vocabulary: joining and splitting, indexing along a dim, the value reductions and the cumulative ops.
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

--- a's shape with dim's size changed (mostly), for a piece that joins a along dim
local function piece_shape(g, shape, dim)
  local out = {}
  for d, s in ipairs(shape) do out[d] = s end
  if #out > 0 and g:chance(0.8) then out[dim] = g:int(0, 4) end
  return out
end

--- an index tensor's source: int64 (mostly) values in 1..n (mostly; sometimes 0, n + 1 or negative)
local function index_source(g, shape, n)
  local lo, hi = 1, math.max(n, 1)
  if g:chance(0.1) then lo, hi = g:pick { 0, n + 1, -2 }, hi + 2 end
  local dtype = g:chance(0.85) and "int64" or g:pick { "int32", "float32", "bool" }
  return fmt("tl.randint(%d, %d, %s, {dtype = %s})", lo, hi + 1, literal(shape), literal(dtype))
end

local join = {
  cat_stack = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.numel <= 2000 end)
    if not a then return nil end
    local dim = g:int(1, a.ndim)
    local list = { a.ref }
    for i = 2, g:int(1, 3) do
      local shape = g:chance(0.9) and piece_shape(g, a.shape, dim) or g:shape(200)
      list[i] = g:fresh(shape, g:chance(0.9) and a.dtype or g:dtype())
    end
    local op = g:pick { "cat", "stack" }
    local d = g:chance(0.85) and dim or g:dim(a.ndim)
    return fmt("%s = tl.%s({ %s }, %s)", g:target(), op, table.concat(list, ", "), d)
  end,
  split_chunk_unbind = function(g)
    local a = g:tensor()
    if not a then return nil end
    local dim = g:dim(a.ndim)
    local call = g:weighted {
      { 3, fmt("split(%s, %s)", g:size(1, 4), dim) },
      { 2, fmt("split({ %s, %s }, %s)", g:size(0, 3), g:size(0, 3), dim) },
      { 3, fmt("chunk(%s, %s)", g:size(1, 4), dim) },
      { 2, fmt("unbind(%s)", dim) },
    }
    return fmt("%s = %s:%s[%d]", g:target(), a.ref, call, g:int(1, 3))
  end,
}

local index = {
  gather_scatter_add = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.numel <= 2000 end)
    if not a then return nil end
    local dim = g:int(1, a.ndim)
    local shape = {}
    for d, s in ipairs(a.shape) do shape[d] = g:chance(0.9) and math.min(s, g:int(0, s)) or g:int(0, 4) end
    local idx = index_source(g, shape, a.shape[dim])
    if g:chance(0.5) then return fmt("%s = %s:gather(%s, %s)", g:target(), a.ref, dim, idx) end
    local src = g:fresh(shape, g:chance(0.9) and a.dtype or g:dtype())
    return fmt("%s = %s:scatter_add(%s, %s, %s)", g:target(), a.ref, dim, idx, src)
  end,
  index_select = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.numel <= 5000 end)
    if not a then return nil end
    local dim = g:chance(0.9) and g:int(1, a.ndim) or g:dim(a.ndim)
    local n = a.shape[math.max(1, math.min(a.ndim, math.abs(dim)))] or 1
    local shape = g:chance(0.9) and { g:int(0, 5) } or { 2, 2 }
    return fmt("%s = %s:index_select(%s, %s)", g:target(), a.ref, dim, index_source(g, shape, n))
  end,
  masked_fill = function(g)
    local a = g:tensor()
    if not a then return nil end
    local shape = g:chance(0.85) and g:broadcastable(a.shape) or g:shape(200)
    local mask = g:chance(0.9) and fmt("tl.rand(%s):gt(0.5)", literal(shape)) or g:fresh(shape)
    return fmt("%s = %s:masked_fill(%s, %s)", g:target(), a.ref, mask, g:scalar())
  end,
}

local reductions = {
  value_reduction = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "amax", "amin", "all", "any", "count_nonzero", "logsumexp", "var", "std", "sum", "mean" }
    local dims = g:weighted {
      { 2, "nil" },
      { 4, tostring(g:dim(a.ndim)) },
      { 2, fmt("{ %s, %s }", g:dim(a.ndim), g:dim(a.ndim)) },
      { 1, "{}" },
    }
    local keep = g:weighted {
      { 3, "" },
      { 2, ", " .. tostring(g:chance(0.5)) },
      { 2, fmt(", { keepdim = %s, correction = %s }", tostring(g:chance(0.5)), g:pick { 0, 1, 2, -1, 0.5 }) },
      { 1, ", { keepdims = true }" },
    }
    if (op ~= "var" and op ~= "std") and keep:match("correction") then keep = ", true" end
    return fmt("%s = %s:%s(%s%s)", g:target(), a.ref, op, dims, keep)
  end,
}

reductions.cumulative = function(g)
  local a = g:tensor()
  if not a then return nil end
  local op = g:pick { "cumprod", "logcumsumexp", "cummax", "cummin" }
  local dim = g:chance(0.95) and g:dim(a.ndim) or g:pick { "nil", "'1'", "1.5" }
  if op == "cummax" or op == "cummin" then
    return fmt("%s, %s = %s:%s(%s)", g:target(), g:target(), a.ref, op, dim)
  end
  return fmt("%s = tl.%s(%s, %s)", g:target(), op, a.ref, dim)
end

return {
  { name = "join", weight = 3, variants = join },
  { name = "index", weight = 3, variants = index },
  { name = "reductions", weight = 3, variants = reductions },
}
