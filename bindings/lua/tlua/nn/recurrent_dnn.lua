-- nn.LSTM / GRU / RNN on cuDNN (CUDA only): the whole stack of layers and directions as one autograd node (cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), the parameters packed each call into cuDNN's weight space at the offsets cuDNN gives, their gradients views of the weight space's gradient.
--
-- Taken by RNNBase:_run (nn/recurrent.lua) when RNNBase.use_cudnn is true (off by default: the
-- fused runs are faster, see recurrent.lua), tl.cuda.cudnn_enabled(), the input is on CUDA in float32, float64 or float16 (the
-- autocast dtype when autocast is on), there is no projection and no dropout between layers in
-- training; otherwise the fused-cell runs of nn.functional do the work.
local tl = require("tlua")

local M = {}

local MODES = { LSTM = 0, GRU = 1, RNN_TANH = 2, RNN_RELU = 3 }
local GATES = { [0] = 4, [1] = 3, [2] = 1, [3] = 1 }
local DTYPES = { float32 = true, float64 = true, float16 = true }

local function as(t, dtype)
  if t == nil or t.dtype == dtype then return t end
  return t:to(dtype)
end

-- the dtype the run computes in: autocast's (float16; bfloat16 is not cuDNN's here) for float32
-- weights inside an autocast region, else the weights'
local function compute_dtype(w)
  local ac = tl.autocast_dtype()
  if ac and (w.dtype == "float32" or w.dtype == "bfloat16" or w.dtype == "float16") then return ac end
  return w.dtype
end

--- usable(module, x): whether module's run over x can go to cuDNN
function M.usable(m, x)
  if not (m.use_cudnn and x.device ~= "cpu" and MODES[m.mode] and m.proj_size == 0) then return false end
  if m.training and m.dropout > 0 and m.num_layers > 1 then return false end
  if not tl.cuda.cudnn_enabled() then return false end
  return DTYPES[compute_dtype(m.weight_ih_l0)] == true
end

