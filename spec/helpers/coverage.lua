-- Kernel coverage of a spec run: when TLUA_COVERAGE_FILE is set, writes at the
-- end of the suite every registered kernel that no spec executed. Kernels of
-- a device that is present are "dead" (scripts/test fails on them); those of
-- an absent device (CUDA without a GPU) are listed as "absent".
local tl = require("tlua")

local coverage = {}

function coverage.report()
  local present = { cpu = true, cuda = (tl.cuda_device_count and tl.cuda_device_count() or 0) > 0 }
  local dead, absent, total = {}, {}, 0
  for _, k in ipairs(tl.kernels()) do
    total = total + 1
    if k.runs == 0 then
      local line = string.format("%s %s %s %s", k.device, k.op, k.kernel, k.dtype)
      if present[k.device] then dead[#dead + 1] = line else absent[#absent + 1] = line end
    end
  end
  return { dead = dead, absent = absent, total = total }
end

function coverage.write(path)
  local r = coverage.report()
  local f = assert(io.open(path, "w"))
  f:write(string.format("kernels %d dead %d absent %d\n", r.total, #r.dead, #r.absent))
  for _, line in ipairs(r.dead) do f:write("dead ", line, "\n") end
  for _, line in ipairs(r.absent) do f:write("absent ", line, "\n") end
  f:close()
end

local path = os.getenv("TLUA_COVERAGE_FILE")
if path and path ~= "" then
  require("busted").subscribe({ "suite", "end" }, function()
    coverage.write(path)
    return nil, true
  end)
end

return coverage
