-- Block-sparse references for block_sparse_spec.lua: a seeded Lua RNG, loop-built layouts, the dense float64 reference.
local tl = require("tlua")

local ref = {}

ref.FIELDS = { "row_offsets", "col_indices", "col_offsets", "row_indices", "col_blocks", "coo_rows", "coo_cols" }

-- tolerances {rtol, atol} against the float64 reference, by dtype
ref.TOL = { float64 = { 1e-10, 1e-10 }, float32 = { 1e-4, 1e-4 }, bfloat16 = { 3e-2, 3e-2 },
            float16 = { 5e-3, 5e-3 } }

-- a seeded generator of its own (a 31-bit LCG, high bits only): rng() in [0, 1), rng(n) in 1 .. n
function ref.rng(seed)
  local state = seed % 2147483648
  return function(n)
    state = (state * 1103515245 + 12345) % 2147483648
    local u = state / 2147483648
    if n then return math.floor(u * n) + 1 end
    return u
  end
end

-- a Lua mask {{bool, ...}, ...} [R][C]: each entry true with probability p (fill(r, c) instead
-- of the RNG when given)
function ref.mask(R, C, p, fill)
  local m = {}
  for r = 1, R do
    m[r] = {}
    for c = 1, C do
      if fill then m[r][c] = fill(r, c) else m[r][c] = p.rng() < p.density end
    end
  end
  return m
end

-- the layout of a Lua mask by plain loops (Lua arrays of 0-based values, as the header says),
-- plus nnz and number[r][c] (the 0-based block number of each kept entry)
function ref.layout(m)
  local R, C = #m, #m[1]
  local l = { row_offsets = { 0 }, col_indices = {}, col_offsets = { 0 }, row_indices = {}, col_blocks = {},
              coo_rows = {}, coo_cols = {}, number = {} }
  local nnz = 0
  for r = 1, R do
    l.number[r] = {}
    for c = 1, C do
      if m[r][c] then
        l.number[r][c] = nnz
        nnz = nnz + 1
        l.col_indices[nnz], l.coo_rows[nnz], l.coo_cols[nnz] = c - 1, r - 1, c - 1
      end
    end
    l.row_offsets[r + 1] = nnz
  end
  local t = 0
  for c = 1, C do
    for r = 1, R do
      if m[r][c] then
        t = t + 1
        l.row_indices[t], l.col_blocks[t] = r - 1, l.number[r][c]
      end
    end
    l.col_offsets[c + 1] = t
  end
  l.nnz, l.R, l.C = nnz, R, C
  return l
end

-- the reference layout as the op takes it: int32 tensors on device
function ref.layout_tensors(l, device)
  local out = {}
  for _, name in ipairs(ref.FIELDS) do
    out[name] = tl.tensor(l[name], { dtype = "int32" }):to(device or "cpu")
  end
  return out
end

function ref.f64(t) return t:detach():to("cpu"):double() end

-- W [R * b, C * b] in float64 from blocks [nnz, b, b], block e placed at (coo_rows[e], coo_cols[e])
-- of the reference layout by Lua loops, zeros elsewhere
function ref.dense_weight(blocks, l)
  local b = blocks.shape[2]
  local v = ref.f64(blocks):totable()
  local W = {}
  for i = 1, l.R * b do
    local row = {}
    for j = 1, l.C * b do row[j] = 0.0 end
    W[i] = row
  end
  for e = 1, l.nnz do
    local r0, c0 = l.coo_rows[e] * b, l.coo_cols[e] * b
    for i = 1, b do
      for j = 1, b do W[r0 + i][c0 + j] = v[e][i][j] end
    end
  end
  return tl.tensor(W, { dtype = "float64" })
end

local function rows_of(t, width)
  local n = 1
  for d = 1, #t.shape - 1 do n = n * t.shape[d] end
  return ref.f64(t):reshape(n, width)
end

local function with_last(shape, width)
  local s = {}
  for d = 1, #shape - 1 do s[d] = shape[d] end
  s[#s + 1] = width
  return s
end

-- y = x W^T + bias in float64, shaped [..., out]
function ref.forward(x, W, bias)
  local out_f, in_f = W.shape[1], W.shape[2]
  local y = rows_of(x, in_f):matmul(W:transpose(1, 2))
  if bias then y = y + ref.f64(bias) end
  return y:reshape(with_last(x.shape, out_f))
end

-- the float64 gradients for the output gradient g: dx = g W, dblocks[e] = block (row, col) of
-- g^T x, dbias = the sum of g over rows
function ref.grads(x, g, W, l, b)
  local out_f, in_f = W.shape[1], W.shape[2]
  local g2, x2 = rows_of(g, out_f), rows_of(x, in_f)
  local dW = g2:transpose(1, 2):matmul(x2)
  local dblocks = tl.zeros(l.nnz, b, b, { dtype = "float64" })
  for e = 1, l.nnz do
    dblocks[e]:copy_(dW:narrow(1, l.coo_rows[e] * b + 1, b):narrow(2, l.coo_cols[e] * b + 1, b))
  end
  return { x = g2:matmul(W):reshape(x.shape), blocks = dblocks, bias = g2:sum(1) }
end

-- a CPU bool tensor [R, C] of a Lua mask
function ref.mask_tensor(m)
  return tl.tensor(m, { dtype = "bool" })
end

-- the kept blocks per row of a bool tensor, counted by loops
function ref.row_counts(mask)
  local counts = {}
  for r, row in ipairs(mask:totable()) do
    counts[r] = 0
    for _, v in ipairs(row) do if v then counts[r] = counts[r] + 1 end end
  end
  return counts
end

-- random values of shape in dtype on device (drawn in float32 on the CPU)
function ref.draw(shape, dtype, device)
  return tl.randn(shape):to(dtype):to(device or "cpu")
end

return ref
