-- Bad calls: each raises a Lua error whose message names the op and the
-- specifics (expected vs got), and the engine keeps working afterwards.
local tl = require("tlua")
local files_read = require("helpers.files").read_file

-- a small computation whose result is known: the engine still works
local function still_works()
  local a = tl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
  local r = (a:matmul(a) + 1):sum():item() -- [[7,10],[15,22]] + 1 -> 58
  assert.equal(58, r)
  local z = tl.zeros(3)
  z[2] = 5
  assert.same({ 0, 5, 0 }, z:totable())
end

-- { description, function that must fail, plain substrings the message must contain }
local CASES = {
  -- an op made of others names itself, not the op that failed inside it (tl_error_as)
  { "rand_like of an integer tensor", function() return tl.rand_like(tl.ones(2, { dtype = "int64" })) end,
    { "rand_like: expected a floating dtype" } },
  { "full with a value int32 cannot hold", function() return tl.full({ 2 }, 1e10, { dtype = "int32" }) end,
    { "full: value 1e+10 cannot be converted to int32" } },
  { "arange of more elements than one tensor may hold", function() return tl.arange(0, 1, 1e-12) end,
    { "arange: cannot allocate" } },
  { "stack along a dim out of range", function() return tl.stack({ tl.ones(2), tl.ones(2) }, 4) end,
    { "stack: dim 4 is out of range" } },
  { "std_mean of an integer tensor", function() return tl.std_mean(tl.ones(2, { dtype = "int64" })) end,
    { "std_mean: expected a floating dtype" } },
  { "add of non-broadcastable shapes (operator)",
    function() return tl.ones(2, 3) + tl.ones(4) end, { "add", "[2, 3]", "[4]" } },
  { "mul of non-broadcastable shapes (function)",
    function() return tl.mul(tl.ones(2, 3), tl.ones(3, 2)) end, { "mul", "[2, 3]", "[3, 2]" } },
  { "comparison of non-broadcastable shapes",
    function() return tl.ones(2):lt(tl.ones(3)) end, { "lt", "[2]", "[3]" } },
  { "matmul with mismatched inner sizes",
    function() return tl.ones(2, 3):matmul(tl.ones(4, 5)) end, { "matmul", "[2, 3]", "[4, 5]" } },
  { "matmul with non-broadcastable batch dims",
    function() return tl.ones(2, 3, 4):matmul(tl.ones(3, 4, 5)) end, { "matmul", "[2, 3, 4]", "[3, 4, 5]" } },
  { "matmul with a 0-dim operand",
    function() return tl.matmul(tl.tensor(2.0), tl.ones(2)) end, { "matmul", "dim" } },
  { "view that needs a copy",
    function() return tl.ones(2, 3):transpose(1, 2):view(6) end, { "view", "[3, 2]", "reshape" } },
  { "view to a different number of elements",
    function() return tl.ones(6):view(4) end, { "view", "[6]", "4" } },
  { "reshape with two -1",
    function() return tl.ones(6):reshape(-1, -1) end, { "reshape", "-1" } },
  { "narrow beyond the end",
    function() return tl.ones(4):narrow(1, 3, 3) end, { "narrow", "3", "size 4" } },
  { "select index out of range (1-based message)",
    function() return tl.ones(2, 3):select(2, 4) end, { "select", "index 4", "size 3", "1 to 3" } },
  { "select index 0",
    function() return tl.ones(3):select(1, 0) end, { "select", "0" } },
  { "dim 3 of a 2-D tensor",
    function() return tl.ones(2, 3):sum(3) end, { "sum", "dim 3", "2 dims" } },
  { "dim 0",
    function() return tl.ones(2, 3):mean(0) end, { "mean", "dim 0" } },
  { "transpose with a dim out of range",
    function() return tl.ones(2, 3):transpose(1, -3) end, { "transpose", "-3", "2 dims" } },
  { "unsqueeze beyond ndim + 1",
    function() return tl.ones(2):unsqueeze(4) end, { "unsqueeze", "4" } },
  { "unknown dtype string",
    function() return tl.zeros(2, { dtype = "float8" }) end, { "zeros", "float8" } },
  { "unknown dtype in to()",
    function() return tl.ones(2):to("float128") end, { "float128" } },
  { "unknown device string",
    function() return tl.zeros(2, { device = "tpu" }) end, { "zeros", "tpu" } },
  { "unknown option key",
    function() return tl.zeros(2, { dtyp = "float64" }) end, { "zeros", "dtyp" } },
  { "a string where a tensor is expected",
    function() return tl.exp("abc") end, { "exp", "string" } },
  { "nil as the second operand",
    function() return tl.add(tl.ones(2), nil) end, { "add", "nil" } },
  { "a table as an operand",
    function() return tl.ones(2):mul({ 1, 2 }) end, { "mul", "table" } },
  { "a string with an operator",
    function() return tl.ones(2) - "x" end, { "sub", "string" } },
  { "a string as a shape size",
    function() return tl.zeros(2, "3") end, { "zeros", "string" } },
  { "a string as a dim",
    function() return tl.ones(2, 2):sum("x") end, { "sum", "string" } },
  { "a string exponent",
    function() return tl.ones(2):pow("a") end, { "pow", "string" } },
  { "a string clamp bound",
    function() return tl.ones(2):clamp("lo", 1) end, { "clamp", "string" } },
  { "item() of a multi-element tensor",
    function() return tl.ones(2, 2):item() end, { "item", "[2, 2]", "4" } },
  { "mean of an int tensor",
    function() return tl.tensor({ 1, 2, 3 }):mean() end, { "mean", "int64" } },
  { "softmax of an int tensor",
    function() return tl.tensor({ 1, 2, 3 }):softmax(1) end, { "softmax", "int64" } },
  { "max of an empty tensor",
    function() return tl.zeros(0):max() end, { "max", "[0]" } },
  { "expand of a non-1 dim",
    function() return tl.ones(2, 3):expand(4, 3) end, { "expand", "2", "4" } },
  { "expand to fewer dims",
    function() return tl.ones(2, 3):expand(3) end, { "expand", "[2, 3]" } },
  { "permute with a repeated dim",
    function() return tl.ones(2, 3):permute(1, 1) end, { "permute", "1", "twice" } },
  { "permute with the wrong number of dims",
    function() return tl.ones(2, 3, 4):permute(1, 2) end, { "permute", "3", "2" } },
  { "negative size",
    function() return tl.zeros(2, -1) end, { "zeros", "-1" } },
  { "t[0] on a 1-D tensor",
    function() return tl.ones(4)[0] end, { "index 0" } },
  { "t[5] on a size-4 tensor",
    function() return tl.ones(4)[5] end, { "5", "size 4" } },
  { "t[-5] on a size-4 tensor",
    function() return tl.ones(4)[-5] end, { "-5", "size 4" } },
  { "t[5] = v on a size-4 tensor",
    function() local t = tl.ones(4); t[5] = 1 end, { "5", "size 4" } },
  { "t[i] with a fractional index",
    function() return tl.ones(4)[1.5] end, { "1.5" } },
  { "assigning a string into t[i]",
    function() local t = tl.ones(4); t[1] = "x" end, { "string" } },
  { "arange with a zero step",
    function() return tl.arange(0, 10, 0) end, { "arange", "step" } },
  { "linspace with negative steps",
    function() return tl.linspace(0, 1, -2) end, { "linspace", "-2" } },
  { "eye with a negative size",
    function() return tl.eye(-1) end, { "eye", "-1" } },
  { "randint with high <= low",
    function() return tl.randint(5, 5, { 3 }) end, { "randint", "5" } },
  { "randint with high < low",
    function() return tl.randint(5, 2, { 3 }) end, { "randint", "5", "2" } },
  { "randperm of a negative n",
    function() return tl.randperm(-3) end, { "randperm", "-3" } },
  { "set_num_threads(0)",
    function() return tl.set_num_threads(0) end, { "set_num_threads", "0" } },
  { "tl.tensor of ragged nested tables",
    function() return tl.tensor({ { 1, 2 }, { 3 } }) end, { "tensor", "ragged", "2", "1" } },
  { "tl.tensor with a string element",
    function() return tl.tensor({ 1, "x", 3 }) end, { "tensor", "string" } },
  { "tl.tensor of a string",
    function() return tl.tensor("abc") end, { "tensor", "string" } },
  { "too many dims (17)",
    function()
      local shape = {}
      for i = 1, 17 do shape[i] = 1 end
      return tl.zeros(shape)
    end, { "zeros", "16", "17" } },
  { "copy_ with a non-broadcastable source",
    function() return tl.zeros(2, 3):copy_(tl.ones(4)) end, { "copy", "[2, 3]", "[4]" } },
  { "where with a non-bool condition",
    function() return tl.where(tl.ones(2), tl.ones(2), tl.zeros(2)) end, { "where", "bool", "float32" } },
  { "where with non-broadcastable branches",
    function() return tl.where(tl.ones(2):gt(0), tl.ones(2), tl.zeros(3)) end, { "where", "[2]", "[3]" } },
  { "softmax dim out of range",
    function() return tl.ones(2, 3):softmax(3) end, { "softmax", "3", "2 dims" } },
  { "log_softmax dim out of range",
    function() return tl.ones(2, 3):log_softmax(-3) end, { "log_softmax", "-3" } },
  { "max(dim) out of range",
    function() return tl.ones(2, 3):max(5) end, { "max", "5" } },
  { "size(d) out of range",
    function() return tl.ones(2, 3):size(3) end, { "size", "3" } },
  { "setting a read-only field",
    function() local t = tl.ones(2); t.shape = { 2 } end, { "shape" } },
  { "fill_ with a string",
    function() return tl.ones(2):fill_("x") end, { "fill_", "string" } },
}

