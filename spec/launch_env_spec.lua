-- tl.distributed's ranks from whatever started the job (tlua.launch_env): tlua --nproc,
-- torchrun-style variables, Open MPI's mpirun and Slurm's srun; CPU ranks started each way
-- all-reduce, and missing or inconsistent variables are clear errors naming them.
local launch_env = require("tlua.launch_env")
local files = require("helpers.files")
local sh_quote, BIN = files.sh_quote, files.BIN

-- a getenv over a table of variables
local function env(vars) return function(name) return vars[name] end end

describe("launch_env.read", function()
  it("is a world of one when nothing started the job", function()
    local job = launch_env.read(env({}))
    assert.same({ rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, served = false }, job)
  end)

  it("reads each starter's variables", function()
    local job = launch_env.read(env({ TLUA_RANK = "1", TLUA_WORLD_SIZE = "2", TLUA_LOCAL_RANK = "1",
      TLUA_LOCAL_WORLD_SIZE = "2", TLUA_MASTER_ADDR = "127.0.0.1", TLUA_MASTER_PORT = "4000" }))
    assert.same({ source = "tlua --nproc", served = true, rank = 1, world_size = 2, local_rank = 1,
      local_world_size = 2, master_addr = "127.0.0.1", master_port = 4000 }, job)
    job = launch_env.read(env({ RANK = "3", WORLD_SIZE = "8", LOCAL_RANK = "3", LOCAL_WORLD_SIZE = "4",
      MASTER_ADDR = "10.0.0.1", MASTER_PORT = "29400" }))
    assert.same({ source = "torchrun-style variables", served = false, rank = 3, world_size = 8, local_rank = 3,
      local_world_size = 4, master_addr = "10.0.0.1", master_port = 29400 }, job)
    -- Open MPI on one host: the rendezvous defaults to this host and torch's port
    job = launch_env.read(env({ OMPI_COMM_WORLD_RANK = "1", OMPI_COMM_WORLD_SIZE = "2",
      OMPI_COMM_WORLD_LOCAL_RANK = "1", OMPI_COMM_WORLD_LOCAL_SIZE = "2" }))
    assert.same({ source = "Open MPI", served = false, rank = 1, world_size = 2, local_rank = 1,
      local_world_size = 2, master_addr = "127.0.0.1", master_port = 29500 }, job)
    -- Slurm: the first host of the job's node list is rank 0's
    job = launch_env.read(env({ SLURM_PROCID = "5", SLURM_NTASKS = "8", SLURM_LOCALID = "1",
      SLURM_NTASKS_PER_NODE = "4(x2)", SLURM_JOB_NODELIST = "gpu[07-08]" }))
    assert.same({ source = "Slurm", served = false, rank = 5, world_size = 8, local_rank = 1,
      local_world_size = 4, master_addr = "gpu07", master_port = 29500 }, job)
  end)

  it("takes tlua --nproc first, then torchrun's, Open MPI's and Slurm's variables", function()
    local all = { TLUA_RANK = "0", TLUA_WORLD_SIZE = "1", RANK = "1", WORLD_SIZE = "2", MASTER_ADDR = "a",
      OMPI_COMM_WORLD_RANK = "1", OMPI_COMM_WORLD_SIZE = "2", SLURM_PROCID = "1", SLURM_NTASKS = "2" }
    assert.equal("tlua --nproc", launch_env.read(env(all)).source)
    all.TLUA_RANK, all.TLUA_WORLD_SIZE = nil, nil
    assert.equal("torchrun-style variables", launch_env.read(env(all)).source)
    all.RANK, all.WORLD_SIZE = nil, nil
    assert.equal("Open MPI", launch_env.read(env(all)).source)
    all.OMPI_COMM_WORLD_RANK, all.OMPI_COMM_WORLD_SIZE = nil, nil
    assert.equal("Slurm", launch_env.read(env(all)).source)
  end)

  it("finds the first host of a Slurm node list", function()
    assert.equal("node01", launch_env.first_host("node[01-04,07],gpu5"))
    assert.equal("a", launch_env.first_host("a,b"))
    assert.equal("localhost", launch_env.first_host("localhost"))
    assert.equal("n3", launch_env.first_host("n[3,5]"))
    assert.is_nil(launch_env.first_host(""))
  end)

  it("refuses missing and inconsistent variables, naming them", function()
    assert.error_matches(function() launch_env.read(env({ RANK = "0" })) end,
      { "RANK is set but WORLD_SIZE is not (torchrun-style variables: set both, or neither)" })
    assert.error_matches(function() launch_env.read(env({ SLURM_NTASKS = "2" })) end,
      { "SLURM_NTASKS is set but SLURM_PROCID is not" })
    assert.error_matches(function() launch_env.read(env({ RANK = "2", WORLD_SIZE = "2", MASTER_ADDR = "h" })) end,
      { "RANK 2 is not in [0, WORLD_SIZE 2)" })
    assert.error_matches(function() launch_env.read(env({ OMPI_COMM_WORLD_RANK = "x", OMPI_COMM_WORLD_SIZE = "2" })) end,
      { "OMPI_COMM_WORLD_RANK (Open MPI) must be an integer, got 'x'" })
    -- several hosts and no rendezvous host
    assert.error_matches(function()
      launch_env.read(env({ OMPI_COMM_WORLD_RANK = "0", OMPI_COMM_WORLD_SIZE = "4", OMPI_COMM_WORLD_LOCAL_SIZE = "2" }))
    end, { "a world of 4 ranks started by Open MPI on several hosts needs the rendezvous host: set MASTER_ADDR" })
    assert.error_matches(function() launch_env.read(env({ TLUA_RANK = "0", TLUA_WORLD_SIZE = "2", TLUA_MASTER_ADDR = "h" })) end,
      { "TLUA_MASTER_PORT is not set" })
  end)

  it("reads the job's secret from TLUA_STORE_SECRET or the file TLUA_STORE_SECRET_FILE names", function()
    assert.equal("s3cret", launch_env.secret(env({ TLUA_STORE_SECRET = "s3cret" })))
    local read = function(path) return path == "/k" and "from-file\n" or nil end
    assert.equal("from-file", launch_env.secret(env({ TLUA_STORE_SECRET_FILE = "/k" }), read))
    assert.is_nil(launch_env.secret(env({})))
    assert.error_matches(function() launch_env.secret(env({ TLUA_STORE_SECRET_FILE = "/missing" }), read) end,
      { "cannot read TLUA_STORE_SECRET_FILE '/missing'" })
  end)
end)

