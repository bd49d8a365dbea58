-- nn.LSTM, nn.GRU, nn.RNN and the cells against PyTorch goldens (float64 outputs, final states, gradients; spec/goldens/recurrent.py), gradcheck, dropout between layers, bad inputs (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradcheck = tl.autograd.gradcheck

local golden = dofile("spec/goldens/recurrent.lua")

local function T(v) return tl.tensor(v, { dtype = "float64" }) end

local function with(opts, extra)
  local t = {}
  for k, v in pairs(opts or {}) do t[k] = v end
  for k, v in pairs(extra) do t[k] = v end
  return t
end

-- the module of a golden case in float64, its parameters loaded by torch's state_dict names
local function build(cls, case)
  local m = cls(case.input_size, case.hidden_size, with(case.opts, { dtype = "float64" }))
  local sd = {}
  for name, v in pairs(case.params) do sd[name] = T(v) end
  m:load_state_dict(sd)
  return m
end

local CLASSES = { lstm = nn.LSTM, gru = nn.GRU, rnn = nn.RNN }
local TOL = 1e-12

describe("recurrent layers against PyTorch (float64)", function()
  local names = {}
  for name in pairs(golden) do
    if not name:find("cell") then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output and final states", function()
      local case = golden[name]
      local is_lstm = name:find("^lstm") ~= nil
      local m = build(CLASSES[name:match("^(%a+)_")], case)
      local x = T(case.input)
      local hx
      if case.h0 then hx = is_lstm and { T(case.h0), T(case.c0) } or T(case.h0) end
      local out, state = m(x, hx)
      assert.tensor_near(case.output, out, TOL, TOL, name .. " output")
      if is_lstm then
        assert.tensor_near(case.h_n, state[1], TOL, TOL, name .. " h_n")
        assert.tensor_near(case.c_n, state[2], TOL, TOL, name .. " c_n")
      else
        assert.tensor_near(case.h_n, state, TOL, TOL, name .. " h_n")
      end
    end)
    if golden[name].grads then
      it(name .. ": gradients of the parameters, the input and the initial states", function()
        local case = golden[name]
        local is_lstm = name:find("^lstm") ~= nil
        local m = build(CLASSES[name:match("^(%a+)_")], case)
        local x = T(case.input):requires_grad_()
        local h0, c0 = T(case.h0):requires_grad_(), is_lstm and T(case.c0):requires_grad_() or nil
        local out, state = m(x, is_lstm and { h0, c0 } or h0)
        local hn = is_lstm and state[1] or state
        local loss = (out * T(case.g_out)):sum() + (hn * T(case.g_h)):sum()
        if is_lstm then loss = loss + (state[2] * T(case.g_c)):sum() end
        loss:backward()
        for pname, p in m:named_parameters() do
          assert.is_not_nil(case.grads[pname], "golden has no gradient for " .. pname)
          assert.tensor_near(case.grads[pname], p.grad, 1e-10, 1e-12, name .. " grad " .. pname)
        end
        assert.tensor_near(case.grad_input, x.grad, 1e-10, 1e-12, name .. " grad input")
        assert.tensor_near(case.grad_h0, h0.grad, 1e-10, 1e-12, name .. " grad h0")
        if is_lstm then assert.tensor_near(case.grad_c0, c0.grad, 1e-10, 1e-12, name .. " grad c0") end
      end)
    end
  end

  it("names its parameters as PyTorch, in PyTorch's order", function()
    local case = golden.lstm_proj
    local m = nn.LSTM(3, 5, { num_layers = 2, bidirectional = true, proj_size = 2 })
    local ours = {}
    for name in m:named_parameters() do ours[#ours + 1] = name end
    assert.are.same({ "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_hr_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_hr_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse",
      "weight_hr_l1_reverse" }, ours)
    for name, p in m:named_parameters() do
      assert.are.same(#case.params[name], p.shape[1], name)
    end
  end)

  it("initialises every parameter from U(-1/sqrt(H), 1/sqrt(H))", function()
    tl.manual_seed(3)
    local H = 16
    for _, m in ipairs({ nn.LSTM(8, H, { num_layers = 2 }), nn.GRU(8, H), nn.RNN(8, H), nn.LSTMCell(8, H),
      nn.GRUCell(8, H) }) do
      local bound = 1 / math.sqrt(H)
      for name, p in m:named_parameters() do
        assert.is_true(p:abs():max():item() <= bound, name)
        -- spread over the range, not a constant
        assert.is_true(p:max():item() > bound / 2 and p:min():item() < -bound / 2, name)
      end
    end
  end)
end)

describe("recurrent cells against PyTorch (float64)", function()
  local cells = {
    lstm_cell = nn.LSTMCell, lstm_cell_unbatched = nn.LSTMCell, gru_cell = nn.GRUCell,
    gru_cell_unbatched = nn.GRUCell, rnn_cell_tanh = nn.RNNCell, rnn_cell_relu = nn.RNNCell,
  }
  for name, cls in pairs(cells) do
    it(name, function()
      local case = golden[name]
      local m = build(cls, case)
      if cls == nn.LSTMCell then
        local h, c = m(T(case.input), case.h and { T(case.h), T(case.c) } or nil)
        assert.tensor_near(case.h_out, h, TOL, TOL, name .. " h")
        assert.tensor_near(case.c_out, c, TOL, TOL, name .. " c")
      else
        local h = m(T(case.input), case.h and T(case.h) or nil)
        assert.tensor_near(case.h_out, h, TOL, TOL, name .. " h")
      end
    end)
  end

  it("an LSTM of one layer is its cell stepped over time", function()
    tl.manual_seed(5)
    local lstm = nn.LSTM(3, 4, { dtype = "float64" })
    local cell = nn.LSTMCell(3, 4, { dtype = "float64" })
    cell:load_state_dict({ weight_ih = lstm.weight_ih_l0, weight_hh = lstm.weight_hh_l0, bias_ih = lstm.bias_ih_l0,
      bias_hh = lstm.bias_hh_l0 })
    local x = tl.randn(6, 2, 3):double()
    local out, hc = lstm(x)
    local h, c
    for t = 1, 6 do
      h, c = cell(x[t], h and { h, c } or nil)
      assert.tensor_near(out[t], h, 1e-14, 1e-14, "step " .. t)
    end
    assert.tensor_near(hc[1][1], h, 1e-14, 1e-14)
    assert.tensor_near(hc[2][1], c, 1e-14, 1e-14)
  end)
end)

describe("recurrent gradcheck (float64)", function()
  -- every parameter, the input and the initial states as gradcheck inputs
  local function check(m, x, hx, is_lstm)
    local inputs = { x }
    if is_lstm then
      inputs[2], inputs[3] = hx[1], hx[2]
    elseif hx then
      inputs[2] = hx
    end
    local first = #inputs
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    assert.is_true(gradcheck(function(xi, a, b)
      if is_lstm then
        local out, s = m(xi, { a, b })
        return { out, s[1], s[2] }
      end
      local out, h = m(xi, a)
      return { out, h }
    end, inputs))
    return first
  end

  local function dbl(...) return tl.randn(...):double():requires_grad_() end

  it("LSTM: 2 layers, bidirectional, projected, batch_first", function()
    tl.manual_seed(11)
    local m = nn.LSTM(2, 3, { num_layers = 2, bidirectional = true, proj_size = 2, batch_first = true,
      dtype = "float64" })
    check(m, dbl(2, 3, 2), { dbl(4, 2, 2), dbl(4, 2, 3) }, true)
  end)

  it("GRU: 2 layers, bidirectional", function()
    tl.manual_seed(12)
    local m = nn.GRU(2, 3, { num_layers = 2, bidirectional = true, dtype = "float64" })
    check(m, dbl(3, 2, 2), dbl(4, 2, 3), false)
  end)

  it("RNN (relu and tanh) and the cells, unbatched", function()
    tl.manual_seed(13)
    check(nn.RNN(2, 3, { nonlinearity = "tanh", dtype = "float64" }), dbl(3, 2), dbl(1, 3), false)
    local cell = nn.LSTMCell(2, 3, { dtype = "float64" })
    local params = cell:parameters()
    assert.is_true(gradcheck(function(x, h, c)
      local h1, c1 = cell(x, { h, c })
      return { h1, c1 }
    end, { dbl(2), dbl(3), dbl(3), table.unpack(params) }))
    local gru = nn.GRUCell(2, 3, { dtype = "float64" })
    assert.is_true(gradcheck(function(x, h) return gru(x, h) end,
      { dbl(2, 2), dbl(2, 3), table.unpack(gru:parameters()) }))
    -- relu away from its kink: positive pre-activations
    local rnn = nn.RNNCell(2, 3, { nonlinearity = "relu", dtype = "float64" })
    tl.no_grad(function() rnn.bias_ih:fill_(2) end)
    assert.is_true(gradcheck(function(x, h) return rnn(x, h) end,
      { dbl(2, 2), dbl(2, 3), table.unpack(rnn:parameters()) }))
  end)
end)

describe("dropout between recurrent layers", function()
  it("applies F.dropout to each layer's output but the last, in training mode only", function()
    tl.manual_seed(21)
    local m = nn.LSTM(3, 4, { num_layers = 2, dropout = 0.5, dtype = "float64" })
    local l0 = nn.LSTM(3, 4, { dtype = "float64" })
    local l1 = nn.LSTM(4, 4, { dtype = "float64" })
    local function part(layer)
      local sd = {}
      for _, k in ipairs({ "weight_ih", "weight_hh", "bias_ih", "bias_hh" }) do
        sd[k .. "_l0"] = m[k .. "_l" .. layer]
      end
      return sd
    end
    l0:load_state_dict(part(0))
    l1:load_state_dict(part(1))
    local x = tl.randn(7, 5, 3):double()

    -- training: the same draws as a dropout of layer 0's output under the same seed
    tl.manual_seed(99)
    local out, hc = m(x)
    tl.manual_seed(99)
    local mid, s0 = l0(x)
    local ref, s1 = l1(F.dropout(mid, 0.5, true))
    assert.tensor_near(ref, out, 1e-14, 1e-14)
    assert.tensor_near(tl.cat({ s0[1], s1[1] }, 1), hc[1], 1e-14, 1e-14)
    -- and it does change the result (not the identity)
    local plain = l1(mid)
    assert.is_true((plain - out):abs():max():item() > 1e-3)

    -- eval: no dropout at all, whatever the seed
    m:eval()
    tl.manual_seed(1)
    local e1 = m(x)
    tl.manual_seed(2)
    local e2 = m(x)
    assert.tensor_equal(e1, e2)
    assert.tensor_near(plain, e1, 1e-14, 1e-14)
  end)

  it("drops about p of the inter-layer activations (statistical)", function()
    tl.manual_seed(22)
    -- the mask shows in the gradient of layer 1's w_ih, outer(g, dropout(layer 0's output)): a
    -- dropped unit leaves its column all zeros
    local m = nn.RNN(1, 200, { num_layers = 2, dropout = 0.3, dtype = "float64" })
    tl.no_grad(function() m.weight_hh_l1:zero_() end)
    local x = tl.randn(1, 1, 1):double()
    local out = m(x)
    out:sum():backward()
    local col = m.weight_ih_l1.grad:abs():sum(1)
    local zeros = col:eq(0):sum():item()
    assert.is_true(zeros > 200 * 0.3 - 30 and zeros < 200 * 0.3 + 30, "zeros " .. zeros)
  end)
end)

