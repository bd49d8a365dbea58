-- tl.cuda: the CUDA runtime (devices, synchronisation, the caching allocator's statistics, CUDA graphs).
local core = require("tlua.core")
local cuda_graph = require("tlua.cuda_graph")

local cuda = {}

--- true when this build has CUDA and a GPU is usable
function cuda.is_available() return core._cuda_is_available() end
--- number of CUDA devices (0 without CUDA support or without a GPU)
function cuda.device_count() return core.cuda_device_count() end
--- set_device(i): the device "cuda" names from now on (a rank of a data-parallel job: its GPU)
function cuda.set_device(device) return core._cuda_set_device(device) end
--- the index of the device "cuda" names
function cuda.current_device() return core._cuda_current_device() end
--- get_device_name(device?): the product name of a device (index or "cuda:N"; default: the
-- current device), e.g. "NVIDIA H100 80GB HBM3"; an error without such a device
function cuda.get_device_name(device) return core._cuda_get_device_name(device) end
--- get_device_capability(device?): the compute capability as two integers, major and minor (9, 0
-- on a Hopper GPU; default: the current device), as torch.cuda.get_device_capability
function cuda.get_device_capability(device) return core._cuda_get_device_capability(device) end
--- waits for the work queued on a device (index or "cuda:N"; default: the current device)
function cuda.synchronize(device) return core._cuda_synchronize(device) end
--- host_waits(): how many times the host has waited for a GPU on tlua's behalf since the start (a
-- synchronize, a copy to the host, a size read back); compare it around a step that should not
-- wait. 0 without CUDA.
function cuda.host_waits() return core._cuda_host_waits() end
--- {allocated, reserved, peak, peak_reserved, ...} in bytes for a device
function cuda.memory_stats(device) return core._cuda_memory_stats(device) end
function cuda.reset_peak_memory_stats(device) return core._cuda_reset_peak_memory_stats(device) end
--- returns cached blocks to the driver (every device when none is given)
function cuda.empty_cache(device) return core._cuda_empty_cache(device) end

--- set_cudnn_enabled(flag) / cudnn_enabled(): whether conv2d and conv_transpose2d run on cuDNN on a
-- CUDA device (the default) or by im2col and cuBLAS as on the CPU, and scaled_dot_product_attention
-- on cuDNN's fused attention (bfloat16/float16, no dropout, head dims a multiple of 8 up to 128) or
-- on tlua's own kernels (torch.backends.cudnn.enabled)
function cuda.set_cudnn_enabled(flag) return core._set_cudnn_enabled(flag) end
function cuda.cudnn_enabled() return core._cudnn_enabled() end

--- set_hopper_gemm_enabled(flag) / hopper_gemm_enabled(): whether grouped_mm and its gradients
-- (bfloat16/float16) run on tlua's own Hopper GEMM core on a Hopper GPU (the default: tiles found
-- on the device, so offsets on the GPU cost no host wait) or on cuBLAS with the offsets read on
-- the host
function cuda.set_hopper_gemm_enabled(flag) return core._set_hopper_gemm_enabled(flag) end
function cuda.hopper_gemm_enabled() return core._hopper_gemm_enabled() end

--- get_rng_state() / set_rng_state(state): the random generator's state. tlua has one generator
-- (a seed and a counter of Philox blocks) that CPU and CUDA kernels draw from alike, so these are
-- tl.get_rng_state and tl.set_rng_state; a checkpoint needs only one of them
cuda.get_rng_state = core.get_rng_state
cuda.set_rng_state = core.set_rng_state
--- manual_seed(seed): tl.manual_seed (the one generator of every device)
cuda.manual_seed = core.manual_seed

--- graph(fn, opts) -> g, is_capturing(device?), on_replay(fn): a step captured into a CUDA graph and replayed
-- (tlua/cuda_graph.lua)
cuda.graph = cuda_graph.graph
cuda.is_capturing = cuda_graph.is_capturing
cuda.on_replay = cuda_graph.on_replay

return cuda
