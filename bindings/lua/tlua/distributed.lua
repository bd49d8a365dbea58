-- tl.distributed: the ranks of a data-parallel job (tlua --nproc N) and their collectives.
--
--   local dist = tl.distributed
--   dist.rank(), dist.world_size(), dist.local_rank(), dist.is_main()
--   dist.all_reduce(t, "sum" | "avg" | "product" | "min" | "max")   -- in place, returns t
--   dist.broadcast(t, root)                                          -- in place, returns t
--   dist.reduce_scatter(out, t, op)     -- out = the reduction of t's chunk rank(), returns out
--   dist.all_gather(out, t)             -- out = every rank's t, in rank order, returns out
--   dist.barrier()
--
-- Ranks count from 0, as NCCL's and the launcher's TLUA_RANK do. A script started without the
-- launcher is a world of one: rank 0, every collective leaves its tensor as it is (CUDA tensors
-- still go through NCCL, on one rank). CUDA tensors go through NCCL on the rank's GPU (cuda:
-- LOCAL_RANK, which "cuda" names in a launched rank); CPU tensors go through the launcher's
-- store, reduced in rank order so every rank gets the same bits (slow: for CPU runs and tests).
-- The group is made at the first collective (or dist.init); every rank must call the
-- collectives in the same order with tensors of the same shape and dtype.
local core = require("tlua.core")
local options = require("tlua.options")
local launch_env = require("tlua.launch_env")

local dist = {}

-- the environment: os.getenv, or in an embedded sandbox granted the network (no os.getenv there)
-- the launcher's TLUA_ variables through core (a sandbox joins only jobs of tlua --nproc)
local function getenv(name)
  if os.getenv then return os.getenv(name) end
  if name:sub(1, 5) == "TLUA_" then return core._dist_env(name) end
  return nil
end

local function read_file(path)
  if not io then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

local layout -- read once: a process's environment does not change under it
--- layout() -> the job as its starter describes it (tlua --nproc, torchrun-style variables, Open
--- MPI, Slurm; tlua.launch_env): {source, rank, world_size, local_rank, local_world_size,
--- master_addr, master_port}
function dist.layout()
  layout = layout or launch_env.read(getenv)
  return layout
end

--- rank() -> this process's rank in [0, world_size()), 0 when no starter set one
function dist.rank() return dist.layout().rank end
--- world_size() -> the number of ranks of the job (1 when started alone)
function dist.world_size() return dist.layout().world_size end
--- local_rank() -> the rank among this host's ranks (its GPU's index)
function dist.local_rank() return dist.layout().local_rank end
--- is_main() -> true on rank 0 (the rank that logs and writes checkpoints)
function dist.is_main() return dist.rank() == 0 end
--- is_launched() -> true when a starter (tlua --nproc, torchrun, mpirun, srun) set the ranks
function dist.is_launched() return dist.layout().source ~= nil end
--- nccl_available() -> whether CUDA tensors can be reduced across ranks in this build
function dist.nccl_available() return core._dist_nccl_available() end

--- cuda_index() -> this rank's GPU: LOCAL_RANK, modulo the GPUs present (more local ranks than
--- GPUs share them round-robin); nil without a GPU
function dist.cuda_index()
  local gpus = core.cuda_device_count()
  if gpus > 0 then return dist.local_rank() % gpus end
end

--- device() -> "cuda:<cuda_index()>" when a GPU is usable, else "cpu": where this rank trains
function dist.device()
  local index = dist.cuda_index()
  return index and ("cuda:" .. index) or "cpu"
end

local group
local shared_gpus -- why CUDA collectives cannot run here, when ranks share GPUs

local INIT_OPTIONS = { timeout = "number" } -- (tlua.options)

--- init{timeout = 300 (seconds, every wait on another rank)}: joins the job's group (done by
--- the first collective when not called). Returns the group.
function dist.init(opts)
  opts = options.check(opts, "tl.distributed.init", INIT_OPTIONS, 2)
  if group then return group end
  local timeout = opts.timeout or tonumber(getenv("TLUA_DIST_TIMEOUT") or "") or 300
  if type(timeout) ~= "number" or timeout <= 0 then
    options.error("tl.distributed.init: timeout must be a number of seconds > 0, got " .. tostring(timeout), 2)
  end
  local job = dist.layout()
  local rank, world = job.rank, job.world_size
  local host, port, secret, serve = job.master_addr, job.master_port, nil, nil
  if world > 1 and not job.served then
    -- started by torchrun, mpirun or srun: rank 0 serves the store the ranks meet in, which
    -- needs the job's secret on every rank
    secret = launch_env.secret(getenv, read_file)
    if not secret then
      options.error(string.format("tl.distributed.init: a world of %d ranks started by %s needs the job's " ..
        "secret, the same on every rank: set TLUA_STORE_SECRET (16 to 256 bytes; mpirun -x TLUA_STORE_SECRET " ..
        "passes it on) or TLUA_STORE_SECRET_FILE (a file every rank reads)", world, job.source), 2)
    end
    -- rank 0 listens on the rendezvous address itself (its own), never on every interface
    if rank == 0 then serve = host end
  end
  local gpus = core.cuda_device_count()
  group = core._dist_new_group(rank, world, dist.cuda_index() or 0, host, port, timeout, secret, serve)
  local local_world = job.local_world_size
  if gpus > 0 and local_world > gpus then
    shared_gpus = string.format("%d ranks share this host's %d GPU%s, and NCCL takes one GPU per rank " ..
      "(start at most %d rank%s per host, or reduce CPU tensors)", local_world, gpus, gpus == 1 and "" or "s",
      gpus, gpus == 1 and "" or "s")
  end
  return group
