-- The LSTM / GRU cell math composed of tensor ops (chunk, sigmoid, tanh, mul, add; autograd through them): the implementation nn.functional's recurrent forms had before the fused cell ops, kept as an independent reference for them (spec/rnn_cell_spec.lua).
local tl = require("tlua")

local M = {}

--- lstm(gates [..., 4H], c_prev [..., H]) -> h, c: gates i, f, g, o
function M.lstm(g, c)
  local i, f, cand, o = table.unpack(g:chunk(4, -1))
  c = f:sigmoid() * c + i:sigmoid() * cand:tanh()
  return o:sigmoid() * c:tanh(), c
end

--- gru(gi [..., 3H], gh [..., 3H], h_prev [..., H]) -> h: gates r, z, n
function M.gru(gi, gh, h)
  local size = gi:size(-1) // 3
  local rz = (gi:narrow(-1, 1, 2 * size) + gh:narrow(-1, 1, 2 * size)):sigmoid()
  local r, z = table.unpack(rz:chunk(2, -1))
  local n = (gi:narrow(-1, 2 * size + 1, size) + r * gh:narrow(-1, 2 * size + 1, size)):tanh()
  return n + z * (h - n)
end

--- lstm_layer(x [T, N, I], h, c, {w_ih, w_hh, b_ih?, b_hh?}, reverse) -> out, h_T, c_T: one direction
function M.lstm_layer(x, h, c, w, reverse)
  local outs = {}
  local first, last, by = 1, x:size(1), 1
  if reverse then first, last, by = last, first, -1 end
  for t = first, last, by do
    h, c = M.lstm(tl.linear(x[t], w[1], w[3]) + tl.linear(h, w[2], w[4]), c)
    outs[t] = h
  end
  return tl.stack(outs, 1), h, c
end

--- gru_layer(x [T, N, I], h, {w_ih, w_hh, b_ih?, b_hh?}, reverse) -> out, h_T
function M.gru_layer(x, h, w, reverse)
  local outs = {}
  local first, last, by = 1, x:size(1), 1
  if reverse then first, last, by = last, first, -1 end
  for t = first, last, by do
    h = M.gru(tl.linear(x[t], w[1], w[3]), tl.linear(h, w[2], w[4]), h)
    outs[t] = h
  end
  return tl.stack(outs, 1), h
end

return M
