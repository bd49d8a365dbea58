-- One definition per op, run for every dtype that has a kernel on a device:
-- the result in that dtype is compared with the same op computed in float64
-- on the CPU from the same (rounded) inputs. On a GPU machine the same cases
-- run on CUDA (tagged #cuda). This also makes the kernel coverage report
-- meaningful: every registered kernel is reached by some case here or elsewhere.
local tl = require("tlua")

local tolerance = {
  float64 = { 1e-12, 1e-12 }, float32 = { 1e-5, 1e-5 }, bfloat16 = { 2e-2, 2e-2 },
  float16 = { 2e-3, 2e-3 }, int32 = { 0, 0 }, int64 = { 0, 0 }, bool = { 0, 0 },
}

local floating = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

-- inputs in dtype d on device; every case also gets their float64 CPU twins
local function normal(d, ...) return tl.randn(...):to(d) end
local function positive(d, ...) return (tl.rand(...) + 0.5):to(d) end
local function small_ints(d, ...)
  if d == "bool" then return tl.randint(0, 2, { ... }):bool() end
  return tl.randint(-4, 5, { ... }):to(d)
end
local function values(d, ...)
  if floating[d] then return normal(d, ...) end
  return small_ints(d, ...)
end

local function unary(fn, make)
  return { inputs = function(d) return { (make or values)(d, 3, 5) } end, run = fn }
end

local function backward_of(fn, make)
  -- runs fn's backward: the gradient of sum(fn(x) * w) with respect to x
  return {
    floating_only = true,
    inputs = function(d) return { (make or normal)(d, 3, 5), normal(d, 3, 5) } end,
    run = function(x, w)
      local leaf = x:detach():requires_grad_()
      ;(fn(leaf) * w):sum():backward()
      return leaf.grad
    end,
  }
end

local cases = {
  neg = unary(tl.neg), abs = unary(tl.abs), relu = unary(tl.relu),
  pow_scalar = unary(function(x) return x ^ 2 end),
  clamp = unary(function(x) return x:clamp(-1, 2) end),
  add = { inputs = function(d) return { values(d, 3, 1), values(d, 1, 5) } end, run = tl.add },
  sub = { inputs = function(d) return { values(d, 3, 5), values(d, 5) } end, run = tl.sub },
  mul = { inputs = function(d) return { values(d, 3, 5), values(d, 3, 5) } end, run = tl.mul },
  pow = { inputs = function(d)
            if floating[d] then return { positive(d, 3, 5), normal(d, 5) } end
            return { small_ints(d, 3, 5), tl.randint(0, 3, { 5 }):to(d) }
          end, run = tl.pow },
  eq = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.eq },
  ne = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.ne },
  lt = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.lt },
  le = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.le },
  gt = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.gt },
  ge = { inputs = function(d) return { small_ints(d, 4, 4), small_ints(d, 4) } end, run = tl.ge },
  where = { inputs = function(d) return { small_ints("bool", 3, 4), values(d, 3, 4), values(d, 4) } end,
            run = function(c, a, b) return tl.where(c, a, b) end },
  fill = { inputs = function(d) return { values(d, 2, 3) } end,
           run = function(x) return x:clone():fill_(1) end },
  cast = { inputs = function(d) return { small_ints(d, 3, 4) } end,
           run = function(x)
             -- every destination dtype, summed as float64 so one comparison covers all
             local total = tl.zeros(3, 4, { dtype = "float64", device = x.device })
             for _, to in ipairs(tl.dtypes) do total = total + x:to(to):double() end
             return total
           end },
  sum = { inputs = function(d) return { values(d, 3, 5) } end,
          run = function(x) return x:sum(2):double() + x:sum():double() end },
  mean = { floating_only = true, inputs = function(d) return { normal(d, 3, 5) } end,
           run = function(x) return x:mean(1) + x:mean() end },
  max = { inputs = function(d) return { values(d, 3, 5) } end,
          run = function(x) local v, i = x:max(2) return v:double() + i:double() + x:max():double() end },
  min = { inputs = function(d) return { values(d, 3, 5) } end,
          run = function(x) local v, i = x:min(1) return v:double() + i:double() + x:min():double() end },
  argmax = { inputs = function(d) return { values(d, 3, 5) } end,
             run = function(x) return x:argmax(2):double() + x:argmax():double() end },
  argmin = { inputs = function(d) return { values(d, 3, 5) } end,
             run = function(x) return x:argmin(1):double() + x:argmin():double() end },
  softmax = { floating_only = true, inputs = function(d) return { normal(d, 3, 5) } end,
              run = function(x) return x:softmax(2) end },
  log_softmax = { floating_only = true, inputs = function(d) return { normal(d, 3, 5) } end,
                  run = function(x) return x:log_softmax(1) end },
  matmul = { floating_only = true, inputs = function(d) return { normal(d, 2, 3, 4), normal(d, 4, 5) } end,
             run = tl.matmul },
  linear = { floating_only = true,
             inputs = function(d) return { normal(d, 4, 3), normal(d, 5, 3), normal(d, 5), normal(d, 4, 5) } end,
             run = function(x, w, b, g)
               x, w, b = x:detach():requires_grad_(), w:detach():requires_grad_(), b:detach():requires_grad_()
               tl.linear(x, w, b):backward(g)
               return tl.linear(x, w, b):detach():sum():double() + x.grad:sum():double()
                 + w.grad:sum():double() + b.grad:sum():double()
             end },
  matmul_backward = { floating_only = true,
                      inputs = function(d) return { normal(d, 2, 3, 4), normal(d, 4, 5), normal(d, 2, 3, 5) } end,
                      run = function(a, b, g)
                        a, b = a:detach():requires_grad_(), b:detach():requires_grad_()
                        tl.matmul(a, b):backward(g)
                        return a.grad:sum():double() + b.grad:sum():double()
                      end },
  outer = { floating_only = true, inputs = function(d) return { normal(d, 3), normal(d, 4), normal(d, 3, 4) } end,
            run = function(a, b, g)
              a, b = a:detach():requires_grad_(), b:detach():requires_grad_()
              tl.outer(a, b):backward(g)
              return a.grad:sum():double() + b.grad:sum():double() + tl.outer(a, b):detach():sum():double()
            end },
  -- nn ops: forward plus every gradient, folded into one float64 tensor
  conv2d = { floating_only = true,
             inputs = function(d) return { normal(d, 2, 3, 6, 6), normal(d, 4, 3, 3, 3), normal(d, 4), normal(d, 2, 4, 3, 3) } end,
             run = function(x, w, b, g)
               x, w, b = x:detach():requires_grad_(), w:detach():requires_grad_(), b:detach():requires_grad_()
               local y = tl.conv2d(x, w, b, { stride = 2, padding = 1 })
               y:backward(g)
               return y:detach():sum():double() + x.grad:double():sum() + w.grad:double():sum()
                 + b.grad:double():sum() + (x.grad:double() * x:detach():double()):sum()
             end },
  max_pool2d = { floating_only = true,
                 inputs = function(d) return { normal(d, 2, 3, 6, 6), normal(d, 2, 3, 3, 3) } end,
                 run = function(x, g)
                   x = x:detach():requires_grad_()
                   local y = tl.max_pool2d(x, 2, { stride = 2 })
                   y:backward(g)
                   return y:detach():double():sum() + (x.grad:double() * tl.arange(x:numel()):view(x.shape):to(x.device):double()):sum()
                 end },
  embedding = { floating_only = true,
                inputs = function(d) return { normal(d, 7, 4), normal(d, 2, 3, 4) } end,
                run = function(w, g)
                  w = w:detach():requires_grad_()
                  local idx = tl.tensor({ { 1, 7, 3 }, { 3, 3, 2 } }, { device = w.device })
                  local y = tl.embedding(idx, w)
                  y:backward(g)
                  return y:detach():double():sum() + (w.grad:double() * tl.arange(28):view(7, 4):to(w.device):double()):sum()
                end },
  cross_entropy = { floating_only = true,
                    inputs = function(d) return { normal(d, 5, 4) } end,
                    run = function(x)
                      x = x:detach():requires_grad_()
                      local target = tl.tensor({ 1, 4, 2, 2, 3 }, { device = x.device })
                      local loss = tl.cross_entropy(x, target, { label_smoothing = 0.1 })
                      loss:backward()
                      return loss:detach():double() + (x.grad:double() * tl.arange(20):view(5, 4):to(x.device):double()):sum()
                    end },
  layer_norm = { floating_only = true,
                 inputs = function(d) return { normal(d, 3, 6), normal(d, 6), normal(d, 6), normal(d, 3, 6) } end,
                 run = function(x, w, b, g)
                   x, w, b = x:detach():requires_grad_(), w:detach():requires_grad_(), b:detach():requires_grad_()
                   local y = tl.layer_norm(x, w, b, 1e-5)
                   y:backward(g)
                   local pos = tl.arange(18):view(3, 6):to(x.device):double()
                   return (y:detach():double() * pos):sum() + (x.grad:double() * pos):sum()
                     + w.grad:double():sum() + (b.grad:double() * tl.arange(6):to(x.device):double()):sum()
                 end },
  optim = { floating_only = true,
            inputs = function(d) return { normal(d, 3, 4), normal(d, 3, 4) } end,
            run = function(p, g)
              local result = tl.zeros(3, 3, 4, { dtype = "float64", device = p.device })
              local makers = {
                function(ps) return tl.optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }) end,
                function(ps) return tl.optim.Adam(ps, { lr = 0.01, weight_decay = 0.01 }) end,
                function(ps) return tl.optim.AdamW(ps, { lr = 0.01 }) end,
              }
              for k, make in ipairs(makers) do
                local param = p:clone():requires_grad_()
                local opt = make({ param })
                for _ = 1, 3 do
                  param.grad = g:clone()
                  opt:step()
                end
                result[k] = param:detach():double()
              end
              return result
            end },
}

