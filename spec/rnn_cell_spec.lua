-- The fused cell ops tl.lstm_cell_pointwise / tl.gru_cell_pointwise and the fused layer runs of nn.LSTM / nn.GRU against the composed tensor-op math (spec/helpers/recurrent_reference.lua) in float64, values and gradients; every floating dtype, strided inputs, autocast, bad inputs (#cuda: CPU against CUDA).
local tl = require("tlua")
local nn = tl.nn
local R = require("helpers.recurrent_reference")

local FLOATS = { "float32", "float64", "bfloat16", "float16" }
local TOL = { float64 = 1e-13, float32 = 1e-5, bfloat16 = 3e-2, float16 = 3e-3 }

local function dbl(...) return tl.randn(...):double() end
local function leaf(t) return t:detach():requires_grad_() end

-- the gradients of fn's results (a list) against inputs, with upstream gradients gs
local function grads(fn, inputs, gs)
  local ins = {}
  for i, x in ipairs(inputs) do ins[i] = leaf(x) end
  local outs = fn(table.unpack(ins))
  return outs, tl.autograd.grad(outs, ins, { grad_outputs = gs })
end

local function near_all(expected, got, tol, what)
  assert.are.equal(#expected, #got, what .. ": count")
  for i = 1, #expected do assert.tensor_near(expected[i], got[i], tol, tol, what .. " " .. i) end
end

describe("lstm_cell_pointwise", function()
  it("matches the composed math and its gradients (float64; one or two gate inputs)", function()
    tl.manual_seed(1)
    for _, shape in ipairs({ { 5, 3 }, { 2, 3, 4 }, { 6 } }) do
      local gshape = { table.unpack(shape) }
      gshape[#gshape] = 4 * gshape[#gshape]
      local a, b, c = dbl(gshape), dbl(gshape), dbl(shape)
      local gh, gc = dbl(shape), dbl(shape)
      local outs, g = grads(function(x, y, z) return { tl.lstm_cell_pointwise(x, y, z) } end, { a, b, c }, { gh, gc })
      local routs, rg = grads(function(x, y, z) return { R.lstm(x + y, z) } end, { a, b, c }, { gh, gc })
      near_all(routs, outs, 1e-14, "values")
      near_all(rg, g, 1e-13, "gradients")
      -- one input: the gates already summed; only h used
      local h1 = tl.lstm_cell_pointwise(a + b, c)
      assert.tensor_near(routs[1], h1, 1e-14, 1e-14)
      local _, g1 = grads(function(x, z) return { (tl.lstm_cell_pointwise(x, z)) } end, { a + b, c }, { gh })
      local _, r1 = grads(function(x, z) return { (R.lstm(x, z)) } end, { a + b, c }, { gh })
      near_all(r1, g1, 1e-13, "h only")
    end
  end)

  it("computes every floating dtype (16-bit in float32) and strided inputs", function()
    tl.manual_seed(2)
    local a, c = dbl(4, 12), dbl(4, 3)
    local h64, c64 = R.lstm(a, c)
    for _, dtype in ipairs(FLOATS) do
      local h, c1 = tl.lstm_cell_pointwise(a:to(dtype), c:to(dtype))
      assert.are.equal(dtype, h.dtype)
      assert.tensor_near(h64, h:double(), TOL[dtype], TOL[dtype], dtype .. " h")
      assert.tensor_near(c64, c1:double(), TOL[dtype], TOL[dtype], dtype .. " c")
    end
    -- transposed gates and c_prev
    local at, ct = dbl(12, 4):t(), dbl(3, 4):t()
    local hr, cr = R.lstm(at, ct)
    local h, c1 = tl.lstm_cell_pointwise(at, ct)
    assert.tensor_near(hr, h, 1e-14, 1e-14)
    assert.tensor_near(cr, c1, 1e-14, 1e-14)
  end)

  it("saturates at large and infinite gates and keeps NaN, as the composed math (every dtype)", function()
    local big = { 0, 1e-4, -1e-4, 0.6, -0.7, 20, -20, 100, -100, 1e30, -1e30, math.huge, -math.huge, 0 / 0, 3, -3 }
    local a = tl.tensor({ big }, { dtype = "float64" })
    local c = tl.tensor({ { 0.5, -1, 2, 0 / 0 } }, { dtype = "float64" })
    local h64, c64 = R.lstm(a, c)
    local g64 = R.gru(a:narrow(2, 1, 12), a:narrow(2, 5, 12), c)
    local function same(want, got, tol, what)
      local w, g = want:reshape(-1):totable(), got:double():reshape(-1):totable()
      for i = 1, #w do
        if w[i] ~= w[i] then
          assert.is_true(g[i] ~= g[i], what .. " NaN at " .. i)
        else
          local close = math.abs(w[i] - g[i]) <= tol * (1 + math.abs(w[i]))
          assert.is_true(close, what .. " at " .. i .. ": " .. w[i] .. " vs " .. g[i])
        end
      end
    end
    for _, dtype in ipairs(FLOATS) do
      local h, c1 = tl.lstm_cell_pointwise(a:to(dtype), c:to(dtype))
      same(h64, h, TOL[dtype], dtype .. " lstm h")
      same(c64, c1, TOL[dtype], dtype .. " lstm c")
      local x = a:to(dtype)
      same(g64, tl.gru_cell_pointwise(x:narrow(2, 1, 12), x:narrow(2, 5, 12), c:to(dtype)), TOL[dtype], dtype .. " gru")
    end
  end)

  it("runs in the autocast dtype inside an autocast region (torch's cells do too)", function()
    local h, c = tl.autocast("bfloat16", function()
      return tl.lstm_cell_pointwise(tl.randn(2, 8), tl.randn(2, 2))
    end)
    assert.are.equal("bfloat16", h.dtype)
    assert.are.equal("bfloat16", c.dtype)
  end)

  it("refuses bad input naming the op and the argument", function()
    local g, c = tl.randn(2, 8), tl.randn(2, 2)
    assert.error_matches(function() tl.lstm_cell_pointwise(tl.randn(2, 7), c) end,
      { "lstm_cell_pointwise", "gates", "4 * H", "[2, 7]" })
    assert.error_matches(function() tl.lstm_cell_pointwise(tl.randn(3, 8), c) end,
      { "lstm_cell_pointwise", "gates", "leading dims" })
    assert.error_matches(function() tl.lstm_cell_pointwise(g, tl.randn(2, 4), c) end,
      { "lstm_cell_pointwise", "gates2" })
    assert.error_matches(function() tl.lstm_cell_pointwise(g:double(), c) end,
      { "lstm_cell_pointwise", "float32", "float64" })
    assert.error_matches(function() tl.lstm_cell_pointwise(g, tl.ones(2, 2, { dtype = "int64" })) end,
      { "lstm_cell_pointwise", "c_prev", "floating" })
    assert.error_matches(function() tl.lstm_cell_pointwise(tl.randn(4), tl.tensor(1.0)) end,
      { "lstm_cell_pointwise", "c_prev", "at least 1 dim" })
    assert.error_matches(function() tl.lstm_cell_pointwise(g) end, { "lstm_cell_pointwise", "tensor" })
    assert.error_matches(function() tl._lstm_cell_backward(nil, nil, nil, tl.randn(2, 4), c, c, true) end,
      { "lstm_cell_pointwise_backward", "workspace" })
  end)
end)

describe("gru_cell_pointwise", function()
  it("matches the composed math and its gradients (float64)", function()
    tl.manual_seed(3)
    for _, shape in ipairs({ { 5, 3 }, { 2, 3, 4 }, { 6 } }) do
      local gshape = { table.unpack(shape) }
      gshape[#gshape] = 3 * gshape[#gshape]
      local gi, gh, h, g = dbl(gshape), dbl(gshape), dbl(shape), dbl(shape)
      local outs, gr = grads(function(a, b, c) return { tl.gru_cell_pointwise(a, b, c) } end, { gi, gh, h }, { g })
      local routs, rg = grads(function(a, b, c) return { R.gru(a, b, c) } end, { gi, gh, h }, { g })
      near_all(routs, outs, 1e-14, "values")
      near_all(rg, gr, 1e-13, "gradients")
    end
  end)

  it("computes every floating dtype and strided inputs", function()
    tl.manual_seed(4)
    local gi, gh, h = dbl(4, 9), dbl(4, 9), dbl(4, 3)
    local want = R.gru(gi, gh, h)
    for _, dtype in ipairs(FLOATS) do
      local got = tl.gru_cell_pointwise(gi:to(dtype), gh:to(dtype), h:to(dtype))
      assert.are.equal(dtype, got.dtype)
      assert.tensor_near(want, got:double(), TOL[dtype], TOL[dtype], dtype)
    end
    local a, b, c = dbl(9, 4):t(), dbl(9, 4):t(), dbl(3, 4):t()
    assert.tensor_near(R.gru(a, b, c), tl.gru_cell_pointwise(a, b, c), 1e-14, 1e-14)
  end)

  it("refuses bad input naming the op and the argument", function()
    local g, h = tl.randn(2, 6), tl.randn(2, 2)
    assert.error_matches(function() tl.gru_cell_pointwise(tl.randn(2, 5), g, h) end,
      { "gru_cell_pointwise", "gi", "3 * H" })
    assert.error_matches(function() tl.gru_cell_pointwise(g, tl.randn(2, 8), h) end,
      { "gru_cell_pointwise", "gh", "3 * H" })
    assert.error_matches(function() tl.gru_cell_pointwise(g, g:half(), h) end,
      { "gru_cell_pointwise", "float16" })
    assert.error_matches(function() tl.gru_cell_pointwise(g, g) end, { "gru_cell_pointwise", "tensor" })
  end)
end)

-- nn.LSTM / nn.GRU (a direction is one node: the fused runs) against the composed layers
describe("_lstm_layer_forward / _lstm_layer_backward (nn.LSTM's walks in C)", function()
  it("refuse bad input naming the function and the argument", function()
    local xw, h, c, w = tl.randn(5, 2, 8), tl.randn(2, 2), tl.randn(2, 2), tl.randn(8, 2)
    assert.error_matches(function() tl._lstm_layer_forward(tl.randn(2, 8), h, c, w) end,
      { "_lstm_layer_forward", "xw", "[T, N, 4H]" })
    assert.error_matches(function() tl._lstm_layer_forward(tl.randn(5, 2, 7), h, c, w) end,
      { "_lstm_layer_forward", "xw", "[5, 2, 8]", "[5, 2, 7]" })
    assert.error_matches(function() tl._lstm_layer_forward(xw, h, c, tl.randn(8, 3)) end,
      { "_lstm_layer_forward", "w_hh", "[4H, H]" })
    assert.error_matches(function() tl._lstm_layer_forward(xw, tl.randn(3, 2), c, w) end,
      { "_lstm_layer_forward", "h0", "[2, 2]", "[3, 2]" })
    assert.error_matches(function() tl._lstm_layer_forward(xw, h, c:double(), w) end,
      { "_lstm_layer_forward", "c0", "float32", "float64" })
    assert.error_matches(function() tl._lstm_layer_forward(xw:long(), h, c, w) end,
      { "_lstm_layer_forward", "xw", "floating" })
    local _, _, _, ws, cells = tl._lstm_layer_forward(xw, h, c, w)
    assert.are.same({ 5, 2, 8 }, ws.shape)
    assert.are.same({ 5, 2, 2 }, cells.shape)
    assert.error_matches(function() tl._lstm_layer_backward(tl.randn(4, 2, 2), nil, nil, ws, cells, c, w) end,
      { "_lstm_layer_backward", "grad_out", "[5, 2, 2]", "[4, 2, 2]" })
    assert.error_matches(function() tl._lstm_layer_backward(nil, nil, nil, ws, tl.randn(5, 2, 3), c, w) end,
      { "_lstm_layer_backward", "cells", "[5, 2, 2]" })
    assert.error_matches(function() tl._lstm_layer_backward(nil, tl.randn(2, 3), nil, ws, cells, c, w) end,
      { "_lstm_layer_backward", "grad_h" })
  end)
end)

describe("fused layer runs against the composed layers (float64)", function()
  local function layer_case(kind, reverse)
    tl.manual_seed(reverse and 8 or 7)
    local m = (kind == "lstm" and nn.LSTM or nn.GRU)(3, 4, { dtype = "float64" })
    local w = m:_weights(0, 1)
    local x, h0, c0 = dbl(5, 2, 3), dbl(2, 4), dbl(2, 4)
    local g_out, g_h, g_c = dbl(5, 2, 4), dbl(2, 4), dbl(2, 4)
    local F = tl.nn.functional
    local inputs = { x, h0, c0, w[1], w[2], w[3], w[4] }
    local function ours(xi, h, c, a, b, bi, bh)
      if kind == "lstm" then return { F.lstm_layer(xi, h, c, { a, b, bi, bh }, reverse) } end
      return { F.gru_layer(xi, h, { a, b, bi, bh }, reverse) }
    end
    local function theirs(xi, h, c, a, b, bi, bh)
      if kind == "lstm" then return { R.lstm_layer(xi, h, c, { a, b, bi, bh }, reverse) } end
      return { R.gru_layer(xi, h, { a, b, bi, bh }, reverse) }
    end
    local gs = kind == "lstm" and { g_out, g_h, g_c } or { g_out, g_h }
    -- the GRU ignores c0: its gradient is absent on both sides
    local used = kind == "lstm" and inputs or { x, h0, w[1], w[2], w[3], w[4] }
    local function pick(fn)
      if kind == "lstm" then return fn end
      return function(xi, h, a, b, bi, bh) return fn(xi, h, nil, a, b, bi, bh) end
    end
    local o1, g1 = grads(pick(ours), used, gs)
    local o2, g2 = grads(pick(theirs), used, gs)
    near_all(o2, o1, 1e-13, kind .. " values")
    near_all(g2, g1, 1e-12, kind .. " gradients")
  end
  for _, kind in ipairs({ "lstm", "gru" }) do
    it(kind .. ": values and every gradient, forward", function() layer_case(kind, false) end)
    it(kind .. ": values and every gradient, reverse", function() layer_case(kind, true) end)
  end

  it("nn.LSTM's fused run matches backpropagation through time written as Lua loops", function()
    local cases = require("helpers.rnn_cell_cases")
    local case = cases.sweep.rnn_dnn -- on the CPU its module takes the fused runs
    tl.manual_seed(10)
    local inputs = { dbl(4, 3, 3), dbl(1, 3, 2), dbl(1, 3, 2), dbl(8, 3), dbl(8, 2), dbl(8), dbl(8), dbl(4, 3, 2) }
    local tables = {}
    for i, t in ipairs(inputs) do tables[i] = t:totable() end
    local got, want = case.run(table.unpack(inputs)), case.reference("float64", table.unpack(tables))
    assert.are.equal(#want, #got)
    for i = 1, #want do assert.tensor_near(want[i], got[i], 1e-12, 1e-13, "result " .. i) end
  end)

  it("an LSTM under bfloat16 autocast runs in bfloat16 and gives float32 gradients to float32 leaves", function()
    tl.manual_seed(9)
    local m = nn.LSTM(4, 3, { num_layers = 2 })
    local x = tl.randn(6, 2, 4):requires_grad_()
    local out, s = tl.autocast("bfloat16", function() return m(x) end)
    assert.are.equal("bfloat16", out.dtype)
    local ref_out = m(x)
    assert.tensor_near(ref_out:detach(), out:float():detach(), 5e-2, 5e-2)
    ;(out:float():sum() + s[2]:float():sum()):backward()
    assert.are.equal("float32", x.grad.dtype)
    assert.are.equal("float32", m.weight_hh_l1.grad.dtype)
  end)
end)

describe("fused cell ops on cuda #cuda", function()
  local function skip()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the CUDA specs of the fused cell ops did not run")
      return true
    end
  end

  it("lstm_cell_pointwise and gru_cell_pointwise match the CPU in every dtype, forward and backward", function()
    if skip() then return end
    tl.manual_seed(21)
    for _, dtype in ipairs(FLOATS) do
      local a, b, c, gh, gc = dbl(37, 4 * 33), dbl(37, 4 * 33), dbl(37, 33), dbl(37, 33), dbl(37, 33)
      local function run(device)
        local function on(t) return t:to(dtype):to(device) end
        local outs, g = grads(function(x, y, z) return { tl.lstm_cell_pointwise(x, y, z) } end,
          { on(a), on(b), on(c) }, { on(gh), on(gc) })
        local gi, hh, hp, gg = on(a):narrow(2, 1, 99), on(b):narrow(2, 1, 99), on(c), on(gh)
        local o2, g2 = grads(function(x, y, z) return { tl.gru_cell_pointwise(x, y, z) } end, { gi, hh, hp }, { gg })
        local all = {}
        for _, list in ipairs({ outs, g, o2, g2 }) do
          for _, t in ipairs(list) do all[#all + 1] = t:to("cpu"):double() end
        end
        return all
      end
      near_all(run("cpu"), run("cuda"), TOL[dtype], dtype)
    end
  end)

  it("nn.LSTM and nn.GRU (2 layers, bidirectional) match the CPU, forward and backward", function()
    if skip() then return end
    tl.manual_seed(22)
    for _, cls in ipairs({ nn.LSTM, nn.GRU }) do
      local m = cls(5, 7, { num_layers = 2, bidirectional = true, dtype = "float64" })
      local x = dbl(9, 3, 5)
      local function run(device)
        m:to(device)
        m:zero_grad()
        local xi = x:to(device):detach():clone():requires_grad_() -- a leaf of its own on each device
        local out = m(xi)
        out:sum():backward()
        local all = { out:detach():to("cpu"), xi.grad:to("cpu") }
        for _, p in ipairs(m:parameters()) do all[#all + 1] = p.grad:to("cpu") end
        return all
      end
      near_all(run("cpu"), run("cuda"), 1e-10, "layers")
    end
  end)
end)

describe("nn.LSTM / GRU / RNN on cuDNN (RNNBase.use_cudnn) #cuda", function()
  local trace = require("helpers.trace")
  local function skip()
    if tl.cuda.device_count() == 0 then
      pending("no CUDA device: the cuDNN RNN specs did not run")
      return true
    end
  end

  -- values and every gradient of m on cuda with use_cudnn on and off (the fused runs)
  local function both(cls, opts, dtype, tol, autocast)
    tl.manual_seed(23)
    local m = cls(5, 6, opts)
    m:to("cuda")
    if dtype ~= "float32" then m:to(dtype) end
    local T, N = 7, 3
    local x = tl.randn(opts.batch_first and N or T, opts.batch_first and T or N, 5):to(dtype):to("cuda")
    local function run(use)
      m.use_cudnn = use
      m:zero_grad()
      local xi = x:detach():requires_grad_()
      local counts
      local out
      counts = trace.op_counts(function()
        local function fwd() return (m(xi)) end
        out = autocast and tl.autocast(autocast, fwd) or fwd()
        out:to("float64"):square():sum():backward()
      end)
      local all = { out:detach():to("cpu"):double(), xi.grad:to("cpu"):double() }
      for _, p in ipairs(m:parameters()) do all[#all + 1] = p.grad:to("cpu"):double() end
      return all, counts
    end
    local dnn, counts = run(true)
    local fused = run(false)
    m.use_cudnn = false
    assert.is_true((counts.rnn_dnn or 0) >= 1, "the cuDNN forward ran")
    assert.is_true((counts.rnn_dnn_backward_data or 0) >= 1, "the cuDNN backward ran")
    near_all(fused, dnn, tol, tostring(cls) .. " " .. dtype)
  end

  it("LSTM, GRU, RNN (tanh, relu): 2 layers, bidirectional, batch_first, without bias; float64", function()
    if skip() then return end
    both(nn.LSTM, { num_layers = 2, bidirectional = true }, "float64", 1e-10)
    both(nn.GRU, { num_layers = 2, bidirectional = true, batch_first = true }, "float64", 1e-10)
    both(nn.RNN, { num_layers = 2, nonlinearity = "relu" }, "float64", 1e-10)
    both(nn.RNN, { bias = false }, "float64", 1e-10)
    both(nn.LSTM, { bias = false, num_layers = 3 }, "float64", 1e-10)
  end)

  it("float32, float16, and float16 autocast", function()
    if skip() then return end
    both(nn.LSTM, { num_layers = 2 }, "float32", 1e-4)
    both(nn.GRU, { num_layers = 2, bidirectional = true }, "float32", 1e-4)
    both(nn.LSTM, { num_layers = 2 }, "float16", 3e-2)
    both(nn.LSTM, { num_layers = 2 }, "float32", 3e-2, "float16")
  end)

  it("falls back to the fused runs with a projection, dropout in training, bfloat16 or on the CPU", function()
    if skip() then return end
    local cases = {
      { nn.LSTM(4, 6, { proj_size = 3, device = "cuda" }), "float32" },
      { nn.LSTM(4, 6, { num_layers = 2, dropout = 0.5, device = "cuda" }), "float32" },
      { nn.GRU(4, 6, { device = "cuda", dtype = "bfloat16" }), "bfloat16" },
      { nn.GRU(4, 6), "float32", "cpu" },
    }
    for i, c in ipairs(cases) do
      local m = c[1]
      m.use_cudnn = true
      local x = tl.randn(5, 2, 4, { dtype = c[2], device = c[3] or "cuda" })
      local counts = trace.op_counts(function() m(x) end)
      assert.is_nil(counts.rnn_dnn, "case " .. i)
    end
  end)

  it("a second backward through one cuDNN forward is an error naming it", function()
    if skip() then return end
    local m = nn.GRU(3, 4, { device = "cuda" })
    m.use_cudnn = true
    local out = m(tl.randn(5, 2, 3, { device = "cuda" }))
    local loss = out:sum()
    loss:backward({ retain_graph = true })
    assert.error_matches(function() loss:backward() end, { "rnn_dnn", "second backward" })
  end)
end)
