-- Kernel coverage of a spec run: which kernels, and which paths of kernels that have several, a spec ran *and compared* with a reference.
-- coverage.compared(run, check) runs run() under tl.trace, then check(results...), which
-- raises on a mismatch; only when check returns are the traced kernels marked compared.
-- When TLUA_COVERAGE_FILE is set, the end of the suite writes every registered kernel of a
-- present device that never ran ("dead") or ran but was never compared ("unchecked");
-- scripts/test fails on both. Kernels of an absent device (CUDA without a GPU) are "absent".
local tl = require("tlua")

local coverage = {}

-- marks of this process: "device op kernel dtype" -> true (device without its index), and
-- "device loop name dtype variant" for a path of a loop many kernels share
local marks = {}

local function key(device, op, kernel, dtype)
  return string.format("%s %s %s %s", device:match("^%a+"), op, kernel, dtype)
end

local function loop_key(device, loop, dtype, variant)
  return string.format("%s loop %s %s %s", device:match("^%a+"), loop, dtype, variant)
end

-- marks the kernels of a trace (a list of tl.trace events), and the variants they took (a
-- loop's as "loop.name"), as compared
function coverage.mark(events)
  for _, e in ipairs(events) do
    marks[key(e.device, e.op, e.kernel, e.dtype)] = true
    for _, v in ipairs(e.variants or {}) do
      local loop, name = v:match("^([%w_]+)%.([%w_]+)$")
      if loop then
        marks[loop_key(e.device, loop, e.dtype, name)] = true
      else
        marks[key(e.device, e.op, e.kernel, e.dtype) .. " " .. v] = true
      end
    end
  end
end

-- runs run(), checks its results with check(results...) (raising on a mismatch), and marks
-- the kernels run() ran as compared once check has returned; returns the trace and results
function coverage.compared(run, check)
  local packed = table.pack(tl.trace(run))
  check(table.unpack(packed, 2, packed.n))
  coverage.mark(packed[1])
  return table.unpack(packed, 1, packed.n)
end

-- k: an entry of tl.kernels(), or of tl.kernel_variants() (then its variant too)
function coverage.is_compared(k)
  if k.loop then return marks[loop_key(k.device, k.loop, k.dtype, k.variant)] == true end
  local mark = key(k.device, k.op, k.kernel, k.dtype)
  if k.variant then mark = mark .. " " .. k.variant end
  return marks[mark] == true
end

function coverage.report()
  local present = { cpu = true, cuda = (tl.cuda_device_count and tl.cuda_device_count() or 0) > 0 }
  local dead, unchecked, absent, total = {}, {}, {}, 0
  -- every kernel, then every path of a kernel that has several ("... variant mma_d64")
  local entries = {}
  for _, k in ipairs(tl.kernels()) do entries[#entries + 1] = k end
  for _, v in ipairs(tl.kernel_variants()) do entries[#entries + 1] = v end
  for _, k in ipairs(entries) do
    total = total + 1
    local line = k.loop and string.format("%s loop %s %s", k.device, k.loop, k.dtype)
      or string.format("%s %s %s %s", k.device, k.op, k.kernel, k.dtype)
    if k.variant then line = line .. " variant " .. k.variant .. " (" .. k.condition .. ")" end
    if not present[k.device] then
      if k.runs == 0 then absent[#absent + 1] = line end
    elseif k.runs == 0 then
      dead[#dead + 1] = line
    elseif not coverage.is_compared(k) then
      unchecked[#unchecked + 1] = line
    end
  end
  return { dead = dead, unchecked = unchecked, absent = absent, total = total }
end

function coverage.write(path)
  local r = coverage.report()
  local f = assert(io.open(path, "w"))
  f:write(string.format("kernels and variants %d dead %d unchecked %d absent %d\n", r.total, #r.dead,
    #r.unchecked, #r.absent))
  for _, line in ipairs(r.dead) do f:write("dead ", line, "\n") end
  for _, line in ipairs(r.unchecked) do f:write("unchecked ", line, "\n") end
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