-- pointwise ops: inputs from their range in helpers/pointwise_cases.lua
local function uniform(lo, hi, d, ...) return (tl.rand(...) * (hi - lo) + lo):to(d) end
for name, case in pairs(require("helpers.pointwise_cases")) do
  if case.ranges then
    local ra, rb = case.ranges[1], case.ranges[2]
    cases[name] = { floating_only = true, run = tl[name], inputs = function(d)
      return { uniform(ra[1], ra[2], d, 3, 1), uniform(rb[1], rb[2], d, 1, 5) }
    end }
  else
    cases[name] = unary(tl[name], function(d, ...) return uniform(case.lo, case.hi, d, ...) end)
  end
end

-- pointwise backward kernels (relu_backward, ...): through their forward op's backward
for _, op in ipairs(tl.ops()) do
  if op.family == "pointwise_backward" then
    local forward = op.name:gsub("_backward$", "")
    local case = require("helpers.pointwise_cases")[forward]
    cases[op.name] = backward_of(tl[forward], case and function(d, ...)
      return uniform(case.lo, case.hi, d, ...)
    end)
  end
end

-- which case covers a kernel's op
local case_of_op = {
  linear_forward = "linear", linear_backward_input = "linear", linear_backward_weight = "linear",
  linear_backward_bias = "linear", matmul_backward_input = "matmul_backward",
  matmul_backward_other = "matmul_backward", outer_forward = "outer",
  conv2d_forward = "conv2d", conv2d_backward_input = "conv2d", conv2d_backward_weight = "conv2d",
  conv2d_backward_bias = "conv2d", im2col = "conv2d", col2im = "conv2d",
  max_pool2d_backward = "max_pool2d", embedding_backward = "embedding",
  cross_entropy_backward = "cross_entropy", layer_norm_backward_input = "layer_norm",
  layer_norm_backward_weight = "layer_norm", sgd_step = "optim", adam_step = "optim",
}

