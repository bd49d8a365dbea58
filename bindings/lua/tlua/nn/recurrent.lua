-- tl.nn recurrent modules (merged into tl.nn by nn/init.lua): LSTM, GRU, RNN and their cells LSTMCell, GRUCell, RNNCell, composed of tensor ops (nn.functional's lstm_layer, gru_cell, ...).
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local init = require("tlua.nn.init_weights")
local F = require("tlua.nn.functional")
local shape_str = require("tlua.nn.state_dict").shape_str
local options = require("tlua.options")

local classes = {}

-- each class's options (tlua.options); init is level 1, Module.new 2, the user 3
local LAYER = { num_layers = "integer", bias = "boolean", batch_first = "boolean", dropout = "number",
  bidirectional = "boolean", dtype = "string", device = "string" }
local function with(extra)
  local t = {}
  for k, v in pairs(LAYER) do t[k] = v end
  for k, v in pairs(extra) do t[k] = v end
  return t
end
local ACCEPTED = {
  LSTM = with({ proj_size = "integer" }),
  GRU = LAYER,
  RNN = with({ nonlinearity = "string" }),
  LSTMCell = { bias = "boolean", dtype = "string", device = "string" },
  GRUCell = { bias = "boolean", dtype = "string", device = "string" },
  RNNCell = { bias = "boolean", nonlinearity = "string", dtype = "string", device = "string" },
}

-- gates per mode: rows of w_ih are gates * hidden_size
local GATES = { LSTM = 4, GRU = 3, RNN_TANH = 1, RNN_RELU = 1 }

local function fail(msg) options.error(msg, 3) end

local function check_size(v, what, who, allow_zero)
  if math.type(v) ~= "integer" or v < (allow_zero and 0 or 1) then
    fail(string.format("%s: %s must be a %s integer, got %s", who, what, allow_zero and "non-negative" or "positive",
      tostring(v)))
  end
end

local function nonlinearity_of(opts, who)
  local n = opts.nonlinearity or "tanh"
  if n ~= "tanh" and n ~= "relu" then
    fail(string.format("%s: nonlinearity must be 'tanh' or 'relu', got '%s'", who, n))
  end
  return n
end

-- PyTorch's init of every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H))
local function reset_uniform(self)
  local bound = 1 / math.sqrt(self.hidden_size)
  for _, p in ipairs(self:parameters()) do init.uniform_(p, -bound, bound) end
end

local function tensor_opts(opts)
  return { dtype = opts.dtype or "float32", device = opts.device or "cpu" }
end

local function is_tensor(v) return tl.is_tensor(v) end

local function check_tensor(v, what, who)
  if not is_tensor(v) then fail(string.format("%s: %s expected a tensor, got %s", who, what, type(v))) end
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- a state tensor must have exactly shape `want` and the weights' dtype and device
local function check_state(t, what, want, w, who)
  check_tensor(t, what, who)
  if not same_shape(t.shape, want) then
    fail(string.format("%s: %s expected shape %s, got %s", who, what, shape_str(want), shape_str(t.shape)))
  end
  if t.dtype ~= w.dtype or t.device ~= w.device then
    fail(string.format("%s: %s expected %s on %s (the weights'), got %s on %s", who, what, w.dtype, w.device,
      t.dtype, t.device))
  end
end

-- the input x must be [*lead, size] with #lead = batched and 1 or 2 and the weights' dtype/device
local function check_input(x, size, w, who, dims)
  check_tensor(x, "input", who)
  local shape = x.shape
  local ok = false
  for _, d in ipairs(dims) do if #shape == d then ok = true end end
  if not ok then
    fail(string.format("%s: input expected %s dims, got shape %s", who, table.concat(dims, " or "), shape_str(shape)))
  end
  if shape[#shape] ~= size then
    fail(string.format("%s: input expected size %d (input_size) in its last dim, got shape %s", who, size,
      shape_str(shape)))
  end
  if x.dtype ~= w.dtype or x.device ~= w.device then
    fail(string.format("%s: input expected %s on %s (the weights'), got %s on %s", who, w.dtype, w.device,
      x.dtype, x.device))
  end
end

-- ---- LSTM, GRU, RNN ----------------------------------------------------------------------------
local RNNBase = Module:extend("RNNBase")

-- the common constructor: mode "LSTM" | "GRU" | "RNN_TANH" | "RNN_RELU", name the class
local function base_init(self, mode, name, input_size, hidden_size, opts)
  local who = "nn." .. name
  check_size(input_size, "input_size", who)
  check_size(hidden_size, "hidden_size", who)
  local num_layers = opts.num_layers or 1
  check_size(num_layers, "num_layers", who)
  local dropout = opts.dropout or 0
  if not (dropout >= 0 and dropout <= 1) then
    fail(string.format("%s: dropout must be a probability in [0, 1], got %s", who, tostring(dropout)))
  end
  local proj_size = opts.proj_size or 0
  check_size(proj_size, "proj_size", who, true)
  if proj_size >= hidden_size then
    fail(string.format("%s: proj_size must be smaller than hidden_size (%d), got %d", who, hidden_size, proj_size))
  end
  self.mode, self.who = mode, who
  self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
  self.bias = opts.bias ~= false
  self.batch_first = opts.batch_first == true
  self.dropout = dropout
  self.bidirectional = opts.bidirectional == true
  self.proj_size = proj_size
  local dirs = self.bidirectional and 2 or 1
  local out_size = proj_size > 0 and proj_size or hidden_size
  local rows = GATES[mode] * hidden_size
  local o = tensor_opts(opts)
  -- PyTorch's names and order: per layer, per direction: w_ih, w_hh, b_ih, b_hh, w_hr
  for layer = 0, num_layers - 1 do
    local layer_input = layer == 0 and input_size or out_size * dirs
    for dir = 1, dirs do
      local suffix = "_l" .. layer .. (dir == 2 and "_reverse" or "")
      self:register_parameter("weight_ih" .. suffix, tl.empty(rows, layer_input, o))
      self:register_parameter("weight_hh" .. suffix, tl.empty(rows, out_size, o))
      if self.bias then
        self:register_parameter("bias_ih" .. suffix, tl.empty(rows, o))
        self:register_parameter("bias_hh" .. suffix, tl.empty(rows, o))
      end
      if proj_size > 0 then self:register_parameter("weight_hr" .. suffix, tl.empty(proj_size, hidden_size, o)) end
    end
  end
  self:reset_parameters()
end

RNNBase.reset_parameters = reset_uniform

-- the weights of a layer (0-based) and direction (1, 2 = reverse): {w_ih, w_hh, b_ih, b_hh, w_hr}
function RNNBase:_weights(layer, dir)
  local suffix = "_l" .. layer .. (dir == 2 and "_reverse" or "")
  return { self["weight_ih" .. suffix], self["weight_hh" .. suffix], self["bias_ih" .. suffix],
    self["bias_hh" .. suffix], self["weight_hr" .. suffix] }
end

-- h0 (and c0 for an LSTM) given or zeros, checked against [D * num_layers, N, size] (N absent
-- when unbatched)
local function initial(self, hx, batch, what, size, w)
  local want = { (self.bidirectional and 2 or 1) * self.num_layers }
  if batch then want[2] = batch end
  want[#want + 1] = size
  if hx == nil then return tl.zeros(want, { dtype = w.dtype, device = w.device }) end
  check_state(hx, what, want, w, self.who)
  return hx
end

--- RNNBase.use_cudnn (false): on CUDA, run a whole LSTM / GRU / RNN (no projection, no dropout
-- between layers in training) as one cuDNN call each way (nn/recurrent_dnn.lua) when
-- tl.cuda.cudnn_enabled(); set it on the class or on one module. Its #cuda specs pass on an
-- H200, but it is off by default: the fused runs (the steps walked in C) are faster there
-- (bench/lstm.lua, 2 layers of 1024 over 256 steps, batch 64: cuDNN 58.6 / 39.1 ms against the
-- fused 49.6 / 17-22 ms in float32 / bfloat16; the cuDNN run packs the weights every call).
RNNBase.use_cudnn = false

-- the run over every layer and direction of x [T, N, I]: out [T, N, D * Hout], the final hs
-- and cs ([D * L, N, *])
function RNNBase:_run(x, h0, c0)
  if self.use_cudnn and x.device ~= "cpu" then
    local dnn = require("tlua.nn.recurrent_dnn")
    if dnn.usable(self, x) then
      local out, hn, cn = dnn.run(self, x, h0, c0)
      if out then return out, hn, cn end
    end
  end
  local dirs = self.bidirectional and 2 or 1
  local hs, cs = {}, {}
  for layer = 0, self.num_layers - 1 do
    if layer > 0 and self.dropout > 0 and self.training then x = F.dropout(x, self.dropout, true) end
    local outs = {}
    for dir = 1, dirs do
      local k = layer * dirs + dir
      local w = self:_weights(layer, dir)
      local reverse = dir == 2
      if self.mode == "LSTM" then
        outs[dir], hs[k], cs[k] = F.lstm_layer(x, h0[k], c0[k], w, reverse)
      elseif self.mode == "GRU" then
        outs[dir], hs[k] = F.gru_layer(x, h0[k], w, reverse)
      else
        outs[dir], hs[k] = F.rnn_layer(x, h0[k], w, reverse, self.mode == "RNN_RELU" and "relu" or "tanh")
      end
    end
    x = dirs == 2 and tl.cat(outs, 3) or outs[1]
  end
  return x, tl.stack(hs, 1), self.mode == "LSTM" and tl.stack(cs, 1) or nil
end

-- forward's common part: hx is {h0, c0} for an LSTM, h0 otherwise
function RNNBase:_forward(input, hx)
  local w = self["weight_ih_l0"]
  check_input(input, self.input_size, w, self.who, { 2, 3 })
  local batched = input:dim() == 3
  local x = input
  if not batched then
    x = x:unsqueeze(2)
  elseif self.batch_first then
    x = x:transpose(1, 2)
  end
  local batch = batched and x:size(2) or nil
  local out_size = self.proj_size > 0 and self.proj_size or self.hidden_size
  local h0, c0
  if self.mode == "LSTM" then
    if hx ~= nil and (type(hx) ~= "table" or is_tensor(hx)) then
      fail(string.format("%s: hx expected a table {h0, c0} or nil, got %s", self.who,
        is_tensor(hx) and "a tensor" or type(hx)))
    end
    if hx ~= nil and (hx[1] == nil or hx[2] == nil) then fail(self.who .. ": hx expected {h0, c0}, both tensors") end
    h0 = initial(self, hx and hx[1], batch, "h0", out_size, w)
    c0 = initial(self, hx and hx[2], batch, "c0", self.hidden_size, w)
  else
    if hx ~= nil and not is_tensor(hx) then
      fail(string.format("%s: hx expected a tensor h0 or nil, got %s", self.who, type(hx)))
    end
    h0 = initial(self, hx, batch, "h0", self.hidden_size, w)
  end
  if not batched then
    h0 = h0:unsqueeze(2)
    c0 = c0 and c0:unsqueeze(2)
  end
  local out, hn, cn = self:_run(x, h0, c0)
  if not batched then
    out, hn, cn = out:squeeze(2), hn:squeeze(2), cn and cn:squeeze(2)
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  return out, hn, cn
end

function RNNBase:extra_repr()
  local parts = { string.format("%d, %d", self.input_size, self.hidden_size) }
  if self.proj_size > 0 then parts[#parts + 1] = "proj_size=" .. self.proj_size end
  if self.num_layers ~= 1 then parts[#parts + 1] = "num_layers=" .. self.num_layers end
  if self.mode == "RNN_RELU" then parts[#parts + 1] = "nonlinearity=relu" end
  if not self.bias then parts[#parts + 1] = "bias=false" end
  if self.batch_first then parts[#parts + 1] = "batch_first=true" end
  if self.dropout ~= 0 then parts[#parts + 1] = string.format("dropout=%g", self.dropout) end
  if self.bidirectional then parts[#parts + 1] = "bidirectional=true" end
  return table.concat(parts, ", ")
end

--- LSTM(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false, dropout = 0,
-- bidirectional = false, proj_size = 0, dtype, device}): PyTorch's LSTM (gates i, f, g, o; every
-- weight U(-1/sqrt(H), 1/sqrt(H)); parameters weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
-- weight_hr_l0 with proj_size, ..._reverse). forward(input [T, N, I] ([N, T, I] batch_first, or
-- unbatched [T, I]), {h0, c0}?) -> output [T, N, D * Hout], {h_n, c_n}: h0 and h_n
-- [D * num_layers, N, Hout], c0 and c_n [D * num_layers, N, H] (no N when unbatched; zeros when
-- not given); D = 2 if bidirectional, Hout = proj_size or H. dropout: on the outputs of every
-- layer but the last, in training mode only
local LSTM = RNNBase:extend("LSTM")
classes.LSTM = LSTM

function LSTM:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.LSTM", ACCEPTED.LSTM, 3)
  base_init(self, "LSTM", "LSTM", input_size, hidden_size, opts)
end

function LSTM:forward(input, hx)
  local out, hn, cn = self:_forward(input, hx)
  return out, { hn, cn }
end

--- GRU(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false, dropout = 0,
-- bidirectional = false, dtype, device}): PyTorch's GRU (gates r, z, n; n = tanh(W_in x + b_in +
-- r * (W_hn h + b_hn))). forward(input, h0?) -> output [T, N, D * H], h_n [D * num_layers, N, H]
-- (the shapes of LSTM's)
local GRU = RNNBase:extend("GRU")
classes.GRU = GRU

function GRU:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.GRU", ACCEPTED.GRU, 3)
  base_init(self, "GRU", "GRU", input_size, hidden_size, opts)
end

function GRU:forward(input, hx)
  local out, hn = self:_forward(input, hx)
  return out, hn
end

--- RNN(input_size, hidden_size, {nonlinearity = "tanh" | "relu", num_layers = 1, bias = true,
-- batch_first = false, dropout = 0, bidirectional = false, dtype, device}): h' = act(W_ih x + b_ih +
-- W_hh h + b_hh). forward(input, h0?) -> output, h_n (the shapes of GRU's)
local RNN = RNNBase:extend("RNN")
classes.RNN = RNN

function RNN:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.RNN", ACCEPTED.RNN, 3)
  local mode = nonlinearity_of(opts, "nn.RNN") == "relu" and "RNN_RELU" or "RNN_TANH"
  base_init(self, mode, "RNN", input_size, hidden_size, opts)
end

RNN.forward = GRU.forward

-- ---- cells ---------------------------------------------------------------------------------------
local function cell_init(self, name, gates, input_size, hidden_size, opts)
  local who = "nn." .. name
  check_size(input_size, "input_size", who)
  check_size(hidden_size, "hidden_size", who)
  self.who, self.input_size, self.hidden_size = who, input_size, hidden_size
  self.bias = opts.bias ~= false
  local o = tensor_opts(opts)
  self:register_parameter("weight_ih", tl.empty(gates * hidden_size, input_size, o))
  self:register_parameter("weight_hh", tl.empty(gates * hidden_size, hidden_size, o))
  if self.bias then
    self:register_parameter("bias_ih", tl.empty(gates * hidden_size, o))
    self:register_parameter("bias_hh", tl.empty(gates * hidden_size, o))
  end
  self:reset_parameters()
end

-- the checked input and a state of [N, H] ([H] unbatched): given or zeros
local function cell_state(self, input, h, what)
  local w = self.weight_ih
  local want = input:dim() == 2 and { input:size(1), self.hidden_size } or { self.hidden_size }
  if h == nil then return tl.zeros(want, { dtype = w.dtype, device = w.device }) end
  check_state(h, what, want, w, self.who)
  return h
end

local function cell_repr(self)
  return string.format("%d, %d%s%s", self.input_size, self.hidden_size, self.bias and "" or ", bias=false",
    self.nonlinearity == "relu" and ", nonlinearity=relu" or "")
end

--- LSTMCell(input_size, hidden_size, {bias = true, dtype, device}): one LSTM step.
-- forward(input [N, I] or [I], {h, c}?) -> h', c' ([N, H] or [H]; zeros when hx is nil)
local LSTMCell = Module:extend("LSTMCell")
classes.LSTMCell = LSTMCell
LSTMCell.reset_parameters, LSTMCell.extra_repr = reset_uniform, cell_repr

function LSTMCell:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.LSTMCell", ACCEPTED.LSTMCell, 3)
  cell_init(self, "LSTMCell", 4, input_size, hidden_size, opts)
end

function LSTMCell:forward(input, hx)
  check_input(input, self.input_size, self.weight_ih, self.who, { 1, 2 })
  if hx ~= nil and (type(hx) ~= "table" or is_tensor(hx)) then
    fail(string.format("%s: hx expected a table {h, c} or nil, got %s", self.who,
      is_tensor(hx) and "a tensor" or type(hx)))
  end
  local h = cell_state(self, input, hx and hx[1], "h")
  local c = cell_state(self, input, hx and hx[2], "c")
  return F.lstm_cell(input, { h, c }, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
end

--- GRUCell(input_size, hidden_size, {bias = true, dtype, device}): one GRU step.
-- forward(input [N, I] or [I], h?) -> h'
local GRUCell = Module:extend("GRUCell")
classes.GRUCell = GRUCell
GRUCell.reset_parameters, GRUCell.extra_repr = reset_uniform, cell_repr

function GRUCell:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.GRUCell", ACCEPTED.GRUCell, 3)
  cell_init(self, "GRUCell", 3, input_size, hidden_size, opts)
end

function GRUCell:forward(input, h)
  check_input(input, self.input_size, self.weight_ih, self.who, { 1, 2 })
  h = cell_state(self, input, h, "h")
  return F.gru_cell(input, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
end

--- RNNCell(input_size, hidden_size, {bias = true, nonlinearity = "tanh" | "relu", dtype, device}):
-- forward(input [N, I] or [I], h?) -> h' = act(W_ih x + b_ih + W_hh h + b_hh)
local RNNCell = Module:extend("RNNCell")
classes.RNNCell = RNNCell
RNNCell.reset_parameters, RNNCell.extra_repr = reset_uniform, cell_repr

function RNNCell:init(input_size, hidden_size, opts)
  opts = options.check(opts, "nn.RNNCell", ACCEPTED.RNNCell, 3)
  self.nonlinearity = nonlinearity_of(opts, "nn.RNNCell")
  cell_init(self, "RNNCell", 1, input_size, hidden_size, opts)
end

function RNNCell:forward(input, h)
  check_input(input, self.input_size, self.weight_ih, self.who, { 1, 2 })
  h = cell_state(self, input, h, "h")
  local cell = self.nonlinearity == "relu" and F.rnn_relu_cell or F.rnn_tanh_cell
  return cell(input, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
end

return classes
