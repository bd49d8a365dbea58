-- tlua: require("tlua") gives the module table of tlua.core plus dtype names and lazily loaded submodules.
local options = require("tlua.options")
local tl = require("tlua.core")

-- dtype names: tl.float32 == "float32", ...; the aliases name their canonical
-- dtype, so `t.dtype == tl.long` holds for an int64 tensor
tl.float32, tl.float64, tl.bfloat16, tl.float16 = "float32", "float64", "bfloat16", "float16"
tl.int32, tl.int64, tl.bool = "int32", "int64", "bool"
tl.float, tl.double, tl.half, tl.int, tl.long = "float32", "float64", "float16", "int32", "int64"
tl.dtypes = { "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool" }

-- submodules load on first use: tl.autograd, tl.nn, tl.optim, tl.data, tl.cuda, tl.distributed,
-- tl.checkpoint, tl.plot
local submodules = { autograd = true, nn = true, optim = true, data = true, cuda = true, distributed = true,
  checkpoint = true, plot = true }

-- a rank of a data-parallel job (tlua --nproc N) trains on its own GPU: "cuda" names
-- cuda:LOCAL_RANK there (tl.distributed.cuda_index; os is absent in the embedding sandbox)
if os and os.getenv and os.getenv("TLUA_LOCAL_RANK") then
  local index = require("tlua.distributed").cuda_index()
  if index then tl._cuda_set_device(index) end
end

-- t:cuda(n?) and t:cpu(): moves to a device (the tensor itself when already there)
function tl.Tensor.cuda(t, index, ...)
  if select("#", ...) > 0 then
    options.error(string.format("cuda: expected t:cuda(index?), got %d arguments after the tensor",
      select("#", ...) + 1), 2)
  end
  if index == nil then return t:to("cuda") end
  local i = math.type(index) and math.tointeger(index)
  if not i or i < 0 then
    options.error("cuda: expected a device index (an integer >= 0), got " .. (type(index) == "number" and
      tostring(index) or tl.is_tensor(index) and "a tensor" or type(index)), 2)
  end
  return t:to("cuda:" .. i)
end
function tl.Tensor.cpu(t) return t:to("cpu") end

-- t:element_size() -> bytes per element; t:zero_() -> t filled with zeros
local element_sizes = { float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2, int32 = 4, int64 = 8, bool = 1 }
function tl.Tensor.element_size(t) return element_sizes[t.dtype] end
function tl.Tensor.zero_(t) return t:fill_(0) end

-- t:register_hook(fn) and t:retain_grad() (tlua/autograd/hooks.lua)
require("tlua.autograd.hooks")

-- tl.autocast(dtype, fn?) and tl.autocast_dtype(): tlua/autocast.lua
do
  local autocast = require("tlua.autocast")
  tl.autocast, tl.autocast_dtype = autocast.autocast, autocast.autocast_dtype
end

-- written in Lua of the engine's ops: tl.einsum, tl.tensordot (tlua/einsum.lua), tl.meshgrid and
-- tl.isclose, allclose, equal, expand_as, view_as, also as methods (tlua/shapes.lua)
do
  local shapes = require("tlua.shapes")
  -- einsum's parser and planner load on first use, not at every start-up
  -- (the first call puts the loaded function in its place)
  function tl.einsum(...)
    tl.einsum = require("tlua.einsum").einsum
    return tl.einsum(...)
  end
  function tl.tensordot(...)
    tl.tensordot = require("tlua.einsum").tensordot
    return tl.tensordot(...)
  end
  tl.meshgrid = shapes.meshgrid
  for _, name in ipairs({ "isclose", "allclose", "equal", "expand_as", "view_as" }) do
    tl[name], tl.Tensor[name] = shapes[name], shapes[name]
  end
end

-- tl.memory_stats(device?) and tl.reset_peak_memory_stats(device?): "cpu" (the
-- default) counts the storages of live tensors ({allocated, peak, active_blocks,
-- alloc_count, free_count}, bytes as requested); "cuda[:N]" is tl.cuda.memory_stats.
local function is_cpu(device, op)
  if device == nil or device == "cpu" then return true end
  if type(device) == "string" and device:match("^cuda") then return false end
  if math.type(device) == "integer" then return false end
  options.error(string.format("%s: expected a device (\"cpu\", \"cuda\" or \"cuda:N\"), got %s", op,
    type(device) == "string" and ("'" .. device .. "'") or type(device)), 3)
end
function tl.memory_stats(device)
  if is_cpu(device, "memory_stats") then return tl._cpu_memory_stats() end
  return require("tlua.cuda").memory_stats(device)
end
function tl.reset_peak_memory_stats(device)
  if is_cpu(device, "reset_peak_memory_stats") then return tl._cpu_reset_peak_memory_stats() end
  return require("tlua.cuda").reset_peak_memory_stats(device)
end

local submodule_names = {}
for name in pairs(submodules) do submodule_names[#submodule_names + 1] = name end
table.sort(submodule_names)

return setmetatable(tl, {
  -- the REPL's Tab lists these before they are loaded
  __completions = submodule_names,
  __index = function(t, key)
    if submodules[key] then
      local module = require("tlua." .. key)
      rawset(t, key, module)
      return module
    end
    -- a name tl does not have is an error naming the closest ones (rawget(tl, name) probes)
    require("tlua.names").missing("tl", t, key, submodule_names)
  end,
})