describe("bad calls raise errors that name the op and the specifics", function()
  it("has at least 30 distinct cases", function()
    assert.is_true(#CASES >= 30, #CASES .. " cases")
  end)

  for _, c in ipairs(CASES) do
    it(c[1], function()
      assert.error_matches(c[2], c[3])
      still_works()
    end)
  end
end)

describe("errors leave things as they were", function()
  it("t[-1] works where t[0] and t[5] fail", function()
    local t = tl.tensor({ 1, 2, 3, 4 })
    assert.equal(4, t[-1])
    assert.equal(1, t[-4])
    t[-1] = 40
    assert.same({ 1, 2, 3, 40 }, t:totable())
  end)

  it("a failed copy_ does not write into the destination", function()
    local dst = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.error_matches(function() dst:copy_(tl.ones(4)) end, { "copy" })
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, dst:totable())
  end)

  it("a failed t[i] = v does not write", function()
    local t = tl.tensor({ { 1, 2 }, { 3, 4 } })
    assert.error_matches(function() t[1] = tl.ones(3) end, { "[2]", "[3]" })
    assert.same({ { 1, 2 }, { 3, 4 } }, t:totable())
  end)

  it("the operands of a failed op are unchanged and usable", function()
    local a, b = tl.tensor({ 1.5, 2.5 }), tl.tensor({ 1, 2, 3 })
    assert.error_matches(function() return a + b end, { "add" })
    assert.same({ 1.5, 2.5 }, a:totable())
    assert.same({ 2.5, 4.5 }, (a + tl.tensor({ 1, 2 })):totable())
  end)

  it("survives many errors in a row (nothing accumulates)", function()
    for i = 1, 2000 do
      local ok = pcall(function() return tl.ones(2, 3) + tl.ones(i % 5 + 4) end)
      assert.is_false(ok)
    end
    collectgarbage()
    still_works()
  end)

end)

