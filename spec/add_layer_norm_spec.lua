-- add_layer_norm (s = x + residual, y = layer_norm(s), one op) and the layer norm backward's gated paths: values and gradients against float64 Lua loops in every dtype (odd sizes, strided inputs, no weight or bias), the kernels each set of wanted gradients runs (the one pass, the input's alone, the weight's alone), the sum's gradient absent and present, x's and residual's gradients kept apart, the Lua forms, autocast, bad input; the same on CUDA (#cuda).
local tl = require("tlua")
local cases = require("helpers.layer_norm_cases")
local ref = require("helpers.reference")

local FLOATING = { "float32", "float64", "bfloat16", "float16" }
-- {rtol, atol} against the float64 reference: float32 computes in float32 (sums in double);
-- bfloat16 and float16 compute in float32 too, their inputs and results rounded to 8 and 11 bits
-- (the reference reads the rounded inputs and rounds s as the op does)
local TOL = { float64 = { 1e-10, 1e-10 }, float32 = { 1e-4, 1e-4 }, bfloat16 = { 3e-2, 3e-2 },
  float16 = { 4e-3, 4e-3 } }

local function filled(n, v)
  local t = {}
  for j = 1, n do t[j] = v end
  return t
end

-- the ops of the kernels a function ran
local function kernels_of(fn)
  local ran = {}
  for _, e in ipairs(tl.trace(fn)) do ran[e.op] = true end
  return ran
end

-- One run of add_layer_norm on device in dtype, against the reference. o: rows, D, weight, bias
-- (default true), grads (which of x, r, w, b require grad; default all), sum_grad (s used later;
-- default true), layout(t) (lays x and residual out on the device), eps. Returns the kernels'
-- ops it ran in backward.
local function check_add(device, dtype, o)
  local rows, D = o.rows, o.D
  local want = o.grads or { x = true, r = true, w = true, b = true }
  local with_weight, with_bias = o.weight ~= false, o.bias ~= false
  local eps = o.eps or 1e-5
  local host = {
    x = tl.randn(rows, D):to(dtype), r = tl.randn(rows, D):to(dtype), w = tl.randn(D):to(dtype),
    b = tl.randn(D):to(dtype), g = tl.randn(rows, D):to(dtype), gs = tl.randn(rows, D):to(dtype),
  }
  local v = {}
  for k, t in pairs(host) do v[k] = t:double():totable() end
  local layout = o.layout or function(t) return t end
  local function leaf(name, t)
    t = t:to(device)
    if name == "x" or name == "r" then t = layout(t) end
    if want[name] then t:requires_grad_() end
    return t
  end
  local x, r = leaf("x", host.x), leaf("r", host.r)
  local w = with_weight and leaf("w", host.w) or nil
  local b = with_bias and leaf("b", host.b) or nil
  local y, s = tl.add_layer_norm(x, r, w, b, { eps = eps })
  assert.are.equal(dtype, y.dtype)
  assert.are.equal(dtype, s.dtype)
  local g, gs = host.g:to(device), host.gs:to(device)
  local ran = {}
  if want.x or want.r or (want.w and w) or (want.b and b) then
    local loss = (y * g):sum()
    if o.sum_grad ~= false then loss = loss + (s * gs):sum() end
    ran = kernels_of(function() loss:backward() end)
  end
  local ey, es, egx, egw, egb = cases.add_layer_norm(v.x, v.r, with_weight and v.w or filled(D, 1.0),
    with_bias and v.b or filled(D, 0.0), v.g, o.sum_grad ~= false and v.gs or nil, eps, dtype)
  local tol = TOL[dtype]
  local what = string.format("add_layer_norm [%d, %d] %s on %s", rows, D, dtype, device)
  assert.tensor_near(ey, y:detach():cpu(), tol[1], tol[2], what .. ": y")
  assert.tensor_near(es, s:detach():cpu(), tol[1], tol[2], what .. ": s")
  if want.x then assert.tensor_near(egx, x.grad:cpu(), tol[1], tol[2], what .. ": x.grad") end
  if want.r then assert.tensor_near(egx, r.grad:cpu(), tol[1], tol[2], what .. ": residual.grad") end
  if want.w and w then assert.tensor_near(egw, w.grad:cpu(), tol[1], tol[2] * math.sqrt(rows), what .. ": weight.grad") end
  if want.b and b then assert.tensor_near(egb, b.grad:cpu(), tol[1], tol[2] * math.sqrt(rows), what .. ": bias.grad") end
  if not want.x then assert.is_nil(x.grad) end
  if not want.w and w then assert.is_nil(w.grad) end
  return ran
end

-- the values, every gradient path and the layouts on one device
local function value_specs(device)
  for _, dtype in ipairs(FLOATING) do
    it("gives y, s and every gradient of float64 loops in " .. dtype .. " (odd sizes, 3 dims)", function()
      tl.manual_seed(1)
      for _, size in ipairs({ { 5, 1 }, { 4, 3 }, { 6, 7 }, { 3, 769 }, { 70, 33 } }) do
        check_add(device, dtype, { rows = size[1], D = size[2] })
      end
      -- leading dims fold into rows
      local x, r = tl.randn(2, 3, 5):to(dtype):to(device), tl.randn(2, 3, 5):to(dtype):to(device)
      local y, s = tl.add_layer_norm(x, r)
      local y2, s2 = tl.add_layer_norm(x:reshape(6, 5), r:reshape(6, 5))
      assert.are.same({ 2, 3, 5 }, y.shape)
      assert.tensor_equal(y2:reshape(2, 3, 5), y)
      assert.tensor_equal(s2:reshape(2, 3, 5), s)
    end)

    it("runs the one pass, the input's kernel or the weight's as the wanted gradients say, in " .. dtype, function()
      tl.manual_seed(2)
      local all = check_add(device, dtype, { rows = 9, D = 7 })
      assert.is_true(all.layer_norm_backward)
      assert.is_nil(all.layer_norm_backward_input)
      assert.is_nil(all.layer_norm_backward_weight)
      -- only the bias with the input: still one pass
      local bias = check_add(device, dtype, { rows = 9, D = 7, grads = { x = true, b = true } })
      assert.is_true(bias.layer_norm_backward)
      -- the input's (and residual's) alone, with and without the sum's gradient
      for _, grads in ipairs({ { x = true }, { r = true }, { x = true, r = true } }) do
        for _, sum_grad in ipairs({ true, false }) do
          local ran = check_add(device, dtype, { rows = 9, D = 7, grads = grads, sum_grad = sum_grad })
          assert.is_true(ran.layer_norm_backward_input)
          assert.is_nil(ran.layer_norm_backward)
          assert.is_nil(ran.layer_norm_backward_weight)
        end
      end
      -- the weight's and bias's alone
      local weight = check_add(device, dtype, { rows = 9, D = 7, grads = { w = true, b = true } })
      assert.is_true(weight.layer_norm_backward_weight)
      assert.is_nil(weight.layer_norm_backward)
      assert.is_nil(weight.layer_norm_backward_input)
    end)

    it("takes no weight or no bias, a strided x and residual, eps, in " .. dtype, function()
      tl.manual_seed(3)
      check_add(device, dtype, { rows = 6, D = 5, weight = false })
      check_add(device, dtype, { rows = 6, D = 5, bias = false })
      check_add(device, dtype, { rows = 6, D = 5, weight = false, bias = false, eps = 1e-3 })
      local transposed = function(t) return t:transpose(1, 2):contiguous():transpose(1, 2) end
      check_add(device, dtype, { rows = 6, D = 5, layout = transposed })
      local padded = function(t)
        local buffer = tl.zeros({ t.shape[1], t.shape[2] + 3 }, { dtype = t.dtype, device = t.device })
        local view = buffer:narrow(2, 2, t.shape[2])
        view:copy_(t)
        return view
      end
      check_add(device, dtype, { rows = 6, D = 5, layout = padded, grads = { x = true } })
    end)
  end

  -- mixed precision: a float32 stream with a 16-bit residual and/or output, no cast between
  for _, half in ipairs({ "bfloat16", "float16" }) do
    it("reads a " .. half .. " residual and writes a " .. half .. " output over a float32 sum, as float64 loops", function()
      tl.manual_seed(11)
      local round = half == "bfloat16" and ref.round_bf16 or ref.round_f16
      local tol = half == "bfloat16" and 8e-3 or 1e-3
      for _, size in ipairs({ { 4, 7 }, { 3, 264 }, { 5, 16 }, { 2, 1 } }) do
        local rows, D = size[1], size[2]
        for _, out_half in ipairs({ true, false }) do
          local host = { x = tl.randn(rows, D), r = tl.randn(rows, D):to(half), w = tl.randn(D), b = tl.randn(D),
            g = tl.randn(rows, D), gs = tl.randn(rows, D) }
          local x = host.x:to(device):requires_grad_()
          local r = host.r:to(device):requires_grad_()
          local w, b = host.w:to(device):requires_grad_(), host.b:to(device):requires_grad_()
          local y, s
          local forward = tl.trace(function()
            y, s = tl.add_layer_norm(x, r, w, b, out_half and { output_dtype = half } or nil)
          end)
          assert.are.equal(out_half and half or "float32", y.dtype)
          assert.are.equal("float32", s.dtype)
          local g = out_half and host.g:to(half) or host.g
          local loss = (y * g:to(device)):sum() + (s * host.gs:to(device)):sum()
          local backward = tl.trace(function() loss:backward() end)
          -- (the loss's bfloat16 sum added to a float32 one casts a 0-dim tensor)
          for _, e in ipairs(forward) do assert.are_not.equal("cast", e.op) end
          for _, e in ipairs(backward) do
            if e.op == "cast" then assert.are.same({}, e.shapes[1], "backward cast a tensor") end
          end
          assert.are.equal(half, r.grad.dtype)
          local v = {}
          for k, t in pairs(host) do v[k] = t:double():totable() end
          local gv = out_half and g:double():totable() or v.g
          local ey, es, egx, egw, egb = cases.add_layer_norm(v.x, v.r, v.w, v.b, gv, v.gs, 1e-5, "float32")
          local what = string.format("mixed add_layer_norm [%d, %d] %s on %s", rows, D, half, device)
          if out_half then ey = ref.map(ey, round) end
          assert.tensor_near(ey, y:detach():cpu():double(), out_half and tol or 1e-4, out_half and tol or 1e-4, what .. ": y")
          assert.tensor_near(es, s:detach():cpu(), 1e-5, 1e-5, what .. ": s")
          assert.tensor_near(egx, x.grad:cpu(), 1e-4, 1e-4, what .. ": x.grad")
          assert.tensor_near(ref.map(egx, round), r.grad:cpu():double(), tol, tol, what .. ": residual.grad")
          assert.tensor_near(egw, w.grad:cpu(), 1e-4, 1e-4 * math.sqrt(rows), what .. ": weight.grad")
          assert.tensor_near(egb, b.grad:cpu(), 1e-4, 1e-4 * math.sqrt(rows), what .. ": bias.grad")
        end
      end
    end)

    it("gives layer_norm a " .. half .. " output of a float32 input, the input's gradient alone too", function()
      tl.manual_seed(12)
      local round = half == "bfloat16" and ref.round_bf16 or ref.round_f16
      local tol = half == "bfloat16" and 8e-3 or 1e-3
      for _, size in ipairs({ { 4, 7 }, { 3, 264 } }) do
        local rows, D = size[1], size[2]
        local hx, hw, hb, hg = tl.randn(rows, D), tl.randn(D), tl.randn(D), tl.randn(rows, D):to(half)
        for _, weights in ipairs({ true, false }) do
          local x = hx:detach():to(device):requires_grad_()
          local w, b = hw:detach():to(device), hb:detach():to(device)
          if weights then w:requires_grad_(); b:requires_grad_() end
          local y = tl.layer_norm(x, w, b, 1e-5, { output_dtype = half })
          assert.are.equal(half, y.dtype)
          local backward = tl.trace(function() (y * hg:to(device)):sum():backward() end)
          local ran = {}
          for _, e in ipairs(backward) do ran[e.op] = true end
          assert.is_nil(ran.cast)
          assert.is_true(weights and ran.layer_norm_backward or ran.layer_norm_backward_input)
          local ey, egx, egw, egb = cases.layer_norm(hx:double():totable(), hw:double():totable(),
            hb:double():totable(), hg:double():totable(), 1e-5)
          local what = string.format("mixed layer_norm [%d, %d] %s on %s", rows, D, half, device)
          assert.tensor_near(ref.map(ey, round), y:detach():cpu():double(), tol, tol, what .. ": y")
          assert.tensor_near(egx, x.grad:cpu(), 1e-4, 1e-4, what .. ": x.grad")
          if weights then
            assert.tensor_near(egw, w.grad:cpu(), 1e-4, 1e-4 * math.sqrt(rows), what .. ": weight.grad")
            assert.tensor_near(egb, b.grad:cpu(), 1e-4, 1e-4 * math.sqrt(rows), what .. ": bias.grad")
          end
        end
      end
      -- the weight's gradient alone from a 16-bit grad
      local x, w = tl.randn(3, 8):to(device), tl.randn(8):to(device):requires_grad_()
      local g = tl.randn(3, 8):to(half)
      local y = tl.layer_norm(x, w, nil, 1e-5, { output_dtype = half })
      local ran = kernels_of(function() (y * g:to(device)):sum():backward() end)
      assert.is_true(ran.layer_norm_backward_weight)
      local _, _, egw = cases.layer_norm(x:cpu():double():totable(), w:detach():cpu():double():totable(),
        tl.zeros(8):double():totable(), g:double():totable(), 1e-5)
      assert.tensor_near(egw, w.grad:cpu(), 1e-4, 1e-3)
      assert.are.equal("float32", w.grad.dtype)
    end)
  end

  it("promotes an input and a residual of other dtypes, each gradient in its own dtype", function()
    tl.manual_seed(13)
    for _, pair in ipairs({ { "bfloat16", "float32", "float32" }, { "float32", "float64", "float64" },
      { "bfloat16", "float16", "float32" } }) do
      local hx, hr = tl.randn(3, 6):to(pair[1]), tl.randn(3, 6):to(pair[2])
      local x, r = hx:to(device):requires_grad_(), hr:to(device):requires_grad_()
      local y, s = tl.add_layer_norm(x, r)
      assert.are.equal(pair[3], y.dtype)
      assert.are.equal(pair[3], s.dtype)
      local g = tl.randn(3, 6)
      ;(y:double() * g:to(device):double()):sum():backward()
      local ey, es, egx = cases.add_layer_norm(hx:double():totable(), hr:double():totable(),
        filled(6, 1.0), filled(6, 0.0), g:double():totable(), nil, 1e-5, pair[3])
      local tol = TOL[pair[3]]
      assert.tensor_near(ey, y:detach():cpu(), tol[1], tol[2], pair[1] .. " + " .. pair[2] .. ": y")
      assert.tensor_near(es, s:detach():cpu(), tol[1], tol[2], pair[1] .. " + " .. pair[2] .. ": s")
      assert.are.equal(pair[1], x.grad.dtype)
      assert.are.equal(pair[2], r.grad.dtype)
      assert.tensor_near(egx, x.grad:cpu():double(), 2e-2, 2e-2)
      assert.tensor_near(egx, r.grad:cpu():double(), 2e-2, 2e-2)
    end
  end)

  it("uses the one pass for layer_norm when its input's and weight's gradients are wanted", function()
    tl.manual_seed(4)
    local x = tl.randn(5, 9, { device = device }):requires_grad_()
    local w = tl.randn(9, { device = device }):requires_grad_()
    local b = tl.randn(9, { device = device }):requires_grad_()
    local g = tl.randn(5, 9, { device = device })
    local loss = (tl.layer_norm(x, w, b) * g):sum()
    local ran = kernels_of(function() loss:backward() end)
    assert.is_true(ran.layer_norm_backward)
    assert.is_nil(ran.layer_norm_backward_input)
    local ey, egx, egw, egb = cases.layer_norm(x:detach():cpu():double():totable(), w:detach():cpu():double():totable(),
      b:detach():cpu():double():totable(), g:cpu():double():totable(), 1e-5)
    assert.tensor_near(ey, tl.layer_norm(x, w, b):detach():cpu(), 1e-5, 1e-5)
    assert.tensor_near(egx, x.grad:cpu(), 1e-4, 1e-4)
    assert.tensor_near(egw, w.grad:cpu(), 1e-4, 1e-4)
    assert.tensor_near(egb, b.grad:cpu(), 1e-4, 1e-4)
  end)

  it("gives x and residual gradients that accumulate apart", function()
    tl.manual_seed(5)
    local x = tl.randn(3, 4, { device = device, dtype = "float64" }):requires_grad_()
    local r = tl.randn(3, 4, { device = device, dtype = "float64" }):requires_grad_()
    local g = tl.randn(3, 4, { device = device, dtype = "float64" })
    local y = tl.add_layer_norm(x, r)
    local loss = (y * g):sum()
    loss:backward({ retain_graph = true })
    local first = x.grad:clone()
    assert.tensor_equal(first, r.grad)
    -- a change of one gradient leaves the other as it was
    x.grad:mul_(3)
    assert.tensor_equal(first, r.grad)
    -- a second backward adds into each on its own
    loss:backward()
    assert.tensor_near(first * 4, x.grad, 1e-12, 1e-12)
    assert.tensor_near(first * 2, r.grad, 1e-12, 1e-12)
    -- x as its own residual: both gradients reach it
    local z = tl.randn(3, 4, { device = device, dtype = "float64" }):requires_grad_()
    local yz, sz = tl.add_layer_norm(z, z)
    local loss2 = (yz * g):sum() + sz:sum()
    loss2:backward()
    local zv = z:detach():cpu():totable()
    local _, _, egx = cases.add_layer_norm(zv, zv, filled(4, 1.0), filled(4, 0.0),
      g:cpu():totable(), { filled(4, 1.0), filled(4, 1.0), filled(4, 1.0) }, 1e-5)
    assert.tensor_near(egx, (z.grad / 2):cpu(), 1e-10, 1e-10)
  end)

  it("passes the sum on alone when the normalized output is unused", function()
    local x = tl.randn(2, 5, { device = device, dtype = "float64" }):requires_grad_()
    local r = tl.randn(2, 5, { device = device, dtype = "float64" }):requires_grad_()
    local w = tl.randn(5, { device = device, dtype = "float64" }):requires_grad_()
    local _, s = tl.add_layer_norm(x, r, w)
    local gs = tl.randn(2, 5, { device = device, dtype = "float64" })
    local loss = (s * gs):sum()
    loss:backward()
    assert.tensor_near(gs, x.grad, 1e-12, 0)
    assert.tensor_near(gs, r.grad, 1e-12, 0)
    assert.tensor_near(tl.zeros(5, { dtype = "float64" }), w.grad:cpu(), 0, 1e-12)
  end)
end

describe("add_layer_norm on the cpu", function()
  value_specs("cpu")

  it("is x:add_layer_norm, nn.functional.add_layer_norm (normalized_shape of 1 or more dims) and LayerNorm:add_forward", function()
    tl.manual_seed(6)
    local x, r = tl.randn(2, 3, 4), tl.randn(2, 3, 4)
    local w, b = tl.randn(4), tl.randn(4)
    local y, s = tl.add_layer_norm(x, r, w, b, { eps = 1e-3 })
    local ey = tl.layer_norm(x + r, w, b, 1e-3)
    assert.tensor_near(ey, y, 1e-6, 1e-6)
    assert.tensor_equal(x + r, s)
    local my, ms = x:add_layer_norm(r, w, b, { eps = 1e-3 })
    assert.tensor_equal(y, my)
    assert.tensor_equal(s, ms)
    local F = tl.nn.functional
    local fy, fs = F.add_layer_norm(x, r, 4, w, b, 1e-3)
    assert.tensor_equal(y, fy)
    assert.tensor_equal(s, fs)
    -- two normalized dims: as nn.LayerNorm({3, 4}) of the sum
    local ln = tl.nn.LayerNorm({ 3, 4 })
    tl.no_grad(function()
      ln.weight:copy_(tl.randn(3, 4))
      ln.bias:copy_(tl.randn(3, 4))
    end)
    local ly, ls = ln:add_forward(x, r)
    assert.are.same({ 2, 3, 4 }, ly.shape)
    assert.tensor_near(ln(x + r), ly, 1e-6, 1e-6)
    assert.tensor_equal(x + r, ls)
    local gy = F.add_layer_norm(x, r, { 3, 4 }, ln.weight, ln.bias)
    assert.tensor_equal(ly, gy)
    local plain = tl.nn.LayerNorm(4, { elementwise_affine = false })
    assert.tensor_equal(plain(x + r), (plain:add_forward(x, r)))
  end)

  it("computes under autocast in float32, as the composed add and layer_norm", function()
    tl.manual_seed(7)
    local x = tl.randn(3, 8)
    local branch = tl.randn(3, 8):bfloat16()
    local w, b = tl.randn(8), tl.randn(8)
    local y, s = tl.autocast("bfloat16", function() return tl.add_layer_norm(x, branch, w, b) end)
    assert.are.equal("float32", y.dtype)
    assert.are.equal("float32", s.dtype)
    assert.tensor_equal(x + branch, s)
    assert.tensor_equal(tl.layer_norm(x + branch, w, b), y)
  end)

  it("gives output_dtype = 'autocast' the autocast dtype inside a region (the composed path's numbers, no cast), the input's outside", function()
    tl.manual_seed(14)
    local function run(fused)
      tl.manual_seed(14)
      local x = tl.randn(5, 12):requires_grad_()
      local h, M = tl.randn(5, 7), tl.randn(12, 7)
      local ln = tl.nn.LayerNorm(12, { output_dtype = fused and "autocast" or nil })
      local W = tl.randn(6, 12):requires_grad_()
      local r, loss, y
      local events = tl.trace(function()
        tl.autocast("bfloat16", function()
          r = tl.linear(h, M):requires_grad_() -- a bfloat16 branch
          local s
          if fused then y, s = ln:add_forward(x, r) else y, s = ln(x + r), x + r end
          loss = tl.linear(y, W):float():pow(2):sum() + (s * s):sum()
        end)
        loss:backward()
      end)
      return { y = y, loss = loss, x = x.grad, W = W.grad, w = ln.weight.grad, b = ln.bias.grad }, events
    end
    local fused, events = run(true)
    local composed = run(false)
    assert.are.equal("bfloat16", fused.y.dtype)
    assert.are.equal("float32", composed.y.dtype)
    for _, k in ipairs({ "loss", "x", "W", "w", "b" }) do
      assert.tensor_equal(composed[k], fused[k], k)
    end
    -- no cast of a [5, 12] activation (the residual's, the output's, their gradients) is left in
    -- the fused path; the composed one has them
    local function activation_casts(list)
      local n = 0
      for _, e in ipairs(list) do
        if e.op == "cast" and table.concat(e.shapes[1], "x") == "5x12" then n = n + 1 end
      end
      return n
    end
    local _, composed_events = run(false)
    assert.are.equal(0, activation_casts(events))
    assert.is_true(activation_casts(composed_events) >= 4)
    -- outside autocast: the input's dtype
    local ln = tl.nn.LayerNorm(4, { output_dtype = "autocast" })
    assert.are.equal("float32", ln(tl.randn(2, 4)).dtype)
    assert.are.equal("float64", tl.layer_norm(tl.randn(2, 4):double(), nil, nil, 1e-5, { output_dtype = "autocast" }).dtype)
  end)

  it("refuses bad input with a message naming the op and the argument", function()
    local x, r, w = tl.randn(3, 4), tl.randn(3, 4), tl.randn(4)
    local before = x:clone()
    assert.error_matches(function() tl.add_layer_norm(x, tl.randn(3, 5)) end,
      { "add_layer_norm", "residual", "[3, 4]", "[3, 5]" })
    assert.error_matches(function() tl.add_layer_norm(x, tl.randn(4)) end, { "add_layer_norm", "residual", "[3, 4]" })
    assert.error_matches(function() tl.add_layer_norm(x, r, tl.randn(5)) end,
      { "add_layer_norm", "weight", "[4]", "[5]" })
    assert.error_matches(function() tl.add_layer_norm(x, r, w, tl.randn(3)) end, { "add_layer_norm", "bias", "[4]" })
    assert.error_matches(function() tl.add_layer_norm(x, r, nil, nil, { output_dtype = "int32" }) end,
      { "add_layer_norm", "output's dtype", "float32", "bfloat16 or float16", "int32" })
    assert.error_matches(function() tl.add_layer_norm(x:double(), r, nil, nil, { output_dtype = "bfloat16" }) end,
      { "add_layer_norm", "output's dtype", "must be float64", "bfloat16" })
    assert.error_matches(function() tl.add_layer_norm(x, r, nil, nil, { output_dtype = "bf17" }) end,
      { "add_layer_norm", "output_dtype", "autocast", "bf17" })
    assert.error_matches(function() tl.add_layer_norm(x, r, nil, nil, { output_dtype = 16 }) end,
      { "add_layer_norm", "output_dtype" })
    assert.error_matches(function() tl.layer_norm(x, nil, nil, 1e-5, { output_dtype = "float64" }) end,
      { "layer_norm", "output's dtype", "float32", "float64" })
    assert.error_matches(function() tl.layer_norm(x, nil, nil, 1e-5, { out_dtype = "float16" }) end,
      { "layer_norm", "unknown option", "out_dtype", "output_dtype" })
    assert.error_matches(function() tl.add_layer_norm(x, tl.ones(3, 4, { dtype = "int64" })) end,
      { "add_layer_norm", "residual", "floating" })
    assert.error_matches(function() tl.nn.LayerNorm(4, { output_dtype = 3 }) end, { "LayerNorm", "output_dtype" })
    assert.error_matches(function() tl.add_layer_norm(x, r, w:double()) end, { "add_layer_norm", "weight", "float64" })
    assert.error_matches(function() tl.add_layer_norm(tl.ones(3, 4, { dtype = "int32" }), tl.ones(3, 4, { dtype = "int32" })) end,
      { "add_layer_norm", "floating" })
    assert.error_matches(function() tl.add_layer_norm(x, r, w, nil, { eps = -1 }) end, { "add_layer_norm", "eps", ">= 0" })
    assert.error_matches(function() tl.add_layer_norm(x, r, w, nil, { epsilon = 1e-3 }) end,
      { "add_layer_norm", "unknown option 'epsilon'", "eps" })
    assert.error_matches(function() tl.add_layer_norm(x, 3) end, { "add_layer_norm", "argument 2", "tensor" })
    assert.error_matches(function() tl.add_layer_norm(x, r, 3) end, { "add_layer_norm", "weight", "tensor or nil" })
    assert.error_matches(function() tl.add_layer_norm(tl.tensor(1.0), tl.tensor(2.0)) end, { "add_layer_norm", "0-dim" })
    local F = tl.nn.functional
    assert.error_matches(function() F.add_layer_norm(x, r, 5) end, { "add_layer_norm", "normalized_shape", "[5]" })
    assert.error_matches(function() F.add_layer_norm(x, tl.randn(4, 3), { 3, 4 }) end,
      { "add_layer_norm", "residual", "[3, 4]", "[4, 3]" })
    assert.tensor_equal(before, x)
  end)
end)

describe("add_layer_norm on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of add_layer_norm did not run")
    return
  end
  value_specs("cuda")

  it("runs rows longer than a block's shared memory holds (the split path of the one pass)", function()
    tl.manual_seed(8)
    for _, dtype in ipairs(FLOATING) do
      local ran = check_add("cuda", dtype, { rows = 3, D = 6200 })
      assert.is_true(ran.layer_norm_backward)
    end
    local events = tl.trace(function()
      local x = tl.randn(2, 6200, { device = "cuda" }):requires_grad_()
      local w = tl.randn(6200, { device = "cuda" }):requires_grad_()
      local loss = tl.layer_norm(x, w):sum()
      loss:backward()
    end)
    local variant
    for _, e in ipairs(events) do
      if e.op == "layer_norm_backward" then variant = e.variant end
    end
    assert.are.equal("split", variant)
  end)

  it("gives the CPU's sums over many rows (the blocks' partial sums added in order)", function()
    tl.manual_seed(9)
    local x, r = tl.randn(4099, 768), tl.randn(4099, 768)
    local w, b, g = tl.randn(768), tl.randn(768), tl.randn(4099, 768)
    local function grads(device)
      -- fresh leaves on each device (x:to("cpu") is x itself)
      local xs, rs = x:detach():to(device):requires_grad_(), r:detach():to(device):requires_grad_()
      local ws, bs = w:detach():to(device):requires_grad_(), b:detach():to(device):requires_grad_()
      local y = tl.add_layer_norm(xs, rs, ws, bs)
      local loss = (y * g:to(device)):sum()
      loss:backward()
      return { xs.grad:cpu(), ws.grad:cpu(), bs.grad:cpu() }
    end
    local cpu, cuda = grads("cpu"), grads("cuda")
    assert.tensor_near(cpu[1], cuda[1], 1e-4, 1e-5)
    assert.tensor_near(cpu[2], cuda[2], 1e-4, 1e-3)
    assert.tensor_near(cpu[3], cuda[3], 1e-4, 1e-3)
    -- and the same bits on a second run
    local again = grads("cuda")
    assert.tensor_equal(cuda[2], again[2])
  end)

  it("refuses a residual on another device", function()
    local x = tl.randn(3, 4, { device = "cuda" })
    assert.error_matches(function() tl.add_layer_norm(x, tl.randn(3, 4)) end, { "add_layer_norm", "residual", "cpu" })
    assert.error_matches(function() tl.add_layer_norm(x, x, tl.ones(4)) end, { "add_layer_norm", "weight", "cpu" })
  end)
end)
