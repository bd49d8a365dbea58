-- The shape ops in Lua loops (for shape_spec and einsum_spec: each result element read from the input at the position the op's definition names) and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")

local M = {}

-- a nested table of out_shape whose element at idx is x's at source(idx) (a list of 1-based
-- positions), or fill where source gives nil
local function remap(x, out_shape, source, fill)
  return ref.build(out_shape, function(...)
    local at = source({ ... })
    if at == nil then return fill end
    return ref.get(x, at)
  end)
end
M.remap = remap

local function copy(list) return { table.unpack(list) } end

-- the zero of a nested table's element type
function M.zero_of(x)
  local v = x
  while type(v) == "table" do v = v[1] end
  if type(v) == "boolean" then return false end
  return 0
end

function M.tril(x, k, upper)
  local shape, zero = ref.shape_of(x), M.zero_of(x)
  local n = #shape
  return remap(x, shape, function(at)
    local diff = at[n] - at[n - 1]
    if (upper and diff >= k) or (not upper and diff <= k) then return at end
  end, zero)
end

function M.flip(x, dims)
  local shape = ref.shape_of(x)
  return remap(x, shape, function(at)
    local s = copy(at)
    for _, d in ipairs(dims) do s[d] = shape[d] + 1 - at[d] end
    return s
  end)
end

-- roll by shifts along dims (1-based, positive), or x's elements in row-major order without dims
function M.roll(x, shifts, dims)
  local shape = ref.shape_of(x)
  if not dims then
    local flat = ref.flatten(x)
    local n, out = #flat, {}
    for i = 1, n do out[i] = flat[((i - 1 - shifts[1]) % n) + 1] end
    return ref.unflatten(out, shape)
  end
  return remap(x, shape, function(at)
    local s = copy(at)
    for i, d in ipairs(dims) do s[d] = ((s[d] - 1 - shifts[i]) % shape[d]) + 1 end
    return s
  end)
end

