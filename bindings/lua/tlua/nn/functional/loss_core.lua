-- The losses' options, checks and math, shared by nn.functional's loss forms and the nn loss modules (composed of tensor ops; autograd differentiates them).
--
-- Each loss is core[name](who, o, tensors...): who names the caller in errors ("mse_loss" or
-- "nn.MSELoss"), o its options as core.options returned them (defaults filled in). Classes and
-- blank labels count from 1, as everywhere in tlua.
local tl = require("tlua")
local options = require("tlua.options")

local core = {}

local REDUCTION = { none = true, mean = true, sum = true }
local KL_REDUCTION = { none = true, mean = true, sum = true, batchmean = true }

--- core.ACCEPTED[name]: the options each loss takes and their kinds (tlua.options)
core.ACCEPTED = {
  cross_entropy = { weight = "tensor", ignore_index = "integer", reduction = "string", label_smoothing = "number" },
  nll_loss = { weight = "tensor", ignore_index = "integer", reduction = "string" },
  binary_cross_entropy = { weight = "tensor", reduction = "string" },
  binary_cross_entropy_with_logits = { weight = "tensor", pos_weight = "tensor", reduction = "string" },
  mse_loss = { reduction = "string" },
  l1_loss = { reduction = "string" },
  smooth_l1_loss = { reduction = "string", beta = "number" },
  huber_loss = { reduction = "string", delta = "number" },
  kl_div = { reduction = "string", log_target = "boolean" },
  cosine_embedding_loss = { margin = "number", reduction = "string" },
  margin_ranking_loss = { margin = "number", reduction = "string" },
  triplet_margin_loss = { margin = "number", p = "number", eps = "number", swap = "boolean", reduction = "string" },
  ctc_loss = { blank = "integer", reduction = "string", zero_infinity = "boolean" },
}

-- each option's default (reduction "mean" for all)
local DEFAULTS = {
  cross_entropy = { label_smoothing = 0 },
  smooth_l1_loss = { beta = 1 },
  huber_loss = { delta = 1 },
  kl_div = { log_target = false },
  cosine_embedding_loss = { margin = 0 },
  margin_ranking_loss = { margin = 0 },
  triplet_margin_loss = { margin = 1, p = 2, eps = 1e-6, swap = false },
  ctc_loss = { blank = 1, zero_infinity = false },
}

local FLOATING = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local INDEX = { int64 = true, int32 = true }

-- raises at the user's line (tlua.options walks the stack; 5 is the fallback of a check two
-- helpers below a functional form)
local function fail(fmt, ...)
  options.error(string.format(fmt, ...), 5)
end
core.fail = fail

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end
core.shape_str = shape_str

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end
core.same_shape = same_shape

-- the value's kind for a message: "a tensor of shape [2, 3]", "number"
-- "a float32", "an int64": a dtype with its article
local function a_dtype(dtype)
  return (dtype:match("^[aeiou]") and "an " or "a ") .. dtype
end
core.a_dtype = a_dtype

local function kind_of(v)
  if tl.is_tensor(v) then return a_dtype(v.dtype) .. " tensor of shape " .. shape_str(v.shape) end
  return type(v)
end

--- core.tensor(who, what, v): v, or an error naming the argument when v is not a tensor
function core.tensor(who, what, v)
  if not tl.is_tensor(v) then fail("%s: %s expected a tensor, got %s", who, what, kind_of(v)) end
  return v
end

--- core.floating(who, what, v): v, or an error unless it is a floating tensor
function core.floating(who, what, v)
  core.tensor(who, what, v)
  if not FLOATING[v.dtype] then fail("%s: %s expected a floating tensor, got %s", who, what, kind_of(v)) end
  return v
end

--- core.classes(who, what, v): v, or an error unless it is an int64 or int32 tensor
function core.classes(who, what, v)
  core.tensor(who, what, v)
  if not INDEX[v.dtype] then
    fail("%s: %s expected an int64 or int32 tensor of classes (counting from 1), got %s", who, what, kind_of(v))
  end
  return v
end

-- an error unless target has input's shape
local function check_same(who, input_name, input, target_name, target)
  if not same_shape(input.shape, target.shape) then
    fail("%s: %s must have the shape of %s %s, got %s", who, target_name, input_name, shape_str(input.shape),
      shape_str(target.shape))
  end
end
core.check_same = check_same