describe("CPU ranks started without tlua --nproc", function()
  local tmp
  before_each(function() tmp = files.make_temp_dir() end)
  after_each(function() files.remove_dir(tmp) end)

  local SECRET = "0123456789abcdef0123456789abcdef"
  local SCRIPT = [[
    local dist = tl.distributed
    local t = tl.tensor({ dist.rank() + 1.0, 10.0 }, { dtype = "float64" })
    dist.all_reduce(t, "sum")
    dist.barrier()
    print(string.format("%s|%d|%d|%d|%g|%g", dist.layout().source, dist.rank(), dist.world_size(),
      dist.local_rank(), t[1], t[2]))
  ]]

  -- a port for this run's store (rank 0 listens on it)
  local function port() return 20000 + (os.time() * 7 + math.random(0, 9999)) % 20000 end

  -- runs the commands at once (each "VARS tlua script"), their outputs, and whether all succeeded
  local function run_ranks(prefixes)
    local f = assert(io.open(tmp .. "/ranks.lua", "w"))
    f:write(SCRIPT)
    f:close()
    local parts = {}
    for i, prefix in ipairs(prefixes) do
      parts[#parts + 1] = string.format("(%s timeout 60 %s %s > %s 2>&1; echo $? > %s) &", prefix, sh_quote(BIN),
        sh_quote(tmp .. "/ranks.lua"), sh_quote(tmp .. "/out" .. i), sh_quote(tmp .. "/rc" .. i))
    end
    os.execute(table.concat(parts, " ") .. " wait")
    local outs, ok = {}, true
    for i = 1, #prefixes do
      outs[i] = files.read_file(tmp .. "/out" .. i) or ""
      ok = ok and (files.read_file(tmp .. "/rc" .. i) or "") == "0\n"
    end
    return ok, outs
  end

  local function lines_of(text)
    local set = {}
    for line in text:gmatch("[^\n]+") do set[line] = true end
    return set
  end

  it("torchrun-style variables: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT", function()
    local p = port()
    local common = string.format("WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d TLUA_STORE_SECRET=%s", p, SECRET)
    local ok, outs = run_ranks({ "RANK=0 LOCAL_RANK=0 " .. common, "RANK=1 LOCAL_RANK=1 " .. common })
    assert.is_true(ok, table.concat(outs, "\n"))
    assert.truthy(lines_of(outs[1])["torchrun-style variables|0|2|0|3|20"], outs[1])
    assert.truthy(lines_of(outs[2])["torchrun-style variables|1|2|1|3|20"], outs[2])
  end)

  it("Slurm's variables: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the node list's first host", function()
    local p = port()
    local common = string.format("SLURM_NTASKS=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=%d TLUA_STORE_SECRET=%s", p, SECRET)
    local ok, outs = run_ranks({ "SLURM_PROCID=0 SLURM_LOCALID=0 " .. common, "SLURM_PROCID=1 SLURM_LOCALID=1 " .. common })
    assert.is_true(ok, table.concat(outs, "\n"))
    assert.truthy(lines_of(outs[1])["Slurm|0|2|0|3|20"], outs[1])
    assert.truthy(lines_of(outs[2])["Slurm|1|2|1|3|20"], outs[2])
  end)

  it("Open MPI's variables, set by Debian's real mpirun", function()
    if not os.execute("command -v mpirun > /dev/null 2>&1") then
      pending("no mpirun (openmpi-bin, installed by scripts/setup): the Open MPI launch did not run")
      return
    end
    local f = assert(io.open(tmp .. "/ranks.lua", "w"))
    f:write(SCRIPT)
    f:close()
    local cmd = string.format("cd %s && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " ..
      "OMPI_MCA_plm_rsh_agent= TLUA_STORE_SECRET=%s MASTER_PORT=%d timeout 120 mpirun --oversubscribe -np 2 " ..
      "-x TLUA_STORE_SECRET -x MASTER_PORT %s ranks.lua > out 2>&1", sh_quote(tmp), SECRET, port(), sh_quote(BIN))
    local ok = os.execute(cmd)
    local out = files.read_file(tmp .. "/out") or ""
    assert.is_true(ok == true, out)
    local got = lines_of(out)
    assert.truthy(got["Open MPI|0|2|0|3|20"], out)
    assert.truthy(got["Open MPI|1|2|1|3|20"], out)
  end)

  it("a job without the secret is a clear error naming what to set", function()
    local ok, outs = run_ranks({ string.format("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", port()) })
    assert.is_false(ok)
    assert.truthy(outs[1]:find("a world of 2 ranks started by torchrun-style variables needs the job's secret", 1, true), outs[1])
    assert.truthy(outs[1]:find("TLUA_STORE_SECRET", 1, true), outs[1])
  end)
end)
