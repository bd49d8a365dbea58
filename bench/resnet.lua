-- Issue-29 benchmark, tlua side: a training step of the small ResNet of examples/resnet (BatchNorm, residual blocks, stride-2 convs; SGD with Nesterov momentum) on a batch of 28x28 images, bf16 autocast on CUDA; and a depthwise 3x3 Conv2d forward+backward. Prints "key value" lines (medians, ms).
-- usage: tlua bench/resnet.lua [--device cpu|cuda] [--batch N] [--steps N] [--threads N (default: one per CPU)]
local tl = require("tlua")
local nn, optim = tl.nn, tl.optim
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")
package.path = "examples/resnet/?.lua;" .. package.path
local resnet = require("model")

local opts = common.options("bench/resnet.lua", { device = "cpu", batch = 128, steps = 30 }, { threads = true })
-- the thread count, set explicitly (default: tlua's own, one per CPU) and printed, as
-- bench/resnet_torch.py does with the same default
local threads = opts.threads or tl.get_num_threads()
tl.set_num_threads(threads)
print(string.format("threads %d", threads))
local cuda = opts.device ~= "cpu"
local function sync() if cuda then tl.cuda.synchronize() end end

tl.manual_seed(0)
local model = resnet.ResNet({ width = 32, blocks = 2 }):to(opts.device)
local optimizer = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 5e-4 })
local loss_fn = nn.CrossEntropyLoss()
local x = tl.randn(opts.batch, 1, 28, 28, { device = opts.device })
local y = tl.randint(1, 11, { opts.batch }, { device = opts.device })

local function step()
  optimizer:zero_grad()
  local loss
  if cuda then
    tl.autocast("bfloat16", function() loss = loss_fn(model(x), y) end)
  else
    loss = loss_fn(model(x), y)
  end
  loss:backward()
  optimizer:step()
end

local function median_ms(fn, steps)
  for _ = 1, 3 do fn() end
  sync()
  local times = {}
  for _ = 1, steps do
    local t0 = tl.clock()
    fn()
    sync()
    times[#times + 1] = (tl.clock() - t0) * 1e3
  end
  return common.median(times)
end

print(string.format("resnet_step_ms %.4f", median_ms(step, opts.steps)))

-- depthwise 3x3 convolution (groups = channels), forward and backward
local channels, size = cuda and 256 or 64, cuda and 56 or 28
local dw = nn.Conv2d(channels, channels, 3, { padding = 1, groups = channels, bias = false }):to(opts.device)
local dx = tl.randn(cuda and 64 or 16, channels, size, size, { device = opts.device }):requires_grad_()
local function depthwise()
  dw.weight.grad, dx.grad = nil, nil
  dw(dx):sum():backward()
end
print(string.format("depthwise_ms %.4f", median_ms(depthwise, opts.steps)))
