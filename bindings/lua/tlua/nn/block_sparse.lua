-- tl.nn.BlockSparseLinear: a drop-in for nn.Linear whose weight is kept as b x b blocks on a pattern; from_dense, sparsify.
local tl = require("tlua")
local Module = require("tlua.nn.module").Module
local init = require("tlua.nn.init_weights")
local L = require("tlua.nn.block_layout")
local options = require("tlua.options")

local M = {}

-- the options of each function (tlua.options); the values are checked below, with messages of
-- their own
local ACCEPTED = {
  BlockSparseLinear = { block = "any", density = "any", mask = "any", bias = "boolean", dtype = "string",
    device = "string" },
  from_dense = { block = "any", density = "any" },
  sparsify = { block = "any", density = "any", filter = "any" },
}

local function fail(msg, level) options.error("nn.BlockSparseLinear: " .. msg, level + 1) end

local function check_block(block, in_features, out_features, level)
  if block ~= 32 and block ~= 64 and not (math.type(block) == "integer" and block >= 1) then
    fail("block must be a positive integer (32 or 64 for the fast kernels), got " .. tostring(block), level + 1)
  end
  for _, f in ipairs({ { "in_features", in_features }, { "out_features", out_features } }) do
    if math.type(f[2]) ~= "integer" or f[2] < 1 then
      fail(f[1] .. " must be a positive integer, got " .. tostring(f[2]), level + 1)
    end
    if f[2] % block ~= 0 then
      fail(string.format("%s (%d) must be a multiple of the block size (%d)", f[1], f[2], block), level + 1)
    end
  end
end

-- who: the function the message names (default nn.BlockSparseLinear)
local function check_density(density, level, who)
  if type(density) ~= "number" or not (density > 0 and density <= 1) then
    options.error((who or "nn.BlockSparseLinear") .. ": density must be a number in (0, 1], got " ..
      tostring(density), level + 1)
  end
end

--- BlockSparseLinear(in_features, out_features, {block = 32, density = d | mask = bool [out/block,
-- in/block], bias = true, dtype, device}, bias?): y = x W^T + b with W zero off the pattern
local BlockSparseLinear = Module:extend("BlockSparseLinear")
M.BlockSparseLinear = BlockSparseLinear

function BlockSparseLinear:init(in_features, out_features, opts, bias)
  opts = options.check(opts, "nn.BlockSparseLinear", ACCEPTED.BlockSparseLinear, 3)
  local block = opts.block or 32
  check_block(block, in_features, out_features, 3)
  local R, C = out_features // block, in_features // block
  local mask = opts.mask
  if mask ~= nil then
    if opts.density ~= nil then fail("give either density or mask, not both", 3) end
    if not tl.is_tensor(mask) or mask.dtype ~= "bool" then
      fail("mask must be a bool tensor, got " .. (tl.is_tensor(mask) and mask.dtype .. " tensor" or type(mask)), 3)
    end
    if mask:dim() ~= 2 or mask:size(1) ~= R or mask:size(2) ~= C then
      fail(string.format("mask must be [out_features / block, in_features / block] = [%d, %d], got [%s]", R, C,
        table.concat(mask.shape, ", ")), 3)
    end
    mask = mask:to("cpu")
  else
    local density = opts.density or 1
    check_density(density, 3)
    mask = L.random_block_mask(R, C, density)
  end
  if bias == nil then bias = opts.bias ~= false end
  self.in_features, self.out_features, self.block = in_features, out_features, block
  local device = opts.device or "cpu"
  local o = { dtype = opts.dtype or "float32", device = device }
  local layout = L.block_layout(mask)
  local nnz = layout.coo_rows:numel()
  self:register_parameter("blocks", tl.empty(nnz, block, block, o))
  if bias then self:register_parameter("bias", tl.empty(out_features, o)) end
  for _, name in ipairs(L.FIELDS) do self:register_buffer(name, layout[name]:to(device)) end
  self:reset_parameters()
end

--- reset_parameters(): nn.Linear's init on the kept blocks: U(-1/sqrt(in), 1/sqrt(in))
function BlockSparseLinear:reset_parameters()
  local bound = 1 / math.sqrt(self.in_features)
  init.uniform_(self.blocks, -bound, bound)
  if self.bias then init.uniform_(self.bias, -bound, bound) end
end

--- layout(): the index tensors (checked once per change of them: a loaded or edited layout)
function BlockSparseLinear:layout()
  local l, version = {}, 0
  for _, name in ipairs(L.FIELDS) do
    l[name] = self[name]
    version = version + self[name]._version
  end
  local key = tostring(self.row_offsets) .. ":" .. version
  if rawget(self, "_checked_layout") ~= key then
    tl.block_layout_validate(l, self.blocks:size(1))
    rawset(self, "_checked_layout", key)
  end
  return l
end

function BlockSparseLinear:forward(x)
  return tl.block_sparse_linear(x, self.blocks, self:layout(), self.bias)
end

--- nnz(): the number of kept blocks; density(): their share of the block grid
function BlockSparseLinear:nnz() return self.blocks:size(1) end

