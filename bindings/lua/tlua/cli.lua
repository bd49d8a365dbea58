-- tlua.cli: the command-line options of a script (`--key value`, `--key=value`, `--help`), checked against what it declares.
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

return M
