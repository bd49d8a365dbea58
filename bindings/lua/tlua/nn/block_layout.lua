-- Block-sparse patterns: the three indexes of a block mask (built with tensor ops), random and top-norm masks.
--
-- A pattern is a bool mask [R, C] over the block grid of a weight [R * b, C * b]. Its layout is
-- the table of int32 index tensors the block_sparse_linear kernels read (engine header
-- tlua/block_layout.h). They count from 0, like the kernels' data: they are not Lua indices.
--   row-wise index     row_offsets [R + 1], col_indices [nnz]      (the forward, dense x sparse^T)
--   column-wise index  col_offsets [C + 1], row_indices [nnz],
--                      col_blocks [nnz] (which block each entry is) (the input gradient)
--   coordinate list    coo_rows [nnz], coo_cols [nnz]              (the weight gradient)
-- The blocks of a pattern are numbered in row-major order of the grid.
local options = require("tlua.options")
local tl = require("tlua")

local layout = {}

layout.FIELDS = { "row_offsets", "col_indices", "col_offsets", "row_indices", "col_blocks", "coo_rows",
  "coo_cols" }

local function check_mask(mask, fn, level)
  if not tl.is_tensor(mask) or mask.dtype ~= "bool" or mask:dim() ~= 2 then
    local got = tl.is_tensor(mask) and (mask.dtype .. " tensor with " .. mask:dim() .. " dims") or type(mask)
    options.error(fn .. ": the mask must be a 2-D bool tensor [out / block, in / block], got " .. got, level + 1)
  end
end

-- [n + 1] int32 offsets from per-slot counts [n]: 0, then the running sums
local function offsets(counts, n, device)
  local o = tl.zeros(n + 1, { dtype = "int32", device = device })
  if n > 0 then o:narrow(1, 2, n):copy_(counts:cumsum(1)) end
  return o
end

-- values[positions] for 1-based flat positions (a gather: embedding's row lookup on a column)
local function take(values, positions)
  if positions:numel() == 0 then return tl.zeros(0, { dtype = "int64", device = values.device }) end
  return tl.embedding(positions, values:reshape(-1, 1):double()):reshape(-1):to("int64")
end

--- nn.block_layout(mask): the layout (a table of int32 index tensors on the mask's device)
function layout.block_layout(mask)
  check_mask(mask, "nn.block_layout", 2)
  local R, C, device = mask:size(1), mask:size(2), mask.device
  local function index(t) return t:to("int32"):contiguous() end
  -- coordinate list: the true entries in row-major order
  local by_row = tl.nonzero(mask) -- [nnz, 2], (row, col) from 1
  local rows, cols = by_row:select(2, 1) - 1, by_row:select(2, 2) - 1
  -- column-wise: the entries in column-major order (row-major order of the transposed mask)
  local by_col = tl.nonzero(mask:transpose(1, 2)) -- [nnz, 2], (col, row) from 1
  local t_rows, t_cols = by_col:select(2, 2) - 1, by_col:select(2, 1) - 1
  -- each entry's block number: how many true entries precede it in row-major order
  local number = mask:reshape(-1):cumsum(1) - 1
  local col_blocks = take(number, t_rows * C + t_cols + 1)
  return {
    row_offsets = offsets(mask:sum(2), R, device),
    col_indices = index(cols),
    col_offsets = offsets(mask:sum(1), C, device),
    row_indices = index(t_rows),
    col_blocks = index(col_blocks),
    coo_rows = index(rows),
    coo_cols = index(cols),
  }
end

--- nn.block_mask(layout, R, C): the bool mask [R, C] of a layout (on the CPU)
function layout.block_mask(l, R, C)
  local mask = tl.zeros(R, C, { dtype = "bool" })
  local rows, cols = l.coo_rows:to("cpu"), l.coo_cols:to("cpu")
  local flat = mask:view(-1)
  for e = 1, rows:numel() do flat[rows[e] * C + cols[e] + 1] = true end
  return mask
end

--- nn.random_block_mask(R, C, density): each block row keeps round(density * C) blocks (at least
-- one) at columns drawn uniformly (tl.manual_seed makes it repeatable); a CPU bool tensor
function layout.random_block_mask(R, C, density)
  if type(density) ~= "number" or not (density > 0 and density <= 1) then
    options.error("nn.random_block_mask: density must be a number in (0, 1], got " .. tostring(density), 2)
  end
  local keep = math.max(1, math.floor(density * C + 0.5))
  local mask = tl.zeros(R, C, { dtype = "bool" })
  for r = 1, R do
    local chosen, row = tl.randperm(C), mask[r]
    for i = 1, keep do row[chosen[i]] = true end
  end
  return mask
end

--- nn.top_block_mask(norms, count): the mask of the count largest entries of norms [R, C] (ties
-- to the earlier block in row-major order); a CPU bool tensor
function layout.top_block_mask(norms, count)
  local R, C = norms:size(1), norms:size(2)
  local values = norms:to("cpu"):double():reshape(-1)
  local order = {}
  for i = 1, R * C do order[i] = i end
  local v = {}
  for i = 1, R * C do v[i] = values[i] end
  table.sort(order, function(a, b)
    if v[a] ~= v[b] then return v[a] > v[b] end
    return a < b
  end)
  local mask = tl.zeros(R * C, { dtype = "bool" })
  for i = 1, count do mask[order[i]] = true end
  return mask:view(R, C)
end

return layout
