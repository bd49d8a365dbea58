-- Statement makers of the API fuzzer for nn ops and modules: conv2d, pooling, interpolate, embedding, cross_entropy,
-- layer_norm, add_layer_norm, batch_norm, the fused LSTM / GRU cells, losses, scaled_dot_product_attention, and tl.nn modules
-- (forward, to, state_dict round trips).
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

--- a layer norm's output_dtype: mostly a 16-bit type or "autocast", sometimes one it refuses
local function output_dtype(g)
  return g:weighted {
    { 6, function() return g:pick { "bfloat16", "float16", "autocast" } end },
    { 2, function() return g:pick { "float32", "float64" } end },
    { 1, function() return g:pick { "int32", "bool", "bf16", "" } end },
  }()
end

--- a window argument (stride, padding, kernel): mostly small, sometimes a pair, rarely bad; with extreme,
-- often huge (overflowing output sizes)
local function window(g, lo, hi, extreme)
  return g:weighted {
    { 8, function() return literal(g:int(lo, hi)) end },
    { 2, function() return literal { g:int(lo, hi), g:int(lo, hi) } end },
    { 1, function() return literal(g:pick { 0, -1, 2.5, { 1 }, { 1, 2, 3 }, "2" }) end },
    { extreme and 6 or 0, function()
      local huge = { 1 << 41, 1 << 62, math.maxinteger, math.mininteger, (1 << 62) - 1 }
      return literal(g:chance(0.5) and g:pick(huge) or { g:pick(huge), g:int(lo, hi) })
    end },
  }()
end

