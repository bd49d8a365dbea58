-- tlua.cli: the command-line options of a script (`--key value`, `--key=value`, `--help`), checked against what it declares, and the resume and CSV glue the training examples share.
local options = require("tlua.options")

local M = {}

local SPEC = { program = "string", usage = "string", numeric = "table", text = "table", flags = "table",
  defaults = "table" }

--- parse(argv, spec) -> opts. spec: program (for messages), usage (printed by --help and after
--- an error), numeric = {key = "integer" | "number"}, text = {key = true} (options taken as
--- strings), flags = {key = true} (options without a value: --key sets true, --key=false
--- false), defaults = {key = value}. Dashes in a key read as underscores (--top-k is top_k).
--- A bad argument prints "<program>: <message>" and the usage to stderr and exits with status 2.
function M.parse(argv, spec)
  if spec == nil then options.error("cli.parse: expected a spec table {program =, usage =, ...}", 2) end
  options.check(spec, "cli.parse", SPEC, 2)
  local numeric, text, flags = spec.numeric or {}, spec.text or {}, spec.flags or {}
  local function fail(message)
    io.stderr:write(spec.program, ": ", message, "\n", spec.usage, "\n")
    os.exit(2)
  end
  local opts = {}
  for k, v in pairs(spec.defaults or {}) do opts[k] = v end
  argv = argv or {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      print(spec.usage)
      os.exit(0)
    end
    local key, value = a:match("^%-%-([%w_-]+)=(.*)$")
    local flag = flags[(key or a:match("^%-%-([%w_-]+)$") or ""):gsub("-", "_")]
    if flag and not key then
      key, value = a:match("^%-%-([%w_-]+)$"), true
    elseif flag then
      if value ~= "true" and value ~= "false" then fail("--" .. key .. " takes no value, or =true or =false") end
      value = value == "true"
    elseif not key then
      key = a:match("^%-%-([%w_-]+)$")
      if not key then fail("unexpected argument '" .. a .. "'") end
      i = i + 1
      value = argv[i]
      if value == nil then fail("--" .. key .. " needs a value") end
    end
    local name = key:gsub("-", "_")
    if not numeric[name] and not text[name] and not flags[name] then fail("unknown option --" .. key) end
    if numeric[name] then
      local n = tonumber(value)
      if not n or (numeric[name] == "integer" and math.type(n) ~= "integer") then
        fail(string.format("--%s expects %s, got '%s'", key, numeric[name] == "integer" and "an integer" or "a number",
          value))
      end
      value = n
    end
    opts[name] = value
    i = i + 1
  end
  return opts, fail
end

--- resume(path, objects, args, fail) -> the `run` table a training script saved with
--- tl.checkpoint.save(path, {..., extra = {args = args, run = run}}): refuses (through fail, as
--- parse gives it) a file without that `extra.args`, or one whose args differ from these (naming
--- the first option that does), then loads objects from it (tl.checkpoint.load: all or nothing).
function M.resume(path, objects, args, fail)
  local tl = require("tlua")
  local saved = tl.checkpoint.read(path)
  local old = type(saved.extra) == "table" and saved.extra.args
  if type(old) ~= "table" then fail("'" .. path .. "' was not written by this script's --checkpoint") end
  for k, v in pairs(args) do
    if old[k] ~= v then
      fail(string.format("--resume: the checkpoint's run had %s = %s, this one %s (give the same options)", k,
        tostring(old[k]), tostring(v)))
    end
  end
  return tl.checkpoint.load(path, objects).extra.run
end

--- csv(path, header, step_column, until_step) -> a file open for writing: header (with its "\n"),
--- then, when until_step is given (a resumed run), the rows of the file already at path whose
--- step (their step_column-th field) is at most until_step, for the run to append to; so a
--- resumed run's CSV ends as the uninterrupted run's would.
function M.csv(path, header, step_column, until_step)
  local kept = { header }
  local old = until_step and io.open(path, "r")
  if old then
    local pattern = "^" .. string.rep("[^,]*,", step_column - 1) .. "(%d+)"
    for line in old:lines() do
      local row_step = tonumber(line:match(pattern))
      if row_step and row_step <= until_step then kept[#kept + 1] = line .. "\n" end
    end
    old:close()
  end
  local f = assert(io.open(path, "w"))
  f:write(table.concat(kept))
  return f
end

return M
