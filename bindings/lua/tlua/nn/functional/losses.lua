-- tl.nn.functional's losses forms (merged into tl.nn.functional by functional.lua): every loss of torch.nn.functional, its tensors then an options table.
--
-- Every form takes reduction = "none" | "mean" | "sum" (default "mean"; kl_div also "batchmean")
-- and refuses an unknown option key (tlua.options). Classes count from 1 (targets 1..C, the CTC
-- blank 1 by default). Inputs and targets of the pointwise losses must have the same shape (torch
-- broadcasts them with a warning; tlua refuses). The math is in loss_core.lua and ctc.lua.
local core = require("tlua.nn.functional.loss_core")
local tl = require("tlua")
local ctc = require("tlua.nn.functional.ctc")

local part = {}

-- F[name](tensors..., opts): opts checked (errors at the caller's line), then the loss
local function form(name, ntensors)
  if ntensors == 2 then
    return function(a, b, opts)
      local o = core.options(name, opts, name, 2)
      local out = core[name](name, o, a, b)
      return out
    end
  end
  return function(a, b, c, opts)
    local o = core.options(name, opts, name, 2)
    local out = core[name](name, o, a, b, c)
    return out
  end
end

--- cross_entropy(input [N, C, d1, ...] or [C], target, {weight, ignore_index, label_smoothing = 0,
-- reduction = "mean"}): log_softmax over the classes (dim 2), then the NLL of the target's classes
-- (an int64/int32 target [N, d1, ...] of classes 1..C), or the cross entropy with class
-- probabilities (a floating target of input's shape). weight [C] scales each class; targets equal
-- to ignore_index count for nothing; "mean" divides by the summed weights of the targets kept (the
-- count without weight). label_smoothing mixes the target with the uniform distribution, as torch.
-- The plain case ([N, C, ...] class targets, no weight or ignore_index) runs the fused
-- tl.cross_entropy kernel.
part.cross_entropy = form("cross_entropy", 2)

--- linear_cross_entropy(input [..., C], weight [V, C], target [...], {bias, label_smoothing = 0,
-- ignore_index, reduction = "mean" | "sum", chunk = 0}): cross_entropy(linear(input, weight, bias),
-- target) without the [N, V] logits: computed in chunks of `chunk` rows (0: about 256 MiB of logits
-- each), the gradients made in the same pass (tl.linear_cross_entropy). The loss is float32
-- (float64 for float64 input); under autocast the GEMMs run in the autocast dtype.
function part.linear_cross_entropy(input, weight, target, opts)
  return tl.linear_cross_entropy(input, weight, target, opts)
end

--- nll_loss(input [N, C, d1, ...] or [C] of log-probabilities, target [N, d1, ...] of classes
-- 1..C, {weight, ignore_index, reduction = "mean"}): -weight[c] input[c] per target; "mean"
-- divides by the summed weights of the targets kept
part.nll_loss = form("nll_loss", 2)

--- binary_cross_entropy(input, target, {weight, reduction = "mean"}): -w (y log x + (1 - y)
-- log(1 - x)) with input x of probabilities in [0, 1] (checked on the CPU) and each log clamped at
-- -100, as torch; the gradient is torch's, (x - y) / max(x (1 - x), 1e-12). weight broadcasts to
-- the input
part.binary_cross_entropy = form("binary_cross_entropy", 2)

--- binary_cross_entropy_with_logits(input, target, {weight, pos_weight, reduction = "mean"}):
-- -w (p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))) in the numerically stable form
-- (1 - y) x + (1 + (p - 1) y) softplus(-x); pos_weight p (e.g. [C]) and weight broadcast to input
part.binary_cross_entropy_with_logits = form("binary_cross_entropy_with_logits", 2)

--- mse_loss(input, target, {reduction = "mean"}): (input - target)^2
part.mse_loss = form("mse_loss", 2)

--- l1_loss(input, target, {reduction = "mean"}): |input - target|
part.l1_loss = form("l1_loss", 2)

--- smooth_l1_loss(input, target, {beta = 1, reduction = "mean"}): with d = |input - target|,
-- 0.5 d^2 / beta where d < beta, d - 0.5 beta elsewhere (beta = 0: l1_loss)
part.smooth_l1_loss = form("smooth_l1_loss", 2)

--- huber_loss(input, target, {delta = 1, reduction = "mean"}): with d = |input - target|,
-- 0.5 d^2 where d < delta, delta (d - 0.5 delta) elsewhere
part.huber_loss = form("huber_loss", 2)

--- kl_div(input, target, {log_target = false, reduction = "mean"}): the pointwise KL divergence
-- of log-probabilities input from target: target (log target - input) (xlogy, 0 where target is
-- 0), or exp(target) (target - input) with log_target; "batchmean" divides the sum by the batch
-- size (dim 1), which is the KL divergence; "mean" divides by the number of elements, as torch
part.kl_div = form("kl_div", 2)

--- cosine_embedding_loss(input1 [N, D] or [D], input2, target [N] or [], {margin = 0,
-- reduction = "mean"}): 1 - cos(x1, x2) where the target is 1, max(0, cos(x1, x2) - margin) where
-- it is -1 (0 for other values); cos with torch's 1e-12 added to each squared norm
part.cosine_embedding_loss = form("cosine_embedding_loss", 3)

--- margin_ranking_loss(input1, input2, target, {margin = 0, reduction = "mean"}):
-- max(0, -target (input1 - input2) + margin); the three have one number of dims and broadcast
part.margin_ranking_loss = form("margin_ranking_loss", 3)

--- triplet_margin_loss(anchor [N, D] or [D], positive, negative, {margin = 1, p = 2, eps = 1e-6,
-- swap = false, reduction = "mean"}): max(d(a, p) - d(a, n) + margin, 0) with d the pairwise
-- p-norm distance of x1 - x2 + eps along the last dim; swap takes min(d(a, n), d(p, n)) for d(a, n)
part.triplet_margin_loss = form("triplet_margin_loss", 3)

--- ctc_loss(log_probs [T, N, C] or [T, C], targets, input_lengths, target_lengths, {blank = 1,
-- reduction = "mean", zero_infinity = false}): the connectionist temporal classification loss,
-- -log p(target | input), summed over alignments. log_probs are log-probabilities (log_softmax
-- over C); targets are classes 1..C other than the blank, [N, S] padded or 1-D (the sequences
-- concatenated), or [S] for unbatched log_probs; the lengths are integers, lists or int64/int32
-- tensors (read on the host). blank defaults to 1 (torch's 0: classes count from 1). "mean"
-- divides each loss by its target length (at least 1), then takes the mean, as torch; an
-- impossible alignment gives inf, or 0 (with a zero gradient) with zero_infinity. Composed of
-- tensor ops (a loop over time, vectorised over the batch); its gradient is autograd's, which
-- through log_softmax equals torch's (torch returns for log_probs the gradient it would have
-- through log_softmax, not the plain derivative)
function part.ctc_loss(log_probs, targets, input_lengths, target_lengths, opts)
  local o = core.options("ctc_loss", opts, "ctc_loss", 2)
  local out = ctc("ctc_loss", o, log_probs, targets, input_lengths, target_lengths)
  return out
end

return part
