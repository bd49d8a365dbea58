-- Files and processes for specs: shell quoting, whole-file reads and writes, the tlua executable
-- under test (TLUA_BIN, or build/tlua), temporary directories, and safetensors bytes.
local files = {}

function files.sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- the file's bytes, or nil when it cannot be opened
function files.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function files.write_file(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

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

-- a safetensors file as the format describes it: the 8-byte little-endian header length, the JSON
-- padded with spaces to a multiple of 8, then the data
function files.safetensors_bytes(header, data)
  while #header % 8 ~= 0 do header = header .. " " end
  return string.pack("<I8", #header) .. header .. (data or "")
end

return files
