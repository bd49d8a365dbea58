-- Pooling and interpolate in Lua loops (max, average and adaptive pools, nearest and bilinear resizing: forward and input gradient, PyTorch's definitions written out per element), their kernel sweep cases and their gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local F = require("tlua.nn.functional")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves, differentiated = sweep_helpers.leaves, sweep_helpers.differentiated

local M = {}

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

M.sweep = {}

M.sweep.max_pool2d = {
  inputs = function(G) return { G.distinct(2, 3, 6, 6), G.normal(2, 3, 3, 3) } end,
  run = function(x, g)
    x = leaves(x)
    local y = tl.max_pool2d(x, 2, { stride = 2 })
    y:backward(g)
    return { y:detach(), x.grad }
  end,
  reference = function(_, x, g) return { M.max_pool2d(x, g, 2, 2) } end,
}
-- pooling and interpolate: forward and backward kernels of each op (M.max_pool, M.avg_pool, M.interpolate)
local function axis(out, kernel, stride, pad)
  return { out = out, kernel = kernel, stride = stride, pad = pad }
end
M.sweep.adaptive_max_pool2d = {
  inputs = function(G) return { G.distinct(2, 3, 7, 5), G.normal(2, 3, 3, 4) } end,
  run = differentiated(function(x) return tl.adaptive_max_pool2d(x, { 3, 4 }) end),
  reference = function(_, x, g)
    return { M.max_pool(x, g, { out = 3, adaptive = true }, { out = 4, adaptive = true }) }
  end,
}
-- with padding counted and ceil_mode, then without the padding and with a divisor
M.sweep.avg_pool2d = {
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
    local y1, gx1 = M.avg_pool(x, g1, axis(4, 3, 2, 1), axis(4, 3, 2, 1), true)
    local y2, gx2 = M.avg_pool(x, g2, axis(7, 2, 1, 1), axis(4, 3, 2, 1), false)
    local y3 = M.avg_pool(x, g2, axis(3, 2, 2, 0), axis(3, 2, 2, 0), true, 3)
    local _, gx3 = M.avg_pool(x, y3, axis(3, 2, 2, 0), axis(3, 2, 2, 0), true, 3)
    return { y1, gx1, y2, gx2, y3, gx3 }
  end,
}
M.sweep.adaptive_avg_pool2d = {
  inputs = function(G) return { G.normal(2, 3, 7, 5), G.normal(2, 3, 3, 7) } end,
  run = differentiated(function(x) return tl.adaptive_avg_pool2d(x, { 3, 7 }) end),
  reference = function(_, x, g)
    return { M.avg_pool(x, g, { out = 3, adaptive = true }, { out = 7, adaptive = true }) }
  end,
}
M.sweep.upsample_nearest2d = {
  inputs = function(G) return { G.normal(2, 3, 3, 4), G.normal(2, 3, 5, 10) } end,
  run = differentiated(function(x) return F.interpolate(x, { size = { 5, 10 } }) end),
  reference = function(_, x, g) return { M.interpolate(x, g, 5, 10, "nearest") } end,
}
M.sweep.upsample_bilinear2d = {
  inputs = function(G) return { G.normal(2, 3, 4, 5), G.normal(2, 3, 7, 3), G.normal(2, 3, 7, 3) } end,
  run = function(x, g1, g2)
    local out = differentiated(function(t) return F.interpolate(t, { size = { 7, 3 }, mode = "bilinear" }) end)(x, g1)
    local aligned = differentiated(function(t)
      return F.interpolate(t, { size = { 7, 3 }, mode = "bilinear", align_corners = true })
    end)(x, g2)
    return { out[1], out[2], aligned[1], aligned[2] }
  end,
  reference = function(_, x, g1, g2)
    local y1, gx1 = M.interpolate(x, g1, 7, 3, "bilinear", false)
    local y2, gx2 = M.interpolate(x, g2, 7, 3, "bilinear", true)
    return { y1, gx1, y2, gx2 }
  end,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  max_pool2d_backward = "max_pool2d", avg_pool2d_backward = "avg_pool2d",
  adaptive_avg_pool2d_backward = "adaptive_avg_pool2d",
  upsample_nearest2d_backward = "upsample_nearest2d",
  upsample_bilinear2d_backward = "upsample_bilinear2d",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  max_pool2d = { { function(x) return tl.max_pool2d(x, 2) end, { input(2, 2, 4, 4) } },
                 { function(x) return tl.max_pool2d(x, 3, { stride = 2, padding = 1 }) end, { input(1, 2, 5, 5) } } },
  adaptive_max_pool2d = { { function(x) return tl.adaptive_max_pool2d(x, { 3, 2 }) end, { input(1, 2, 5, 7) } } },
  avg_pool2d = { { function(x) return tl.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end,
                   { input(1, 2, 6, 5) } },
                 { function(x) return tl.avg_pool2d(x, 2, { padding = 1, count_include_pad = false }) end,
                   { input(1, 2, 4, 5) } } },
  adaptive_avg_pool2d = { { function(x) return tl.adaptive_avg_pool2d(x, { 3, 4 }) end, { input(1, 2, 5, 7) } } },
  upsample_nearest2d = { { function(x) return tl.nn.functional.interpolate(x, { scale_factor = 1.5 }) end,
                           { input(1, 2, 3, 4) } } },
  upsample_bilinear2d = { { function(x)
                              return tl.nn.functional.interpolate(x, { size = { 5, 3 }, mode = "bilinear" })
                            end, { input(1, 2, 3, 4) } },
                          { function(x)
                              return tl.nn.functional.interpolate(x, { scale_factor = 2, mode = "bilinear",
                                align_corners = true })
                            end, { input(1, 2, 3, 3) } } },
}

return M