describe("devices", function()
  it("cuda: either a working cuda tensor or an error saying cuda is not available", function()
    local ok, res = pcall(function() return tl.zeros(2, { device = "cuda" }) end)
    if ok then
      assert.equal("cuda:0", res.device)
      assert.same({ 0, 0 }, res:to("cpu"):totable())
    else
      local msg = tostring(res)
      assert.truthy(msg:find("cuda", 1, true), msg)
      assert.truthy(msg:find("not available", 1, true) or msg:find("no CUDA", 1, true)
        or msg:find("does not exist", 1, true), msg)
    end
    still_works()
  end)

  it("cuda:99 does not exist", function()
    assert.error_matches(function() return tl.zeros(2, { device = "cuda:99" }) end, { "cuda" })
    still_works()
  end)

  it("t:cuda(index) takes an integer >= 0 and nothing else", function()
    local t = tl.ones(2)
    assert.error_matches(function() return t:cuda(1.5) end,
      { "cuda: expected a device index (an integer >= 0), got 1.5" })
    assert.error_matches(function() return t:cuda("x") end,
      { "cuda: expected a device index (an integer >= 0), got string" })
    assert.error_matches(function() return t:cuda(-1) end,
      { "cuda: expected a device index (an integer >= 0), got -1" })
    assert.error_matches(function() return t:cuda(t) end,
      { "cuda: expected a device index (an integer >= 0), got a tensor" })
    assert.error_matches(function() return t:cuda(0, true) end,
      { "cuda: expected t:cuda(index?), got 2 arguments after the tensor" })
    local ok, err = pcall(function() return t:cuda(1.5) end)
    assert.is_false(ok)
    assert.matches("^spec/errors_spec%.lua:%d+: cuda: ", err)
    -- a valid index goes on to the device check (or the move, with a GPU)
    local moved, res = pcall(function() return t:cuda(0) end)
    if moved then assert.equal("cuda:0", res.device) else assert.truthy(tostring(res):find("cuda:0", 1, true), res) end
    still_works()
  end)
end)

