-- Specs that start tlua processes (ranks through tlua --nproc, or one plain process): a scratch folder per test, scripts written there, commands run under a timeout with their output and exit code.
local files = require("helpers.files")

local ranks = {}

--- run(command) -> exit code, output (stdout and stderr together)
function ranks.run(command)
  local p = io.popen(command .. " 2>&1; echo \"exit=$?\"")
  local out = p:read("a")
  p:close()
  return tonumber(out:match("exit=(%d+)%s*$")), out
end

--- scratch(before_each, after_each) -> a table whose dir is a fresh folder during each test of
--- the calling spec file (busted's hooks, which a required module does not see), with script(name, text) -> path written there
--- and launch(nproc, path, args, timeout = 120) -> code, output: tlua --nproc nproc path args run
--- in that folder (nproc 0: one process without the launcher), under timeout so that a hang
--- fails the spec instead of stopping it
function ranks.scratch(before_each, after_each)
  local s = {}
  before_each(function() s.dir = files.make_temp_dir() end)
  after_each(function() files.remove_dir(s.dir) end)
  function s.script(name, text)
    local path = s.dir .. "/" .. name
    files.write_file(path, text)
    return path
  end
  function s.launch(nproc, path, args, timeout)
    local starter = nproc > 0 and string.format("--nproc %d ", nproc) or ""
    return ranks.run(string.format("cd %s && timeout %d %s %s%s %s", files.sh_quote(s.dir), timeout or 120,
      files.sh_quote(files.BIN), starter, files.sh_quote(path), args or ""))
  end
  return s
end

return ranks
