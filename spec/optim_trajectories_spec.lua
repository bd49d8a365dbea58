-- tl.optim's optimizers against PyTorch 1.13: every optimizer and the option combinations that matter (maximize, amsgrad, centered, momentum, nesterov, weight decay, parameter groups), 10 steps of fixed gradients on float64 parameters (spec/goldens/optim_trajectories.py).
local tl = require("tlua")
local optim = tl.optim

local golden = dofile("spec/goldens/optim_trajectories.lua")

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

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = type(v) == "table" and copy(v) or v end
  return out
end

-- the optimizer of a case on ps (extra: more options, e.g. fused = false)
local function build(case, ps, extra)
  local opts = copy(case.opts)
  for k, v in pairs(extra or {}) do opts[k] = v end
  if not case.groups then return optim[case.optim](ps, opts) end
  local groups = {}
  for gi, g in ipairs(case.groups) do
    local group = copy(g.opts)
    group.params = {}
    for j, index in ipairs(g.params) do group.params[j] = ps[index] end
    groups[gi] = group
  end
  return optim[case.optim](groups, opts)
end

-- runs a case, comparing the parameters after each step with torch's
local function check_case(case, extra, label)
  local ps = params()
  local opt = build(case, ps, extra)
  for step = 1, #golden.grads do
    for i, p in ipairs(ps) do p.grad = grad(step, i) end
    opt:step()
    for i, p in ipairs(ps) do
      assert.tensor_near(case.trajectory[step][i], p:detach():reshape(-1), 1e-11, 1e-13,
        string.format("%s: parameter %d after step %d", label, i, step))
    end
  end
  for _, p in ipairs(ps) do assert.is_true(p.requires_grad and p.is_leaf) end
end

describe("optimizer trajectories match PyTorch 1.13 (float64, 10 steps)", function()
  for _, case in ipairs(golden.cases) do
    it(case.name .. " (optim." .. case.optim .. ")", function()
      check_case(case, nil, case.name)
      if case.optim == "Adam" or case.optim == "AdamW" then
        check_case(case, { fused = false }, case.name .. " (fused = false)")
      end
    end)
  end

  it("cover every optimizer", function()
    local seen = {}
    for _, case in ipairs(golden.cases) do seen[case.optim] = true end
    for _, name in ipairs({ "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam" }) do
      assert.is_true(seen[name], name)
    end
  end)
end)

describe("optimizers keep their state in the parameter's dtype", function()
  -- float32 parameters follow the float64 trajectory within float32 noise
  for _, name in ipairs({ "rmsprop_all", "adagrad_all", "adamax_wd", "nadam_all", "radam_all", "adam_amsgrad" }) do
    it(name .. " in float32", function()
      local case
      for _, c in ipairs(golden.cases) do if c.name == name then case = c end end
      local ps = params()
      for i, p in ipairs(ps) do ps[i] = p:detach():float():requires_grad_() end
      local opt = build(case, ps)
      for step = 1, #golden.grads do
        for i, p in ipairs(ps) do p.grad = grad(step, i):float() end
        opt:step()
      end
      for i, p in ipairs(ps) do
        assert.are.equal("float32", p.dtype)
        assert.tensor_near(case.trajectory[#golden.grads][i], p:detach():double():reshape(-1), 1e-4, 1e-5, name)
        for _, v in pairs(opt.state[p]) do
          if tl.is_tensor(v) then assert.are.equal("float32", v.dtype) end
        end
      end
    end)
  end
end)

describe("optimizers on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the optimizers' trajectories did not run")
    return
  end

  -- every case in float32 on the GPU follows torch's float64 trajectory within float32 noise, and
  -- its CPU float32 run closely
  for _, case in ipairs(golden.cases) do
    it(case.name .. " (optim." .. case.optim .. ") on cuda, float32", function()
      local function run(device)
        local ps = params()
        for i, p in ipairs(ps) do ps[i] = p:detach():float():to(device):requires_grad_() end
        local opt = build(case, ps)
        for step = 1, #golden.grads do
          for i, p in ipairs(ps) do p.grad = grad(step, i):float():to(device) end
          opt:step()
        end
        return ps
      end
      local gpu, cpu = run("cuda"), run("cpu")
      for i = 1, #gpu do
        local g = gpu[i]:detach():to("cpu")
        assert.are.equal("float32", g.dtype)
        assert.tensor_near(case.trajectory[#golden.grads][i], g:double():reshape(-1), 1e-4, 1e-5, case.name)
        assert.tensor_near(cpu[i]:detach(), g, 1e-5, 1e-6, case.name .. " cuda vs cpu")
      end
    end)
  end
end)