--- core.check_broadcast(who, what, t, shape): an error unless t broadcasts to shape (without
-- growing it)
function core.check_broadcast(who, what, t, shape)
  local ts = t.shape
  local ok = #ts <= #shape
  for i = 1, #ts do
    local s, d = ts[#ts - i + 1], shape[#shape - i + 1]
    if ok and s ~= 1 and s ~= d then ok = false end
  end
  if not ok then fail("%s: %s of shape %s does not broadcast to %s", who, what, shape_str(ts), shape_str(shape)) end
end

-- the shape two or more tensors broadcast to, or an error naming them
local function broadcast_shapes(who, names, tensors)
  local out = {}
  local n = 0
  for _, t in ipairs(tensors) do n = math.max(n, t:dim()) end
  for k = 1, n do
    local size = 1
    for i, t in ipairs(tensors) do
      local s = t.shape[t:dim() - n + k] or 1
      if s ~= 1 then
        if size ~= 1 and s ~= size then
          local shapes = {}
          for j, u in ipairs(tensors) do shapes[j] = names[j] .. " " .. shape_str(u.shape) end
          fail("%s: the shapes of %s do not broadcast", who, table.concat(shapes, ", "))
        end
        size = s
      end
      if i == #tensors then out[k] = size end
    end
  end
  return out
end
core.broadcast_shapes = broadcast_shapes

--- core.options(name, opts, who, level) -> o: opts checked (tlua.options, then their values),
-- with the defaults filled in. level: where the user is when the stack cannot be read, counted
-- as options.error() counts it from core.options's caller (2 for a functional form, 3 for a module's init).
function core.options(name, opts, who, level)
  opts = options.check(opts, who, core.ACCEPTED[name], level + 1)
  local o = {}
  for k, v in pairs(DEFAULTS[name] or {}) do o[k] = v end
  for k, v in pairs(opts) do o[k] = v end
  o.reduction = o.reduction or "mean"
  local reductions = name == "kl_div" and KL_REDUCTION or REDUCTION
  local function bad(fmt, ...) options.error(who .. ": " .. string.format(fmt, ...), level + 2) end
  if not reductions[o.reduction] then
    bad("reduction must be 'none', 'mean'%s or 'sum', got '%s'", name == "kl_div" and ", 'batchmean'" or "",
      o.reduction)
  end
  for _, key in ipairs({ "weight", "pos_weight" }) do
    local w = o[key]
    if w ~= nil and not FLOATING[w.dtype] then bad("%s expected a floating tensor, got %s", key, kind_of(w)) end
  end
  if o.weight ~= nil and (name == "cross_entropy" or name == "nll_loss") and o.weight:dim() ~= 1 then
    bad("weight must be a 1-D tensor (one weight per class), got shape %s", shape_str(o.weight.shape))
  end
  local function check_number(key, ok, wanted)
    local v = o[key]
    if v ~= nil and (v ~= v or not ok(v)) then bad("%s must be %s, got %s", key, wanted, tostring(v)) end
  end
  check_number("label_smoothing", function(v) return v >= 0 and v <= 1 end, "in [0, 1]")
  check_number("beta", function(v) return v >= 0 end, "non-negative")
  check_number("delta", function(v) return v > 0 end, "positive")
  check_number("p", function(v) return v > 0 end, "positive")
  check_number("eps", function(v) return v >= 0 end, "non-negative")
  check_number("margin", function(v) return v > -math.huge and v < math.huge end, "finite")
  check_number("blank", function(v) return v >= 1 end, "a class (counting from 1)")
  return o
end

--- core.reduce(loss, reduction): loss ("none"), its mean or its sum
function core.reduce(loss, reduction)
  if reduction == "mean" then return loss:mean() end
  if reduction == "sum" then return loss:sum() end
  return loss
end

-- ---- regression losses -----------------------------------------------------------------------
local function pointwise_inputs(who, input, target)
  core.floating(who, "input", input)
  core.tensor(who, "target", target)
  check_same(who, "input", input, "target", target)
end

function core.mse_loss(who, o, input, target)
  pointwise_inputs(who, input, target)
  local d = input - target
  return core.reduce(d * d, o.reduction)
end

function core.l1_loss(who, o, input, target)
  pointwise_inputs(who, input, target)
  return core.reduce((input - target):abs(), o.reduction)
end

function core.smooth_l1_loss(who, o, input, target)
  pointwise_inputs(who, input, target)
  local d = (input - target):abs()
  local beta = o.beta
  if beta == 0 then return core.reduce(d, o.reduction) end
  return core.reduce(tl.where(d:lt(beta), d * d * (0.5 / beta), d - 0.5 * beta), o.reduction)
end

