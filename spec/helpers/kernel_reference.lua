-- Lua references of the kernel sweep (spec/kernel_sweep_spec.lua), independent of the engine:
-- integer arithmetic with the engine's wrapping, casts, the Philox4x32-10 generator of the
-- random kernels, the softmax gradients, and conv2d, max_pool2d, embedding, cross_entropy, layer_norm, batch_norm and the
-- optimizer steps by plain loops over flat row-major arrays, in float64.
local ref = require("helpers.reference")

local M = {}

-- ---------------------------------------------------------------------------
-- Integers: int64 is Lua's own wrapping arithmetic; int32 keeps the low 32 bits.
function M.wrap32(v) return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000 end

function M.wrap(dtype, v)
  if dtype == "int32" then return M.wrap32(v) end
  return v
end

-- a ^ b as the integer kernels define it: wrapping; for b < 0 the truncated 1 / a^-b
-- (1 for a = 1, +-1 for a = -1, else 0)
function M.ipow(a, b)
  if b < 0 then
    if a == 1 then return 1 end
    if a == -1 then return (b % 2 == 1) and -1 or 1 end
    return 0
  end
  local r = 1
  for _ = 1, b do r = r * a end
  return r
end

-- ---------------------------------------------------------------------------
-- Casts (engine/kernels/cpu/copy.c): bool = value ~= 0; float -> int truncates toward zero,
-- NaN -> 0, out of range saturates; int64 -> int32 wraps; to a float dtype rounds once.
local INT_RANGE = {
  int32 = { -0x80000000, 0x7FFFFFFF },
  int64 = { math.mininteger, math.maxinteger },
}

function M.cast(v, to)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if to == "bool" then return v ~= 0 end
  if to == "float64" then return v + 0.0 end
  if to == "float32" or to == "bfloat16" or to == "float16" then return ref.round_to(v + 0.0, to) end
  local lo, hi = INT_RANGE[to][1], INT_RANGE[to][2]
  if math.type(v) == "integer" then return M.wrap(to, v) end
  if v ~= v then return 0 end
  if v >= -(lo + 0.0) then return hi end -- 2^31 or 2^63 and beyond
  if v <= lo + 0.0 then return lo end
  local t = v < 0 and math.ceil(v) or math.floor(v)
  return math.tointeger(t)
end

-- ---------------------------------------------------------------------------
-- Philox4x32-10 (Salmon et al., SC 2011), as engine/kernels/cpu/random.c states it: block c of
-- a stream is philox({c low, c high, 0, 0}, {seed low, seed high}). 32x32-bit products fit
-- in a Lua integer (they wrap modulo 2^64, the bits are the same); >> is a logical shift.
local M0, M1, W0, W1, LOW = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF

function M.philox(counter, seed)
  local c0, c1, c2, c3 = counter & LOW, (counter >> 32) & LOW, 0, 0
  local k0, k1 = seed & LOW, (seed >> 32) & LOW
  for round = 0, 9 do
    if round > 0 then k0, k1 = (k0 + W0) & LOW, (k1 + W1) & LOW end
    local p0, p1 = M0 * c0, M1 * c2
    c0, c1, c2, c3 = ((p1 >> 32) ~ c1 ~ k0) & LOW, p1 & LOW, ((p0 >> 32) ~ c3 ~ k1) & LOW, p0 & LOW
  end
  return { c0, c1, c2, c3 }
end

local function word64(w, half) return (w[2 * half + 2] << 32) | w[2 * half + 1] end
local function uniform_bits(w, bits) return (w >> (32 - bits)) * 2.0 ^ -bits end
local function uniform53(u) return (u >> 11) * 2.0 ^ -53 end
-- u mod r for u read as unsigned 64 bits, 0 < r < 2^62
local function umod(u, r)
  if u >= 0 then return u % r end
  return (((u >> 1) % r) * 2 + (u & 1)) % r
end
local SIGNIFICAND = { bfloat16 = 8, float16 = 11, float32 = 24 }