local function window_opts(g, extreme)
  local parts = {}
  if g:chance(0.6) then parts[#parts + 1] = "stride = " .. window(g, 1, 3, extreme) end
  if g:chance(extreme and 0.8 or 0.6) then parts[#parts + 1] = "padding = " .. window(g, 0, 2, extreme) end
  if g:chance(0.03) then parts[#parts + 1] = "strides = 2" end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function conv2d(extreme)
  return function(g)
    local n, c, h, w = g:int(1, 2), g:int(1, 3), g:int(0, 9), g:int(0, 9)
    local o, kh, kw = g:int(1, 4), g:int(1, 4), g:int(1, 4)
    local dtype = g:float_dtype()
    local x = { n, c, h, w }
    if g:chance(0.1) then x = g:shape() end
    local weight = { o, g:chance(0.9) and c or c + 1, kh, kw }
    local bias = g:weighted { { 2, "" }, { 2, ", " .. g:fresh({ g:chance(0.9) and o or o + 1 }, dtype, g:chance(0.4)) },
      { 1, ", nil" } }
    return fmt("%s = tl.conv2d(%s, %s%s, %s)", g:target(), g:fresh(x, dtype, g:chance(0.4)),
      g:fresh(weight, g:chance(0.95) and dtype or g:dtype(), g:chance(0.5)), bias, window_opts(g, extreme))
  end
end

local function max_pool2d(extreme)
  return function(g)
    local a = g:chance(0.3) and g:tensor(function(i) return i.ndim == 4 or i.ndim == 3 end)
    local x = a and a.ref
        or g:fresh({ g:int(1, 2), g:int(1, 3), g:int(0, 9), g:int(0, 9) }, g:float_dtype(), g:chance(0.4))
    local opts = window_opts(g, extreme):sub(1, -2)
    local extra = {}
    if g:chance(0.4) then extra[#extra + 1] = "dilation = " .. window(g, 1, 3, extreme) end
    if g:chance(0.4) then extra[#extra + 1] = "ceil_mode = " .. literal(g:chance(0.5)) end
    if g:chance(0.3) then extra[#extra + 1] = "return_indices = true" end
    if #extra > 0 then opts = opts .. (opts == "{" and "" or ", ") .. table.concat(extra, ", ") end
    return fmt("%s = tl.max_pool2d(%s, %s, %s})", g:target(), x, window(g, 1, 3, extreme), opts)
  end
end

-- an image input for the pooling makers: an existing 3-D or 4-D tensor, or a fresh one
local function image(g)
  local a = g:chance(0.3) and g:tensor(function(i) return i.ndim == 4 or i.ndim == 3 end)
  return a and a.ref or g:fresh({ g:int(0, 2), g:int(1, 3), g:int(0, 9), g:int(0, 9) }, g:float_dtype(), g:chance(0.4))
end

local function avg_pool2d(extreme)
  return function(g)
    local opts = window_opts(g, extreme):sub(1, -2)
    local extra = {}
    if g:chance(0.4) then extra[#extra + 1] = "ceil_mode = " .. literal(g:chance(0.5)) end
    if g:chance(0.4) then extra[#extra + 1] = "count_include_pad = " .. literal(g:chance(0.5)) end
    if g:chance(0.2) then extra[#extra + 1] = "divisor_override = " .. literal(g:pick { 1, 3, 0, -2, 2.5 }) end
    if #extra > 0 then opts = opts .. (opts == "{" and "" or ", ") .. table.concat(extra, ", ") end
    return fmt("%s = tl.avg_pool2d(%s, %s, %s})", g:target(), image(g), window(g, 1, 3, extreme), opts)
  end
end

local function adaptive_pool2d(g)
  local op = g:pick { "adaptive_avg_pool2d", "adaptive_max_pool2d" }
  local opts = op == "adaptive_max_pool2d" and g:chance(0.5) and ", {return_indices = true}" or ""
  return fmt("%s = tl.%s(%s, %s%s)", g:target(), op, image(g), window(g, 0, 6, g:chance(0.1)), opts)
end

local function interpolate(g)
  local rank = g:pick { 3, 4, 4, 4 }
  local x = rank == 4 and image(g) or g:fresh({ g:int(0, 2), g:int(1, 3), g:int(1, 9) }, g:float_dtype(), g:chance(0.4))
  local mode = g:pick { "nearest", "bilinear", "linear", "bicubic" }
  local size = g:chance(0.5) and "size = " .. window(g, 1, 12, g:chance(0.05))
      or "scale_factor = " .. literal(g:pick { 2, 1.5, 0.5, 3, 0.7, { 2, 0.5 }, 0, -1, 1e300 })
  local align = g:chance(0.3) and ", align_corners = " .. literal(g:chance(0.5)) or ""
  return fmt("%s = tl.nn.functional.interpolate(%s, {%s, mode = %s%s})", g:target(), x, size, literal(mode), align)
end

local ops = {
  conv2d = conv2d(false),
  conv2d_extreme = conv2d(true),
  max_pool2d = max_pool2d(false),
  max_pool2d_extreme = max_pool2d(true),
  avg_pool2d = avg_pool2d(false),
  avg_pool2d_extreme = avg_pool2d(true),
  adaptive_pool2d = adaptive_pool2d,
  interpolate = interpolate,
  embedding = function(g)
    local rows, dim = g:int(0, 6), g:int(0, 5)
    local index_shape = g:shape(24)
    local hi = g:chance(0.9) and rows or rows + 1
    local indices = fmt("tl.randint(1, %d, %s%s)", math.max(hi, 1) + 1, literal(index_shape),
      g:opts_suffix(g:pick { "int64", "int64", "int32", "float32" }, false))
    if g:chance(0.1) then
      indices = fmt("tl.tensor({%s}, {dtype = 'int64'})",
        literal(g:pick { 0, -1, math.maxinteger, math.mininteger, 1 << 31, rows + 1 }))
    end
    return fmt("%s = tl.embedding(%s, %s)", g:target(), indices, g:fresh({ rows, dim }, g:float_dtype(), g:chance(0.5)))
  end,
  cross_entropy = function(g)
    local n, c = g:int(0, 5), g:int(0, 6)
    local logits = g:fresh(g:chance(0.9) and { n, c } or g:shape(), g:float_dtype(), g:chance(0.6))
    local target = fmt("tl.randint(1, %d, {%d})", c + (g:chance(0.9) and 1 or 2), g:chance(0.9) and n or n + 1)
    if c == 0 then target = fmt("tl.ones(%d, {dtype = 'int64'})", n) end
    if g:chance(0.05) then target = fmt("tl.tensor({%s})", literal(g:pick { 0, -1, math.maxinteger, c + 1 })) end
    local opts = g:weighted { { 4, "" }, { 2, ", " .. literal(g:pick { 0.0, 0.1, 0.5, 1.0, -0.5, 2.0, 0 / 0 }) },
      { 2, fmt(", {label_smoothing = %s}", literal(g:pick { 0.0, 0.1, 1.0, -1.0, 0 / 0, math.huge })) },
      { 0.3, ", {reduction = 'sum'}" }, { 0.3, ", {smoothing = 0.1}" } }
    return fmt("%s = tl.cross_entropy(%s, %s%s)", g:target(), logits, target, opts)
  end,
  layer_norm = function(g)
    local a = g:chance(0.4) and g:tensor(function(i) return i.ndim >= 1 and i.floating end)
    local shape = a and a.shape or g:shape()
    local x = a and a.ref or g:fresh(shape, g:float_dtype(), g:chance(0.4))
    local last = shape[#shape] or 1
    local dtype = a and a.dtype or g:float_dtype()
    local w = g:chance(0.7) and g:fresh({ g:chance(0.9) and last or last + 1 }, dtype, g:chance(0.5)) or "nil"
    local b = g:chance(0.7) and g:fresh({ g:chance(0.9) and last or last + 1 }, dtype, g:chance(0.5)) or "nil"
    local eps = g:chance(0.8) and "" or (", " .. literal(g:pick { 0.0, -1.0, 1e-300, 0 / 0, math.huge }))
    -- the output's dtype sometimes (mixed precision), mostly one a float32 input takes
    if g:chance(0.3) then
      eps = (eps == "" and ", 1e-5" or eps) .. ", {output_dtype = " .. literal(output_dtype(g)) .. "}"
    end
    return fmt("%s = tl.layer_norm(%s, %s, %s%s)", g:target(), x, w, b, eps)
  end,
  -- add_layer_norm: a residual mostly of x's shape and dtype (sometimes another), weight and bias
  -- mostly of the last dim, eps mostly valid; either result kept
  add_layer_norm = function(g)
    local a = g:chance(0.4) and g:tensor(function(i) return i.ndim >= 1 and i.floating end)
    local shape = a and a.shape or g:shape()
    local dtype = a and a.dtype or g:float_dtype()
    local x = a and a.ref or g:fresh(shape, dtype, g:chance(0.4))
    local last = shape[#shape] or 1
    local rshape = { table.unpack(shape) }
    if g:chance(0.1) and #rshape > 0 then rshape[#rshape] = rshape[#rshape] + 1 end
    local r = g:fresh(rshape, g:chance(0.7) and dtype or g:float_dtype(), g:chance(0.5))
    local w = g:chance(0.7) and g:fresh({ g:chance(0.9) and last or last + 1 }, dtype, g:chance(0.5)) or "nil"
    local b = g:chance(0.7) and g:fresh({ g:chance(0.9) and last or last + 1 }, dtype, g:chance(0.5)) or "nil"
    local opts = {}
    if g:chance(0.2) then opts[#opts + 1] = "eps = " .. literal(g:pick { 0.0, -1.0, 1e-300, 0 / 0, math.huge }) end
    if g:chance(0.3) then opts[#opts + 1] = "output_dtype = " .. literal(output_dtype(g)) end
    local eps = #opts > 0 and (", {" .. table.concat(opts, ", ") .. "}") or ""
    local call = fmt("tl.add_layer_norm(%s, %s, %s, %s%s)", x, r, w, b, eps)
    return fmt(g:chance(0.5) and "%s = (%s)" or "%s = select(2, %s)", g:target(), call)
  end,
  -- batch_norm: x [N, C, ...] mostly, per-channel tensors mostly of C (of any floating dtype), the
  -- running statistics given or not (fresh, so they may be updated in place), options mostly valid
  batch_norm = function(g)
    local a = g:chance(0.4) and g:tensor(function(i) return i.ndim >= 2 and i.floating end)
    local shape = a and a.shape or g:shape()
    local x = a and a.ref or g:fresh(shape, g:float_dtype(), g:chance(0.4))
    local c = shape[2] or 1
    local function channel()
      return g:fresh({ g:chance(0.9) and c or c + 1 }, g:float_dtype(), g:chance(0.5))
    end
    local running = g:chance(0.7)
    local rm, rv = running and channel() or "nil", running and channel() or "nil"
    if g:chance(0.05) then rv = "nil" end
    local parts = {}
    if g:chance(0.6) then parts[#parts + 1] = "weight = " .. channel() end
    if g:chance(0.6) then parts[#parts + 1] = "bias = " .. channel() end
    if g:chance(0.6) then parts[#parts + 1] = "training = " .. tostring(g:chance(0.7)) end
    if g:chance(0.3) then
      parts[#parts + 1] = "momentum = " .. literal(g:pick { 0.1, 0, 1, 0.5, -0.1, 2, 0 / 0 })
    end
    if g:chance(0.2) then parts[#parts + 1] = "eps = " .. literal(g:pick { 1e-5, 0.0, -1.0, 0 / 0, math.huge }) end
    if g:chance(0.03) then parts[#parts + 1] = "trainig = true" end
    return fmt("%s = tl.batch_norm(%s, %s, %s, {%s})", g:target(), x, rm, rv, table.concat(parts, ", "))
  end,
  -- the fused cell ops: state [lead..., H], gates [lead..., 4H] (3H for the GRU), mostly matching, sometimes a
  -- wrong width, leading dim or dtype, or a pool tensor as the state
  lstm_cell_pointwise = function(g)
    local a = g:chance(0.3) and g:tensor(function(i) return i.ndim >= 1 and i.floating end)
    local shape = a and a.shape or g:shape()
    if #shape == 0 then shape = { g:int(0, 4) } end
    local dtype = a and a.dtype or g:float_dtype()
    local gates = { table.unpack(shape) }
    gates[#gates] = gates[#gates] * 4 + (g:chance(0.9) and 0 or g:pick { 1, -1 })
    if g:chance(0.05) and #gates > 1 then gates[1] = gates[1] + 1 end
    local c = a and a.ref or g:fresh(shape, g:chance(0.95) and dtype or g:float_dtype(), g:chance(0.5))
    local g1 = g:fresh(gates, dtype, g:chance(0.5))
    local g2 = g:chance(0.5) and (g:fresh(gates, dtype, g:chance(0.5)) .. ", ") or ""
    local call = fmt("tl.lstm_cell_pointwise(%s, %s%s)", g1, g2, c)
    return fmt(g:chance(0.5) and "%s = (%s)" or "%s = select(2, %s)", g:target(), call)
  end,
  gru_cell_pointwise = function(g)
    local shape = g:shape()
    if #shape == 0 then shape = { g:int(0, 4) } end
    local dtype = g:float_dtype()
    local gates = { table.unpack(shape) }
    gates[#gates] = gates[#gates] * 3 + (g:chance(0.9) and 0 or g:pick { 1, -1 })
    local h = g:fresh(shape, g:chance(0.95) and dtype or g:float_dtype(), g:chance(0.5))
    return fmt("%s = tl.gru_cell_pointwise(%s, %s, %s)", g:target(), g:fresh(gates, dtype, g:chance(0.5)),
      g:fresh(gates, dtype, g:chance(0.5)), h)
  end,
  mse_loss = function(g)
    local a = g:tensor(function(i) return i.floating end)
    if not a then return nil end
    local shape = g:chance(0.8) and a.shape or g:broadcastable(a.shape)
    return fmt("%s = tl.nn.functional.mse_loss(%s, %s)", g:target(), a.ref, g:fresh(shape, a.dtype))
  end,
  -- attention: q [lead..., T, D], k and v [lead..., S, D] mostly right (or a pool tensor attending
  -- to itself), options mostly valid, sometimes of bad values or types
  scaled_dot_product_attention = function(g)
    local opts = g:weighted {
      { 3, "" },
      { 5, fmt(", {causal = %s, dropout = %s}", tostring(g:chance(0.5)), literal(g:pick { 0, 0, 0.1, 0.5, 0.9 })) },
      { 2, fmt(", {scale = %s, causal = %s}", literal(g:pick { 0.5, 1, 3.0, 1e-3 }), tostring(g:chance(0.5))) },
      { 1, ", " .. g:pick { "{dropout = 1}", "{dropout = -0.5}", "{dropout = 0 / 0}", "{scale = 0}", "{scale = -1}",
        "{scale = math.huge}", "{causal = 1}", "{dropout = '0.1'}", "{casual = true}", "3", "{scale = {}}" } },
    }
    local a = g:chance(0.25) and g:tensor(function(i) return i.ndim >= 2 and i.floating end)
    if a then
      return fmt("%s = tl.scaled_dot_product_attention(%s, %s, %s%s)", g:target(), a.ref, a.ref, a.ref, opts)
    end
    local dtype = g:float_dtype()
    local lead = {}
    for i = 1, g:pick { 0, 1, 2, 2, 3 } do lead[i] = g:int(0, 3) end
    local T, S, D = g:int(0, 9), g:int(0, 9), g:int(0, 6)
    local function shape(rows, d)
      local s = { table.unpack(lead) }
      s[#s + 1], s[#s + 2] = rows, d
      return s
    end
    local q = g:fresh(g:chance(0.95) and shape(T, D) or g:shape(), dtype, g:chance(0.5))
    local k = g:fresh(shape(S, g:chance(0.93) and D or D + 1), g:chance(0.95) and dtype or g:dtype(), g:chance(0.5))
    local v = g:fresh(shape(g:chance(0.95) and S or S + 1, g:chance(0.93) and D or D + 2), dtype, g:chance(0.5))
    if g:chance(0.2) and #lead >= 1 then -- strided heads: a [..., T, H, D] tensor transposed
      q = q .. fmt(":transpose(%d, %d):contiguous():transpose(%d, %d)", #lead, #lead + 1, #lead, #lead + 1)
    end
    return fmt("%s = tl.scaled_dot_product_attention(%s, %s, %s%s)", g:target(), q, k, v, opts)
  end,
  dropout = function(g)
    local a = g:tensor()
    if not a then return nil end
    local p = literal(g:pick { 0.0, 0.5, 1.0, -0.1, 1.5, 0 / 0 })
    return fmt("%s = tl.nn.functional.dropout(%s, %s, %s)", g:target(), a.ref, p, tostring(g:chance(0.7)))
  end,
  -- the fused op and its in-place form (any pool tensor: integer ones are refused), sometimes
  -- after a reseed, rarely with a bad p
  dropout_op = function(g)
    local a = g:tensor()
    if not a then return nil end
    local p = literal(g:weighted {
      { 6, function() return g:pick { 0.0, 0.1, 0.5, 0.9, 1.0 } end },
      { 1, function() return g:pick { -0.1, 1.5, 0 / 0, math.huge, "0.5" } end },
    }())
    local seed = g:chance(0.3) and fmt("tl.manual_seed(%d); ", g:int(0, 99)) or ""
    if g:chance(0.3) then return fmt("%s%s:dropout_(%s)", seed, a.ref, p), { a.k } end
    return fmt("%s%s = tl.dropout(%s, %s)", seed, g:target(), a.ref, p)
  end,
  gelu = function(g)
    local a = g:tensor()
    if not a then return nil end
    local approximate = g:pick { "nil", "'none'", "'tanh'", "'fast'", "3" }
    if g:chance(0.3) then
      return fmt("%s = tl.nn.GELU({approximate = %s})(%s)", g:target(), approximate, a.ref)
    end
    return fmt("%s = tl.nn.functional.gelu(%s, {approximate = %s})", g:target(), a.ref, approximate)
  end,
}

-- ---- modules (kept in M[1..pool]) ----------------------------------------------------------------------------
local function module_slot(g) return g:int(1, g.pool) end

local function a_module(g)
  local found = {}
  for k = 1, g.pool do
    if type(g.env.M[k]) == "table" then found[#found + 1] = k end
  end
  if #found == 0 then return nil end
  return g:pick(found)
end

local modules = {
  linear = function(g)
    local i, o = g:size(0, 8), g:size(0, 8)
    local opts = g:chance(0.3) and fmt(", {bias = %s, dtype = %s}", tostring(g:chance(0.5)), literal(g:dtype())) or ""
    return fmt("M[%d] = tl.nn.Linear(%s, %s%s)", module_slot(g), literal(i), literal(o), opts)
  end,
  sequential = function(g)
    local sizes = { g:int(1, 8), g:int(1, 8), g:int(1, 8) }
    local act = g:pick { "ReLU", "GELU", "Tanh", "Sigmoid" }
    return fmt("M[%d] = tl.nn.Sequential(tl.nn.Linear(%d, %d), tl.nn.%s(), tl.nn.Linear(%d, %d))", module_slot(g),
      sizes[1], sizes[2], act, g:chance(0.9) and sizes[2] or sizes[3], sizes[3])
  end,
  conv = function(g)
    return fmt("M[%d] = tl.nn.Conv2d(%d, %d, %s, {padding = %d})", module_slot(g), g:int(1, 3), g:int(1, 3),
      window(g, 1, 3, false), g:int(0, 1))
  end,
  forward = function(g)
    local k = a_module(g)
    if not k then return nil end
    local m = g.env.M[k]
    local first = rawget(m, 1) or m
    local features = rawget(first, "in_features")
    local channels = rawget(first, "in_channels")
    local p = m:parameters()[1]
    local dtype = (p and not g.tl.is_released(p)) and p.dtype or "float32"
    local x
    if type(features) == "number" and features <= 64 and g:chance(0.8) then
      x = g:fresh({ g:int(0, 3), features }, g:chance(0.9) and dtype or g:float_dtype(), g:chance(0.3))
    elseif type(channels) == "number" and g:chance(0.8) then
      x = g:fresh({ g:int(1, 2), channels, g:int(1, 7), g:int(1, 7) }, g:chance(0.9) and dtype or g:float_dtype(),
        g:chance(0.3))
    else
      local a = g:tensor(function(i) return i.floating end)
      x = a and a.ref or g:fresh({ g:int(0, 3), g:int(1, 8) }, "float32", g:chance(0.3))
    end
    return fmt("V[%d] = M[%d](%s)", g:int(1, g.pool), k, x)
  end,
  to = function(g)
    local k = a_module(g)
    if not k then return nil end
    return fmt("M[%d]:to(%s)", k, literal(g:pick { "float64", "float32", "bfloat16", "int64", "cuda", "bogus" })),
      { "M" .. k }
  end,
  state_dict = function(g)
    local k, j = a_module(g), a_module(g)
    if not k then return nil end
    return fmt("M[%d]:load_state_dict(M[%d]:state_dict()%s)", k, j, g:chance(0.5) and ", false" or ""), { "M" .. k }
  end,
  load_bad_state = function(g) -- a state dict with a released, reshaped or oddly typed entry
    local k = a_module(g)
    if not k then return nil end
    local edit = g:pick {
      "tl.release(sd[keys[#keys]])", "sd[keys[#keys]] = sd[keys[#keys]]:to('int64')",
      "sd[keys[1]] = sd[keys[1]]:detach():clone():requires_grad_()", "sd[keys[#keys]] = 3",
      "sd[keys[1]] = sd[keys[1]]:flatten()",
    }
    return fmt("do local sd = M[%d]:state_dict(); local keys = tl.nn.keys(sd); for _, key in ipairs(keys) do " ..
      "sd[key] = sd[key]:detach():clone() end; if #keys > 0 then %s end; M[%d]:load_state_dict(sd) end", k, edit, k),
      { "M" .. k }
  end,
  zero_grad = function(g)
    local k = a_module(g)
    if not k then return nil end
    return fmt("M[%d]:zero_grad()", k)
  end,
  parameter_to_pool = function(g)
    local k = a_module(g)
    if not k then return nil end
    return fmt("V[%d] = M[%d]:parameters()[%d]", g:int(1, g.pool), k, g:int(1, 4))
  end,
  tostring = function(g)
    local k = a_module(g)
    if not k then return nil end
    return fmt("local _ = tostring(M[%d])", k)
  end,
}

return {
  { name = "nn", weight = 5, variants = ops },
  { name = "modules", weight = 3, variants = modules, weights = { forward = 4 } },
}