function core.huber_loss(who, o, input, target)
  pointwise_inputs(who, input, target)
  local d = (input - target):abs()
  local delta = o.delta
  return core.reduce(tl.where(d:lt(delta), d * d * 0.5, (d - 0.5 * delta) * delta), o.reduction)
end

function core.kl_div(who, o, input, target)
  pointwise_inputs(who, input, target)
  local out
  if o.log_target then
    out = tl.exp(target) * (target - input)
  else
    out = tl.xlogy(target, target) - target * input
  end
  if o.reduction == "batchmean" then
    if input:dim() == 0 then return out:sum() end
    return out:sum() / input.shape[1]
  end
  return core.reduce(out, o.reduction)
end

-- ---- binary cross entropy ----------------------------------------------------------------------
local function clamped_logs(x)
  return x:log():clamp(-100), tl.log1p(-x):clamp(-100)
end

-- -(y log x + (1 - y) log(1 - x)), each log clamped at -100; its gradient is torch's,
-- (x - y) / max(x (1 - x), 1e-12), finite where x is 0 or 1 (torch's 1e-12 is a float32 constant),
-- and the target's is torch's too
local BCE_EPS = 9.999999960041972e-13
local BinaryCrossEntropy = tl.autograd.Function {
  name = "binary_cross_entropy",
  forward = function(ctx, x, y)
    ctx:save_for_backward(x, y)
    local log_x, log_1mx = clamped_logs(x)
    return (y - 1) * log_1mx - y * log_x
  end,
  backward = function(ctx, g)
    local x, y = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local gx, gy
    if ctx.needs_input_grad[1] then gx = g * (x - y) / (x * (1 - x)):clamp(BCE_EPS) end
    -- the target's: torch's -logit(x), unclamped (inf where x is 0 or 1)
    if ctx.needs_input_grad[2] then gy = g * (tl.log1p(-x) - x:log()) end
    return gx, gy
  end,
}

function core.binary_cross_entropy(who, o, input, target)
  pointwise_inputs(who, input, target)
  core.floating(who, "target", target)
  if input.device == "cpu" then
    -- (on CUDA no check: it would wait for the device; a value outside [0, 1] gives NaN)
    local inside = input:ge(0):logical_and(input:le(1))
    if not inside:all():item() then
      local pos = inside:logical_not():flatten():nonzero()[1][1]
      fail("%s: input holds %s at position %d, outside [0, 1] (the input is a probability)", who,
        tostring(input:detach():flatten()[pos]), pos)
    end
  end
  local loss = BinaryCrossEntropy(input, target)
  if o.weight then
    core.check_broadcast(who, "weight", o.weight, input.shape)
    loss = loss * o.weight
  end
  return core.reduce(loss, o.reduction)
end

--- core.softplus(z): log(1 + exp(z)) exact on the whole line (no threshold), and sigmoid(z) its
-- gradient everywhere (z = 0 included): each branch of the where sees only its own side's values
function core.softplus(z)
  local pos = z:gt(0)
  local zp, zn = tl.where(pos, z, 0), tl.where(pos, 0, z)
  return tl.where(pos, zp + tl.log1p(tl.exp(-zp)), tl.log1p(tl.exp(zn)))
end

function core.binary_cross_entropy_with_logits(who, o, input, target)
  pointwise_inputs(who, input, target)
  core.floating(who, "target", target)
  -- (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x))
  local sp = core.softplus(-input)
  local loss
  if o.pos_weight then
    core.check_broadcast(who, "pos_weight", o.pos_weight, input.shape)
    loss = (1 - target) * input + ((o.pos_weight - 1) * target + 1) * sp
  else
    loss = (1 - target) * input + sp
  end
  if o.weight then
    core.check_broadcast(who, "weight", o.weight, input.shape)
    loss = loss * o.weight
  end
  return core.reduce(loss, o.reduction)
end

-- ---- negative log likelihood and cross entropy ------------------------------------------------
-- The class dim is dim 2 of [N, C, d1, ...] (dim 1 of an unbatched [C]); a class target has the
-- input's shape without it. Targets equal to ignore_index (any integer; none by default) count
-- for nothing, and with reduction "mean" the sum is divided by the summed weights of the others.

-- an error unless every class of target is in 1..C or is ignore_index (on the CPU; on CUDA
-- gather checks the classes it reads and raises at the next synchronization)
local function check_class_range(who, target, C, ignore_index)
  if target.device ~= "cpu" or target:numel() == 0 then return end
  local bad = target:lt(1):logical_or(target:gt(C))
  if ignore_index ~= nil then bad = bad:logical_and(target:ne(ignore_index)) end
  if bad:any():item() then
    local pos = bad:flatten():nonzero()[1][1]
    fail("%s: target holds %d at position %d (shape %s), out of range for the %d classes (expected 1 <= class <= %d%s;"
      .. " classes count from 1)", who, target:flatten()[pos], pos, shape_str(target.shape), C, C,
      ignore_index ~= nil and (" or ignore_index " .. ignore_index) or "")
  end
