-- tl.optim's learning-rate schedulers against PyTorch 1.13 over 100 steps (spec/goldens/optim_schedulers.py), their argument forms, state dicts and bad input.
local tl = require("tlua")
local optim = tl.optim

local golden = dofile("spec/goldens/optim_schedulers.lua")

-- two groups (lr 0.1 and 0.05), as the golden's: SGD with momentum 0.9, or Adam
local function optimizer(kind)
  local groups = { { params = { tl.zeros(2, { dtype = "float64" }):requires_grad_() }, lr = 0.1 },
    { params = { tl.zeros(3, { dtype = "float64" }):requires_grad_() }, lr = 0.05 } }
  if kind == "adam" then return optim.Adam(groups) end
  return optim.SGD(groups, { lr = 0.1, momentum = 0.9 })
end

-- the golden's schedulers, by name (several argument forms)
local make = {
  step = function(o) return optim.StepLR(o, 7, { gamma = 0.5 }) end,
  step_default = function(o) return optim.StepLR(o, { step_size = 30 }) end,
  multistep = function(o) return optim.MultiStepLR(o, { 10, 25, 25, 60 }, { gamma = 0.3 }) end,
  exponential = function(o) return optim.ExponentialLR(o, 0.95) end,
  constant = function(o) return optim.ConstantLR(o, { factor = 0.25, total_iters = 12 }) end,
  constant_default = function(o) return optim.ConstantLR(o) end,
  linear = function(o) return optim.LinearLR(o, { start_factor = 0.2, end_factor = 0.9, total_iters = 30 }) end,
  linear_default = function(o) return optim.LinearLR(o) end,
  cosine = function(o) return optim.CosineAnnealingLR(o, 30, { eta_min = 0.001 }) end,
  cosine_long = function(o) return optim.CosineAnnealingLR(o, { T_max = 150 }) end,
  warm_restarts = function(o) return optim.CosineAnnealingWarmRestarts(o, 10, { T_mult = 2, eta_min = 0.0005 }) end,
  warm_restarts_default = function(o) return optim.CosineAnnealingWarmRestarts(o, 7) end,
  one_cycle = function(o) return optim.OneCycleLR(o, { 1.0, 0.5 }, { total_steps = 100 }) end,
  one_cycle_linear_three_phase = function(o)
    return optim.OneCycleLR(o, { max_lr = 0.8, epochs = 10, steps_per_epoch = 12, pct_start = 0.25,
      anneal_strategy = "linear", three_phase = true, div_factor = 10, final_div_factor = 100, base_momentum = 0.8,
      max_momentum = 0.9 })
  end,
  lambda = function(o) return optim.LambdaLR(o, function(e) return 0.97 ^ e end) end,
  lambda_per_group = function(o)
    return optim.LambdaLR(o, { function(e) return 1 / (1 + e) end, function(e) return 0.9 ^ (e // 10) end })
  end,
  sequential = function(o)
    return optim.SequentialLR(o, { optim.LinearLR(o, { start_factor = 0.1, total_iters = 10 }),
      optim.CosineAnnealingLR(o, 40) }, { 10 })
  end,
  sequential3 = function(o)
    return optim.SequentialLR(o, { schedulers = { optim.ConstantLR(o, { factor = 0.5, total_iters = 5 }),
      optim.ExponentialLR(o, 0.9), optim.StepLR(o, 10, { gamma = 0.5 }) }, milestones = { 20, 50 } })
  end,
  plateau = function(o)
    return optim.ReduceLROnPlateau(o, { factor = 0.5, patience = 3, cooldown = 2, threshold = 0.01,
      min_lr = { 0.001, 0.01 } })
  end,
  plateau_max_abs = function(o)
    return optim.ReduceLROnPlateau(o, { mode = "max", threshold_mode = "abs", threshold = 0.05, patience = 2,
      factor = 0.3 })
  end,
}
local KIND = { one_cycle_linear_three_phase = "adam" }

local function momentum(o)
  local out = {}
  for i, g in ipairs(o.param_groups) do out[i] = g.betas and g.betas[1] or g.momentum end
  return out
end

local function is_plateau(name) return name:match("^plateau") ~= nil end

-- steps s from step `from` to `to` (stepping the optimizer first, as torch wants), checking the lrs
-- and momentums against the golden's
local function follow(name, o, s, from, to)
  local case = golden.cases[name]
  for step = from, to do
    if step > 0 then
      o:step()
      if is_plateau(name) then s:step(golden.metrics[step]) else s:step() end
    end
    local lrs = s:get_last_lr()
    assert.tensor_near(case.lrs[step + 1], lrs, 1e-12, 1e-15, name .. " lrs after step " .. step)
    for i, g in ipairs(o.param_groups) do assert.are.equal(lrs[i], g.lr, name .. " group lr") end
    if case.momentum then
      assert.tensor_near(case.momentum[step + 1], momentum(o), 1e-12, 1e-15, name .. " momentum after step " .. step)
    end
  end
end

describe("schedulers match PyTorch 1.13 over 100 steps", function()
  for name in pairs(golden.cases) do
    if make[name] then
      it(name, function()
        local o = optimizer(KIND[name])
        follow(name, o, make[name](o), 0, 100)
      end)
    end
  end

  it("chained: two schedulers on one optimizer, each from the lr the other left", function()
    local o = optimizer()
    local a, b = optim.StepLR(o, 10, 0.5), optim.ExponentialLR(o, 0.99)
    assert.tensor_near(golden.cases.chained.lrs[1], b:get_last_lr(), 1e-12, 1e-15)
    for step = 1, 100 do
      a:step()
      b:step()
      assert.tensor_near(golden.cases.chained.lrs[step + 1], b:get_last_lr(), 1e-12, 1e-15, "step " .. step)
    end
  end)

  it("cover every golden case and every scheduler", function()
    for name in pairs(golden.cases) do assert.is_truthy(make[name] or name == "chained", name) end
    for _, name in ipairs({ "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
      "CosineAnnealingWarmRestarts", "OneCycleLR", "LinearLR", "ConstantLR", "LambdaLR", "SequentialLR",
      "ReduceLROnPlateau", "WarmupCosineLR" }) do
      assert.is_not_nil(optim[name], name)
    end
  end)
end)

describe("schedulers resume from their state dicts", function()
  for name in pairs(make) do
    it(name .. " stopped at step 37 and rebuilt continues as torch's", function()
      local o = optimizer(KIND[name])
      local s = make[name](o)
      follow(name, o, s, 0, 37)
      local osd, ssd = o:state_dict(), s:state_dict()
      -- a fresh optimizer and scheduler (the lambdas are the code's, not state)
      local o2 = optimizer(KIND[name])
      local s2 = make[name](o2)
      for _ = 1, 5 do -- moved elsewhere first: the load must put everything back
        o2:step()
        if is_plateau(name) then s2:step(0.5) else s2:step() end
      end
      o2:load_state_dict(osd)
      s2:load_state_dict(ssd)
      follow(name, o2, s2, 38, 100)
    end)
  end

  it("the state dict is a copy", function()
    local o = optimizer()
    local s = optim.MultiStepLR(o, { 3, 5 })
    local sd = s:state_dict()
    sd.milestones[1] = 1
    sd.base_lrs[1] = 7
    assert.are.same({ 3, 5 }, s.milestones)
    assert.are.equal(0.1, s.base_lrs[1])
  end)

  it("load_state_dict refuses another scheduler's state", function()
    local o = optimizer()
    local step = optim.StepLR(o, 3)
    local cosine = optim.CosineAnnealingLR(optimizer(), 10)
    assert.error_matches(function() step:load_state_dict(cosine:state_dict()) end,
      { "optim.StepLR:load_state_dict", "unknown entries 'T_max', 'eta_min'", "another scheduler" })
    assert.error_matches(function() step:load_state_dict(5) end, { "optim.StepLR:load_state_dict", "expected a table" })
    local one = optim.SGD({ tl.zeros(1):requires_grad_() }, { lr = 0.1 })
    assert.error_matches(function() optim.StepLR(one, 3):load_state_dict(step:state_dict()) end,
      { "parameter groups" })
  end)
end)

describe("scheduler arguments", function()
  local function sgd() return optim.SGD({ tl.zeros(2):requires_grad_() }, { lr = 0.1 }) end

  it("take positional arguments, an options table, or both", function()
    for _, s in ipairs({ optim.StepLR(sgd(), 2, 0.5), optim.StepLR(sgd(), 2, { gamma = 0.5 }),
      optim.StepLR(sgd(), { step_size = 2, gamma = 0.5 }) }) do
      assert.are.same({ 2, 0.5 }, { s.step_size, s.gamma })
    end
    assert.are.same({ 0.001, 10 }, { optim.CosineAnnealingLR(sgd(), 10, 0.001).eta_min, optim.CosineAnnealingLR(sgd(),
      { T_max = 10 }).T_max })
    assert.are.same({ 2, 5 }, optim.MultiStepLR(sgd(), { milestones = { 5, 2 } }).milestones)
    local l = optim.LinearLR(sgd(), 0.5, 1.0, 4)
    assert.are.same({ 0.5, 1.0, 4 }, { l.start_factor, l.end_factor, l.total_iters })
  end)

  it("reject unknown keys, bad values and non-optimizers with clear errors", function()
    local cases = {
      { function() optim.StepLR(sgd(), 2, { gama = 0.5 }) end, { "optim.StepLR", "unknown option 'gama'" } },
      { function() optim.StepLR(sgd(), 0) end, { "optim.StepLR", "step_size", "integer >= 1" } },
      { function() optim.StepLR(sgd(), 1.5) end, { "optim.StepLR", "step_size" } },
      { function() optim.StepLR(sgd(), 2, { step_size = 3 }) end, { "optim.StepLR", "step_size given twice" } },
      { function() optim.StepLR(sgd(), 2, 0.5, 7) end, { "optim.StepLR", "too many arguments" } },
      { function() optim.StepLR({}, 2) end, { "optim.StepLR", "argument 1 expected an optimizer" } },
      { function() optim.StepLR(nil, 2) end, { "optim.StepLR", "argument 1 expected an optimizer, got nil" } },
      { function() optim.MultiStepLR(sgd(), { 2, 1.5 }) end, { "optim.MultiStepLR", "milestones[2]" } },
      { function() optim.MultiStepLR(sgd(), { 2 }, { gamm = 1 }) end, { "optim.MultiStepLR", "option 'gamm'" } },
      { function() optim.ExponentialLR(sgd()) end, { "optim.ExponentialLR", "gamma must be a finite number" } },
      { function() optim.ExponentialLR(sgd(), 0 / 0) end, { "optim.ExponentialLR", "gamma" } },
      { function() optim.ConstantLR(sgd(), { factor = 1.5 }) end, { "optim.ConstantLR", "factor", "(0, 1]" } },
      { function() optim.ConstantLR(sgd(), { total_iter = 3 }) end, { "optim.ConstantLR", "option 'total_iter'" } },
      { function() optim.LinearLR(sgd(), { start_factor = 0 }) end, { "optim.LinearLR", "start_factor" } },
      { function() optim.LinearLR(sgd(), { end_factor = 2 }) end, { "optim.LinearLR", "end_factor" } },
      { function() optim.LinearLR(sgd(), { total_iters = 0 }) end, { "optim.LinearLR", "total_iters" } },
      { function() optim.CosineAnnealingLR(sgd(), -1) end, { "optim.CosineAnnealingLR", "T_max", "> 0" } },
      { function() optim.CosineAnnealingWarmRestarts(sgd(), 0) end, { "optim.CosineAnnealingWarmRestarts", "T_0" } },
      { function() optim.CosineAnnealingWarmRestarts(sgd(), 5, { T_mult = 0 }) end, { "T_mult" } },
      { function() optim.OneCycleLR(sgd(), 1.0) end, { "optim.OneCycleLR", "total_steps" } },
      { function() optim.OneCycleLR(sgd(), 1.0, { total_steps = 10, pct_start = 2 }) end, { "pct_start" } },
      { function() optim.OneCycleLR(sgd(), 1.0, { total_steps = 10, anneal_strategy = "exp" }) end,
        { "anneal_strategy" } },
      { function() optim.OneCycleLR(sgd(), { 1, 2 }, { total_steps = 10 }) end, { "max_lr", "1 numbers" } },
      { function() optim.OneCycleLR(sgd(), 1, { total_step = 10 }) end, { "unknown option 'total_step'" } },
      { function() optim.OneCycleLR(optim.Adagrad({ tl.zeros(2):requires_grad_() }), 1, { total_steps = 10 }) end,
        { "optim.OneCycleLR", "momentum", "cycle_momentum = false" } },
      { function() optim.LambdaLR(sgd(), 3) end, { "optim.LambdaLR", "lr_lambda" } },
      { function() optim.LambdaLR(sgd(), { print, print }) end, { "optim.LambdaLR", "expected 1 lr_lambdas" } },
      { function() optim.SequentialLR(sgd(), { optim.StepLR(sgd(), 2) }, {}) end,
        { "optim.SequentialLR", "another optimizer" } },
      { function() local o = sgd() optim.SequentialLR(o, { optim.StepLR(o, 2), optim.StepLR(o, 3) }, {}) end,
        { "optim.SequentialLR", "expected 1 milestones" } },
      { function() local o = sgd() optim.SequentialLR(o, { 3 }, {}) end, { "schedulers[1] is not a scheduler" } },
      { function() optim.ReduceLROnPlateau(sgd(), { factor = 1 }) end, { "optim.ReduceLROnPlateau", "factor" } },
      { function() optim.ReduceLROnPlateau(sgd(), { mode = "mn" }) end, { "optim.ReduceLROnPlateau", "mode" } },
      { function() optim.ReduceLROnPlateau(sgd(), { patience = -1 }) end, { "patience" } },
      { function() optim.ReduceLROnPlateau(sgd(), { min_lr = { 1, 2 } }) end, { "expected 1 min_lrs" } },
      { function() optim.ReduceLROnPlateau(sgd(), { patiense = 3 }) end, { "unknown option 'patiense'" } },
      { function() optim.ReduceLROnPlateau(3) end, { "optim.ReduceLROnPlateau", "expected an optimizer" } },
      { function() optim.ReduceLROnPlateau(sgd()):step("low") end, { "metric expected a number" } },
      { function() optim.StepLR(sgd(), 2):step("next") end, { "epoch expected a number" } },
    }
    for i, case in ipairs(cases) do
      local ok, err = pcall(case[1])
      assert.is_false(ok, "case " .. i .. " did not fail")
      for _, want in ipairs(case[2]) do
        assert.is_truthy(tostring(err):find(want, 1, true), "case " .. i .. ": expected '" .. want .. "' in: " .. err)
      end
      assert.matches("^spec/optim_schedulers_spec%.lua:%d+: ", err, 1, "case " .. i .. " points elsewhere")
    end
  end)

  it("a bad scheduler argument changes nothing in the optimizer", function()
    local o = sgd()
    assert.has_error(function() optim.OneCycleLR(o, 1.0, { total_steps = 10, anneal_strategy = "exp" }) end)
    assert.is_nil(o.param_groups[1].initial_lr)
    assert.is_nil(o.param_groups[1].max_lr)
    assert.are.equal(0, o.param_groups[1].momentum)
  end)

  it("OneCycleLR refuses to step past total_steps, and changes nothing then", function()
    local o = sgd()
    local s = optim.OneCycleLR(o, 1.0, { total_steps = 3 })
    for _ = 1, 3 do s:step() end
    local lr, epoch = o.param_groups[1].lr, s.last_epoch
    assert.error_matches(function() s:step() end, { "optim.OneCycleLR", "total number of steps is 3" })
    assert.are.same({ lr, epoch }, { o.param_groups[1].lr, s.last_epoch })
  end)

  it("ReduceLROnPlateau takes a one-element tensor", function()
    local o = sgd()
    local s = optim.ReduceLROnPlateau(o, { patience = 0 })
    s:step(tl.tensor({ 1.0 }))
    s:step(tl.tensor(2.0))
    assert.are.equal(0.1 * 0.1, o.param_groups[1].lr)
    assert.are.same({ 0.1 * 0.1 }, s:get_last_lr())
  end)
end)
