-- tl.nn.functional's recurrent forms (merged into tl.nn.functional by functional.lua): the LSTM, GRU and RNN cells and the runs of one layer's direction over a sequence, on the fused cell ops tl.lstm_cell_pointwise / tl.gru_cell_pointwise.
--
-- Weights in PyTorch's layout and gate order: LSTM w_ih [4H, I] (gates i, f, g, o), GRU [3H, I]
-- (r, z, n; the n gate takes r * (W_hn h + b_hn)), RNN [H, I]. A sequence run projects the
-- input of every timestep with one matmul (x W_ih^T + b), then loops over time with one GEMM
-- h W_hh^T and one fused cell kernel a step. The LSTM (without projection) and GRU runs are one
-- autograd node each (a tl.autograd.Function): backward walks the steps back with one fused
-- kernel and one GEMM a step, then takes W_hh's gradient in one GEMM over every step, as cuDNN.
-- The LSTM's walks run in C (tl._lstm_layer_forward / _backward: no Lua call per step).
local options = require("tlua.options")
local tl = require("tlua")

local part = {}

-- b_ih + b_hh (both or neither given)
local function summed(b_ih, b_hh)
  if b_ih and b_hh then return b_ih + b_hh end
  return b_ih or b_hh
end

local ACTIVATIONS = { tanh = tl.tanh, relu = tl.relu }

local function kind(v)
  return tl.is_tensor(v) and "a tensor" or type(v)
end

-- a table argument of tensors (hx = {h, c}, w = {w_ih, w_hh, ...}): entries 1..required must be
-- tensors, the rest up to #names tensors or nil; form names it in the message ("{h, c}").
-- Called by a functional form: this function is level 1, the form 2, the user 3.
local function check_tensors(who, what, v, form, required, count)
  if type(v) ~= "table" then
    options.error(string.format("%s: %s expected %s (a table of tensors), got %s", who, what, form, kind(v)), 3)
  end
  for i = 1, count do
    local e = v[i]
    if not tl.is_tensor(e) and (i <= required or e ~= nil) then
      options.error(string.format("%s: %s expected %s (a table of tensors), got a table whose entry %d is %s", who,
        what, form, i, kind(e)), 3)
    end
  end
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > count then
      options.error(string.format("%s: %s expected %s (a table of tensors), got a table with the key %s", who, what,
        form, tostring(k)), 3)
    end
  end
end

-- reverse: a boolean or nil (false); level as check_tensors'
local function check_reverse(who, reverse)
  if reverse ~= nil and type(reverse) ~= "boolean" then
    options.error(string.format("%s: reverse must be a boolean, got %s", who, kind(reverse)), 3)
  end
  return reverse == true
end

-- the timesteps 1..T in the order a direction walks them
local function steps(T, reverse)
  if reverse then return T, 1, -1 end
  return 1, T, 1
end

local function as(t, dtype)
  if t == nil or t.dtype == dtype then return t end
  return t:to(dtype)
end

-- the states before each step, in time order, [T, N, H]: h0 then out's steps but the last one
-- the walk reaches
local function previous_states(out, h0, reverse)
  local T = out:size(1)
  local first = h0:unsqueeze(1)
  if T == 1 then return first end
  if reverse then return tl.cat({ out:narrow(1, 2, T - 1), first }, 1) end
  return tl.cat({ first, out:narrow(1, 1, T - 1) }, 1)
end

-- W's gradient sum_t d[t]^T prev[t] ([rows, H]) in one GEMM over every step
local function weight_grad(d, prev)
  local T, N = d:size(1), d:size(2)
  return tl.matmul(d:reshape(T * N, d:size(3)):t(), prev:reshape(T * N, prev:size(3)))
end

