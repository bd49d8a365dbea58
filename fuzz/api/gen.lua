-- The random choices of the API fuzzer (numbers, shapes, dtypes, pool slots), each written as Lua source text.
--
-- A Gen draws from Lua's math.random (seeded by the driver) and reads the live pool (env.V) to make
-- statements plausible: a maker asks for "a float tensor of the pool" and gets its slot and shape.
-- Reading the pool never changes it, so a replay that only re-runs the logged statements sees the same
-- engine calls as the run that wrote them.
local Gen = {}
Gen.__index = Gen

Gen.DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }
Gen.FLOAT_DTYPES = { "float32", "float64", "bfloat16", "float16" }
Gen.BIG = 1 << 41 -- element counts from here up exceed the engine's 1 TiB tensor limit in every dtype

local FLOATING = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

function Gen.is_floating(dtype) return FLOATING[dtype] == true end

--- Gen.new(tl, env, {pool = 16, cap = 100000})
function Gen.new(tl, env, opts)
  return setmetatable({ tl = tl, env = env, pool = opts.pool, cap = opts.cap }, Gen)
end

-- ---- draws ------------------------------------------------------------------------------------
function Gen:int(lo, hi) return math.random(lo, hi) end
function Gen:chance(p) return math.random() < p end
function Gen:pick(list) return list[math.random(#list)] end

--- weighted{{w, value}, ...}: a value drawn with probability proportional to its weight
function Gen:weighted(choices)
  local total = 0
  for _, c in ipairs(choices) do total = total + c[1] end
  local r = math.random() * total
  for _, c in ipairs(choices) do
    r = r - c[1]
    if r < 0 then return c[2] end
  end
  return choices[#choices][2]
end

-- ---- literals ---------------------------------------------------------------------------------
--- literal(x): Lua source that evaluates to exactly x (numbers keep their integer/float subtype)
function Gen.literal(x)
  local kind = type(x)
  if kind == "number" then
    if math.type(x) == "integer" then
      if x == math.mininteger then return "math.mininteger" end
      if x == math.maxinteger then return "math.maxinteger" end
      return string.format("%d", x)
    end
    if x ~= x then return "(0/0)" end
    if x == math.huge then return "math.huge" end
    if x == -math.huge then return "-math.huge" end
    if x == 0 then return 1 / x < 0 and "-0.0" or "0.0" end
    local s = string.format("%.17g", x)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  elseif kind == "string" then
    return (string.format("%q", x):gsub("\\\n", "\\n"))
  elseif kind == "table" then
    local parts = {}
    for i = 1, #x do parts[i] = Gen.literal(x[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(x)
end
local literal = Gen.literal

Gen.EXTREME_INTS = { 0, 1, -1, 2, 7, (1 << 31) - 1, 1 << 31, -(1 << 31), 1 << 32, 1 << 53, (1 << 53) + 1,
  1 << 62, math.maxinteger, math.mininteger, math.maxinteger - 1 }
Gen.EXTREME_FLOATS = { 0.0, -0.0, 0.5, -2.5, 1e-300, 5e-324, 1e308, math.huge, -math.huge, 0 / 0, 2.0 ^ 63,
  -(2.0 ^ 63), 2.0 ^ 53 + 2, 16777217.0, 65504.0, 65536.0, 3.5e38, 1e-40 }

--- a Lua number as source: mostly small, sometimes an extreme integer or float
function Gen:number()
  return self:weighted {
    { 5, function() return literal(self:int(-4, 4)) end },
    { 5, function() return literal(self:int(-400, 400) / 8) end },
    { 1, function() return literal(self:pick(Gen.EXTREME_INTS)) end },
    { 2, function() return literal(self:pick(Gen.EXTREME_FLOATS)) end },
  }()
end

--- a small plain value: a number in [-4, 4] (float) or a small integer
function Gen:small_number()
  if self:chance(0.5) then return literal(self:int(-3, 3)) end
  return literal(self:int(-32, 32) / 8)
end

--- a value for fill_, full, t[i] = v: a number, sometimes a boolean, rarely a wrong type
function Gen:scalar()
  return self:weighted {
    { 12, function() return self:number() end },
    { 1, function() return self:chance(0.5) and "true" or "false" end },
    { 1, function() return self:pick { '"2"', "{}", "nil", "tl" } end },
  }()
end

-- ---- shapes -----------------------------------------------------------------------------------
function Gen.numel(shape)
  local n = 1.0
  for _, s in ipairs(shape) do n = n * s end
  return n
end

--- a plausible shape (table) whose element count stays within max_numel (default: small)
function Gen:shape(max_numel)
  max_numel = max_numel or 512
  local ndim = self:weighted { { 1, 0 }, { 4, 1 }, { 5, 2 }, { 3, 3 }, { 2, 4 }, { 1, self:int(5, 6) } }
  local shape = {}
  for d = 1, ndim do
    shape[d] = self:weighted { { 2, 0 }, { 6, 1 }, { 20, self:int(2, 5) }, { 2, self:int(6, 33) } }
  end
  -- shrink the largest dims until the count fits
  while Gen.numel(shape) > max_numel do
    local largest = 1
    for d = 2, #shape do if shape[d] > shape[largest] then largest = d end end
    shape[largest] = shape[largest] // 2
  end
  return shape
end

--- the sizes of shape as call arguments: "2, 3" or "{2, 3}" (an empty shape: "" or "{}")
function Gen:shape_args(shape)
  if self:chance(0.5) then return literal(shape) end
  local parts = {}
  for i, s in ipairs(shape) do parts[i] = literal(s) end
  return table.concat(parts, ", ")
end

--- shape itself, or with a size raised to BIG when its element count lies between cap and BIG (a count the
-- engine would really allocate and fill: slow, not a defect)
function Gen:beyond_cap(shape)
  local n = Gen.numel(shape)
  if n <= self.cap or n >= Gen.BIG or n ~= n then return shape end
  local out = {}
  for d, s in ipairs(shape) do out[d] = s end
  out[#out + 1] = Gen.BIG
  return out
end

--- call arguments: the non-empty strings of the list joined with ", "
function Gen.args(...)
  local parts = {}
  for i = 1, select("#", ...) do
    local part = select(i, ...)
    if part ~= nil and part ~= "" then parts[#parts + 1] = part end
  end
  return table.concat(parts, ", ")
end

--- the broadcast of two shapes, or nil when they do not broadcast
function Gen.broadcast(a, b)
  local out, na, nb = {}, #a, #b
  local n = math.max(na, nb)
  for i = 1, n do
    local x, y = a[na - n + i] or 1, b[nb - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    out[i] = x == 1 and y or x
  end
  return out
end

--- a shape that broadcasts with shape: trailing dims kept or set to 1, leading dims dropped or added
function Gen:broadcastable(shape)
  local out = {}
  local drop = self:chance(0.3) and self:int(0, #shape) or 0
  for d = drop + 1, #shape do out[#out + 1] = self:chance(0.3) and 1 or shape[d] end
  if self:chance(0.15) then table.insert(out, 1, self:int(1, 3)) end
  return out
end

-- ---- dtypes and options -------------------------------------------------------------------------
function Gen:dtype()
  return self:weighted { { 4, "float32" }, { 4, "float64" }, { 1, "bfloat16" }, { 1, "float16" },
    { 1, "int32" }, { 2, "int64" }, { 1, "bool" } }
end

function Gen:float_dtype()
  return self:weighted { { 4, "float32" }, { 4, "float64" }, { 1, "bfloat16" }, { 1, "float16" } }
end

--- an options table as source ("" for none); requires_grad when asked (true/false/nil = random)
function Gen:opts(dtype, requires_grad)
  local parts = {}
  if dtype then parts[#parts + 1] = "dtype = " .. literal(dtype) end
  if requires_grad == nil then requires_grad = self:chance(0.15) end
  if requires_grad then parts[#parts + 1] = "requires_grad = true" end
  if self:chance(0.02) then
    parts[#parts + 1] = "device = " .. literal(self:pick { "cpu", "cuda", "cuda:7", "tpu", "cuda:-1" })
  end
  if self:chance(0.01) then parts[#parts + 1] = "dtype = " .. literal(self:pick { "float8", "", "int" }) end
  if #parts == 0 then return "" end
  return "{" .. table.concat(parts, ", ") .. "}"
end

--- ", opts" or ""
function Gen:opts_suffix(dtype, requires_grad)
  local o = self:opts(dtype, requires_grad)
  return o == "" and "" or (", " .. o)
end

-- ---- the pool -----------------------------------------------------------------------------------
--- facts about V[k], or nil when the slot is empty or its tensor released
function Gen:info(k)
  local t = self.env.V[k]
  if t == nil or not self.tl.is_tensor(t) or self.tl.is_released(t) then return nil end
  local shape = t.shape
  return { k = k, ref = "V[" .. k .. "]", shape = shape, ndim = #shape, numel = t:numel(), dtype = t.dtype,
    requires_grad = t.requires_grad, is_leaf = t.is_leaf, floating = FLOATING[t.dtype] == true }
end

--- a random live tensor of the pool passing filter(info) (nil when there is none)
function Gen:tensor(filter)
  local found = {}
  for k = 1, self.pool do
    local info = self:info(k)
    if info and (not filter or filter(info)) then found[#found + 1] = info end
  end
  if #found == 0 then return nil end
  return found[math.random(#found)]
end

--- a slot to assign to
function Gen:target() return "V[" .. self:int(1, self.pool) .. "]" end

--- source of a fresh tensor of shape and dtype with small values
function Gen:fresh(shape, dtype, requires_grad)
  dtype = dtype or self:dtype()
  if Gen.numel(shape) > self.cap then -- a shape taken from a huge empty tensor: its huge sizes become 1
    local small = {}
    for d, s in ipairs(shape) do small[d] = s > 64 and 1 or s end
    shape = small
  end
  local rg = requires_grad and FLOATING[dtype] and ", requires_grad = true" or ""
  if FLOATING[dtype] then
    return string.format("tl.randn(%s, {dtype = %s%s})", literal(shape), literal(dtype), rg)
  elseif dtype == "bool" then
    return string.format("tl.rand(%s):gt(0.5)", literal(shape))
  end
  return string.format("tl.randint(-5, 6, %s, {dtype = %s})", literal(shape), literal(dtype))
end

--- an operand: a tensor of the pool (mostly) or a fresh one; returns source and its shape
function Gen:operand(filter)
  local info = self:chance(0.8) and self:tensor(filter) or nil
  if info then return info.ref, info.shape, info.dtype end
  local shape, dtype = self:shape(), self:dtype()
  return self:fresh(shape, dtype, self:chance(0.3)), shape, dtype
end

--- a dim argument for a tensor of ndim dims: mostly valid (1-based or negative), sometimes not
function Gen:dim(ndim)
  return self:weighted {
    { 10, function() return ndim > 0 and self:int(1, ndim) or 1 end },
    { 3, function() return ndim > 0 and -self:int(1, ndim) or -1 end },
    { 1, function() return self:pick { 0, ndim + 1, -ndim - 1, 17, math.maxinteger, math.mininteger } end },
  }()
end

--- a small positive size or, rarely, a bad one
function Gen:size(lo, hi)
  if self:chance(0.93) then return self:int(lo, hi) end
  return self:pick { 0, -1, -2, math.maxinteger, math.mininteger, 1 << 62, Gen.BIG }
end

return Gen
