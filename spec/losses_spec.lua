-- tl.nn's losses (nn/losses.lua) and their functional forms (nn/functional/losses.lua): values and gradients of every loss, option and reduction against PyTorch 1.13 goldens in float64 (spec/goldens/losses.py), gradchecks, the fused cross_entropy path, modules' buffers and printing, errors, and the same goldens on CUDA (#cuda).
local tl = require("tlua")
local nn = tl.nn
local F = nn.functional
local gradcheck = tl.autograd.gradcheck

local golden = dofile("spec/goldens/losses.lua")

-- each functional form's module class
local MODULES = {
  cross_entropy = "CrossEntropyLoss", nll_loss = "NLLLoss", binary_cross_entropy = "BCELoss",
  binary_cross_entropy_with_logits = "BCEWithLogitsLoss", mse_loss = "MSELoss", l1_loss = "L1Loss",
  smooth_l1_loss = "SmoothL1Loss", huber_loss = "HuberLoss", kl_div = "KLDivLoss",
  cosine_embedding_loss = "CosineEmbeddingLoss", margin_ranking_loss = "MarginRankingLoss",
  triplet_margin_loss = "TripletMarginLoss", ctc_loss = "CTCLoss",
}

-- a golden tensor ({shape, dtype, data}) as a tensor; other values as they are
local function value(v, device, dtype)
  if type(v) ~= "table" or v.shape == nil then return v end
  local d = v.dtype
  if dtype and d == "float64" then d = dtype end
  return tl.tensor(v.data, { dtype = d, device = device or "cpu" }):reshape(v.shape)
end

local function options_of(c, device, dtype)
  local o = {}
  for k, v in pairs(c.opts) do o[k] = value(v, device, dtype) end
  return o
end

-- runs golden case c (on device, in dtype; through its module when via_module): the loss, and
-- the differentiated inputs after backward of sum(out * cw) (or out)
local function run(c, opts)
  opts = opts or {}
  local args, leaves = {}, {}
  for i, a in ipairs(c.args) do
    local v = value(a.value, opts.device, opts.dtype)
    if a.grad and c.grads then
      v:requires_grad_()
      leaves[i] = v
    end
    args[i] = v
  end
  local n = #c.args
  local call = table.move(args, 1, n, 1, {})
  if c.log_softmax then call[1] = args[1]:log_softmax(c.log_softmax) end
  local out
  if opts.via_module then
    out = nn[MODULES[c.fn]](options_of(c, opts.device, opts.dtype))(table.unpack(call, 1, n))
  else
    call[n + 1] = options_of(c, opts.device, opts.dtype)
    out = F[c.fn](table.unpack(call, 1, n + 1))
  end
  if c.grads then
    if c.cw then
      (out * value(c.cw, opts.device, opts.dtype)):sum():backward()
    else
      out:backward()
    end
  end
  return out, leaves
end

local function check_case(c, opts, rtol, atol)
  local out, leaves = run(c, opts)
  local where = c.name .. (opts and opts.via_module and " (module)" or "")
  assert.are.same(c.out.shape, out.shape, where .. ": shape")
  assert.tensor_near(value(c.out), out:detach():to("cpu"):double(), rtol, atol, where)
  for i, g in pairs(leaves) do
    assert.is_not_nil(g.grad, where .. ": no gradient for argument " .. i)
    assert.tensor_near(value(c.grads[i]), g.grad:to("cpu"):double(), rtol, atol,
      where .. ": gradient of argument " .. i)
  end
end

describe("losses against PyTorch (float64)", function()
  for _, c in ipairs(golden) do
    it(c.name, function()
      check_case(c, nil, 1e-10, 1e-12)
      check_case(c, { via_module = true }, 1e-10, 1e-12)
    end)
  end

  it("cover every loss and every reduction", function()
    local seen = {}
    for _, c in ipairs(golden) do
      seen[c.fn] = seen[c.fn] or {}
      seen[c.fn][c.opts.reduction or "mean"] = true
    end
    for fn in pairs(MODULES) do
      assert.are.same({ none = true, mean = true, sum = true }, {
        none = seen[fn] and seen[fn].none, mean = seen[fn] and seen[fn].mean, sum = seen[fn] and seen[fn].sum,
      }, fn)
    end
    assert.is_true(seen.kl_div.batchmean)
  end)
end)

describe("losses' gradients against finite differences (gradcheck, float64)", function()
  -- the cases whose inputs sit where the loss has no derivative (probabilities of 0 and 1) or
  -- is infinite are left out
  local skip = { ["binary_cross_entropy at 0 and 1"] = true, ["ctc_loss impossible"] = true }
  for _, c in ipairs(golden) do
    if not skip[c.name] and c.grads then
      it(c.name, function()
        local inputs, positions = {}, {}
        local args = {}
        for i, a in ipairs(c.args) do
          args[i] = value(a.value)
          if a.grad then
            args[i]:requires_grad_()
            inputs[#inputs + 1] = args[i]
            positions[#positions + 1] = i
          end
        end
        local n = #c.args
        local function fn(...)
          local call = table.move(args, 1, n, 1, {})
          for k, t in ipairs({ ... }) do call[positions[k]] = t end
          if c.log_softmax then call[1] = call[1]:log_softmax(c.log_softmax) end
          call[n + 1] = options_of(c)
          return F[c.fn](table.unpack(call, 1, n + 1))
        end
        assert.is_true(gradcheck(fn, inputs, { atol = 1e-6, rtol = 1e-4 }))
      end)
    end
  end
end)

describe("cross_entropy's paths", function()
  local function ops_of(fn)
    local ops = {}
    for _, e in ipairs(tl.trace(fn)) do ops[e.op] = true end
    return ops
  end

  it("runs the fused kernel for class targets without weight or ignore_index, in any layout", function()
    local x, t = tl.randn(6, 5), tl.randint(1, 6, { 6 })
    assert.is_true(ops_of(function() F.cross_entropy(x, t) end).cross_entropy)
    assert.is_true(ops_of(function() F.cross_entropy(x, t, { reduction = "sum", label_smoothing = 0.1 }) end)
      .cross_entropy)
    assert.is_true(ops_of(function() F.cross_entropy(tl.randn(2, 5, 3, 4), tl.randint(1, 6, { 2, 3, 4 })) end)
      .cross_entropy)
    assert.is_nil(ops_of(function() F.cross_entropy(x, t, { weight = tl.rand(5) }) end).cross_entropy)
    assert.is_nil(ops_of(function() F.cross_entropy(x, t, { ignore_index = 2 }) end).cross_entropy)
    assert.is_nil(ops_of(function() F.cross_entropy(x, t, { reduction = "none" }) end).cross_entropy)
  end)

  it("gives the same float32 values and gradients by the fused and the composed path", function()
    tl.manual_seed(7)
    local x, t = tl.randn(8, 6, 3), tl.randint(1, 7, { 8, 3 })
    local a, b = x:clone():requires_grad_(), x:clone():requires_grad_()
    local fused = F.cross_entropy(a, t, { label_smoothing = 0.1 })
    -- ignore_index outside the classes ignores nothing, and takes the composed path
    local composed = F.cross_entropy(b, t, { label_smoothing = 0.1, ignore_index = -1 })
    assert.tensor_near(composed, fused, 1e-5, 1e-6)
    fused:backward()
    composed:backward()
    assert.tensor_near(b.grad, a.grad, 1e-5, 1e-6)
  end)

  it("takes int32 targets", function()
    local x, t = tl.randn(4, 3):double(), tl.tensor({ 1, 3, 2, 2 })
    for _, o in ipairs({ {}, { weight = tl.rand(3):double() }, { reduction = "none" } }) do
      assert.tensor_near(F.cross_entropy(x, t, o), F.cross_entropy(x, t:int(), o), 0, 0)
      assert.tensor_near(F.nll_loss(x, t, o), F.nll_loss(x, t:int(), o), 0, 0)
    end
  end)

  it("gives NaN for a mean over no kept target, as torch", function()
    local v = F.cross_entropy(tl.randn(2, 3), tl.tensor({ 2, 2 }), { ignore_index = 2 }):item()
    assert.is_true(v ~= v)
  end)
end)

describe("loss modules", function()
  it("keep their options as fields, weights as buffers that :to() moves and state_dict() holds", function()
    local w = tl.rand(4)
    local m = nn.CrossEntropyLoss({ weight = w, ignore_index = 0, label_smoothing = 0.1, reduction = "sum" })
    assert.are.same({ 0, 0.1, "sum" }, { m.ignore_index, m.label_smoothing, m.reduction })
    assert.are.equal(w, m.weight)
    assert.are.same({}, m:parameters())
    m:to("float64")
    assert.are.equal("float64", m.weight.dtype)
    assert.is_not_nil(m:state_dict().weight)
    local b = nn.BCEWithLogitsLoss({ pos_weight = tl.ones(3) })
    assert.is_not_nil(b:state_dict().pos_weight)
    assert.is_nil(b.weight)
    -- a field changed after construction is used
    local mse = nn.MSELoss()
    mse.reduction = "sum"
    assert.tensor_near(5, mse(tl.tensor({ 1.0, 2.0 }), tl.tensor({ 0.0, 0.0 })), 0, 0)
  end)

  it("print their options that differ from the defaults", function()
    assert.are.equal("CrossEntropyLoss()", tostring(nn.CrossEntropyLoss()))
    assert.are.equal("CrossEntropyLoss(ignore_index=1, reduction=sum, weight=[3])",
      tostring(nn.CrossEntropyLoss({ ignore_index = 1, reduction = "sum", weight = tl.ones(3) })))
    assert.are.equal("TripletMarginLoss(margin=2, swap=true)",
      tostring(nn.TripletMarginLoss({ margin = 2, swap = true })))
    assert.are.equal("CTCLoss(blank=3, zero_infinity=true)", tostring(nn.CTCLoss({ blank = 3, zero_infinity = true })))
  end)

  it("train: a linear model's cross entropy falls", function()
    tl.manual_seed(5)
    local model = nn.Linear(4, 3)
    local x, t = tl.randn(32, 4), tl.randint(1, 4, { 32 })
    local loss_fn = nn.CrossEntropyLoss({ weight = tl.tensor({ 1, 2, 0.5 }) })
    local opt = tl.optim.SGD(model:parameters(), { lr = 0.5 })
    local first, last
    for step = 1, 20 do
      opt:zero_grad()
      local loss = loss_fn(model(x), t)
      loss:backward()
      opt:step()
      if step == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(last < first)
  end)
end)

describe("losses' errors", function()
  local x, t = tl.randn(3, 4), tl.tensor({ 1, 4, 2 })

  it("refuse a bad reduction or option value, naming the function", function()
    assert.error_matches(function() F.mse_loss(x, x, { reduction = "avg" }) end,
      { "mse_loss: reduction must be 'none', 'mean' or 'sum', got 'avg'" })
    assert.error_matches(function() nn.L1Loss({ reduction = "batchmean" }) end,
      { "nn.L1Loss: reduction must be 'none', 'mean' or 'sum', got 'batchmean'" })
    assert.error_matches(function() nn.KLDivLoss({ reduction = "avg" }) end,
      { "nn.KLDivLoss: reduction must be 'none', 'mean', 'batchmean' or 'sum', got 'avg'" })
    assert.error_matches(function() F.cross_entropy(x, t, { label_smoothing = 1.5 }) end,
      { "cross_entropy: label_smoothing must be in [0, 1], got 1.5" })
    assert.error_matches(function() nn.SmoothL1Loss({ beta = -1 }) end,
      { "nn.SmoothL1Loss: beta must be non-negative, got -1" })
    assert.error_matches(function() nn.HuberLoss({ delta = 0 }) end, { "nn.HuberLoss: delta must be positive, got 0" })
    assert.error_matches(function() nn.TripletMarginLoss({ p = 0 }) end, { "nn.TripletMarginLoss: p must be positive" })
    assert.error_matches(function() nn.CTCLoss({ blank = 0 }) end, { "nn.CTCLoss: blank must be a class" })
    assert.error_matches(function() nn.CrossEntropyLoss({ weight = tl.ones(2, 2) }) end,
      { "nn.CrossEntropyLoss: weight must be a 1-D tensor" })
    assert.error_matches(function() nn.BCELoss({ weight = tl.tensor({ 1, 2 }) }) end,
      { "nn.BCELoss: weight expected a floating tensor, got an int64 tensor" })
    assert.error_matches(function() F.cross_entropy(x, t, { ignore_index = 1.5 }) end,
      { "cross_entropy: option ignore_index expected an integer, got 1.5" })
    assert.error_matches(function() F.mse_loss(x, x, "sum") end, { "mse_loss: expected an options table" })
  end)

  it("refuse an unknown option key, listing the accepted ones, at the caller's line", function()
    local err = assert.error_matches(function() F.cross_entropy(x, t, { ignore_idx = 1 }) end,
      { "cross_entropy: unknown option 'ignore_idx' (accepted: ignore_index, label_smoothing, reduction, weight)" })
    assert.is_truthy(err:match("losses_spec%.lua:%d+:"), err)
    err = assert.error_matches(function() nn.CTCLoss({ zero_inf = true }) end,
      { "nn.CTCLoss: unknown option 'zero_inf' (accepted: blank, reduction, zero_infinity)" })
    assert.is_truthy(err:match("losses_spec%.lua:%d+:"), err)
  end)

  it("refuse classes out of range and targets of the wrong shape or dtype", function()
    local err = assert.error_matches(function() F.cross_entropy(x, tl.tensor({ 1, 5, 2 })) end,
      { "cross_entropy: target holds 5 at position 2 (shape [3]), out of range for the 4 classes",
        "expected 1 <= class <= 4; classes count from 1" })
    assert.is_truthy(err:match("losses_spec%.lua:%d+:"), err)
    assert.error_matches(function() nn.NLLLoss()(x, tl.tensor({ 0, 1, 2 })) end,
      { "nn.NLLLoss: target holds 0 at position 1" })
    -- an ignored target may be any integer
    F.cross_entropy(x, tl.tensor({ 1, 9, 2 }), { ignore_index = 9, weight = tl.ones(4) })
    assert.error_matches(function() F.cross_entropy(x, tl.tensor({ 1, 7, 2 }), { ignore_index = 9 }) end,
      { "holds 7 at position 2", "or ignore_index 9" })
    assert.error_matches(function() F.cross_entropy(x, tl.tensor({ { 1 }, { 2 }, { 3 } })) end,
      { "cross_entropy: target must have shape [3] for input [N, C] [3, 4], got [3, 1]" })
    assert.error_matches(function() F.cross_entropy(tl.randn(2, 4, 5), tl.tensor({ 1, 2 })) end,
      { "cross_entropy: target must have shape [2, 5] for input [N, C, d1, ...] [2, 4, 5], got [2]" })
    assert.error_matches(function() F.cross_entropy(x, tl.rand(3, 5)) end,
      { "cross_entropy: target must have shape [3, 4] for input [N, C] [3, 4], got [3, 5]" })
    assert.error_matches(function() F.cross_entropy(x, tl.rand(3, 4), { ignore_index = 1 }) end,
      { "cross_entropy: ignore_index applies to class targets only" })
    assert.error_matches(function() F.cross_entropy(x, t, { weight = tl.ones(3) }) end,
      { "cross_entropy: weight must have one element per class (4), got shape [3]" })
    assert.error_matches(function() F.nll_loss(x, t:float()) end,
      { "nll_loss: target expected an int64 or int32 tensor of classes (counting from 1), got a float32 tensor" })
    assert.error_matches(function() F.cross_entropy(t, t) end,
      { "cross_entropy: input expected a floating tensor, got an int64 tensor of shape [3]" })
    assert.error_matches(function() F.cross_entropy(x, { 1, 2, 3 }) end,
      { "cross_entropy: target expected a tensor, got table" })
    assert.error_matches(function() F.nll_loss(tl.tensor(1.5), tl.tensor(1)) end,
      { "nll_loss: input must be [N, C, d1, ...] or [C], got a 0-dim tensor" })
  end)

  it("refuse mismatched shapes and out-of-domain inputs of the other losses", function()
    for _, fn in ipairs({ "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy",
      "binary_cross_entropy_with_logits" }) do
      assert.error_matches(function() F[fn](tl.rand(3, 4), tl.rand(4)) end,
        { fn .. ": target must have the shape of input [3, 4], got [4]" })
    end
    assert.error_matches(function() F.binary_cross_entropy(tl.tensor({ 0.5, 1.5 }), tl.tensor({ 0.5, 0.5 })) end,
      { "binary_cross_entropy: input holds 1.5 at position 2, outside [0, 1]" })
    assert.error_matches(function() F.binary_cross_entropy(tl.rand(3), tl.rand(3), { weight = tl.rand(2) }) end,
      { "binary_cross_entropy: weight of shape [2] does not broadcast to [3]" })
    assert.error_matches(function()
      F.binary_cross_entropy_with_logits(tl.rand(2, 3), tl.rand(2, 3), { pos_weight = tl.rand(2) })
    end, { "binary_cross_entropy_with_logits: pos_weight of shape [2] does not broadcast to [2, 3]" })
    assert.error_matches(function() F.cosine_embedding_loss(tl.rand(3, 2), tl.rand(3, 2), tl.ones(2)) end,
      { "cosine_embedding_loss: target must have shape [3] (one 1 or -1 per pair), got [2]" })
    assert.error_matches(function() F.cosine_embedding_loss(tl.rand(3, 2), tl.rand(3, 3), tl.ones(3)) end,
      { "cosine_embedding_loss: input2 must have the shape of input1 [3, 2], got [3, 3]" })
    assert.error_matches(function() F.margin_ranking_loss(tl.rand(3), tl.rand(3, 1), tl.ones(3)) end,
      { "margin_ranking_loss: input1, input2 and target must have the same number of dims" })
    assert.error_matches(function() F.margin_ranking_loss(tl.rand(3), tl.rand(2), tl.ones(3)) end,
      { "margin_ranking_loss: the shapes of input1 [3], input2 [2], target [3] do not broadcast" })
    assert.error_matches(function() F.triplet_margin_loss(tl.rand(2, 3), tl.rand(2, 3), tl.rand(3)) end,
      { "triplet_margin_loss: anchor, positive and negative must all be [N, D] or all [D]" })
    assert.error_matches(function() F.triplet_margin_loss(tl.rand(2, 3), tl.rand(2, 4), tl.rand(2, 3)) end,
      { "triplet_margin_loss: the shapes of anchor [2, 3], positive [2, 4], negative [2, 3] do not broadcast" })
  end)

  it("refuse bad CTC targets and lengths", function()
    local lp = tl.randn(6, 2, 4):log_softmax(3)
    local targets = tl.tensor({ { 2, 3 }, { 4, 2 } })
    assert.error_matches(function() F.ctc_loss(lp, tl.tensor({ { 2, 1 }, { 4, 2 } }), { 6, 6 }, { 2, 2 }) end,
      { "ctc_loss: target 1 holds 1 at position 2; labels must be classes 1..4 other than the blank (1)" })
    assert.error_matches(function() F.ctc_loss(lp, tl.tensor({ { 2, 5 }, { 4, 2 } }), { 6, 6 }, { 2, 2 }) end,
      { "ctc_loss: target 1 holds 5 at position 2" })
    assert.error_matches(function() F.ctc_loss(lp, targets, { 6, 7 }, { 2, 2 }) end,
      { "ctc_loss: input_lengths[2] is 7, longer than the 6 time steps" })
    assert.error_matches(function() F.ctc_loss(lp, targets, { 6, 6 }, { 2, 3 }) end,
      { "ctc_loss: target_lengths[2] is 3, longer than the targets' 2 columns" })
    assert.error_matches(function() F.ctc_loss(lp, targets, { 6 }, { 2, 2 }) end,
      { "ctc_loss: input_lengths must have 2 entries (one per sequence), got 1" })
    -- one sequence: "1 entry", and an int64 tensor of the wrong shape is "an int64"
    local one = lp:narrow(2, 1, 1)
    assert.error_matches(function() F.ctc_loss(one, targets:narrow(1, 1, 1), { 6, 6 }, { 2 }) end,
      { "ctc_loss: input_lengths must have 1 entry (one per sequence), got 2" })
    assert.error_matches(function() F.ctc_loss(lp, targets, tl.tensor({ { 6, 6 } }), { 2, 2 }) end,
      { "ctc_loss: input_lengths expected integers (a list or a 1-D int64/int32 tensor), got an int64 tensor of " ..
        "shape [1, 2]" })
    assert.is_true(F.ctc_loss(one, targets:narrow(1, 1, 1), { 6 }, { 2 }):item() > 0) -- still works
    assert.error_matches(function() F.ctc_loss(lp, targets, { 6, -1 }, { 2, 2 }) end,
      { "ctc_loss: input_lengths[2] must be a non-negative integer, got -1" })
    assert.error_matches(function() F.ctc_loss(lp, tl.tensor({ 2, 3, 4 }), { 6, 6 }, { 2, 2 }) end,
      { "ctc_loss: target_lengths add up to 4, more than the 3 concatenated targets" })
    assert.error_matches(function() F.ctc_loss(lp, targets:float(), { 6, 6 }, { 2, 2 }) end,
      { "ctc_loss: targets expected an int64 or int32 tensor of classes, got a float32 tensor" })
    assert.error_matches(function() F.ctc_loss(lp:unsqueeze(1), targets, { 6, 6 }, { 2, 2 }) end,
      { "ctc_loss: log_probs must be [T, N, C] or [T, C], got shape [1, 6, 2, 4]" })
    assert.error_matches(function() F.ctc_loss(lp, targets, { 6, 6 }, { 2, 2 }, { blank = 5 }) end,
      { "ctc_loss: blank is 5, out of range for the 4 classes" })
    assert.error_matches(function() F.ctc_loss(lp, targets, tl.tensor({ 6.0, 6.0 }), { 2, 2 }) end,
      { "ctc_loss: input_lengths expected integers (a list or a 1-D int64/int32 tensor), got a float32 tensor" })
    -- the lengths as tensors, int32 targets, and a blank other than 1
    local a = F.ctc_loss(lp, targets, { 6, 5 }, { 2, 2 }, { reduction = "none" })
    local b = F.ctc_loss(lp, targets:int(), tl.tensor({ 6, 5 }), tl.tensor({ 2, 2 }, { dtype = "int32" }),
      { reduction = "none" })
    assert.tensor_near(a, b, 0, 0)
  end)
end)

describe("losses on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of the losses did not run")
    return
  end

  for _, c in ipairs(golden) do
    it(c.name .. ": float64 against PyTorch, float32 near the CPU", function()
      check_case(c, { device = "cuda" }, 1e-10, 1e-12)
      check_case(c, { device = "cuda", via_module = true }, 1e-10, 1e-12)
      if c.name ~= "binary_cross_entropy at 0 and 1" and not c.name:match("^ctc_loss impossible") then
        local cpu_out, cpu_leaves = run(c, { dtype = "float32" })
        local out, leaves = run(c, { device = "cuda", dtype = "float32" })
        assert.tensor_near(cpu_out, out:to("cpu"), 1e-4, 1e-5, c.name)
        for i, g in pairs(cpu_leaves) do
          assert.tensor_near(g.grad, leaves[i].grad:to("cpu"), 1e-4, 1e-5, c.name .. ": gradient " .. i)
        end
      end
    end)
  end
end)
