-- The launcher `tlua --nproc N` (TLUA_BIN, or build/tlua): each rank's environment and arguments,
-- a failing or killed rank stopping the others (and the exit status), signals passed on, two
-- launchers as two nodes of one job, the store's secret (made or given; intruders without it
-- refused) and address, another node's message printed escaped, bad options, and scripts/launch.
-- Every command runs under `timeout`, so a launcher that hangs fails its test instead of the suite.
local files = require("helpers.files")
local sh_quote, write_file, BIN, ROOT = files.sh_quote, files.write_file, files.BIN, files.ROOT

local LIMIT_S = 60 -- `timeout` for every command
local tmp

local function now_s()
  local p = io.popen("date +%s.%N")
  local t = tonumber(p:read("l"))
  p:close()
  return t
end

-- runs a shell command line in tmp; returns exit code, stdout, stderr, seconds
local function run(cmdline)
  local out, err = tmp .. "/stdout", tmp .. "/stderr"
  local full = "cd " .. sh_quote(tmp) .. " && " .. cmdline .. " < /dev/null > " .. sh_quote(out)
    .. " 2> " .. sh_quote(err)
  local start = now_s()
  local ok, how, code = os.execute(full)
  local seconds = now_s() - start
  if how == "signal" then code = 128 + code end
  if ok == true then code = 0 end
  return code, files.read_file(out) or "", files.read_file(err) or "", seconds
end

local function launch(args)
  return run("timeout " .. LIMIT_S .. " " .. sh_quote(BIN) .. " " .. args)
end

-- the lines of text, as a list
local function lines(text)
  local t = {}
  for l in text:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- a script printing one line per rank: every TLUA_ variable, then its arguments
