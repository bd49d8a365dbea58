-- conv2d in Lua loops (any groups and dilation: forward and the three gradients), the kernel sweep cases of its three paths (im2col and GEMMs, the CPU's depthwise kernels, cuDNN), the depthwise kernels' variant cases and its gradcheck cases (found by helpers/family_cases.lua).
local tl = require("tlua")
local ref = require("helpers.reference")
local sweep_helpers = require("helpers.sweep_helpers")
local leaves = sweep_helpers.leaves

local M = {}

-- Tensors are (flat, shape) pairs; results are nested tables.

-- conv2d of x [N, C, H, W] with w [O, C / groups, KH, KW], bias b [O], stride s, padding p,
-- groups (default 1: output o reads the input channels of its group) and dilation d (default 1),
-- and the gradients of sum(y * g): returns y, gx, gw, gb. s, p and d are numbers or {h, w} pairs.
local function pair(v) return type(v) == "table" and v or { v, v } end
function M.conv2d(x, w, b, g, s, p, groups, d)
  groups = groups or 1
  local stride, pad, dil = pair(s), pair(p), pair(d or 1)
  local fx, sx = ref.flatten(x)
  local fw, sw = ref.flatten(w)
  local fg, sg = ref.flatten(g)
  local N, C, H, W = sx[1], sx[2], sx[3], sx[4]
  local O, CG, KH, KW = sw[1], sw[2], sw[3], sw[4]
  assert(CG * groups == C, "conv2d reference: weight channels")
  local OG = O // groups
  local OH = (H + 2 * pad[1] - dil[1] * (KH - 1) - 1) // stride[1] + 1
  local OW = (W + 2 * pad[2] - dil[2] * (KW - 1) - 1) // stride[2] + 1
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
              local h = oh * stride[1] - pad[1] + kh * dil[1]
              if h >= 0 and h < H then
                for kw = 0, KW - 1 do
                  local ww = ow * stride[2] - pad[2] + kw * dil[2]
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

M.sweep = {}

-- conv2d by im2col and GEMMs (cuDNN off: the CPU's path, and CUDA's when cuDNN is disabled)
local function conv2d_run(x, w, b, g)
  x, w, b = leaves(x, w, b)
  local y = tl.conv2d(x, w, b, { stride = 2, padding = 1 })
  y:backward(g)
  return { y:detach(), x.grad, w.grad, b.grad }
end
M.sweep.conv2d = {
  inputs = function(G) return { G.normal(2, 3, 6, 6), G.normal(4, 3, 3, 3), G.normal(4), G.normal(2, 4, 3, 3) } end,
  run = function(...)
    tl.cuda.set_cudnn_enabled(false)
    local ok, out = pcall(conv2d_run, ...)
    tl.cuda.set_cudnn_enabled(true)
    if not ok then error(out, 0) end
    return out
  end,
  reference = function(_, x, w, b, g) return { M.conv2d(x, w, b, g, 2, 1) } end,
}
-- depthwise conv2d (groups = C, M outputs a channel) over a list of problems {x = {N, C, H, W}, m = M,
-- kernel = {KH, KW}, options = conv2d's (stride, padding, dilation: numbers or {h, w}), and
-- optionally inf_x, inf_w: the 1-based position of an inf in x or w}: for each, y and the gradients
-- of x, w and the bias against M.conv2d
local function with_inf(t, at)
  if not at then return t end
  local values = t:totable()
  values[at[1]][at[2]][at[3]][at[4]] = math.huge
  return tl.tensor(values, { dtype = t.dtype })
end
local function depthwise_case(problems)
  local function sizes(pb)
    local o = pb.options
    local s, p, d = pair(o.stride or 1), pair(o.padding or 0), pair(o.dilation or 1)
    local out = {}
    for k = 1, 2 do out[k] = (pb.x[k + 2] + 2 * p[k] - d[k] * (pb.kernel[k] - 1) - 1) // s[k] + 1 end
    return out, s, p, d
  end
  return {
    inputs = function(G)
      local list = {}
      for _, pb in ipairs(problems) do
        local N, C = pb.x[1], pb.x[2]
        local out = sizes(pb)
        for _, t in ipairs({ with_inf(G.normal(table.unpack(pb.x)), pb.inf_x),
          with_inf(G.normal(C * pb.m, 1, pb.kernel[1], pb.kernel[2]), pb.inf_w),
          G.normal(C * pb.m), G.normal(N, C * pb.m, out[1], out[2]) }) do
          list[#list + 1] = t
        end
      end
      return list
    end,
    run = function(...)
      local args, results = { ... }, {}
      for k, pb in ipairs(problems) do
        local x, w, b = leaves(args[4 * k - 3], args[4 * k - 2], args[4 * k - 1])
        local opts = { groups = pb.x[2] }
        for key, v in pairs(pb.options) do opts[key] = v end
        local y = tl.conv2d(x, w, b, opts)
        y:backward(args[4 * k])
        for _, r in ipairs({ y:detach(), x.grad, w.grad, b.grad }) do results[#results + 1] = r end
      end
      return results
    end,
    reference = function(_, ...)
      local args, results = { ... }, {}
      for k, pb in ipairs(problems) do
        local _, s, p, d = sizes(pb)
        for _, r in ipairs({ M.conv2d(args[4 * k - 3], args[4 * k - 2], args[4 * k - 1], args[4 * k], s, p, pb.x[2], d) }) do
          results[#results + 1] = r
        end
      end
      return results
    end,
  }
end
-- two outputs a channel, stride 2, dilation 2 (the CPU's direct loops)
M.sweep.conv2d_depthwise = depthwise_case({
  { x = { 2, 3, 7, 6 }, m = 2, kernel = { 3, 2 }, options = { stride = 2, padding = 1, dilation = 2 } },
})
-- the same on cuDNN (CUDA's default)
M.sweep.conv2d_dnn = {
  inputs = M.sweep.conv2d.inputs,
  run = conv2d_run,
  reference = M.sweep.conv2d.reference,
}

-- The paths of the CPU's depthwise kernels (each case runs all three): stride 1 runs flat
-- correlations over zero-bordered plane copies (rows wider and narrower than the 32 sums side by
-- side, padding 0, 1, 2 and beyond the kernel's reach, uneven padding and dilation, two and three
-- outputs a channel), redone by the direct loops when a sum is not finite; a stride above 1 the
-- direct loops
local depthwise_paths = {
  flat = depthwise_case({
    { x = { 2, 3, 6, 5 }, m = 1, kernel = { 3, 3 }, options = { padding = 1 } },
    { x = { 1, 2, 5, 37 }, m = 1, kernel = { 3, 3 }, options = { padding = 1 } },
    { x = { 2, 2, 5, 7 }, m = 2, kernel = { 2, 3 }, options = { dilation = 2 } },
    { x = { 1, 2, 4, 3 }, m = 1, kernel = { 2, 2 }, options = { padding = 2 } },
    { x = { 1, 2, 6, 9 }, m = 2, kernel = { 3, 2 }, options = { padding = { 2, 0 }, dilation = { 1, 2 } } },
    { x = { 1, 1, 3, 4 }, m = 3, kernel = { 1, 1 }, options = { padding = { 0, 2 } } },
  }),
  -- an inf in w at tap (1, 1), which padding 1 puts outside the image for the first output row
  -- and column, and in x at the end of a row, which the weight gradient's zero columns meet: the
  -- flat sums give nan where the taps inside the image do not, so each pass is redone directly
  flat_redone = depthwise_case({
    { x = { 2, 2, 5, 6 }, m = 1, kernel = { 3, 3 }, options = { padding = 1 }, inf_x = { 1, 2, 3, 6 },
      inf_w = { 1, 1, 1, 1 } },
  }),
  direct = depthwise_case({
    { x = { 2, 3, 7, 6 }, m = 2, kernel = { 3, 2 }, options = { stride = 2, padding = 1, dilation = 2 } },
    { x = { 1, 2, 6, 9 }, m = 1, kernel = { 3, 3 }, options = { stride = { 1, 2 }, padding = { 1, 2 } } },
    { x = { 2, 2, 7, 5 }, m = 1, kernel = { 3, 3 }, options = { stride = { 2, 1 }, padding = 1 } },
  }),
}
M.variants = {
  conv2d_depthwise = depthwise_paths,
  conv2d_depthwise_backward_input = depthwise_paths,
  conv2d_depthwise_backward_weight = depthwise_paths,
}

-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  conv2d_forward = "conv2d", conv2d_backward_input = "conv2d", conv2d_backward_weight = "conv2d",
  conv2d_backward_bias = "conv2d", im2col = "conv2d", col2im = "conv2d",
  conv2d_dnn_backward_input = "conv2d_dnn", conv2d_dnn_backward_weight = "conv2d_dnn",
  conv2d_depthwise_backward_input = "conv2d_depthwise",
  conv2d_depthwise_backward_weight = "conv2d_depthwise",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  conv2d_forward = { { function(x, w, b) return tl.conv2d(x, w, b, { stride = 2, padding = 1 }) end,
                       { input(2, 2, 5, 5), input(3, 2, 3, 3), input(3) } },
                     { function(x, w) return tl.conv2d(x, w, nil, { stride = { 1, 2 }, padding = { 0, 1 } }) end,
                       { input(1, 2, 4, 5), input(2, 2, 2, 3) } } },
}

return M