-- where each parameter lies in the weight space: {numel = n, slots = {{offset, numel, shape}, ...}}
-- in the module's parameter order (per layer, per direction: w_ih, w_hh, b_ih, b_hh), or nil
-- with the reason when cuDNN's matrices of one kind are not consecutive (torch's layout)
local function layout(m, dtype, device)
  local mode = MODES[m.mode]
  local dirs = m.bidirectional and 2 or 1
  local key = table.concat({ mode, m.input_size, m.hidden_size, m.num_layers, dirs, dtype, device }, ":")
  m._dnn_layouts = m._dnn_layouts or {}
  if m._dnn_layouts[key] ~= nil then return m._dnn_layouts[key] end
  local numel, offsets = tl._rnn_dnn_layout(mode, m.hidden_size, m.num_layers, dirs == 2, m.input_size, dtype,
    device)
  local off = offsets:totable()
  local G, H = GATES[mode], m.hidden_size
  local slots = {}
  local result = { numel = numel, slots = slots }
  -- the run of G consecutive pieces of size `size` from lin, in column col (1 matrix, 2 bias)
  local function run_of(p, first, size, col)
    local start = off[p][first][col]
    for k = 1, G - 1 do
      if off[p][first + k][col] ~= start + k * size then return nil end
    end
    return start
  end
  for layer = 0, m.num_layers - 1 do
    local in_size = layer == 0 and m.input_size or dirs * H
    for dir = 1, dirs do
      local p = layer * dirs + dir
      local pieces = { { 1, G * H * in_size, { G * H, in_size }, H * in_size, 1 },
        { G + 1, G * H * H, { G * H, H }, H * H, 1 } }
      if m.bias then
        pieces[3] = { 1, G * H, { G * H }, H, 2 }
        pieces[4] = { G + 1, G * H, { G * H }, H, 2 }
      end
      for _, piece in ipairs(pieces) do
        local start = run_of(p, piece[1], piece[4], piece[5])
        if not start or start < 0 then
          m._dnn_layouts[key] = false
          return false
        end
        slots[#slots + 1] = { offset = start, numel = piece[2], shape = piece[3] }
      end
    end
  end
  m._dnn_layouts[key] = result
  return result
end

-- x [T, N, I], h0 (c0) [L * D, N, H], params in slot order -> out [T, N, D * H], h_n, c_n
local Run = tl.autograd.Function {
  name = "rnn_dnn",
  forward = function(ctx, x, h0, c0, params, spec)
    local dt = spec.dtype
    local w = tl.zeros(spec.numel, { dtype = dt, device = x.device })
    for i, p in ipairs(params) do
      local s = spec.slots[i]
      w:narrow(1, s.offset + 1, s.numel):view(s.shape):copy_(p)
    end
    local xd, hd, cd = as(x, dt):contiguous(), as(h0, dt):contiguous(), c0 and as(c0, dt):contiguous()
    local y, hy, cy, reserve = tl._rnn_dnn_forward(xd, hd, cd, w, spec.mode, spec.hidden, spec.layers,
      spec.bidirectional, spec.training)
    if spec.training then ctx:save_for_backward({ xd, hd, w, y, reserve }, cd and { cd } or {}) end
    local pdtypes = {}
    for i, p in ipairs(params) do pdtypes[i] = p.dtype end
    ctx.spec, ctx.dtypes, ctx.pdtypes = spec, { x.dtype, h0.dtype, c0 and c0.dtype }, pdtypes
    return y, hy, cy
  end,
  backward = function(ctx, gy, ghy, gcy)
    local spec = ctx.spec
    if not spec.training then error("rnn_dnn: the forward ran without a reserve (no gradient was needed)", 0) end
    if ctx.spent then
      error("rnn_dnn: a second backward through one cuDNN forward (cuDNN spends its reserve): run the forward "
        .. "again, or set the module's use_cudnn to false", 0)
    end
    ctx.spent = true
    local first, second = table.unpack(ctx.saved_tensors)
    local xd, hd, w, y, reserve = table.unpack(first)
    local cd = second[1]
    local dt = spec.dtype
    local want_w = false
    for _, need in ipairs(ctx.needs_input_grad[4] or {}) do want_w = want_w or need end
    local dx, dhx, dcx, dw = tl._rnn_dnn_backward(xd, hd, cd, w, y, reserve, gy and as(gy, dt) or tl.zeros_like(y),
      as(ghy, dt), as(gcy, dt), spec.mode, spec.hidden, spec.layers, spec.bidirectional, want_w)
    local gparams = {}
    if want_w then
      for i, s in ipairs(spec.slots) do
        gparams[i] = as(dw:narrow(1, s.offset + 1, s.numel):view(s.shape), ctx.pdtypes[i])
      end
    end
    return as(dx, ctx.dtypes[1]), as(dhx, ctx.dtypes[2]), dcx and as(dcx, ctx.dtypes[3]), gparams
  end,
}

--- run(module, x [T, N, I], h0, c0?) -> out [T, N, D * H], h_n, c_n (LSTM) on cuDNN, or nil when
-- cuDNN's weight layout is not torch's (the caller then takes the fused runs)
function M.run(m, x, h0, c0)
  local dtype = compute_dtype(m.weight_ih_l0)
  local lay = layout(m, dtype, x.device)
  if not lay then return nil end
  local params = {}
  local dirs = m.bidirectional and 2 or 1
  local any_grad = x.requires_grad or h0.requires_grad or (c0 ~= nil and c0.requires_grad)
  for layer = 0, m.num_layers - 1 do
    for dir = 1, dirs do
      local w = m:_weights(layer, dir)
      for k = 1, (m.bias and 4 or 2) do
        params[#params + 1] = w[k]
        any_grad = any_grad or w[k].requires_grad
      end
    end
  end
  local spec = { mode = MODES[m.mode], hidden = m.hidden_size, layers = m.num_layers, bidirectional = dirs == 2,
    training = tl.is_grad_enabled() and any_grad, dtype = dtype, numel = lay.numel, slots = lay.slots }
  local out, hn, cn = Run(x, h0, m.mode == "LSTM" and c0 or nil, params, spec)
  return out, hn, cn
end

return M
