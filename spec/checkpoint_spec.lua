-- Checkpoints: tl.save / tl.load in the safetensors format. Every dtype round-trips bit for bit,
-- module state dicts round-trip, files laid out as the format says load, broken files raise and
-- load nothing, and writes are atomic (also when the process dies mid-write).
local tl = require("tlua")
local nn = tl.nn

local files = require("helpers.files")
local sh_quote, write_file, read_file = files.sh_quote, files.write_file, files.read_file
local BIN, ROOT, safetensors_bytes = files.BIN, files.ROOT, files.safetensors_bytes

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function list_dir(dir)
  local names = {}
  local p = io.popen("ls -A " .. sh_quote(dir))
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  table.sort(names)
  return names
end

local dir
before_each(function() dir = files.make_temp_dir() end)
after_each(function() files.remove_dir(dir) end)

-- 1 / x distinguishes -0 from +0
local function signs(t)
  local out = {}
  for i, v in ipairs(t:double():view(-1):totable()) do
    if v ~= v then out[i] = "nan" elseif v == 0 then out[i] = 1 / v else out[i] = v end
  end
  return out
end

describe("tl.save / tl.load", function()
  it("round-trip every dtype bit for bit, special values included", function()
    local inf, nan = math.huge, 0 / 0
    local tensors = {
      f32 = tl.tensor({ 0.0, -0.0, inf, -inf, nan, 1e-45, 3.4028234663852886e38, -1.5, 0.1 }, { dtype = "float32" }),
      f64 = tl.tensor({ 0.0, -0.0, inf, -inf, nan, 5e-324, 1.7976931348623157e308, -1.5, 0.1 }, { dtype = "float64" }),
      bf16 = tl.tensor({ 0.0, -0.0, inf, -inf, nan, 1e-40, 3.0e38, -1.5, 0.1 }, { dtype = "bfloat16" }),
      f16 = tl.tensor({ 0.0, -0.0, inf, -inf, nan, 6e-8, 65504, -1.5, 0.1 }, { dtype = "float16" }),
      i32 = tl.tensor({ -2147483648, 2147483647, 0, -1, 7 }, { dtype = "int32" }),
      i64 = tl.tensor({ math.mininteger, math.maxinteger, 0, -1, 1 << 53 }, { dtype = "int64" }),
      bool = tl.tensor({ true, false, true }),
      scalar = tl.tensor(2.5, { dtype = "float64" }),
      empty = tl.zeros(0, 3),
      matrix = tl.randn(3, 4, 5),
      view = tl.arange(12):view(3, 4):transpose(1, 2), -- not contiguous: saved row-major
    }
    local path = dir .. "/all.safetensors"
    tl.save(path, tensors)
    local loaded, metadata = tl.load(path)
    assert.are.same({}, metadata)
    local names = {}
    for name in pairs(loaded) do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "bf16", "bool", "empty", "f16", "f32", "f64", "i32", "i64", "matrix", "scalar", "view" }, names)
    for name, t in pairs(tensors) do
      local got = loaded[name]
      assert.are.equal(t.dtype, got.dtype, name)
      assert.are.same(t.shape, got.shape, name)
      assert.are.equal("cpu", got.device)
      assert.tensor_equal(t, got, name)
      if t.dtype ~= "bool" and t:numel() > 0 then assert.are.same(signs(t), signs(got), name) end
    end
    -- saving what was loaded gives the same bytes: every bit (NaN payloads too) survived
    tl.save(dir .. "/again.safetensors", loaded)
    assert.are.equal(read_file(path), read_file(dir .. "/again.safetensors"))
  end)

  it("round-trip metadata (numbers and booleans as strings)", function()
    local path = dir .. "/meta.safetensors"
    tl.save(path, { w = tl.ones(2) }, { epoch = 3, lr = 0.5, note = "héllo \"quoted\"\n", best = true })
    local loaded, metadata = tl.load(path)
    assert.tensor_equal(tl.ones(2), loaded.w)
    assert.are.same({ epoch = "3", lr = "0.5", note = "héllo \"quoted\"\n", best = "true" }, metadata)
  end)

  it("write the layout of the format: header size, JSON header, little-endian data", function()
    local path = dir .. "/layout.safetensors"
    tl.save(path, { b = tl.tensor({ 1, 2 }, { dtype = "int32" }), a = tl.tensor({ 1.5, -2 }, { dtype = "float64" }) })
    local bytes = read_file(path)
    local n = string.unpack("<I8", bytes)
    assert.are.equal(0, n % 8)
    local header = bytes:sub(9, 8 + n)
    assert.matches('"a":{"dtype":"F64","shape":%[2%],"data_offsets":%[0,16%]}', header)
    assert.matches('"b":{"dtype":"I32","shape":%[2%],"data_offsets":%[16,24%]}', header)
    assert.are.equal(string.pack("<d<d<i4<i4", 1.5, -2, 1, 2), bytes:sub(9 + n))
  end)

  it("load files written as the reference implementation writes them", function()
    -- metadata first, tensors in any order, spaces after the JSON
    local header = '{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},' ..
      '"h":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},"u":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},' ..
      '"z":{"dtype":"BF16","shape":[],"data_offsets":[24,26]},"e":{"dtype":"BOOL","shape":[0],"data_offsets":[26,26]}}'
    local data = string.char(1, 2, 250, 255) .. string.pack("<I2<I2", 0x3C00, 0xC000) ..
      string.pack("<f<f<f<f", 1, 2, 3, 4) .. string.pack("<I2", 0x4049) -- bf16 3.140625
    write_file(dir .. "/ref.safetensors", safetensors_bytes(header, data))
    local t, metadata = tl.load(dir .. "/ref.safetensors")
    assert.are.same({ format = "pt" }, metadata)
    assert.tensor_equal(tl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }), t.w)
    assert.tensor_equal(tl.tensor({ 1, -2 }, { dtype = "float16" }), t.h)
    assert.tensor_equal(tl.tensor({ 1, 2, 250, 255 }, { dtype = "int32" }), t.u) -- U8 widened
    assert.tensor_equal(tl.tensor(3.140625, { dtype = "bfloat16" }), t.z)
    assert.are.same({ 0 }, t.e.shape)
    assert.are.equal("bool", t.e.dtype)
  end)

  it("round-trip a module's state_dict bit for bit", function()
    tl.manual_seed(1)
    local function net()
      return nn.Sequential(nn.Conv2d(1, 2, 3, { padding = 1 }), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3),
        nn.LayerNorm(3))
    end
    local a = net()
    local path = dir .. "/model.safetensors"
    tl.save(path, a:state_dict(), { epoch = 1 })
    tl.manual_seed(2)
    local b = net()
    local x = tl.randn(2, 1, 4, 4)
    assert.is_false(a(x):eq(b(x)):long():sum():item() == 6)
    local sd = tl.load(path)
    b:load_state_dict(sd)
    assert.tensor_equal(a(x), b(x))
    for name, t in pairs(a:state_dict()) do assert.tensor_equal(t, b:state_dict()[name], name) end
    -- and in float64
    a:double()
    tl.save(path, a:state_dict())
    local c = net():double()
    c:load_state_dict(tl.load(path))
    assert.tensor_equal(a(x:double()), c(x:double()))
  end)

  it("reject bad arguments before writing anything", function()
    local path = dir .. "/bad.safetensors"
    assert.error_matches(function() tl.save(path, { w = 3 }) end, { "save", "'w'", "tensor" })
    assert.error_matches(function() tl.save(path, { tl.ones(1) }) end, { "save", "names must be strings" })
    assert.error_matches(function() tl.save(path, "x") end, { "save", "table" })
    assert.error_matches(function() tl.save(0 / 0, { w = tl.ones(1) }) end, { "save", "argument 1", "path" })
    assert.error_matches(function() tl.load(1) end, { "load", "argument 1", "path" })
    assert.error_matches(function() tl.save(path, { w = tl.ones(1) }, { k = {} }) end, { "save", "metadata 'k'" })
    assert.error_matches(function() tl.save(path, { __metadata__ = tl.ones(1) }) end, { "__metadata__" })
    assert.are.same({}, list_dir(dir))
  end)
