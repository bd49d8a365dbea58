-- nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder against PyTorch goldens (float64 outputs, weights, gradients; spec/goldens/transformer.py), the fused and composed paths, gradcheck, dropout, bad inputs (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradcheck = tl.autograd.gradcheck

local golden = dofile("spec/goldens/transformer.lua")

local function T(v)
  if type(v) == "table" then
    local x = v
    while type(x) == "table" do x = x[1] end
    if type(x) == "boolean" then return tl.tensor(v) end
  end
  return tl.tensor(v, { dtype = "float64" })
end

local function with(opts, extra)
  local t = {}
  for k, v in pairs(opts or {}) do t[k] = v end
  for k, v in pairs(extra) do t[k] = v end
  return t
end

local function load(m, params, rename)
  local sd = {}
  for name, v in pairs(params) do sd[rename and rename(name) or name] = T(v) end
  m:load_state_dict(sd)
  return m
end

local function build_mha(case)
  return load(nn.MultiheadAttention(case.embed_dim, case.num_heads, with(case.opts, { dtype = "float64" })),
    case.params)
end

-- query, key, value of a case (the same tensor three times for self-attention)
local function qkv(case, grad)
  local q = T(case.query)
  if grad then q:requires_grad_() end
  if case.self_attn then return q, q, q end
  local k, v = T(case.key), T(case.value)
  if grad then
    k:requires_grad_()
    v:requires_grad_()
  end
  return q, k, v
end

local function mha_opts(case, need_weights)
  return { attn_mask = case.attn_mask and T(case.attn_mask), key_padding_mask = case.key_padding_mask and
    T(case.key_padding_mask), need_weights = need_weights, average_attn_weights = case.average_attn_weights,
    is_causal = case.is_causal or nil }
end

local TOL = 1e-12

describe("MultiheadAttention against PyTorch (float64)", function()
  local names = {}
  for name in pairs(golden.mha) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output and weights, and the output without weights", function()
      local case = golden.mha[name]
      local m = build_mha(case)
      local q, k, v = qkv(case)
      local out, w = m(q, k, v, mha_opts(case, true))
      assert.tensor_near(case.output, out, TOL, TOL, name .. " output")
      assert.tensor_near(case.weights, w, TOL, TOL, name .. " weights")
      local out2, w2 = m(q, k, v, mha_opts(case, false))
      assert.is_nil(w2)
      assert.tensor_near(case.output, out2, 1e-10, 1e-12, name .. " output, need_weights = false")
    end)
    if golden.mha[name].grads then
      it(name .. ": gradients of the parameters and the inputs", function()
        local case = golden.mha[name]
        local m = build_mha(case)
        local q, k, v = qkv(case, true)
        local out, w = m(q, k, v, mha_opts(case, true))
        local loss = (out * T(case.g_out)):sum() + (w * T(case.g_w)):sum()
        loss:backward()
        for pname, p in m:named_parameters() do
          assert.is_not_nil(case.grads[pname], "golden has no gradient for " .. pname)
          assert.tensor_near(case.grads[pname], p.grad, 1e-10, 1e-12, name .. " grad " .. pname)
        end
        assert.tensor_near(case.grad_query, q.grad, 1e-10, 1e-12, name .. " grad query")
        if not case.self_attn then
          assert.tensor_near(case.grad_key, k.grad, 1e-10, 1e-12, name .. " grad key")
          assert.tensor_near(case.grad_value, v.grad, 1e-10, 1e-12, name .. " grad value")
        end
      end)
    end
  end

  it("runs the fused scaled_dot_product_attention only when no weights and no mask but is_causal", function()
    local case = golden.mha.self
    local m = build_mha(case)
    local q = T(case.query)
    local calls = 0
    local fused = tl.scaled_dot_product_attention
    tl.scaled_dot_product_attention = function(...)
      calls = calls + 1
      return fused(...)
    end
    local ok, err = pcall(function()
      m(q, q, q, { need_weights = false })
      m(q, q, q, { need_weights = false, is_causal = true })
      assert.are.equal(2, calls)
      m(q, q, q)
      m(q, q, q, { need_weights = false, attn_mask = tl.zeros(4, 4):bool() })
      m(q, q, q, { need_weights = false, key_padding_mask = tl.zeros(3, 4):bool() })
      assert.are.equal(2, calls)
    end)
    tl.scaled_dot_product_attention = fused
    assert(ok, err)
  end)

  it("names and shapes its parameters as PyTorch", function()
    local m = nn.MultiheadAttention(8, 2, { kdim = 3, vdim = 5, add_bias_kv = true })
    local names = {}
    for name in m:named_parameters() do names[#names + 1] = name end
    assert.are.same({ "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k", "bias_v",
      "out_proj.weight", "out_proj.bias" }, names)
    local plain = nn.MultiheadAttention(8, 2, { bias = false })
    names = {}
    for name in plain:named_parameters() do names[#names + 1] = name end
    assert.are.same({ "in_proj_weight", "out_proj.weight" }, names)
  end)

  it("initialises as torch: xavier_uniform_ projections, zero biases", function()
    tl.manual_seed(4)
    local m = nn.MultiheadAttention(64, 4)
    local bound = math.sqrt(6 / (64 + 3 * 64))
    assert.is_true(m.in_proj_weight:abs():max():item() <= bound)
    assert.is_true(m.in_proj_weight:abs():max():item() > 0.9 * bound)
    assert.are.equal(0, m.in_proj_bias:abs():max():item())
    assert.are.equal(0, m.out_proj.bias:abs():max():item())
    assert.is_true(m.out_proj.weight:abs():max():item() <= 1 / math.sqrt(64))
  end)
end)

describe("TransformerEncoderLayer and TransformerEncoder against PyTorch (float64)", function()
  -- torch's layers.0 ... are tlua's layers.1 ...
  local function rename(name)
    return (name:gsub("^layers%.(%d+)", function(i) return "layers." .. (tonumber(i) + 1) end))
  end

  local function build(case)
    local opts = with(case.opts, { dtype = "float64" })
    local m = nn.TransformerEncoderLayer(case.d_model, case.nhead, opts)
    if case.num_layers then
      m = nn.TransformerEncoder(m, case.num_layers, { norm = nn.LayerNorm(case.d_model, { dtype = "float64" }) })
    end
    return load(m, case.params, rename)
  end

  local function run(m, case, src)
    if case.num_layers then
      return m(src, { mask = case.src_mask and T(case.src_mask), src_key_padding_mask = case.src_key_padding_mask
        and T(case.src_key_padding_mask) })
    end
    return m(src, { src_mask = case.src_mask and T(case.src_mask), src_key_padding_mask = case.src_key_padding_mask
      and T(case.src_key_padding_mask) })
  end

  local names = {}
  for name in pairs(golden.encoder) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. ": output", function()
      local case = golden.encoder[name]
      local m = build(case)
      assert.tensor_near(case.output, run(m, case, T(case.src)), 1e-11, 1e-12, name)
    end)
    if golden.encoder[name].grads then
      it(name .. ": gradients", function()
        local case = golden.encoder[name]
        local m = build(case)
        local src = T(case.src):requires_grad_()
        local loss = (run(m, case, src) * T(case.g_out)):sum()
        loss:backward()
        for pname, p in m:named_parameters() do
          local want = case.grads[pname:gsub("^layers%.(%d+)", function(i) return "layers." .. (tonumber(i) - 1) end)]
          assert.is_not_nil(want, "golden has no gradient for " .. pname)
          assert.tensor_near(want, p.grad, 1e-9, 1e-11, name .. " grad " .. pname)
        end
        assert.tensor_near(case.grad_src, src.grad, 1e-9, 1e-11, name .. " grad src")
      end)
    end
  end

  it("bias = false leaves out every bias (attention, feed-forward, norms)", function()
    local m = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, bias = false })
    for name in m:named_parameters() do assert.is_nil(name:find("bias"), name) end
  end)

  it("takes a function or a module as activation", function()
    tl.manual_seed(6)
    local a = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, activation = "gelu",
      dtype = "float64" })
    local b = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, activation = nn.GELU(),
      dtype = "float64" })
    local c = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0,
      activation = function(x) return x:gelu() end, dtype = "float64" })
    b:load_state_dict(a:state_dict())
    c:load_state_dict(a:state_dict())
    local x = tl.randn(4, 2, 8):double()
    assert.tensor_near(a(x), b(x), 1e-15, 1e-15)
    assert.tensor_near(a(x), c(x), 1e-15, 1e-15)
  end)

  it("TransformerEncoder holds deep copies: own tensors, equal values, trained apart", function()
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 })
    local enc = nn.TransformerEncoder(layer, 3)
    assert.are.equal(3, #enc.layers)
    local first = enc.layers[1]
    for _, i in ipairs({ 2, 3 }) do
      local other = enc.layers[i]
      assert.are_not.equal(first, other)
      assert.are_not.equal(first.linear1.weight, other.linear1.weight)
      assert.tensor_equal(first.linear1.weight, other.linear1.weight)
      assert.tensor_equal(layer.self_attn.in_proj_weight, other.self_attn.in_proj_weight)
    end
    tl.no_grad(function() first.linear1.weight:fill_(7) end)
    assert.are.equal(7, first.linear1.weight:max():item())
    assert.is_true(enc.layers[2].linear1.weight:max():item() < 1)
    assert.is_true(layer.linear1.weight:max():item() < 1)
    assert.is_true(first.linear1.weight.requires_grad and first.linear1.weight.is_leaf)
  end)