end

-- input [N, C, d...] (batched) or [C]: the batched input and target, and whether it was unbatched
local function batched(who, input, target, target_is_class)
  core.floating(who, "input", input)
  if input:dim() == 0 then fail("%s: input must be [N, C, d1, ...] or [C], got a 0-dim tensor", who) end
  local unbatched = input:dim() == 1
  if unbatched then input = input:unsqueeze(1) end
  local wanted = input.shape
  if target_is_class then table.remove(wanted, 2) end
  if unbatched then table.remove(wanted, 1) end
  if not same_shape(target.shape, wanted) then
    local layout = unbatched and "[C]" or (input:dim() == 2 and "[N, C]" or "[N, C, d1, ...]")
    fail("%s: target must have shape %s for input %s %s, got %s", who, shape_str(wanted), layout,
      shape_str(unbatched and { input.shape[2] } or input.shape), shape_str(target.shape))
  end
  if unbatched then target = target:unsqueeze(1) end
  return input, target, unbatched
end

-- weight [C] viewed to broadcast along dim 2 of an input of ndim dims
local function class_view(weight, ndim)
  local shape = { 1, weight:numel() }
  for _ = 3, ndim do shape[#shape + 1] = 1 end
  return weight:view(shape)
end

local function check_weight(who, weight, C)
  if weight ~= nil and weight:numel() ~= C then
    fail("%s: weight must have one element per class (%d), got shape %s", who, C, shape_str(weight.shape))
  end
end

-- NLL of log-probabilities lp [N, C, d...] at class targets [N, d...]: the loss per target (0
-- where ignored) and the reduction's denominator (the summed weights of the targets kept)
local function nll_terms(lp, target, o)
  local ignored = o.ignore_index ~= nil and target:eq(o.ignore_index) or nil
  local safe = ignored and tl.where(ignored, 1, target) or target
  local picked = lp:gather(2, safe:unsqueeze(2)):squeeze(2)
  local w
  if o.weight then
    w = o.weight:index_select(1, safe:flatten()):view(target.shape)
    if ignored then w = tl.where(ignored, 0, w) end
  elseif ignored then
    w = ignored:logical_not():to(lp.dtype)
  end
  local loss = w and -(picked * w) or -picked
  if ignored then loss = tl.where(ignored, 0, loss) end
  return loss, w, ignored
end

-- reduces per-target terms by the rule of the class-target losses
local function reduce_classes(loss, w, reduction)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  if w then return loss:sum() / w:sum() end
  return loss:mean()
end

function core.nll_loss(who, o, input, target)
  core.classes(who, "target", target)
  local unbatched
  input, target, unbatched = batched(who, input, target, true)
  local C = input.shape[2]
  check_weight(who, o.weight, C)
  check_class_range(who, target, C, o.ignore_index)
  local loss, w = nll_terms(input, target, o)
  local out = reduce_classes(loss, w, o.reduction)
  if unbatched and o.reduction == "none" then out = out:squeeze(1) end
  return out
end

-- the fused kernel tl.cross_entropy serves the plain case: class targets, no weight, no
-- ignore_index, reduction mean (sum: the mean times the count), any [N, C, d...] layout
local function fused_cross_entropy(input, target, o)
  local C = input.shape[2]
  local rows = input
  if input:dim() > 2 then rows = input:movedim(2, -1):reshape(-1, C) end
  local mean = tl.cross_entropy(rows, target:reshape(-1), { label_smoothing = o.label_smoothing })
  if o.reduction == "sum" then return mean * rows.shape[1] end
  return mean
end

function core.cross_entropy(who, o, input, target)
  core.tensor(who, "target", target)
  local probabilities = FLOATING[target.dtype]
  if not probabilities then core.classes(who, "target", target) end
  local unbatched
  input, target, unbatched = batched(who, input, target, not probabilities)
  local C = input.shape[2]
  check_weight(who, o.weight, C)
  local eps = o.label_smoothing
  local out
  if probabilities then
    if o.ignore_index ~= nil then
      fail("%s: ignore_index applies to class targets only, not to class probabilities (a floating target)", who)
    end
    local lp = input:log_softmax(2)
    if eps > 0 then target = target * (1 - eps) + eps / C end
    local prod = lp * target
    if o.weight then prod = prod * class_view(o.weight, input:dim()) end
    if o.reduction == "none" then
      out = -prod:sum(2)
    elseif o.reduction == "sum" then
      out = -prod:sum()
    else
      out = -prod:sum() / (input:numel() / C)
    end
  else
    check_class_range(who, target, C, o.ignore_index)
    if o.weight == nil and o.ignore_index == nil and o.reduction ~= "none" and target:numel() > 0 then
      out = fused_cross_entropy(input, target, o)
    else
      local lp = input:log_softmax(2)
      local loss, w, ignored = nll_terms(lp, target, o)
      out = reduce_classes(loss, w, o.reduction)
      if eps > 0 then
        -- torch: (1 - eps) nll + eps / C * (minus the (weighted) sum of the log-probabilities)
        local smooth = o.weight and -(lp * class_view(o.weight, lp:dim())):sum(2) or -lp:sum(2)
        if ignored then smooth = tl.where(ignored, 0, smooth) end
        if o.reduction == "mean" and w == nil then
          smooth = smooth:mean()
        elseif o.reduction == "mean" then
          smooth = smooth:sum() / w:sum()
        elseif o.reduction == "sum" then
          smooth = smooth:sum()
        end
        out = out * (1 - eps) + smooth * (eps / C)
      end
    end
  end
  if unbatched and o.reduction == "none" then out = out:squeeze(1) end
  return out
end

-- ---- embedding and ranking losses ------------------------------------------------------------
function core.cosine_embedding_loss(who, o, x1, x2, y)
  core.floating(who, "input1", x1)
  core.floating(who, "input2", x2)
  core.tensor(who, "target", y)
  if x1:dim() ~= 1 and x1:dim() ~= 2 then
    fail("%s: input1 must be [N, D] or [D], got shape %s", who, shape_str(x1.shape))
  end
  check_same(who, "input1", x1, "input2", x2)
  local wanted = x1:dim() == 2 and { x1.shape[1] } or {}
  if not same_shape(y.shape, wanted) then
    fail("%s: target must have shape %s (one 1 or -1 per pair), got %s", who, shape_str(wanted), shape_str(y.shape))
  end
  local dim = x1:dim()
  local EPS = 1e-12
  local prod = (x1 * x2):sum(dim)
  local denom = (((x1 * x1):sum(dim) + EPS) * ((x2 * x2):sum(dim) + EPS)):sqrt()
  local cos = prod / denom
  local pos = tl.where(y:eq(1), 1 - cos, 0)
  local neg = tl.where(y:eq(-1), (cos - o.margin):clamp(0), 0)
  return core.reduce(pos + neg, o.reduction)
end

function core.margin_ranking_loss(who, o, x1, x2, y)
  core.floating(who, "input1", x1)
  core.floating(who, "input2", x2)
  core.tensor(who, "target", y)
  if x1:dim() ~= x2:dim() or x1:dim() ~= y:dim() then
    fail("%s: input1, input2 and target must have the same number of dims, got %s, %s and %s", who,
      shape_str(x1.shape), shape_str(x2.shape), shape_str(y.shape))
  end
  broadcast_shapes(who, { "input1", "input2", "target" }, { x1, x2, y })
  return core.reduce((-y * (x1 - x2) + o.margin):clamp(0), o.reduction)
end

-- torch.pairwise_distance: the p-norm of x1 - x2 + eps along the last dim
local function pairwise_distance(x1, x2, p, eps)
  return (x1 - x2 + eps):norm(p, -1)
end

function core.triplet_margin_loss(who, o, anchor, positive, negative)
  local names = { "anchor", "positive", "negative" }
  local ts = { anchor, positive, negative }
  for i, t in ipairs(ts) do core.floating(who, names[i], t) end
  if anchor:dim() ~= positive:dim() or anchor:dim() ~= negative:dim() or (anchor:dim() ~= 1 and anchor:dim() ~= 2) then
    fail("%s: anchor, positive and negative must all be [N, D] or all [D], got %s, %s and %s", who,
      shape_str(anchor.shape), shape_str(positive.shape), shape_str(negative.shape))
  end
  broadcast_shapes(who, names, ts)
  local d_pos = pairwise_distance(anchor, positive, o.p, o.eps)
  local d_neg = pairwise_distance(anchor, negative, o.p, o.eps)
  if o.swap then d_neg = tl.minimum(d_neg, pairwise_distance(positive, negative, o.p, o.eps)) end
  return core.reduce((d_pos - d_neg + o.margin):clamp(0), o.reduction)
end

return core
