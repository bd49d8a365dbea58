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

local function leaves(...)
  local out = {}
  for i, x in ipairs({ ... }) do out[i] = x:detach():requires_grad_() end
  return table.unpack(out)
end

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
