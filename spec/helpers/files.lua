-- Files and processes for specs: shell quoting, whole-file reads and writes, the tlua executable
-- under test (TLUA_BIN, or build/tlua), temporary directories, and safetensors bytes.
local files = {}

function files.sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local bytes = require("helpers.bytes")
files.read_file = bytes.read_file -- the file's bytes, or nil when it cannot be opened
files.write_file = bytes.write_file

files.ROOT = io.popen("pwd"):read("l")
files.BIN = os.getenv("TLUA_BIN") or (files.ROOT .. "/build/tlua")
if files.BIN:sub(1, 1) ~= "/" then files.BIN = files.ROOT .. "/" .. files.BIN end

-- a fresh, empty directory (for before_each), and its removal (for after_each)
function files.make_temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. files.sh_quote(dir)))
  return dir
end

function files.remove_dir(dir)
  if dir then os.execute("rm -rf " .. files.sh_quote(dir)) end
end

files.safetensors_bytes = bytes.safetensors

return files
