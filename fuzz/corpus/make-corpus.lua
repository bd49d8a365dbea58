-- Writes the seed corpus of the libFuzzer harnesses (fuzz/native): small valid and invalid
-- safetensors files into fuzz/corpus/safetensors/ and IDX files (plain and gzip) into
-- fuzz/corpus/idx/. Plain Lua 5.4, no tlua needed; the output is the same on every run.
--   lua5.4 fuzz/corpus/make-corpus.lua [corpus dir, default: the folder of this script]
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local root = arg[1] or here

local bytes = dofile(here .. "/../../spec/helpers/bytes.lua")
local write = bytes.write_file

-- ---- safetensors ----------------------------------------------------------------------------
-- the 8-byte little-endian header length, the JSON padded with spaces to 8, the data
local st = bytes.safetensors

local function entry(name, dtype, shape, begin, finish)
  return string.format('"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}', name, dtype, shape, begin, finish)
end

local safetensors = {
  -- valid
  empty = st("{}"),
  metadata_only = st('{"__metadata__":{"format":"pt","epoch":"3"}}'),
  every_dtype = st("{" .. table.concat({
    entry("f64", "F64", "[1]", 0, 8), entry("i64", "I64", "[1]", 8, 16), entry("f32", "F32", "[2]", 16, 24),
    entry("i32", "I32", "[1]", 24, 28), entry("u32", "U32", "[1]", 28, 32), entry("bf16", "BF16", "[1]", 32, 34),
    entry("f16", "F16", "[1]", 34, 36), entry("i16", "I16", "[1]", 36, 38), entry("u16", "U16", "[1]", 38, 40),
    entry("u8", "U8", "[2]", 40, 42), entry("i8", "I8", "[1]", 42, 43), entry("b", "BOOL", "[3]", 43, 46),
  }, ",") .. "}", string.pack("<d<i8<f<f<i4<I4<I2<I2<i2<I2", -1.5, -3, 0.25, 1e30, -7, 4000000000, 0x3F80,
    0x3C00, -2, 65535) .. string.char(0, 255, 128, 0, 7, 1)),
  zero_sized = st("{" .. table.concat({
    entry("a", "F32", "[0,3]", 0, 0), entry("b", "I16", "[2]", 0, 4), entry("c", "BOOL", "[0]", 4, 4),
    entry("d", "F64", "[]", 4, 12), entry("e", "U8", "[1,0,1]", 12, 12),
  }, ",") .. "}", string.char(1, 0, 2, 0) .. string.pack("<d", 3.5)),
  bool_bytes = st("{" .. entry("m", "BOOL", "[2,2]", 0, 4) .. "}", string.char(0, 7, 255, 1)),
  metadata_and_tensor = st('{"__metadata__":{"k":"v"},' .. entry("w", "F32", "[1]", 0, 4) .. "}", string.pack("<f", 2)),
  -- invalid
  hole = st("{" .. entry("a", "F32", "[1]", 0, 4) .. "," .. entry("b", "F32", "[1]", 8, 12) .. "}", string.rep("\0", 12)),
  trailing = st("{" .. entry("a", "F32", "[1]", 0, 4) .. "}", string.rep("\0", 6)),
  overlap = st("{" .. entry("a", "F32", "[2]", 0, 8) .. "," .. entry("b", "F32", "[2]", 4, 12) .. "}", string.rep("\0", 12)),
  reversed = st("{" .. entry("a", "F32", "[1]", 4, 0) .. "}", string.rep("\0", 4)),
  span = st("{" .. entry("a", "F32", "[2,3]", 0, 20) .. "}", string.rep("\0", 20)),
  huge_shape = st("{" .. entry("a", "F32", "[0,4503599627370496,4503599627370496,4503599627370496]", 0, 0) .. "}"),
  huge_bytes = st("{" .. entry("a", "BOOL", "[2147483648,2147483648]", 0, 0) .. "}"),
  unknown_dtype = st("{" .. entry("a", "Q4", "[1]", 0, 1) .. "}", "\0"),
  duplicate = st("{" .. entry("a", "U8", "[1]", 0, 1) .. "," .. entry("a", "U8", "[1]", 1, 2) .. "}", "\0\0"),
  not_object = st("[1,2]"),
  bad_utf8 = st('{"\xC3(":{}}'),
  metadata_number = st('{"__metadata__":{"k":3}}'),
  header_too_long = string.pack("<I8", 100000001) .. "{}",
  header_beyond = string.pack("<I8", 64) .. "{}",
  short = "\8\0\0",
}