end)

describe("attention gradcheck (float64)", function()
  local function dbl(...) return tl.randn(...):double():requires_grad_() end

  it("MultiheadAttention with masks, kdim/vdim, bias_kv and zero attention", function()
    tl.manual_seed(41)
    local m = nn.MultiheadAttention(4, 2, { kdim = 3, vdim = 2, add_bias_kv = true, add_zero_attn = true,
      dtype = "float64" })
    local am = tl.tensor({ { false, true, false }, { false, false, true } })
    local kpm = tl.tensor({ { false, false, true }, { false, true, false } })
    local inputs = { dbl(2, 2, 4), dbl(3, 2, 3), dbl(3, 2, 2) }
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    assert.is_true(gradcheck(function(q, k, v)
      local out, w = m(q, k, v, { attn_mask = am, key_padding_mask = kpm, average_attn_weights = false })
      return { out, w }
    end, inputs))
  end)

  it("self-attention through the fused op, and an encoder layer of each norm order", function()
    tl.manual_seed(42)
    local m = nn.MultiheadAttention(4, 2, { dtype = "float64", batch_first = true })
    local inputs = { dbl(2, 3, 4) }
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    assert.is_true(gradcheck(function(x) return m(x, x, x, { need_weights = false, is_causal = true }) end, inputs))
    for _, norm_first in ipairs({ false, true }) do
      local layer = nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 6, dropout = 0, norm_first = norm_first,
        activation = "gelu", dtype = "float64" })
      inputs = { dbl(3, 2, 4) }
      for _, p in ipairs(layer:parameters()) do inputs[#inputs + 1] = p end
      local mask = tl.randn(3, 3):double()
      assert.is_true(gradcheck(function(x) return layer(x, { src_mask = mask }) end, inputs))
    end
  end)
