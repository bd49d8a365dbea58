-- The `tlua` executable (TLUA_BIN, or build/tlua): arg, -e, -l, -v, -i, -, error
-- exits, the `tl` global, and require("tlua") from the stock lua5.4.
local files = require("helpers.files")
local sh_quote, write_file, BIN, ROOT = files.sh_quote, files.write_file, files.BIN, files.ROOT
-- the file must exist
local function read_file(path) return assert(files.read_file(path), "cannot read " .. path) end

local BIN_DIR = BIN:match("^(.*)/[^/]*$")

local tmp -- a fresh directory per spec

-- runs a shell command line; returns exit code, stdout, stderr
local function run(cmdline, stdin)
  local out, err = tmp .. "/stdout", tmp .. "/stderr"
  local full = cmdline
  if stdin then
    write_file(tmp .. "/stdin", stdin)
    full = full .. " < " .. sh_quote(tmp .. "/stdin")
  else
    full = full .. " < /dev/null"
  end
  full = "cd " .. sh_quote(tmp) .. " && " .. full .. " > " .. sh_quote(out) .. " 2> " .. sh_quote(err)
  local ok, how, code = os.execute(full)
  if how == "signal" then code = 128 + code end
  if ok == true then code = 0 end
  return code, read_file(out), read_file(err)
end

local function tlua(args, stdin)
  return run(sh_quote(BIN) .. " " .. args, stdin)
end

