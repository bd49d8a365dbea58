-- tl.nn.functional's activations without an op of their own (merged into tl.nn.functional by functional.lua): relu6, prelu, threshold, softsign, tanhshrink, hardshrink, softshrink, logsigmoid, glu, softmin, composed from tensor ops.
local tl = require("tlua")
local options = require("tlua.options")

local part = {}

local is_tensor = tl.is_tensor

local function check_input(x, who)
  if not is_tensor(x) then options.error(string.format("%s: input must be a tensor, got %s", who, type(x)), 3) end
end

-- v must be a number (what: its name); nil takes default
local function number(v, default, who, what)
  if v == nil then return default end
  if type(v) ~= "number" then
    options.error(string.format("%s: %s must be a number, got %s", who, what, type(v)), 3)
  end
  return v
end

local function dim_arg(x, dim, who)
  if math.type(dim) ~= "integer" then
    options.error(string.format("%s: dim must be an integer, got %s", who, tostring(dim)), 3)
  end
  local n = #x.shape
  if dim == 0 or dim > n or dim < -n then
    options.error(string.format("%s: dim %d is out of range for a tensor of %d dims (1..%d or -%d..-1)", who, dim, n,
      n, n), 3)
  end
  return dim < 0 and n + 1 + dim or dim
end

--- relu6(x): min(max(x, 0), 6) (tl.hardtanh(x, 0, 6))
function part.relu6(x)
  check_input(x, "relu6")
  return tl.hardtanh(x, 0, 6)
end

--- prelu(x, weight): max(0, x) + weight * min(0, x); weight has 1 element or one per channel
-- (x's dim 2; a 1-dim x has no channel dim)
function part.prelu(x, weight)
  check_input(x, "prelu")
  if not is_tensor(weight) then
    options.error("prelu: weight must be a tensor, got " .. type(weight), 2)
  end
  local n = weight:numel()
  local channels = #x.shape >= 2 and x.shape[2] or 1
  if #weight.shape > 1 or (n ~= 1 and n ~= channels) then
    options.error(string.format("prelu: weight must have 1 element or one per channel (%d), got shape [%s]",
      channels, table.concat(weight.shape, ", ")), 2)
  end
  local w = weight
  if n > 1 and #x.shape > 2 then
    local shape = { n }
    for d = 3, #x.shape do shape[d - 1] = 1 end
    w = weight:view(shape)
  elseif n == 1 then
    w = weight:view({})
  end
  return tl.where(x:gt(0), x, w * x)
end

--- threshold(x, threshold, value): x where x > threshold, value elsewhere
function part.threshold(x, threshold, value)
  check_input(x, "threshold")
  if type(threshold) ~= "number" then
    options.error("threshold: threshold must be a number, got " .. type(threshold), 2)
  end
  if type(value) ~= "number" then options.error("threshold: value must be a number, got " .. type(value), 2) end
  return tl.where(x:gt(threshold), x, value)
end

--- softsign(x): x / (1 + |x|)
function part.softsign(x)
  check_input(x, "softsign")
  return x / (x:abs() + 1)
end

--- tanhshrink(x): x - tanh(x)
function part.tanhshrink(x)
  check_input(x, "tanhshrink")
  return x - tl.tanh(x)
end

--- hardshrink(x, lambd = 0.5): x where |x| > lambd, 0 elsewhere
function part.hardshrink(x, lambd)
  check_input(x, "hardshrink")
  lambd = number(lambd, 0.5, "hardshrink", "lambd")
  return tl.where(x:abs():gt(lambd), x, 0)
end

--- softshrink(x, lambd = 0.5): x - lambd above lambd, x + lambd below -lambd, 0 between (lambd >= 0)
function part.softshrink(x, lambd)
  check_input(x, "softshrink")
  lambd = number(lambd, 0.5, "softshrink", "lambd")
  if not (lambd >= 0) then
    options.error("softshrink: lambd must be >= 0, got " .. tostring(lambd), 2)
  end
  return x - tl.clamp(x, -lambd, lambd)
end

--- logsigmoid(x): log(1 / (1 + exp(-x))) = -softplus(-x)
function part.logsigmoid(x)
  check_input(x, "logsigmoid")
  return -tl.softplus(-x)
end

--- glu(x, dim = -1): a * sigmoid(b), a and b the halves of x along dim (its size must be even)
function part.glu(x, dim)
  check_input(x, "glu")
  if #x.shape == 0 then options.error("glu: input must have at least 1 dim, got a 0-dim tensor", 2) end
  local d = dim_arg(x, dim == nil and -1 or dim, "glu")
  if x.shape[d] % 2 ~= 0 then
    options.error(string.format("glu: the size of dim %d must be even, got %d", d, x.shape[d]), 2)
  end
  local half = x.shape[d] // 2
  return x:narrow(d, 1, half) * tl.sigmoid(x:narrow(d, half + 1, half))
end

--- softmin(x, dim): softmax(-x, dim)
function part.softmin(x, dim)
  check_input(x, "softmin")
  return tl.softmax(-x, dim_arg(x, dim, "softmin"))
end

return part
