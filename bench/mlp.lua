-- Issue-5 benchmark, tlua side: MLP (784-512-256-10) training with Adam, batch
-- 128: the time of one step on the CPU, and of one epoch (60000 samples, data
-- already on the device) on a GPU. Prints "key value" lines.
-- usage: tlua bench/mlp.lua [--device cpu|cuda] [--threads N] [--steps N]
local tl = require("tlua")
local nn, optim = tl.nn, tl.optim

local opts = { device = "cpu", threads = nil, steps = 200 }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-(%w+)$")
  if not name then error("bench/mlp.lua: unknown argument '" .. arg[i] .. "'", 0) end
  opts[name] = name == "device" and arg[i + 1] or math.tointeger(tonumber(arg[i + 1]))
  i = i + 2
end
if opts.threads then tl.set_num_threads(opts.threads) end
local cuda = opts.device ~= "cpu"
local function sync() if cuda then tl.cuda.synchronize() end end

tl.manual_seed(0)
local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
  nn.Linear(256, 10))
model:to(opts.device)
local optimizer = optim.Adam(model:parameters(), { lr = 1e-3 })
local loss_fn = nn.CrossEntropyLoss()

local n, batch = 60000, 128
local images = tl.rand(n, 784, { device = opts.device })
local labels = tl.randint(1, 11, { n }, { device = opts.device })

local function step(x, y)
  optimizer:zero_grad()
  local loss = loss_fn(model(x), y)
  loss:backward()
  optimizer:step()
  return loss
end

local x, y = images:narrow(1, 1, batch), labels:narrow(1, 1, batch)
for _ = 1, 20 do step(x, y) end
sync()
local samples = {}
for r = 1, 5 do
  local t0 = tl.clock()
  for _ = 1, opts.steps // 5 do step(x, y) end
  sync()
  samples[r] = (tl.clock() - t0) / (opts.steps // 5)
end
table.sort(samples)
print(string.format("step_ms %.4f", samples[3] * 1e3))

if cuda then
  local function epoch()
    for start = 1, n - batch + 1, batch do
      step(images:narrow(1, start, batch), labels:narrow(1, start, batch))
    end
    sync()
  end
  epoch()
  local times = {}
  for r = 1, 3 do
    local t0 = tl.clock()
    epoch()
    times[r] = tl.clock() - t0
  end
  table.sort(times)
  print(string.format("epoch_s %.4f", times[2]))
end
