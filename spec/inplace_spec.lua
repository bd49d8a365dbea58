-- In-place ops (x:add_(o), x:exp_(), x:clamp_(lo, hi), x:softmax_(d), x:layer_norm_(w, b, eps),
-- x:matmul_(w), ...; also tl.<op>_(x, ...)) against their out-of-place twins, a different code
-- path: values in every dtype the twin supports, on a contiguous x and on a strided view of a
-- larger base (the base changes where the view is and nowhere else), x itself returned, the
-- storage version bumped, operands that overlap x, bad arguments leaving x unchanged; matmul_
-- against float64 products and within its workspace (autograd: inplace_autograd_spec.lua). The
-- CUDA block is tagged #cuda.
local tl = require("tlua")
local ref = require("helpers.reference")
local pointwise_cases = require("helpers.pointwise_cases")
local H = require("helpers.inplace")
local FLOAT_DTYPES, NUMERIC_DTYPES, MiB = H.FLOAT_DTYPES, H.NUMERIC_DTYPES, H.MiB
local is_floating, is_tensor, seed_of, draw = H.is_floating, H.is_tensor, H.seed_of, H.draw
local on, host, assert_like, assert_fails_unchanged = H.on, H.host, H.assert_like, H.assert_fails_unchanged
local row_of, column_of, pointwise_names = H.row_of, H.column_of, H.pointwise_names


-- ---------------------------------------------------------------------------------------------
-- The cases: op (the method), the dtypes its twin supports, the range of x, its operands
-- (args(rng, shape, dtype) -> a packed list) and the out-of-place twin (default x:<op>(...)).
local function no_args() return table.pack() end
local function tensor_arg(shape_of, lo, hi, dtype_of)
  return function(rng, shape, dtype)
    return table.pack(draw(rng, shape_of(shape), dtype_of and dtype_of(dtype) or dtype, lo, hi))
  end
end
local function same(shape) return shape end
local function wider(dtype)
  if dtype == "int32" then return "int64" end
  if is_floating(dtype) then return "float64" end
  return dtype
end

