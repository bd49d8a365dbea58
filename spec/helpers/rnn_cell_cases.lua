-- The kernel sweep and gradcheck cases of the fused LSTM / GRU cell ops (family RNN_CELL): every kernel (forward and backward, through autograd and through the raw forms tl._lstm_cell_backward / tl._gru_cell_backward with their optional gradients) against the cell math written as Lua loops over the stored values in float64.
local tl = require("tlua")

local M = {}

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function tanh(x)
  if x > 20 then return 1 elseif x < -20 then return -1 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

-- a [N][k * H] table's entry (row r, gate k (0-based), column j), 0 for a nil table
local function at(t, r, k, H, j)
  if not t then return 0 end
  return t[r][k * H + j]
end

-- rows N x width zeros
local function matrix(N, width)
  local m = {}
  for r = 1, N do
    m[r] = {}
    for j = 1, width do m[r][j] = 0.0 end
  end
  return m
end

--- lstm(gates, gates2?, c_prev, dh?, dh2?, dc?) -> h, c, d_gates, d_c_prev: the LSTM cell and its
-- gradients in float64 (tables [N][4H], [N][H])
function M.lstm(a, b, cp, dh1, dh2, dc1)
  local N, H = #cp, #cp[1]
  local h, c, dg, dcp = matrix(N, H), matrix(N, H), matrix(N, 4 * H), matrix(N, H)
  for r = 1, N do
    for j = 1, H do
      local i = sigmoid(at(a, r, 0, H, j) + at(b, r, 0, H, j))
      local f = sigmoid(at(a, r, 1, H, j) + at(b, r, 1, H, j))
      local g = tanh(at(a, r, 2, H, j) + at(b, r, 2, H, j))
      local o = sigmoid(at(a, r, 3, H, j) + at(b, r, 3, H, j))
      local cn = f * cp[r][j] + i * g
      local tc = tanh(cn)
      c[r][j], h[r][j] = cn, o * tc
      local dh = (dh1 and dh1[r][j] or 0) + (dh2 and dh2[r][j] or 0)
      local dc = (dc1 and dc1[r][j] or 0) + dh * o * (1 - tc * tc)
      dg[r][j] = dc * g * i * (1 - i)
      dg[r][H + j] = dc * cp[r][j] * f * (1 - f)
      dg[r][2 * H + j] = dc * i * (1 - g * g)
      dg[r][3 * H + j] = dh * tc * o * (1 - o)
      dcp[r][j] = dc * f
    end
  end
  return h, c, dg, dcp
end

--- gru(gi, gh, h_prev, dh?, dh2?) -> h, d_gi, d_gh, d_h_prev: the GRU cell and its gradients
function M.gru(gi, gh, hp, dh1, dh2)
  local N, H = #hp, #hp[1]
  local h, dgi, dgh, dhp = matrix(N, H), matrix(N, 3 * H), matrix(N, 3 * H), matrix(N, H)
  for r = 1, N do
    for j = 1, H do
      local rg = sigmoid(gi[r][j] + gh[r][j])
      local z = sigmoid(gi[r][H + j] + gh[r][H + j])
      local hn = gh[r][2 * H + j]
      local n = tanh(gi[r][2 * H + j] + rg * hn)
      h[r][j] = (1 - z) * n + z * hp[r][j]
      local dh = (dh1 and dh1[r][j] or 0) + (dh2 and dh2[r][j] or 0)
      local dn = dh * (1 - z) * (1 - n * n)
      local dz = dh * (hp[r][j] - n) * z * (1 - z)
      local dr = dn * hn * rg * (1 - rg)
      dgi[r][j], dgi[r][H + j], dgi[r][2 * H + j] = dr, dz, dn
      dgh[r][j], dgh[r][H + j], dgh[r][2 * H + j] = dr, dz, dn * rg
      dhp[r][j] = dh * z
    end
  end
  return h, dgi, dgh, dhp
end

local leaves = require("helpers.sweep_helpers").leaves