-- one LSTM direction without projection as one node: xw [T, N, 4H] (x W_ih^T + b_ih + b_hh),
-- h0, c0 [N, H], w_hh [4H, H] -> out [T, N, H], h_T, c_T; computes in xw's dtype (autocast's,
-- when it lowered xw), the gradients in their inputs' dtypes
local LSTMRun = tl.autograd.Function {
  name = "lstm_layer",
  forward = function(ctx, xw, h0, c0, w_hh, reverse)
    local dt = xw.dtype
    local w = as(w_hh, dt)
    local h, c = as(h0, dt), as(c0, dt)
    local out, h_last, c_last, workspaces, cells = tl._lstm_layer_forward(xw, h, c, w, reverse)
    ctx:save_for_backward(workspaces, cells, h, c, w, out)
    ctx.reverse, ctx.dtypes = reverse, { h0.dtype, c0.dtype, w_hh.dtype }
    return out, h_last, c_last
  end,
  backward = function(ctx, g_out, g_h, g_c)
    local workspaces, cells, h0, c0, w, out = table.unpack(ctx.saved_tensors)
    local dt, reverse, need = w.dtype, ctx.reverse, ctx.needs_input_grad
    local d, dh, dc = tl._lstm_layer_backward(g_out and as(g_out, dt), g_h and as(g_h, dt), g_c and as(g_c, dt),
      workspaces, cells, c0, w, reverse)
    local dw = need[4] and as(weight_grad(d, previous_states(out, h0, reverse)), ctx.dtypes[3]) or nil
    return d, as(dh, ctx.dtypes[1]), as(dc, ctx.dtypes[2]), dw
  end,
}

