-- tl.nn.functional's recurrent forms (merged into tl.nn.functional by functional.lua): the LSTM, GRU and RNN cells and the runs of one layer's direction over a sequence, composed of tensor ops (autograd through them).
--
-- Weights in PyTorch's layout and gate order: LSTM w_ih [4H, I] (gates i, f, g, o), GRU [3H, I]
-- (r, z, n; the n gate takes r * (W_hn h + b_hn)), RNN [H, I]. A sequence run projects the
-- input of every timestep with one matmul (x W_ih^T + b), then loops over time with h W_hh^T.
local tl = require("tlua")

local part = {}

-- the gates g [..., 4H] of an LSTM step with the cell state c: the new h (projected by w_hr when
-- given) and c
local function lstm_gates(g, c, w_hr)
  local i, f, cand, o = table.unpack(g:chunk(4, -1))
  c = f:sigmoid() * c + i:sigmoid() * cand:tanh()
  local h = o:sigmoid() * c:tanh()
  if w_hr then h = tl.linear(h, w_hr) end
  return h, c
end

-- the new h of a GRU step from gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh ([..., 3H])
local function gru_gates(gi, gh, h)
  local size = gi:size(-1) // 3
  local rz = (gi:narrow(-1, 1, 2 * size) + gh:narrow(-1, 1, 2 * size)):sigmoid()
  local r, z = table.unpack(rz:chunk(2, -1))
  local n = (gi:narrow(-1, 2 * size + 1, size) + r * gh:narrow(-1, 2 * size + 1, size)):tanh()
  return n + z * (h - n)
end

-- b_ih + b_hh (both or neither given)
local function summed(b_ih, b_hh)
  if b_ih and b_hh then return b_ih + b_hh end
  return b_ih or b_hh
end

local ACTIVATIONS = { tanh = tl.tanh, relu = tl.relu }

--- lstm_cell(x [N, I] or [I], {h [N, Hout], c [N, H]}, w_ih [4H, I], w_hh [4H, Hout], b_ih?, b_hh?,
-- w_hr? [Hout, H]) -> h', c': one LSTM step (gates i, f, g, o; Hout = H without w_hr)
function part.lstm_cell(x, hx, w_ih, w_hh, b_ih, b_hh, w_hr)
  local g = tl.linear(x, w_ih, b_ih) + tl.linear(hx[1], w_hh, b_hh)
  return lstm_gates(g, hx[2], w_hr)
end

--- gru_cell(x [N, I] or [I], h [N, H], w_ih [3H, I], w_hh [3H, H], b_ih?, b_hh?) -> h': one GRU
-- step (gates r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h)
function part.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return gru_gates(tl.linear(x, w_ih, b_ih), tl.linear(h, w_hh, b_hh), h)
end

--- rnn_tanh_cell(x, h, w_ih [H, I], w_hh [H, H], b_ih?, b_hh?) -> tanh(x W_ih^T + b_ih + h W_hh^T + b_hh);
-- rnn_relu_cell the same with relu
function part.rnn_tanh_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return (tl.linear(x, w_ih, b_ih) + tl.linear(h, w_hh, b_hh)):tanh()
end

function part.rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh)
  return (tl.linear(x, w_ih, b_ih) + tl.linear(h, w_hh, b_hh)):relu()
end

-- the timesteps 1..T in the order a direction walks them
local function steps(T, reverse)
  if reverse then return T, 1, -1 end
  return 1, T, 1
end

--- lstm_layer(x [T, N, I], h [N, Hout], c [N, H], w, reverse = false) -> out [T, N, Hout], h_T, c_T:
-- one direction of one LSTM layer; w = {w_ih, w_hh, b_ih?, b_hh?, w_hr?} (torch's layouts);
-- reverse walks from the last timestep to the first (out keeps the input's time order)
function part.lstm_layer(x, h, c, w, reverse)
  local xw = tl.linear(x, w[1], summed(w[3], w[4]))
  local outs = {}
  local first, last, by = steps(x:size(1), reverse)
  for t = first, last, by do
    h, c = lstm_gates(xw[t] + tl.linear(h, w[2]), c, w[5])
    outs[t] = h
  end
  return tl.stack(outs, 1), h, c
end

--- gru_layer(x [T, N, I], h [N, H], w = {w_ih, w_hh, b_ih?, b_hh?}, reverse = false) -> out [T, N, H], h_T
function part.gru_layer(x, h, w, reverse)
  local gi = tl.linear(x, w[1], w[3])
  local outs = {}
  local first, last, by = steps(x:size(1), reverse)
  for t = first, last, by do
    h = gru_gates(gi[t], tl.linear(h, w[2], w[4]), h)
    outs[t] = h
  end
  return tl.stack(outs, 1), h
end

--- rnn_layer(x [T, N, I], h [N, H], w = {w_ih, w_hh, b_ih?, b_hh?}, reverse = false,
-- nonlinearity = "tanh" | "relu") -> out [T, N, H], h_T
function part.rnn_layer(x, h, w, reverse, nonlinearity)
  local act = ACTIVATIONS[nonlinearity or "tanh"]
  if not act then
    error("rnn_layer: nonlinearity must be 'tanh' or 'relu', got " .. tostring(nonlinearity), 2)
  end
  local xw = tl.linear(x, w[1], summed(w[3], w[4]))
  local outs = {}
  local first, last, by = steps(x:size(1), reverse)
  for t = first, last, by do
    h = act(xw[t] + tl.linear(h, w[2]))
    outs[t] = h
  end
  return tl.stack(outs, 1), h
end

return part
