-- Statement makers of the API fuzzer that change state: in-place ops, optimizers, checkpoint and IDX files,
-- and the tensors' lifetime (release, close, collection), plus runtime settings.
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

-- ---- in place: a failed one must leave its target unchanged (the driver checks the targets) ----------------
--- a source for copy_ into a: broadcastable (mostly), overlapping a, another pool tensor, or a number
local function copy_source(g, a)
  return g:weighted {
    { 5, function() return g:fresh(g:broadcastable(a.shape), g:chance(0.8) and a.dtype or g:dtype()) end },
    { 2, function() return (g:tensor() or a).ref end },
    { 1, function() return a.ndim >= 2 and fmt("%s:transpose(1, 2)", a.ref) or a.ref end },
    { 1, function() return a.ref end },
    { 2, function() return g:scalar() end },
  }()
end

local inplace = {
  fill_ = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s:fill_(%s)", a.ref, g:scalar()), { a.k }
  end,
  copy_ = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("%s:copy_(%s)", a.ref, copy_source(g, a)), { a.k }
  end,
  index_set = function(g)
    local a = g:tensor()
    if not a then return nil end
    local n = a.shape[1] or 1
    local i = g:chance(0.85) and g:int(1, math.max(n, 1)) or g:pick { 0, n + 1, -n - 1, math.maxinteger, -1 }
    local value = g:weighted {
      { 5, g:scalar() },
      { 3, g:fresh(g:broadcastable({ table.unpack(a.shape, 2) }), g:chance(0.8) and a.dtype or g:dtype()) },
      { 0.5, "'x'" },
    }
    return fmt("%s[%s] = %s", a.ref, literal(i), value), { a.k }
  end,
  view_write = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 end)
    if not a then return nil end
    local size = a.shape[1]
    local start = g:int(1, size + 1)
    local view = g:pick { fmt("narrow(1, %d, %d)", start, g:int(0, size - start + 1)), "transpose(1, -1)",
      fmt("select(1, %d)", g:int(1, math.max(size, 1))), "view(-1)", "expand(2, table.unpack(%s.shape))" }
    view = fmt(view, a.ref)
    local op = g:chance(0.5) and fmt("fill_(%s)", g:scalar()) or fmt("copy_(%s)", g:number())
    return fmt("%s:%s:%s", a.ref, view, op), { a.k }
  end,
  -- the in-place ops: x <- f(x, ...), any dtype (a result that does not fit x must fail, x unchanged)
  arith_ = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "add_", "sub_", "mul_", "div_", "atan2_" }
    return fmt("%s:%s(%s)", a.ref, op, copy_source(g, a)), { a.k }
  end,
  unary_ = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "neg_", "abs_", "relu_", "exp_", "log_", "sqrt_", "tanh_", "sigmoid_", "gelu_",
      "silu_", "sin_", "cos_", "clamp_" }
    if op == "clamp_" then
      return fmt("%s:clamp_(%s, %s)", a.ref, g:chance(0.7) and g:number() or "nil",
        g:chance(0.7) and g:number() or "nil"), { a.k }
    end
    return fmt("%s:%s()", a.ref, op), { a.k }
  end,
  rows_ = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "softmax_", "log_softmax_", "layer_norm_" }
    if op ~= "layer_norm_" then return fmt("%s:%s(%s)", a.ref, op, g:dim(a.ndim)), { a.k } end
    local d = a.shape[a.ndim] or 1
    local param = function()
      return g:chance(0.3) and "nil" or g:fresh({ g:chance(0.9) and d or d + 1 }, g:chance(0.9) and a.dtype or g:dtype())
    end
    return fmt("%s:layer_norm_(%s, %s)", a.ref, param(), param()), { a.k }
  end,
  matmul_ = function(g)
    local a = g:tensor(function(i) return i.ndim >= 1 and i.numel <= 20000 end)
    if not a then return nil end
    local n = a.shape[a.ndim]
    local shape = g:weighted { { 6, { n, n } }, { 1, { n, n + 1 } }, { 1, { n + 1, n + 1 } }, { 0.5, { n } } }
    local w = g:fresh(shape, g:chance(0.9) and a.dtype or g:dtype(), g:chance(0.1))
    if g:chance(0.3) and #shape == 2 then w = w .. ":transpose(1, 2)" end
    return fmt("%s:matmul_(%s)", a.ref, w), { a.k }
  end,
}