end)

describe("attention dropout", function()
  it("drops attention weights in training (the weights returned after dropout), none in eval", function()
    tl.manual_seed(51)
    local m = nn.MultiheadAttention(8, 2, { dropout = 0.4, dtype = "float64" })
    local x = tl.randn(5, 3, 8):double()
    m:eval()
    local out_e, w_e = m(x, x, x, { average_attn_weights = false })
    tl.manual_seed(1)
    local out_e2 = m(x, x, x, { need_weights = false })
    assert.tensor_near(out_e, out_e2, 1e-12, 1e-12)
    m:train()
    tl.manual_seed(77)
    local out_t, w_t = m(x, x, x, { average_attn_weights = false })
    tl.manual_seed(77)
    local want = F.dropout(w_e, 0.4, true)
    assert.tensor_near(want, w_t, 1e-14, 1e-14)
    local v = tl.linear(x, m.in_proj_weight:narrow(1, 17, 8), m.in_proj_bias:narrow(1, 17, 8))
    local heads = v:reshape(5, 3, 2, 4):permute(2, 3, 1, 4)
    local ref = m.out_proj(tl.matmul(want, heads):permute(3, 1, 2, 4):reshape(5, 3, 8))
    assert.tensor_near(ref, out_t, 1e-12, 1e-12)
    local zeros = w_t:eq(0):sum():item() / w_t:numel()
    assert.is_true(zeros > 0.2 and zeros < 0.6, "dropped share " .. zeros)
    -- the fused path (no weights) drops too: two seeds, two results
    tl.manual_seed(1)
    local a = m(x, x, x, { need_weights = false })
    tl.manual_seed(2)
    local b = m(x, x, x, { need_weights = false })
    assert.is_true((a - b):abs():max():item() > 1e-6)
  end)
end)

