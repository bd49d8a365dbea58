-- The CTC loss composed of tensor ops: the alpha recursion in log space, vectorised over the batch, with a Lua loop over time (CPU and CUDA; autograd differentiates it).
local tl = require("tlua")
local core = require("tlua.nn.functional.loss_core")

local fail, shape_str = core.fail, core.shape_str

-- log(0) as a finite number: the recursion's logsumexp then never meets -inf - -inf, whose
-- gradient is NaN; a log-likelihood below NEG / 2 is an impossible alignment (loss inf)
local NEG = -1e30

local INDEX = { int64 = true, int32 = true }

-- input_lengths / target_lengths (an integer, a list of integers or an int64/int32 tensor) as a
-- Lua list of n integers
local function lengths(who, what, v, n)
  local list
  if math.type(v) == "integer" then
    list = { v }
  elseif tl.is_tensor(v) then
    if not INDEX[v.dtype] or v:dim() > 1 then
      fail("%s: %s expected integers (a list or a 1-D int64/int32 tensor), got %s tensor of shape %s", who, what,
        core.a_dtype(v.dtype), shape_str(v.shape))
    end
    list = v:dim() == 0 and { v:item() } or v:totable()
  elseif type(v) == "table" then
    list = v
  else
    fail("%s: %s expected integers (a list or a 1-D int64/int32 tensor), got %s", who, what, type(v))
  end
  if #list ~= n then
    fail("%s: %s must have %d %s (one per sequence), got %d", who, what, n, n == 1 and "entry" or "entries", #list)
  end
  for b = 1, n do
    if math.type(list[b]) ~= "integer" or list[b] < 0 then
      fail("%s: %s[%d] must be a non-negative integer, got %s", who, what, b, tostring(list[b]))
    end
  end
  return list
end

-- the label sequences as Lua lists, from padded [N, S] or concatenated 1-D targets
local function label_lists(who, targets, target_lengths, n, batched_targets)
  local flat = targets:totable()
  local labels = {}
  if batched_targets then
    local S = targets.shape[2]
    for b = 1, n do
      if target_lengths[b] > S then
        fail("%s: target_lengths[%d] is %d, longer than the targets' %d columns", who, b, target_lengths[b], S)
      end
      labels[b] = table.move(flat[b], 1, target_lengths[b], 1, {})
    end
  else
    local total = 0
    for b = 1, n do total = total + target_lengths[b] end
    if total > #flat then
      fail("%s: target_lengths add up to %d, more than the %d concatenated targets", who, total, #flat)
    end
    local at = 0
    for b = 1, n do
      labels[b] = table.move(flat, at + 1, at + target_lengths[b], 1, {})
      at = at + target_lengths[b]
    end
  end
  return labels
end

local function check_labels(who, labels, C, blank)
  for b, list in ipairs(labels) do
    for k, c in ipairs(list) do
      if c < 1 or c > C or c == blank then
        fail("%s: target %d holds %d at position %d; labels must be classes 1..%d other than the blank (%d)", who, b,
          c, k, C, blank)
      end
    end
  end
end

--- ctc(who, o, log_probs [T, N, C] or [T, C], targets, input_lengths, target_lengths): the CTC
-- loss; o: blank, reduction, zero_infinity (core.options("ctc_loss", ...))
local function ctc(who, o, log_probs, targets, input_lengths, target_lengths)
  core.floating(who, "log_probs", log_probs)
  core.tensor(who, "targets", targets)
  if not INDEX[targets.dtype] then
    fail("%s: targets expected an int64 or int32 tensor of classes, got %s tensor", who, core.a_dtype(targets.dtype))
  end
  local unbatched = log_probs:dim() == 2
  if log_probs:dim() ~= 3 and not unbatched then
    fail("%s: log_probs must be [T, N, C] or [T, C], got shape %s", who, shape_str(log_probs.shape))
  end
  if unbatched then
    if targets:dim() ~= 1 then
      fail("%s: targets of unbatched log_probs [T, C] must be 1-D [S], got shape %s", who, shape_str(targets.shape))
    end
    log_probs, targets = log_probs:unsqueeze(2), targets:unsqueeze(1)
  end
  local T, N, C = log_probs.shape[1], log_probs.shape[2], log_probs.shape[3]
  if o.blank > C then fail("%s: blank is %d, out of range for the %d classes", who, o.blank, C) end
  local batched_targets = targets:dim() == 2
  if targets:dim() == 0 or targets:dim() > 2 or (batched_targets and targets.shape[1] ~= N) then
    fail("%s: targets must be [N, S] (N = %d, padded) or 1-D (concatenated), got shape %s", who, N,
      shape_str(targets.shape))
  end
  local in_len = lengths(who, "input_lengths", input_lengths, N)
  local tgt_len = lengths(who, "target_lengths", target_lengths, N)
  for b = 1, N do
    if in_len[b] > T then fail("%s: input_lengths[%d] is %d, longer than the %d time steps", who, b, in_len[b], T) end
  end
  local labels = label_lists(who, targets, tgt_len, N, batched_targets)
  check_labels(who, labels, C, o.blank)

  -- the extended labels (blank, l1, blank, l2, ..., blank), padded with blanks to L, and where
  -- the recursion may skip from s - 2 (a label unlike the one two places back)
  local S, max_in = 0, 0
  for b = 1, N do S, max_in = math.max(S, tgt_len[b]), math.max(max_in, in_len[b]) end
  local L = 2 * S + 1
  local ext, skip, last, prev, has_prev = {}, {}, {}, {}, {}
  for b = 1, N do
    local e, k = {}, {}
    for s = 1, L do
      e[s] = (s % 2 == 0 and s // 2 <= tgt_len[b]) and labels[b][s // 2] or o.blank
      k[s] = s >= 3 and e[s] ~= o.blank and e[s] ~= e[s - 2]
    end
    ext[b], skip[b] = e, k
    last[b], prev[b], has_prev[b] = 2 * tgt_len[b] + 1, math.max(2 * tgt_len[b], 1), { true, tgt_len[b] > 0 }
  end
  local device = log_probs.device
  local lp = log_probs
  if lp.dtype == "float16" or lp.dtype == "bfloat16" then lp = lp:float() end
  local dtype = lp.dtype
  local ext_t = tl.tensor(ext, { dtype = "int64", device = device })
  local skip_t = tl.tensor(skip, { dtype = "bool", device = device })

  -- lpe[t][b][s] = log_probs[t][b][ext[b][s]]
  local lpe = lp:gather(3, ext_t:unsqueeze(1):expand(T, N, L):contiguous())
  local start = {}
  for b = 1, N do
    start[b] = {}
    for s = 1, L do start[b][s] = s == 1 and 0 or NEG end
  end
  local alpha = tl.tensor(start, { dtype = dtype, device = device })
  local min_in = math.huge
  for b = 1, N do min_in = math.min(min_in, in_len[b]) end
  for t = 1, max_in do
    local a1 = tl.pad(alpha, { 1, -1 }, { value = NEG })
    local a2 = tl.where(skip_t, tl.pad(alpha, { 2, -2 }, { value = NEG }), NEG)
    local step = tl.stack({ alpha, a1, a2 }, 3):logsumexp(3) + lpe:select(1, t)
    if t > min_in then
      -- sequences already at their end keep their alpha
      local running = {}
      for b = 1, N do running[b] = { in_len[b] >= t } end
      step = tl.where(tl.tensor(running, { dtype = "bool", device = device }), step, alpha)
    end
    alpha = step
  end

  local ends = {}
  for b = 1, N do ends[b] = { last[b], prev[b] } end
  local picked = alpha:gather(2, tl.tensor(ends, { dtype = "int64", device = device }))
  picked = tl.where(tl.tensor(has_prev, { dtype = "bool", device = device }), picked, NEG)
  local loss = -picked:logsumexp(2)
  local impossible = loss:gt(-NEG / 2)
  loss = tl.where(impossible, o.zero_infinity and 0 or math.huge, loss)
  if dtype ~= log_probs.dtype then loss = loss:to(log_probs.dtype) end

  if o.reduction == "sum" then return loss:sum() end
  if o.reduction == "mean" then
    local divisors = {}
    for b = 1, N do divisors[b] = math.max(tgt_len[b], 1) end
    return (loss / tl.tensor(divisors, { dtype = loss.dtype, device = device })):mean()
  end
  if unbatched then return loss:squeeze(1) end
  return loss
end

return ctc