-- ---- IDX --------------------------------------------------------------------------------------
-- two zero bytes, the type, the number of dims, big-endian dims, then the data
local idx = bytes.idx

-- CRC-32 (the gzip trailer's), bit by bit
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do
    c = c ~ s:byte(i)
    for _ = 1, 8 do
      if c & 1 == 1 then c = (c >> 1) ~ 0xEDB88320 else c = c >> 1 end
    end
  end
  return c ~ 0xFFFFFFFF
end

-- one gzip member of stored (uncompressed) deflate blocks of at most `block` bytes
local function gzip(s, block)
  local parts = { string.char(0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF) }
  local at = 1
  repeat
    local part = s:sub(at, at + block - 1)
    at = at + #part
    local final = at > #s and 1 or 0
    parts[#parts + 1] = string.char(final) .. string.pack("<I2<I2", #part, (~#part) & 0xFFFF) .. part
  until at > #s
  parts[#parts + 1] = string.pack("<I4<I4", crc32(s), #s & 0xFFFFFFFF)
  return table.concat(parts)
end

local images = idx(0x08, { 2, 2, 3 }, string.char(0, 1, 2, 127, 128, 255, 7, 8, 9, 10, 11, 12))
local idx_files = {
  -- valid
  ubyte = images,
  sbyte = idx(0x09, { 4 }, string.char(0x80, 0xFF, 0, 0x7F)),
  int16 = idx(0x0B, { 2 }, string.pack(">i2>i2", -32768, 258)),
  int32 = idx(0x0C, { 2, 1 }, string.pack(">i4>i4", -2147483648, 7)),
  float32 = idx(0x0D, { 2 }, string.pack(">f>f", 1.5, -0.0)),
  float64 = idx(0x0E, { 1 }, string.pack(">d", 1 / 3)),
  empty = idx(0x08, { 0, 28 }),
  ["images.gz"] = gzip(images, 5),
  ["members.gz"] = gzip(images:sub(1, 10), 4) .. gzip(images:sub(11), 64),
  -- invalid
  truncated = images:sub(1, #images - 2),
  ["truncated.gz"] = gzip(images, 5):sub(1, -4),
  trailing = images .. "\0",
  ["trailing.gz"] = gzip(images, 64) .. "\0\0",
  huge_dims = idx(0x08, { 65536, 65536, 65536, 65536 }, "\0"),
  huge_bytes = idx(0x0E, { 2147483648, 2147483648 }, "\0"),
  bad_magic = "\1\0\8\1\0\0\0\1x",
  bad_type = "\0\0\7\1\0\0\0\1x",
  no_dims = "\0\0\8\0",
}

for _, sub in ipairs({ "safetensors", "idx" }) do
  assert(os.execute("mkdir -p '" .. (root .. "/" .. sub):gsub("'", "'\\''") .. "'"))
end
local count = 0
for name, bytes in pairs(safetensors) do
  write(root .. "/safetensors/" .. name .. ".safetensors", bytes)
  count = count + 1
end
for name, bytes in pairs(idx_files) do
  write(root .. "/idx/" .. name .. ".idx", bytes)
  count = count + 1
end
print(string.format("make-corpus: wrote %d files under %s/safetensors and %s/idx", count, root, root))
