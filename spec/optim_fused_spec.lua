-- Fused Adam/AdamW (one adam_step_multi kernel a step), float32 master weights: against float64 Lua (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local optim = tl.optim

-- ---- the reference: torch.optim.Adam / AdamW (amsgrad = False) in float64 on flat arrays ----------
local reference_step = require("helpers.optim_cases").adam_step

local ROUND = { float32 = ref.round_f32, float64 = function(x) return x end, bfloat16 = ref.round_bf16,
  float16 = ref.round_f16 }

-- n values of N(0, 1) (or of `scale`) exact in dtype
local function values(rng, n, dtype, scale)
  local out = {}
  for i = 1, n do out[i] = ROUND[dtype]((scale or 1) * rng:normal()) end
  return out
end

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- a parameter of shape from flat values
local function param_of(flat, shape, dtype, device)
  return tl.tensor(flat, { dtype = dtype, device = device }):view(shape):requires_grad_()
end

local function flat(t) return ref.flatten(t:to("cpu"):double():totable()) end

-- the problem: parameters (flat values, shapes) and the gradients of each step
local function problem(seed, shapes, dtype, steps)
  local rng = ref.rng(seed)
  local pr = { shapes = shapes, p0 = {}, grads = {} }
  for i, shape in ipairs(shapes) do pr.p0[i] = values(rng, numel(shape), dtype) end
  for k = 1, steps do
    pr.grads[k] = {}
    for i, shape in ipairs(shapes) do pr.grads[k][i] = values(rng, numel(shape), dtype, 0.5) end
  end
  return pr
end

-- the reference's parameters after the steps (skip[k][i]: parameter i has no grad at step k)
local function reference(pr, o, skip)
  local p, state = {}, {}
  for i, p0 in ipairs(pr.p0) do
    p[i] = table.move(p0, 1, #p0, 1, {})
    state[i] = {}
  end
  for k, grads in ipairs(pr.grads) do
    for i = 1, #p do
      if not (skip and skip[k] and skip[k][i]) then reference_step(p[i], grads[i], state[i], o) end
    end
  end
  return p
end

-- runs an optimizer (made by make(params)) over the problem; returns the parameters and optimizer
local function run(pr, dtype, make, device, skip)
  local params = {}
  for i, shape in ipairs(pr.shapes) do params[i] = param_of(pr.p0[i], shape, dtype, device) end
  local opt = make(params)
  for k, grads in ipairs(pr.grads) do
    for i, p in ipairs(params) do
      p.grad = nil
      if not (skip and skip[k] and skip[k][i]) then
        p.grad = tl.tensor(grads[i], { dtype = dtype, device = device }):view(pr.shapes[i])
      end
    end
    opt:step()
  end
  return params, opt
end

local function torch_options(name, opts)
  return { lr = opts.lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = opts.weight_decay,
    decoupled = name == "AdamW" }
end

local function count_kernels(events, op)
  local n = 0
  for _, e in ipairs(events) do if e.op == op then n = n + 1 end end
  return n
end

-- odd sizes; the last one spans several chunks of the CPU kernel and passes the OpenMP threshold
local SHAPES = { { 7 }, { 3, 5 }, { 1 }, { 2, 3, 4 }, { 33 }, { 5, 1, 3 }, { 181, 223 } }

describe("fused Adam and AdamW", function()
  for _, name in ipairs({ "Adam", "AdamW" }) do
    for _, wd in ipairs({ 0, 0.05 }) do
      it(("%s (weight_decay %g) on float32: fused equals unfused, both follow the float64 reference"):format(name, wd),
        function()
          local pr = problem(11 + math.floor(wd * 100), SHAPES, "float32", 4)
          local opts = { lr = 0.01, weight_decay = wd }
          -- parameter 2 has no grad at step 1 and parameter 5 none at step 3: skipped, a step behind
          local skip = { [1] = { [2] = true }, [3] = { [5] = true } }
          local function maker(fused)
            return function(ps)
              return optim[name](ps, { lr = opts.lr, weight_decay = wd, fused = fused })
            end
          end
          local fused, fopt = run(pr, "float32", maker(true), "cpu", skip)
          local unfused = run(pr, "float32", maker(false), "cpu", skip)
          local expected = reference(pr, torch_options(name, opts), skip)
          for i, p in ipairs(fused) do
            local label = ("%s parameter %d"):format(name, i)
            assert.tensor_near(unfused[i]:detach(), p:detach(), 1e-6, 1e-7, label .. ": fused vs unfused")
            assert.tensor_near(expected[i], flat(p), 1e-5, 1e-6, label .. ": against the reference")
          end
          assert.are.equal(4, fopt.state[fused[1]].step)
          assert.are.equal(3, fopt.state[fused[2]].step)
          assert.are.equal("float32", fopt.state[fused[1]].exp_avg.dtype)
          assert.is_nil(fopt.state[fused[1]].master)
        end)
    end
  end

  it("steps float64, float32, bfloat16 and float16 parameters of one group in one kernel", function()
    local rng = ref.rng(5)
    local dtypes = { "float64", "float32", "bfloat16", "float16" }
    local pr = { shapes = { { 4, 3 }, { 9 }, { 2, 5 }, { 6 } }, p0 = {}, grads = {} }
    for i, shape in ipairs(pr.shapes) do pr.p0[i] = values(rng, numel(shape), dtypes[i]) end
    local params = {}
    for i, shape in ipairs(pr.shapes) do params[i] = param_of(pr.p0[i], shape, dtypes[i]) end
    local opt = optim.AdamW(params, { lr = 0.02, weight_decay = 0.1 })
    local o = torch_options("AdamW", { lr = 0.02, weight_decay = 0.1 })
    for k = 1, 3 do
      pr.grads[k] = {}
      for i, shape in ipairs(pr.shapes) do
        pr.grads[k][i] = values(rng, numel(shape), dtypes[i], 0.5)
        params[i].grad = tl.tensor(pr.grads[k][i], { dtype = dtypes[i] }):view(shape)
      end
      local events = tl.trace(function() opt:step() end)
      assert.are.equal(1, count_kernels(events, "adam_step_multi"), "step " .. k)
    end
    local expected = reference(pr, o)
    assert.tensor_near(expected[1], flat(params[1]), 1e-12, 1e-14, "float64")
    assert.tensor_near(expected[2], flat(params[2]), 1e-5, 1e-6, "float32")
    for i = 3, 4 do
      local master = opt.state[params[i]].master
      assert.tensor_near(expected[i], flat(master), 1e-5, 1e-6, dtypes[i] .. " master")
      local rounded = {}
      for j, x in ipairs(flat(master)) do rounded[j] = ROUND[dtypes[i]](x) end
      assert.tensor_equal(rounded, params[i]:detach():double():view(-1), dtypes[i] .. " = the master rounded")
    end
    assert.are.equal("float64", opt.state[params[1]].exp_avg.dtype)
    assert.are.equal("float32", opt.state[params[3]].exp_avg_sq.dtype)
  end)

  for _, dtype in ipairs({ "bfloat16", "float16" }) do
    it(dtype .. " parameters with master weights follow the reference to float32 precision", function()
      local pr = problem(dtype == "bfloat16" and 23 or 29, SHAPES, dtype, 5)
      local opts = { lr = 0.003, weight_decay = 0.02 }
      local expected = reference(pr, torch_options("AdamW", opts))
      local results = {}
      for _, fused in ipairs({ true, false }) do
        local params, opt = run(pr, dtype, function(ps)
          return optim.AdamW(ps, { lr = opts.lr, weight_decay = opts.weight_decay, fused = fused })
        end, "cpu")
        for i, p in ipairs(params) do
          local s = opt.state[p]
          local label = ("%s parameter %d (fused %s)"):format(dtype, i, tostring(fused))
          assert.are.equal("float32", s.master.dtype, label)
          assert.are.equal("float32", s.exp_avg.dtype, label)
          assert.are.equal(dtype, p.dtype, label)
          local master = flat(s.master)
          assert.tensor_near(expected[i], master, 1e-5, 1e-6, label .. ": master")
          local rounded = {}
          for j, x in ipairs(master) do rounded[j] = ROUND[dtype](x) end
          assert.tensor_equal(rounded, p:detach():double():view(-1), label .. ": the parameter is the master rounded")
        end
        results[fused] = params
      end
      for i, p in ipairs(results[true]) do
        assert.tensor_equal(results[false][i]:detach(), p:detach(), "fused vs unfused " .. i)
      end
    end)
  end

  it("master weights keep the updates that bfloat16 rounds away", function()
    -- Adam on a constant gradient moves a parameter by lr per step (m / sqrt(v) = 1 once
    -- bias-corrected): 1e-3 is under half a bfloat16 ulp at 1.0 (2^-8), so each step rounds back
    local steps, lr = 10, 1e-3
    local function train(opts)
      local p = tl.ones(4, { dtype = "bfloat16" }):requires_grad_()
      local opt = optim.Adam({ p }, opts)
      for _ = 1, steps do
        p.grad = tl.ones(4, { dtype = "bfloat16" })
        opt:step()
      end
      return p, opt
    end
    local expected = 1 - steps * lr -- the float64 reference: 0.99
    local with_master, opt = train({ lr = lr })
    local fused_plain = train({ lr = lr, master_weights = false })
    local unfused_plain = train({ lr = lr, master_weights = false, fused = false })
    assert.tensor_near({ expected, expected, expected, expected }, opt.state[with_master].master, 1e-6, 1e-6)
    local rounded = ref.round_bf16(expected) -- 0.98828125
    assert.tensor_equal({ rounded, rounded, rounded, rounded }, with_master:detach():double())
    -- without a master the parameter never moved: it is 0.01 away from the reference
    assert.tensor_equal({ 1, 1, 1, 1 }, fused_plain:detach():double())
    assert.tensor_equal({ 1, 1, 1, 1 }, unfused_plain:detach():double())
    assert.is_true(math.abs(rounded - expected) < 2 ^ -9)
  end)

  it("tl.trace shows one adam_step_multi kernel per step for N parameters", function()
    local shapes = {}
    for i = 1, 24 do shapes[i] = { i, (i * 7) % 5 + 1 } end
    local pr = problem(3, shapes, "float32", 3)
    local params = {}
    for i, shape in ipairs(shapes) do params[i] = param_of(pr.p0[i], shape, "float32") end
    local opt = optim.AdamW(params, { lr = 0.01 })
    for k = 1, 3 do
      for i, p in ipairs(params) do p.grad = tl.tensor(pr.grads[k][i]):view(shapes[i]) end
      local events = tl.trace(function() opt:step() end)
      assert.are.equal(1, count_kernels(events, "adam_step_multi"), "step " .. k)
      assert.are.equal(0, count_kernels(events, "adam_step"), "step " .. k)
      if k > 1 then assert.are.equal(1, #events, "step " .. k .. ": nothing but the step") end
    end
    local expected = reference(pr, torch_options("AdamW", { lr = 0.01, weight_decay = 1e-2 }))
    for i, p in ipairs(params) do assert.tensor_near(expected[i], flat(p), 1e-5, 1e-6, "parameter " .. i) end
    -- two groups: one kernel each; fused = false: one adam_step per parameter
    local a, b, c = params[1], params[2], params[3]
    local two = optim.Adam({ { params = { a, b } }, { params = { c }, lr = 0.5 } })
    local unfused = optim.Adam({ a, b, c }, { fused = false })
    assert.are.equal(2, count_kernels(tl.trace(function() two:step() end), "adam_step_multi"))
    local events = tl.trace(function() unfused:step() end)
    assert.are.equal(3, count_kernels(events, "adam_step"))
    assert.are.equal(0, count_kernels(events, "adam_step_multi"))
  end)

  it("groups parameters by step count: one kernel per count", function()
    local pr = problem(41, { { 3 }, { 4 }, { 5 } }, "float32", 2)
    local skip = { [1] = { [2] = true } } -- parameter 2 starts a step late
    local params = {}
    for i, shape in ipairs(pr.shapes) do params[i] = param_of(pr.p0[i], shape, "float32") end
    local opt = optim.Adam(params, { lr = 0.05 })
    for k = 1, 2 do
      for i, p in ipairs(params) do
        if skip[k] and skip[k][i] then
          p.grad = nil
        else
          p.grad = tl.tensor(pr.grads[k][i])
        end
      end
      local events = tl.trace(function() opt:step() end)
      assert.are.equal(k, count_kernels(events, "adam_step_multi"), "step " .. k)
    end
    local expected = reference(pr, torch_options("Adam", { lr = 0.05, weight_decay = 0 }), skip)
    for i, p in ipairs(params) do assert.tensor_near(expected[i], flat(p), 1e-5, 1e-6, "parameter " .. i) end
    assert.are.equal(1, opt.state[params[2]].step)
  end)

  it("state_dict / load_state_dict keep the masters and float32 moments", function()
    local pr = problem(7, { { 3, 4 }, { 5 } }, "bfloat16", 5)
    local opts = { lr = 0.01, weight_decay = 0.1 }
    local function make(ps) return optim.AdamW(ps, opts) end
    local first = { shapes = pr.shapes, p0 = pr.p0, grads = { pr.grads[1], pr.grads[2], pr.grads[3] } }
    local params, opt = run(first, "bfloat16", make, "cpu")
    local sd = opt:state_dict()
    assert.are.equal("float32", sd.state[1].master.dtype)
    -- a fresh optimizer on copies of the parameters picks up from there
    local copies = {}
    for i, p in ipairs(params) do copies[i] = p:detach():clone():requires_grad_() end
    local resumed = make(copies)
    resumed:load_state_dict(sd)
    for i, p in ipairs(copies) do
      local s, was = resumed.state[p], opt.state[params[i]]
      assert.are.equal("float32", s.master.dtype)
      assert.are.equal("float32", s.exp_avg.dtype)
      assert.are.equal(3, s.step)
      assert.tensor_equal(was.master, s.master)
    end
    for k = 4, 5 do
      for i = 1, 2 do
        params[i].grad = tl.tensor(pr.grads[k][i], { dtype = "bfloat16" }):view(pr.shapes[i])
        copies[i].grad = params[i].grad:clone()
      end
      opt:step()
      resumed:step()
    end
    local expected = reference(pr, torch_options("AdamW", opts))
    for i = 1, 2 do
      assert.tensor_equal(params[i]:detach(), copies[i]:detach(), "parameter " .. i)
      assert.tensor_equal(opt.state[params[i]].master, resumed.state[copies[i]].master, "master " .. i)
      assert.tensor_near(expected[i], flat(resumed.state[copies[i]].master), 1e-5, 1e-6, "reference " .. i)
    end
    -- the options come with the state: a state dict saying master_weights = false drops the
    -- masters; its moments stay float32 for the fused step, in the parameter's dtype for the
    -- per-parameter one; either steps on
    for _, fused in ipairs({ true, false }) do
      local sd2 = opt:state_dict()
      sd2.param_groups[1].master_weights, sd2.param_groups[1].fused = false, fused
      local plain = optim.AdamW(copies, { lr = 0.01 })
      plain:load_state_dict(sd2)
      local s = plain.state[copies[1]]
      assert.is_nil(s.master)
      assert.are.equal(fused and "float32" or "bfloat16", s.exp_avg.dtype)
      plain:step()
      assert.are.equal(6, s.step)
    end
  end)

  it("rejects bad fused and master_weights options", function()
    local p = tl.zeros(3):requires_grad_()
    assert.error_matches(function() optim.AdamW({ p }, { fused = 1 }) end, { "optim.AdamW", "fused", "true or false" })
    assert.error_matches(function() optim.Adam({ p }, { master_weights = "yes" }) end,
      { "optim.Adam", "master_weights", "true or false" })
  end)
end)

-- ---- tl._adam_step_multi's checks: everything before any write --------------------------------------
describe("tl._adam_step_multi", function()
  local HYPER = { 0.01, 0.9, 0.999, 1e-8, 0.0 }
  local function call(ps, gs, ms, vs, ws, step)
    return tl._adam_step_multi(ps, gs, ms, vs, ws, HYPER[1], HYPER[2], HYPER[3], HYPER[4], HYPER[5], step or 1,
      true)
  end
  -- three float32 parameters, their grads and zero moments
  local function lists()
    local ps, gs, ms, vs = {}, {}, {}, {}
    for i, shape in ipairs({ { 2, 3 }, { 4 }, { 3, 2 } }) do
      ps[i] = tl.randn(shape)
      gs[i] = tl.randn(shape)
      ms[i], vs[i] = tl.zeros(shape), tl.zeros(shape)
    end
    return ps, gs, ms, vs
  end
  local function snapshot(...)
    local out = {}
    for _, list in ipairs({ ... }) do
      for _, t in ipairs(list) do out[#out + 1] = { t = t, value = t:clone() } end
    end
    return out
  end
  local function assert_unchanged(before, what)
    for i, s in ipairs(before) do assert.tensor_equal(s.value, s.t, what .. ": tensor " .. i) end
  end

  it("updates every parameter as tl._adam_step does, one at a time", function()
    local ps, gs, ms, vs = lists()
    local qs, ns, us = {}, {}, {}
    for i = 1, 3 do qs[i], ns[i], us[i] = ps[i]:clone(), ms[i]:clone(), vs[i]:clone() end
    for step = 1, 3 do
      call(ps, gs, ms, vs, nil, step)
      for i = 1, 3 do
        tl._adam_step(qs[i], gs[i], ns[i], us[i], step, HYPER[1], HYPER[2], HYPER[3], HYPER[4], HYPER[5], true)
      end
    end
    for i = 1, 3 do
      assert.tensor_equal(qs[i], ps[i])
      assert.tensor_equal(us[i], vs[i])
    end
  end)

  it("names the parameter of a bad tensor and changes nothing", function()
    local ps, gs, ms, vs = lists()
    local before = snapshot(ps, ms, vs)
    local ws = { false, false, false }
    local cases = {
      { function() call(ps, { gs[1], gs[2] }, ms, vs) end, { "_adam_step_multi", "grads", "2", "params", "3" } },
      { function() call(ps, gs, ms, { vs[1] }) end, { "exp_avg_sqs", "1 tensors" } },
      { function() call(ps, { gs[1], gs[2], tl.randn(2, 3) }, ms, vs) end,
        { "adamw_step_multi", "grad 3", "shape [2, 3]", "param 3 has [3, 2]" } },
      { function() call({ ps[1], tl.randn(3, 4):transpose(1, 2), ps[3] }, gs, ms, vs) end,
        { "param 2", "contiguous" } },
      { function() call(ps, gs, { ms[1], tl.zeros(4, { dtype = "float64" }), ms[3] }, vs) end,
        { "exp_avg 2", "float64", "expected float32" } },
      { function() call(ps, gs, ms, vs, { false, tl.zeros(4), false }) end, { "master 2", "float32 param" } },
      { function()
        call({ ps[1], ps[2], ps[1] }, { gs[1], gs[2], gs[1] }, { ms[1], ms[2], tl.zeros(2, 3) },
          { vs[1], vs[2], tl.zeros(2, 3) })
      end,
        { "param 1 and param 3 share memory" } },
      { function() call(ps, gs, { ms[1], ms[2], vs[3] }, vs) end, { "exp_avg 3 and exp_avg_sq 3 share memory" } },
      { function() call({ ps[1], tl.tensor({ 1, 2, 3, 4 }, { dtype = "int32" }), ps[3] }, gs, ms, vs) end,
        { "param 2", "floating" } },
      { function() call(ps, gs, ms, vs, ws, 0) end, { "step counts from 1" } },
      { function() call(ps, { gs[1], 3, gs[3] }, ms, vs) end, { "grads[2]", "expected a tensor" } },
    }
    for k, case in ipairs(cases) do
      assert.error_matches(case[1], case[2])
      assert_unchanged(before, "case " .. k)
    end
  end)

  it("reads strided grads, takes an empty list and empty parameters", function()
    local p, q = tl.randn(3, 4), nil
    q = p:clone()
    local g = tl.randn(4, 3)
    local m, v, m2, v2 = tl.zeros(3, 4), tl.zeros(3, 4), tl.zeros(3, 4), tl.zeros(3, 4)
    local e = tl.zeros(0, 3)
    call({ p, e }, { g:transpose(1, 2), tl.zeros(0, 3) }, { m, tl.zeros(0, 3) }, { v, tl.zeros(0, 3) })
    tl._adam_step(q, g:transpose(1, 2):contiguous(), m2, v2, 1, HYPER[1], HYPER[2], HYPER[3], HYPER[4], HYPER[5], true)
    assert.tensor_equal(q, p)
    assert.are.equal(0, #tl.trace(function() call({}, {}, {}, {}) end))
  end)

  it("optim.Adam names the parameter and group of a bad state and changes nothing", function()
    local a, b = tl.randn(2, 3):requires_grad_(), tl.randn(4, { dtype = "bfloat16" }):requires_grad_()
    local opt = optim.Adam({ { params = { a } }, { params = { b } } }, { lr = 0.1 })
    a.grad, b.grad = tl.randn(2, 3), tl.randn(4, { dtype = "bfloat16" })
    opt:step()
    local good = opt.state[b].master
    local before = { a:detach():clone(), b:detach():clone(), good:clone() }
    for _, case in ipairs({
      { tl.zeros(5), "shape [5]" }, { tl.zeros(4, { dtype = "bfloat16" }), "is bfloat16 but must be float32" },
      { tl.zeros(8):view(4, 2):select(2, 1), "contiguous" },
    }) do
      opt.state[b].master = case[1]
      assert.error_matches(function() opt:step() end, { "optim.Adam", "parameter 1 of group 2", "master", case[2] })
      assert.tensor_equal(before[1], a:detach())
      assert.tensor_equal(before[2], b:detach())
      assert.are.equal(1, opt.state[a].step)
    end
    opt.state[b].master = good
    opt:step()
    assert.are.equal(2, opt.state[b].step)
  end)
end)

-- ---- CUDA -------------------------------------------------------------------------------------------
describe("fused Adam on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of adam_step_multi did not run")
    return
  end

  -- 150 parameters of varied sizes: odd ones, under a vector, several chunks (32768 elements)
  local function many_shapes(rng)
    local shapes = {}
    for i = 1, 150 do
      local n = i % 50 == 0 and rng:int(40000, 70001) or i % 7 == 0 and rng:int(1, 3) or rng:int(1, 3000)
      shapes[i] = i % 3 == 0 and { 1, n } or { n }
    end
    return shapes
  end

  for _, dtype in ipairs({ "float32", "bfloat16" }) do
    it(("150 %s parameters%s in one kernel follow the float64 reference"):format(dtype,
      dtype == "bfloat16" and " with master weights" or ""), function()
      local shapes = many_shapes(ref.rng(dtype == "float32" and 1 or 2))
      local pr = problem(dtype == "float32" and 91 or 92, shapes, dtype, 3)
      local opts = { lr = 0.01, weight_decay = 0.05 }
      local params = {}
      for i, shape in ipairs(shapes) do params[i] = param_of(pr.p0[i], shape, dtype, "cuda") end
      local opt = optim.AdamW(params, opts)
      for k = 1, 3 do
        for i, p in ipairs(params) do
          p.grad = tl.tensor(pr.grads[k][i], { dtype = dtype, device = "cuda" }):view(shapes[i])
        end
        local events = tl.trace(function() opt:step() end)
        assert.are.equal(1, count_kernels(events, "adam_step_multi"), "step " .. k)
      end
      local expected = reference(pr, torch_options("AdamW", opts))
      for i, p in ipairs(params) do
        local label = ("%s parameter %d of %d elements"):format(dtype, i, numel(shapes[i]))
        if dtype == "float32" then
          assert.tensor_near(expected[i], flat(p), 1e-5, 1e-6, label)
        else
          local master = flat(opt.state[p].master)
          assert.tensor_near(expected[i], master, 1e-5, 1e-6, label .. ": master")
          local rounded = {}
          for j, x in ipairs(master) do rounded[j] = ROUND[dtype](x) end
          assert.tensor_equal(rounded, p:detach():to("cpu"):double():view(-1), label .. ": the master rounded")
        end
      end
    end)
  end

  it("gives the CPU's numbers on misaligned views and mixed dtypes", function()
    local rng = ref.rng(77)
    local dtypes = { "float32", "bfloat16", "float64", "float16", "float32" }
    local sizes = { 1003, 517, 70001, 9, 40000 }
    local p0, g0 = {}, {}
    for i, dtype in ipairs(dtypes) do
      p0[i] = values(rng, sizes[i] + 1, dtype)
      g0[i] = values(rng, sizes[i], dtype, 0.5)
    end
    local function steps(device)
      local ps, gs, ms, vs, ws = {}, {}, {}, {}, {}
      for i, dtype in ipairs(dtypes) do
        local n, opts = sizes[i], { dtype = dtype, device = device }
        -- one element in: contiguous, not aligned for vector accesses
        ps[i] = tl.tensor(p0[i], opts):narrow(1, 2, n)
        gs[i] = tl.tensor(g0[i], opts)
        local moments = { dtype = dtype == "float64" and "float64" or "float32", device = device }
        ms[i], vs[i] = tl.zeros(n, moments), tl.zeros(n, moments)
        ws[i] = (dtype == "bfloat16" or dtype == "float16") and ps[i]:to("float32") or false
      end
      local events = tl.trace(function()
        for step = 1, 2 do tl._adam_step_multi(ps, gs, ms, vs, ws, 0.01, 0.9, 0.999, 1e-8, 0.1, step, false) end
      end)
      assert.are.equal(2, count_kernels(events, "adam_step_multi"), device)
      return ps, ws
    end
    local cpu, cpu_masters = steps("cpu")
    local gpu, gpu_masters = steps("cuda")
    for i = 1, #dtypes do
      assert.tensor_equal(cpu[i], gpu[i]:to("cpu"), dtypes[i] .. " parameter " .. i)
      if cpu_masters[i] then assert.tensor_equal(cpu_masters[i], gpu_masters[i]:to("cpu"), "master " .. i) end
    end
  end)

  it("refuses parameters on two devices and changes nothing", function()
    local a, b = tl.randn(3), tl.randn(3, { device = "cuda" })
    local before = { a:clone(), b:to("cpu") }
    assert.error_matches(function()
      local on = { device = "cuda" }
      tl._adam_step_multi({ a, b }, { tl.randn(3), tl.randn(3, on) }, { tl.zeros(3), tl.zeros(3, on) },
        { tl.zeros(3), tl.zeros(3, on) }, nil, 0.01, 0.9, 0.999, 1e-8, 0, 1, true)
    end, { "adamw_step_multi", "param 2 is on cuda", "param 1 is on cpu" })
    assert.tensor_equal(before[1], a)
    assert.tensor_equal(before[2], b:to("cpu"))
    -- the optimizer makes one call per device
    local p, q = tl.randn(3):requires_grad_(), tl.randn(3, { device = "cuda" }):requires_grad_()
    local opt = optim.AdamW({ p, q })
    p.grad, q.grad = tl.randn(3), tl.randn(3, { device = "cuda" })
    assert.are.equal(2, count_kernels(tl.trace(function() opt:step() end), "adam_step_multi"))
  end)
end)
