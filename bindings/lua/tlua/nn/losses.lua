-- tl.nn losses modules (merged into tl.nn by nn/init.lua): a module per loss of nn.functional, its options kept as fields (weight and pos_weight as buffers, so :to() moves them).
--
-- Each takes the options of its functional form (nn/functional/losses.lua documents the math
-- and shapes), checked when it is built: nn.CrossEntropyLoss{reduction = "sum"}; calling it
-- runs the loss on its tensors: loss_fn(logits, target).
local Module = require("tlua.nn.module").Module
local core = require("tlua.nn.functional.loss_core")
local ctc = require("tlua.nn.functional.ctc")

local classes = {}

local TENSORS = { weight = true, pos_weight = true }

-- the module class cls_name over the functional loss `name` (run: core[name], or the function
-- given); forward(...) is run(who, the options, ...) with the loss's tensors
local function loss_class(cls_name, name, run)
  local cls = Module:extend(cls_name)
  local who = "nn." .. cls_name
  local accepted = core.ACCEPTED[name]
  run = run or core[name]

  function cls:forward(...)
    return run(who, self:_options(), ...)
  end

  function cls:init(opts)
    local o = core.options(name, opts, who, 3)
    for key in pairs(accepted) do
      if TENSORS[key] then
        if o[key] ~= nil then self:register_buffer(key, o[key]) end
      else
        self[key] = o[key]
      end
    end
  end

  -- the options as core[name] takes them, from the fields (a buffer moved by :to() included)
  function cls:_options()
    local o = {}
    for key in pairs(accepted) do o[key] = self[key] end
    return o
  end

  function cls:extra_repr()
    local defaults = core.options(name, nil, who, 2)
    local keys = {}
    for key in pairs(accepted) do keys[#keys + 1] = key end
    table.sort(keys)
    local parts = {}
    for _, key in ipairs(keys) do
      local v = self[key]
      if TENSORS[key] then
        if v ~= nil then parts[#parts + 1] = key .. "=" .. core.shape_str(v.shape) end
      elseif v ~= defaults[key] then
        parts[#parts + 1] = key .. "=" .. tostring(v)
      end
    end
    return table.concat(parts, ", ")
  end

  classes[cls_name] = cls
  return cls
end

--- CrossEntropyLoss({weight, ignore_index, label_smoothing = 0, reduction = "mean"}):
-- (input [N, C, d1, ...] or [C], target) -> loss; target: classes 1..C [N, d1, ...] or class
-- probabilities of input's shape (nn.functional.cross_entropy)
loss_class("CrossEntropyLoss", "cross_entropy")

--- NLLLoss({weight, ignore_index, reduction = "mean"}): (input [N, C, d1, ...] or [C] of
-- log-probabilities, target [N, d1, ...] of classes 1..C) -> loss (nn.functional.nll_loss)
loss_class("NLLLoss", "nll_loss")

--- BCELoss({weight, reduction = "mean"}): (input of probabilities, target of input's shape)
-- -> loss (nn.functional.binary_cross_entropy)
loss_class("BCELoss", "binary_cross_entropy")

--- BCEWithLogitsLoss({weight, pos_weight, reduction = "mean"}): (input of logits, target of
-- input's shape) -> loss (nn.functional.binary_cross_entropy_with_logits)
loss_class("BCEWithLogitsLoss", "binary_cross_entropy_with_logits")

--- MSELoss({reduction = "mean"}): (input, target of input's shape) -> (input - target)^2 reduced
loss_class("MSELoss", "mse_loss")

--- L1Loss({reduction = "mean"}): (input, target of input's shape) -> |input - target| reduced
loss_class("L1Loss", "l1_loss")

--- SmoothL1Loss({beta = 1, reduction = "mean"}): (input, target of input's shape) -> loss
-- (nn.functional.smooth_l1_loss)
loss_class("SmoothL1Loss", "smooth_l1_loss")

--- HuberLoss({delta = 1, reduction = "mean"}): (input, target of input's shape) -> loss
-- (nn.functional.huber_loss)
loss_class("HuberLoss", "huber_loss")

--- KLDivLoss({log_target = false, reduction = "mean"}): (input of log-probabilities, target of
-- input's shape) -> loss; reduction also "batchmean" (nn.functional.kl_div)
loss_class("KLDivLoss", "kl_div")

--- CosineEmbeddingLoss({margin = 0, reduction = "mean"}): (input1 [N, D] or [D], input2,
-- target [N] or [] of 1 / -1) -> loss (nn.functional.cosine_embedding_loss)
loss_class("CosineEmbeddingLoss", "cosine_embedding_loss")

--- MarginRankingLoss({margin = 0, reduction = "mean"}): (input1, input2, target of 1 / -1) ->
-- max(0, -target (input1 - input2) + margin) reduced
loss_class("MarginRankingLoss", "margin_ranking_loss")

--- TripletMarginLoss({margin = 1, p = 2, eps = 1e-6, swap = false, reduction = "mean"}):
-- (anchor [N, D] or [D], positive, negative) -> loss (nn.functional.triplet_margin_loss)
loss_class("TripletMarginLoss", "triplet_margin_loss")

--- CTCLoss({blank = 1, reduction = "mean", zero_infinity = false}): (log_probs [T, N, C] or
-- [T, C], targets [N, S] padded or 1-D concatenated, input_lengths, target_lengths) -> loss.
-- The blank counts from 1 like the classes (torch's blank 0 is tlua's 1) (nn.functional.ctc_loss)
loss_class("CTCLoss", "ctc_loss", ctc)

return classes