function M.tile(x, reps)
  local shape = ref.shape_of(x)
  local nd = math.max(#shape, #reps)
  local xs, r, out = {}, {}, {}
  for d = 1, nd do
    xs[d] = shape[d - (nd - #shape)] or 1
    r[d] = reps[d - (nd - #reps)] or 1
    out[d] = xs[d] * r[d]
  end
  local lead = nd - #shape
  return ref.build(out, function(...)
    local at, s = { ... }, {}
    for d = lead + 1, nd do s[#s + 1] = ((at[d] - 1) % xs[d]) + 1 end
    return ref.get(x, s)
  end)
end

-- counts: a number (every slice) or a list (one per slice); dim nil: x's elements flattened
function M.repeat_interleave(x, counts, dim)
  if not dim then
    x, dim = (ref.flatten(x)), 1
  end
  local shape = ref.shape_of(x)
  local slice_of = {}
  for i = 1, shape[dim] do
    local c = type(counts) == "table" and counts[i] or counts
    for _ = 1, c do slice_of[#slice_of + 1] = i end
  end
  local out = copy(shape)
  out[dim] = #slice_of
  return remap(x, out, function(at)
    local s = copy(at)
    s[dim] = slice_of[at[dim]]
    return s
  end)
end

-- pads in torch's order; mode as tl.pad's
function M.pad(x, pads, mode, value)
  local shape = ref.shape_of(x)
  local out, before = copy(shape), {}
  for i = 1, #pads // 2 do
    local d = #shape + 1 - i
    before[d] = pads[2 * i - 1]
    out[d] = shape[d] + pads[2 * i - 1] + pads[2 * i]
  end
  return remap(x, out, function(at)
    local s = copy(at)
    for d, b in pairs(before) do
      local n, j = shape[d], at[d] - 1 - b -- 0-based position in x, maybe outside
      if j < 0 or j >= n then
        if mode == "constant" then return nil end
        if mode == "reflect" then j = j < 0 and -j or 2 * (n - 1) - j
        elseif mode == "replicate" then j = j < 0 and 0 or n - 1
        else j = j % n end
      end
      s[d] = j + 1
    end
    return s
  end, value or M.zero_of(x))
end

function M.diagonal(x, offset, d1, d2)
  local shape = ref.shape_of(x)
  local rest, out = {}, {}
  for d = 1, #shape do if d ~= d1 and d ~= d2 then rest[#rest + 1] = d; out[#out + 1] = shape[d] end end
  local r1, r2 = math.max(0, -offset), math.max(0, offset)
  out[#out + 1] = math.max(0, math.min(shape[d1] - r1, shape[d2] - r2))
  return remap(x, out, function(at)
    local s = {}
    for i, d in ipairs(rest) do s[d] = at[i] end
    s[d1], s[d2] = at[#at] + r1, at[#at] + r2
    return s
  end)
end

function M.diag_embed(x, offset, d1, d2)
  local shape = ref.shape_of(x)
  local rank, n = #shape + 1, shape[#shape]
  local m = n + math.abs(offset)
  local out, rest = {}, {}
  for d = 1, rank do
    if d == d1 or d == d2 then out[d] = m else rest[#rest + 1] = d; out[d] = shape[#rest] end
  end
  return remap(x, out, function(at)
    if at[d2] - at[d1] ~= offset then return nil end
    local s = {}
    for i, d in ipairs(rest) do s[i] = at[d] end
    s[#shape] = at[d1] - math.max(0, -offset)
    return s
  end, M.zero_of(x))
end

function M.unfold(x, dim, size, step)
  local shape = ref.shape_of(x)
  local out = copy(shape)
  out[dim] = (shape[dim] - size) // step + 1
  out[#shape + 1] = size
  return remap(x, out, function(at)
    local s = {}
    for d = 1, #shape do s[d] = at[d] end
    s[dim] = (at[dim] - 1) * step + at[#shape + 1]
    return s
  end)
end

-- perm[i] = the dim of x placed at i
function M.permute(x, perm)
  local shape = ref.shape_of(x)
  local out = {}
  for i, p in ipairs(perm) do out[i] = shape[p] end
  return remap(x, out, function(at)
    local s = {}
    for i, p in ipairs(perm) do s[p] = at[i] end
    return s
  end)
end

-- index: 1-based classes
function M.one_hot(index, classes)
  local shape = ref.shape_of(index)
  local out = copy(shape)
  out[#shape + 1] = classes
  return ref.build(out, function(...)
    local at = { ... }
    local c = table.remove(at)
    return ref.get(index, at) == c and 1 or 0
  end)
end

--- einsum by its definition: for every assignment of the labels, the product of the operands'
-- elements added into the output's element (spec explicit, letters only; operands nested tables)
function M.einsum(spec, ...)
  local operands = { ... }
  local lhs, rhs = spec:match("^(.-)%->(.*)$")
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  local size, labels = {}, {}
  for i, term in ipairs(terms) do
    local shape = ref.shape_of(operands[i])
    for d = 1, #term do
      local l = term:sub(d, d)
      if not size[l] then labels[#labels + 1] = l end
      size[l] = math.max(size[l] or 1, shape[d])
    end
  end
  local out_shape = {}
  for d = 1, #rhs do out_shape[d] = size[rhs:sub(d, d)] end
  local flat = {}
  for i = 1, ref.numel(out_shape) do flat[i] = 0 end
  local strides = ref.strides(out_shape)
  local shape_of_labels = {}
  for i, l in ipairs(labels) do shape_of_labels[i] = size[l] end
  ref.each_index(shape_of_labels, function(idx)
    local value = {}
    for i, l in ipairs(labels) do value[l] = idx[i] end
    local p = 1
    for i, term in ipairs(terms) do
      local at, shape = {}, ref.shape_of(operands[i])
      for d = 1, #term do at[d] = math.min(value[term:sub(d, d)], shape[d]) end -- size 1 broadcasts
      p = p * ref.get(operands[i], at)
    end
    local pos = 1
    for d = 1, #rhs do pos = pos + (value[rhs:sub(d, d)] - 1) * strides[d] end
    flat[pos] = flat[pos] + p
  end)
  if #out_shape == 0 then return flat[1] end
  return ref.unflatten(flat, out_shape)
end

local function input(...) return tl.randn(...):double():requires_grad_() end
M.gradcheck = {
  tril = { { function(x) return x:tril() end, { input(3, 4) } },
           { function(x) return x:tril(-1) end, { input(2, 3, 3) } } },
  triu = { { function(x) return x:triu(1) end, { input(3, 4) } } },
  flip = { { function(x) return x:flip({ 1, 3 }) end, { input(2, 3, 4) } } },
  roll = { { function(x) return x:roll({ 1, -2 }, { 1, 2 }) end, { input(3, 4) } },
           { function(x) return x:roll(5) end, { input(3, 4) } } },
  tile = { { function(x) return x:tile(2, 1, 3) end, { input(3, 2) } } },
  repeat_interleave = { { function(x) return x:repeat_interleave(3, 2) end, { input(2, 3) } },
                        { function(x) return x:repeat_interleave(tl.tensor({ 2, 0, 1 }), 1) end, { input(3, 2) } } },
  pad = { { function(x) return tl.pad(x, { 1, -1, 2, 0 }, { value = 3 }) end, { input(3, 4) } },
          { function(x) return tl.pad(x, { 2, 1, 1, 2 }, { mode = "reflect" }) end, { input(3, 4) } },
          { function(x) return tl.pad(x, { 2, 1 }, { mode = "replicate" }) end, { input(2, 3) } },
          { function(x) return tl.pad(x, { 3, 2, 1, 0 }, { mode = "circular" }) end, { input(2, 3) } } },
  diag_embed = { { function(x) return tl.diag_embed(x, 1) end, { input(2, 3) } },
                 { function(x) return tl.diag_embed(x, -1, 1, 3) end, { input(2, 3) } } },
  diagonal = { { function(x) return x:diagonal(1) end, { input(3, 4) } },
               { function(x) return x:diagonal(-1, 3, 1) end, { input(3, 2, 4) } } },
  unfold = { { function(x) return x:unfold(2, 3, 2) end, { input(2, 7) } },
             { function(x) return x:unfold(1, 2, 1) end, { input(4, 2) } } },
  movedim = { { function(x) return x:movedim({ 1, 2 }, { 3, 1 }) end, { input(2, 3, 4) } } },
}

return M
