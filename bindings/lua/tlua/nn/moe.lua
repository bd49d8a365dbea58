-- tl.nn.MoE: a mixture-of-experts feed-forward (router, top-k gating, token permutation, grouped_mm over the experts, un-permutation).
--
--   local moe = nn.MoE{dim = 512, hidden = 2048, experts = 8, top_k = 2}
--   nn.MoE{512, 2048, 8, 2}, nn.MoE(512, 2048, 8, 2, opts): the same
--   options: bias = true (b1, b2), activation = "gelu" (the name of a one-tensor
--   tl op such as "relu" or "silu", or a function of a tensor), normalize = true
--   (see 2. below), dtype = "float32", device = "cpu"; top_k is required
--   y = moe(x)    x [..., dim] -> y of x's shape
--
-- Parameters (names as state_dict gives them):
--   router.weight [experts, dim]   an nn.Linear without bias: the router's logits
--   w1 [experts, dim, hidden], b1 [experts, hidden]
--   w2 [experts, hidden, dim],  b2 [experts, dim]
-- Each expert e computes act(x @ w1[e] + b1[e]) @ w2[e] + b2[e]: w1[e] is the
-- transpose of an nn.Linear(dim, hidden)'s weight, and every tensor is
-- initialised as nn.Linear would be, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
-- fan_in = dim for w1, b1 and the router, hidden for w2, b2.
--
-- forward, for the T = numel / dim tokens of x flattened to [T, dim]:
--   1. probs = softmax(x W_r^T) over the experts, [T, E]; in float32 when the parameters are
--      bfloat16 or float16 (as Mixtral's routing), the gates cast back before they weigh rows.
--   2. top-k: probs:topk(k) gives each token's k largest probabilities and their experts, best
--      first (a tie goes to the lower expert); its gradient reaches the router. The k gates of a
--      token are its k probabilities renormalised to sum to 1 over the chosen experts (Mixtral's
--      routing, as PyTorch implementations of it write it: topk of the softmax, divided by their
--      sum). With top_k = 1 every gate is then 1 and the router gets no gradient from the
--      output; normalize = false keeps the softmax probabilities themselves as the gates (Switch
--      Transformer's top-1).
--   3. the permutation on the device: the T * k (token, choice) pairs sorted by expert with a
--      stable sort (so by token within an expert), so that expert e's rows are the block
--      offsets[e-1]+1 .. offsets[e] of the permuted order (an expert no token chose has an empty
--      block); the counts per expert come from index_add of ones, the offsets from their cumsum.
--      The rows of x are gathered in that order with index_select.
--   4. h = act(grouped_mm(x_perm, w1, offsets) + b1[expert of the row]);
--      y_perm = grouped_mm(h, w2, offsets) + b2[expert of the row] (bias rows gathered with
--      index_select too).
--   5. each row of y_perm times its gate, put back into the (token, choice) order by the inverse
--      permutation (an argsort of the permutation), viewed as [T, k, dim] and summed over the k
--      choices (a fixed order: the same bits on every run).
-- Every step is an op that records its gradient, so x, the router and every expert weight get
-- their gradients from autograd. The routing runs on the device and reads nothing back; the
-- host waits only where grouped_mm reads the offsets (E integers) to size its GEMMs, until it
-- takes them on the device. The dtype and device follow the parameters (m:to("cuda"),
-- m:to("bfloat16")); the input must match them.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local Linear = require("tlua.nn.layers").Linear
local init = require("tlua.nn.init_weights")
local options = require("tlua.options")

local moe = {}

--- MoE{dim, hidden, experts, top_k, bias = true, activation = "gelu", normalize = true,
--- dtype = "float32", device = "cpu"} (or positional: MoE(dim, hidden, experts, top_k, opts)):
--- x [..., dim] -> y of x's shape; a router picks top_k of the experts (two-layer feed-forwards
--- dim -> hidden -> dim) per token (the file's comment has the math and the parameters).
local MoE = Module:extend("MoE")
moe.MoE = MoE

local function check_size(v, what)
  if math.type(v) ~= "integer" or v < 1 then
    options.error(string.format("nn.MoE: %s must be a positive integer, got %s", what,
      type(v) == "number" and tostring(v) or type(v)), 4)
  end
end

-- nn.MoE's options (tlua.options); the sizes and the activation are checked by init itself
local SETTINGS = { bias = "boolean", activation = "any", normalize = "boolean", dtype = "string", device = "string" }
local SIZES = { "dim", "hidden", "experts", "top_k" }
-- nn.MoE{...}: the settings and the sizes by name (the sizes by position, [1] to [4], are checked apart,
-- so that an unknown key's message lists the names alone)
local TABLE_FORM = {}
for key, kind in pairs(SETTINGS) do TABLE_FORM[key] = kind end
for _, name in ipairs(SIZES) do TABLE_FORM[name] = "any" end

-- the options of nn.MoE{dim =, ...}, nn.MoE{dim, hidden, experts, top_k, ...} or
-- nn.MoE(dim, hidden, experts, top_k, opts?), as one table (called by init: level 1 is this
-- function, 2 init, 3 Module.new, 4 the user)
local function arguments(...)
  local first = ...
  if type(first) == "table" and select("#", ...) == 1 then
    local named = {}
    for k, v in pairs(first) do
      if math.type(k) == "integer" and k >= 1 then
        if k > #SIZES then
          options.error(string.format("nn.MoE: unknown entry [%d] (by position it takes dim, hidden, experts, top_k)",
            k), 4)
        end
      else
        named[k] = v
      end
    end
    options.check(named, "nn.MoE", TABLE_FORM, 4)
    local o = {}
    for k, v in pairs(first) do o[k] = v end
    for i, name in ipairs(SIZES) do
      if first[i] ~= nil then
        if first[name] ~= nil then
          options.error(string.format("nn.MoE: %s is given both by position (%d) and by name", name, i), 4)
        end
        o[name], o[i] = first[i], nil
      end
    end
    return o
  end
  local dim, hidden, experts, top_k, opts = ...
  local o = {}
  for k, v in pairs(options.check(opts, "nn.MoE", SETTINGS, 4)) do o[k] = v end
  o.dim, o.hidden, o.experts, o.top_k = dim, hidden, experts, top_k
  return o
end

local function activation_fn(a)
  if a == nil then return tl.gelu, "gelu" end
  if type(a) == "string" then
    local fn = rawget(tl, a)
    if type(fn) ~= "function" then
      options.error("nn.MoE: activation '" .. a .. "' is not a tl op (try \"gelu\", \"relu\", \"silu\")", 4)
    end
    return fn, a
  end
  if type(a) == "function" or (type(a) == "table" and getmetatable(a) and getmetatable(a).__call) then
    return a, "custom"
  end
  options.error("nn.MoE: activation must be the name of a tl op or a function, got " .. type(a), 4)
end

function MoE:init(...)
  local o = arguments(...)
  check_size(o.dim, "dim")
  check_size(o.hidden, "hidden")
  check_size(o.experts, "experts")
  check_size(o.top_k, "top_k")
  if o.top_k > o.experts then
    options.error(string.format("nn.MoE: top_k (%d) must be at most the number of experts (%d)", o.top_k, o.experts), 3)
  end
  self.dim, self.hidden, self.experts, self.top_k = o.dim, o.hidden, o.experts, o.top_k
  self.act, self.activation = activation_fn(o.activation)
  self.normalize = o.normalize ~= false
  local t = { dtype = o.dtype or "float32", device = o.device or "cpu" }
  self:_check_parameter_dtype(t.dtype, 3) -- before the router, which would name itself
  self.router = Linear(o.dim, o.experts, { bias = false, dtype = t.dtype, device = t.device })
  local E, D, H = o.experts, o.dim, o.hidden
  self:register_parameter("w1", tl.empty(E, D, H, t))
  if o.bias ~= false then self:register_parameter("b1", tl.empty(E, H, t)) end
  self:register_parameter("w2", tl.empty(E, H, D, t))
  if o.bias ~= false then self:register_parameter("b2", tl.empty(E, D, t)) end
  self:reset_parameters()
end

--- reset_parameters(): nn.Linear's init for the router and each expert's layers
function MoE:reset_parameters()
  self.router:reset_parameters()
  local b1, b2 = 1 / math.sqrt(self.dim), 1 / math.sqrt(self.hidden)
  init.uniform_(self.w1, -b1, b1)
  init.uniform_(self.w2, -b2, b2)
  if self.b1 then init.uniform_(self.b1, -b1, b1) end
  if self.b2 then init.uniform_(self.b2, -b2, b2) end
end

local function shape_str(shape)
  local parts = {}
  for i, s in ipairs(shape) do parts[i] = tostring(s) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

--- route(x2 [T, dim]) -> probs [T, E] (float32 for half-precision parameters), the chosen
-- probabilities [T, k] (differentiable, best first) and their experts (int64 [T, k], 1-based)
function MoE:route(x2)
  local logits = self.router(x2)
  if logits.dtype == "bfloat16" or logits.dtype == "float16" then logits = logits:float() end
  local probs = logits:softmax(-1)
  local picked, chosen = probs:topk(self.top_k, -1)
  return probs, picked, chosen
end

function MoE:forward(x)
  if not tl.is_tensor(x) then options.error("nn.MoE: expected a tensor input, got " .. type(x), 2) end
  local shape = x.shape
  if #shape == 0 or shape[#shape] ~= self.dim then
    options.error(string.format("nn.MoE: input must be [..., %d] (dim = %d), got shape %s", self.dim, self.dim,
      shape_str(shape)), 2)
  end
  local w = self.w1
  if x.dtype ~= w.dtype or x.device ~= w.device then
    options.error(string.format("nn.MoE: input is %s on %s but the parameters are %s on %s (convert one: x:to(...) or m:to(...))",
      x.dtype, x.device, w.dtype, w.device), 2)
  end
  local E, K, D = self.experts, self.top_k, self.dim
  local T = x:numel() // D
  if T == 0 then return x * 0 end
  local device = x.device
  local x2 = x:reshape(T, D)
  local _, picked, chosen = self:route(x2)
  -- the gates, [T, k]: renormalised over the k choices unless normalize = false
  local gates = self.normalize and picked / picked:sum(2, true) or picked

  -- the (token, choice) pairs in row-major order, sorted by expert (stably: by token within one)
  local experts = chosen:reshape(T * K)
  local row_expert, order = experts:sort(1) -- order: the pair each permuted row holds
  local ones = tl.ones(T * K, { dtype = "int64", device = device })
  local counts = tl.zeros(E, { dtype = "int64", device = device }):index_add(1, experts, ones)
  local ends = counts:cumsum(1) -- expert e's rows end at ends[e]
  local token_of = (order - 1):floor_divide(K) + 1

  local x_perm = x2:index_select(1, token_of) -- [T * K, D]
  local h = tl.grouped_mm(x_perm, self.w1, ends)
  if self.b1 then h = h + self.b1:index_select(1, row_expert) end
  h = self.act(h)
  local y = tl.grouped_mm(h, self.w2, ends)
  if self.b2 then y = y + self.b2:index_select(1, row_expert) end
  y = y * gates:reshape(T * K):index_select(1, order):to(y.dtype):unsqueeze(2)
  y = y:index_select(1, order:argsort(1)):view(T, K, D):sum(2)
  return y:reshape(shape)
end

function MoE:extra_repr()
  return string.format("dim=%d, hidden=%d, experts=%d, top_k=%d, bias=%s, activation=%s%s", self.dim,
    self.hidden, self.experts, self.top_k, tostring(self.b1 ~= nil), self.activation,
    self.normalize and "" or ", normalize=false")
end

return moe
