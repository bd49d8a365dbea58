-- cumprod, logcumsumexp, cummax and cummin against Lua loops (helpers/cumulative_cases.lua): every
-- dtype, each dim, strided inputs, torch's rules for NaN and ties (golden values from PyTorch 1.13),
-- the gradients of lines with zeros, bad input. The same comparisons run on CUDA (#cuda).
local tl = require("tlua")
local ref = require("helpers.reference")
local C = require("helpers.cumulative_cases")

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }
local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local tolerance = { float64 = 1e-12, float32 = 1e-5, bfloat16 = 3e-2, float16 = 4e-3 }
local SHAPE = { 2, 3, 4 }

local function values(d, rng)
  return tl.tensor(ref.build(SHAPE, function()
    if d == "bool" then return rng:int(0, 3) > 0 end
    if floating[d] then return rng:int(-8, 8) / 4 end -- ties, exact in every dtype
    return rng:int(-3, 3)
  end), { dtype = d })
end

local function compare(device)
  for _, d in ipairs(DTYPES) do
    it("in " .. d .. " along each dim match the Lua loops", function()
      local x = values(d, ref.rng(#d * 13))
      local stored = x:totable()
      local on = x:to(device)
      local strided = x:transpose(1, 3):contiguous():transpose(1, 3):to(device) -- another layout
      for dim = 1, 3 do
        for _, input in ipairs({ on, strided }) do
          local what = string.format("%s dim %d on %s", d, dim, device)
          local got = input:cumprod(dim - 4 + (dim % 2) * 4) -- a negative dim for dim 2
          assert.are.equal(floating[d] and d or "int64", got.dtype, what)
          local expected = C.cumprod(stored, SHAPE, dim)
          if floating[d] then
            assert.tensor_near(expected, got:to("cpu"), tolerance[d], tolerance[d], "cumprod " .. what)
            assert.tensor_near(C.logcumsumexp(stored, SHAPE, dim), input:logcumsumexp(dim):to("cpu"),
              tolerance[d], tolerance[d], "logcumsumexp " .. what)
          else
            assert.tensor_equal(expected, got:to("cpu"), "cumprod " .. what)
          end
          for _, name in ipairs({ "cummax", "cummin" }) do
            local v, i = input[name](input, dim)
            local ev, ei = C.running_extreme(stored, SHAPE, dim, name == "cummax")
            if d == "bool" then ev = ref.map(ev, function(e) return e ~= 0 end) end
            assert.tensor_equal(ev, v:to("cpu"), name .. " values " .. what)
            assert.tensor_equal(ei, i:to("cpu"), name .. " indices " .. what)
            assert.are.equal(d, v.dtype)
            assert.are.equal("int64", i.dtype)
          end
        end
      end
    end)
  end

  it("follow torch: NaN and ties in cummax, infinities in logcumsumexp, wrapping products", function()
    -- torch.cummax(torch.tensor([1., 3., 3., 2., nan, 5., nan]), 0)
    local x = tl.tensor({ 1, 3, 3, 2, 0 / 0, 5, 0 / 0 }, { device = device })
    local v, i = x:cummax(1)
    assert.tensor_equal({ 1, 2, 3, 3, 5, 5, 7 }, i:to("cpu"))
    assert.are.same({ 1, 3, 3, 3 }, { table.unpack(v:to("cpu"):totable(), 1, 4) })
    local _, j = x:cummin(1)
    assert.tensor_equal({ 1, 1, 1, 1, 5, 5, 7 }, j:to("cpu"))
    -- torch.logcumsumexp(torch.tensor([-inf, 1., inf]), 0) = [-inf, 1., inf]
    assert.tensor_equal({ -math.huge, 1, math.huge },
      tl.tensor({ -math.huge, 1, math.huge }, { device = device }):logcumsumexp(1):to("cpu"))
    -- int64 products wrap
    local big = tl.tensor({ 1 << 40, 1 << 30, 3 }, { dtype = "int64", device = device })
    assert.tensor_equal({ 1 << 40, (1 << 40) * (1 << 30), (1 << 40) * (1 << 30) * 3 }, big:cumprod(1):to("cpu"))
    -- a 0-dim tensor is one line
    assert.are.equal(3, tl.tensor(3.0, { device = device }):cumprod(1):item())
  end)

  it("gradients: cumprod exact with zeros, cummax's ties to the later index (torch's golden values)", function()
    -- x = torch.tensor([2., 0., 3., 0., 4.], requires_grad=True); torch.cumprod(x, 0).sum().backward()
    local x = tl.tensor({ 2, 0, 3, 0, 4 }, { dtype = "float64", device = device }):requires_grad_()
    x:cumprod(1):sum():backward()
    assert.tensor_near({ 1, 8, 0, 0, 0 }, x.grad:to("cpu"), 1e-12, 0)
    -- x = torch.tensor([1., 3., 3., 2.], requires_grad=True); torch.cummax(x, 0)[0].sum().backward()
    local y = tl.tensor({ 1, 3, 3, 2 }, { dtype = "float64", device = device }):requires_grad_()
    y:cummax(1):sum():backward()
    assert.tensor_near({ 1, 1, 2, 0 }, y.grad:to("cpu"), 1e-12, 0)
    local gradcheck = tl.autograd.gradcheck
    assert.is_true(gradcheck(function(t) return t:logcumsumexp(-1) end,
      { tl.randn(2, 6, { dtype = "float64", device = device }):requires_grad_() }))
    -- large values: the log-domain gradient does not overflow
    local z = tl.tensor({ 800, 801, -800 }, { dtype = "float64", device = device }):requires_grad_()
    z:logcumsumexp(1):sum():backward()
    local g = z.grad:to("cpu"):totable()
    local e = 1 / (1 + math.exp(1))
    assert.near(1 + e + e, g[1], 1e-12)
  end)
end

describe("cumulative ops on the cpu", function()
  compare("cpu")

  it("reject bad input with the op, the argument and what was expected", function()
    local x = tl.ones(2, 3)
    local function fails(pattern, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pattern)
      assert.matches(pattern, err, 1, true)
    end
    for _, name in ipairs({ "cumprod", "logcumsumexp", "cummax", "cummin" }) do
      fails(name .. ": dim 3 is out of range", function() return x[name](x, 3) end)
      fails(name .. ": argument 2 expected a dim (an integer)", function() return x[name](x) end)
    end
    fails("logcumsumexp: expected a floating dtype, got int64",
      function() return tl.tensor({ 1, 2 }):logcumsumexp(1) end)
  end)
end)

describe("cumulative ops on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of the cumulative ops did not run")
    return
  end
  compare("cuda")
end)