local function run_case(case, dtype, device)
  tl.manual_seed(11)
  local inputs = case.inputs(dtype)
  local on_device, reference = {}, {}
  for i, x in ipairs(inputs) do
    on_device[i] = x:to(device)
    -- the float64 twin holds exactly the rounded values the dtype saw
    reference[i] = floating[x.dtype] and x:double() or x
  end
  local got = case.run(table.unpack(on_device))
  local expected = case.run(table.unpack(reference))
  return expected, got:to("cpu")
end

local function sweep(device)
  local seen = {}
  for _, k in ipairs(tl.kernels()) do
    local name = case_of_op[k.op] or k.op
    local case = cases[name]
    local key = name .. "/" .. k.dtype
    if k.device == device:match("^%a+") and case and not seen[key] and
       not (case.floating_only and not floating[k.dtype]) then
      seen[key] = true
      it(string.format("%s in %s matches float64", name, k.dtype), function()
        local expected, got = run_case(case, k.dtype, device)
        local tol = tolerance[k.dtype]
        assert.tensor_near(expected:double(), got:double(), tol[1], tol[2])
      end)
    end
  end
end

-- Random kernels: one counter-based stream. 16-bit results are the float32
-- numbers rounded (within one unit of the last place, rounding down near 1 so
-- that rand stays below 1); randint gives the same integers in every dtype;
-- float64 draws 53-bit uniforms of its own, checked for range and moments.
local function random_sweep(device)
  local function draw(fn, dtype)
    tl.manual_seed(5)
    return fn(dtype):to("cpu"):double()
  end
  local generators = {
    rand = function(d) return tl.rand(4000, { dtype = d, device = device }) end,
    randn = function(d) return tl.randn(4000, { dtype = d, device = device }) end,
    randint = function(d) return tl.randint(-3, 9, { 4000 }, { dtype = d, device = device }) end,
  }
  local ulp = { bfloat16 = 2 ^ -7, float16 = 2 ^ -10, float32 = 0 }
  for _, k in ipairs(tl.kernels()) do
    local gen = generators[k.op]
    if gen and k.device == device:match("^%a+") then
      it(string.format("%s in %s follows the generator's stream", k.op, k.dtype), function()
        local got = draw(gen, k.dtype)
        if k.op == "randint" then
          assert.tensor_equal(draw(gen, "int64"), got)
        elseif k.dtype == "float64" then
          if k.op == "rand" then
            assert.is_true(got:min():item() >= 0 and got:max():item() < 1)
            assert.is_true(math.abs(got:mean():item() - 0.5) < 5 * math.sqrt(1 / 12 / 4000))
          else
            assert.is_true(math.abs(got:mean():item()) < 5 / math.sqrt(4000))
          end
        else
          local reference = draw(gen, "float32")
          -- relative to the magnitude: one unit of the dtype's last place
          local err = ((got - reference):abs() / (reference:abs() + 1)):max():item()
          assert.is_true(err <= 2 * ulp[k.dtype], string.format("off by %g", err))
          if k.op == "rand" then assert.is_true(got:max():item() < 1) end
        end
      end)
    end
  end
end

describe("kernel sweep on the cpu", function()
  random_sweep("cpu")
  sweep("cpu")
end)

describe("kernel sweep on cuda #cuda", function()
  if (tl.cuda_device_count and tl.cuda_device_count() or 0) == 0 then
    pending("no CUDA device: the CUDA specs of this block did not run")
    return
  end
  sweep("cuda")
  random_sweep("cuda")
end)
