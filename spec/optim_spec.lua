-- tl.optim: SGD, Adam, AdamW against PyTorch's update rules on fixed numbers, state dicts, the learning-rate
-- schedulers and clip_grad_norm; the composed optimizers' bad options, all-or-nothing steps and maximize.
local tl = require("tlua")
local optim = tl.optim

-- Golden values from PyTorch 1.13 (float64), computed with /usr/bin/python3 optim_golden.py:
--   import torch; torch.set_default_dtype(torch.float64)
--   P0 = <P0 below>; G = <G below>
--   def run(cls, **kw):
--       p = torch.tensor(P0, requires_grad=True); opt = cls([p], **kw); out = []
--       for g in G:
--           p.grad = torch.tensor(g); opt.step(); out.append(p.detach().clone().tolist())
--       return out
--   sgd = run(torch.optim.SGD, lr=0.1)
--   sgd_momentum = run(torch.optim.SGD, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
--   sgd_nesterov = run(torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
--   adam = run(torch.optim.Adam, lr=0.01)
--   adam_wd = run(torch.optim.Adam, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
--   adamw = run(torch.optim.AdamW, lr=0.01, weight_decay=0.1)
-- (each printed with repr(float) per element: the parameter after steps 1..5)
local P0 = { { 0.5, -1.0, 1.5 }, { 2.0, -0.5, 0.25 } }
local G = {
  { { 0.1, -0.2, 0.3 }, { 0.4, 0.0, -0.6 } },
  { { -0.3, 0.5, 0.1 }, { 0.2, -0.1, 0.05 } },
  { { 0.05, 0.05, -0.4 }, { -0.2, 0.3, 0.7 } },
  { { 0.6, -0.1, 0.2 }, { 0.0, 0.25, -0.3 } },
  { { -0.2, 0.4, -0.1 }, { 0.3, -0.35, 0.1 } },
}
local golden = {
  sgd = {{{0.49, -0.98, 1.47}, {1.96, -0.5, 0.31}}, {{0.52, -1.03, 1.46}, {1.94, -0.49, 0.305}}, {{0.515, -1.035, 1.5}, {1.96, -0.52, 0.235}}, {{0.455, -1.025, 1.48}, {1.96, -0.545, 0.265}}, {{0.47500000000000003, -1.065, 1.49}, {1.93, -0.51, 0.255}}},
  sgd_momentum = {{{0.4895, -0.979, 1.4685}, {1.958, -0.4995, 0.30975}}, {{0.50660945, -1.0042189, 1.42982835}, {1.9004378, -0.48960045, 0.35874622500000003}}, {{0.517052006495, -1.03051211299, 1.4297370194849999}, {1.86492142598, -0.507250214595, 0.33951995589750006}}, {{0.47198496053465455, -1.044248543779309, 1.4103680587039633}, {1.831278260078618, -0.5451784775373645, 0.3489107457449423}}, {{0.4489998327058624, -1.0916715078002857, 1.400666662748197}, {1.7723512603333034, -0.5473232535557089, 0.34804843693646986}}},
  sgd_nesterov = {{{0.48005, -0.9601, 1.44015}, {1.9202, -0.49905, 0.36352500000000004}}, {{0.5276329049999999, -1.03626581, 1.392898715}, {1.84453162, -0.478696805, 0.40173180250000007}}, {{0.5333870619804999, -1.0682102239609998, 1.4340221859415}, {1.830653647922, -0.5259185505705, 0.3071818068252501}}, {{0.42852723745968696, -1.072363236329374, 1.3955622764790612}, {1.798345309578748, -0.588349703462366, 0.34186472390725714}}, {{0.42581924199556437, -1.1600248465134497, 1.3965874096049034}, {1.7104985372647517, -0.5548932033239804, 0.3267062699317824}}},
  adam = {{{0.4900000009999999, -0.9900000005, 1.4900000003333334}, {1.99000000025, -0.5, 0.25999999983333333}}, {{0.49494189911200653, -0.9944221530217233, 1.4812893612157196}, {1.9806782041567113, -0.4925586328164353, 0.2660591346720661}}, {{0.49771688089923066, -0.9984167502784111, 1.4821290549921442}, {1.9767111519043121, -0.49680106725742745, 0.2642664218063354}}, {{0.4936578898178698, -1.0005765434080505, 1.480645739279325}, {1.9734615841045708, -0.5031318428057187, 0.26466721508252916}}, {{0.4919067555356895, -1.0052637466817511, 1.4803933501772213}, {1.9682680209917012, -0.5035928926939257, 0.26444452456946754}}},
  adam_wd = {{{0.4900000666662222, -0.9900000333332222, 1.4900000222221728}, {1.990000016666639, -0.4900001999960001, 0.2599999826087259}}, {{0.49351575045792717, -0.9925240643061751, 1.4806841112167273}, {1.9804063377405239, -0.48057100645715967, 0.2652143341157083}}, {{0.49364107088175413, -0.9936481537600359, 1.477761700740002}, {1.9734739055563335, -0.4829709558324045, 0.26201617339112004}}, {{0.48759738594534996, -0.9919447435606984, 1.472334536906441}, {1.9665619462368515, -0.48828281242235566, 0.2615848383122343}}, {{0.4843062500379532, -0.9940128216543952, 1.4676023245342844}, {1.958363670769991, -0.48615066971243837, 0.2603868843533628}}},
  adamw = {{{0.4895000009999999, -0.9890000004999999, 1.4885000003333333}, {1.98800000025, -0.4995, 0.25974999983333336}}, {{0.4939523991110065, -0.9924331530212233, 1.4783008612153863}, {1.9766902041564614, -0.4915591328164353, 0.26554938467223277}}, {{0.49623342849911967, -0.9954353171248899, 1.4776622541305955}, {1.9707464616999057, -0.495310008124611, 0.26349112242182987}}, {{0.49167820398925965, -0.9965996749374042, 1.4747012761636458}, {1.9655261474384647, -0.5011454736647776, 0.26362842457560176}}, {{0.4894353915030901, -1.0002902785361676, 1.4729741857853784}, {1.9583670581781565, -0.5011053780793199, 0.26314210563796453}}},
}

local cases = {
  sgd = function(p) return optim.SGD({ p }, { lr = 0.1 }) end,
  sgd_momentum = function(p) return optim.SGD({ p }, { lr = 0.1, momentum = 0.9, dampening = 0.1, weight_decay = 0.01 }) end,
  sgd_nesterov = function(p) return optim.SGD({ p }, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }) end,
  adam = function(p) return optim.Adam({ p }, { lr = 0.01 }) end,
  adam_wd = function(p) return optim.Adam({ p }, { lr = 0.01, betas = { 0.8, 0.99 }, eps = 1e-6, weight_decay = 0.1 }) end,
  adamw = function(p) return optim.AdamW({ p }, { lr = 0.01, weight_decay = 0.1 }) end,
}
local order = { "sgd", "sgd_momentum", "sgd_nesterov", "adam", "adam_wd", "adamw" }

local function param(dtype)
  return tl.tensor(P0, { dtype = dtype or "float64" }):requires_grad_()
end

local function grad(step, dtype)
  return tl.tensor(G[step], { dtype = dtype or "float64" })
end

describe("optimizers follow PyTorch's update rules", function()
  for _, name in ipairs(order) do
    it(name .. " over 5 steps (float64)", function()
      local p = param()
      local opt = cases[name](p)
      for step = 1, 5 do
        p.grad = grad(step)
        opt:step()
        assert.tensor_near(golden[name][step], p, 1e-12, 1e-14, name .. " step " .. step)
      end
      assert.is_true(p.requires_grad and p.is_leaf)
    end)
  end

  for _, dtype in ipairs({ "float32", "bfloat16", "float16" }) do
    it("every optimizer in " .. dtype .. " (state in the parameter's dtype)", function()
      local tol = dtype == "float32" and 1e-5 or 2e-2
      for _, name in ipairs(order) do
        local p = param(dtype)
        local opt = cases[name](p)
        for step = 1, 5 do
          p.grad = grad(step, dtype)
          opt:step()
        end
        assert.are.equal(dtype, p.dtype)
        assert.tensor_near(golden[name][5], p:double(), tol, tol, name .. " in " .. dtype)
      end
    end)
  end

  it("skips parameters without a gradient, and zero_grad clears them", function()
    local a, b = param(), param()
    local opt = optim.Adam({ a, b }, { lr = 0.1 })
    a.grad = grad(1)
    opt:step()
    assert.tensor_equal(tl.tensor(P0, { dtype = "float64" }), b)
    assert.is_true(math.abs(a[1][1] - 0.4) < 1e-6)
    opt:zero_grad()
    assert.is_nil(a.grad)
    assert.is_nil(b.grad)
  end)

  it("takes parameter groups whose options override the defaults", function()
    local a, b = param(), param()
    local opt = optim.SGD({ { params = { a } }, { params = { b }, lr = 0.5 } }, { lr = 0.1 })
    a.grad, b.grad = grad(1), grad(1)
    opt:step()
    assert.tensor_near(golden.sgd[1], a, 1e-15, 1e-15)
    assert.are.equal(0.5 - 0.5 * 0.1, b[1][1])
    assert.are.equal(0.1, opt.param_groups[1].lr)
    assert.are.equal(0.5, opt.param_groups[2].lr)
  end)

  it("runs a closure and returns its loss", function()
    local w = tl.tensor({ 2.0 }, { dtype = "float64" }):requires_grad_()
    local opt = optim.SGD({ w }, { lr = 0.25 })
    local loss = opt:step(function()
      opt:zero_grad()
      local l = (w * w):sum()
      l:backward()
      return l
    end)
    assert.are.equal(4, loss:item())
    assert.are.equal(1.0, w[1]) -- 2 - 0.25 * 4
  end)

  it("state_dict / load_state_dict resume training exactly", function()
    for _, name in ipairs({ "sgd_momentum", "adam_wd", "adamw" }) do
      local p = param()
      local opt = cases[name](p)
      for step = 1, 3 do
        p.grad = grad(step)
        opt:step()
      end
      local sd = opt:state_dict()
      -- a fresh optimizer on a copy of the parameter picks up from there
      local q = p:detach():clone():requires_grad_()
      local resumed = cases[name](q)
      resumed.param_groups[1].lr = 123 -- overwritten by the state dict
      resumed:load_state_dict(sd)
      for step = 4, 5 do
        q.grad = grad(step)
        resumed:step()
      end
      assert.tensor_near(golden[name][5], q, 1e-12, 1e-14, name)
      if name ~= "sgd_momentum" then assert.are.equal(5, resumed.state[q].step) end
    end
  end)

  it("rejects bad options with clear errors", function()
    local p = param()
    assert.error_matches(function() optim.SGD({ p }) end, { "optim.SGD", "lr is required" })
    assert.error_matches(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end, { "optim.SGD", "nesterov" })
    assert.error_matches(function() optim.Adam({ p }, { lr = -1 }) end, { "optim.Adam", "lr", ">= 0" })
    assert.error_matches(function() optim.Adam({ p }, { betas = { 0.9, 1.0 } }) end, { "optim.Adam", "betas" })
    assert.error_matches(function() optim.Adam({ p }, { momentum = 0.9 }) end, { "optim.Adam", "unknown option 'momentum'" })
    assert.error_matches(function() optim.Adam({ tl.zeros(2) }) end, { "optim.Adam", "does not require grad" })
    assert.error_matches(function() optim.Adam({ p, p }) end, { "optim.Adam", "more than once" })
    assert.error_matches(function() optim.Adam({}) end, { "optim.Adam", "empty" })
    -- a module where its parameters belong: the message says what to pass
    assert.error_matches(function() optim.SGD(tl.nn.Linear(2, 2), { lr = 0.1 }) end,
      { "optim.SGD", "got a module (nn.Linear)", "optim.SGD(model:parameters(), {...})" })
    assert.error_matches(function() optim.AdamW(tl.nn.Sequential(tl.nn.Linear(2, 2))) end,
      { "optim.AdamW", "got a module (nn.Sequential)", "model:parameters()" })
    -- at the caller's line
    for _, make in ipairs({ function() return optim.SGD({ p }) end, function() return optim.Adam(3) end,
      function() return optim.SGD(tl.nn.Linear(2, 2), { lr = 0.1 }) end,
      function() return optim.StepLR(optim.SGD({ p }, { lr = 1 }), 0) end, function() return optim.StepLR({}, 1) end }) do
      local ok, err = pcall(function() local o = make() return o end)
      assert.is_false(ok)
      assert.matches("^spec/optim_spec%.lua:%d+: optim%.", err)
    end
  end)

  it("the base classes called directly say to use a concrete class or subclass/define", function()
    local p = param()
    assert.error_matches(function() optim.Optimizer({ p }, { lr = 0.1 }) end,
      { "optim.Optimizer: the base class of the optimizers is not built directly; use a concrete optimizer",
        "optim.Optimizer.subclass(name, defaults, check)" })
    assert.error_matches(function() optim.Optimizer() end, { "optim.Optimizer: the base class" })
    local opt = optim.SGD({ p }, { lr = 1 })
    assert.error_matches(function() optim.Scheduler(opt) end,
      { "optim.Scheduler: the base class of the schedulers is not built directly; use a concrete scheduler",
        "optim.Scheduler.define(name, spec)" })
    assert.error_matches(function() optim.Scheduler:new(opt, 2) end, { "optim.Scheduler: the base class" })
    local ok, err = pcall(function() return optim.Optimizer({ p }) end)
    assert.is_false(ok)
    assert.matches("^spec/optim_spec%.lua:%d+: optim%.Optimizer: ", err)
    -- the concrete classes still work
    local sched = optim.StepLR(opt, 1, { gamma = 0.5 })
    sched:step()
    assert.are.equal(0.5, opt.param_groups[1].lr)
  end)
end)

describe("learning-rate schedulers", function()
  -- Golden values from PyTorch 1.13 (/usr/bin/python3 sched_golden.py): an SGD with lr 0.1, the
  -- scheduler made, then get_last_lr()[0] after 0, 1, 2, ... calls of opt.step(); s.step():
  --   StepLR(o, step_size=2, gamma=0.5); CosineAnnealingLR(o, T_max=5, eta_min=0.001);
  --   LambdaLR(o, warm) with
  --   def warm(step, warmup=3, total=10, min_ratio=0.1):
  --       if step < warmup: return step / max(1, warmup)
  --       progress = min(1.0, (step - warmup) / max(1, total - warmup))
  --       return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
  local golden_lr = {
    step = {0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125},
    cosine = {0.1, 0.0905463412215599, 0.06579634122155989, 0.035203658778440096, 0.010453658778440105, 0.001},
    warmup_cosine = {0.0, 0.03333333333333333, 0.06666666666666667, 0.1, 0.09554359905560886, 0.08305704108364302, 0.06501344202803415, 0.04498655797196586, 0.026942958916356997, 0.014456400944391146, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002},
  }

  local function sequence(make, n)
    local p = param()
    local opt = optim.SGD({ p }, { lr = 0.1 })
    local s = make(opt)
    local out = { s:get_last_lr()[1] }
    for _ = 1, n do
      s:step()
      out[#out + 1] = s:get_last_lr()[1]
      assert.are.equal(out[#out], opt.param_groups[1].lr)
    end
    return out
  end

  it("StepLR", function()
    assert.tensor_near(golden_lr.step, sequence(function(o) return optim.StepLR(o, 2, 0.5) end, 7), 1e-15, 0)
    assert.tensor_near(golden_lr.step, sequence(function(o) return optim.StepLR(o, { step_size = 2, gamma = 0.5 }) end, 7), 1e-15, 0)
  end)

  it("CosineAnnealingLR", function()
    assert.tensor_near(golden_lr.cosine, sequence(function(o) return optim.CosineAnnealingLR(o, 5, 0.001) end, 5), 1e-12, 1e-15)
  end)

  it("cosine with linear warmup (WarmupCosineLR, a LambdaLR)", function()
    assert.tensor_near(golden_lr.warmup_cosine, sequence(function(o)
      return optim.WarmupCosineLR(o, { warmup_steps = 3, total_steps = 10, min_ratio = 0.1 })
    end, 12), 1e-12, 1e-15)
    assert.tensor_near(golden_lr.warmup_cosine, sequence(function(o)
      return optim.LambdaLR(o, optim.cosine_with_warmup(3, 10, 0.1))
    end, 12), 1e-12, 1e-15)
  end)

  it("state_dict / load_state_dict resume the schedule", function()
    local p = param()
    local opt = optim.SGD({ p }, { lr = 0.1 })
    local s = optim.StepLR(opt, 2, 0.5)
    for _ = 1, 3 do s:step() end
    local opt2 = optim.SGD({ param() }, { lr = 0.1 })
    local s2 = optim.StepLR(opt2, 2, 0.5)
    s2:load_state_dict(s:state_dict())
    assert.are.equal(0.05, opt2.param_groups[1].lr)
    s2:step()
    assert.are.equal(golden_lr.step[5], opt2.param_groups[1].lr)
  end)
end)

describe("clip_grad_norm", function()
  -- Golden values from PyTorch 1.13 (float32 grads), /usr/bin/python3 sched_golden.py:
  --   ps = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
  --   grads [3, -4] and [1, 2, -2]; total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
  local golden_clip = {
    l2 = { total = 5.830951690673828, grads = {{0.5144957304000854, -0.6859942674636841}, {0.17149856686592102, 0.34299713373184204, -0.34299713373184204}} },
    inf = { total = 4.0, grads = {{1.4999996423721313, -1.9999995231628418}, {0.49999988079071045, 0.9999997615814209, -0.9999997615814209}} },
    none = { total = 5.830951690673828, grads = {{3.0, -4.0}, {1.0, 2.0, -2.0}} },
  }

  local function params()
    local a, b = tl.zeros(2):requires_grad_(), tl.zeros(3):requires_grad_()
    a.grad, b.grad = tl.tensor({ 3.0, -4.0 }), tl.tensor({ 1.0, 2.0, -2.0 })
    return { a, b, tl.zeros(4):requires_grad_() } -- the last has no grad
  end

  for _, case in ipairs({ { "l2", 1.0 }, { "inf", 2.0, math.huge }, { "none", 100.0 } }) do
    it("as torch.nn.utils.clip_grad_norm_ (" .. case[1] .. ")", function()
      local ps = params()
      local total = optim.clip_grad_norm(ps, case[2], case[3]):item() -- a 0-dim tensor, as torch's
      local g = golden_clip[case[1]]
      assert.is_true(math.abs(total - g.total) < 1e-6 * g.total, "total " .. total)
      assert.tensor_near(g.grads[1], ps[1].grad, 1e-6, 1e-7)
      assert.tensor_near(g.grads[2], ps[2].grad, 1e-6, 1e-7)
      assert.is_nil(ps[3].grad)
    end)
  end

  it("returns 0 without gradients and checks its arguments", function()
    assert.are.equal(0, optim.clip_grad_norm({ tl.zeros(2):requires_grad_() }, 1):item())
    assert.error_matches(function() optim.clip_grad_norm({}, "x") end, { "clip_grad_norm", "max_norm" })
  end)
end)

describe("fused steps from Lua", function()
  it("report bad arguments naming the op", function()
    local p = tl.zeros(3):requires_grad_()
    assert.error_matches(function() tl._adam_step(p, tl.zeros(4), tl.zeros(3), tl.zeros(3), 1, 0.1, 0.9, 0.999, 1e-8, 0, false) end,
      { "adam_step", "grad" })
    assert.error_matches(function() tl._sgd_step(p, tl.zeros(3), nil, 0.1, 0.9, 0, 0, false, false) end,
      { "sgd_step", "momentum" })
  end)
end)

describe("a step that fails changes nothing", function()
  -- Three parameters; after two good steps (so that every state exists), a problem with a later
  -- parameter or group must leave every parameter and all optimizer state as it was.
  local function three_params()
    local a = tl.tensor({ 0.25, -0.75 }, { dtype = "float64" }):requires_grad_()
    local b = tl.tensor({ { 1.5, -2.0, 0.5 }, { 0.125, 3.0, -1.0 } }, { dtype = "float64" }):requires_grad_()
    local c = tl.tensor({ -0.5, 4.0, 2.5 }, { dtype = "float64" }):requires_grad_()
    return a, b, c
  end

  local function set_grads(a, b, c, k)
    a.grad = tl.tensor({ 0.3 * k, -0.1 }, { dtype = "float64" })
    b.grad = tl.tensor({ { -0.2, 0.05 * k, 0.7 }, { 0.4, -0.6, 0.1 * k } }, { dtype = "float64" })
    c.grad = tl.tensor({ 0.9, -0.3 * k, 0.2 }, { dtype = "float64" })
  end

  -- every parameter and every number or tensor of the state, copied
  local function snapshot(opt, params)
    local snap = {}
    for i, p in ipairs(params) do
      local s = {}
      for k, v in pairs(opt.state[p] or {}) do s[k] = tl.is_tensor(v) and v:clone() or v end
      snap[i] = { value = p:detach():clone(), state = s, has_state = opt.state[p] ~= nil }
    end
    return snap
  end

  local function assert_unchanged(before, opt, params, what)
    for i, p in ipairs(params) do
      local b = before[i]
      assert.tensor_equal(b.value, p:detach(), what .. ": parameter " .. i)
      assert.are.equal(b.has_state, opt.state[p] ~= nil, what .. ": state of parameter " .. i)
      local s = opt.state[p] or {}
      for k, v in pairs(b.state) do
        if tl.is_tensor(v) then
          assert.tensor_equal(v, s[k], what .. ": " .. k .. " of parameter " .. i)
        else
          assert.are.equal(v, s[k], what .. ": " .. k .. " of parameter " .. i)
        end
      end
      for k in pairs(s) do assert.is_not_nil(b.state[k], what .. ": new state " .. k) end
    end
  end

  local makers = {
    SGD = function(ps) return optim.SGD({ { params = { ps[1], ps[2] } }, { params = { ps[3] } } }, { lr = 0.05, momentum = 0.8 }) end,
    Adam = function(ps) return optim.Adam({ { params = { ps[1], ps[2] } }, { params = { ps[3] } } }, { lr = 0.02 }) end,
    AdamW = function(ps) return optim.AdamW({ { params = { ps[1], ps[2] } }, { params = { ps[3] } } }, { lr = 0.02, weight_decay = 0.3 }) end,
  }
  local state_key = { SGD = "momentum_buffer", Adam = "exp_avg_sq", AdamW = "exp_avg" }

  -- three parameters and an optimizer that took two steps, the gradients of a third set
  local function two_steps_taken(name)
    local a, b, c = three_params()
    local opt = makers[name]({ a, b, c })
    for k = 1, 2 do
      set_grads(a, b, c, k)
      opt:step()
    end
    set_grads(a, b, c, 3)
    return a, b, c, opt
  end

  for _, name in ipairs({ "SGD", "Adam", "AdamW" }) do
    it(name .. ": a bad option of the last group", function()
      local a, b, c, opt = two_steps_taken(name)
      local before = snapshot(opt, { a, b, c })
      for _, bad in ipairs({ -0.5, 0 / 0, math.huge, "fast" }) do
        opt.param_groups[2].lr = bad
        assert.error_matches(function() opt:step() end, { "optim." .. name, "lr", "parameter group 2" })
        assert_unchanged(before, opt, { a, b, c }, name .. " lr " .. tostring(bad))
      end
      -- fixed, the step goes through and changes every parameter
      opt.param_groups[2].lr = 0.02
      opt:step()
      for i, p in ipairs({ a, b, c }) do
        assert.is_true((p:detach() - before[i].value):abs():max():item() > 0, name .. " parameter " .. i)
      end
    end)

    it(name .. ": a state tensor of the wrong shape or dtype for the second parameter", function()
      local a, b, c, opt = two_steps_taken(name)
      local key = state_key[name]
      local good = opt.state[b][key]
      for _, case in ipairs({
        { tl.zeros(3, 2, { dtype = "float64" }), "shape [3, 2]" },
        { tl.zeros(2, 3, { dtype = "float32" }), "is float32" },
        { tl.zeros(3, 2, { dtype = "float64" }):transpose(1, 2), "contiguous" },
      }) do
        opt.state[b][key] = case[1]
        local before = snapshot(opt, { a, b, c })
        assert.error_matches(function() opt:step() end, { "optim." .. name, "parameter 2 of group 1", key, case[2] })
        assert_unchanged(before, opt, { a, b, c }, name .. " " .. case[2])
      end
      opt.state[b][key] = good
    end)

    it(name .. ": a non-contiguous parameter on the first step", function()
      local a, _, c = three_params()
      local b = tl.tensor({ { 1.0, 2.0 }, { 3.0, 4.0 }, { 5.0, 6.0 } }, { dtype = "float64" }):transpose(1, 2):requires_grad_()
      local opt = makers[name]({ a, b, c })
      set_grads(a, b, c, 1)
      local before = snapshot(opt, { a, b, c })
      assert.error_matches(function() opt:step() end, { "optim." .. name, "parameter 2 of group 1", "contiguous" })
      assert_unchanged(before, opt, { a, b, c }, name .. " non-contiguous")
      for _, p in ipairs({ a, b, c }) do assert.is_nil(opt.state[p]) end
    end)
  end

  it("Adam: a bad step count of the last parameter", function()
    local a, b, c = three_params()
    local opt = makers.Adam({ a, b, c })
    set_grads(a, b, c, 1)
    opt:step()
    for _, bad in ipairs({ 1.5, -1, "2" }) do
      opt.state[c].step = bad
      local before = snapshot(opt, { a, b, c })
      assert.error_matches(function() opt:step() end, { "optim.Adam", "parameter 1 of group 2", "step count" })
      assert_unchanged(before, opt, { a, b, c }, "step " .. tostring(bad))
    end
    opt.state[c].step = 1
    opt:step()
    assert.are.equal(2, opt.state[a].step)
    assert.are.equal(2, opt.state[c].step)
  end)

  it("SGD: a bad dampening or momentum set after construction", function()
    local a, b, c = three_params()
    local opt = makers.SGD({ a, b, c })
    set_grads(a, b, c, 1)
    opt:step()
    local before = snapshot(opt, { a, b, c })
    opt.param_groups[2].dampening = 0 / 0
    assert.error_matches(function() opt:step() end, { "optim.SGD", "dampening", "parameter group 2" })
    opt.param_groups[2].dampening = 0
    opt.param_groups[2].momentum = -0.9
    assert.error_matches(function() opt:step() end, { "optim.SGD", "momentum", ">= 0" })
    assert_unchanged(before, opt, { a, b, c }, "SGD options")
  end)
end)

describe("the composed optimizers (RMSprop, Adagrad, Adamax, NAdam, RAdam) and the new options", function()
  local names = { "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam" }

  it("reject bad options and unknown keys, naming the optimizer and the key", function()
    local p = param()
    for _, name in ipairs(names) do
      assert.error_matches(function() optim[name]({ p }, { lr = -0.1 }) end, { "optim." .. name, "lr", ">= 0" })
      assert.error_matches(function() optim[name]({ p }, { lr = 0 / 0 }) end, { "optim." .. name, "lr" })
      assert.error_matches(function() optim[name]({ p }, { eps = -1 }) end, { "optim." .. name, "eps", ">= 0" })
      local who = "optim." .. name
      assert.error_matches(function() optim[name]({ p }, { weight_decay = "x" }) end, { who, "weight_decay" })
      assert.error_matches(function() optim[name]({ p }, { maximize = 1 }) end, { who, "maximize", "true or false" })
      assert.error_matches(function() optim[name]({ p }, { lrr = 0.1 }) end, { who, "unknown option 'lrr'" })
      assert.error_matches(function() optim[name]({ { params = { p }, momentun = 1 } }) end,
        { "optim." .. name .. ": parameter group 1", "unknown option 'momentun'" })
      assert.error_matches(function() optim[name]({ tl.zeros(2) }) end, { "optim." .. name, "does not require grad" })
    end
    for _, name in ipairs({ "Adamax", "NAdam", "RAdam", "Adam", "AdamW" }) do
      for _, betas in ipairs({ { 0.9, 1.0 }, { -0.1, 0.9 }, { 0.9 }, 0.9 }) do
        assert.error_matches(function() optim[name]({ p }, { betas = betas }) end, { "optim." .. name, "betas" })
      end
    end
    assert.error_matches(function() optim.RMSprop({ p }, { alpha = -0.5 }) end, { "optim.RMSprop", "alpha" })
    assert.error_matches(function() optim.RMSprop({ p }, { momentum = -0.5 }) end, { "optim.RMSprop", "momentum" })
    assert.error_matches(function() optim.RMSprop({ p }, { centered = "yes" }) end, { "optim.RMSprop", "centered" })
    assert.error_matches(function() optim.Adagrad({ p }, { lr_decay = -1 }) end, { "optim.Adagrad", "lr_decay" })
    assert.error_matches(function() optim.Adagrad({ p }, { initial_accumulator_value = -1 }) end,
      { "optim.Adagrad", "initial_accumulator_value" })
    assert.error_matches(function() optim.NAdam({ p }, { momentum_decay = -1 }) end,
      { "optim.NAdam", "momentum_decay" })
    assert.error_matches(function() optim.Adam({ p }, { amsgrad = 1 }) end,
      { "optim.Adam", "amsgrad", "true or false" })
    assert.error_matches(function() optim.SGD({ p }, { lr = 0.1, maximize = "no" }) end, { "optim.SGD", "maximize" })
  end)

  -- a problem with the last parameter leaves everything as it was
  for _, name in ipairs({ "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adam (amsgrad)" }) do
    it(name .. ": a bad gradient, state tensor or step count of the last parameter changes nothing", function()
      local cls = optim[name:match("^%a+")]
      local opts = { lr = 0.01 }
      if name:find("amsgrad") then opts.amsgrad = true end
      if name == "RMSprop" then opts.momentum = 0.9 end
      local a, b = param(), param()
      local opt = cls({ { params = { a } }, { params = { b } } }, opts)
      a.grad, b.grad = grad(1), grad(1)
      opt:step()
      a.grad, b.grad = grad(2), grad(2)
      local function snapshot()
        local out = {}
        for i, p in ipairs({ a, b }) do
          local s = {}
          for k, v in pairs(opt.state[p]) do s[k] = tl.is_tensor(v) and v:clone() or v end
          out[i] = { p:detach():clone(), s }
        end
        return out
      end
      local function unchanged(before, what, skip)
        for i, p in ipairs({ a, b }) do
          assert.tensor_equal(before[i][1], p:detach(), what .. ": parameter " .. i)
          for k, v in pairs(before[i][2]) do
            if i == 2 and k == skip then -- the entry made bad
            elseif tl.is_tensor(v) then assert.tensor_equal(v, opt.state[p][k], what .. ": " .. k)
            else assert.are.equal(v, opt.state[p][k], what .. ": " .. k) end
          end
        end
      end
      local key
      for k, v in pairs(opt.state[b]) do if tl.is_tensor(v) then key = k end end
      local before = snapshot()
      local problems = {
        { function() opt.state[b][key] = tl.zeros(3, 2, { dtype = "float64" }) end, key .. " has shape [3, 2]", key },
        { function() opt.state[b][key] = tl.zeros(2, 3, { dtype = "float32" }) end, key .. " is float32", key },
        { function() opt.state[b][key] = "zeros" end, key .. " expected a tensor", key },
        { function() opt.state[b].step = 1.5 end, "step count", "step" },
      }
      for _, problem in ipairs(problems) do
        problem[1]()
        assert.error_matches(function() opt:step() end,
          { "optim." .. name:match("^%a+"), "parameter 1 of group 2", problem[2] })
        unchanged(before, name .. " " .. problem[2], problem[3])
        b.grad = grad(2)
        opt.state[b][key] = before[2][2][key]:clone()
        opt.state[b].step = before[2][2].step
      end
      opt:step() -- fixed, it steps
      assert.are.equal(2, opt.state[b].step)
    end)
  end

  it("maximize climbs: SGD, Adam (fused or not) and each composed optimizer follow -g", function()
    for _, name in ipairs({ "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam" }) do
      local adam = name == "Adam" or name == "AdamW"
      for _, fused in ipairs(adam and { true, false } or { true }) do
        local extra = adam and { fused = fused } or {}
        local up, down = param(), param()
        local function opts(maximize)
          local o = { lr = 0.01, maximize = maximize, weight_decay = 0.1 }
          for k, v in pairs(extra) do o[k] = v end
          return o
        end
        local o1, o2 = optim[name]({ up }, opts(true)), optim[name]({ down }, opts(false))
        for step = 1, 3 do
          up.grad, down.grad = grad(step), -grad(step)
          o1:step()
          o2:step()
        end
        assert.tensor_equal(down:detach(), up:detach(), name)
      end
    end
  end)
end)