end)

describe("broken checkpoint files", function()
  local function good_file()
    local path = dir .. "/good.safetensors"
    tl.save(path, { a = tl.arange(10):double(), b = tl.ones(3, 3) }, { k = "v" })
    return path, read_file(path)
  end

  it("a truncated file raises naming it, at every cut", function()
    local _, bytes = good_file()
    local n = string.unpack("<I8", bytes)
    for _, cut in ipairs({ 0, 4, 8, 8 + n // 2, 8 + n, #bytes - 1 }) do
      local path = dir .. "/cut" .. cut
      write_file(path, bytes:sub(1, cut))
      local ok, err = pcall(tl.load, path)
      assert.is_false(ok, "cut at " .. cut)
      assert.matches(path, tostring(err), 1, true)
    end
  end)

  it("a corrupt header raises and loads nothing", function()
    local function expect_error(name, header, data, words)
      local path = dir .. "/" .. name
      write_file(path, safetensors_bytes(header, data or ""))
      local results = table.pack(pcall(tl.load, path))
      assert.is_false(results[1], name)
      assert.are.equal(2, results.n) -- false and the message: nothing else came back
      for _, w in ipairs(words) do assert.matches(w, tostring(results[2]), 1, true) end
    end
    expect_error("json", '{"a":{"dtype":"F32",', "", { "json" })
    expect_error("dtype", '{"a":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}}', string.rep("\0", 8), { "U64", "a" })
    expect_error("span", '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', string.rep("\0", 8), { "a" })
    expect_error("beyond", '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', string.rep("\0", 8), { "a" })
    expect_error("overlap", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' ..
      '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', string.rep("\0", 12), { "overlap" })
    -- a header size larger than the file
    write_file(dir .. "/huge", string.pack("<I8", 1 << 40) .. "{}")
    assert.error_matches(function() tl.load(dir .. "/huge") end, { dir .. "/huge" })
    assert.error_matches(function() tl.load(dir .. "/missing") end, { dir .. "/missing" })
  end)
end)

describe("atomic writes", function()
  it("a failed save leaves an existing checkpoint untouched and no temporary file", function()
    local path = dir .. "/ckpt.safetensors"
    tl.save(path, { w = tl.ones(4) })
    local before = read_file(path)
    assert.error_matches(function() tl.save(path, { w = tl.zeros(4), __metadata__ = tl.ones(1) }) end, { "__metadata__" })
    assert.are.equal(before, read_file(path))
    assert.error_matches(function() tl.save(dir .. "/no/such/dir/x.safetensors", { w = tl.ones(1) }) end,
      { dir .. "/no/such/dir/x.safetensors" })
    assert.are.same({ "ckpt.safetensors" }, list_dir(dir))
  end)

  -- The file size limit (ulimit -f) stops the write of a 4 MB checkpoint part way: with SIGXFSZ
  -- at its default the process dies mid-write (a crash), ignored the write fails with EFBIG.
  local function save_limited(path, trap)
    local script = string.format("tl.save(%q, { w = tl.ones(1000000), b = tl.zeros(7) })", path)
    local cmd = string.format("sh -c %s > %s 2>&1", sh_quote((trap and "trap '' XFSZ; " or "") ..
      "ulimit -f 64; exec " .. sh_quote(BIN) .. " -e " .. sh_quote(script)), sh_quote(dir .. "/log"))
    local ok = os.execute(cmd)
    return ok, read_file(dir .. "/log") or ""
  end

  it("a process killed mid-write never leaves a truncated file under the real name", function()
    assert.is_true(exists(BIN), "the tlua executable is needed: " .. BIN .. " (set TLUA_BIN)")
    local path = dir .. "/ckpt.safetensors"
    local ok = save_limited(path, false)
    assert.is_falsy(ok)
    assert.is_false(exists(path))
    -- an older checkpoint under that name survives the crash intact
    tl.save(path, { w = tl.ones(3) })
    local before = read_file(path)
    assert.is_falsy(save_limited(path, false))
    assert.are.equal(before, read_file(path))
    assert.tensor_equal(tl.ones(3), tl.load(path).w)
  end)

  it("a write that fails (disk full, file too large) raises and removes its temporary file", function()
    local path = dir .. "/ckpt.safetensors"
    tl.save(path, { w = tl.ones(3) })
    local before = read_file(path)
    local ok, log = save_limited(path, true)
    assert.is_falsy(ok)
    assert.matches(path, log, 1, true)
    assert.are.equal(before, read_file(path))
    assert.are.same({ "ckpt.safetensors", "log" }, list_dir(dir))
  end)
end)

describe("examples/fashion_mnist/train.lua", function()
  it("trains, reports test accuracy, writes the loss CSV and a checkpoint that loads", function()
    assert.is_true(exists(BIN), "the tlua executable is needed: " .. BIN .. " (set TLUA_BIN)")
    local ckpt = dir .. "/mlp.safetensors"
    local cmd = string.format("cd %s && TLUA_PROGRESS=plain %s %s --limit 2048 --epochs 2 --batch 64 --save %s > %s 2>&1",
      sh_quote(dir), sh_quote(BIN), sh_quote(ROOT .. "/examples/fashion_mnist/train.lua"), sh_quote(ckpt),
      sh_quote(dir .. "/log"))
    local ok = os.execute(cmd)
    local log = read_file(dir .. "/log") or ""
    assert.is_true(ok == true or ok == 0, log)
    local accuracy = tonumber(log:match("done: mlp, 2 epochs, test accuracy ([%d.]+)%%"))
    assert.is_not_nil(accuracy, log)
    assert.is_true(accuracy > 70, log) -- 2048 images, 2 epochs: about 78%
    assert.matches("epoch 2/2: train loss [%d.]+, train accuracy [%d.]+%%, test accuracy", log)
    -- one CSV row per batch (32 a epoch), next to the checkpoint
    local csv = read_file(dir .. "/fashion_mnist_loss.csv")
    local rows = {}
    for line in csv:gmatch("[^\n]+") do rows[#rows + 1] = line end
    assert.are.equal("epoch,batch,step,loss,accuracy", rows[1])
    assert.are.equal(1 + 64, #rows)
    assert.matches("^2,32,64,[%d.]+,[%d.]+$", rows[#rows])
    local sd, metadata = tl.load(ckpt)
    assert.are.same({ "2.bias", "2.weight", "4.bias", "4.weight", "6.bias", "6.weight" }, nn.keys(sd))
    assert.are.equal("mlp", metadata.model)
    local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
      nn.Linear(256, 10))
    model:load_state_dict(sd)
  end)

  it("rejects unknown options with the usage", function()
    local cmd = string.format("%s %s --modle cnn > %s 2>&1", sh_quote(BIN),
      sh_quote(ROOT .. "/examples/fashion_mnist/train.lua"), sh_quote(dir .. "/log"))
    local ok = os.execute(cmd)
    assert.is_falsy(ok == true or ok == 0)
    local log = read_file(dir .. "/log")
    assert.matches("unknown option --modle", log, 1, true)
    assert.matches("usage: tlua examples/fashion_mnist/train.lua", log, 1, true)
  end)
end)