-- the stored value of a float64 draw in dtype (random.c's store: through float32 for 16 bits)
local function store(v, dtype)
  if dtype == "float64" then return v end
  return ref.round_to(ref.round_f32(v), dtype)
end

-- the first n values of op ("rand", "randn", "randint" with low, high) in dtype, drawn from
-- the stream (seed, counter); returns them and the next unused counter
function M.random(op, dtype, n, seed, counter, low, high)
  local out = {}
  local per = (op == "randint" or dtype == "float64") and 2 or 4
  local blocks = (n + per - 1) // per
  for b = 0, blocks - 1 do
    local w = M.philox(counter + b, seed)
    local v = {}
    if op == "rand" then
      for j = 0, per - 1 do
        v[j + 1] = dtype == "float64" and uniform53(word64(w, j)) or uniform_bits(w[j + 1], SIGNIFICAND[dtype])
      end
    elseif op == "randn" then
      local function box_muller(u1, u2)
        local r, theta = math.sqrt(-2.0 * math.log(u1)), 6.283185307179586 * u2
        return r * math.cos(theta), r * math.sin(theta)
      end
      if dtype == "float64" then
        v[1], v[2] = box_muller(1.0 - uniform53(word64(w, 0)), uniform53(word64(w, 1)))
      else
        v[1], v[2] = box_muller(1.0 - uniform_bits(w[1], 24), uniform_bits(w[2], 24))
        v[3], v[4] = box_muller(1.0 - uniform_bits(w[3], 24), uniform_bits(w[4], 24))
      end
    else
      for j = 0, 1 do v[j + 1] = low + umod(word64(w, j), high - low) end
    end
    for j = 1, per do
      if #out < n then
        local x = v[j]
        if math.type(x) == "integer" then
          out[#out + 1] = (dtype == "int32" or dtype == "int64") and x or x + 0.0
        else
          out[#out + 1] = store(x, dtype)
        end
      end
    end
  end
  return out, counter + blocks
end

-- ---------------------------------------------------------------------------
-- nn by loops. Tensors are (flat, shape) pairs; results are nested tables.

-- conv2d of x [N, C, H, W] with w [O, C / groups, KH, KW], bias b [O], stride s, padding p,
-- groups (default 1: output o reads the input channels of its group) and dilation d (default 1),
-- and the gradients of sum(y * g): returns y, gx, gw, gb
function M.conv2d(x, w, b, g, s, p, groups, d)
  groups, d = groups or 1, d or 1
  local fx, sx = ref.flatten(x)
  local fw, sw = ref.flatten(w)
  local fg, sg = ref.flatten(g)
  local N, C, H, W = sx[1], sx[2], sx[3], sx[4]
  local O, CG, KH, KW = sw[1], sw[2], sw[3], sw[4]
  assert(CG * groups == C, "conv2d reference: weight channels")
  local OG = O // groups
  local OH, OW = (H + 2 * p - d * (KH - 1) - 1) // s + 1, (W + 2 * p - d * (KW - 1) - 1) // s + 1
  assert(sg[3] == OH and sg[4] == OW, "conv2d reference: grad shape")
  local y, gx, gw, gb = {}, {}, {}, {}
  for i = 1, #fx do gx[i] = 0.0 end
  for i = 1, #fw do gw[i] = 0.0 end
  for o = 1, O do gb[o] = 0.0 end
  local function xi(n, c, h, ww) return ((n * C + c) * H + h) * W + ww + 1 end
  local function wi(o, c, kh, kw) return ((o * CG + c) * KH + kh) * KW + kw + 1 end
  for n = 0, N - 1 do
    for o = 0, O - 1 do
      local first = (o // OG) * CG -- the group's first input channel
      for oh = 0, OH - 1 do
        for ow = 0, OW - 1 do
          local yi = ((n * O + o) * OH + oh) * OW + ow + 1
          local acc, gv = b[o + 1], fg[yi]
          gb[o + 1] = gb[o + 1] + gv
          for c = 0, CG - 1 do
            for kh = 0, KH - 1 do
              local h = oh * s - p + kh * d
              if h >= 0 and h < H then
                for kw = 0, KW - 1 do
                  local ww = ow * s - p + kw * d
                  if ww >= 0 and ww < W then
                    local a, k = xi(n, first + c, h, ww), wi(o, c, kh, kw)
                    acc = acc + fx[a] * fw[k]
                    gx[a] = gx[a] + gv * fw[k]
                    gw[k] = gw[k] + gv * fx[a]
                  end
                end
              end
            end
          end
          y[yi] = acc
        end
      end
    end
  end
  return ref.unflatten(y, { N, O, OH, OW }), ref.unflatten(gx, sx), ref.unflatten(gw, sw), gb
end

-- max_pool2d of x [N, C, H, W], window k, stride s, no padding (distinct values in each
-- window), and the gradient of sum(y * g): returns y, gx
function M.max_pool2d(x, g, k, s)
  local fx, sx = ref.flatten(x)
  local fg = ref.flatten(g)
  local N, C, H, W = sx[1], sx[2], sx[3], sx[4]
  local OH, OW = (H - k) // s + 1, (W - k) // s + 1
  local y, gx = {}, {}
  for i = 1, #fx do gx[i] = 0.0 end
  for plane = 0, N * C - 1 do
    for oh = 0, OH - 1 do
      for ow = 0, OW - 1 do
        local best, at = -math.huge, nil
        for kh = 0, k - 1 do
          for kw = 0, k - 1 do
            local i = (plane * H + oh * s + kh) * W + ow * s + kw + 1
            if fx[i] > best then best, at = fx[i], i end
          end
        end
        local yi = (plane * OH + oh) * OW + ow + 1
        y[yi] = best
        gx[at] = gx[at] + fg[yi]
      end
    end
  end
  return ref.unflatten(y, { N, C, OH, OW }), ref.unflatten(gx, sx)
end

-- rows of w [V, D] picked by 1-based indices idx (nested), and the gradient of sum(y * g)
-- with respect to w: returns y, gw
function M.embedding(idx, w, g)
  local fi, si = ref.flatten(idx)
  local fw, sw = ref.flatten(w)
  local fg = ref.flatten(g)
  local D = sw[2]
  local y, gw = {}, {}
  for i = 1, #fw do gw[i] = 0.0 end
  for p, r in ipairs(fi) do
    for j = 1, D do
      y[(p - 1) * D + j] = fw[(r - 1) * D + j]
      gw[(r - 1) * D + j] = gw[(r - 1) * D + j] + fg[(p - 1) * D + j]
    end
  end
  local ys = {}
  for d = 1, #si do ys[d] = si[d] end
  ys[#ys + 1] = D
  return ref.unflatten(y, ys), ref.unflatten(gw, sw)
end

-- the gradient of softmax (log_softmax when log) along a 1-based dim from the forward's output
-- y and the output's gradient g (nested tables of one shape): y * (g - sum(g * y)) and
-- g - exp(y) * sum(g), the sums along dim
function M.softmax_backward(y, g, dim, log)
  local fy, shape = ref.flatten(y)
  local fg = ref.flatten(g)
  local out = {}
  for _, at in ipairs(ref.lines(shape, dim)) do
    local s = 0.0
    for _, p in ipairs(at) do s = s + (log and fg[p] or fg[p] * fy[p]) end
    for _, p in ipairs(at) do
      if log then out[p] = fg[p] - math.exp(fy[p]) * s else out[p] = fy[p] * (fg[p] - s) end
    end
  end
  return ref.unflatten(out, shape)
end

-- mean cross entropy of logits x [N, K] with 1-based targets and label smoothing eps (torch's
-- definition), and its gradient: returns loss, gx
function M.cross_entropy(x, target, eps)
  local loss, gx = 0.0, {}
  local N, K = #x, #x[1]
  for i = 1, N do
    local logp = ref.log_softmax_list(x[i])
    local row = {}
    for c = 1, K do
      local q = eps / K + (c == target[i] and (1 - eps) or 0)
      loss = loss - q * logp[c]
      row[c] = (math.exp(logp[c]) - q) / N
    end
    gx[i] = row
  end
  return loss / N, gx
end

-- layer norm of the rows of x [N, D] with weight w, bias b, eps, and the gradients of
-- sum(y * g): returns y, gx, gw, gb
function M.layer_norm(x, w, b, g, eps)
  local y, gx, gw, gb = {}, {}, {}, {}
  local D = #w
  for j = 1, D do gw[j], gb[j] = 0.0, 0.0 end
  for i = 1, #x do
    local mean, var = 0.0, 0.0
    for j = 1, D do mean = mean + x[i][j] end
    mean = mean / D
    for j = 1, D do var = var + (x[i][j] - mean) ^ 2 end
    local rstd = 1 / math.sqrt(var / D + eps)
    local xhat, gh, m1, m2 = {}, {}, 0.0, 0.0
    for j = 1, D do
      xhat[j] = (x[i][j] - mean) * rstd
      gh[j] = g[i][j] * w[j]
      m1, m2 = m1 + gh[j] / D, m2 + gh[j] * xhat[j] / D
      gw[j], gb[j] = gw[j] + g[i][j] * xhat[j], gb[j] + g[i][j]
    end
    y[i], gx[i] = {}, {}
    for j = 1, D do
      y[i][j] = xhat[j] * w[j] + b[j]
      gx[i][j] = rstd * (gh[j] - m1 - xhat[j] * m2)
    end
  end
  return y, gx, gw, gb
end

-- batch_norm over flat row-major x, g of [N, C, S] (w, b, rm, rv flat [C]; rm, rv updated in
-- place when training): y, the gradients of x, w and b for the output's gradient g, in float64.
-- training: the batch's mean and biased variance (running: momentum towards the unbiased one);
-- else the running statistics, with the input's gradient g * w * invstd.
function M.batch_norm(x, w, b, g, rm, rv, N, C, S, o)
  local M_ = N * S
  local y, gx, gw, gb = {}, {}, {}, {}
  for c = 1, C do
    local function at(n, j) return ((n - 1) * C + c - 1) * S + j end
    local mean, invstd
    if o.training then
      local sum, sq = 0.0, 0.0
      for n = 1, N do for j = 1, S do sum = sum + x[at(n, j)] end end
      mean = sum / M_
      for n = 1, N do for j = 1, S do sq = sq + (x[at(n, j)] - mean) ^ 2 end end
      local var = sq / M_
      invstd = 1 / math.sqrt(var + o.eps)
      if rm then
        rm[c] = (1 - o.momentum) * rm[c] + o.momentum * mean
        rv[c] = (1 - o.momentum) * rv[c] + o.momentum * var * M_ / (M_ - 1)
      end
    else
      mean, invstd = rm[c], 1 / math.sqrt(rv[c] + o.eps)
    end
    local sdy, sdyx = 0.0, 0.0
    for n = 1, N do
      for j = 1, S do
        local i = at(n, j)
        local xhat = (x[i] - mean) * invstd
        y[i] = xhat * w[c] + b[c]
        sdy, sdyx = sdy + g[i], sdyx + g[i] * xhat
      end
    end
    gw[c], gb[c] = sdyx, sdy
    for n = 1, N do
      for j = 1, S do
        local i = at(n, j)
        if o.training then
          local xhat = (x[i] - mean) * invstd
          gx[i] = w[c] * invstd * (g[i] - sdy / M_ - xhat * sdyx / M_)
        else
          gx[i] = g[i] * w[c] * invstd
        end
      end
    end
  end
  return y, gx, gw, gb
end

-- ---------------------------------------------------------------------------
-- Optimizer steps of torch.optim on flat arrays (p is updated in place; state kept in s)
function M.sgd_step(p, g, s, o)
  s.buf = s.buf or {}
  for i = 1, #p do
    local d = g[i] + o.weight_decay * p[i]
    if o.momentum ~= 0 then
      local b = s.buf[i] and s.buf[i] * o.momentum + (1 - o.dampening) * d or d
      s.buf[i] = b
      d = o.nesterov and d + o.momentum * b or b
    end
    p[i] = p[i] - o.lr * d
  end
end

function M.adam_step(p, g, s, o)
  s.step = (s.step or 0) + 1
  s.m, s.v = s.m or {}, s.v or {}
  local c1, c2 = 1 - o.beta1 ^ s.step, 1 - o.beta2 ^ s.step
  for i = 1, #p do
    local pi, gi = p[i], g[i]
    if o.decoupled then pi = pi * (1 - o.lr * o.weight_decay)
    else gi = gi + o.weight_decay * pi end
    local m = (s.m[i] or 0.0) * o.beta1 + (1 - o.beta1) * gi
    local v = (s.v[i] or 0.0) * o.beta2 + (1 - o.beta2) * gi * gi
    s.m[i], s.v[i] = m, v
    p[i] = pi - o.lr / c1 * (m / (math.sqrt(v) / math.sqrt(c2) + o.eps))
  end
end


-- Scaled dot-product attention of one head by Lua loops: Q [T][D], Kh and V [S][D], the output's
-- gradient G [T][D] (nested tables); causal hides the keys j > i; keep(i, j) (nil: 1) is the
-- dropout factor of probability (i, j), 0 or 1 / (1 - p). Returns y, gq, gk, gv.
function M.attention_head(Q, Kh, V, G, scale, causal, keep)
  local T, S, D = #Q, #Kh, #Q[1]
  local P, F = {}, {} -- the probabilities and their dropout factors
  for i = 1, T do
    local row, top = {}, -math.huge
    for j = 1, S do
      local s = -math.huge
      if not causal or j <= i then
        s = 0.0
        for d = 1, D do s = s + Q[i][d] * Kh[j][d] end
        s = s * scale
      end
      row[j] = s
      if s > top then top = s end
    end
    local sum = 0.0
    for j = 1, S do
      row[j] = row[j] == -math.huge and 0.0 or math.exp(row[j] - top)
      sum = sum + row[j]
    end
    F[i] = {}
    for j = 1, S do
      row[j] = row[j] / sum
      F[i][j] = keep and keep(i, j) or 1.0
    end
    P[i] = row
  end
  local y = ref.build({ T, D }, function(i, d)
    local acc = 0.0
    for j = 1, S do acc = acc + P[i][j] * F[i][j] * V[j][d] end
    return acc
  end)
  -- dP = (G V^T) * F; dS = P (dP - sum_j P dP) scale
  local dS = {}
  for i = 1, T do
    local dP, dot = {}, 0.0
    for j = 1, S do
      local acc = 0.0
      for d = 1, D do acc = acc + G[i][d] * V[j][d] end
      dP[j] = acc * F[i][j]
      dot = dot + P[i][j] * dP[j]
    end
    dS[i] = {}
    for j = 1, S do dS[i][j] = P[i][j] * (dP[j] - dot) * scale end
  end
  local gq = ref.build({ T, D }, function(i, d)
    local acc = 0.0
    for j = 1, S do acc = acc + dS[i][j] * Kh[j][d] end
    return acc
  end)
  local gk = ref.build({ S, D }, function(j, d)
    local acc = 0.0
    for i = 1, T do acc = acc + dS[i][j] * Q[i][d] end
    return acc
  end)
  local gv = ref.build({ S, D }, function(j, d)
    local acc = 0.0
    for i = 1, T do acc = acc + P[i][j] * F[i][j] * G[i][d] end
    return acc
  end)
  return y, gq, gk, gv
end

-- ---- pooling and interpolate (tlua's pooling ops; PyTorch's definitions, written out per element) ----
-- One axis of a pooling window: the input positions (0-based) output o reads, given
-- w = {in, out, kernel, stride, pad, dilation, adaptive = bool}.
local function pool_taps(o, w)
  local taps = {}
  if w.adaptive then
    for i = math.floor(o * w.input / w.out), math.ceil((o + 1) * w.input / w.out) - 1 do taps[#taps + 1] = i end
    return taps
  end
  for k = 0, w.kernel - 1 do
    local i = o * w.stride - w.pad + k * (w.dilation or 1)
    if i >= 0 and i < w.input then taps[#taps + 1] = i end
  end
  return taps
end

-- The output size of a window along an axis (PyTorch's pooling_output_shape, with ceil_mode).
function M.pool_out(input, kernel, stride, pad, dilation, ceil_mode)
  local span = (dilation or 1) * (kernel - 1) + 1
  local num = input + 2 * pad - span
  local o = (ceil_mode and -(-num // stride) or num // stride) + 1
  if ceil_mode and (o - 1) * stride >= input + pad then o = o - 1 end
  return o
end

-- Runs cell(plane, oh, ow, taps_h, taps_w) -> value, list of {flat input index, weight} for each
-- output of x [N, C, H, W] with axes ah, aw (pool_taps' w without in); returns y and the
-- gradient of sum(y * g): the weights times g added at the indices.
local function per_window(x, g, ah, aw, cell)
  local fx, sx = ref.flatten(x)
  local fg = ref.flatten(g)
  local N, C, H, W = sx[1], sx[2], sx[3], sx[4]
  ah.input, aw.input = H, W
  local y, gx = {}, {}
  for i = 1, #fx do gx[i] = 0.0 end
  for plane = 0, N * C - 1 do
    for oh = 0, ah.out - 1 do
      for ow = 0, aw.out - 1 do
        local th, tw = pool_taps(oh, ah), pool_taps(ow, aw)
        local yi = (plane * ah.out + oh) * aw.out + ow + 1
        local value, weights = cell(function(ih, iw) return fx[(plane * H + ih) * W + iw + 1] end, th, tw, oh, ow)
        y[yi] = value
        for _, e in ipairs(weights) do
          local at = (plane * H + e[1]) * W + e[2] + 1
          gx[at] = gx[at] + e[3] * fg[yi]
        end
      end
    end
  end
  return ref.unflatten(y, { N, C, ah.out, aw.out }), ref.unflatten(gx, sx)
end

-- max pooling (distinct values in each window) of x with axes ah, aw: returns y, gx
function M.max_pool(x, g, ah, aw)
  return per_window(x, g, ah, aw, function(at, th, tw)
    local best, bh, bw = -math.huge, nil, nil
    for _, ih in ipairs(th) do
      for _, iw in ipairs(tw) do
        if at(ih, iw) > best then best, bh, bw = at(ih, iw), ih, iw end
      end
    end
    return best, { { bh, bw, 1.0 } }
  end)
end

-- average pooling: divisor, else count_include_pad's window clipped to the padded input, else
-- the taps' count; returns y, gx
function M.avg_pool(x, g, ah, aw, count_include_pad, divisor)
  local function padded(o, a)
    if a.adaptive then return #pool_taps(o, a) end
    local s = o * a.stride - a.pad
    return math.min(s + a.kernel, a.input + a.pad) - s
  end
  return per_window(x, g, ah, aw, function(at, th, tw, oh, ow)
    local d = divisor or (count_include_pad and padded(oh, ah) * padded(ow, aw) or #th * #tw)
    local sum, weights = 0.0, {}
    for _, ih in ipairs(th) do
      for _, iw in ipairs(tw) do
        sum = sum + at(ih, iw)
        weights[#weights + 1] = { ih, iw, 1 / d }
      end
    end
    return sum / d, weights
  end)
end

-- interpolate of x [N, C, H, W] to out_h x out_w by mode "nearest" or "bilinear" (align_corners),
-- sizes given (the source step in / out); returns y, gx
function M.interpolate(x, g, out_h, out_w, mode, align_corners)
  local _, sx = ref.flatten(x)
  local function sources(o, input, out)
    if mode == "nearest" then return { { math.min(math.floor(o * input / out), input - 1), 1.0 } } end
    local src
    if align_corners then
      src = out > 1 and o * (input - 1) / (out - 1) or 0
    else
      src = math.max((o + 0.5) * input / out - 0.5, 0)
    end
    local i0 = math.min(math.floor(src), input - 1)
    local l1 = src - i0
    return { { i0, 1 - l1 }, { math.min(i0 + 1, input - 1), l1 } }
  end
  local ah = { out = out_h, kernel = 1, stride = 1, pad = 0 }
  local aw = { out = out_w, kernel = 1, stride = 1, pad = 0 }
  return per_window(x, g, ah, aw, function(at, _, _, oh, ow)
    local value, weights = 0.0, {}
    for _, h in ipairs(sources(oh, sx[3], out_h)) do
      for _, w in ipairs(sources(ow, sx[4], out_w)) do
        value = value + h[2] * w[2] * at(h[1], w[1])
        weights[#weights + 1] = { h[1], w[1], h[2] * w[2] }
      end
    end
    return value, weights
  end)
end

return M