-- one GRU direction as one node: gi [T, N, 3H] (x W_ih^T + b_ih), h0 [N, H], w_hh [3H, H],
-- b_hh [3H] or nil -> out [T, N, H], h_T; dtypes as LSTMRun's
local GRURun = tl.autograd.Function {
  name = "gru_layer",
  forward = function(ctx, gi, h0, w_hh, b_hh, reverse)
    local dt = gi.dtype
    local w, b = as(w_hh, dt), as(b_hh, dt)
    local h = as(h0, dt)
    local xs = gi:unbind(1)
    local hs, ws = {}, {}
    local first, last, by = steps(#xs, reverse)
    for t = first, last, by do
      h, ws[t] = tl._gru_cell_forward(xs[t], tl.linear(h, w, b), h)
      hs[t] = h
    end
    local out = tl.stack(hs, 1)
    ctx:save_for_backward(ws, { as(h0, dt), w, out })
    ctx.reverse, ctx.dtypes = reverse, { h0.dtype, w_hh.dtype, b_hh and b_hh.dtype }
    return out, h
  end,
  backward = function(ctx, g_out, g_h)
    local ws, rest = table.unpack(ctx.saved_tensors)
    local h0, w, out = table.unpack(rest)
    local dt, reverse, need = w.dtype, ctx.reverse, ctx.needs_input_grad
    local T = #ws
    local gs = g_out and as(g_out, dt):contiguous():unbind(1) or {}
    local hs = out:unbind(1)
    local dh = as(g_h, dt)
    local dgi, dgh = {}, {}
    local first, last, by = steps(T, not reverse)
    local back = reverse and 1 or -1
    for t = first, last, by do
      local g = gs[t] or tl.zeros_like(hs[t])
      local di, dhh, dhp = tl._gru_cell_backward(g, dh, ws[t], hs[t + back] or h0)
      dgi[t], dgh[t] = di, dhh
      dh = dhp + tl.matmul(dhh, w)
    end
    local d_gh = tl.stack(dgh, 1)
    local dw = need[3] and as(weight_grad(d_gh, previous_states(out, h0, reverse)), ctx.dtypes[2]) or nil
    local db = need[4] and as(d_gh:sum({ 1, 2 }), ctx.dtypes[3]) or nil
    return tl.stack(dgi, 1), as(dh, ctx.dtypes[1]), dw, db
  end,
}

--- lstm_cell(x [N, I] or [I], {h [N, Hout], c [N, H]}, w_ih [4H, I], w_hh [4H, Hout], b_ih?, b_hh?,
-- w_hr? [Hout, H]) -> h', c': one LSTM step (gates i, f, g, o; Hout = H without w_hr): the two
-- projections, then one fused kernel (tl.lstm_cell_pointwise adds them)
function part.lstm_cell(x, hx, w_ih, w_hh, b_ih, b_hh, w_hr)
  check_tensors("lstm_cell", "hx", hx, "{h, c}", 2, 2)
  local h, c = tl.lstm_cell_pointwise(tl.linear(x, w_ih, b_ih), tl.linear(hx[1], w_hh, b_hh), hx[2])
  if w_hr then h = tl.linear(h, w_hr) end
  return h, c
end

--- gru_cell(x [N, I] or [I], h [N, H], w_ih [3H, I], w_hh [3H, H], b_ih?, b_hh?) -> h': one GRU
-- step (gates r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h)
function part.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return tl.gru_cell_pointwise(tl.linear(x, w_ih, b_ih), tl.linear(h, w_hh, b_hh), h)
end

--- rnn_tanh_cell(x, h, w_ih [H, I], w_hh [H, H], b_ih?, b_hh?) -> tanh(x W_ih^T + b_ih + h W_hh^T + b_hh);
-- rnn_relu_cell the same with relu
function part.rnn_tanh_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return (tl.linear(x, w_ih, b_ih) + tl.linear(h, w_hh, b_hh)):tanh()
end

function part.rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return (tl.linear(x, w_ih, b_ih) + tl.linear(h, w_hh, b_hh)):relu()
end

--- lstm_layer(x [T, N, I], h [N, Hout], c [N, H], w, reverse = false) -> out [T, N, Hout], h_T, c_T:
-- one direction of one LSTM layer; w = {w_ih, w_hh, b_ih?, b_hh?, w_hr?} (torch's layouts);
-- reverse walks from the last timestep to the first (out keeps the input's time order)
function part.lstm_layer(x, h, c, w, reverse)
  check_tensors("lstm_layer", "w", w, "{w_ih, w_hh, b_ih?, b_hh?, w_hr?}", 2, 5)
  reverse = check_reverse("lstm_layer", reverse)
  local xw = tl.linear(x, w[1], summed(w[3], w[4]))
  local w_hh, w_hr = w[2], w[5]
  if not w_hr then return LSTMRun(xw, h, c, w_hh, reverse) end
  -- projected: each step recorded (the fused cell op, then W_hr)
  local xs = xw:unbind(1)
  local outs = {}
  local first, last, by = steps(#xs, reverse)
  for t = first, last, by do
    h, c = tl.lstm_cell_pointwise(xs[t], tl.linear(h, w_hh), c)
    h = tl.linear(h, w_hr)
    outs[t] = h
  end
  return tl.stack(outs, 1), h, c
end

--- gru_layer(x [T, N, I], h [N, H], w = {w_ih, w_hh, b_ih?, b_hh?}, reverse = false) -> out [T, N, H], h_T
function part.gru_layer(x, h, w, reverse)
  check_tensors("gru_layer", "w", w, "{w_ih, w_hh, b_ih?, b_hh?}", 2, 4)
  reverse = check_reverse("gru_layer", reverse)
  return GRURun(tl.linear(x, w[1], w[3]), h, w[2], w[4], reverse)
end

--- rnn_layer(x [T, N, I], h [N, H], w = {w_ih, w_hh, b_ih?, b_hh?}, reverse = false,
-- nonlinearity = "tanh" | "relu") -> out [T, N, H], h_T
function part.rnn_layer(x, h, w, reverse, nonlinearity)
  check_tensors("rnn_layer", "w", w, "{w_ih, w_hh, b_ih?, b_hh?}", 2, 4)
  reverse = check_reverse("rnn_layer", reverse)
  local act = ACTIVATIONS[nonlinearity or "tanh"]
  if not act then
    options.error("rnn_layer: nonlinearity must be 'tanh' or 'relu', got " .. tostring(nonlinearity), 2)
  end
  local xs = tl.linear(x, w[1], summed(w[3], w[4])):unbind(1)
  local outs = {}
  local first, last, by = steps(#xs, reverse)
  for t = first, last, by do
    h = act(xs[t] + tl.linear(h, w[2]))
    outs[t] = h
  end
  return tl.stack(outs, 1), h
end

return part
