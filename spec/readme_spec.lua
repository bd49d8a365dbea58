-- README.md's commands: every command of its ```sh blocks and 4-space-indented blocks is in this spec's table, which says how it runs here (as written, with small arguments appended, with substitutions, or not at all and why), the table names no command the README lacks, and each group runs in order in a scratch folder whose entries link to the repo's.
local files = require("helpers.files")
local sh_quote, read_file, write_file = files.sh_quote, files.read_file, files.write_file
local BIN, ROOT = files.BIN, files.ROOT

local BUILD = BIN:match("^(.*)/[^/]*$") -- the build folder of the tlua under test: `build` in the scratch folder

-- ---- the README's commands ---------------------------------------------------------------------

-- the line without a trailing shell comment (a # after a blank, outside quotes), trimmed
local function strip_comment(line)
  local quote, i = nil, 1
  while i <= #line do
    local c = line:sub(i, i)
    if quote then
      if c == quote then quote = nil elseif c == "\\" and quote == '"' then i = i + 1 end
    elseif c == "'" or c == '"' then
      quote = c
    elseif c == "\\" then
      i = i + 1
    elseif c == "#" and (i == 1 or line:sub(i - 1, i - 1):match("%s")) then
      line = line:sub(1, i - 1)
      break
    end
    i = i + 1
  end
  return (line:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- { { text = command, line = n }, ... } in the README's order: the lines of ```sh blocks (comments
-- dropped, \ continuations joined) and of blocks indented by 4 spaces outside fences
local function readme_commands(text)
  local commands, fence, continued, continued_line, prev_blank, last_indented = {}, nil, nil, nil, true, nil
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local opening = line:match("^```(.*)$")
    if fence then
      if opening then
        fence = nil
      elseif fence == "sh" then
        local command = strip_comment(line)
        if continued then command, continued = continued .. " " .. command, nil end
        if command:sub(-1) == "\\" then
          continued, continued_line = command:sub(1, -2):gsub("%s+$", ""), continued_line or n
        elseif command ~= "" then
          commands[#commands + 1] = { text = command, line = continued_line or n }
          continued_line = nil
        end
      end
    elseif opening then
      fence = opening:match("^%s*(%S*)")
    elseif line:match("^    %S") and (prev_blank or last_indented == n - 1) then
      local command = strip_comment(line)
      if command ~= "" then commands[#commands + 1] = { text = command, line = n } end
      last_indented = n
    end
    prev_blank = line:match("^%s*$") ~= nil
  end
  return commands
end

-- ---- the table: how each command runs here ------------------------------------------------------
-- Each group runs in one bash (set -e) in a fresh scratch folder, its commands in order: entries
-- are { README command, append = extra arguments, run = the text run instead, why = the reason for
-- either, skip = the reason it does not run, expect = text its output must hold, check = shell run
-- after it }. Everywhere: `tlua` on PATH is the tlua under test, `build` is its build folder, HOME is
-- an empty folder of the scratch, and without a CUDA device `--device cuda` runs as `--device cpu`.
local QUICK = "a short run"
-- prints where lua5.4 finds tlua.core (the checks that it is the one the commands meant)
local WHERE_CORE = [[lua5.4 -e 'print(package.searchpath("tlua.core", package.cpath))']]
local CC = [[cc host.c $(pkg-config --cflags --libs tlua) -Wl,-rpath,"$(pkg-config --variable=libdir tlua)" -lm]]
local GROUPS = {
  {
    name = "Quick start",
    { "./scripts/tlua examples/fashion_mnist/train.lua", append = "--epochs 1 --limit 256", why = QUICK,
      expect = "done: mlp, 1 epochs" },
    { "./scripts/test", skip = "it runs this spec (and every other test: many minutes)" },
  },
  {
    name = "the character GPT: train, sample, GPT-2's shape",
    { "tlua examples/gpt/train.lua --device cuda --save gpt.safetensors", append = "--steps 2", why = QUICK,
      expect = "saved: gpt.safetensors" },
    { 'tlua examples/gpt/sample.lua --model gpt.safetensors --prompt "Q: " --device cuda', append = "--tokens 20",
      why = QUICK, expect = "Q: " },
    { "tlua examples/gpt/train.lua --device cuda --preset gpt2 --save gpt2.safetensors",
      append = "--steps 2 --layers 2 --context 64 --batch 2 --eval-iters 1",
      why = "a short run of 2 of GPT-2's 12 layers at context 64 (the whole shape takes minutes a step on a CPU)",
      expect = "saved: gpt2.safetensors" },
  },
  {
    name = "the ResNet",
    { "tlua examples/resnet/train.lua --device cuda --csv resnet_loss.csv --save resnet.safetensors",
      append = "--epochs 1 --limit 256 --test-limit 256", why = QUICK, expect = "saved: resnet.safetensors",
      check = "test -s resnet_loss.csv" },
  },
  {
    name = "the character LSTM: train, sample",
    { "tlua examples/lstm/train.lua --device cuda --save lstm.safetensors", append = "--steps 2 --sample-tokens 20",
      why = QUICK, expect = "saved: lstm.safetensors" },
    { 'tlua examples/lstm/sample.lua --model lstm.safetensors --prompt "Q: " --tokens 400', expect = "Q: " },
  },
  {
    name = "Resuming a run",
    { "tlua examples/resnet/train.lua --checkpoint run.safetensors --stop-after 500",
      append = "--epochs 1 --limit 256 --test-limit 64 --stop-after 1",
      why = "a short run (2 steps an epoch), stopped after its first step", expect = "stopped after step 1" },
    { "tlua examples/resnet/train.lua --checkpoint run.safetensors --resume run.safetensors",
      append = "--epochs 1 --limit 256 --test-limit 64", why = "the options of the stopped run",
      expect = "resumed from run.safetensors" },
  },
  {
    name = "From the stock Lua interpreter",
    { "./scripts/setup" },
    { 'eval "$(./scripts/env)"' },
    { [[lua5.4 -e 'local tl = require("tlua"); print(tl.ones(2, 2) * 3)']], expect = "[[3., 3.],",
      check = WHERE_CORE .. [[ | grep -qx "$PWD/build/lua/tlua/core.so"]] },
  },
  {
    name = "install for every Lua 5.4 (into a folder of the scratch for /usr/local)",
    { "./scripts/setup" },
    { "sudo cmake --install build --prefix /usr/local", run = 'cmake --install build --prefix "$PWD/usr-local"',
      why = "a prefix of the scratch folder for /usr/local, without sudo" },
    { "sudo ldconfig", skip = "it would change this machine's linker cache; tlua.core finds libtlua.so by its RUNPATH, "
      .. "which the next command checks without it" },
    { [[lua5.4 -e 'print(require("tlua").zeros(2))']],
      run = [[LUA_PATH="$PWD/usr-local/share/lua/5.4/?.lua;$PWD/usr-local/share/lua/5.4/?/init.lua;;" ]]
        .. [[LUA_CPATH="$PWD/usr-local/lib/lua/5.4/?.so;;" env -u LD_LIBRARY_PATH ]]
        .. [[lua5.4 -e 'print(require("tlua").zeros(2))']],
      why = "LUA_PATH and LUA_CPATH give the scratch prefix the place lua5.4's default paths give /usr/local",
      expect = "[0., 0.]" },
  },
  {
    name = "Launching several ranks (the two nodes as two launchers on this machine)",
    { "./scripts/launch --nproc 2 examples/gpt/train.lua", append = "--steps 2", why = QUICK .. " (CPU ranks)",
      expect = "done: 2 steps" },
    { "export TLUA_STORE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
      check = '[[ $TLUA_STORE_SECRET =~ ^[0-9a-f]{64}$ ]]' },
    { "tlua --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc 8 train.lua",
      run = "timeout 120 tlua --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port $PORT --nproc 1 "
        .. "examples/gpt/train.lua --steps 2 > node0.log 2>&1 &",
      why = "in the background on this machine (127.0.0.1, a free port, 1 rank) with a 2-step run of "
        .. "examples/gpt/train.lua for the placeholder train.lua" },
    { "tlua --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --nproc 8 train.lua",
      run = "timeout 120 tlua --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port $PORT --nproc 1 "
        .. "examples/gpt/train.lua --steps 2",
      why = "the other node, beside the first on this machine", check = "wait $! && cat node0.log",
      expect = "done: 2 steps in" },
  },
  {
    name = "the $HOME/.local install, a host built with pkg-config, examples/embed built with CMake",
    { "./scripts/setup" },
    { 'cmake --install build --prefix "$HOME/.local"' },
    { 'export PATH="$HOME/.local/bin:$PATH"', check = 'test "$(command -v tlua)" = "$HOME/.local/bin/tlua"' },
    { 'export LUA_PATH="$HOME/.local/share/lua/5.4/?.lua;$HOME/.local/share/lua/5.4/?/init.lua;;"' },
    { 'export LUA_CPATH="$HOME/.local/lib/lua/5.4/?.so;;"' },
    { "tlua -e 'print(tl.ones(2))'", expect = "[1., 1.]" },
    { [[lua5.4 -e 'print(require("tlua").zeros(2))']], expect = "[0., 0.]",
      check = WHERE_CORE .. [[ | grep -qx "$HOME/.local/lib/lua/5.4/tlua/core.so"]] },
    { 'export PKG_CONFIG_PATH="$HOME/.local/lib/pkgconfig"' },
    { CC, run = CC:gsub("^cc host%.c", "cc examples/embed/host.c"),
      why = "examples/embed/host.c for the placeholder host.c", check = "test -x a.out" },
    { 'cmake -S examples/embed -B build-host -DCMAKE_PREFIX_PATH="$HOME/.local"' },
    { "cmake --build build-host" },
    { "(cd build-host && ./host ../examples/embed/model.lua)", expect = "plain C reference: max |difference|",
      -- the second run reads the checkpoint the first wrote
      check = "(cd build-host && ./host ../examples/embed/model.lua) | tee second.log && "
        .. "! grep -q '^no checkpoint' second.log" },
  },
  {
    name = "the rock",
    { 'luarocks --lua-version 5.4 --tree "$HOME/rocks" make',
      run = 'TLUA_CUDA=OFF CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) luarocks --lua-version 5.4 --tree "$HOME/rocks" make',
      why = "without CUDA (TLUA_CUDA=OFF, as the README allows), on every core" },
    { 'eval "$(luarocks --lua-version 5.4 --tree "$HOME/rocks" path)"' },
    { [[lua5.4 -e 'print(require("tlua").ones(2, 2))']], expect = "[[1., 1.],",
      check = WHERE_CORE .. [[ | grep -q "^$HOME/rocks/"]] },
  },
}

-- ---- this machine ------------------------------------------------------------------------------

local function capture(command)
  local p = io.popen(command .. " 2>/dev/null")
  local out = p:read("a")
  p:close()
  return out
end

local SANITIZED = os.getenv("TLUA_ASAN_PRELOAD") ~= nil
local GPUS = tonumber(capture(sh_quote(BIN) .. " -e 'io.write(tl.cuda.device_count())'")) or 0

-- nil when scripts/setup would neither install nor build anything for the build of BIN (so
-- ./scripts/setup and ./scripts/tlua may run as written), else why not
local function setup_would_change()
  local cache = read_file(BUILD .. "/CMakeCache.txt")
  if not cache then return BUILD .. " is not a CMake build folder" end
  if not cache:find("\nCMAKE_BUILD_TYPE:STRING=Release\n", 1, true) then
    return BUILD .. " is not a Release build: scripts/setup would configure it again"
  end
  local home = cache:match("\nCMAKE_HOME_DIRECTORY:INTERNAL=([^\n]*)")
  if capture("realpath " .. sh_quote(home or "")) ~= capture("realpath " .. sh_quote(ROOT)) then
    return BUILD .. " is the build of another source folder"
  end
  -- scripts/tlua's own rule
  local newer = capture(string.format("find %s %s %s \\( -name '*.c' -o -name '*.h' -o -name '*.def' -o -name '*.cu' "
    .. "-o -name CMakeLists.txt \\) -newer %s -print -quit", sh_quote(ROOT .. "/CMakeLists.txt"),
    sh_quote(ROOT .. "/engine"), sh_quote(ROOT .. "/bindings"), sh_quote(BIN)))
  if newer ~= "" then
    return newer:gsub("%s+$", ""):gsub("^" .. ROOT:gsub("%p", "%%%0") .. "/", "") .. " is newer than " .. BIN
      .. ": scripts/setup would rebuild " .. BUILD
  end
  local setup = read_file(ROOT .. "/scripts/setup") or ""
  local missing = {}
  for name in (setup:match("\npackages=%((.-)%)") or ""):gmatch("%S+") do
    if capture("dpkg-query -W -f='${Status}' " .. sh_quote(name)) ~= "install ok installed" then
      missing[#missing + 1] = name
    end
  end
  if #missing > 0 then return "scripts/setup would install " .. table.concat(missing, " ") end
  return nil
end
local SETUP_CHANGES = setup_would_change()

-- the text run for an entry here, or nil and why it does not run
local function how(entry)
  if entry.skip then return nil, entry.skip end
  local text = entry.run or (entry.append and (entry[1] .. " " .. entry.append)) or entry[1]
  if GPUS == 0 then text = text:gsub("%-%-device cuda", "--device cpu") end
  if SETUP_CHANGES then
    if text == "./scripts/setup" then return nil, SETUP_CHANGES end
    text = text:gsub("^%./scripts/tlua ", "tlua ")
  end
  return text
end

-- a scratch folder: links to the repo's top-level entries (not .git, not its build folders) with
-- their targets' times (scripts/tlua compares CMakeLists.txt's), `build` the build of BIN, an
-- empty home and a bin folder where `tlua` is BIN
local function make_scratch()
  local dir = files.make_temp_dir()
  assert(os.execute(string.format([[
    set -e
    cd %s
    for e in * .[!.]*; do
      case "$e" in .git | build | build-*) continue ;; esac
      ln -s "$PWD/$e" %s/"$e"
      touch -h -r "$e" %s/"$e"
    done
    ln -s %s %s/build
    mkdir -p %s/.readme/bin %s/.readme/home
    ln -s %s %s/.readme/bin/tlua
  ]], sh_quote(ROOT), sh_quote(dir), sh_quote(dir), sh_quote(BUILD), sh_quote(dir), sh_quote(dir), sh_quote(dir),
    sh_quote(BIN), sh_quote(dir))))
  return dir
end

-- runs the entries' texts in order in one bash in dir; returns whether all succeeded and the log,
-- where a line "@@ N $ text" starts the output of entry N (and "@@ check $ text" its check's)
local function run_group(dir, entries)
  local lines = { "set -euo pipefail", "cd " .. sh_quote(dir), "PORT=" .. math.random(20000, 60000) }
  for i, e in ipairs(entries) do
    lines[#lines + 1] = "printf '\\n@@ %d $ %s\\n' " .. i .. " " .. sh_quote(e.text)
    lines[#lines + 1] = e.text
    if e.check then
      lines[#lines + 1] = "printf '@@ check $ %s\\n' " .. sh_quote(e.check)
      lines[#lines + 1] = e.check
    end
  end
  write_file(dir .. "/.readme/run.sh", table.concat(lines, "\n") .. "\n")
  local log = dir .. "/.readme/log"
  local ok = os.execute(string.format("env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u LUA_INIT "
    .. "-u LUA_INIT_5_4 -u TLUA_LUA_PATH -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH -u TLUA_STORE_SECRET "
    .. "-u TLUA_COVERAGE_FILE "
    .. "HOME=%s PATH=%s TLUA_BIN=%s timeout 600 bash %s > %s 2>&1 < /dev/null",
    sh_quote(dir .. "/.readme/home"), sh_quote(dir .. "/.readme/bin:" .. os.getenv("PATH")), sh_quote(BIN),
    sh_quote(dir .. "/.readme/run.sh"), sh_quote(log)))
  return ok == true or ok == 0, read_file(log) or ""
end

-- ---- the specs ----------------------------------------------------------------------------------

describe("README.md's commands", function()
  math.randomseed(os.time())
  local readme = assert(read_file(ROOT .. "/README.md"), "cannot read README.md")

  it("are each in this spec's table, which has no command the README lacks (and each group in README order)",
    function()
      local commands = readme_commands(readme)
      assert.is_true(#commands > 0, "no commands found in README.md")
      local listed, problems = {}, {}
      for _, group in ipairs(GROUPS) do
        for _, entry in ipairs(group) do listed[entry[1]] = true end
      end
      local in_readme = {}
      for _, c in ipairs(commands) do
        in_readme[c.text] = true
        if not listed[c.text] then
          problems[#problems + 1] = string.format("README.md:%d: `%s` is not in spec/readme_spec.lua's table", c.line,
            c.text)
        end
      end
      for _, group in ipairs(GROUPS) do
        local from = 1
        for _, entry in ipairs(group) do
          if not in_readme[entry[1]] then
            problems[#problems + 1] = string.format("the table's `%s` (%s) is not in README.md", entry[1], group.name)
          else
            local at
            for i = from, #commands do
              if commands[i].text == entry[1] then at = i break end
            end
            if not at then
              problems[#problems + 1] = string.format("the table's `%s` (%s) comes before the group's previous "
                .. "command in README.md", entry[1], group.name)
            else
              from = at + 1
            end
          end
        end
      end
      assert.is_true(#problems == 0, table.concat(problems, "\n"))
    end)

  if GPUS == 0 then
    io.stderr:write("readme_spec: no CUDA device: --device cuda runs as --device cpu\n")
  end
  if SETUP_CHANGES then
    io.stderr:write("readme_spec: ./scripts/setup does not run and ./scripts/tlua runs as tlua: "
      .. SETUP_CHANGES .. "\n")
  end

  for _, group in ipairs(GROUPS) do
    local entries, skipped = {}, {}
    for _, entry in ipairs(group) do
      local text, why = how(entry)
      if text then
        entries[#entries + 1] = { text = text, check = entry.check, expect = entry.expect }
      else
        skipped[#skipped + 1] = { entry[1], why }
      end
    end
    for _, s in ipairs(skipped) do
      it(group.name .. ": `" .. s[1] .. "` does not run here", function() pending(s[2]) end)
    end
    if #entries > 0 then
      it(string.format("%s (%d command%s)", group.name, #entries, #entries == 1 and "" or "s"), function()
        if SANITIZED then
          pending("a sanitizer build (TLUA_ASAN_PRELOAD): the README's commands are for the Release build")
          return
        end
        local dir = make_scratch()
        local ok, log = run_group(dir, entries)
        local tail = #log > 6000 and ("...\n" .. log:sub(-6000)) or log
        assert.is_true(ok, "a command failed (scratch folder " .. dir .. " kept):\n" .. tail)
        for i, e in ipairs(entries) do
          -- entry i's output (its check's included), without the lines that name the commands
          local out = (log:match("\n@@ " .. i .. " %$ [^\n]*\n(.-)\n@@ %d+ %$ ") or
            log:match("\n@@ " .. i .. " %$ [^\n]*\n(.*)$") or ""):gsub("@@ check %$ [^\n]*\n", "")
          if e.expect then
            assert.is_truthy(out:find(e.expect, 1, true),
              string.format("`%s`: its output lacks %q (scratch folder %s kept):\n%s", e.text, e.expect, dir, tail))
          end
        end
        files.remove_dir(dir)
      end)
    end
  end
end)