describe("recurrent layers reject bad input", function()
  it("names the option, the size or the shape", function()
    assert.error_matches(function() nn.LSTM(3, 4, { bidirectinal = true }) end,
      { "nn.LSTM", "unknown option 'bidirectinal'", "bidirectional" })
    assert.error_matches(function() nn.GRU(3, 4, { proj_size = 2 }) end, { "nn.GRU", "unknown option 'proj_size'" })
    assert.error_matches(function() nn.LSTMCell(3, 4, { num_layers = 2 }) end, { "nn.LSTMCell", "num_layers" })
    assert.error_matches(function() nn.LSTM(0, 4) end, { "nn.LSTM", "input_size", "positive", "0" })
    assert.error_matches(function() nn.GRU(3, 4, { num_layers = 0 }) end, { "nn.GRU", "num_layers" })
    assert.error_matches(function() nn.LSTM(3, 4, { dropout = 1.5 }) end, { "nn.LSTM", "dropout", "1.5" })
    assert.error_matches(function() nn.LSTM(3, 4, { proj_size = 4 }) end, { "nn.LSTM", "proj_size", "smaller" })
    assert.error_matches(function() nn.RNN(3, 4, { nonlinearity = "gelu" }) end, { "nn.RNN", "nonlinearity", "gelu" })
    assert.error_matches(function() nn.LSTM(3, 4, { num_layers = 1.5 }) end, { "nn.LSTM", "num_layers", "integer" })

    local lstm = nn.LSTM(3, 4, { num_layers = 2 })
    assert.error_matches(function() lstm(tl.randn(5, 2, 6)) end,
      { "nn.LSTM", "input", "size 3", "[5, 2, 6]" })
    assert.error_matches(function() lstm(tl.randn(5, 2, 2, 3)) end, { "nn.LSTM", "2 or 3 dims", "[5, 2, 2, 3]" })
    assert.error_matches(function() lstm(tl.randn(5, 2, 3), { tl.zeros(1, 2, 4), tl.zeros(2, 2, 4) }) end,
      { "nn.LSTM", "h0", "[2, 2, 4]", "[1, 2, 4]" })
    assert.error_matches(function() lstm(tl.randn(5, 2, 3), { tl.zeros(2, 2, 4), tl.zeros(2, 3, 4) }) end,
      { "nn.LSTM", "c0", "[2, 2, 4]", "[2, 3, 4]" })
    assert.error_matches(function() lstm(tl.randn(5, 2, 3), tl.zeros(2, 2, 4)) end, { "nn.LSTM", "{h0, c0}", "tensor" })
    assert.error_matches(function() lstm(tl.randn(5, 2, 3):double()) end, { "nn.LSTM", "float32", "float64" })
    assert.error_matches(function() lstm(tl.randn(5, 3), { tl.zeros(2, 1, 4), tl.zeros(2, 1, 4) }) end,
      { "nn.LSTM", "h0", "[2, 4]" })
    local gru = nn.GRU(3, 4, { bidirectional = true })
    assert.error_matches(function() gru(tl.randn(5, 2, 3), tl.zeros(1, 2, 4)) end, { "nn.GRU", "h0", "[2, 2, 4]" })
    assert.error_matches(function() gru(tl.randn(5, 2, 3), { tl.zeros(2, 2, 4) }) end, { "nn.GRU", "h0", "table" })
    assert.error_matches(function() gru("x") end, { "nn.GRU", "input", "tensor", "string" })
    local cell = nn.GRUCell(3, 4)
    assert.error_matches(function() cell(tl.randn(2, 3), tl.zeros(3, 4)) end, { "nn.GRUCell", "h", "[2, 4]", "[3, 4]" })
    assert.error_matches(function() cell(tl.randn(2, 5)) end, { "nn.GRUCell", "size 3" })
  end)

  it("the functional forms check their table arguments ({h, c}, w) and reverse", function()
    local x, h, c = tl.randn(2, 3), tl.zeros(2, 4), tl.zeros(2, 4)
    local w_ih, w_hh = tl.randn(16, 3), tl.randn(16, 4)
    assert.error_matches(function() return F.lstm_cell(x, h, w_ih, w_hh) end,
      { "lstm_cell: hx expected {h, c} (a table of tensors), got a tensor" })
    assert.error_matches(function() return F.lstm_cell(x, { h }, w_ih, w_hh) end,
      { "lstm_cell: hx expected {h, c} (a table of tensors), got a table whose entry 2 is nil" })
    assert.error_matches(function() return F.lstm_cell(x, { h = h, c = c }, w_ih, w_hh) end,
      { "lstm_cell: hx expected {h, c} (a table of tensors), got a table whose entry 1 is nil" })
    local ok, err = pcall(function() local y = F.lstm_cell(x, h, w_ih, w_hh) return y end)
    assert.is_false(ok)
    assert.matches("^spec/recurrent_spec%.lua:%d+: lstm_cell: ", err)
    local xs = tl.randn(5, 2, 3)
    assert.error_matches(function() return F.lstm_layer(xs, h, c, w_ih) end,
      { "lstm_layer: w expected {w_ih, w_hh, b_ih?, b_hh?, w_hr?} (a table of tensors), got a tensor" })
    assert.error_matches(function() return F.lstm_layer(xs, h, c, { w_ih, w_hh, 5 }) end,
      { "lstm_layer: w expected {w_ih, w_hh, b_ih?, b_hh?, w_hr?} (a table of tensors), got a table whose entry 3 is number" })
    assert.error_matches(function() return F.lstm_layer(xs, h, c, { w_ih, w_hh }, "yes") end,
      { "lstm_layer: reverse must be a boolean, got string" })
    local g_ih, g_hh = tl.randn(12, 3), tl.randn(12, 4)
    assert.error_matches(function() return F.gru_layer(xs, h, g_ih) end,
      { "gru_layer: w expected {w_ih, w_hh, b_ih?, b_hh?} (a table of tensors), got a tensor" })
    assert.error_matches(function() return F.gru_layer(xs, h, { g_ih, g_hh, nil, nil, g_hh }) end,
      { "gru_layer: w expected {w_ih, w_hh, b_ih?, b_hh?} (a table of tensors), got a table with the key 5" })
    assert.error_matches(function() return F.rnn_layer(xs, h, { tl.randn(4, 3) }) end,
      { "rnn_layer: w expected {w_ih, w_hh, b_ih?, b_hh?} (a table of tensors), got a table whose entry 2 is nil" })
    assert.error_matches(function() return F.rnn_layer(xs, h, { tl.randn(4, 3), tl.randn(4, 4) }, 1) end,
      { "rnn_layer: reverse must be a boolean, got number" })
    -- the right forms still run
    local h1, c1 = F.lstm_cell(x, { h, c }, w_ih, w_hh)
    assert.are.same({ 2, 4 }, h1.shape)
    assert.are.same({ 2, 4 }, c1.shape)
    assert.are.same({ 5, 2, 4 }, F.lstm_layer(xs, h, c, { w_ih, w_hh }, true).shape)
    assert.are.same({ 5, 2, 4 }, F.gru_layer(xs, h, { g_ih, g_hh }).shape)
    assert.are.same({ 5, 2, 4 }, F.rnn_layer(xs, h, { tl.randn(4, 3), tl.randn(4, 4) }, false, "relu").shape)
  end)
end)