describe("the tlua executable", function()
  before_each(function()
    tmp = os.tmpname()
    os.remove(tmp)
    assert(os.execute("mkdir -p " .. sh_quote(tmp)))
  end)

  after_each(function()
    if tmp and tmp:match("^/tmp/") then os.execute("rm -rf " .. sh_quote(tmp)) end
  end)

  it("exists and is executable (" .. BIN .. ")", function()
    assert.is_true(os.execute("test -x " .. sh_quote(BIN)) == true, BIN .. " is not an executable file")
  end)

  it("runs a script with arg as the stock lua does", function()
    write_file(tmp .. "/script.lua", [[
      print(arg[0], arg[1], arg[2], #arg, select("#", ...), ...)
      print(arg[-1] ~= nil)
    ]])
    local code, out, err = tlua("script.lua a 'b c'")
    assert.equal(0, code, err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.equal("script.lua\ta\tb c\t2\t2\ta\tb c", lines[1])
    assert.equal("true", lines[2])
  end)

  it("refuses a TLUA_MALLOC other than system", function()
    local code, out, err = run("TLUA_MALLOC=jemalloc " .. sh_quote(BIN) .. " -e 'print(1)'")
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches('TLUA_MALLOC must be "system" (glibc\'s own settings) or unset, got "jemalloc"', err, 1, true)
  end)

  it("keeps freed memory for reuse: a tensor made again faults no pages in (TLUA_MALLOC=system: glibc's)", function()
    if os.getenv("TLUA_ASAN_PRELOAD") then
      pending("a sanitizer build: its allocator, not glibc's, holds freed memory (in quarantine)")
      return
    end
    -- minor page faults (/proc/self/stat, field 10) while a 64 MiB tensor is made
    local script = [[
      local function faults()
        local f = assert(io.open("/proc/self/stat"))
        local stat = f:read("a")
        f:close()
        local fields = {}
        for field in stat:match("%) (.*)"):gmatch("%S+") do fields[#fields + 1] = field end
        return tonumber(fields[8])
      end
      -- the faults of each of 12 rounds of making and dropping it (a loop)
      for _ = 1, 12 do
        local before = faults()
        local t = tl.ones(16 * 1024 * 1024)
        io.write(faults() - before, " ")
        t = nil
        collectgarbage("collect")
      end
    ]]
    write_file(tmp .. "/faults.lua", script)
    local function rounds(out)
      local list = {}
      for n in out:gmatch("%d+") do list[#list + 1] = tonumber(n) end
      assert.equal(12, #list, out)
      return list
    end
    local code, out, err = tlua("faults.lua")
    assert.equal(0, code, err)
    -- after the first round, the block comes from the heap's freed memory. Once, small blocks
    -- made meanwhile (a thread pool starting, Lua's own) may split the freed region and the
    -- heap grows by one more block; then it settles: at most one more round of faults, and
    -- none in the last four rounds
    local list = rounds(out)
    local refaulted, last = 0, 0
    for i = 2, 12 do
      if list[i] >= 1000 then refaulted = refaulted + 1 end
      if i > 8 then last = last + list[i] end
    end
    assert.is_true(refaulted <= 1, "rounds that faulted the block in again: " .. out)
    assert.is_true(last < 1000, "faults in the last four rounds: " .. out)
    code, out, err = run("TLUA_MALLOC=system " .. sh_quote(BIN) .. " faults.lua")
    assert.equal(0, code, err)
    assert.is_true(rounds(out)[12] >= 16000, "faults with glibc's settings: " .. out) -- 4 KiB pages
  end)

  it("-e runs a statement", function()
    local code, out, err = tlua("-e 'print(1+1)'")
    assert.equal(0, code, err)
    assert.equal("2\n", out)
  end)

  it("-e statements run in order, before the script", function()
    write_file(tmp .. "/s.lua", "print(X * 2)")
    local code, out, err = tlua("-e 'X = 20' -e 'X = X + 1' s.lua")
    assert.equal(0, code, err)
    assert.equal("42\n", out)
  end)

  it("-v prints a version naming tlua", function()
    local code, out, err = tlua("-v")
    assert.equal(0, code, err)
    assert.truthy((out .. err):lower():find("tlua", 1, true), out .. err)
  end)

  it("-l loads a module (into a global of its name)", function()
    write_file(tmp .. "/mymod.lua", "LOADED_FLAG = 'yes'\nreturn { x = 42 }\n")
    local code, out, err = run("LUA_PATH=" .. sh_quote(tmp .. "/?.lua;;") .. " " .. sh_quote(BIN)
      .. " -l mymod -e " .. sh_quote("print(LOADED_FLAG, mymod and mymod.x)"))
    assert.equal(0, code, err)
    assert.equal("yes\t42\n", out)
  end)

  it("a script that errors exits non-zero with the message on stderr", function()
    write_file(tmp .. "/bad.lua", "local x = 1\nerror('boom from the script')\n")
    local code, out, err = tlua("bad.lua")
    assert.are_not.equal(0, code)
    assert.truthy(err:find("boom from the script", 1, true), err)
    assert.equal("", out)
  end)

  it("a tensor error in a script exits non-zero and names the op", function()
    write_file(tmp .. "/bad2.lua", "local y = tl.ones(2, 3) + tl.ones(4)\n")
    local code, _, err = tlua("bad2.lua")
    assert.are_not.equal(0, code)
    assert.truthy(err:find("add", 1, true), err)
    assert.truthy(err:find("[2, 3]", 1, true), err)
  end)

  it("os.exit codes come through", function()
    local code = tlua("-e 'os.exit(3)'")
    assert.equal(3, code)
  end)

  it("a missing script is an error", function()
    local code, _, err = tlua("no_such_script.lua")
    assert.are_not.equal(0, code)
    assert.truthy(err:find("no_such_script.lua", 1, true), err)
  end)

  it("has tl as a global, the same table as require('tlua')", function()
    local code, out, err = tlua("-e " .. sh_quote("print(type(tl), tl == require('tlua'), tl.ones(2, 3):sum():item())"))
    assert.equal(0, code, err)
    assert.equal("table\ttrue\t6.0\n", out)
  end)

  it("runs a script from stdin with -", function()
    local code, out, err = tlua("-", "print(6 * 7)\nprint(tl.arange(4):sum():item())\n")
    assert.equal(0, code, err)
    assert.equal("42\n6\n", out)
  end)

  it("runs stdin as a script when it is not a terminal and there is no script", function()
    local code, out, err = tlua("", "print('from stdin')\n")
    assert.equal(0, code, err)
    assert.equal("from stdin\n", out)
  end)

  it("-i: the REPL prints the values of expressions read from stdin", function()
    local input = "1+2\nx = 5\nx * 10\n=x+1\nfor i = 1, 2 do\nprint('line', i)\nend\ntl.tensor({1.5, 2.5}):sum():item()\n"
    local code, out, err = tlua("-i", input)
    assert.equal(0, code, err)
    local found = {}
    for l in out:gmatch("[^\n]+") do
      local v = l:gsub("^[>%s]*", "") -- prompts
      found[v] = true
    end
    assert.is_true(found["3"], out)
    assert.is_true(found["50"], out)
    assert.is_true(found["6"], out)
    assert.is_true(found["line\t1"], out)
    assert.is_true(found["line\t2"], out)
    assert.is_true(found["4.0"], out)
  end)

  it("-i: an error in the REPL is reported and the REPL goes on", function()
    local code, out, err = tlua("-i", "error('oops')\n40 + 2\n")
    assert.equal(0, code, err)
    assert.truthy(err:find("oops", 1, true), err)
    assert.truthy(out:find("42", 1, true), out)
  end)

  it("-i: results print readably: lists on a line, tables by entry, a state dict by key and shape", function()
    local input = table.concat({
      "x = tl.ones(2, 3)", "x.shape", "1, 2, 'a'", "{ a = 1, b = { c = { d = 1 } }, 'first' }",
      "{ x, 7 }", "tl.nn.Linear(3, 2):state_dict()", "x, x", "" }, "\n")
    local code, out, err = tlua("-i", input)
    assert.equal(0, code, err)
    local function has(text) assert.truthy(out:find(text, 1, true), "missing " .. text .. " in:\n" .. out) end
    has("> { 2, 3 }\n")
    has("> 1\t2\ta\n")
    has('{ "first", a = 1, b = { c = {...} } }') -- two levels shown, deeper ones folded
    has("{ tensor [2, 3] float32 cpu, 7 }")
    has("nn.StateDict (2 entries)\n  weight  [2, 3] float32\n  bias  [2] float32\n")
    -- two tensors: each whole, one after the other, each ending with its description line
    local _, tensors = out:gsub("%[float32 tensor of shape %[2, 3%] on cpu%]\n", "")
    assert.equal(2, tensors, out)
  end)

  -- at a terminal: `script` (util-linux) runs tlua on a pseudo-terminal, keys sent with pauses
  local function at_terminal(keys)
    local home = tmp .. "/home"
    assert(os.execute("mkdir -p " .. sh_quote(home)))
    -- the first key once tlua is at its prompt (a Ctrl-C before it would stop the start-up)
    local parts = { "sleep 1.5" }
    for _, k in ipairs(keys) do parts[#parts + 1] = "printf " .. sh_quote(k) .. "; sleep 0.4" end
    -- `exec`: script runs its command through $SHELL -c, and a shell left waiting on tlua
    -- would take the Ctrl-C too (dash then ends itself by SIGINT once tlua exits)
    local cmd = "(" .. table.concat(parts, "; ") .. ") | HOME=" .. sh_quote(home) .. " timeout 20 script -qec "
      .. sh_quote("exec " .. sh_quote(BIN)) .. " /dev/null"
    local code, out = run("(" .. cmd .. ")")
    local history = files.read_file(home .. "/.tlua_history") or ""
    return code, out, history
  end

  it("at a terminal: Tab completes tl.nn. and names not loaded yet, Ctrl-C clears the line, history as you go", function()
    if not os.execute("command -v script > /dev/null 2>&1") then
      pending("no `script` (util-linux): the terminal REPL was not tried")
      return
    end
    -- two Ctrl-Cs at one prompt: each clears the line (the handler stays installed)
    local code, out, history = at_terminal({ "tl.nn.Lin\t", "\3", "abc", "\3", "print(6 * 7)\n", "tl.op\t\t",
      "\3", "print('kept')\n", "\4" })
    assert.equal(0, code, out)
    assert.truthy(out:find("tl.nn.Linear", 1, true), out) -- completed after tl.nn loaded
    assert.truthy(out:find("tl.optim", 1, true), out)     -- listed before tl.optim is loaded
    assert.truthy(out:find("42", 1, true), out)           -- Ctrl-C left the REPL running
    assert.truthy(out:find("kept", 1, true), out)
    assert.is_nil(history:find("tl.nn.Linear", 1, true), history) -- the cleared lines are not kept
    assert.is_nil(history:find("abc", 1, true), history)
    assert.truthy(history:find("print(6 * 7)", 1, true), history)
    assert.truthy(history:find("print('kept')", 1, true), history)
  end)

  it("-i after a script keeps its globals", function()
    write_file(tmp .. "/s.lua", "G = 7\n")
    local code, out, err = tlua("-i s.lua", "G * 6\n")
    assert.equal(0, code, err)
    assert.truthy(out:find("42", 1, true), out)
  end)

  -- runs a statement in the stock lua5.4 with the repo's Lua modules and the build's tlua.core
  local function stock_lua(statement)
    local lpath = ROOT .. "/bindings/lua/?.lua;" .. ROOT .. "/bindings/lua/?/init.lua;;"
    local cpath = BIN_DIR .. "/lua/?.so;;"
    -- a sanitizer build's module needs the sanitizer runtimes loaded first
    -- (scripts/test --sanitize names them in TLUA_ASAN_PRELOAD)
    local preload = os.getenv("TLUA_ASAN_PRELOAD")
    local prefix = preload and ("LD_PRELOAD=" .. sh_quote(preload) .. " ASAN_OPTIONS=detect_leaks=0 ") or ""
    return run(prefix .. "LUA_PATH=" .. sh_quote(lpath) .. " LUA_CPATH=" .. sh_quote(cpath)
      .. " lua5.4 -e " .. sh_quote(statement))
  end

  it("require('tlua') works from the stock lua5.4 with LUA_PATH and LUA_CPATH", function()
    local code, out, err = stock_lua("local tl = require('tlua'); print(tl.ones(3):sum():item(), tl.tensor({1, 2}).dtype)")
    assert.equal(0, code, err)
    assert.equal("3.0\tint64\n", out)
  end)

  it("finds the module folders tlua/nn and tlua/optim, from tlua and from the stock lua5.4", function()
    local statement = "print(tl.nn.Sequential(tl.nn.Linear(2, 3), tl.nn.ReLU()):num_parameters(), " ..
        "tostring(tl.optim.Adam), package.searchpath('tlua.nn', package.path):match('tlua/nn/init%.lua$'))"
    local expected = "9\toptim.Adam\ttlua/nn/init.lua\n"
    local code, out, err = tlua("-e " .. sh_quote(statement))
    assert.equal(0, code, err)
    assert.equal(expected, out)
    code, out, err = stock_lua("local tl = require('tlua'); " .. statement)
    assert.equal(0, code, err)
    assert.equal(expected, out)
  end)

  it("runs the generational collector; tlua.core leaves a host's collector mode as it was", function()
    local code, out, err = tlua("-e " .. sh_quote("print(collectgarbage('incremental'))"))
    assert.equal(0, code, err)
    assert.equal("generational\n", out)
    for _, mode in ipairs({ "generational", "incremental" }) do
      code, out, err = stock_lua(string.format("collectgarbage(%q); local tl = require('tlua'); " ..
        "local _ = tl.nn, tl.ones(2) + 1; print(collectgarbage('incremental'))", mode))
      assert.equal(0, code, err)
      assert.equal(mode .. "\n", out)
    end
  end)
end)