describe("attention layers reject bad input", function()
  it("names the option, the size or the shape", function()
    assert.error_matches(function() nn.MultiheadAttention(8, 3) end,
      { "nn.MultiheadAttention", "embed_dim (8)", "divisible", "num_heads (3)" })
    assert.error_matches(function() nn.MultiheadAttention(8, 2, { batchfirst = true }) end,
      { "nn.MultiheadAttention", "unknown option 'batchfirst'", "batch_first" })
    assert.error_matches(function() nn.MultiheadAttention(8, 2, { dropout = -0.1 }) end, { "dropout", "-0.1" })
    assert.error_matches(function() nn.TransformerEncoderLayer(8, 2, { dim_feed_forward = 8 }) end,
      { "nn.TransformerEncoderLayer", "unknown option 'dim_feed_forward'", "dim_feedforward" })
    assert.error_matches(function() nn.TransformerEncoderLayer(8, 3) end, { "d_model (8)", "nhead (3)" })
    assert.error_matches(function() nn.TransformerEncoderLayer(8, 2, { activation = "swish" }) end,
      { "activation", "'swish'" })
    assert.error_matches(function() nn.TransformerEncoder(nn.Linear(2, 2), 2, { nrom = 1 }) end,
      { "nn.TransformerEncoder", "unknown option 'nrom'" })
    assert.error_matches(function() nn.TransformerEncoder({}, 2) end, { "nn.TransformerEncoder", "module" })

    local m = nn.MultiheadAttention(8, 2)
    local q = tl.randn(4, 3, 8)
    assert.error_matches(function() m(q, q, q, { need_weight = false }) end,
      { "nn.MultiheadAttention", "unknown option 'need_weight'", "need_weights" })
    assert.error_matches(function() m(tl.randn(4, 3, 6), q, q) end, { "query", "size 8", "[4, 3, 6]" })
    assert.error_matches(function() m(q, tl.randn(5, 3), q) end, { "key", "3 dims", "[5, 3]" })
    assert.error_matches(function() m(q, tl.randn(5, 2, 8), tl.randn(5, 2, 8)) end, { "batch 3" })
    assert.error_matches(function() m(q, tl.randn(5, 3, 8), tl.randn(6, 3, 8)) end, { "one length" })
    assert.error_matches(function() m(q, q, q, { attn_mask = tl.zeros(4, 5):bool() }) end,
      { "attn_mask", "[4, 4] or [6, 4, 4]", "[4, 5]" })
    assert.error_matches(function() m(q, q, q, { key_padding_mask = tl.zeros(4, 3):bool() }) end,
      { "key_padding_mask", "[3, 4]", "[4, 3]" })
    assert.error_matches(function() m(q, q, q, { attn_mask = tl.zeros(4, 4, { dtype = "int64" }) }) end,
      { "attn_mask", "bool or floating", "int64" })
    assert.error_matches(function() m(q:double(), q:double(), q:double()) end, { "query", "float32", "float64" })
    assert.error_matches(function() m(tl.randn(8), q, q) end, { "query", "2 (unbatched) or 3 dims" })
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 })
    assert.error_matches(function() layer(q, { mask = tl.zeros(4, 4) }) end,
      { "nn.TransformerEncoderLayer", "unknown option 'mask'", "src_mask" })
  end)
end)

describe("attention layers on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the attention layers did not run")
    return
  end

  it("MultiheadAttention gives the CPU's values and gradients, masked and fused", function()
    tl.manual_seed(61)
    local cpu = nn.MultiheadAttention(16, 4, { kdim = 8, vdim = 12, batch_first = true })
    local gpu = nn.MultiheadAttention(16, 4, { kdim = 8, vdim = 12, batch_first = true, device = "cuda" })
    gpu:load_state_dict(cpu:state_dict())
    local q, k, v = tl.randn(2, 5, 16), tl.randn(2, 7, 8), tl.randn(2, 7, 12)
    local kpm = tl.rand(2, 7):lt(0.3)
    kpm:narrow(1, 1, 1):fill_(false)
    local am = tl.randn(5, 7)
    local oc, wc = cpu(q, k, v, { key_padding_mask = kpm, attn_mask = am })
    local og, wg = gpu(q:to("cuda"), k:to("cuda"), v:to("cuda"), { key_padding_mask = kpm:to("cuda"),
      attn_mask = am:to("cuda") })
    assert.tensor_near(oc, og:to("cpu"), 1e-4, 1e-5)
    assert.tensor_near(wc, wg:to("cpu"), 1e-4, 1e-5)
    oc:square():sum():backward()
    og:square():sum():backward()
    local gp = gpu:parameters()
    for i, p in ipairs(cpu:parameters()) do assert.tensor_near(p.grad, gp[i].grad:to("cpu"), 1e-3, 1e-4) end
    local fc = cpu(q, q:narrow(3, 1, 8), q:narrow(3, 1, 12), { need_weights = false, is_causal = true })
    local qg = q:to("cuda")
    local fg = gpu(qg, qg:narrow(3, 1, 8), qg:narrow(3, 1, 12), { need_weights = false, is_causal = true })
    assert.tensor_near(fc, fg:to("cpu"), 1e-4, 1e-5)
  end)

  it("TransformerEncoder (pre- and post-norm layers) gives the CPU's values", function()
    tl.manual_seed(62)
    for _, norm_first in ipairs({ false, true }) do
      local opts = { dim_feedforward = 32, dropout = 0, norm_first = norm_first }
      local cpu = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, opts), 2)
      local gpu = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, opts), 2):to("cuda")
      gpu:load_state_dict(cpu:state_dict())
      local x = tl.randn(6, 3, 16)
      local mask = tl.rand(6, 6):lt(0.3)
      assert.tensor_near(cpu(x, { mask = mask }), gpu(x:to("cuda"), { mask = mask:to("cuda") }):to("cpu"), 1e-4, 1e-5)
    end
  end)
end)
