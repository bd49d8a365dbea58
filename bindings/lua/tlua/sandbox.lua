-- tlua.sandbox: what an embedded configuration under the sandbox sees of tlua: an allow-list of tl's names and of its submodules' (embed.h's tl_lua_options.sandbox), built once when the state opens; the configuration cannot require this module.
local sandbox = {}

-- tl's names that touch nothing outside the state, besides the ops of the op table (tl.ops(),
-- pure compute on tensors, taken whole). Settings of the thread or process among them (grad mode,
-- threads, seed, sync checks, matmul precision) are the state's own in an embedded state.
sandbox.allowed = {
  -- tensors: made, read, converted
  "Tensor", "tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn",
  "randint", "randperm", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
  "randn_like", "is_tensor", "is_released", "release", "item", "totable", "numel", "dim", "size",
  "stride", "is_contiguous", "is_pinned", "pin_memory", "to", "t", "split", "chunk", "unbind",
  -- dtype names
  "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool", "float", "double", "half",
  "int", "long", "dtypes",
  -- functional ops written by hand and in-place forms (tl.ops() lists the table's rows)
  "linear", "gelu_linear", "linear_gelu_linear", "outer", "cat", "stack", "index_select", "masked_fill", "std_mean", "var_mean", "conv2d", "conv_transpose2d", "layer_norm_", "matmul_", "copy_", "fill_",
  "index_add", "index_copy", "index_fill", "take", "masked_select", "index_add_", "index_copy_", "index_fill_",
  "masked_fill_",
  "diag", "einsum", "tensordot", "meshgrid", "isclose", "allclose", "equal", "expand_as", "view_as",
  "block_layout_validate", "argsort", "kthvalue", "median", "unique", "multinomial",
  -- autograd and modes
  "backward", "detach", "requires_grad_", "zero_grad", "no_grad", "enable_grad", "is_grad_enabled",
  "set_grad_enabled", "custom_function", "autocast", "autocast_dtype",
  -- settings and introspection of this state
  "manual_seed", "get_rng_state", "set_rng_state", "set_num_threads", "get_num_threads", "set_sync_checks",
  "sync_checks",
  "set_matmul_precision", "get_matmul_precision", "cuda_device_count", "memory_stats",
  "reset_peak_memory_stats", "clock", "ops", "kernels", "kernel_variants", "trace",
  -- submodules (their own allow-lists below)
  "nn", "optim", "autograd", "data", "cuda", "checkpoint",
}

-- names a grant of the host adds: tl_lua_options' read_dirs / write_dirs / network
sandbox.granted = { load = "read", save = "write", distributed = "network" }

-- public names never given, and why (internal names, "_...", are never given either)
sandbox.denied = {
  progress = "writes to the terminal (io)",
  cli = "reads the command line and exits the process (os.exit)",
  plot = "runs gnuplot (io.popen) and writes files",
}

-- each submodule's names: true for all of the module, or a list
local submodules = {
  nn = true,
  optim = true,
  autograd = true,
  data = { "DataLoader", "TensorDataset", "Subset", "ConcatDataset", "random_split", "SequentialSampler",
    "RandomSampler", "SubsetRandomSampler", "BatchSampler", "default_collate", "splitmix", "FASHION_MNIST_CLASSES" },
  data_read = { "read_idx", "FashionMNIST", "FASHION_MNIST_ROOT" },
  -- tl.checkpoint: reading with the read grant, writing with the write grant (tl.load / tl.save
  -- under them check the paths again)
  checkpoint = {},
  checkpoint_read = { "read", "load" },
  checkpoint_write = { "save" },
  cuda = { "is_available", "device_count", "current_device", "synchronize", "host_waits", "memory_stats",
    "reset_peak_memory_stats", "empty_cache", "get_rng_state", "set_rng_state", "manual_seed",
    "set_cudnn_enabled", "cudnn_enabled", "get_device_name",
    "get_device_capability", "set_hopper_gemm_enabled", "hopper_gemm_enabled" },
}

--- op_names(tl) -> the set of tl's names that are rows of the op table (tl.ops()) and their
-- in-place forms (name .. "_"): pure compute on tensors, allowed whole
function sandbox.op_names(tl)
  local names = {}
  for _, op in ipairs(tl.ops()) do
    names[op.name] = true
    if rawget(tl, op.name .. "_") ~= nil then names[op.name .. "_"] = true end
  end
  return names
end

local function pick(module, names, into)
  into = into or {}
  for _, name in ipairs(names) do into[name] = module[name] end
  return into
end

--- view(tl, grants) -> the configuration's tl, and the modules its require may return by name
-- grants: {read = bool, write = bool, network = bool}
function sandbox.view(tl, grants)
  local view, modules = {}, {}
  for name in pairs(sandbox.op_names(tl)) do
    if type(rawget(tl, name)) == "function" then view[name] = rawget(tl, name) end
  end
  for _, name in ipairs(sandbox.allowed) do
    if submodules[name] == nil then view[name] = rawget(tl, name) end
  end
  for name, grant in pairs(sandbox.granted) do
    if grants[grant] and name ~= "distributed" then view[name] = rawget(tl, name) end
  end
  for name, names in pairs(submodules) do
    if not name:match("_read$") and not name:match("_write$") then
      local module = tl[name]
      local sub = names == true and module or pick(module, names)
      if grants.read and submodules[name .. "_read"] then pick(module, submodules[name .. "_read"], sub) end
      if grants.write and submodules[name .. "_write"] then pick(module, submodules[name .. "_write"], sub) end
      view[name] = sub
      modules["tlua." .. name] = sub
    end
  end
  if grants.network then
    view.distributed = tl.distributed
    modules["tlua.distributed"] = tl.distributed
  end
  modules.tlua = view
  return view, modules
end

return sandbox