function BlockSparseLinear:density()
  return self:nnz() / ((self.out_features // self.block) * (self.in_features // self.block))
end

--- mask(): the pattern as a CPU bool tensor [out / block, in / block]
function BlockSparseLinear:mask()
  return L.block_mask(self, self.out_features // self.block, self.in_features // self.block)
end

--- to_dense(): the weight [out, in] as a dense tensor, zeros off the pattern (no gradient)
function BlockSparseLinear:to_dense()
  local b, R, C = self.block, self.out_features // self.block, self.in_features // self.block
  return tl.no_grad(function()
    local blocks = self.blocks:detach()
    local dense = tl.zeros(R, C, b, b, { dtype = blocks.dtype, device = blocks.device })
    local flat = dense:view(R * C, b, b)
    local rows, cols = self.coo_rows:to("cpu"), self.coo_cols:to("cpu")
    for e = 1, blocks:size(1) do flat[rows[e] * C + cols[e] + 1]:copy_(blocks[e]) end
    return dense:permute(1, 3, 2, 4):reshape(R * b, C * b)
  end)
end

function BlockSparseLinear:extra_repr()
  return string.format("in_features=%d, out_features=%d, block=%d, density=%.3g, bias=%s", self.in_features,
    self.out_features, self.block, self:density(), tostring(self.bias ~= nil))
end

-- the norm of each b x b block of a dense weight [R * b, C * b]: [R, C]
local function block_norms(weight, block)
  local R, C = weight:size(1) // block, weight:size(2) // block
  return weight:detach():double():reshape(R, block, C, block):pow(2):sum(4):sum(2):sqrt()
end

--- BlockSparseLinear.from_dense(linear, {block = 32, density = d}): the blocks of largest norm of
-- linear's weight (round(density * blocks), at least one), its bias, on its device and dtype
function BlockSparseLinear.from_dense(linear, opts)
  if type(linear) ~= "table" or not linear.weight or linear.weight:dim() ~= 2 then
    fail("from_dense: expected an nn.Linear, got " .. tostring(linear), 2)
  end
  opts = options.check(opts, "nn.BlockSparseLinear.from_dense", ACCEPTED.from_dense, 2)
  local block = opts.block or 32
  local out_features, in_features = linear.weight:size(1), linear.weight:size(2)
  check_block(block, in_features, out_features, 2)
  check_density(opts.density, 2, "nn.BlockSparseLinear.from_dense")
  local R, C = out_features // block, in_features // block
  local count = math.max(1, math.floor(opts.density * R * C + 0.5))
  local mask = L.top_block_mask(block_norms(linear.weight, block), count)
  local w = linear.weight
  local m = BlockSparseLinear(in_features, out_features,
    { block = block, mask = mask, bias = linear.bias ~= nil, dtype = w.dtype, device = w.device })
  tl.no_grad(function()
    local tiles = w:detach():reshape(R, block, C, block):permute(1, 3, 2, 4):reshape(R * C, block, block)
    local rows, cols = m.coo_rows:to("cpu"), m.coo_cols:to("cpu")
    for e = 1, m.blocks:size(1) do m.blocks[e]:copy_(tiles[rows[e] * C + cols[e] + 1]) end
    if linear.bias then m.bias:copy_(linear.bias) end
  end)
  return m
end

--- nn.sparsify(model, {block = 32, density = d, filter = function(name, module) -> bool}):
-- replaces the nn.Linear layers of model that filter accepts (default: every Linear whose sizes
-- are multiples of block) by BlockSparseLinear.from_dense; returns model and the replaced names
function M.sparsify(model, opts)
  if opts == nil then options.error("nn.sparsify: expected an options table {block, density, filter}", 2) end
  options.check(opts, "nn.sparsify", ACCEPTED.sparsify, 2)
  local block = opts.block or 32
  if math.type(block) ~= "integer" or block < 1 then
    options.error("nn.sparsify: block must be a positive integer, got " .. tostring(block), 2)
  end
  check_density(opts.density, 2, "nn.sparsify")
  if opts.filter ~= nil and type(opts.filter) ~= "function" then
    options.error("nn.sparsify: filter must be a function(name, module), got " .. type(opts.filter), 2)
  end
  -- every replacement is decided (and every error raised) before the model changes
  local replaced, changes = {}, {}
  local function visit(parent, prefix)
    for _, key in ipairs(parent._module_keys) do
      local child = rawget(parent, key)
      local name = prefix .. tostring(key)
      if child ~= nil and child._class_name == "Linear" then
        local fits = child.in_features % block == 0 and child.out_features % block == 0
        local wanted
        if opts.filter then wanted = opts.filter(name, child) else wanted = fits end
        if wanted then
          if not fits then
            options.error(string.format("nn.sparsify: %s is Linear(%d, %d), whose sizes are not multiples of block %d",
              name, child.in_features, child.out_features, block), 3)
          end
          changes[#changes + 1] = { parent, key, child }
          replaced[#replaced + 1] = name
        end
      elseif child ~= nil then
        visit(child, name .. ".")
      end
    end
  end
  visit(model, "")
  local new = {}
  for i, c in ipairs(changes) do new[i] = BlockSparseLinear.from_dense(c[3], { block = block, density = opts.density }) end
  for i, c in ipairs(changes) do rawset(c[1], c[2], new[i]) end
  return model, replaced
end

M.block_layout = L.block_layout
M.block_mask = L.block_mask
M.random_block_mask = L.random_block_mask

return M