end

--- is_initialized() -> whether this rank has joined its group
function dist.is_initialized() return group ~= nil end

-- what: the argument's name in messages, for functions of two tensors
local function check_tensor(t, op, what)
  if not core.is_tensor(t) then
    options.error(string.format("tl.distributed.%s: expected a tensor%s, got %s", op,
      what and (" as " .. what) or "", type(t)), 3)
  end
  dist.init()
  if shared_gpus and t.device ~= "cpu" then options.error(string.format("tl.distributed.%s: %s", op, shared_gpus), 3) end
end

--- all_reduce(t, op = "sum"): every rank's t becomes the reduction of all ranks' t
function dist.all_reduce(t, op)
  check_tensor(t, "all_reduce")
  return core._dist_all_reduce(dist.init(), t, op)
end

--- reduce_scatter(out, t, op = "sum") -> out: out becomes the reduction over the ranks of t's
--- chunk rank() (t holds world_size() chunks of out's size; out may be that chunk of t)
function dist.reduce_scatter(out, t, op)
  check_tensor(out, "reduce_scatter", "out")
  check_tensor(t, "reduce_scatter", "t")
  return core._dist_reduce_scatter(dist.init(), out, t, op)
end

--- all_gather(out, t) -> out: out (world_size() chunks of t's size) becomes every rank's t, in
--- rank order (t may be out's chunk rank())
function dist.all_gather(out, t)
  check_tensor(out, "all_gather", "out")
  check_tensor(t, "all_gather", "t")
  return core._dist_all_gather(dist.init(), out, t)
end

--- broadcast(t, root = 0): every rank's t becomes root's
function dist.broadcast(t, root)
  check_tensor(t, "broadcast")
  return core._dist_broadcast(dist.init(), t, root or 0)
end

--- barrier(): returns once every rank has called it
function dist.barrier() return core._dist_barrier(dist.init()) end

local Work = {}
Work.__index = Work
--- work:wait(): later work on the tensor's device waits for the collective (the host does not)
function Work:wait() core._dist_work_wait(self.handle) end
--- work:timing() -> queued_ms, comm_ms (waits on the host for the collective): from the moment
--- the compute stream reached the start call, and the collective alone
function Work:timing() return core._dist_work_timing(self.handle) end

--- all_reduce_start(t, op = "sum") -> work: an all-reduce that overlaps the compute (on a GPU
--- it runs on a communication stream once the work queued so far on t's device is done; on the
--- CPU it is done when the call returns). work:wait() before reading t.
function dist.all_reduce_start(t, op)
  check_tensor(t, "all_reduce_start")
  return setmetatable({ handle = core._dist_all_reduce_start(dist.init(), t, op), tensor = t }, Work)
end

--- reduce_scatter_start(out, t, op = "sum") -> work, all_gather_start(out, t) -> work: the
--- overlapped forms (as all_reduce_start); work:wait() before reading out
function dist.reduce_scatter_start(out, t, op)
  check_tensor(out, "reduce_scatter_start", "out")
  check_tensor(t, "reduce_scatter_start", "t")
  local handle = core._dist_reduce_scatter_start(dist.init(), out, t, op)
  return setmetatable({ handle = handle, tensor = out, input = t }, Work)
end

function dist.all_gather_start(out, t)
  check_tensor(out, "all_gather_start", "out")
  check_tensor(t, "all_gather_start", "t")
  return setmetatable({ handle = core._dist_all_gather_start(dist.init(), out, t), tensor = out, input = t }, Work)
end

-- The store under the group (a world of more than one rank): small values for coordination.
--- store_set(key, value), store_get(key) -> value (waits for the key), store_add(key, n) -> total
function dist.store_set(key, value) return core._dist_store_set(dist.init(), key, value) end
function dist.store_get(key) return core._dist_store_get(dist.init(), key) end
function dist.store_add(key, n) return core._dist_store_add(dist.init(), key, n or 1) end

return dist
