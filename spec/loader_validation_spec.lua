-- The loaders (tl.load: safetensors; tl.data.read_idx: IDX) refuse what is not a good file with
-- an exact message naming the op, the file and what is wrong, before they allocate: paths that
-- are not regular files (a FIFO must not block them), safetensors headers by the reference
-- implementation's rules (header length, '{', dtypes, shapes whose sizes overflow, offsets that
-- tile the data exactly), IDX dims that overflow and data cut short. Bool bytes load as 0/1.
-- Every file here is crafted byte by byte; valid ones still load.
local tl = require("tlua")

local files = require("helpers.files")
local sh_quote, write_file, read_file = files.sh_quote, files.write_file, files.read_file
local BIN, safetensors_bytes = files.BIN, files.safetensors_bytes

local dir
before_each(function() dir = files.make_temp_dir() end)
after_each(function() files.remove_dir(dir) end)

local idx_bytes = require("helpers.bytes").idx

-- the message of the error fn(...) raises, without the position of the line that called fn
-- (tlua's Lua modules raise at their caller's line: this spec's, which is checked)
local function message_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  local at, rest = err:match("^([^:]*):%d+: (.*)$")
  if at then
    assert.equal("spec/loader_validation_spec.lua", at:match("spec/.*$"), err)
    return rest
  end
  return err
end

-- tl.load(path) of a file holding bytes fails with exactly "load: '<path>': <what>"
local function expect_load_error(name, bytes, what)
  local path = dir .. "/" .. name
  write_file(path, bytes)
  assert.are.equal("load: '" .. path .. "': " .. what, message_of(tl.load, path))
end

-- tl.data.read_idx(path) of a file holding bytes fails with exactly "data.read_idx: '<path>': <what>"
local function expect_idx_error(name, bytes, what)
  local path = dir .. "/" .. name
  write_file(path, bytes)
  assert.are.equal("data.read_idx: '" .. path .. "': " .. what, message_of(tl.data.read_idx, path))
end

-- one tensor "w" of dtype and shape (JSON text) at data_offsets [begin, end]
local function one_tensor(dtype, shape, begin, finish)
  return string.format('{"w":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}}', dtype, shape, begin, finish)
end

describe("loaders and paths that are not regular files", function()
  -- runs `script` in a tlua subprocess, killed after 10 s; returns its exit code and output
  local function run_guarded(script)
    local out = dir .. "/out"
    local ok, how, code = os.execute(string.format("timeout 10 %s -e %s > %s 2>&1", sh_quote(BIN),
      sh_quote(script), sh_quote(out)))
    if ok == true then code = 0 elseif how == "signal" then code = 128 + code end
    return code, read_file(out) or ""
  end

  it("refuse a FIFO at once instead of blocking on it (tl.load, the IDX reader)", function()
    assert.is_true(os.execute("test -x " .. sh_quote(BIN)) == true, "the tlua executable is needed: " .. BIN)
    local fifo = dir .. "/pipe"
    assert.is_true(os.execute("mkfifo " .. sh_quote(fifo)) == true)
    local calls = {
      { "tl.load", "load: '" .. fifo .. "': is a FIFO (named pipe), not a regular file" },
      { "tl._read_idx", "read_idx: '" .. fifo .. "': is a FIFO (named pipe), not a regular file" },
      -- a Lua module's error is raised at its caller's line (the -e chunk's)
      { "tl.data.read_idx", "(command line):1: data.read_idx: '" .. fifo .. "': is a FIFO (named pipe), not a regular file" },
    }
    for _, call in ipairs(calls) do
      local code, out = run_guarded(string.format(
        "local ok, e = pcall(%s, %q) io.write(tostring(ok), '|', tostring(e))", call[1], fifo))
      assert.are_not.equal(124, code, call[1] .. " blocked on a FIFO (killed after 10 s)")
      assert.are.equal(0, code, out)
      assert.are.equal("false|" .. call[2], out)
    end
  end)

  it("refuse a directory and a device, naming the path and what it is", function()
    assert.are.equal("load: '" .. dir .. "': is a directory, not a regular file", message_of(tl.load, dir))
    assert.are.equal("data.read_idx: '" .. dir .. "': is a directory, not a regular file",
      message_of(tl.data.read_idx, dir))
    assert.are.equal("load: '/dev/null': is a character device, not a regular file", message_of(tl.load, "/dev/null"))
  end)
end)

describe("tl.load refuses a safetensors header the reference implementation refuses", function()
  it("a header length over 100,000,000 bytes or beyond the file", function()
    expect_load_error("too_large", string.pack("<I8", 100000001) .. "{}      ",
      "header length 100000001 exceeds the limit of 100000000 bytes")
    expect_load_error("beyond", string.pack("<I8", 64) .. "{}",
      "header length 64 exceeds the 2 bytes after the length field (file size 10)")
    expect_load_error("short", "\8\0\0",
      "file has 3 bytes, too few for the 8-byte header length of a safetensors file")
  end)

  it("a header that does not start with '{'", function()
    expect_load_error("array", safetensors_bytes("[]"),
      "header starts with byte 0x5B ('['), expected '{' (a JSON object)")
    expect_load_error("space", string.pack("<I8", 8) .. "      {}",
      "header starts with byte 0x20, expected '{' (a JSON object)")
    expect_load_error("empty", string.pack("<I8", 0), "header is empty (length 0), expected a JSON object")
  end)

  it("an unknown dtype", function()
    expect_load_error("dtype", safetensors_bytes(one_tensor("Q4", "[2]", 0, 2), "\0\0"),
      "tensor 'w' has dtype 'Q4', which tlua cannot load (it loads F32, F64, BF16, F16, I32, I64, BOOL; "
        .. "U8, I8, U16, I16 load as int32, U32 as int64)")
  end)

  it("data_offsets that end before they begin", function()
    expect_load_error("reversed", safetensors_bytes(one_tensor("F32", "[1]", 8, 4), string.rep("\0", 8)),
      "tensor 'w': data_offsets [8, 4] end before they begin")
  end)

  it("a shape whose elements do not fill data_offsets exactly", function()
    expect_load_error("span", safetensors_bytes(one_tensor("F32", "[2, 3]", 0, 20), string.rep("\0", 20)),
      "tensor 'w': shape [2, 3] of F32 needs 24 bytes, but data_offsets [0, 20] hold 20")
    expect_load_error("span16", safetensors_bytes(one_tensor("BF16", "[3]", 0, 8), string.rep("\0", 8)),
      "tensor 'w': shape [3] of BF16 needs 6 bytes, but data_offsets [0, 8] hold 8")
  end)

  it("shapes whose element count, strides or byte size overflow", function()
    local cases = {
      -- a zero size does not excuse the others: the strides would overflow
      { "[0, 4503599627370496, 4503599627370496, 4503599627370496]", "F32",
        "tensor 'w': shape [0, 4503599627370496, 4503599627370496, 4503599627370496] has too many elements "
          .. "(at most 2^62, zero sizes counted as 1)" },
      { "[3037000500, 3037000500]", "I64",
        "tensor 'w': shape [3037000500, 3037000500] has too many elements (at most 2^62, zero sizes counted as 1)" },
      { "[65536, 65536, 65536, 65536]", "U8",
        "tensor 'w': shape [65536, 65536, 65536, 65536] has too many elements "
          .. "(at most 2^62, zero sizes counted as 1)" },
      { "[4294967295, 4294967295, 4294967295, 0]", "BOOL",
        "tensor 'w': shape [4294967295, 4294967295, 4294967295, 0] has too many elements "
          .. "(at most 2^62, zero sizes counted as 1)" },
      -- 2^62 elements are counted; 2^64 bytes of F32 are not
      { "[2147483648, 2147483648]", "F32",
        "tensor 'w': shape [2147483648, 2147483648] of F32 needs more than 2^62 bytes" },
      { "[2147483648, 2147483648]", "BOOL",
        "tensor 'w': shape [2147483648, 2147483648] of BOOL needs 4611686018427387904 bytes, "
          .. "but data_offsets [0, 0] hold 0" },
      -- JSON numbers from 2^53 on are inexact
      { "[0, 1152921504606846976]", "F32",
        "tensor 'w': dim 2 of \"shape\" is 1.152921504606847e+18, at least 2^53: too many elements" },
      { "[9007199254740993]", "F64",
        "tensor 'w': dim 1 of \"shape\" is 9007199254740992, at least 2^53: too many elements" },
    }
    for i, case in ipairs(cases) do
      expect_load_error("huge" .. i, safetensors_bytes(one_tensor(case[2], case[1], 0, 0)), case[3])
    end
    expect_load_error("negative", safetensors_bytes(one_tensor("F32", "[2, -1]", 0, 0)),
      "tensor 'w': dim 2 of \"shape\" is not a non-negative integer")
  end)

  it("two tensors of one name", function()
    expect_load_error("twice", safetensors_bytes('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
      .. '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', string.rep("\0", 8)),
      "header names two tensors 'a'")
  end)
end)

describe("tl.load wants the tensors to tile the data exactly", function()
  it("no hole before the first tensor or between two", function()
    expect_load_error("hole_first", safetensors_bytes(one_tensor("F32", "[1]", 4, 8), string.rep("\0", 8)),
      "the data begins with a hole of 4 bytes: its first tensor 'w' [4, 8] should begin at 0 "
        .. "(the tensors must tile the data)")
    expect_load_error("hole", safetensors_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
      .. '"b":{"dtype":"I32","shape":[1],"data_offsets":[12,16]}}', string.rep("\0", 16)),
      "a hole of 4 bytes between tensors 'a' [0, 8] and 'b' [12, 16] (the tensors must tile the data)")
  end)

  it("no bytes after the last tensor", function()
    expect_load_error("trailing", safetensors_bytes(one_tensor("F32", "[2]", 0, 8), string.rep("\0", 11)),
      "3 trailing bytes: the tensors end at byte 8 of the data, which has 11 bytes (the tensors must tile the data)")
    expect_load_error("nothing", safetensors_bytes("{}", "\0"),
      "1 trailing bytes: the tensors end at byte 0 of the data, which has 1 bytes (the tensors must tile the data)")
  end)

  it("no overlap, in whatever order the header lists them", function()
    expect_load_error("overlap", safetensors_bytes('{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},'
      .. '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', string.rep("\0", 12)),
      "tensors 'a' [0, 8] and 'b' [4, 12] overlap in the data")
    expect_load_error("inside", safetensors_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
      .. '"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}', string.rep("\0", 8)),
      "tensors 'a' [0, 8] and 'e' [4, 4] overlap in the data")
  end)

  it("files that tile load: any order, empty tensors, metadata, padding", function()
    local header = '{"z":{"dtype":"I16","shape":[2],"data_offsets":[12,16]},"__metadata__":{"k":"v"},'
      .. '"e":{"dtype":"F64","shape":[0,4],"data_offsets":[12,12]},'
      .. '"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},'
      .. '"m":{"dtype":"U8","shape":[2,2],"data_offsets":[8,12]}}'
    local data = string.pack("<d", -2.5) .. string.char(1, 2, 3, 255) .. string.pack("<i2<i2", -7, 300)
    write_file(dir .. "/good", safetensors_bytes(header, data))
    local t, metadata = tl.load(dir .. "/good")
    assert.are.same({ k = "v" }, metadata)
    assert.tensor_equal(tl.tensor({ -2.5 }, { dtype = "float64" }), t.a)
    assert.tensor_equal(tl.tensor({ { 1, 2 }, { 3, 255 } }, { dtype = "int32" }), t.m)
    assert.tensor_equal(tl.tensor({ -7, 300 }, { dtype = "int32" }), t.z)
    assert.are.same({ 0, 4 }, t.e.shape)
    -- and what tl.save writes tiles too: it loads back bit for bit
    tl.save(dir .. "/again", t, metadata)
    local back = tl.load(dir .. "/again")
    for name, v in pairs(t) do assert.tensor_equal(v, back[name], name) end
  end)
end)

