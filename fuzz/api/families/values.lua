-- Statement makers of the API fuzzer that check values against pure-Lua references (fuzz/api/reference.lua):
-- elementwise, reductions, matmul, views, softmax, fill_/copy_, save/load round trips, gradients, gradcheck.
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

local MODELLED = { float64 = true, float32 = true, int64 = true }
local ELEMENTWISE = { float64 = true, float32 = true, int64 = true, bfloat16 = true, float16 = true }

--- an operand the references model: a small pool tensor of a modelled dtype, or a fresh one
local function operand(g, dtypes, max_numel)
  max_numel = max_numel or 256
  local a = g:chance(0.6) and g:tensor(function(i) return dtypes[i.dtype] and i.numel <= max_numel end)
  if a then return a.ref, a.shape, a.dtype end
  local shape = g:shape(math.min(max_numel, 64))
  local dtype = g:pick { "float64", "float64", "float32", "int64", "bfloat16", "float16" }
  if not dtypes[dtype] then dtype = "float64" end
  return g:fresh(shape, dtype), shape, dtype
end

local values = {
  binary = function(g)
    local a, shape, dtype = operand(g, ELEMENTWISE)
    local op = g:pick { "add", "sub", "mul", "div" }
    local b = g:chance(0.85) and g:fresh(g:broadcastable(shape), dtype) or g:fresh(g:shape(16), dtype)
    if g:chance(0.5) then a, b = b, a end
    return fmt("H:check_binary(%s, %s, %s)", literal(op), a, b)
  end,
  scalar = function(g)
    local a = operand(g, { float64 = true })
    return fmt("H:check_scalar(%s, %s, %s, %s)", literal(g:pick { "add", "sub", "mul", "div" }), a, g:number(),
      tostring(g:chance(0.3)))
  end,
  reduce = function(g)
    local a, shape = operand(g, MODELLED, 1024)
    local op = g:pick { "sum", "mean" }
    if g:chance(0.3) then return fmt("H:check_reduce(%s, %s)", literal(op), a) end
    return fmt("H:check_reduce(%s, %s, %s, %s)", literal(op), a, g:dim(#shape), tostring(g:chance(0.4)))
  end,
  matmul = function(g)
    local n, k, m, b = g:int(0, 5), g:int(0, 6), g:int(0, 5), g:int(1, 3)
    local dtype = g:pick { "float64", "float32" }
    local shapes = g:pick { { { k }, { k } }, { { n, k }, { k } }, { { k }, { k, m } }, { { n, k }, { k, m } },
      { { b, n, k }, { b, k, m } }, { { b, n, k }, { k, m } }, { { n, k }, { b, k, m } } }
    local left = g:fresh(shapes[1], dtype)
    local a = g:chance(0.3) and g:tensor(function(i) return i.dtype == dtype and i.ndim == 2 and i.numel <= 400 end)
    if a then left, shapes[2] = a.ref, { a.shape[2], m } end
    local right = g:fresh(shapes[2], dtype)
    if g:chance(0.5) then right = right .. ":transpose(-1, -2):contiguous():transpose(-1, -2)" end
    return fmt("H:check_matmul(%s, %s)", left, right)
  end,
  permute = function(g)
    local a, shape = operand(g, { float64 = true, int64 = true, float32 = true, bool = true, bfloat16 = true }, 1024)
    local dims = {}
    for d = 1, #shape do table.insert(dims, g:int(1, d), d) end
    if g:chance(0.1) and #dims > 0 then dims[1] = -dims[1] end
    return fmt("H:check_permute(%s, %s)", a, literal(dims))
  end,
  narrow = function(g)
    local a, shape = operand(g, { float64 = true, int64 = true, float16 = true }, 1024)
    if #shape == 0 then return nil end
    local d = g:int(1, #shape)
    local start = g:int(1, shape[d] + 1)
    local length = g:int(0, shape[d] - start + 1)
    if g:chance(0.3) and start <= shape[d] then start = start - shape[d] - 1 end
    return fmt("H:check_narrow(%s, %d, %d, %d)", a, g:chance(0.8) and d or d - #shape - 1, start, length)
  end,
  softmax = function(g)
    local a, shape = operand(g, { float64 = true }, 512)
    return fmt("H:check_softmax(%s, %s, %s)", a, g:dim(#shape), tostring(g:chance(0.5)))
  end,
  fill = function(g)
    local a = g:tensor(function(i) return MODELLED[i.dtype] end)
    if not a then return nil end
    return fmt("H:check_fill(%s, %s)", a.ref, g:number()), { a.k }
  end,
  copy = function(g)
    local a = g:tensor(function(i) return MODELLED[i.dtype] end)
    if not a then return nil end
    local src = g:weighted {
      { 4, g:fresh(g:broadcastable(a.shape), a.dtype) },
      { 1, a.ndim >= 2 and fmt("%s:transpose(1, 2)", a.ref) or a.ref },
      { 1, a.ndim >= 1 and fmt("%s:select(1, 1)", a.ref) or a.ref },
    }
    return fmt("H:check_copy(%s, %s)", a.ref, src), { a.k }
  end,
  full = function(g)
    local value = g:chance(0.5) and literal(g:pick(g:chance(0.5) and Gen.EXTREME_INTS or Gen.EXTREME_FLOATS))
        or g:number()
    return fmt("H:check_full(%s, %s)", value, literal(g:dtype()))
  end,
  save_load = function(g)
    local parts = {}
    for i = 1, g:int(1, 3) do
      local a = g:tensor()
      parts[#parts + 1] = fmt("t%d = %s", i, a and a.ref or g:fresh(g:shape(), g:dtype()))
    end
    local meta = g:chance(0.3) and ", {epoch = 3, note = 'fuzz'}" or ""
    return fmt("H:check_save_load({%s}%s)", table.concat(parts, ", "), meta)
  end,
  grad_mul = function(g)
    local shape = g:shape(64)
    return fmt("H:check_grad_mul(%s, %s)", g:fresh(shape, "float64"), g:fresh(shape, "float64"))
  end,
  gradcheck = function(g)
    local fn = g:pick { "x:exp()", "x:tanh()", "x:sigmoid()", "x:sin()", "x:cos()", "x:gelu()", "x:silu()",
      "x * x", "x:softmax(-1)", "x:log_softmax(1)", "x:sum(1)", "x:mean()", "x:transpose(1, -1)", "F.Exp(x)",
      "F.Square(x)", "tl.layer_norm(x)", "x:matmul(x:transpose(1, -1))", "(x * 2):pow(3)", "x / (x * x + 1)",
      "tl.atan2(x, x * x + 1)", "x:view(-1):narrow(1, 1, 1)", "x:expand(2, table.unpack(x.shape)):sum(1)" }
    local shape = { g:int(1, 3), g:int(1, 3) }
    return fmt("H:check_gradcheck(function(x) return %s end, tl.randn(%s, {dtype = 'float64', requires_grad = true}))",
      fn, literal(shape))
  end,
}

return {
  { name = "values", weight = 8, variants = values },
}
