-- tlua.launch_env: a distributed job's layout (rank, world size, local rank, rendezvous) read from
-- the variables of whatever started it: tlua --nproc, torchrun, Open MPI's mpirun or Slurm's srun.
local options = require("tlua.options")

local launch_env = {}

-- The starters, in the order they are looked for. Each names its variables; `served`: the
-- starter serves the rendezvous store itself (tlua --nproc), else rank 0 serves it.
launch_env.SOURCES = {
  { name = "tlua --nproc", rank = "TLUA_RANK", world = "TLUA_WORLD_SIZE", local_rank = "TLUA_LOCAL_RANK",
    local_world = "TLUA_LOCAL_WORLD_SIZE", addr = "TLUA_MASTER_ADDR", port = "TLUA_MASTER_PORT", served = true },
  { name = "torchrun-style variables", rank = "RANK", world = "WORLD_SIZE", local_rank = "LOCAL_RANK",
    local_world = "LOCAL_WORLD_SIZE", addr = "MASTER_ADDR", port = "MASTER_PORT" },
  { name = "Open MPI", rank = "OMPI_COMM_WORLD_RANK", world = "OMPI_COMM_WORLD_SIZE",
    local_rank = "OMPI_COMM_WORLD_LOCAL_RANK", local_world = "OMPI_COMM_WORLD_LOCAL_SIZE", addr = "MASTER_ADDR",
    port = "MASTER_PORT" },
  { name = "Slurm", rank = "SLURM_PROCID", world = "SLURM_NTASKS", local_rank = "SLURM_LOCALID",
    local_world = "SLURM_NTASKS_PER_NODE", addr = "MASTER_ADDR", port = "MASTER_PORT",
    nodelist = "SLURM_JOB_NODELIST" },
}

-- torch's default rendezvous port, where a starter gives none
launch_env.DEFAULT_PORT = 29500

--- launch_env.first_host(nodelist) -> the first host of a Slurm node list ("node[01-04,07],gpu5"
-- -> "node01", "a,b" -> "a"), or nil for an empty one
function launch_env.first_host(nodelist)
  if type(nodelist) ~= "string" or nodelist == "" then return nil end
  local prefix, range = nodelist:match("^([^,%[]*)%[([^%]]*)%]")
  if prefix then return prefix .. (range:match("^([^,%-]+)") or "") end
  return nodelist:match("^([^,]+)")
end

local function integer(source, var, value, level)
  local n = math.tointeger(tonumber(value))
  if not n then
    options.error(string.format("tl.distributed: %s (%s) must be an integer, got '%s'", var, source.name, value), level + 1)
  end
  return n
end

--- launch_env.read(getenv) -> the layout: {source = name or nil, rank, world_size, local_rank,
-- local_world_size, master_addr, master_port, served}. A script started by none of them is a
-- world of one. Missing or inconsistent variables raise naming them.
function launch_env.read(getenv)
  local level = 3
  for _, s in ipairs(launch_env.SOURCES) do
    local rank, world = getenv(s.rank), getenv(s.world)
    if rank or world then
      if not (rank and world) then
        options.error(string.format("tl.distributed: %s is set but %s is not (%s: set both, or neither)",
          rank and s.rank or s.world, rank and s.world or s.rank, s.name), level)
      end
      local layout = { source = s.name, served = s.served or false }
      layout.rank = integer(s, s.rank, rank, level)
      layout.world_size = integer(s, s.world, world, level)
      if layout.world_size < 1 or layout.rank < 0 or layout.rank >= layout.world_size then
        options.error(string.format("tl.distributed: %s %d is not in [0, %s %d) (%s)", s.rank, layout.rank,
          s.world, layout.world_size, s.name), level)
      end
      local local_rank = getenv(s.local_rank)
      layout.local_rank = local_rank and integer(s, s.local_rank, local_rank, level) or 0
      -- Slurm's tasks per node may read "2(x3)": its first count
      local local_world = getenv(s.local_world)
      layout.local_world_size = local_world and tonumber(local_world:match("^(%d+)")) or layout.world_size
      local addr, port = getenv(s.addr), getenv(s.port)
      if not addr and s.nodelist then addr = launch_env.first_host(getenv(s.nodelist)) end
      if not addr and layout.local_world_size >= layout.world_size and not s.served then
        addr = "127.0.0.1" -- every rank on this host
      end
      layout.master_addr = addr
      layout.master_port = port and integer(s, s.port, port, level) or (not s.served and launch_env.DEFAULT_PORT or nil)
      if layout.world_size > 1 and not layout.master_addr then
        options.error(string.format("tl.distributed: a world of %d ranks started by %s on several hosts needs " ..
          "the rendezvous host: set %s (rank 0's address)%s", layout.world_size, s.name, s.addr,
          s.nodelist and (" or " .. s.nodelist) or ""), level)
      end
      if layout.world_size > 1 and s.served and not layout.master_port then
        options.error(string.format("tl.distributed: %s is not set (start the script with tlua --nproc N)", s.port), level)
      end
      return layout
    end
  end
  return { rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, served = false }
end

--- launch_env.secret(getenv, read_file) -> the job's store secret: TLUA_STORE_SECRET, or the
-- contents of the file TLUA_STORE_SECRET_FILE names (trailing newline dropped); nil when neither
function launch_env.secret(getenv, read_file)
  local secret = getenv("TLUA_STORE_SECRET")
  if secret and secret ~= "" then return secret end
  local path = getenv("TLUA_STORE_SECRET_FILE")
  if path and path ~= "" and read_file then
    local text = read_file(path)
    if not text then options.error("tl.distributed: cannot read TLUA_STORE_SECRET_FILE '" .. path .. "'", 3) end
    return (text:gsub("%s+$", ""))
  end
  return nil
end

return launch_env
