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

-- the module class cls_name over the functional loss `name`
local function loss_class(cls_name, name)
  local cls = Module:extend(cls_name)
  local who = "nn." .. cls_name
  local accepted = core.ACCEPTED[name]

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
local CrossEntropyLoss = loss_class("CrossEntropyLoss", "cross_entropy")
function CrossEntropyLoss:forward(input, target)
  return core.cross_entropy("nn.CrossEntropyLoss", self:_options(), input, target)
end

--- NLLLoss({weight, ignore_index, reduction = "mean"}): (input [N, C, d1, ...] or [C] of
-- log-probabilities, target [N, d1, ...] of classes 1..C) -> loss (nn.functional.nll_loss)
local NLLLoss = loss_class("NLLLoss", "nll_loss")
function NLLLoss:forward(input, target)
  return core.nll_loss("nn.NLLLoss", self:_options(), input, target)
end

--- BCELoss({weight, reduction = "mean"}): (input of probabilities, target of input's shape)
-- -> loss (nn.functional.binary_cross_entropy)
local BCELoss = loss_class("BCELoss", "binary_cross_entropy")
function BCELoss:forward(input, target)
  return core.binary_cross_entropy("nn.BCELoss", self:_options(), input, target)
end

--- BCEWithLogitsLoss({weight, pos_weight, reduction = "mean"}): (input of logits, target of
-- input's shape) -> loss (nn.functional.binary_cross_entropy_with_logits)
local BCEWithLogitsLoss = loss_class("BCEWithLogitsLoss", "binary_cross_entropy_with_logits")
function BCEWithLogitsLoss:forward(input, target)
  return core.binary_cross_entropy_with_logits("nn.BCEWithLogitsLoss", self:_options(), input, target)
end

--- MSELoss({reduction = "mean"}): (input, target of input's shape) -> (input - target)^2 reduced
local MSELoss = loss_class("MSELoss", "mse_loss")
function MSELoss:forward(input, target)
  return core.mse_loss("nn.MSELoss", self:_options(), input, target)
end

--- L1Loss({reduction = "mean"}): (input, target of input's shape) -> |input - target| reduced
local L1Loss = loss_class("L1Loss", "l1_loss")
function L1Loss:forward(input, target)
  return core.l1_loss("nn.L1Loss", self:_options(), input, target)
end

--- SmoothL1Loss({beta = 1, reduction = "mean"}): (input, target of input's shape) -> loss
-- (nn.functional.smooth_l1_loss)
local SmoothL1Loss = loss_class("SmoothL1Loss", "smooth_l1_loss")
function SmoothL1Loss:forward(input, target)
  return core.smooth_l1_loss("nn.SmoothL1Loss", self:_options(), input, target)
end

--- HuberLoss({delta = 1, reduction = "mean"}): (input, target of input's shape) -> loss
-- (nn.functional.huber_loss)
local HuberLoss = loss_class("HuberLoss", "huber_loss")
function HuberLoss:forward(input, target)
  return core.huber_loss("nn.HuberLoss", self:_options(), input, target)
end

--- KLDivLoss({log_target = false, reduction = "mean"}): (input of log-probabilities, target of
-- input's shape) -> loss; reduction also "batchmean" (nn.functional.kl_div)
local KLDivLoss = loss_class("KLDivLoss", "kl_div")
function KLDivLoss:forward(input, target)
  return core.kl_div("nn.KLDivLoss", self:_options(), input, target)
end

--- CosineEmbeddingLoss({margin = 0, reduction = "mean"}): (input1 [N, D] or [D], input2,
-- target [N] or [] of 1 / -1) -> loss (nn.functional.cosine_embedding_loss)
local CosineEmbeddingLoss = loss_class("CosineEmbeddingLoss", "cosine_embedding_loss")
function CosineEmbeddingLoss:forward(input1, input2, target)
  return core.cosine_embedding_loss("nn.CosineEmbeddingLoss", self:_options(), input1, input2, target)
end

--- MarginRankingLoss({margin = 0, reduction = "mean"}): (input1, input2, target of 1 / -1) ->
-- max(0, -target (input1 - input2) + margin) reduced
local MarginRankingLoss = loss_class("MarginRankingLoss", "margin_ranking_loss")
function MarginRankingLoss:forward(input1, input2, target)
  return core.margin_ranking_loss("nn.MarginRankingLoss", self:_options(), input1, input2, target)
end

--- TripletMarginLoss({margin = 1, p = 2, eps = 1e-6, swap = false, reduction = "mean"}):
-- (anchor [N, D] or [D], positive, negative) -> loss (nn.functional.triplet_margin_loss)
local TripletMarginLoss = loss_class("TripletMarginLoss", "triplet_margin_loss")
function TripletMarginLoss:forward(anchor, positive, negative)
  return core.triplet_margin_loss("nn.TripletMarginLoss", self:_options(), anchor, positive, negative)
end

--- CTCLoss({blank = 1, reduction = "mean", zero_infinity = false}): (log_probs [T, N, C] or
-- [T, C], targets [N, S] padded or 1-D concatenated, input_lengths, target_lengths) -> loss.
-- The blank counts from 1 like the classes (torch's blank 0 is tlua's 1) (nn.functional.ctc_loss)
local CTCLoss = loss_class("CTCLoss", "ctc_loss")
function CTCLoss:forward(log_probs, targets, input_lengths, target_lengths)
  return ctc("nn.CTCLoss", self:_options(), log_probs, targets, input_lengths, target_lengths)
end

return classes
