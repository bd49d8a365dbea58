-- The Lua face of tensors: operators with numbers, indexing, 1-based dims, __close/__gc,
-- tostring, item/totable types, argument errors; numbers checked against plain Lua.
local tl = require("tlua")

local function flat(t)
  local out = {}
  local function walk(x)
    if type(x) == "table" then for _, v in ipairs(x) do walk(v) end else out[#out + 1] = x end
  end
  walk(t:totable())
  return out
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("operators", function()
  local av, bv = { 1.5, -2, 4 }, { 0.5, 3, -1 }
  local a, b = tl.tensor(av, { dtype = "float64" }), tl.tensor(bv, { dtype = "float64" })

  it("+ - * / ^ and unary - match Lua arithmetic, numbers on either side", function()
    local cases = {
      { a + b, function(i) return av[i] + bv[i] end },
      { a - b, function(i) return av[i] - bv[i] end },
      { a * b, function(i) return av[i] * bv[i] end },
      { a / b, function(i) return av[i] / bv[i] end },
      { a + 2, function(i) return av[i] + 2 end },
      { 2 - a, function(i) return 2 - av[i] end },
      { 3 * a, function(i) return 3 * av[i] end },
      { 1 / a, function(i) return 1 / av[i] end },
      { a ^ 2, function(i) return av[i] ^ 2 end },
      { 2 ^ a, function(i) return 2 ^ av[i] end },
      { -a, function(i) return -av[i] end },
    }
    for k, case in ipairs(cases) do
      local got = flat(case[1])
      for i = 1, #av do
        assert.is_true(math.abs(got[i] - case[2](i)) <= 1e-12, "case " .. k .. " element " .. i)
      end
    end
  end)

  it("keeps an integer tensor's dtype with Lua integers and gives float32 with floats", function()
    local n = tl.tensor({ 1, 2, 3 })
    assert.are.equal("int64", n.dtype)
    assert.are.equal("int64", (n + 2).dtype)
    assert.are.equal("int64", (2 * n).dtype)
    assert.are.equal("float32", (n + 0.5).dtype)
    assert.are.equal("float64", (a + 2).dtype)
    assert.are.same({ 3, 4, 5 }, (n + 2):totable())
  end)

  it("broadcasts", function()
    local m = tl.ones(2, 3) + tl.tensor({ 1, 2, 3 }, { dtype = "float32" })
    assert.are.same({ { 2, 3, 4 }, { 2, 3, 4 } }, m:totable())
  end)

  it("raises for a string operand, naming the op and the argument", function()
    local err = error_of(function() return a + "x" end)
    assert.matches("add: argument 2 expected a tensor or a number, got string", err, 1, true)
    assert.matches("lua_face_spec.lua:%d+:", err)
  end)

  it("number arguments as luaL_argerror does: from the first after self in a method call", function()
    -- Lua's own: ("x"):rep({}) is "bad argument #1 to 'rep'", string.rep("x", {}) "#2"
    assert.matches("bad argument #1 to 'rep'", error_of(function() return ("x"):rep({}) end), 1, true)
    assert.matches("bad argument #2 to 'rep'", error_of(function() return string.rep("x", {}) end), 1, true)
    assert.matches("add: argument 1 expected a tensor or a number, got string",
      error_of(function() return a:add("x") end), 1, true)
    assert.matches("add: argument 2 expected a tensor or a number, got string",
      error_of(function() return tl.add(a, "x") end), 1, true)
    assert.matches("sum: argument 1 expected a dim (an integer), got string",
      error_of(function() return a:sum("x") end), 1, true)
    assert.matches("sum: argument 2 expected a dim (an integer), got string",
      error_of(function() return tl.sum(a, "x") end), 1, true)
    assert.matches("narrow: argument 2 (an index) expected an integer, got string",
      error_of(function() return a:narrow(1, "x", 1) end), 1, true)
    assert.matches("view: unexpected argument 3 (number) after the options table",
      error_of(function() return a:view(3, {}, 1) end), 1, true)
    -- a method called on an object that is not a tensor names self, as "calling 'f' on bad self"
    local not_tensor = { sum = tl.sum }
    assert.matches("sum: self expected a tensor, got table", error_of(function() return not_tensor:sum() end), 1, true)
  end)
end)

describe("indexing", function()
  it("t[i] on a 1-D tensor gives a Lua value of the dtype's kind", function()
    local f = tl.tensor({ 1.5, 2.5 })
    local n = tl.tensor({ 7, 8 })
    local b = tl.tensor({ true, false })
    assert.are.equal(2.5, f[2])
    assert.are.equal("float", math.type(f[1]))
    assert.are.equal(8, n[-1])
    assert.are.equal("integer", math.type(n[1]))
    assert.are.equal(true, b[1])
    assert.are.equal(false, b[-1])
  end)

  it("t[i] on an n-D tensor is a view along dim 1 that writes through", function()
    local t = tl.zeros(2, 3)
    local row = t[2]
    assert.are.same({ 3 }, row.shape)
    row[3] = 5
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 5 } }, t:totable())
  end)

  it("t[i] = number fills the slice, t[i] = tensor copies (broadcast) into it", function()
    local t = tl.zeros(2, 3, { dtype = "int64" })
    t[1] = 4
    t[-1] = tl.tensor({ 1, 2, 3 })
    assert.are.same({ { 4, 4, 4 }, { 1, 2, 3 } }, t:totable())
    t[2] = tl.tensor({ 9 })
    assert.are.same({ 9, 9, 9 }, t[2]:totable())
  end)

  it("raises on index 0, out of range, non-integer keys and 0-dim tensors", function()
    local t = tl.zeros(3)
    assert.matches("indices count from 1", error_of(function() return t[0] end))
    assert.matches("index 4 is out of range for dim 1 of size 3", error_of(function() return t[4] end))
    assert.matches("index %-4 is out of range", error_of(function() t[-4] = 1 end))
    assert.matches("got 1.5", error_of(function() return t[1.5] end))
    assert.matches("0%-dim", error_of(function() return tl.tensor(1)[1] end))
    assert.matches("cannot assign a string", error_of(function() t[1] = "x" end))
  end)

  it("#t is the size of dim 1", function()
    assert.are.equal(4, #tl.zeros(4, 2))
    assert.matches("0%-dim", error_of(function() return #tl.tensor(2) end))
  end)
end)

describe("1-based dims and indices", function()
  local t = tl.tensor({ { 1, 9, 3 }, { 8, 2, 7 } }, { dtype = "float32" })

  it("reduce along dim 1 and dim -1", function()
    assert.are.same({ 9, 11, 10 }, t:sum(1):totable())
    assert.are.same({ 13, 17 }, t:sum(-1):totable())
    assert.are.same({ { 13 }, { 17 } }, t:sum(2, true):totable())
    assert.are.equal(3, t:size(2))
    assert.are.equal(2, t:size(-2))
  end)

  it("argmax, max(dim) and min(dim) give 1-based indices", function()
    assert.are.equal(2, t:argmax():item())
    assert.are.same({ 2, 1 }, t:argmax(2):totable())
    local values, indices = t:max(1)
    assert.are.same({ 8, 9, 7 }, values:totable())
    assert.are.same({ 2, 1, 2 }, indices:totable())
    local _, imin = t:min(2, true)
    assert.are.same({ { 1 }, { 2 } }, imin:totable())
    -- an index from argmax indexes the tensor directly
    local row = t[1]
    assert.are.equal(9, row[row:argmax():item()])
  end)

  it("randperm(n) is a permutation of 1..n", function()
    local seen = {}
    for _, v in ipairs(tl.randperm(10):totable()) do seen[v] = true end
    for i = 1, 10 do assert.is_true(seen[i]) end
  end)

  it("rejects dim 0 and dims out of range", function()
    assert.matches("dim 0 is out of range: dims count from 1", error_of(function() return t:sum(0) end))
    assert.matches("sum: dim 3 is out of range", error_of(function() return t:sum(3) end))
    assert.matches("dim %-3 is out of range", error_of(function() return t:transpose(1, -3) end))
  end)

  it("views take 1-based dims", function()
    assert.are.same({ 3, 2 }, t:transpose(1, 2).shape)
    assert.are.same({ { 9, 3 }, { 2, 7 } }, t:narrow(2, 2, 2):totable())
    assert.are.same({ 3, 7 }, t:select(2, -1):totable())
    assert.are.same({ 2, 1, 3 }, t:unsqueeze(2).shape)
    assert.are.same({ 3, 2 }, t:permute(2, 1).shape)
    assert.are.same({ 6 }, t:flatten().shape)
  end)
end)

describe("shapes and options", function()
  it("accept varargs or a table, then options", function()
    assert.are.same({ 2, 3 }, tl.zeros(2, 3).shape)
    assert.are.same({ 2, 3 }, tl.zeros({ 2, 3 }).shape)
    assert.are.equal("float64", tl.zeros(2, 3, { dtype = "float64" }).dtype)
    assert.are.equal("int64", tl.ones({ 2 }, { dtype = tl.long }).dtype)
    assert.are.same({}, tl.zeros().shape)
    assert.are.equal("cpu", tl.zeros(1).device)
  end)

  it("reject bad sizes, dtypes and options with clear messages", function()
    assert.matches("zeros: size of dim 1 must be >= 0, got %-1", error_of(tl.zeros, -1))
    assert.matches("unknown dtype 'floot'", error_of(tl.zeros, 2, { dtype = "floot" }))
    assert.matches("unknown option 'dtpye'", error_of(tl.zeros, 2, { dtpye = "float64" }))
    assert.matches("expected at most 16 dims", error_of(tl.zeros, { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }))
    assert.matches("ragged", error_of(tl.tensor, { { 1, 2 }, { 3 } }))
  end)
end)

describe("item and totable", function()
  it("give floats for float dtypes, integers for integer dtypes, booleans for bool", function()
    assert.are.equal("float", math.type(tl.tensor(3.0):item()))
    assert.are.equal("float", math.type(tl.tensor({ 1, 2 }, { dtype = "float64" }):totable()[1]))
    assert.are.equal("integer", math.type(tl.tensor(3):item()))
    assert.are.equal("integer", math.type(tl.tensor({ 1, 2 }, { dtype = "int32" }):totable()[2]))
    assert.are.equal(true, tl.tensor(true):item())
    assert.are.same({ { true }, { false } }, tl.tensor({ { true }, { false } }):totable())
    assert.are.equal(5, tl.tensor(5):totable())
  end)

  it("infer dtypes in tl.tensor", function()
    assert.are.equal("int64", tl.tensor({ 1, 2 }).dtype)
    assert.are.equal("float32", tl.tensor({ 1, 2.5 }).dtype)
    assert.are.equal("bool", tl.tensor({ true }).dtype)
    assert.are.equal("float32", tl.tensor({}).dtype)
  end)
end)

describe("lifetime", function()
  it("__close and __gc release once and are safe to run twice", function()
    local t = tl.ones(3)
    local mt = getmetatable(t)
    mt.__close(t)
    mt.__close(t)
    mt.__gc(t)
    assert.is_true(tl.is_released(t))
    assert.matches("released", tostring(t))
    assert.matches("add: argument 1 is a tensor that was already released", error_of(function() return t + 1 end))
  end)

  it("a <close> variable releases at the end of its scope", function()
    local keep
    do
      local t <close> = tl.ones(2)
      keep = t
    end
    assert.is_true(tl.is_released(keep))
  end)

  it("a view outlives the tensor it came from", function()
    local base = tl.tensor({ 1, 2, 3 })
    local view = base:narrow(1, 2, 2)
    getmetatable(base).__close(base)
    collectgarbage()
    assert.are.same({ 2, 3 }, view:totable())
  end)

  -- The tensor memory in use (MB) at its highest over n iterations of body (Lua source of a
  -- function of i, after the setup source), above what was in use before, under the collector
  -- mode: in a fresh tlua process, so that the collector's pacing starts from a known state.
  local function tensor_peak_mb(mode, n, setup, body)
    local files = require("helpers.files")
    local script = string.format([[
      collectgarbage(%q)
      collectgarbage()
      %s
      local base = tl.memory_stats("cpu").allocated
      local peak = 0
      local step = function(i) %s end
      for i = 1, %d do
        step(i)
        peak = math.max(peak, (tl.memory_stats("cpu").allocated - base) / 2 ^ 20)
      end
      print(peak)]], mode, setup, body, n)
    local pipe = io.popen(files.sh_quote(files.BIN) .. " -e " .. files.sh_quote(script) .. " 2>&1")
    local out = pipe:read("a")
    pipe:close()
    return assert(tonumber(out), out)
  end

  for _, mode in ipairs({ "generational", "incremental" }) do
    it("frees big temporaries at the pace of their memory, not of the Lua heap (" .. mode .. ")", function()
      -- 8 MB of garbage per iteration, 800 MB in all; x is 4 MB
      local peak = tensor_peak_mb(mode, 100, "local x = tl.ones(1000, 1000)", "local y = (x + 1) * 2 return y")
      -- what the young collections leave (a quarter of what is live), and in the generational
      -- mode what aged before a full collection (tensor_object.c: 64 MB over what the last one left)
      assert.is_true(peak < 100, string.format("tensor memory reached %.0f MB", peak))
    end)
  end

  it("frees dead tensors that aged into the old generation by a full collection", function()
    -- tensors held across young collections (a list refilled every 20 iterations) grow old before
    -- they die; only a full collection frees them, and tensor memory must bring one on
    local peak = tensor_peak_mb("generational", 400, "local x, held = tl.ones(1000, 1000), {}",
      "held[i % 20 + 1] = x + i") -- 4 MB each, 1.6 GB in all
    assert.is_true(peak < 250, string.format("tensor memory reached %.0f MB", peak))
  end)

  it("__name is tlua.Tensor", function()
    assert.are.equal("tlua.Tensor", getmetatable(tl.ones(1)).__name)
  end)
end)

describe("tostring", function()
  it("prints integers without decimals, bools as true/false, and a trailer", function()
    local s = tostring(tl.tensor({ { 1, 20 }, { 3, 4 } }))
    assert.are.equal("[[ 1, 20],\n [ 3,  4]]\n[int64 tensor of shape [2, 2] on cpu]", s)
    assert.matches("%[ true, false%]", tostring(tl.tensor({ true, false })))
    assert.matches("%[float32 tensor of shape %[3%] on cpu%]", tostring(tl.tensor({ 0.5, 1, 2 })))
    assert.matches("0%.5000", tostring(tl.tensor({ 0.5, 1, 2 })))
  end)

  it("elides the middle of big tensors, showing 3 elements at each end", function()
    local s = tostring(tl.arange(5000))
    assert.matches("%[%s*0,%s*1,%s*2,%s*%.%.%.,%s*4997,%s*4998,%s*4999%]", s)
    local lines = 0
    for _ in tostring(tl.zeros(100, 100)):gmatch("\n") do lines = lines + 1 end
    assert.is_true(lines < 12)
    assert.is_nil(tostring(tl.arange(1000)):find("...", 1, true))
  end)
end)

describe("robustness", function()
  it("never crashes on random arguments to any function", function()
    local closed = tl.ones(2)
    getmetatable(closed).__close(closed)
    local pool = table.pack(nil, 0, -1, 1, 2, 2.5, -7, 1e300, 0 / 0, math.huge, "x", "float64", true, false,
      {}, { 2, 3 }, { { 1 } }, { dtype = "int32" }, tl.tensor(3.5), tl.ones(2, 3), tl.tensor({ 1, 2 }),
      tl.tensor({ true }), tl.zeros(0, 3), closed, print)
    local skip = { set_num_threads = true, trace = true, no_grad = true, enable_grad = true,
      set_grad_enabled = true, manual_seed = true, custom_function = true,
      -- these write files or change global state
      save = true, set_matmul_precision = true, _cuda_empty_cache = true, _cuda_set_device = true,
      _set_cudnn_enabled = true, set_sync_checks = true, _autocast_set = true, set_rng_state = true,
      -- this one connects to a store (and waits for it)
      _dist_new_group = true }
    local seed = 12345
    local function rand(n)
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % n + 1
    end
    local fns = {}
    local function collect(from, label)
      local names = {}
      for name, fn in pairs(from) do
        if type(fn) == "function" and not skip[name] then names[#names + 1] = name end
      end
      table.sort(names)
      for _, name in ipairs(names) do fns[#fns + 1] = { label .. name, from[name] } end
    end
    collect(tl, "tl.")
    collect(tl.Tensor, "Tensor:")
    collect(getmetatable(tl.ones(1)), "metatable.")
    for _, entry in ipairs(fns) do
      for _ = 1, 60 do
        local args, n = {}, rand(4) - 1
        for i = 1, n do args[i] = pool[rand(pool.n)] end
        pcall(entry[2], table.unpack(args, 1, n))
      end
    end
    assert.is_true(tl.is_grad_enabled())
  end)
end)

describe("runtime", function()
  it("trace ends and re-raises when fn errors, and returns fn's results", function()
    local err = error_of(tl.trace, function() error("inside trace") end)
    assert.matches("inside trace", err)
    local events, value = tl.trace(function() return 42 end)
    assert.are.same({}, events)
    assert.are.equal(42, value)
  end)

  it("no_grad restores the grad mode when fn errors", function()
    pcall(tl.no_grad, function() error("x") end)
    assert.is_true(tl.is_grad_enabled())
  end)

  it("methods added to tl.Tensor from Lua are available on tensors", function()
    tl.Tensor.twice = function(self) return self * 2 end
    assert.are.same({ 2, 4 }, tl.tensor({ 1, 2 }):twice():totable())
    tl.Tensor.twice = nil
  end)
end)
