-- Resuming training: an optimizer and a scheduler saved after k steps (state dicts, tensors deep-copied) and loaded into fresh ones give bitwise the parameters of the uninterrupted run (float64, CPU); an optimizer whose parameters Module:to() replaced refuses to step.
local tl = require("tlua")
local optim, nn = tl.optim, tl.nn

local golden = dofile("spec/goldens/optim_trajectories.lua")
local STEPS, K = 10, 4

local function params()
  local out = {}
  for i, flat in ipairs(golden.p0) do
    out[i] = tl.tensor(flat, { dtype = "float64" }):view(golden.shapes[i]):requires_grad_()
  end
  return out
end

local function grad(step, i)
  return tl.tensor(golden.grads[step][i], { dtype = "float64" }):view(golden.shapes[i])
end

-- v with every table copied and every tensor cloned (what a checkpoint file would give back)
local function deep_copy(v)
  if tl.is_tensor(v) then return v:detach():clone() end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return out
end

-- an optimizer of a golden case on ps, with its two groups split as the case's (or one)
local function build(case, ps)
  local function copy(t)
    local out = {}
    for k, v in pairs(t) do out[k] = type(v) == "table" and copy(v) or v end
    return out
  end
  if not case.groups then return optim[case.optim](ps, copy(case.opts)) end
  local groups = {}
  for gi, g in ipairs(case.groups) do
    local group = copy(g.opts)
    group.params = {}
    for j, index in ipairs(g.params) do group.params[j] = ps[index] end
    groups[gi] = group
  end
  return optim[case.optim](groups, copy(case.opts))
end

