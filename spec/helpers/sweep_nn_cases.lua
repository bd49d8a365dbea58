-- The GEMM, nn and optimizer cases of the kernel sweep (see helpers/sweep_cases.lua for the
-- shape of a case): forward and every gradient of each op returned as results, each against
-- Lua loops (helpers/reference.lua, helpers/kernel_reference.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local K = require("helpers.kernel_reference")
local F = require("tlua.nn.functional")

local cases = {}

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

cases.matmul = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 5) } end,
  run = function(a, b) return { tl.matmul(a, b) } end,
  reference = function(_, a, b) return { ref.matmul(a, b) } end,
}
-- x:matmul_(w) in place: x row-major (one folded matrix) and column-major (y's matrices
-- transposed), against w and w^T
cases.matmul_inplace = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 4), G.normal(2, 4, 3) } end,
  run = function(x, w, y)
    return { x:clone():matmul_(w), y:clone():transpose(2, 3):matmul_(w:transpose(1, 2)) }
  end,
  reference = function(_, x, w, y)
    local yt = {}
    for b = 1, #y do yt[b] = ref.matmul(transpose(y[b]), transpose(w)) end
    return { ref.matmul(x, w), yt }
  end,
}
-- y = a @ b, a [2, 3, 4] batched against b [4, 5]: ga = g b^T, gb = sum over the batch a^T g
cases.matmul_backward = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(4, 5), G.normal(2, 3, 5) } end,
  run = differentiated(tl.matmul),
  reference = function(_, a, b, g)
    local ga, gb = {}, nil
    for n = 1, #a do
      ga[n] = ref.matmul(g[n], transpose(b))
      gb = add_into(gb, ref.matmul(transpose(a[n]), g[n]))
    end
    return { ref.matmul(a, b), ga, gb }
  end,
}
-- y = x w^T + bias: gx = g w, gw = g^T x, gbias = column sums of g
cases.linear = {
  inputs = function(G) return { G.normal(4, 3), G.normal(5, 3), G.normal(5), G.normal(4, 5) } end,
  run = differentiated(tl.linear),
  reference = function(_, x, w, b, g)
    local y = ref.broadcast_map(function(v, bias) return v + bias end, ref.matmul(x, transpose(w)), b)
    return { y, ref.matmul(g, w), ref.matmul(transpose(g), x), column_sums(g) }
  end,
}
-- y = a b^T: ga = g b, gb = g^T a
cases.outer = {
  inputs = function(G) return { G.normal(3), G.normal(4), G.normal(3, 4) } end,
  run = differentiated(tl.outer),
  reference = function(_, a, b, g)
    local y = ref.build({ #a, #b }, function(i, j) return a[i] * b[j] end)
    return { y, ref.matmul(g, b), ref.matmul(transpose(g), a) }
  end,
}
-- grouped products: C_i = A_i B_i (the second A read transposed), gA_i = g_i B_i^T,
-- gB_i = A_i^T g_i
cases.grouped_matmul = {
  inputs = function(G)
    return { G.normal(3, 4), G.normal(4, 2), G.normal(5, 2), G.normal(5, 3), G.normal(3, 2), G.normal(2, 3) }
  end,
  run = function(a1, b1, a2t, b2, g1, g2)
    a1, b1, a2t, b2 = leaves(a1, b1, a2t, b2)
    local c = tl.grouped_matmul({ a1, a2t:transpose(1, 2) }, { b1, b2 })
    local loss = (c[1] * g1):sum() + (c[2] * g2):sum() -- one pass: both share one node
    loss:backward()
    return { c[1]:detach(), c[2]:detach(), a1.grad, b1.grad, a2t.grad, b2.grad }
  end,
  reference = function(_, a1, b1, a2t, b2, g1, g2)
    local a2 = transpose(a2t)
    return { ref.matmul(a1, b1), ref.matmul(a2, b2), ref.matmul(g1, transpose(b1)),
             ref.matmul(transpose(a1), g1), transpose(ref.matmul(g2, transpose(b2))),
             ref.matmul(transpose(a2), g2) }
  end,
}
-- rows 1-2 times B[1], none for B[2], rows 3-5 times B[3], row 6 zeros
cases.grouped_mm = {
  inputs = function(G) return { G.normal(6, 3), G.normal(3, 3, 2), G.normal(6, 2) } end,
  run = function(a, b, g)
    a, b = leaves(a, b)
    local y = tl.grouped_mm(a, b, { 2, 2, 5 })
    y:backward(g)
    return { y:detach(), a.grad, b.grad }
  end,
  reference = function(_, a, b, g)
    local ends, y, ga, gb = { 2, 2, 5 }, {}, {}, {}
    for e = 1, 3 do
      gb[e] = ref.build({ 3, 2 }, function() return 0.0 end)
    end
    for r = 1, 6 do
      local e = r <= 2 and 1 or (r <= 5 and 3 or nil)
      if e then
        y[r] = ref.matmul({ a[r] }, b[e])[1]
        ga[r] = ref.matmul({ g[r] }, transpose(b[e]))[1]
        gb[e] = add_into(gb[e], ref.matmul(transpose({ a[r] }), { g[r] }))
      else
        y[r], ga[r] = { 0.0, 0.0 }, { 0.0, 0.0, 0.0 }
      end
    end
    return { y, ga, gb }
  end,
}

-- block-sparse linear, blocks of 32 (the CUDA tensor-core kernel for 16-bit dtypes) on the block
-- grid {{1, 0}, {1, 1}}: y = x W^T + b, gx = g W, each block's gradient its part of g^T x, gb
local block_mask = { { true, false }, { true, true } }
local block_coords = { { 1, 1 }, { 2, 1 }, { 2, 2 } } -- (row, col) of each block, row-major
cases.block_sparse_linear = {
  inputs = function(G) return { G.normal(3, 64), G.normal(3, 32, 32), G.normal(64), G.normal(3, 64) } end,
  run = function(x, blocks, bias, g)
    x, blocks, bias = leaves(x, blocks, bias)
    local layout = tl.nn.block_layout(tl.tensor(block_mask, { device = x.device }))
    local y = tl.block_sparse_linear(x, blocks, layout, bias)
    y:backward(g)
    return { y:detach(), x.grad, blocks.grad, bias.grad }
  end,
  reference = function(_, x, blocks, bias, g)
    local w = ref.build({ 64, 64 }, function() return 0.0 end)
    for e, rc in ipairs(block_coords) do
      for o = 1, 32 do
        for c = 1, 32 do w[(rc[1] - 1) * 32 + o][(rc[2] - 1) * 32 + c] = blocks[e][o][c] end
      end
    end
    local y = ref.matmul(x, transpose(w))
    for i = 1, #y do
      for j = 1, 64 do y[i][j] = y[i][j] + bias[j] end
    end
    local gw = ref.matmul(transpose(g), x)
    local gblocks = {}
    for e, rc in ipairs(block_coords) do
      gblocks[e] = ref.build({ 32, 32 }, function(o, c) return gw[(rc[1] - 1) * 32 + o][(rc[2] - 1) * 32 + c] end)
    end
    return { y, ref.matmul(g, w), gblocks, column_sums(g) }
  end,
}

-- attention of one leading dim, T = 3 queries, S = 5 keys, D = 4, twice on the same inputs:
-- causal with scale 0.5 and plain (1 / sqrt(D)); both outputs' gradient g, one backward
local function attention_ref(q, k, v, g, causal, scale)
  local y, gq, gk, gv = {}, {}, {}, {}
  for b = 1, #q do y[b], gq[b], gk[b], gv[b] = K.attention_head(q[b], k[b], v[b], g[b], scale, causal) end
  return y, gq, gk, gv
end
cases.scaled_dot_product_attention = {
  inputs = function(G) return { G.normal(2, 3, 4), G.normal(2, 5, 4), G.normal(2, 5, 4), G.normal(2, 3, 4) } end,
  run = function(q, k, v, g)
    q, k, v = leaves(q, k, v)
    local y1 = tl.scaled_dot_product_attention(q, k, v, { causal = true, scale = 0.5 })
    local y2 = tl.scaled_dot_product_attention(q, k, v)
    local loss = (y1 * g):sum() + (y2 * g):sum()
    loss:backward()
    return { y1:detach(), y2:detach(), q.grad, k.grad, v.grad }
  end,
  reference = function(_, q, k, v, g)
    local y1, gq1, gk1, gv1 = attention_ref(q, k, v, g, true, 0.5)
    local y2, gq2, gk2, gv2 = attention_ref(q, k, v, g, false, 0.5)
    return { y1, y2, add_into(gq1, gq2), add_into(gk1, gk2), add_into(gv1, gv2) }
  end,
}

-- conv2d by im2col and GEMMs (cuDNN off: the CPU's path, and CUDA's when cuDNN is disabled)
local function conv2d_run(x, w, b, g)
  x, w, b = leaves(x, w, b)
  local y = tl.conv2d(x, w, b, { stride = 2, padding = 1 })
  y:backward(g)
  return { y:detach(), x.grad, w.grad, b.grad }
end
cases.conv2d = {
  inputs = function(G) return { G.normal(2, 3, 6, 6), G.normal(4, 3, 3, 3), G.normal(4), G.normal(2, 4, 3, 3) } end,
  run = function(...)
    tl.cuda.set_cudnn_enabled(false)
    local ok, out = pcall(conv2d_run, ...)
    tl.cuda.set_cudnn_enabled(true)
    if not ok then error(out, 0) end
    return out
  end,
  reference = function(_, x, w, b, g) return { K.conv2d(x, w, b, g, 2, 1) } end,
}
-- depthwise (groups = channels, two outputs a channel, dilation 2): the CPU's direct loops
cases.conv2d_depthwise = {
  inputs = function(G) return { G.normal(2, 3, 7, 6), G.normal(6, 1, 3, 2), G.normal(6), G.normal(2, 6, 3, 3) } end,
  run = function(x, w, b, g)
    x, w, b = leaves(x, w, b)
    local y = tl.conv2d(x, w, b, { stride = 2, padding = 1, dilation = 2, groups = 3 })
    y:backward(g)
    return { y:detach(), x.grad, w.grad, b.grad }
  end,
  reference = function(_, x, w, b, g) return { K.conv2d(x, w, b, g, 2, 1, 3, 2) } end,
}
-- the same on cuDNN (CUDA's default)
cases.conv2d_dnn = {
  inputs = cases.conv2d.inputs,
  run = conv2d_run,
  reference = cases.conv2d.reference,
}
cases.max_pool2d = {
  inputs = function(G) return { G.distinct(2, 3, 6, 6), G.normal(2, 3, 3, 3) } end,
  run = function(x, g)
    x = leaves(x)
    local y = tl.max_pool2d(x, 2, { stride = 2 })
    y:backward(g)
    return { y:detach(), x.grad }
  end,
  reference = function(_, x, g) return { K.max_pool2d(x, g, 2, 2) } end,
}
-- pooling and interpolate: forward and backward kernels of each op (K.max_pool, K.avg_pool, K.interpolate)
local function axis(out, kernel, stride, pad)
  return { out = out, kernel = kernel, stride = stride, pad = pad }
end
cases.adaptive_max_pool2d = {
  inputs = function(G) return { G.distinct(2, 3, 7, 5), G.normal(2, 3, 3, 4) } end,
  run = differentiated(function(x) return tl.adaptive_max_pool2d(x, { 3, 4 }) end),
  reference = function(_, x, g)
    return { K.max_pool(x, g, { out = 3, adaptive = true }, { out = 4, adaptive = true }) }
  end,
}
-- with padding counted and ceil_mode, then without the padding and with a divisor
cases.avg_pool2d = {
  inputs = function(G) return { G.normal(2, 3, 6, 7), G.normal(2, 3, 4, 4), G.normal(2, 3, 7, 4) } end,
  run = function(x, g1, g2)
    x = leaves(x)
    local y1 = tl.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true })
    y1:backward(g1)
    local gx1 = x.grad
    x = leaves(x)
    local y2 = tl.avg_pool2d(x, { 2, 3 }, { stride = { 1, 2 }, padding = { 1, 1 }, count_include_pad = false })
    y2:backward(g2)
    local x3 = leaves(x)
    local y3 = tl.avg_pool2d(x3, 2, { divisor_override = 3 })
    y3:backward(y3:detach())
    return { y1:detach(), gx1, y2:detach(), x.grad, y3:detach(), x3.grad }
  end,
  reference = function(_, x, g1, g2)
    local y1, gx1 = K.avg_pool(x, g1, axis(4, 3, 2, 1), axis(4, 3, 2, 1), true)
    local y2, gx2 = K.avg_pool(x, g2, axis(7, 2, 1, 1), axis(4, 3, 2, 1), false)
    local y3 = K.avg_pool(x, g2, axis(3, 2, 2, 0), axis(3, 2, 2, 0), true, 3)
    local _, gx3 = K.avg_pool(x, y3, axis(3, 2, 2, 0), axis(3, 2, 2, 0), true, 3)
    return { y1, gx1, y2, gx2, y3, gx3 }
  end,
}
cases.adaptive_avg_pool2d = {
  inputs = function(G) return { G.normal(2, 3, 7, 5), G.normal(2, 3, 3, 7) } end,
  run = differentiated(function(x) return tl.adaptive_avg_pool2d(x, { 3, 7 }) end),
  reference = function(_, x, g)
    return { K.avg_pool(x, g, { out = 3, adaptive = true }, { out = 7, adaptive = true }) }
  end,
}
cases.upsample_nearest2d = {
  inputs = function(G) return { G.normal(2, 3, 3, 4), G.normal(2, 3, 5, 10) } end,
  run = differentiated(function(x) return F.interpolate(x, { size = { 5, 10 } }) end),
  reference = function(_, x, g) return { K.interpolate(x, g, 5, 10, "nearest") } end,
}
cases.upsample_bilinear2d = {
  inputs = function(G) return { G.normal(2, 3, 4, 5), G.normal(2, 3, 7, 3), G.normal(2, 3, 7, 3) } end,
  run = function(x, g1, g2)
    local out = differentiated(function(t) return F.interpolate(t, { size = { 7, 3 }, mode = "bilinear" }) end)(x, g1)
    local aligned = differentiated(function(t)
      return F.interpolate(t, { size = { 7, 3 }, mode = "bilinear", align_corners = true })
    end)(x, g2)
    return { out[1], out[2], aligned[1], aligned[2] }
  end,
  reference = function(_, x, g1, g2)
    local y1, gx1 = K.interpolate(x, g1, 7, 3, "bilinear", false)
    local y2, gx2 = K.interpolate(x, g2, 7, 3, "bilinear", true)
    return { y1, gx1, y2, gx2 }
  end,
}
local EMBEDDING_INDEX = { { 1, 7, 3 }, { 3, 3, 2 } }
cases.embedding = {
  inputs = function(G) return { G.normal(7, 4), G.normal(2, 3, 4) } end,
  run = function(w, g)
    w = leaves(w)
    local y = tl.embedding(tl.tensor(EMBEDDING_INDEX, { device = w.device }), w)
    y:backward(g)
    return { y:detach(), w.grad }
  end,
  reference = function(_, w, g) return { K.embedding(EMBEDDING_INDEX, w, g) } end,
}
-- index_check (int32, int64): indices in range pass (the gather they guard is right) and the one
-- out of range is reported with its value and 1-based position (on CUDA by the synchronization)
local CHECKED_INDEX = { 3, 1, 2, 5, 4 }
cases.index_check = {
  inputs = function(_, dtype) return { tl.tensor(CHECKED_INDEX, { dtype = dtype }) } end,
  run = function(idx)
    local w = tl.arange(1, 6, { dtype = "float32", device = idx.device }):view(5, 1)
    local y = tl.embedding(idx, w)
    local ok, err = pcall(function()
      local _ = tl.embedding(idx + 1, w) -- 6 at position 4
      if idx.device ~= "cpu" then tl.cuda.synchronize() end
    end)
    assert(not ok, "index_check: the index out of range was not reported")
    local value, position = tostring(err):match("holds (%-?%d+) at position (%d+)")
    return { y, tl.tensor({ tonumber(value), tonumber(position) }) }
  end,
  reference = function(_, idx)
    local rows = {}
    for i, v in ipairs(idx) do rows[i] = { v } end
    return { rows, { exact = true, value = tl.tensor({ 6, 4 }) } }
  end,
}
local TARGET, SMOOTHING = { 1, 4, 2, 2, 3 }, 0.1
cases.cross_entropy = {
  inputs = function(G) return { G.normal(5, 4) } end,
  run = function(x)
    x = leaves(x)
    local loss = tl.cross_entropy(x, tl.tensor(TARGET, { device = x.device }), { label_smoothing = SMOOTHING })
    loss:backward()
    return { loss:detach(), x.grad }
  end,
  reference = function(_, x) return { K.cross_entropy(x, TARGET, SMOOTHING) } end,
}
cases.layer_norm = {
  inputs = function(G) return { G.normal(3, 6), G.normal(6), G.normal(6), G.normal(3, 6) } end,
  run = function(x, w, b, g)
    x, w, b = leaves(x, w, b)
    local y = tl.layer_norm(x, w, b, 1e-5)
    y:backward(g)
    return { y:detach(), x.grad, w.grad, b.grad }
  end,
  reference = function(_, x, w, b, g) return { K.layer_norm(x, w, b, g, 1e-5) } end,
}

-- batch_norm of [N, C, *spatial]: a training step (the running statistics updated) and an eval
-- step on them, each with its output and the gradients of input, weight and bias; shapes pick
-- the CUDA paths (sweep_variant_cases.lua)
local function batch_norm_case(shape)
  local C = shape[2]
  local N, S = shape[1], 1
  for d = 3, #shape do S = S * shape[d] end
  return {
    inputs = function(G)
      return { G.normal(table.unpack(shape)), G.normal(C), G.normal(C), G.normal(table.unpack(shape)),
        G.normal(C), G.uniform(0.5, 2, C) }
    end,
    run = function(x, w, b, g, rm, rv)
      local out = {}
      rm, rv = rm:clone(), rv:clone()
      for _, training in ipairs({ true, false }) do
        local xl, wl, bl = leaves(x, w, b)
        local y = tl.batch_norm(xl, rm, rv, { weight = wl, bias = bl, training = training, momentum = 0.25 })
        y:backward(g)
        for _, v in ipairs({ y:detach(), xl.grad, wl.grad, bl.grad }) do out[#out + 1] = v end
        if training then out[#out + 1], out[#out + 2] = rm:clone(), rv:clone() end
      end
      return out
    end,
    reference = function(_, x, w, b, g, rm, rv)
      local out = {}
      local fx, fg = ref.flatten(x), ref.flatten(g)
      for _, training in ipairs({ true, false }) do
        local y, gx, gw, gb = K.batch_norm(fx, w, b, fg, rm, rv, N, C, S,
          { training = training, momentum = 0.25, eps = 1e-5 })
        for _, v in ipairs({ ref.unflatten(y, shape), ref.unflatten(gx, shape), gw, gb }) do out[#out + 1] = v end
        if training then out[#out + 1], out[#out + 2] = { table.unpack(rm) }, { table.unpack(rv) } end
      end
      return out
    end,
  }
end
cases.batch_norm = batch_norm_case({ 3, 4, 2, 3 })

-- three steps of SGD (momentum, nesterov, weight decay), Adam (L2 decay) and AdamW, one
-- adam_step per parameter (fused = false, state in the parameter's dtype)
local OPTIMIZERS = {
  { "SGD", { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }, K.sgd_step,
    { lr = 0.1, momentum = 0.9, dampening = 0, nesterov = true, weight_decay = 0.01 } },
  { "Adam", { lr = 0.01, weight_decay = 0.01, fused = false, master_weights = false }, K.adam_step,
    { lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01 } },
  { "AdamW", { lr = 0.01, fused = false, master_weights = false }, K.adam_step,
    { lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01, decoupled = true } },
}
cases.optim = {
  inputs = function(G) return { G.normal(3, 4), G.normal(3, 4) } end,
  run = function(p, g)
    local out = {}
    for k, o in ipairs(OPTIMIZERS) do
      local param = p:clone():requires_grad_()
      local opt = tl.optim[o[1]]({ param }, o[2])
      for _ = 1, 3 do
        param.grad = g
        opt:step()
      end
      out[k] = param:detach()
    end
    return out
  end,
  reference = function(_, p, g)
    local fg = ref.flatten(g)
    local out = {}
    for k, o in ipairs(OPTIMIZERS) do
      local fp, shape = ref.flatten(p)
      local state = {}
      for _ = 1, 3 do o[3](fp, fg, state, o[4]) end
      out[k] = ref.unflatten(fp, shape)
    end
    return out
  end,
}

-- three fused steps (one adam_step_multi for both parameters) of Adam (L2 decay) and AdamW
-- (float32 masters for bfloat16/float16 parameters, which are the masters rounded)
cases.adam_step_multi = {
  inputs = function(G) return { G.normal(3, 4), G.normal(3, 4), G.normal(5), G.normal(5) } end,
  run = function(p1, g1, p2, g2)
    local out = {}
    for k, o in ipairs({ OPTIMIZERS[2], OPTIMIZERS[3] }) do
      local a, b = p1:clone():requires_grad_(), p2:clone():requires_grad_()
      local opt = tl.optim[o[1]]({ a, b }, { lr = o[4].lr, weight_decay = o[4].weight_decay })
      for _ = 1, 3 do
        a.grad, b.grad = g1, g2
        opt:step()
      end
      out[2 * k - 1], out[2 * k] = a:detach(), b:detach()
    end
    return out
  end,
  reference = function(_, p1, g1, p2, g2)
    local out = {}
    for k, o in ipairs({ OPTIMIZERS[2], OPTIMIZERS[3] }) do
      for j, pg in ipairs({ { p1, g1 }, { p2, g2 } }) do
        local fp, shape = ref.flatten(pg[1])
        local fg, state = ref.flatten(pg[2]), {}
        for _ = 1, 3 do o[3](fp, fg, state, o[4]) end
        out[2 * k - 2 + j] = ref.unflatten(fp, shape)
      end
    end
    return out
  end,
}

-- clip_grad_norm_multi over two grads: the 2-norm with clipping (every grad scaled by
-- 0.5 / (total + 1e-6)), then the infinity norm of fresh copies without (the grads untouched)
local function clip_reference(lists, max_norm, p)
  local acc = 0
  for _, list in ipairs(lists) do
    for _, x in ipairs(list) do acc = p == math.huge and math.max(acc, math.abs(x)) or acc + math.abs(x) ^ p end
  end
  local total = p == math.huge and acc or acc ^ (1 / p)
  local coef = math.min(1, max_norm / (total + 1e-6))
  local scaled = {}
  for i, list in ipairs(lists) do
    scaled[i] = {}
    for j, x in ipairs(list) do scaled[i][j] = x * coef end
  end
  return total, scaled
end
cases.clip_grad_norm_multi = {
  inputs = function(G) return { G.normal(3, 4), G.normal(5) } end,
  run = function(a, b)
    local a1, b1, a2, b2 = a:clone(), b:clone(), a:clone(), b:clone()
    local t1 = tl._clip_grad_norm_multi({ a1, b1 }, 0.5, 2)
    local t2 = tl._clip_grad_norm_multi({ a2, b2 }, 1e6, math.huge)
    return { t1, a1:view(12), b1, t2, a2:view(12), b2 }
  end,
  reference = function(_, a, b)
    local lists = { (ref.flatten(a)), (ref.flatten(b)) }
    local t1, s1 = clip_reference(lists, 0.5, 2)
    local t2, s2 = clip_reference(lists, 1e6, math.huge)
    return { t1, s1[1], s1[2], t2, s2[1], s2[2] }
  end,
}

-- cumsum along each dim of a [3, 5] input and along the last dim of a transposed view: floating
-- sums in float64, integer and bool sums in Lua integers (int64, wrapping as the kernels do)
local function prefix_sums(m, dim) -- m a 2-D nested table, dim 1 or 2
  local out = {}
  for i = 1, #m do
    out[i] = {}
    for j = 1, #m[i] do
      local v = m[i][j]
      if type(v) == "boolean" then v = v and 1 or 0 end
      local prev
      if dim == 1 and i > 1 then prev = out[i - 1][j] end
      if dim == 2 and j > 1 then prev = out[i][j - 1] end
      out[i][j] = prev and prev + v or v
    end
  end
  return out
end
cases.cumsum = {
  inputs = function(G) return { G.wide(3, 5), G.wide(5, 3) } end,
  run = function(x, y) return { x:cumsum(2), x:cumsum(-2), y:transpose(1, 2):cumsum(2) } end,
  reference = function(_, x, y) return { prefix_sums(x, 2), prefix_sums(x, 1), prefix_sums(transpose(y), 2) } end,
}
-- nonzero: the 1-based coordinates of the non-zero (true) elements, row-major, of a [3, 4, 2]
-- input with many zeros and of a permuted view of it
local function nonzero_coordinates(x) -- a 3-D nested table
  local rows = {}
  for i = 1, #x do
    for j = 1, #x[i] do
      for k = 1, #x[i][j] do
        local v = x[i][j][k]
        if v ~= 0 and v ~= false then rows[#rows + 1] = { i, j, k } end
      end
    end
  end
  return rows
end
cases.nonzero = {
  inputs = function(G) return { G.ints(-1, 1, 3, 4, 2) } end,
  run = function(x) return { x:nonzero(), x:permute(3, 1, 2):nonzero() } end,
  reference = function(_, x)
    local p = ref.build({ 2, 3, 4 }, function(a, b, c) return x[b][c][a] end)
    return { nonzero_coordinates(x), nonzero_coordinates(p) }
  end,
}

-- dropout after tl.manual_seed: y = x * keep / (1 - p) and its gradient g * keep / (1 - p) (the
-- same kernel on g), then a transposed z (its mask by the view's row-major index) continuing the
-- stream; keep_e = the float32 uniform of element e (Philox4x32-10 in Lua: block counter + e // 4,
-- word e % 4, 24 bits) >= p rounded to float32
local DROPOUT_SEED, DROPOUT_P = 0x123456789ABCDEF, 0.375
local function dropout_keep(n, counter)
  local keep, threshold = {}, string.unpack("f", string.pack("f", DROPOUT_P))
  for e = 0, n - 1 do
    local w = K.philox(counter + e // 4, DROPOUT_SEED)
    keep[e + 1] = (w[e % 4 + 1] >> 8) * 2.0 ^ -24 >= threshold
  end
  return keep, counter + (n + 3) // 4
end
local function dropped(m, keep) -- m a nested [rows][cols] table, keep by row-major index
  local cols = #m[1]
  return ref.build({ #m, cols }, function(i, j)
    return keep[(i - 1) * cols + j] and m[i][j] / (1 - DROPOUT_P) or 0.0
  end)
end
cases.dropout = {
  inputs = function(G) return { G.normal(3, 7), G.normal(3, 7), G.normal(5, 3) } end,
  run = function(x, g, z)
    tl.manual_seed(DROPOUT_SEED)
    local leaf = x:detach():requires_grad_()
    local y = tl.dropout(leaf, DROPOUT_P)
    local yz = tl.dropout(z:transpose(1, 2), DROPOUT_P)
    y:backward(g)
    return { y:detach(), leaf.grad, yz }
  end,
  reference = function(_, x, g, z)
    local keep, counter = dropout_keep(21, 0)
    local keep_z = dropout_keep(15, counter)
    return { dropped(x, keep), dropped(g, keep), dropped(transpose(z), keep_z) }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
local case_of_op = {
  linear_forward = "linear", linear_backward_input = "linear", linear_backward_weight = "linear",
  linear_backward_bias = "linear", matmul_backward_input = "matmul_backward",
  grouped_matmul_backward_input = "grouped_matmul", grouped_matmul_backward_other = "grouped_matmul",
  grouped_mm_backward_input = "grouped_mm", grouped_mm_backward_weight = "grouped_mm",
  block_sparse_linear_backward_input = "block_sparse_linear",
  block_sparse_linear_backward_weight = "block_sparse_linear",
  scaled_dot_product_attention_backward = "scaled_dot_product_attention",
  matmul_backward_other = "matmul_backward", outer_forward = "outer",
  conv2d_forward = "conv2d", conv2d_backward_input = "conv2d", conv2d_backward_weight = "conv2d",
  conv2d_backward_bias = "conv2d", im2col = "conv2d", col2im = "conv2d",
  conv2d_dnn_backward_input = "conv2d_dnn", conv2d_dnn_backward_weight = "conv2d_dnn",
  conv2d_depthwise_backward_input = "conv2d_depthwise", conv2d_depthwise_backward_weight = "conv2d_depthwise",
  max_pool2d_backward = "max_pool2d", embedding_backward = "embedding",
  avg_pool2d_backward = "avg_pool2d", adaptive_avg_pool2d_backward = "adaptive_avg_pool2d",
  upsample_nearest2d_backward = "upsample_nearest2d", upsample_bilinear2d_backward = "upsample_bilinear2d",
  cross_entropy_backward = "cross_entropy", layer_norm_backward_input = "layer_norm",
  layer_norm_backward_weight = "layer_norm", batch_norm_backward_reduce = "batch_norm",
  batch_norm_backward_input = "batch_norm", sgd_step = "optim", adam_step = "optim",
  rnn_dnn_layout = "rnn_dnn", rnn_dnn_backward_data = "rnn_dnn", rnn_dnn_backward_weight = "rnn_dnn",
}

return { cases = cases, case_of_op = case_of_op, batch_norm_case = batch_norm_case }