local REPORT = [[
local names = { "TLUA_RANK", "TLUA_WORLD_SIZE", "TLUA_LOCAL_RANK", "TLUA_LOCAL_WORLD_SIZE",
  "TLUA_NODE_RANK", "TLUA_NNODES", "TLUA_MASTER_ADDR", "TLUA_MASTER_PORT", "TLUA_STORE_SECRET" }
local fields = {}
for _, n in ipairs(names) do fields[#fields + 1] = n .. "=" .. tostring(os.getenv(n)) end
fields[#fields + 1] = "args=" .. table.concat({ ... }, "|")
fields[#fields + 1] = "keep=" .. tostring(os.getenv("TLUA_SPEC_KEEP"))
fields[#fields + 1] = "cuda=" .. tostring(os.getenv("CUDA_VISIBLE_DEVICES"))
io.write(table.concat(fields, " "), "\n")
]]

-- the reports of stdout, by global rank
local function reports(out)
  local by_rank = {}
  for _, l in ipairs(lines(out)) do
    local r = {}
    for k, v in l:gmatch("(%S+)=(%S*)") do r[k] = v end
    r.line = l
    local rank = tonumber(r.TLUA_RANK)
    assert(rank, "a line without TLUA_RANK: " .. l)
    assert(not by_rank[rank], "rank " .. rank .. " reported twice")
    by_rank[rank] = r
  end
  return by_rank
end

-- a free port: a one-node launcher picks one (port 0) and gives it back when it ends
local function free_port()
  local code, out, err = launch("--nproc 1 -e " .. sh_quote("print(os.getenv('TLUA_MASTER_PORT'))"))
  assert(code == 0, err)
  return assert(tonumber(out:match("%d+")), out)
end

-- the secret the two-node specs give both launchers
local SECRET = "launch-spec-secret-0123456789abcdef"

-- two launchers as the two nodes of one job (nproc ranks each), run together with
-- TLUA_STORE_SECRET = secret (default SECRET; false: unset) and extra options; returns for each
-- node {code, out, err}, and the seconds both took
local function two_nodes(nproc, script, port, secret, extra)
  local results = {}
  local start = now_s()
  if secret == nil then secret = SECRET end
  local env = secret and ("env TLUA_STORE_SECRET=" .. sh_quote(secret)) or "env -u TLUA_STORE_SECRET"
  local common = "--nnodes 2 --master-addr 127.0.0.1 --master-port " .. port .. " --nproc " .. nproc
    .. " " .. (extra or "")
  local cmd = {}
  for node = 0, 1 do
    cmd[#cmd + 1] = env .. " timeout " .. LIMIT_S .. " " .. sh_quote(BIN) .. " " .. common
      .. " --node-rank " .. node .. " " .. script .. " > out" .. node .. " 2> err" .. node
      .. " < /dev/null; echo $? > code" .. node
  end
  run("{ ( " .. cmd[1] .. " ) & ( " .. cmd[2] .. " ); wait; }")
  local seconds = now_s() - start
  for node = 0, 1 do
    results[node] = {
      code = tonumber(files.read_file(tmp .. "/code" .. node)),
      out = files.read_file(tmp .. "/out" .. node) or "",
      err = files.read_file(tmp .. "/err" .. node) or "",
    }
  end
  return results, seconds
end

-- whether process pid is alive
local function alive(pid)
  return os.execute("kill -0 " .. pid .. " 2> /dev/null") == true
end

describe("tlua --nproc (the launcher)", function()
  before_each(function()
    tmp = files.make_temp_dir()
    write_file(tmp .. "/report.lua", REPORT)
  end)

  after_each(function()
    files.remove_dir(tmp)
  end)

  it("starts N ranks, each with its rank, the world size, the store's address, and the args", function()
    local code, out, err = run("TLUA_SPEC_KEEP=kept CUDA_VISIBLE_DEVICES= timeout " .. LIMIT_S .. " "
      .. sh_quote(BIN) .. " --nproc 3 report.lua a 'b c'")
    assert.equal(0, code, err)
    local r = reports(out)
    local port
    for rank = 0, 2 do
      local x = r[rank]
      assert.is_not_nil(x, "rank " .. rank .. " missing: " .. out)
      assert.equal("3", x.TLUA_WORLD_SIZE, x.line)
      assert.equal(tostring(rank), x.TLUA_LOCAL_RANK, x.line)
      assert.equal("3", x.TLUA_LOCAL_WORLD_SIZE, x.line)
      assert.equal("0", x.TLUA_NODE_RANK, x.line)
      assert.equal("1", x.TLUA_NNODES, x.line)
      assert.equal("127.0.0.1", x.TLUA_MASTER_ADDR, x.line)
      assert.truthy(tonumber(x.TLUA_MASTER_PORT) and tonumber(x.TLUA_MASTER_PORT) > 0, x.line)
      port = port or x.TLUA_MASTER_PORT
      assert.equal(port, x.TLUA_MASTER_PORT, "every rank gets the same port")
      assert.equal("a|b", x.args, x.line) -- "b c" is one argument: the line splits it at its space
      assert.truthy(x.line:find("args=a|b c keep=", 1, true), x.line)
      assert.equal("kept", x.keep, "the environment reaches the ranks")
      assert.equal("", x.cuda, "CUDA_VISIBLE_DEVICES is left as it was")
    end
    assert.equal(3, #lines(out))
  end)

  it("takes --nproc=N, and runs tlua's own options such as -e", function()
    local code, out, err = launch("--nproc=2 -e " .. sh_quote("print('rank ' .. os.getenv('TLUA_RANK'))"))
    assert.equal(0, code, err)
    local got = lines(out)
    table.sort(got)
    assert.same({ "rank 0", "rank 1" }, got)
  end)

  it("stops the other ranks when one fails, and exits with its status", function()
    write_file(tmp .. "/fail.lua", [[
      local rank = os.getenv("TLUA_RANK")
      if rank == "1" then
        os.execute("sleep 0.3")
        os.exit(3)
      elseif rank == "0" then
        os.execute("sh -c 'echo $$ > sleeper.pid; exec sleep 1000'")
      else
        while true do end
      end
    ]])
    local code, _, err, seconds = launch("--nproc 3 fail.lua")
    assert.equal(3, code, err)
    assert.truthy(err:find("tlua %-%-nproc: rank 1 %(pid %d+%) failed with exit status 3; stopping the other ranks"), err)
    assert.truthy(seconds < 20, "the launcher took " .. seconds .. " s")
    local pid = files.read_file(tmp .. "/sleeper.pid")
    assert.is_not_nil(pid, "rank 0 did not start its sleep")
    assert.is_false(alive(pid:match("%d+")), "the sleep of rank 0 is still running")
  end)

  it("reports a rank killed by a signal, and exits with 128 + the signal", function()
    local script = "if os.getenv('TLUA_RANK') == '1' then os.execute('kill -9 $PPID') end "
      .. "os.execute('sleep 1000')"
    local code, _, err, seconds = launch("--nproc 2 -e " .. sh_quote(script))
    assert.equal(137, code, err)
    assert.truthy(err:find("rank 1 %(pid %d+%) was killed by signal 9"), err)
    assert.truthy(seconds < 20, "the launcher took " .. seconds .. " s")
  end)

  it("kills a rank that ignores SIGTERM after the grace period", function()
    local script = "if os.getenv('TLUA_RANK') == '0' then os.execute('sleep 0.5') os.exit(5) end "
      .. "os.execute([[trap '' TERM; echo $$ > stubborn.pid; sleep 1000]])"
    local code, _, err, seconds = launch("--nproc 2 -e " .. sh_quote(script))
    assert.equal(5, code, err)
    assert.truthy(seconds > 4 and seconds < 20, "the launcher took " .. seconds .. " s")
    local pid = files.read_file(tmp .. "/stubborn.pid")
    assert.is_not_nil(pid, "rank 1 did not start its shell")
    assert.is_false(alive(pid:match("%d+")), "the shell ignoring SIGTERM is still running")
  end)

  it("passes SIGTERM on to the ranks and exits with 143", function()
    write_file(tmp .. "/wait.lua", [[
      local f = io.open("rank" .. os.getenv("TLUA_RANK") .. ".started", "w")
      f:close()
      while true do end
    ]])
    local code, out, err = run("( timeout " .. LIMIT_S .. " " .. sh_quote(BIN)
      .. " --nproc 2 wait.lua & p=$!; while [ ! -e rank0.started ] || [ ! -e rank1.started ]; do sleep 0.05; done; "
      .. "kill -TERM $p; wait $p; echo \"launcher $?\" )")
    assert.equal(0, code, err)
    assert.equal("launcher 143", out:match("launcher %d+"), out .. err)
    assert.truthy(err:find("got signal 15", 1, true), err)
  end)

  it("runs two launchers as two nodes of one job", function()
    local port = free_port()
    local node, seconds = two_nodes(2, "report.lua x", port)
    assert.equal(0, node[0].code, node[0].err)
    assert.equal(0, node[1].code, node[1].err)
    local r = reports(node[0].out .. node[1].out)
    for rank = 0, 3 do
      local x = r[rank]
      assert.is_not_nil(x, "rank " .. rank .. " missing")
      assert.equal("4", x.TLUA_WORLD_SIZE, x.line)
      assert.equal(tostring(rank % 2), x.TLUA_LOCAL_RANK, x.line)
      assert.equal(tostring(rank // 2), x.TLUA_NODE_RANK, x.line)
      assert.equal("2", x.TLUA_NNODES, x.line)
      assert.equal(tostring(port), x.TLUA_MASTER_PORT, x.line)
      assert.equal(SECRET, x.TLUA_STORE_SECRET, "every rank of every node gets the given secret")
      assert.equal("x", x.args, x.line)
    end
    assert.equal(2, #lines(node[0].out), "node 0 runs ranks 0 and 1")
    assert.truthy(seconds < 30, "the job took " .. seconds .. " s")
  end)

  -- a job of two nodes of nproc ranks each in which rank `rank` exits with `status` after 0.3 s
  -- while the others run `rest` (Lua): the failing rank's node exits with that status, the other
  -- node fails too, within 20 s; returns the two nodes' results (failing first)
  local function one_rank_fails(nproc, rank, status, rest)
    local port = free_port()
    local script = "if os.getenv('TLUA_RANK') == '" .. rank .. "' then os.execute('sleep 0.3') os.exit("
      .. status .. ") end " .. rest
    local node, seconds = two_nodes(nproc, "-e " .. sh_quote(script), port)
    local failing, other = node[rank // nproc], node[1 - rank // nproc]
    assert.equal(status, failing.code, failing.err)
    assert.are_not.equal(0, other.code, other.err)
    assert.truthy(seconds < 20, "the job took " .. seconds .. " s")
    return failing, other
  end

  it("stops every node when a rank of node 1 fails", function()
    local failing, other = one_rank_fails(2, 2, 4, "os.execute('sleep 1000')")
    assert.truthy(failing.err:find("rank 2 %(pid %d+%) failed with exit status 4"), failing.err)
    assert.truthy(other.err:find("tlua %-%-nproc: stopping: node 1: rank 2 %(pid %d+%) failed"), other.err)
  end)

  it("stops node 1 when a rank of node 0 fails", function()
    local _, other = one_rank_fails(1, 0, 6, "while true do end")
    assert.truthy(other.err:find("stopping: node 0: rank 0", 1, true), other.err)
  end)

  it("gives the ranks the job's secret: a new one per job, else TLUA_STORE_SECRET or --secret-file", function()
    local function secret_of(cmd)
      local code, out, err = run(cmd)
      assert.equal(0, code, err)
      local r = reports(out)
      assert.equal(r[0].TLUA_STORE_SECRET, r[1].TLUA_STORE_SECRET, "every rank gets the same secret")
      return r[0].TLUA_STORE_SECRET
    end
    local launcher = "timeout " .. LIMIT_S .. " " .. sh_quote(BIN) .. " --nproc 2 "
    local a = secret_of("env -u TLUA_STORE_SECRET " .. launcher .. "report.lua")
    local b = secret_of("env -u TLUA_STORE_SECRET " .. launcher .. "report.lua")
    assert.truthy(a:match("^" .. string.rep("%x", 64) .. "$"), "64 hex digits: " .. a)
    assert.are_not.equal(a, b, "each job makes its own")
    assert.equal(SECRET, secret_of("TLUA_STORE_SECRET=" .. SECRET .. " " .. launcher .. "report.lua"))
    write_file(tmp .. "/secret", "from-a-file-0123456789\n")
    os.execute("chmod 600 " .. sh_quote(tmp .. "/secret"))
    assert.equal("from-a-file-0123456789",
      secret_of("TLUA_STORE_SECRET=" .. SECRET .. " " .. launcher .. "--secret-file secret report.lua"))
  end)

  it("refuses several nodes without a secret, and secrets of a wrong length", function()
    write_file(tmp .. "/empty", "\n")
    local cases = {
      { "env -u TLUA_STORE_SECRET", "--nnodes 2 --nproc 1 report.lua",
        "--nnodes 2: the nodes' store needs a secret that every node knows, and none was given; "
          .. "set TLUA_STORE_SECRET to the same value on every node" },
      { "TLUA_STORE_SECRET=short", "--nproc 1 report.lua",
        "TLUA_STORE_SECRET: the secret has 5 bytes, expected 16 to 256" },
      { "env -u TLUA_STORE_SECRET", "--nproc 1 --secret-file missing report.lua",
        "--secret-file: cannot read 'missing'" },
      { "env -u TLUA_STORE_SECRET", "--nproc 1 --secret-file empty report.lua",
        "--secret-file 'empty': the secret has 0 bytes" },
    }
    for _, case in ipairs(cases) do
      local code, out, err = run(case[1] .. " timeout " .. LIMIT_S .. " " .. sh_quote(BIN) .. " " .. case[2])
      assert.equal(1, code, case[2] .. ": " .. err)
      assert.truthy(err:find(case[3], 1, true), case[2] .. ": " .. err)
      assert.equal("", out, "no rank runs: " .. case[2])
    end
  end)

  it("a rank without TLUA_STORE_SECRET cannot join a group of several, with a clear error", function()
    local code, out, err = run("env -u TLUA_STORE_SECRET TLUA_RANK=0 TLUA_WORLD_SIZE=2 TLUA_MASTER_ADDR=127.0.0.1 "
      .. "TLUA_MASTER_PORT=9 timeout " .. LIMIT_S .. " " .. sh_quote(BIN) .. " -e 'tl.distributed.init()'")
    assert.are_not.equal(0, code, out)
    assert.truthy(err:find("init: TLUA_STORE_SECRET is not set (a world of 2 ranks meets in the launcher's store",
      1, true), err)
  end)

  it("lets no process without the secret stop a job of several nodes", function()
    -- rank 0 sends a SET of tlua/launch/failed without AUTH (raw bytes through bash's /dev/tcp),
    -- then runs tlua with a wrong secret that tries the same; the job must finish as if nothing
    -- happened (the launchers look for a failure every 0.2 s)
    write_file(tmp .. "/intruder.lua", [[
      local ok, err = pcall(tl.distributed.store_set, "tlua/launch/failed", "node 7: injected")
      print("intruder: " .. tostring(ok) .. " " .. tostring(err))
    ]])
    write_file(tmp .. "/intrude.lua", [[
      local bin = ...
      if os.getenv("TLUA_RANK") == "0" then
        local port = os.getenv("TLUA_MASTER_PORT")
        local key, value = "tlua/launch/failed", "node 7: injected"
        local f = assert(io.open("intrude.bin", "wb"))
        f:write("TLS1", string.char(1, 0), string.pack(">I2>I8", #key, #value), key, value)
        f:close()
        os.execute("bash -c 'cat intrude.bin > /dev/tcp/127.0.0.1/" .. port .. "' 2> /dev/null")
        os.execute("TLUA_STORE_SECRET=not-the-job-secret-0123 " .. bin .. " intruder.lua > intruder.txt 2>&1")
        os.execute("sleep 1")
      end
      print("done " .. os.getenv("TLUA_RANK"))
    ]])
    local port = free_port()
    local node, seconds = two_nodes(1, "intrude.lua " .. sh_quote(sh_quote(BIN)), port)
    assert.equal(0, node[0].code, node[0].err)
    assert.equal(0, node[1].code, node[1].err)
    assert.equal("done 0\n", node[0].out)
    assert.equal("done 1\n", node[1].out)
    assert.is_nil(node[0].err:find("stopping"), node[0].err)
    assert.is_nil(node[1].err:find("stopping"), node[1].err)
    local intruder = files.read_file(tmp .. "/intruder.txt") or ""
    assert.truthy(intruder:find("intruder: false", 1, true), intruder)
    assert.truthy(intruder:find("connect to 127.0.0.1:" .. port .. ": the server refused the secret", 1, true), intruder)
    assert.truthy(seconds < 30, "the job took " .. seconds .. " s")
  end)

  it("prints another node's failure message escaped and bounded", function()
    local script = "if os.getenv('TLUA_RANK') == '1' then tl.distributed.store_set('tlua/launch/failed', "
      .. "'boom \\27[31mred\\7 \\255' .. string.rep('A', 5000)) end os.execute('sleep 1000')"
    local port = free_port()
    local node, seconds = two_nodes(1, "-e " .. sh_quote(script), port)
    for n = 0, 1 do
      local err = node[n].err
      assert.are_not.equal(0, node[n].code, err)
      assert.truthy(err:find("tlua --nproc: stopping: boom \\x1b[31mred\\x07 \\xffAAAA", 1, true), err)
      assert.is_nil(err:find("[\27\7\255]"), "a raw control byte was printed")
      local line = err:match("tlua %-%-nproc: stopping: boom[^\n]*")
      assert.truthy(#line < 1200, "a line of " .. #line .. " bytes")
      assert.truthy(line:find("more bytes)", 1, true), line)
    end
    assert.truthy(seconds < 20, "the job took " .. seconds .. " s")
  end)

  it("listens on --master-addr only (never every interface), or on --bind", function()
    write_file(tmp .. "/reach.lua", [[
      local function reach(addr, port)
        return os.execute("bash -c 'exec 3<>/dev/tcp/" .. addr .. "/" .. port .. "' 2> /dev/null") == true
      end
      local port = os.getenv("TLUA_MASTER_PORT")
      if os.getenv("TLUA_RANK") == "0" then
        print("here=" .. tostring(reach("127.0.0.1", port)) .. " other=" .. tostring(reach("127.0.0.2", port)))
      end
    ]])
    local port = free_port()
    local node = two_nodes(1, "reach.lua", port)
    assert.equal(0, node[0].code, node[0].err)
    assert.equal("here=true other=false\n", node[0].out, "127.0.0.2 is another address of this host")
    local code, out, err = launch("--nproc 1 reach.lua")
    assert.equal(0, code, err)
    assert.equal("here=true other=false\n", out, "one node: 127.0.0.1 only")
    code, out, err = launch("--nproc 1 --bind 0.0.0.0 reach.lua") -- asked for: every interface
    assert.equal(0, code, err)
    assert.equal("here=true other=true\n", out)
  end)

  it("refuses bad options with a clear message", function()
    local cases = {
      { "--nproc 0 report.lua", "--nproc expects a whole number from 1 to 4096, got '0'" },
      { "--nproc abc report.lua", "--nproc expects a whole number from 1 to 4096, got 'abc'" },
      { "--nproc 2", "no script to run" },
      { "--nproc", "--nproc needs a value" },
      { "--nnodes 2 report.lua", "--nproc N is missing" },
      { "--nproc 1 --nnodes 2 --node-rank 2 report.lua", "--node-rank 2 is out of range for --nnodes 2" },
      { "--nproc 1 --master-port 70000 report.lua", "--master-port expects a whole number from 0 to 65535" },
      { "--nproc 2 no_such_script.lua", "cannot read the script 'no_such_script.lua'" },
      { "--nproc 1 --bind '' report.lua", "--bind expects a host name or address, got ''" },
      { "--nproc 1 --secret-file= report.lua", "--secret-file expects a file's path, got ''" },
    }
    for _, case in ipairs(cases) do
      local code, out, err = launch(case[1])
      assert.are_not.equal(0, code, case[1])
      assert.truthy(err:find(case[2], 1, true), case[1] .. ": " .. err)
      assert.equal("", out, case[1])
    end
  end)

  it("scripts/launch runs the launcher of TLUA_BIN", function()
    local code, out, err = run("TLUA_BIN=" .. sh_quote(BIN) .. " timeout " .. LIMIT_S .. " "
      .. sh_quote(ROOT .. "/scripts/launch") .. " --nproc 2 report.lua y")
    assert.equal(0, code, err)
    local r = reports(out)
    assert.equal("y", r[0].args)
    assert.equal("2", r[1].TLUA_WORLD_SIZE)
  end)
end)
