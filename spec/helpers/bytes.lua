-- File bytes for specs, the API fuzzer and the seed corpus (plain Lua 5.4, no tlua): whole-file
-- reads and writes, and the bytes of IDX and safetensors files as their formats describe them.
local bytes = {}

--- the file's bytes, or nil when it cannot be opened
function bytes.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function bytes.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- an IDX file: two zero bytes, the type code, the number of dims, the dims (big-endian), the data
function bytes.idx(type_code, dims, data)
  local parts = { string.char(0, 0, type_code, #dims) }
  for _, d in ipairs(dims) do parts[#parts + 1] = string.pack(">I4", d) end
  parts[#parts + 1] = data or ""
  return table.concat(parts)
end

--- a safetensors file: the 8-byte little-endian header length, the JSON padded with spaces to a
-- multiple of 8, the data
function bytes.safetensors(header, data)
  while #header % 8 ~= 0 do header = header .. " " end
  return string.pack("<I8", #header) .. header .. (data or "")
end

return bytes
