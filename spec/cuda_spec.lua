-- The CUDA runtime from Lua: moves between devices, device mixing errors,
-- out-of-memory recovery, the allocator's statistics, traces of CUDA kernels, device names.
-- Tagged #cuda; without a GPU each block says so in one pending line.
local tl = require("tlua")

local has_gpu = tl.cuda.device_count() > 0

describe("cuda runtime #cuda", function()
  if not has_gpu then
    pending("no CUDA device: the CUDA specs of this block did not run")
    return
  end

  it("moves tensors to the GPU and back unchanged, in every dtype", function()
    for _, dtype in ipairs(tl.dtypes) do
      local x = tl.randint(-5, 6, { 3, 4 }):to(dtype)
      local y = x:cuda()
      assert.are.equal("cuda:0", y.device)
      assert.are.equal(dtype, y.dtype)
      assert.tensor_equal(x, y:cpu())
    end
  end)

  it("computes a small graph on the GPU as on the CPU", function()
    tl.manual_seed(3)
    local x = tl.randn(8, 5, { requires_grad = true })
    local w = tl.randn(3, 5, { requires_grad = true })
    local xc = x:detach():cuda():requires_grad_()
    local wc = w:detach():cuda():requires_grad_()
    local loss = tl.linear(x, w):relu():softmax(-1):sum()
    local loss_c = tl.linear(xc, wc):relu():softmax(-1):sum()
    loss:backward()
    loss_c:backward()
    assert.tensor_near(loss, loss_c:cpu(), 1e-5, 1e-5)
    assert.tensor_near(x.grad, xc.grad:cpu(), 1e-4, 1e-5)
    assert.tensor_near(w.grad, wc.grad:cpu(), 1e-4, 1e-5)
  end)

  it("names both devices when an op mixes them", function()
    local ok, err = pcall(function() return tl.ones(2) + tl.ones(2):cuda() end)
    assert.is_false(ok)
    assert.matches("add", err)
    assert.matches("cpu", err)
    assert.matches("cuda:0", err)
  end)

  it("reports out of memory and keeps working", function()
    local ok, err = pcall(tl.empty, 1024, 1024, 1024, 1024, { device = "cuda" }) -- 4 TiB
    assert.is_false(ok)
    assert.matches("cannot allocate", err) -- refused before asking the driver
    ok, err = pcall(tl.empty, 1024, 1024, 1024, 200, { device = "cuda" }) -- 800 GiB: the driver says no
    assert.is_false(ok)
    assert.matches("out of memory", err)
    local y = tl.ones(1000, { device = "cuda" }) * 2
    assert.are.equal(2000, y:sum():item())
  end)

  it("frees dead tensors by a full collection when device memory runs out, then allocates", function()
    -- the collector stopped: only the allocator's reclaim hook can free the 8 GiB tensors that die
    -- each iteration; 40 of them are more than any GPU holds
    collectgarbage("collect")
    collectgarbage("stop")
    finally(function() collectgarbage("restart") end)
    local before = tl.cuda.memory_stats()
    local chunk = 8 * 2 ^ 30
    for _ = 1, 40 do
      local dead = tl.empty(chunk // 4, { device = "cuda" })
      assert.are.equal(chunk // 4, dead:numel())
    end
    local after = tl.cuda.memory_stats()
    assert.are.equal(before.oom_count, after.oom_count)
    assert.is_true(after.cuda_free_count > before.cuda_free_count) -- the cache went back to the driver
    collectgarbage("restart")
    collectgarbage("collect")
    assert.are.equal(before.allocated, tl.cuda.memory_stats().allocated)
  end)

  it("keeps allocator statistics", function()
    -- no collection may free other specs' tensors while the figures are read
    collectgarbage("collect")
    collectgarbage("collect")
    collectgarbage("stop")
    tl.cuda.synchronize()
    tl.cuda.empty_cache()
    tl.cuda.reset_peak_memory_stats()
    local before = tl.cuda.memory_stats()
    local big = tl.empty(64, 1024, 1024, { device = "cuda" }) -- 256 MiB
    local during = tl.cuda.memory_stats()
    assert.is_true(during.allocated - before.allocated >= 256 * 1024 * 1024)
    assert.is_true(during.peak >= during.allocated)
    assert.is_true(during.reserved >= during.allocated)
    tl.release(big)
    local after = tl.cuda.memory_stats()
    assert.are.equal(before.allocated, after.allocated)
    assert.is_true(after.reserved >= 256 * 1024 * 1024) -- cached for reuse
    tl.cuda.empty_cache()
    assert.is_true(tl.cuda.memory_stats().reserved < after.reserved)
    collectgarbage("restart")
  end)

  it("shows CUDA kernels in the trace", function()
    local a = tl.ones(4, 4, { device = "cuda" })
    local events = tl.trace(function() return tl.matmul(a, a) + 1 end)
    local devices = {}
    for _, e in ipairs(events) do devices[#devices + 1] = e.device .. ":" .. e.op end
    assert.matches("cuda:0:matmul", table.concat(devices, " "), 1, true)
    assert.matches("cuda:0:add", table.concat(devices, " "), 1, true)
  end)

  it("uses TF32 only when asked (precision 'high')", function()
    local a = tl.randn(256, 256, { device = "cuda" })
    local exact = tl.matmul(a:double(), a:double())
    local highest = tl.matmul(a, a):double()
    tl.set_matmul_precision("high")
    local high = tl.matmul(a, a):double()
    tl.set_matmul_precision("highest")
    local err_highest = (highest - exact):abs():max():item()
    local err_high = (high - exact):abs():max():item()
    assert.is_true(err_highest < 1e-3)
    assert.is_true(err_high > err_highest) -- TF32 rounds the inputs to 10 mantissa bits
  end)
end)

describe("tl.cuda.host_waits", function()
  it("counts the host's waits for a GPU: copies back, synchronize, sizes read back; not launches", function()
    if not has_gpu then
      assert.are.equal(0, tl.cuda.host_waits()) -- no GPU, no wait
      return
    end
    local x = tl.randn(1000, { device = "cuda" })
    tl.cuda.synchronize()
    local n = tl.cuda.host_waits()
    local y = (x * 2):exp():sum() -- launches only
    assert.are.equal(n, tl.cuda.host_waits())
    y:item() -- a copy back
    assert.are.equal(n + 1, tl.cuda.host_waits())
    tl.cuda.synchronize()
    assert.are.equal(n + 2, tl.cuda.host_waits())
    x:gt(0):nonzero() -- its count comes back to size the result
    assert.are.equal(n + 3, tl.cuda.host_waits())
  end)
end)

describe("tl.cuda.get_device_name", function()
  it("gives each device's name as nvidia-smi does, and refuses a device that does not exist", function()
    local n = tl.cuda.device_count()
    assert.error_matches(function() tl.cuda.get_device_name(n) end, { "get_device_name", "cuda:" .. n })
    assert.error_matches(function() tl.cuda.get_device_name("cpu") end, { "get_device_name", "expected a CUDA device" })
    if not has_gpu then
      assert.error_matches(function() tl.cuda.get_device_name() end, { "get_device_name", "not available" })
      return
    end
    -- the reference: nvidia-smi's names (its order is the PCI bus's and it ignores
    -- CUDA_VISIBLE_DEVICES, so each device's name is one of them)
    local p = io.popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null")
    local names = {}
    for line in p:lines() do names[line:gsub("%s+$", "")] = true end
    p:close()
    if next(names) == nil then
      pending("nvidia-smi gave no names: get_device_name not compared")
      return
    end
    for i = 0, n - 1 do
      local name = tl.cuda.get_device_name(i)
      assert.is_true(names[name] == true, "cuda:" .. i .. " is '" .. name .. "'")
    end
    assert.are.equal(tl.cuda.get_device_name(tl.cuda.current_device()), tl.cuda.get_device_name())
    assert.are.equal(tl.cuda.get_device_name(0), tl.cuda.get_device_name("cuda:0"))
  end)
end)

describe("cuda without a GPU", function()
  if has_gpu then return end
  it("raises a clear error for a CUDA tensor", function()
    local ok, err = pcall(tl.ones, 2, { device = "cuda" })
    assert.is_false(ok)
    assert.matches("cuda:0 is not available", err)
    assert.is_false(tl.cuda.is_available())
  end)
end)