-- N = 3 rows, H = 2 (the backward through autograd: h's and c's gradients given)
M.sweep = {
  lstm_cell_pointwise = {
    inputs = function(G) return { G.normal(3, 8), G.normal(3, 8), G.normal(3, 2), G.normal(3, 2), G.normal(3, 2) } end,
    run = function(a, b, cp, gh, gc)
      a, b, cp = leaves(a, b, cp)
      local h, c = tl.lstm_cell_pointwise(a, b, cp)
      local g = tl.autograd.grad({ h, c }, { a, b, cp }, { grad_outputs = { gh, gc } })
      return { h:detach(), c:detach(), g[1], g[2], g[3] }
    end,
    reference = function(_, a, b, cp, gh, gc)
      local h, c, dg, dcp = M.lstm(a, b, cp, gh, nil, gc)
      return { h, c, dg, dg, dcp }
    end,
  },
  -- the raw backward: h's gradient in two parts, c's absent, then only c's
  lstm_cell_pointwise_backward = {
    inputs = function(G) return { G.normal(4, 12), G.normal(4, 3), G.normal(4, 3), G.normal(4, 3), G.normal(4, 3) } end,
    run = function(gates, cp, dh, dh2, dc)
      local _, c, ws = tl._lstm_cell_forward(gates, nil, cp)
      local dg1, dcp1 = tl._lstm_cell_backward(dh, dh2, nil, ws, cp, c, true)
      local dg2 = tl._lstm_cell_backward(nil, nil, dc, ws, cp, c, false)
      return { dg1, dcp1, dg2 }
    end,
    reference = function(_, gates, cp, dh, dh2, dc)
      local _, _, dg1, dcp1 = M.lstm(gates, nil, cp, dh, dh2, nil)
      local _, _, dg2 = M.lstm(gates, nil, cp, nil, nil, dc)
      return { dg1, dcp1, dg2 }
    end,
  },
  gru_cell_pointwise = {
    inputs = function(G) return { G.normal(3, 6), G.normal(3, 6), G.normal(3, 2), G.normal(3, 2) } end,
    run = function(gi, gh, hp, g)
      gi, gh, hp = leaves(gi, gh, hp)
      local h = tl.gru_cell_pointwise(gi, gh, hp)
      h:backward(g)
      return { h:detach(), gi.grad, gh.grad, hp.grad }
    end,
    reference = function(_, gi, gh, hp, g)
      local h, dgi, dgh, dhp = M.gru(gi, gh, hp, g)
      return { h, dgi, dgh, dhp }
    end,
  },
  gru_cell_pointwise_backward = {
    inputs = function(G) return { G.normal(4, 9), G.normal(4, 9), G.normal(4, 3), G.normal(4, 3), G.normal(4, 3) } end,
    run = function(gi, gh, hp, dh, dh2)
      local _, ws = tl._gru_cell_forward(gi, gh, hp)
      local a, b, c = tl._gru_cell_backward(dh, dh2, ws, hp)
      return { a, b, c }
    end,
    reference = function(_, gi, gh, hp, dh, dh2)
      local _, dgi, dgh, dhp = M.gru(gi, gh, hp, dh, dh2)
      return { dgi, dgh, dhp }
    end,
  },
}