describe("bool tensors loaded hold only 0 and 1", function()
  it("a BOOL byte 7 loads as true and sums to 1", function()
    local path = dir .. "/bool"
    write_file(path, safetensors_bytes(one_tensor("BOOL", "[4]", 0, 4), string.char(0, 7, 0, 0)))
    local t = tl.load(path).w
    assert.are.equal("bool", t.dtype)
    assert.are.same({ false, true, false, false }, t:totable())
    assert.are.equal(1, t:sum():item())
    -- the storage itself holds 1: saved again, the data byte is 1
    tl.save(dir .. "/saved", { w = t })
    local bytes = read_file(dir .. "/saved")
    assert.are.equal(string.char(0, 1, 0, 0), bytes:sub(-4))
    -- every byte value other than 0 is true
    local all = {}
    for b = 0, 255 do all[#all + 1] = string.char(b) end
    write_file(path, safetensors_bytes(one_tensor("BOOL", "[256]", 0, 256), table.concat(all)))
    assert.are.equal(255, tl.load(path).w:sum():item())
  end)
end)

describe("tl.data.read_idx refuses bad IDX files", function()
  it("dims whose element count or byte size overflows", function()
    expect_idx_error("four", idx_bytes(0x08, { 65536, 65536, 65536, 65536 }, "\0"),
      "shape [65536, 65536, 65536, 65536] has too many elements (at most 2^62, zero sizes counted as 1)")
    expect_idx_error("zero", idx_bytes(0x08, { 0, 4294967295, 4294967295, 4294967295 }),
      "shape [0, 4294967295, 4294967295, 4294967295] has too many elements (at most 2^62, zero sizes counted as 1)")
    expect_idx_error("bytes", idx_bytes(0x0E, { 2147483648, 2147483648 }, "\0"),
      "dims [2147483648, 2147483648] of float64 need more than 2^62 bytes of data")
    expect_idx_error("big", idx_bytes(0x0C, { 65536, 65536, 1024 }, "\0\0\0\0"),
      "dims [65536, 65536, 1024] of int32 need 17592186044416 bytes of data, the file has 4 (truncated?)")
  end)

  it("data cut short, plain or gzip", function()
    expect_idx_error("cut", idx_bytes(0x08, { 2, 3 }, "\1\2\3\4"),
      "dims [2, 3] of unsigned byte need 6 bytes of data, the file has 4 (truncated?)")
    expect_idx_error("dims", "\0\0\8\3\0\0\0\2", "file ends inside the dims: 3 dims need 12 bytes, found 4")
    -- gzip (the gzip tool, not the reader's zlib) cut inside its stream
    local plain = dir .. "/plain"
    write_file(plain, idx_bytes(0x08, { 200 }, string.rep("\7", 200)))
    assert.is_true(os.execute("gzip -n -c " .. sh_quote(plain) .. " > " .. sh_quote(plain .. ".gz")) == true)
    local gz = read_file(plain .. ".gz")
    assert.tensor_equal(tl.full({ 200 }, 7, { dtype = "int32" }), tl.data.read_idx(plain .. ".gz"))
    expect_idx_error("cut.gz", gz:sub(1, #gz - 4),
      "gzip data is truncated: the file ends inside the compressed stream")
  end)
end)