describe("names tl and tl.nn do not have", function()
  it("raise \"tl.X does not exist\" with the closest names, at the line that asked", function()
    assert.error_matches(function() return tl.cta end, { "tl.cta does not exist", "did you mean tl.cat" })
    assert.error_matches(function() return tl.zeross end, { "tl.zeross does not exist", "did you mean tl.zeros" })
    assert.error_matches(function() return tl.nn.Linaer end, { "tl.nn.Linaer does not exist", "did you mean tl.nn.Linear" })
    assert.error_matches(function() return tl.optimm end, { "tl.optimm does not exist", "tl.optim" })
    local ok, err = pcall(function() return tl.xyzzy end)
    assert.is_false(ok)
    assert.matches("^spec/errors_spec%.lua:%d+: tl%.xyzzy does not exist$", err)
  end)

  it("leave rawget probes, submodules and existing names as they were", function()
    assert.is_nil(rawget(tl, "xyzzy"))
    assert.is_nil(rawget(tl.nn, "Xyzzy"))
    assert.is_table(tl.optim)
    assert.is_function(tl.cat)
    assert.is_table(tl.nn.Linear)
    still_works()
  end)
end)

describe("errors raised in tlua's Lua modules", function()
  -- each call fails inside a Lua module (nn, optim, data, autograd, the class helper); the
  -- message names the module and the position is the line of this spec that called it
  local CALLS = {
    { "nn.MoE", function() return tl.nn.MoE(0, 4, 2) end },
    { "nn.Linear", function() return tl.nn.Linear(0, 2) end },
    { "nn.Sequential", function() return tl.nn.Sequential(5) end },
    { "optim.SGD", function() return tl.optim.SGD({ tl.ones(2) }, { lr = -1 }) end },
    { "clip_grad_norm", function() return tl.optim.clip_grad_norm({ tl.ones(2) }, -1) end },
    { "data.read_idx", function() return tl.data.read_idx(5) end },
    { "gradcheck", function() return tl.autograd.gradcheck(5, {}) end },
    { "load_state_dict", function() return tl.nn.Linear(2, 2):load_state_dict(5) end },
  }
  for _, call in ipairs(CALLS) do
    it(call[1] .. " raises at the caller's line, naming itself", function()
      local ok, err = pcall(call[2])
      assert.is_false(ok)
      assert.matches("^spec/errors_spec%.lua:%d+: ", tostring(err))
      assert.truthy(tostring(err):find(call[1], 1, true), err)
    end)
  end

  -- the arguments of the call whose "(" is at text[open] (strings and comments skipped), as text
  local function call_arguments(text, open)
    local depth, k, start, args = 0, open, open + 1, {}
    while k <= #text do
      local c = text:sub(k, k)
      if c == '"' or c == "'" then
        k = k + 1
        while text:sub(k, k) ~= c do k = k + (text:sub(k, k) == "\\" and 2 or 1) end
      elseif text:sub(k, k + 1) == "--" then
        k = text:find("\n", k, true) - 1
      elseif c == "(" or c == "{" or c == "[" then
        depth = depth + 1
      elseif c == ")" or c == "}" or c == "]" then
        depth = depth - 1
        if depth == 0 then args[#args + 1] = text:sub(start, k - 1) return args end
      elseif c == "," and depth == 1 then
        args[#args + 1] = text:sub(start, k - 1)
        start = k + 1
      end
      k = k + 1
    end
    return args
  end

  it("give no hand-counted levels: each raises through options.error (level 0 re-raises excepted)", function()
    local p = assert(io.popen("find bindings/lua/tlua -name '*.lua' ! -name options.lua ! -name sandbox.lua"))
    local raw = {}
    for path in p:lines() do
      local text = assert(files_read(path))
      for before, open in text:gmatch("()error()%(") do
        local previous = before > 1 and text:sub(before - 1, before - 1) or ""
        local line_start = text:sub(1, before):match(".*\n()") or 1
        local is_comment = text:sub(line_start, before):find("--", 1, true)
          or select(2, text:sub(line_start, before):gsub('"', "")) % 2 == 1 -- inside a string
        if not previous:match("[%w_.:]") and not is_comment and text:sub(before - 9, before - 1) ~= "function " then
          local args = call_arguments(text, open)
          local level = args[2] and args[2]:match("^%s*(.-)%s*$")
          if level ~= "0" then
            local line = select(2, text:sub(1, before):gsub("\n", "")) + 1
            raw[#raw + 1] = path .. ":" .. line
          end
        end
      end
    end
    p:close()
    assert.same({}, raw)
  end)
end)

describe("binary ops' arguments", function()
  -- values against Lua's own arithmetic
  it("add and sub take {alpha} as torch does: a + alpha * b, in place too, with gradients", function()
    local a, b = { 1.5, -2, 4 }, { 10, 0.25, -3 }
    for _, case in ipairs({ { "add", 2, function(x, y) return x + 2 * y end },
                            { "sub", 0.5, function(x, y) return x - 0.5 * y end },
                            { "add", -1, function(x, y) return x - y end } }) do
      local op, alpha, ref = case[1], case[2], case[3]
      local got = tl[op](tl.tensor(a, { dtype = "float64" }), tl.tensor(b, { dtype = "float64" }), { alpha = alpha }):totable()
      local number = tl[op](tl.tensor(a, { dtype = "float64" }), b[1], { alpha = alpha }):totable()
      local x = tl.tensor(a, { dtype = "float64" })
      x[op .. "_"](x, tl.tensor(b, { dtype = "float64" }), { alpha = alpha })
      for i = 1, 3 do
        assert.equal(ref(a[i], b[i]), got[i])
        assert.equal(ref(a[i], b[1]), number[i])
        assert.equal(ref(a[i], b[i]), x:totable()[i])
      end
    end
    local x = tl.tensor({ 1.0, 2.0 }, { requires_grad = true })
    local y = tl.tensor({ 3.0, 4.0 }, { requires_grad = true })
    tl.sub(x, y, { alpha = 3 }):sum():backward()
    assert.same({ 1, 1 }, x.grad:totable())
    assert.same({ -3, -3 }, y.grad:totable())
  end)

  it("refuse arguments they do not take instead of ignoring them", function()
    local a = tl.ones(2)
    assert.error_matches(function() return tl.add(a, a, { alph = 2 }) end, { "add: unknown option 'alph'", "alpha" })
    assert.error_matches(function() return tl.add(a, a, 5) end, { "add: argument 3 expected an options table" })
    assert.error_matches(function() return tl.mul(a, a, { alpha = 2 }) end, { "mul: expected 2 arguments (a, b), got 3" })
    assert.error_matches(function() return tl.div(a, a, 1) end, { "div: expected 2 arguments (a, b), got 3" })
    assert.error_matches(function() return a:mul_(2, 3) end, { "mul_: expected 2 arguments (x, other), got 3" })
    assert.error_matches(function() return a:add_(1, { alpha = 1 }, 3) end, { "add_: expected 2 arguments and options" })
    assert.same({ 1, 1 }, a:totable()) -- nothing was written
  end)
end)