-- a one-layer LSTM over T steps and its gradients by backpropagation through time, in Lua loops
-- (x [T][N][I], h0, c0 [N][H], w_ih [4H][I], w_hh [4H][H], b_ih, b_hh [4H], g [T][N][H] the
-- output's gradient): y, h_T, c_T, dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh
function M.lstm_sequence(x, h0, c0, w_ih, w_hh, b_ih, b_hh, g)
  local T, N, I, H = #x, #x[1], #x[1][1], #h0[1]
  local function gates(xt, h)
    local out = matrix(N, 4 * H)
    for r = 1, N do
      for k = 1, 4 * H do
        local v = b_ih[k] + b_hh[k]
        for j = 1, I do v = v + xt[r][j] * w_ih[k][j] end
        for j = 1, H do v = v + h[r][j] * w_hh[k][j] end
        out[r][k] = v
      end
    end
    return out
  end
  local hs, cs, gs, ys = { [0] = h0 }, { [0] = c0 }, {}, {}
  for t = 1, T do
    gs[t] = gates(x[t], hs[t - 1])
    hs[t], cs[t] = M.lstm(gs[t], nil, cs[t - 1])
    ys[t] = hs[t]
  end
  local dx, dw_ih, dw_hh, db = {}, matrix(4 * H, I), matrix(4 * H, H), {}
  for k = 1, 4 * H do db[k] = 0.0 end
  local dh, dc = matrix(N, H), matrix(N, H)
  for t = T, 1, -1 do
    local _, _, dg, dcp = M.lstm(gs[t], nil, cs[t - 1], g[t], dh, dc)
    dx[t], dh, dc = matrix(N, I), matrix(N, H), dcp
    for r = 1, N do
      for k = 1, 4 * H do
        local d = dg[r][k]
        db[k] = db[k] + d
        for j = 1, I do
          dx[t][r][j] = dx[t][r][j] + d * w_ih[k][j]
          dw_ih[k][j] = dw_ih[k][j] + d * x[t][r][j]
        end
        for j = 1, H do
          dh[r][j] = dh[r][j] + d * w_hh[k][j]
          dw_hh[k][j] = dw_hh[k][j] + d * hs[t - 1][r][j]
        end
      end
    end
  end
  return ys, hs[T], cs[T], dx, dh, dc, dw_ih, dw_hh, db, db
end

-- nn.LSTM on cuDNN (nn.RNNBase.use_cudnn, CUDA only: the sweep's #cuda block runs it): the four
-- kernels of family RNN_DNN through one forward and backward
M.sweep.rnn_dnn = {
  inputs = function(G)
    return { G.normal(3, 2, 3), G.normal(1, 2, 2), G.normal(1, 2, 2), G.normal(8, 3), G.normal(8, 2), G.normal(8),
      G.normal(8), G.normal(3, 2, 2) }
  end,
  run = function(x, h0, c0, w_ih, w_hh, b_ih, b_hh, g)
    local m = tl.nn.LSTM(3, 2, { dtype = x.dtype, device = x.device })
    m.use_cudnn = true
    m:load_state_dict({ weight_ih_l0 = w_ih, weight_hh_l0 = w_hh, bias_ih_l0 = b_ih, bias_hh_l0 = b_hh })
    x, h0, c0 = leaves(x, h0, c0)
    local y, s = m(x, { h0, c0 })
    local p = { m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0 }
    local d = tl.autograd.grad({ y }, { x, h0, c0, p[1], p[2], p[3], p[4] }, { grad_outputs = { g } })
    return { y:detach(), s[1][1]:detach(), s[2][1]:detach(), d[1], d[2][1], d[3][1], d[4], d[5], d[6], d[7] }
  end,
  reference = function(_, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g)
    return { M.lstm_sequence(x, h0[1], c0[1], w_ih, w_hh, b_ih, b_hh, g) }
  end,
  tolerance = { float16 = { 1e-2, 1e-2 }, float32 = { 1e-4, 1e-5 } },
}
-- which case covers a kernel's op (an op not listed is its own case)
M.case_of_op = {
  rnn_dnn_layout = "rnn_dnn", rnn_dnn_backward_data = "rnn_dnn", rnn_dnn_backward_weight = "rnn_dnn",
}

local function input(...) return tl.randn(...):double():requires_grad_() end

M.gradcheck = {
  lstm_cell_pointwise = {
    { function(g, c)
        local h, c1 = tl.lstm_cell_pointwise(g, c)
        return { h, c1 }
      end, { input(3, 8), input(3, 2) } },
    -- two gate inputs, unbatched; and only h used
    { function(a, b, c)
        local h, c1 = tl.lstm_cell_pointwise(a, b, c)
        return { h, c1 }
      end, { input(12), input(12), input(3) } },
    { function(g, c) return (tl.lstm_cell_pointwise(g, c)) end, { input(2, 1, 4), input(2, 1, 1) } },
  },
  gru_cell_pointwise = {
    { function(gi, gh, h) return tl.gru_cell_pointwise(gi, gh, h) end, { input(3, 6), input(3, 6), input(3, 2) } },
    { function(gi, gh, h) return tl.gru_cell_pointwise(gi, gh, h) end, { input(9), input(9), input(3) } },
  },
}

return M