-- a scheduler for each kind of optimizer (OneCycleLR cycles momentum or beta1 too)
local function scheduler(opt, i)
  local kinds = {
    function(o) return optim.StepLR(o, 3, { gamma = 0.5 }) end,
    function(o) return optim.CosineAnnealingLR(o, 6, { eta_min = 1e-4 }) end,
    function(o)
      if o.defaults.momentum ~= nil or o.defaults.betas ~= nil then
        return optim.OneCycleLR(o, 0.05, { total_steps = 12 })
      end
      return optim.ExponentialLR(o, 0.9)
    end,
    function(o)
      return optim.SequentialLR(o, { optim.LinearLR(o, { start_factor = 0.5, total_iters = 3 }), optim.ExponentialLR(o,
        0.8) }, { 5 })
    end,
    function(o) return optim.ReduceLROnPlateau(o, { patience = 1, factor = 0.5 }) end,
  }
  return kinds[(i - 1) % #kinds + 1](opt)
end

local function sched_step(s, step)
  if getmetatable(s) == optim.ReduceLROnPlateau then s:step(1 + (step % 3)) else s:step() end
end

local function train(opt, s, ps, from, to)
  for step = from, to do
    for i, p in ipairs(ps) do p.grad = grad(step, i) end
    opt:step()
    sched_step(s, step)
  end
end

describe("resume from state dicts", function()
  for ci, case in ipairs(golden.cases) do
    it(case.name .. " (optim." .. case.optim .. ") with a scheduler, stopped after " .. K .. " steps", function()
      local ps = params()
      local opt = build(case, ps)
      local s = scheduler(opt, ci)
      train(opt, s, ps, 1, STEPS)

      local qs = params()
      local opt1 = build(case, qs)
      local s1 = scheduler(opt1, ci)
      train(opt1, s1, qs, 1, K)
      local checkpoint = deep_copy({ params = qs, optimizer = opt1:state_dict(), scheduler = s1:state_dict() })
      train(opt1, s1, qs, K + 1, K + 2) -- the first run goes on: the checkpoint must not share its tensors

      local rs = {}
      for i, p in ipairs(checkpoint.params) do rs[i] = p:clone():requires_grad_() end
      local opt2 = build(case, rs)
      local s2 = scheduler(opt2, ci)
      opt2:load_state_dict(checkpoint.optimizer)
      s2:load_state_dict(checkpoint.scheduler)
      train(opt2, s2, rs, K + 1, STEPS)
      for i = 1, #ps do assert.tensor_equal(ps[i]:detach(), rs[i]:detach(), case.name .. " parameter " .. i) end
      assert.are.same(s:get_last_lr(), s2:get_last_lr())
      for gi, group in ipairs(opt.param_groups) do
        for k, v in pairs(group) do
          if k ~= "params" then assert.are.same(v, opt2.param_groups[gi][k], case.name .. " group option " .. k) end
        end
      end
    end)
  end

  it("the state dict carries every state entry (step counts, buffers, amsgrad's maximum, mu_product)", function()
    local want = {
      SGD = { "momentum_buffer" }, Adam = { "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq" },
      RMSprop = { "step", "square_avg", "momentum_buffer", "grad_avg" }, Adagrad = { "step", "sum" },
      Adamax = { "step", "exp_avg", "exp_inf" }, NAdam = { "step", "mu_product", "exp_avg", "exp_avg_sq" },
      RAdam = { "step", "exp_avg", "exp_avg_sq" },
    }
    local opts = { SGD = { lr = 0.1, momentum = 0.9 }, Adam = { amsgrad = true },
      RMSprop = { momentum = 0.5, centered = true } }
    for name, keys in pairs(want) do
      local ps = params()
      local opt = optim[name](ps, opts[name])
      for i, p in ipairs(ps) do p.grad = grad(1, i) end
      opt:step()
      local sd = opt:state_dict()
      for _, key in ipairs(keys) do assert.is_not_nil(sd.state[2][key], name .. " " .. key) end
      if sd.state[2].step then assert.are.equal(1, sd.state[2].step) end
    end
  end)

  it("load_state_dict refuses another optimizer's state dict or bad options, changing nothing", function()
    local sgd = optim.SGD(params(), { lr = 0.1, momentum = 0.9 })
    local adam = optim.Adam(params())
    assert.error_matches(function() adam:load_state_dict(sgd:state_dict()) end,
      { "load_state_dict: parameter group 1 has the options 'dampening', 'momentum', 'nesterov', " ..
        "which optim.Adam does not take" })
    local sd = adam:state_dict()
    sd.param_groups[1].lr = -1
    assert.error_matches(function() adam:load_state_dict(sd) end, { "load_state_dict", "lr", ">= 0" })
    assert.are.equal(1e-3, adam.param_groups[1].lr)
  end)
end)

describe("an optimizer built before model:to()", function()
  it("refuses to step, naming the parameter and what it was moved to", function()
    tl.manual_seed(29)
    local model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    local opt = optim.Adam(model:parameters(), { lr = 0.1 })
    model:to("float64")
    local loss = model(tl.randn(5, 3, { dtype = "float64" })):sum()
    loss:backward()
    assert.error_matches(function() opt:step() end,
      { "optim.Adam: parameter 1 of group 1 was replaced (moved to float64) after the optimizer was built; " ..
        "build the optimizer after model:to(...)" })
    -- built after the move, it trains
    local opt2 = optim.SGD(model:parameters(), { lr = 0.1 })
    local before = model:parameters()[1]:detach():clone()
    opt2:step()
    assert.is_true((model:parameters()[1]:detach() - before):abs():max():item() > 0)
  end)

  it("names the parameter and group, for every optimizer", function()
    for _, name in ipairs({ "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam" }) do
      local keep = nn.Linear(2, 2)
      local moved = nn.Linear(2, 3)
      local opt = optim[name]({ { params = keep:parameters() }, { params = moved:parameters() } }, { lr = 0.1 })
      moved:to("float64")
      assert.error_matches(function() opt:step() end,
        { "optim." .. name .. ": parameter 1 of group 2 was replaced (moved to float64)" })
    end
  end)

  it("a move that keeps the tensors (to the device they are on) changes nothing", function()
    local model = nn.Linear(2, 2)
    local opt = optim.SGD(model:parameters(), { lr = 0.1 })
    model:to("cpu")
    model:to("float32")
    model(tl.randn(1, 2)):sum():backward()
    opt:step()
  end)
end)