-- ---- optimizers (kept in O[1..pool]) ------------------------------------------------------------------------
local function an_optimizer(g)
  local found = {}
  for k = 1, g.pool do
    if type(g.env.O[k]) == "table" then found[#found + 1] = k end
  end
  if #found == 0 then return nil end
  return g:pick(found)
end

--- the pool slots holding the parameters of O[k]
local function param_slots(g, k)
  local slots, o = {}, g.env.O[k]
  for s = 1, g.pool do
    local t = g.env.V[s]
    for _, group in ipairs(o.param_groups or {}) do
      for _, p in ipairs(group.params or {}) do
        if rawequal(p, t) then slots[#slots + 1] = s end
      end
    end
  end
  return slots
end

local function optimizer_options(g, name)
  local parts = {}
  local bad_left = g:chance(0.25) and 1 or 0 -- at most one bad option, in a quarter of the optimizers
  local function maybe(key, good, bad)
    if g:chance(0.5) or (key == "lr" and name == "SGD") then
      local wrong = bad_left > 0 and g:chance(0.4)
      if wrong then bad_left = bad_left - 1 end
      parts[#parts + 1] = key .. " = " .. literal(wrong and g:pick(bad) or good)
    end
  end
  local bad_numbers = { -1.0, 0 / 0, math.huge, -0.0, 1e308 }
  maybe("lr", g:pick { 0.1, 0.01, 1e-3, 0.0 }, bad_numbers)
  maybe("weight_decay", g:pick { 0.0, 0.01 }, bad_numbers)
  if name == "SGD" then
    maybe("momentum", g:pick { 0.0, 0.9 }, bad_numbers)
    maybe("dampening", g:pick { 0.0, 0.1 }, { "x", 0 / 0 })
    maybe("nesterov", g:chance(0.5), { 1, "yes" })
  else
    maybe("eps", g:pick { 1e-8, 1e-3 }, bad_numbers)
    maybe("betas", { 0.9, 0.999 }, { { 1.0, 0.5 }, { 0.5 }, { -0.1, 0.9 }, { 0 / 0, 0.9 }, "x" })
    maybe("amsgrad", false, { true })
    maybe("fused", g:chance(0.7), { 1, "yes" })
    maybe("master_weights", g:chance(0.7), { 0, "no" })
  end
  if g:chance(0.03) then parts[#parts + 1] = "learning_rate = 0.1" end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local optim = {
  make = function(g)
    local name = g:pick { "SGD", "Adam", "AdamW" }
    local params, fresh = {}, {}
    local used = {}
    for _ = 1, g:int(1, 3) do
      local p = g:chance(0.8) and g:tensor(function(i) return i.is_leaf and i.requires_grad end)
          or g:chance(0.2) and g:tensor()
      if p and used[p.k] and g:chance(0.9) then p = nil end
      if p then
        used[p.k] = true
        params[#params + 1] = p.ref
      else -- a new leaf in the pool, so that the pool holds the parameters a failed step must leave alone
        local k = g:int(1, g.pool)
        while used[k] do k = k % g.pool + 1 end
        used[k] = true
        local slot = "V[" .. k .. "]"
        fresh[#fresh + 1] = fmt("%s = %s; ", slot, g:fresh(g:shape(64), g:float_dtype(), true))
        params[#params + 1] = slot
      end
    end
    local list = "{" .. table.concat(params, ", ") .. "}"
    if g:chance(0.15) then list = fmt("{{params = %s, lr = %s}}", list, g:number()) end
    if g:chance(0.03) then list = g:pick { "{}", "{3}", "nil", "V" } end
    return fmt("%sO[%d] = tl.optim.%s(%s, %s)", table.concat(fresh), g:int(1, g.pool), name, list,
      optimizer_options(g, name))
  end,
  grads_for_step = function(g) -- gives the parameters of an optimizer gradients of the right shape
    local k = an_optimizer(g)
    if not k then return nil end
    return fmt("for _, group in ipairs(O[%d].param_groups) do for _, p in ipairs(group.params) do " ..
      "p.grad = tl.randn(p.shape, {dtype = p.dtype}) end end", k)
  end,
  step = function(g)
    local k = an_optimizer(g)
    if not k then return nil end
    return fmt("O[%d]:step()", k), param_slots(g, k)
  end,
  step_closure = function(g)
    local k = an_optimizer(g)
    if not k then return nil end
    return fmt("O[%d]:step(function() error('closure raised on purpose') end)", k), param_slots(g, k)
  end,
  -- tl._adam_step_multi over 1 to 4 pool tensors: grads, moments and masters mostly right, at
  -- times of a wrong shape or dtype, shared, or a list too short; a failure leaves them unchanged
  adam_step_multi = function(g)
    local lists, slots = { {}, {}, {}, {}, {} }, {}
    for i = 1, g:int(1, 4) do
      local a = g:chance(0.9) and g:tensor(function(info) return info.floating end) or g:tensor()
      if not a then return nil end
      slots[#slots + 1] = a.k
      local moment = a.dtype == "float64" and "float64" or "float32"
      local function like(dtype) return g:fresh(g:chance(0.95) and a.shape or g:shape(64), dtype) end
      lists[1][i] = a.ref
      lists[2][i] = g:chance(0.1) and (g:tensor() or a).ref or like(a.dtype)
      lists[3][i] = g:chance(0.05) and a.ref or like(g:chance(0.95) and moment or g:float_dtype())
      lists[4][i] = like(g:chance(0.95) and moment or g:float_dtype())
      local half = a.dtype == "bfloat16" or a.dtype == "float16"
      lists[5][i] = g:chance(0.05) and like(g:float_dtype())
          or (half and g:chance(0.7) or g:chance(0.03)) and fmt("%s:to('float32')", a.ref) or "false"
    end
    if g:chance(0.05) then lists[g:int(2, 4)][#slots] = nil end
    local t = {}
    for j, list in ipairs(lists) do t[j] = "{" .. table.concat(list, ", ") .. "}" end
    if g:chance(0.3) then t[5] = "nil" end
    return fmt("tl._adam_step_multi(%s, %s, %s, %s, %s, %s, 0.9, 0.999, 1e-8, %s, %s, %s)", t[1], t[2], t[3], t[4],
      t[5], literal(g:chance(0.95) and g:pick { 0.01, 1e-3 } or -1.0), literal(g:pick { 0.0, 0.01 }),
      literal(g:chance(0.97) and g:pick { 1, 2, 7 } or 0), literal(g:chance(0.5))), slots
  end,
  zero_grad = function(g)
    local k = an_optimizer(g)
    if not k then return nil end
    return fmt("O[%d]:zero_grad()", k)
  end,
  state_dict = function(g)
    local k, j = an_optimizer(g), an_optimizer(g)
    if not k then return nil end
    return fmt("O[%d]:load_state_dict(O[%d]:state_dict())", k, j)
  end,
  scheduler = function(g)
    local k = an_optimizer(g)
    if not k then return nil end
    return g:pick {
      fmt("do local s = tl.optim.StepLR(O[%d], {step_size = %s}); s:step(); s:step() end", k, g:number()),
      fmt("do local s = tl.optim.CosineAnnealingLR(O[%d], {T_max = %s}); for _ = 1, 3 do s:step() end end", k,
        g:number()),
      fmt("do local s = tl.optim.WarmupCosineLR(O[%d], {warmup_steps = %s, total_steps = %s}); s:step() end", k,
        g:number(), g:number()),
    }
  end,
  clip_grad_norm = function(g)
    local a = g:tensor()
    if not a then return nil end
    local b = g:tensor() or a
    return fmt("local _ = tl.optim.clip_grad_norm({%s, %s}, %s)", a.ref, b.ref, g:number()), { a.k, b.k }
  end,
  -- tl._clip_grad_norm_multi over 1 to 4 pool tensors (mostly floating; at times of another dtype,
  -- strided or one tensor twice), max_norm and norm_type mostly valid: a failure leaves them unchanged
  clip_grad_norm_multi = function(g)
    local refs, slots = {}, {}
    for i = 1, g:int(1, 4) do
      local a = g:chance(0.9) and g:tensor(function(info) return info.floating end) or g:tensor()
      if not a then return nil end
      refs[i], slots[#slots + 1] = a.ref, a.k
    end
    return fmt("local _ = tl._clip_grad_norm_multi({%s}, %s, %s)", table.concat(refs, ", "),
      g:chance(0.9) and literal(g:pick { 0.5, 1.0, 1e-3, 1e6 }) or g:number(),
      g:chance(0.9) and literal(g:pick { 2, 1, 3, math.huge }) or g:number()), slots
  end,
}

-- ---- files: checkpoints, IDX, odd paths (TMP is a fresh folder of the run) ---------------------------------
local NAMES = { "w", "layer.0.weight", "", " ", "a\"b", "é", "x\0y", string.rep("n", 300), "__metadata__", "{", "1" }

local function some_tensors(g)
  local parts, used = {}, {}
  for _ = 1, g:int(1, 3) do
    local a = g:tensor()
    local name = g:chance(0.7) and ("t" .. g:int(1, 5)) or g:pick(NAMES)
    if a and not used[name] then
      used[name] = true
      parts[#parts + 1] = fmt("[%s] = %s", literal(name), a.ref)
    end
  end
  if #parts == 0 then return nil end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local files = {
  save = function(g)
    local tensors = some_tensors(g)
    if not tensors then return nil end
    local meta = g:weighted { { 3, "" }, { 1, ", {step = 3, note = 'x'}" }, { 0.5, ", {bad = {}}" }, { 0.3, ", 5" } }
    return fmt("tl.save(TMP .. %s, %s%s)", literal("/f" .. g:int(1, 3) .. ".safetensors"), tensors, meta)
  end,
  load = function(g)
    return fmt("%s = H:first(tl.load(TMP .. %s))", g:target(), literal("/f" .. g:int(1, 3) .. ".safetensors"))
  end,
  load_corrupt = function(g)
    local src = "/f" .. g:int(1, 3) .. ".safetensors"
    local edit = g:pick {
      fmt("H:truncate(TMP .. %s, TMP .. '/bad', %d)", literal(src), g:int(0, 200)),
      fmt("H:poke(TMP .. %s, TMP .. '/bad', %d, %d)", literal(src), g:int(0, 120), g:int(0, 255)),
      fmt("H:write(TMP .. '/bad', %s)", literal(g:pick {
        "", "\8\0\0\0\0\0\0\0{}      ", "\255\255\255\255\255\255\255\127{}", "\2\0\0\0\0\0\0\0{}",
        '\64\0\0\0\0\0\0\0{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}}',
        '\60\0\0\0\0\0\0\0{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,18446744073709551615]}}',
      })),
    }
    return fmt("%s; %s = H:first(tl.load(TMP .. '/bad'))", edit, g:target())
  end,
  read_idx = function(g)
    local bytes = g:pick {
      "", "\0\0\8\1\0\0\0\3\1\2\3", "\0\0\8\2\0\0\0\2\0\0\0\2\1\2\3\4", "\0\0\8\1\255\255\255\255",
      "\0\0\13\1\0\0\0\1\0\0\0\0", "\0\0\8\17\0\0\0\1", "\0\0\8\0", "\0\0\8\2\127\255\255\255\127\255\255\255",
      "\1\0\8\1\0\0\0\1\7",
    }
    return fmt("H:write(TMP .. '/x.idx', %s); %s = tl.data.read_idx(TMP .. '/x.idx')", literal(bytes), g:target())
  end,
  odd_paths = function(g)
    local a = g:tensor()
    return g:pick {
      "tl.load(TMP)", "tl.load(TMP .. '/missing.safetensors')", "tl.load('')", "tl.load(3)",
      fmt("tl.save(TMP .. '/no/such/dir/x.safetensors', {a = %s})", a and a.ref or "tl.zeros(1)"),
      fmt("tl.save(TMP, {a = %s})", a and a.ref or "tl.zeros(1)"), "tl.save('', {})", "tl.data.read_idx(TMP)",
      "tl.data.read_idx(TMP .. '/missing.idx')",
    }
  end,
  fifo = function(g)
    return g:pick { "H:mkfifo(TMP .. '/fifo'); tl.load(TMP .. '/fifo')",
      "H:mkfifo(TMP .. '/fifo'); tl.data.read_idx(TMP .. '/fifo')" }
  end,
}

-- ---- lifetime and runtime ----------------------------------------------------------------------------------
local lifetime = {
  collect = function() return "collectgarbage()" end,
  release = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("tl.release(%s)", a.ref)
  end,
  close = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("do local t <close> = %s end", a.ref)
  end,
  drop = function(g) return fmt("%s = nil", g:target()) end,
  use_released = function(g)
    local released = {}
    for k = 1, g.pool do
      local t = g.env.V[k]
      if t and g.tl.is_tensor(t) and g.tl.is_released(t) then released[#released + 1] = k end
    end
    if #released == 0 then return nil end
    local k = g:pick(released)
    return fmt("%s = V[%d]%s", g:target(), k, g:pick { " + 1", ":sum()", ":view(-1)", ".grad", ":clone()", ":item()" })
  end,
  trace = function(g)
    local a = g:tensor()
    if not a then return nil end
    return fmt("local _ = tl.trace(function() return %s + 1 end)", a.ref)
  end,
  seed = function(g) return fmt("tl.manual_seed(%s)", literal(g:pick(Gen.EXTREME_INTS))) end,
  threads = function(g) return fmt("tl.set_num_threads(%s)", literal(g:pick { 1, 2, 0, -1, 1.5, math.mininteger })) end,
}

return {
  { name = "inplace", weight = 8, variants = inplace },
  { name = "optim", weight = 4, variants = optim, weights = { make = 3, grads_for_step = 3, step = 4 } },
  { name = "files", weight = 2, variants = files },
  { name = "lifetime", weight = 3, variants = lifetime },
}
