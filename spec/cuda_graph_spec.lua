-- tl.cuda.graph: a captured step replays with new inputs, fresh random draws, the optimizer's lr and step
-- counts, safe memory; what cannot be captured is a clear error (#cuda); adam_step_multi's hyper form.
local tl = require("tlua")
local ref = require("helpers.reference")
local adam_step = require("helpers.optim_cases").adam_step

local function flat(t) return ref.flatten(t:to("cpu"):double():totable()) end

local function assert_close(expected, got, tolerance, what)
  assert.are.equal(#expected, #got, what)
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if math.abs(e - g) > tolerance * (1 + math.abs(e)) then
      error(string.format("%s: element %d is %.9g, expected %.9g", what, i, g, e), 2)
    end
  end
end

-- ---- the options, and the hyper form of adam_step_multi, on any machine -------------------------------
describe("tl.cuda.graph's arguments", function()
  it("refuses what is not a function, unknown options and a negative warmup", function()
    assert.has_error(function() tl.cuda.graph(3) end, "tl.cuda.graph: argument 1 expected a function, got number")
    assert.has_error(function() tl.cuda.graph(function() end, { warmup = -1 }) end,
      "tl.cuda.graph: warmup must be >= 0, got -1")
    local ok, message = pcall(tl.cuda.graph, function() end, { wramup = 1 })
    assert.is_false(ok)
    assert.truthy(message:find("unknown option 'wramup'", 1, true), message)
    assert.has_error(function() tl.cuda.graph(function() end, { device = "cpu" }) end,
      "tl.cuda.graph: device must be a CUDA device, got 'cpu'")
  end)

  it("says when there is no GPU", function()
    if tl.cuda.device_count() > 0 then return pending("a GPU is present") end
    local ok, message = pcall(tl.cuda.graph, function() end)
    assert.is_false(ok)
    assert.truthy(message:find("tl.cuda.graph: cuda:0 is not available", 1, true), message)
  end)

  it("on_replay outside a capture is an error; is_capturing is false", function()
    assert.has_error(function() tl.cuda.on_replay(function() end) end,
      "tl.cuda.on_replay: called outside a tl.cuda.graph capture")
    if tl.cuda.device_count() > 0 then assert.is_false(tl.cuda.is_capturing()) end
  end)
end)

describe("adam_step_multi with lr and step in a tensor", function()
  local o = { lr = 0.05, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, decoupled = true }

  local function run(device)
    local rng = ref.rng(5)
    local p0, grads = {}, {}
    for i = 1, 37 do p0[i] = rng:normal() end
    for k = 1, 3 do
      grads[k] = {}
      for i = 1, 37 do grads[k][i] = 0.5 * rng:normal() end
    end
    local p = tl.tensor(p0, { dtype = "float64", device = device })
    local m, v = tl.zeros({ 37 }, { dtype = "float64", device = device }), tl.zeros({ 37 }, { dtype = "float64",
      device = device })
    local expected, s = { table.unpack(p0) }, {}
    for k = 1, 3 do
      local hyper = tl.tensor({ o.lr * k, k }, { dtype = "float64", device = device })
      tl._adam_step_multi({ p }, { tl.tensor(grads[k], { dtype = "float64", device = device }) }, { m }, { v }, nil,
        hyper, o.beta1, o.beta2, o.eps, o.weight_decay, nil, true)
      adam_step(expected, grads[k], s, { lr = o.lr * k, beta1 = o.beta1, beta2 = o.beta2, eps = o.eps,
        weight_decay = o.weight_decay, decoupled = true })
    end
    assert_close(expected, flat(p), 1e-12, "params after 3 steps on " .. device)
  end

  it("reads lr and step from the tensor on the CPU (float64 Lua reference, lr changing)", function() run("cpu") end)
  it("reads lr and step from the tensor on a GPU #cuda", function()
    if tl.cuda.device_count() == 0 then return pending("no CUDA device") end
    run("cuda")
  end)

  it("refuses a hyper tensor of another dtype, shape or device, and a step that is not an integer", function()
    local p, g = tl.zeros({ 3 }), tl.zeros({ 3 })
    local m, v = tl.zeros({ 3 }), tl.zeros({ 3 })
    local function step(hyper)
      return pcall(tl._adam_step_multi, { p }, { g }, { m }, { v }, nil, hyper, 0.9, 0.99, 1e-8, 0, nil, true)
    end
    local ok, message = step(tl.tensor({ 0.1, 1 }))
    assert.is_false(ok)
    assert.truthy(message:find("hyper must be a contiguous float64 tensor of shape [2]", 1, true), message)
    ok, message = step(tl.tensor({ 0.1, 1, 2 }, { dtype = "float64" }))
    assert.is_false(ok)
    assert.truthy(message:find("hyper must be a contiguous float64 tensor of shape [2]", 1, true), message)
    ok, message = step(tl.tensor({ 0.1, 1.5 }, { dtype = "float64" }))
    assert.is_false(ok)
    assert.truthy(message:find("hyper's step must be an integer >= 1, got 1.5", 1, true), message)
    ok, message = step(tl.tensor({ -0.1, 1 }, { dtype = "float64" }))
    assert.is_false(ok)
    assert.truthy(message:find("lr", 1, true), message)
  end)
end)

-- ---- captures on a GPU --------------------------------------------------------------------------------
describe("tl.cuda.graph on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA graph specs did not run")
    return
  end

  it("replays with new inputs, its intermediates kept apart from eager allocations", function()
    local g = tl.cuda.graph(function(x, y) return ((x * 2 + y) * 3):relu() end, { warmup = 0 })
    local expected = function(x, y)
      local out = {}
      for i = 1, #x do out[i] = math.max(0, (x[i] * 2 + y[i]) * 3) end
      return out
    end
    local rng = ref.rng(3)
    local out
    for call = 1, 3 do
      local x, y = {}, {}
      for i = 1, 1000 do x[i], y[i] = ref.round_f32(rng:normal()), ref.round_f32(rng:normal()) end
      out = g(tl.tensor(x, { device = "cuda" }), tl.tensor(y, { device = "cuda" }))
      -- eager tensors of the intermediates' size, made between replays, keep their values
      local witness = tl.full({ 1000 }, 7.0, { device = "cuda" })
      assert_close(expected(x, y), flat(out), 1e-6, "replay " .. call)
      g:replay()
      local sevens = {}
      for i = 1, 1000 do sevens[i] = 7.0 end
      assert_close(sevens, flat(witness), 0, "witness")
    end
    assert.is_true(g.captured)
  end)

  it("stops the collector while it captures (a finalizer there could break the capture), as it found it after", function()
    local during
    local g = tl.cuda.graph(function(x)
      during = collectgarbage("isrunning")
      return x * 2
    end, { warmup = 0 })
    local x = tl.full({ 16 }, 2.0, { device = "cuda" })
    assert.are.same({ 4.0 }, flat(g(x):max():view({ 1 })))
    assert.is_false(during)
    assert.is_true(collectgarbage("isrunning"))
    collectgarbage("stop")
    local again = tl.cuda.graph(function(y) return y + 1 end, { warmup = 0 })
    again(x)
    assert.is_false(collectgarbage("isrunning")) -- stopped before, stopped after
    collectgarbage("restart")
  end)

  it("keeps a block it reads from reuse after its last tensor is gone", function()
    local held = tl.full({ 4096 }, 1.0, { device = "cuda" })
    local g = tl.cuda.graph(function(x) return x + held end, { warmup = 0 })
    local x = tl.full({ 4096 }, 2.0, { device = "cuda" })
    g(x)
    held = nil
    collectgarbage("collect")
    local others = {}
    for i = 1, 8 do others[i] = tl.full({ 4096 }, 5.0, { device = "cuda" }) end
    local out = g(x)
    assert.are.same({ 3.0 }, flat(out:max():view({ 1 })))
    assert.are.same({ 3.0 }, flat(out:min():view({ 1 })))
    for i = 1, 8 do assert.are.same({ 5.0 }, flat(others[i]:min():view({ 1 }))) end
  end)

  it("draws fresh random numbers at each replay, the ones eager calls draw", function()
    local function fn(x) return tl.nn.functional.dropout(x, 0.5, true) end
    local x = tl.ones({ 4096 }, { device = "cuda" })
    tl.manual_seed(11)
    local eager1, eager2 = flat(fn(x)), flat(fn(x))
    tl.manual_seed(11)
    local g = tl.cuda.graph(fn, { warmup = 0 })
    local first = flat(g(x))
    local second = flat(g(x))
    assert.are.same(eager1, first)
    assert.are.same(eager2, second)
    assert.are_not.same(first, second)
  end)

  it("trains as AdamW does, with clipping and an lr schedule (float64 reference)", function()
    -- one linear map [4, 3] on fixed data: the loss's gradient in closed form, in float64, from the
    -- parameters before each step; the reference then takes torch's AdamW step with the scheduled lr
    local rng = ref.rng(9)
    local w0, xs = {}, {}
    for i = 1, 12 do w0[i] = ref.round_f32(rng:normal()) end
    for i = 1, 8 * 3 do xs[i] = ref.round_f32(rng:normal()) end
    local w = tl.tensor(w0, { device = "cuda" }):view({ 4, 3 }):requires_grad_()
    local x = tl.tensor(xs, { device = "cuda" }):view({ 8, 3 })
    local opt = tl.optim.AdamW({ w }, { lr = 0.1, weight_decay = 0.01 })
    local sched = tl.optim.StepLR(opt, 2, { gamma = 0.5 })
    local step = tl.cuda.graph(function(input)
      local y = input:matmul(w:t())
      local loss = (y * y):mean()
      loss:backward()
      local norm = tl.optim.clip_grad_norm({ w }, 1e9)
      opt:step()
      opt:zero_grad()
      return loss, norm
    end, { warmup = 1 })
    local expected, s = { table.unpack(w0) }, {}
    for k = 1, 5 do
      local lr = opt.param_groups[1].lr
      local before = flat(w)
      -- the gradient of mean((x w^T)^2) over w, in float64 from the parameters before the step
      local g = {}
      for r = 1, 4 do
        for c = 1, 3 do
          local sum = 0
          for n = 1, 8 do
            local yn = 0
            for j = 1, 3 do yn = yn + xs[(n - 1) * 3 + j] * before[(r - 1) * 3 + j] end
            sum = sum + 2 * yn * xs[(n - 1) * 3 + c]
          end
          g[(r - 1) * 3 + c] = sum / 32
        end
      end
      step(x)
      adam_step(expected, g, s, { lr = lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01,
        decoupled = true })
      assert_close(expected, flat(w), 1e-5, "w after step " .. k)
      sched:step()
    end
    assert.are.equal(5, opt.state[w].step)
    assert.is_true(step.captured)
  end)

  it("refuses a host read, a copy of host values and a sync inside, naming them; the graph stays uncaptured", function()
    local x = tl.ones({ 8 }, { device = "cuda" })
    local cases = {
      { function(t) return t:sum():item() end, "cannot be captured in a CUDA graph" },
      { function(t) return t + tl.tensor({ 1, 2, 3, 4, 5, 6, 7, 8 }):cuda() end, "a copy from host memory cannot be captured" },
      { function(t) tl.cuda.synchronize(); return t end, "synchronize" },
      { function(t) return t:nonzero() end, "cannot be captured in a CUDA graph" },
    }
    for _, case in ipairs(cases) do
      local g = tl.cuda.graph(case[1], { warmup = 0 })
      local ok, message = pcall(g, x)
      assert.is_false(ok)
      assert.truthy(message:find("tl.cuda.graph: the capture failed", 1, true), message)
      assert.truthy(message:find(case[2], 1, true), message)
      assert.is_false(g.captured)
      assert.is_false(tl.cuda.is_capturing())
    end
    -- a refusal caught inside still fails the capture
    local g = tl.cuda.graph(function(t)
      pcall(function() return t:sum():item() end)
      return t * 2
    end, { warmup = 0 })
    local ok, message = pcall(g, x)
    assert.is_false(ok)
    assert.truthy(message:find("cannot be captured in a CUDA graph", 1, true), message)
    -- the device works eagerly after the failures
    assert.are.same({ 16.0 }, { (x * 2):sum():item() })
  end)

  it("never leaves a device capturing: a failing function, a graph freed during another's capture", function()
    local handle, message = tl._cuda_graph_capture(0, function() error("inside the capture") end)
    assert.is_nil(handle)
    assert.truthy(tostring(message):find("inside the capture", 1, true), tostring(message))
    assert.is_false(tl.cuda.is_capturing())
    local x = tl.ones({ 16 }, { device = "cuda" })
    local first = tl.cuda.graph(function(t) return t * 3 end, { warmup = 0 })
    first(x)
    local second = tl.cuda.graph(function(t)
      first = nil
      collectgarbage("collect") -- the first graph's handle is collected during this capture
      return t + 1
    end, { warmup = 0 })
    assert.are.same({ 2.0 }, flat(second(x):max():view({ 1 })))
    collectgarbage("collect")
    assert.are.same({ 2.0 }, flat(second(x):min():view({ 1 })))
    assert.is_false(tl.cuda.is_capturing())
  end)

  it("refuses another shape, another dtype or another number at replay", function()
    local g = tl.cuda.graph(function(t, k) return t * k end, { warmup = 0 })
    g(tl.ones({ 4 }, { device = "cuda" }), 2)
    assert.has_error(function() g(tl.ones({ 5 }, { device = "cuda" }), 2) end,
      "tl.cuda.graph: argument 1 has shape [5], the captured step took [4] (a graph replays one shape: capture "
      .. "another graph for this one)")
    assert.has_error(function() g(tl.ones({ 4 }, { device = "cuda", dtype = "float64" }), 2) end,
      "tl.cuda.graph: argument 1 is float64, the captured step took float32")
    assert.has_error(function() g(tl.ones({ 4 }, { device = "cuda" }), 3) end,
      "tl.cuda.graph: argument 2 was 2 at capture, got 3 (a replay runs with the values it was captured with; pass "
      .. "numbers that change as tensors)")
    assert.has_error(function() g(tl.ones({ 4 }, { device = "cuda" })) end,
      "tl.cuda.graph: the step was captured with 2 arguments, got 1")
  end)

  it("refuses an optimizer step without state, a non-capturable optimizer and changed options", function()
    local w = tl.ones({ 3 }, { device = "cuda" }):requires_grad_()
    local function stepper(opt)
      return function()
        (w * w):sum():backward()
        opt:step()
        opt:zero_grad()
      end
    end
    local ok, message = pcall(tl.cuda.graph(stepper(tl.optim.AdamW({ w })), { warmup = 0 }))
    assert.is_false(ok)
    assert.truthy(message:find("optim.AdamW: a parameter without optimizer state cannot be captured", 1, true), message)
    ok, message = pcall(tl.cuda.graph(stepper(tl.optim.RMSprop({ w }, { lr = 0.01 })), { warmup = 0 }))
    assert.is_false(ok)
    assert.truthy(message:find("optim.RMSprop: its step cannot be captured in a CUDA graph", 1, true), message)
    local opt = tl.optim.AdamW({ w }, { lr = 0.01 })
    local g = tl.cuda.graph(stepper(opt), { warmup = 1 })
    g()
    g()
    opt.param_groups[1].eps = 1e-6
    ok, message = pcall(g)
    assert.is_false(ok)
    assert.truthy(message:find("the options of a step captured in a CUDA graph changed", 1, true), message)
    opt.param_groups[1].eps = 1e-8
    g()
    opt:load_state_dict(opt:state_dict())
    ok, message = pcall(g)
    assert.is_false(ok)
    assert.truthy(message:find("the optimizer's state was replaced (load_state_dict) after its step was captured", 1,
      true), message)
  end)
end)