local CASES = {}
local function case(t)
  t.label = t.label or t.op
  t.twin = t.twin or function(x, ...)
    local name = t.op:sub(1, -2)
    return x[name](x, ...)
  end
  CASES[#CASES + 1] = t
  return t
end

for _, name in ipairs({ "add", "sub", "mul" }) do
  local op = name .. "_"
  case { op = op, label = op .. " of a row broadcast over x", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
         args = tensor_arg(row_of, -5, 5) }
  case { op = op, label = op .. " of a column broadcast over x", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
         args = tensor_arg(column_of, -5, 5) }
  case { op = op, label = op .. " of an other of x's shape", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
         args = tensor_arg(same, -5, 5) }
  case { op = op, label = op .. " of a Lua number", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
         args = function(_, _, dtype) return table.pack(is_floating(dtype) and 0.75 or 3) end }
  case { op = op, label = op .. " of a wider dtype of the same kind (int64, float64)",
         dtypes = NUMERIC_DTYPES, lo = -5, hi = 5, args = tensor_arg(row_of, -5, 5, wider) }
end
for _, name in ipairs({ "div", "atan2" }) do
  local op, ranges = name .. "_", pointwise_cases[name].ranges
  local ra, rb = ranges[1], ranges[2]
  case { op = op, label = op .. " of a row broadcast over x", dtypes = FLOAT_DTYPES, lo = ra[1], hi = ra[2],
         args = tensor_arg(row_of, rb[1], rb[2]) }
  case { op = op, label = op .. " of an other of x's shape", dtypes = FLOAT_DTYPES, lo = ra[1], hi = ra[2],
         args = tensor_arg(same, rb[1], rb[2]) }
  case { op = op, label = op .. " of a Lua number", dtypes = FLOAT_DTYPES, lo = ra[1], hi = ra[2],
         args = function() return table.pack((rb[1] + rb[2]) / 2 + 0.25) end }
end
case { op = "copy_", label = "copy_ of a row broadcast over x", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = tensor_arg(row_of, -5, 5),
       twin = function(x, src) return src:expand(x.shape):to(x.dtype):clone() end }
case { op = "copy_", label = "copy_ of another dtype", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = tensor_arg(same, -5, 5, function(dtype) return dtype == "int64" and "int32" or "int64" end),
       twin = function(x, src) return src:to(x.dtype) end }
case { op = "fill_", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(_, _, dtype) return table.pack(is_floating(dtype) and -1.25 or 4) end,
       twin = function(x, v) return tl.zeros(x.shape, { dtype = x.dtype }) + v end }
for _, name in ipairs({ "neg", "abs", "relu" }) do
  case { op = name .. "_", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5, args = no_args }
end
case { op = "clamp_", label = "clamp_(min, max)", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(_, _, dtype)
         if is_floating(dtype) then return table.pack(-0.5, 0.75) end
         return table.pack(-2, 3)
       end }
case { op = "clamp_", label = "clamp_(nil, max)", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(_, _, dtype) return table.pack(nil, is_floating(dtype) and 0.25 or 1) end }
case { op = "clamp_", label = "clamp_(min)", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(_, _, dtype) return table.pack(is_floating(dtype) and -0.25 or -1) end }

for _, name in ipairs(pointwise_names) do
  local pc = pointwise_cases[name] or { lo = -1, hi = 1 }
  case { op = name .. "_", dtypes = FLOAT_DTYPES, lo = pc.lo, hi = pc.hi, args = no_args }
end

for _, name in ipairs({ "softmax", "log_softmax" }) do
  for _, dim in ipairs({ 1, 2, -1 }) do
    case { op = name .. "_", label = ("%s_(%d)"):format(name, dim), dtypes = FLOAT_DTYPES, lo = -4, hi = 4,
           args = function() return table.pack(dim) end }
  end
  for _, dim in ipairs({ 2, -3 }) do
    case { op = name .. "_", label = ("%s_(%d) of a 3-dim x"):format(name, dim), dtypes = FLOAT_DTYPES,
           lo = -4, hi = 4, shape = { 2, 3, 4 }, args = function() return table.pack(dim) end }
  end
end

local function layer_norm_twin(x, w, b, eps) return tl.layer_norm(x, w, b, eps) end
case { op = "layer_norm_", label = "layer_norm_(weight, bias)", dtypes = FLOAT_DTYPES, lo = -3, hi = 3,
       args = function(rng, shape, dtype)
         local n = shape[#shape]
         return table.pack(draw(rng, { n }, dtype, 0.5, 2), draw(rng, { n }, dtype, -1, 1))
       end, twin = layer_norm_twin }
case { op = "layer_norm_", label = "layer_norm_() with eps 1e-3", dtypes = FLOAT_DTYPES, lo = -3, hi = 3,
       args = function() return table.pack(nil, nil, 1e-3) end, twin = layer_norm_twin }
case { op = "layer_norm_", label = "layer_norm_(weight) of a 3-dim x", dtypes = FLOAT_DTYPES, lo = -3, hi = 3,
       shape = { 2, 3, 4 },
       args = function(rng, shape, dtype) return table.pack(draw(rng, { shape[#shape] }, dtype, -2, 2)) end,
       twin = layer_norm_twin }

-- the index family: positions counting from 1 (distinct where a write would keep any one of
-- duplicates on CUDA), index tensors made on the CPU and moved with the other operands
local function distinct_rows(rng, rows, width, limit)
  local out = {}
  for r = 1, rows do
    local pool = {}
    for i = 1, limit do pool[i] = i end
    for i = 1, width do
      local j = rng:int(i, limit)
      pool[i], pool[j] = pool[j], pool[i]
    end
    out[r] = { table.unpack(pool, 1, width) }
  end
  return tl.tensor(out)
end
local function value_of(dtype) return is_floating(dtype) and -1.25 or 4 end
case { op = "scatter_", label = "scatter_(2, index, src)", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(2, distinct_rows(rng, shape[1], 3, shape[2]), draw(rng, { shape[1], 3 }, dtype, -5, 5))
       end }
case { op = "scatter_", label = "scatter_(1, index, value)", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(1, distinct_rows(rng, shape[2], 2, shape[1]):t():contiguous(), value_of(dtype))
       end }
case { op = "scatter_add_", label = "scatter_add_ with duplicate places", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         local index = tl.tensor(ref.build({ 4, shape[2] }, function() return rng:int(1, shape[1]) end))
         return table.pack(1, index, draw(rng, { 4, shape[2] }, dtype, -5, 5))
       end }
case { op = "index_add_", label = "index_add_ with a repeated position and alpha", dtypes = NUMERIC_DTYPES,
       lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(2, tl.tensor({ 1, shape[2], 1 }), draw(rng, { shape[1], 3 }, dtype, -5, 5), { alpha = 2 })
       end }
case { op = "index_copy_", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(1, tl.tensor({ shape[1], 2 }), draw(rng, { 2, shape[2] }, dtype, -5, 5))
       end }
case { op = "index_fill_", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(_, _, dtype) return table.pack(2, tl.tensor({ 3, 2 }), value_of(dtype)) end }
case { op = "masked_fill_", label = "masked_fill_ of a row mask", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(tl.tensor({ ref.build({ shape[2] }, function() return rng:int(0, 1) == 1 end) }),
           value_of(dtype))
       end }
case { op = "masked_fill_", label = "masked_fill_ of a tensor value", dtypes = NUMERIC_DTYPES, lo = -5, hi = 5,
       args = function(rng, shape, dtype)
         return table.pack(draw(rng, shape, "float32", -1, 1):gt(0), draw(rng, { shape[2] }, dtype, -5, 5))
       end,
       twin = function(x, mask, value) return tl.where(mask, value, x) end }

-- strided views of a larger base, by x's number of dims: the base's shape and the view
local VIEWS = {
  -- [8, 9] transposed to [9, 8], then rows 2..7 and columns 3..7: a [6, 5] view
  [2] = { base = { 8, 9 }, view = function(b) return b:transpose(1, 2):narrow(1, 2, 6):narrow(2, 3, 5) end },
  -- [3, 5, 4] permuted to [4, 3, 5], then 2..3 of dim 1 and 2..5 of dim 3: a [2, 3, 4] view
  [3] = { base = { 3, 5, 4 }, view = function(b) return b:permute(3, 1, 2):narrow(1, 2, 2):narrow(3, 2, 4) end },
}

local function call(c, x, args)
  return x[c.op](x, table.unpack(args, 1, args.n))
end

local function moved(args, device)
  local out = { n = args.n }
  for i = 1, args.n do out[i] = on(args[i], device) end
  return out
end

-- the op on a contiguous x, against the twin on a copy of x
local function check_contiguous(c, dtype, device)
  local rng = ref.rng(seed_of(c.label .. dtype))
  local shape = c.shape or { 5, 6 }
  local x = on(draw(rng, shape, dtype, c.lo, c.hi), device)
  local args = moved(c.args(rng, shape, dtype), device)
  local expected = c.twin(x:clone(), table.unpack(args, 1, args.n))
  local version = x._version
  local r = call(c, x, args)
  assert.is_true(rawequal(x, r), c.op .. " returns x itself")
  assert.same(shape, x.shape)
  assert.equal(dtype, x.dtype)
  assert.is_true(x._version > version, c.op .. " bumps the storage version")
  assert_like(expected, x)
end

-- the op on a strided view of a larger base: the view holds the twin's values, the rest of the
-- base keeps its own
local function check_view(c, dtype, device)
  local rng = ref.rng(seed_of(c.label .. dtype .. "view"))
  local v = VIEWS[#(c.shape or { 5, 6 })]
  local base = on(draw(rng, v.base, dtype, c.lo, c.hi), device)
  local untouched = base:clone()
  local x = v.view(base)
  assert.is_false(x:is_contiguous())
  local args = moved(c.args(rng, x.shape, dtype), device)
  local expected = c.twin(x, table.unpack(args, 1, args.n))
  local version = base._version
  local r = call(c, x, args)
  assert.is_true(rawequal(x, r), c.op .. " returns x itself")
  assert.is_true(base._version > version, c.op .. " bumps the version of the base's storage")
  assert_like(expected, x)
  assert_like(expected, v.view(base), "the base holds the result where the view is")
  -- outside the view: untouched, exactly
  v.view(untouched):fill_(0)
  x:fill_(0)
  assert.tensor_equal(host(untouched), host(base))
end

describe("in-place ops against their out-of-place twins", function()
  it("cover every op of the pointwise family (x:<op>_() and tl.<op>_)", function()
    assert.is_true(#pointwise_names >= 6)
    for _, name in ipairs(pointwise_names) do
      assert.is_function(tl[name .. "_"], name .. "_")
      assert(pointwise_cases[name], "pointwise op '" .. name .. "' has no line in spec/helpers/pointwise_cases.lua")
    end
  end)

  for _, c in ipairs(CASES) do
    describe(c.label, function()
      for _, dtype in ipairs(c.dtypes) do
        it(("in %s on a contiguous x: the twin's values, x returned, the version bumped"):format(dtype), function()
          check_contiguous(c, dtype, "cpu")
        end)
        it(("in %s on a transposed, narrowed view: only the view's elements of the base change"):format(dtype),
          function() check_view(c, dtype, "cpu") end)
      end

      it("as tl." .. c.op .. "(x, ...), returning x", function()
        local rng = ref.rng(seed_of(c.label .. "tl"))
        local dtype = c.dtypes[1]
        local shape = c.shape or { 5, 6 }
        local x = draw(rng, shape, dtype, c.lo, c.hi)
        local args = c.args(rng, shape, dtype)
        local expected = c.twin(x:clone(), table.unpack(args, 1, args.n))
        assert.is_true(rawequal(x, tl[c.op](x, table.unpack(args, 1, args.n))))
        assert_like(expected, x)
      end)
    end)
  end
end)

describe("in-place ops with an operand that overlaps x", function()
  -- each: x's dtype, x's shape, the in-place call, its out-of-place meaning on a copy x0 of x
  local OVERLAPS = {
    { "add_ of x's first row, broadcast over the rows", { 4, 5 },
      function(x) x:add_(x:select(1, 1)) end, function(x0) return x0 + x0:select(1, 1) end },
    { "sub_ of x's first column, broadcast over the columns", { 4, 5 },
      function(x) x:sub_(x:narrow(2, 1, 1)) end, function(x0) return x0 - x0:narrow(2, 1, 1) end },
    { "mul_ of x itself", { 4, 5 }, function(x) x:mul_(x) end, function(x0) return x0 * x0 end },
    { "add_ of x transposed", { 5, 5 },
      function(x) x:add_(x:transpose(1, 2)) end, function(x0) return x0 + x0:transpose(1, 2) end },
    { "div_ of x's last row", { 4, 5 },
      function(x) x:div_(x:select(1, -1)) end, function(x0) return x0 / x0:select(1, -1) end },
    { "atan2_ of x transposed", { 5, 5 },
      function(x) x:atan2_(x:transpose(1, 2)) end, function(x0) return x0:atan2(x0:transpose(1, 2)) end },
    { "copy_ of x transposed", { 5, 5 },
      function(x) x:copy_(x:transpose(1, 2)) end, function(x0) return x0:transpose(1, 2):clone() end },
    { "add_ of x shifted by one row (rows 2..4 += rows 1..3)", { 4, 5 },
      function(x) x:narrow(1, 2, 3):add_(x:narrow(1, 1, 3)) end,
      function(x0)
        local e = x0:clone()
        e:narrow(1, 2, 3):copy_(x0:narrow(1, 2, 3) + x0:narrow(1, 1, 3))
        return e
      end },
    { "sub_ of x shifted by one row the other way (rows 1..3 -= rows 2..4)", { 4, 5 },
      function(x) x:narrow(1, 1, 3):sub_(x:narrow(1, 2, 3)) end,
      function(x0)
        local e = x0:clone()
        e:narrow(1, 1, 3):copy_(x0:narrow(1, 1, 3) - x0:narrow(1, 2, 3))
        return e
      end },
    { "matmul_ by x itself", { 5, 5 }, function(x) x:matmul_(x) end, function(x0) return x0:matmul(x0) end },
    { "matmul_ by x transposed", { 5, 5 },
      function(x) x:matmul_(x:transpose(1, 2)) end, function(x0) return x0:matmul(x0:transpose(1, 2)) end },
    { "layer_norm_ with x's first row as the weight", { 4, 5 },
      function(x) x:layer_norm_(x:select(1, 1)) end, function(x0) return tl.layer_norm(x0, x0:select(1, 1)) end },
  }
  for _, o in ipairs(OVERLAPS) do
    for _, dtype in ipairs({ "float32", "float64", "int32" }) do
      local integer_ok = not (o[1]:find("div_") or o[1]:find("atan2_") or o[1]:find("matmul_") or o[1]:find("layer_norm_"))
      if is_floating(dtype) or integer_ok then
        it(("%s in %s: the out-of-place result"):format(o[1], dtype), function()
          local rng = ref.rng(seed_of(o[1] .. dtype))
          local lo = o[1]:find("div_") and 0.5 or -3
          local x = draw(rng, o[2], dtype, lo, 3)
          local expected = o[4](x:clone())
          o[3](x)
          assert_like(expected, x)
        end)
      end
    end
  end
end)

-- ---------------------------------------------------------------------------------------------
describe("matmul_", function()
  local n = 6
  -- x forms: a label and a maker of x (shape [..., n]) in a dtype
  local X_FORMS = {
    { "x [n]", function(rng, dt) return draw(rng, { n }, dt, -1, 1) end },
    { "x [m, n]", function(rng, dt) return draw(rng, { 5, n }, dt, -1, 1) end },
    { "x [b, t, n]", function(rng, dt) return draw(rng, { 2, 3, n }, dt, -1, 1) end },
    { "a permuted x [b, t, n] (its last dim strided)",
      function(rng, dt) return draw(rng, { n, 2, 3 }, dt, -1, 1):permute(2, 3, 1) end },
    { "a transposed x [m, n]", function(rng, dt) return draw(rng, { n, 5 }, dt, -1, 1):transpose(1, 2) end },
  }
  local W_FORMS = {
    { "w contiguous", function(rng, dt) return draw(rng, { n, n }, dt, -1, 1) end },
    { "w transposed", function(rng, dt) return draw(rng, { n, n }, dt, -1, 1):transpose(1, 2) end },
  }
  -- tolerances against a float64 product of the stored values: one rounding of the result
  -- (bf16/f16 accumulate in float32) plus a little accumulation
  local MATMUL_TOL = {
    float32 = { rtol = 1e-5, atol = 1e-5 },
    float64 = { rtol = 1e-12, atol = 1e-12 },
    bfloat16 = { rtol = 2 ^ -7, atol = 2 ^ -7 },
    float16 = { rtol = 2 ^ -10, atol = 2 ^ -10 },
  }

  for _, dtype in ipairs(FLOAT_DTYPES) do
    for _, xf in ipairs(X_FORMS) do
      for _, wf in ipairs(W_FORMS) do
        it(("in %s, %s, %s: x <- x @ w"):format(dtype, xf[1], wf[1]), function()
          local rng = ref.rng(seed_of(dtype .. xf[1] .. wf[1]))
          local x, w = xf[2](rng, dtype), wf[2](rng, dtype)
          local shape = x.shape
          local expected
          if dtype == "float32" or dtype == "float64" then
            expected = x:matmul(w) -- out of place
          else
            expected = x:double():matmul(w:double()) -- float64 product of the stored values
          end
          local version = x._version
          assert.is_true(rawequal(x, x:matmul_(w)))
          assert.same(shape, x.shape)
          assert.equal(dtype, x.dtype)
          assert.is_true(x._version > version)
          local tol = MATMUL_TOL[dtype]
          assert.tensor_near(expected:double(), x:double(), tol.rtol, tol.atol)
        end)
      end
    end
  end

  it("matches a float64 product by Lua loops", function()
    local rng = ref.rng(77)
    local xv, wv = ref.random_table(rng, { 4, n }, -1, 1), ref.random_table(rng, { n, n }, -1, 1)
    local x = tl.tensor(xv, { dtype = "float64" })
    x:matmul_(tl.tensor(wv, { dtype = "float64" }))
    assert.tensor_near(ref.matmul(xv, wv), x, 1e-12, 1e-12)
  end)

  for _, form in ipairs({
    { "a narrowed x [8, n] (rows of stride 9)", { 8, 9 }, function(b) return b:narrow(2, 2, n) end },
    { "a transposed, narrowed x [8, n]", { 9, 8 }, function(b) return b:narrow(1, 2, n):transpose(1, 2) end },
  }) do
    it(("writes %s and nothing else of its base"):format(form[1]), function()
      local rng = ref.rng(seed_of(form[1]))
      local base = draw(rng, form[2], "float32", -1, 1)
      local untouched = base:clone()
      local x = form[3](base)
      local w = draw(rng, { n, n }, "float32", -1, 1)
      local expected = x:matmul(w)
      x:matmul_(w)
      assert.tensor_near(expected, form[3](base), 1e-5, 1e-5)
      form[3](untouched):fill_(0)
      x:fill_(0)
      assert.tensor_equal(untouched, base)
    end)
  end

  it("as tl.matmul_(x, w), returning x", function()
    local rng = ref.rng(5)
    local x, w = draw(rng, { 3, n }, "float64", -1, 1), draw(rng, { n, n }, "float64", -1, 1)
    local expected = x:matmul(w)
    assert.is_true(rawequal(x, tl.matmul_(x, w)))
    assert.tensor_near(expected, x, 1e-12, 1e-12)
  end)

  -- x [32768, 512] float32 is 64 MiB: the product goes through row tiles of at most 16 MiB
  for _, form in ipairs({
    { "a contiguous x and w", false },
    { "a transposed x and a transposed w", true },
  }) do
    it(("of a 64 MiB x uses at most 16 MiB of workspace, %s"):format(form[1]), function()
      tl.manual_seed(11)
      local rows, n_big = 32768, 512
      local x, w
      if form[2] then
        x = tl.randn(n_big, rows):transpose(1, 2)
        w = (tl.randn(n_big, n_big) / math.sqrt(n_big)):transpose(1, 2)
      else
        x = tl.randn(rows, n_big)
        w = tl.randn(n_big, n_big) / math.sqrt(n_big)
      end
      local expected = x:matmul(w)
      collectgarbage("collect")
      collectgarbage("collect")
      local before = tl.memory_stats("cpu").allocated
      tl.reset_peak_memory_stats("cpu")
      x:matmul_(w)
      local peak = tl.memory_stats("cpu").peak
      assert.is_true(peak - before <= 17 * MiB,
        ("matmul_ took %.2f MiB beyond the tensors it was given (at most 16 MiB of workspace + 1 MiB)")
          :format((peak - before) / MiB))
      local worst = (x - expected):abs():max():item()
      local scale = expected:abs():max():item()
      assert.is_true(worst <= 1e-5 * scale,
        ("largest |in place - out of place| %.3g for values up to %.3g"):format(worst, scale))
    end)
  end
end)

-- ---------------------------------------------------------------------------------------------
describe("in-place ops refuse bad arguments and leave x unchanged", function()
  local function f32(...) return tl.randn(...) end
  local function i32(...) return tl.randint(-5, 6, { ... }):to("int32") end
  local function bools(...) return tl.randn(...):ge(0) end
  local function expanded() return tl.randn(3, 1):expand(3, 4) end

  local ERRORS = {}
  local function err(label, make, fn, wants) ERRORS[#ERRORS + 1] = { label, make, fn, wants } end

  -- an other that would grow x
  for _, op in ipairs({ "add_", "sub_", "mul_", "div_", "atan2_", "copy_" }) do
    err(op .. " of an other that does not broadcast to x's shape (would grow x)", function() return f32(3, 1) end,
      function(x) x[op](x, tl.ones(3, 4)) end, { op, "[3, 4]", "[3, 1]" })
    err(op .. " of an other of a different size", function() return f32(3) end,
      function(x) x[op](x, tl.ones(4)) end, { op, "[4]", "[3]" })
  end
  -- a floating result into an integer x
  err("int32 add_(2.5)", function() return i32(4) end, function(x) x:add_(2.5) end, { "add_", "int32" })
  err("int32 sub_(float32 tensor)", function() return i32(4) end, function(x) x:sub_(tl.ones(4)) end, { "sub_", "int32" })
  err("int32 mul_(0.5)", function() return i32(4) end, function(x) x:mul_(0.5) end, { "mul_", "int32" })
  err("int32 div_(2)", function() return i32(4) end, function(x) x:div_(2) end, { "div_", "int32" })
  err("int32 div_(int32 tensor)", function() return i32(4) end,
    function(x) x:div_(tl.ones(4):to("int32")) end, { "div_", "int32" })
  err("int32 atan2_(1)", function() return i32(4) end, function(x) x:atan2_(1) end, { "atan2_", "int32" })
  err("int32 clamp_(0.5, 2)", function() return i32(4) end, function(x) x:clamp_(0.5, 2) end, { "clamp_", "int32" })
  for _, name in ipairs(H.pointwise_float_names) do
    err("int32 " .. name .. "_()", function() return i32(4) end, function(x) x[name .. "_"](x) end,
      { name .. "_", "int32" })
  end
  err("int64 exp_()", function() return i32(4):to("int64") end, function(x) x:exp_() end, { "exp_", "int64" })
  err("int32 softmax_(1)", function() return i32(2, 3) end, function(x) x:softmax_(1) end, { "softmax_", "floating" })
  err("int32 log_softmax_(1)", function() return i32(2, 3) end, function(x) x:log_softmax_(1) end,
    { "log_softmax_", "floating" })
  err("int32 layer_norm_()", function() return i32(2, 3) end, function(x) x:layer_norm_() end,
    { "layer_norm_", "floating" })
  err("int32 matmul_(int32 w)", function() return i32(2, 3) end,
    function(x) x:matmul_(tl.ones(3, 3):to("int32")) end, { "matmul_", "floating" })
  -- the index family: a bad index, src or value leaves x as it was (checked before any write)
  local function index(t) return tl.tensor(t) end
  err("scatter_ with an index out of range", function() return f32(3, 4) end,
    function(x) x:scatter_(2, index({ { 1, 5 } }), tl.ones(1, 2)) end, { "scatter_", "index holds 5" })
  err("scatter_add_ of a src of another dtype", function() return f32(3, 4) end,
    function(x) x:scatter_add_(1, index({ { 1 } }), tl.ones({ 1, 1 }, { dtype = "float64" })) end,
    { "scatter_add_", "src must have x's dtype float32, got float64" })
  err("index_add_ with a src of the wrong shape", function() return f32(3, 4) end,
    function(x) x:index_add_(1, index({ 1, 2 }), tl.ones(3, 4)) end,
    { "index_add_", "src must have x's shape [3, 4] with index's length 2 along dim 1, got shape [3, 4]" })
  err("index_add_ with a fractional alpha into int32", function() return i32(3, 4) end,
    function(x) x:index_add_(1, index({ 1 }), tl.ones({ 1, 4 }, { dtype = "int32" }), { alpha = 0.5 }) end,
    { "index_add_", "alpha must be an integer" })
  err("index_add_ with an unknown option", function() return f32(3, 4) end,
    function(x) x:index_add_(1, index({ 1 }), tl.ones(1, 4), { alpah = 2 }) end, { "index_add_", "alpah" })
  err("index_copy_ with an index holding 0", function() return f32(3, 4) end,
    function(x) x:index_copy_(1, index({ 0 }), tl.ones(1, 4)) end, { "index_copy_", "index holds 0" })
  err("index_fill_ of 1e10 into int32 (overflow)", function() return i32(3, 4) end,
    function(x) x:index_fill_(2, index({ 1 }), 1e10) end, { "index_fill_", "cannot be converted to int32" })
  err("masked_fill_ with a float mask", function() return f32(3, 4) end,
    function(x) x:masked_fill_(tl.ones(4), 1) end, { "masked_fill_", "mask must be a bool tensor" })
  err("masked_fill_ with a mask that would grow x", function() return f32(3, 1) end,
    function(x) x:masked_fill_(tl.ones(3, 4):gt(0), 1) end, { "masked_fill_", "does not broadcast" })
  err("scatter_ into an expanded x", expanded,
    function(x) x:scatter_(2, index({ { 1 } }), tl.ones(1, 1)) end, { "scatter_" })
  -- an integer result into a bool x
  err("bool add_(1)", function() return bools(4) end, function(x) x:add_(1) end, { "add_", "bool" })
  err("bool add_(bool tensor)", function() return bools(4) end, function(x) x:add_(bools(4)) end, { "add_", "bool" })
  err("bool mul_(bool tensor)", function() return bools(4) end, function(x) x:mul_(bools(4)) end, { "mul_", "bool" })
  for _, op in ipairs({ "neg_", "abs_", "relu_" }) do
    err("bool " .. op .. "()", function() return bools(4) end, function(x) x[op](x) end, { op, "bool" })
  end
  -- an expanded x (several elements share one place)
  for _, e in ipairs({
    { "add_", function(x) x:add_(1) end },
    { "mul_", function(x) x:mul_(tl.randn(3, 4)) end },
    { "neg_", function(x) x:neg_() end },
    { "relu_", function(x) x:relu_() end },
    { "clamp_", function(x) x:clamp_(-0.5, 0.5) end },
    { "exp_", function(x) x:exp_() end },
    { "fill_", function(x) x:fill_(0) end },
    { "copy_", function(x) x:copy_(tl.randn(3, 4)) end },
    { "softmax_", function(x) x:softmax_(2) end },
    { "log_softmax_", function(x) x:log_softmax_(1) end },
    { "layer_norm_", function(x) x:layer_norm_() end },
    { "matmul_", function(x) x:matmul_(tl.randn(4, 4)) end },
  }) do
    err("an expanded x: " .. e[1], expanded, e[2], { e[1], "expand" })
  end
  -- matmul_
  err("matmul_ by a non-square w", function() return f32(3, 4) end,
    function(x) x:matmul_(tl.ones(4, 3)) end, { "matmul_", "square", "[4, 3]" })
  err("matmul_ by a w whose n is not x's last size", function() return f32(3, 4) end,
    function(x) x:matmul_(tl.ones(3, 3)) end, { "matmul_", "[3, 3]", "[3, 4]" })
  err("matmul_ by a 1-dim w", function() return f32(3, 4) end, function(x) x:matmul_(tl.ones(4)) end, { "matmul_" })
  err("matmul_ by a 3-dim w", function() return f32(3, 4) end,
    function(x) x:matmul_(tl.ones(1, 4, 4)) end, { "matmul_" })
  err("matmul_ by a w of another dtype", function() return f32(3, 4) end,
    function(x) x:matmul_(tl.ones(4, 4):double()) end, { "matmul_", "float32", "float64" })
  err("matmul_ by a string", function() return f32(3, 4) end, function(x) x:matmul_("w") end, { "matmul_" })
  -- softmax_ dims
  for _, dim in ipairs({ 3, -3, 0 }) do
    err(("softmax_(%d) of a 2-dim x"):format(dim), function() return f32(2, 3) end,
      function(x) x:softmax_(dim) end, { "softmax_", "dim" })
  end
  err("log_softmax_(3) of a 2-dim x", function() return f32(2, 3) end,
    function(x) x:log_softmax_(3) end, { "log_softmax_", "dim" })
  err("softmax_() without a dim", function() return f32(2, 3) end, function(x) x:softmax_() end, { "softmax_" })
  -- layer_norm_ operands
  err("layer_norm_ with a weight of the wrong size", function() return f32(3, 4) end,
    function(x) x:layer_norm_(tl.ones(5)) end, { "layer_norm_" })
  err("layer_norm_ with a bias of the wrong size", function() return f32(3, 4) end,
    function(x) x:layer_norm_(tl.ones(4), tl.ones(3)) end, { "layer_norm_" })
  err("layer_norm_ with a weight of another dtype", function() return f32(3, 4) end,
    function(x) x:layer_norm_(tl.ones(4):double()) end, { "layer_norm_", "float64" })
  -- arguments of the wrong type
  err("add_ of a string", function() return f32(3) end, function(x) x:add_("x") end, { "add_", "argument 1" })
  err("clamp_ with a string bound", function() return f32(3) end,
    function(x) x:clamp_("a", 1) end, { "clamp_" })

  for _, e in ipairs(ERRORS) do
    it(e[1], function()
      local x = e[2]()
      assert_fails_unchanged(x, function() e[3](x) end, e[4])
    end)
  end

  it("an expanded x leaves its base unchanged too", function()
    local base = tl.randn(3, 1)
    local before = base:clone()
    assert.error_matches(function() base:expand(3, 4):add_(1) end, { "add_", "expand" })
    assert.tensor_equal(before, base)
  end)
end)


-- ---------------------------------------------------------------------------------------------
describe("in-place ops on cuda #cuda", function()
  if tl.cuda.device_count() == 0 then
    pending("no CUDA device: the CUDA specs of in-place ops did not run")
    return
  end

  for _, c in ipairs(CASES) do
    for _, dtype in ipairs({ "float32", "bfloat16" }) do
      local supported = false
      for _, d in ipairs(c.dtypes) do supported = supported or d == dtype end
      if supported then
        it(("%s in %s on a contiguous x: the twin's values on cuda"):format(c.label, dtype), function()
          check_contiguous(c, dtype, "cuda")
        end)
        it(("%s in %s on a strided view: only the view's elements change, on cuda"):format(c.label, dtype), function()
          check_view(c, dtype, "cuda")
        end)
      end
    end
  end

  -- the same op on copies of one x on the CPU and on CUDA
  local CROSS = {
    { "matmul_ of x [b, t, n] by a transposed w", { 2, 5, 8 },
      function(rng, dt) return draw(rng, { 8, 8 }, dt, -1, 1):transpose(1, 2) end,
      function(x, w) return x:matmul_(w) end },
    { "matmul_ of a permuted x by w", { 8, 2, 5 },
      function(rng, dt) return draw(rng, { 8, 8 }, dt, -1, 1) end,
      function(x, w) return x:permute(2, 3, 1):matmul_(w) end },
    { "softmax_(-1)", { 4, 7 }, nil, function(x) return x:softmax_(-1) end },
    { "softmax_(1) of a transposed x", { 4, 7 }, nil, function(x) return x:transpose(1, 2):softmax_(1) end },
    { "log_softmax_(2)", { 3, 4, 5 }, nil, function(x) return x:log_softmax_(2) end },
    { "layer_norm_(weight, bias)", { 6, 9 },
      function(rng, dt) return { draw(rng, { 9 }, dt, 0.5, 2), draw(rng, { 9 }, dt, -1, 1) } end,
      function(x, wb) return x:layer_norm_(wb[1], wb[2]) end },
    { "layer_norm_() of a transposed x", { 6, 9 }, nil, function(x) return x:transpose(1, 2):layer_norm_() end },
  }
  local CROSS_TOL = { float32 = { rtol = 1e-5, atol = 1e-5 }, bfloat16 = { rtol = 2 ^ -6, atol = 2 ^ -6 } }
  for _, k in ipairs(CROSS) do
    for _, dtype in ipairs({ "float32", "bfloat16" }) do
      it(("%s in %s: cuda as on the cpu"):format(k[1], dtype), function()
        local rng = ref.rng(seed_of(k[1] .. dtype))
        local x = draw(rng, k[2], dtype, -2, 2)
        local operand = k[3] and k[3](rng, dtype)
        local function to_cuda(o)
          if o == nil then return nil end
          if is_tensor(o) then return o:cuda() end
          local t = {}
          for i, v in ipairs(o) do t[i] = v:cuda() end
          return t
        end
        local xc = x:cuda()
        k[4](x, operand)
        k[4](xc, to_cuda(operand))
        local tol = CROSS_TOL[dtype]
        assert.tensor_near(x:double(), xc:cpu():double(), tol.rtol, tol.atol)
      end)
    end
  end

  it("matmul_ refuses a w on another device, leaving x unchanged", function()
    local x = tl.randn(3, 4):cuda()
    assert_fails_unchanged(x, function() x:matmul_(tl.randn(4, 4)) end, { "matmul_" })
    local xh = tl.randn(3, 4)
    assert_fails_unchanged(xh, function() xh:matmul_(tl.randn(4, 4):cuda()) end, { "matmul_" })
    assert_fails_unchanged(x, function() x:add_(tl.randn(3, 4)) end, { "add_" })
  end)
end)