describe("recurrent layers on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the recurrent layers did not run")
    return
  end

  for _, cls in ipairs({ "LSTM", "GRU", "RNN" }) do
    it(cls .. " (2 layers, bidirectional, batch_first) gives the CPU's values and gradients", function()
      tl.manual_seed(31)
      local cpu = nn[cls](5, 8, { num_layers = 2, bidirectional = true, batch_first = true })
      local gpu = nn[cls](5, 8, { num_layers = 2, bidirectional = true, batch_first = true, device = "cuda" })
      gpu:load_state_dict(cpu:state_dict())
      local x = tl.randn(3, 7, 5)
      local out_c, s_c = cpu(x)
      local out_g, s_g = gpu(x:to("cuda"))
      assert.are.equal("cuda:0", out_g.device)
      assert.tensor_near(out_c, out_g:to("cpu"), 1e-4, 1e-5)
      local hc = cls == "LSTM" and s_c[1] or s_c
      local hg = cls == "LSTM" and s_g[1] or s_g
      assert.tensor_near(hc, hg:to("cpu"), 1e-4, 1e-5)
      out_c:square():sum():backward()
      out_g:square():sum():backward()
      local gp = gpu:parameters()
      for i, p in ipairs(cpu:parameters()) do assert.tensor_near(p.grad, gp[i].grad:to("cpu"), 1e-3, 1e-4) end
    end)
  end

  it("LSTMCell and GRUCell give the CPU's values", function()
    tl.manual_seed(32)
    for _, cls in ipairs({ nn.LSTMCell, nn.GRUCell }) do
      local cpu = cls(5, 8)
      local gpu = cls(5, 8, { device = "cuda" })
      gpu:load_state_dict(cpu:state_dict())
      local x = tl.randn(4, 5)
      assert.tensor_near(cpu(x), gpu(x:to("cuda")):to("cpu"), 1e-4, 1e-5)
    end
  end)
end)
