-- tl.nn (require("tlua.nn")): gathers the Module class, layers, activations, containers, state dicts, nn.init and nn.functional.
--
--   module.lua        nn.Module: registration, walking the tree, train/eval, to(), printing
--   state_dict.lua    state_dict(), load_state_dict(), nn.keys
--   init_weights.lua  nn.init: uniform_, normal_, kaiming_*, xavier_*, ...
--   functional.lua    nn.functional: the op table's one-tensor ops, nn ops, dropout, and the forms of
--                     functional/ (losses, normalization, recurrent, convolution, pooling)
--   activations.lua   a module class per one-tensor op of the op table (ReLU, GELU, Tanh, ...), Identity
--   layers.lua        Linear, Flatten, Dropout, LayerNorm, Embedding
--   convolution.lua   Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
--   pooling.lua       MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d, Upsample, ...
--   losses.lua        the loss modules (CrossEntropyLoss, NLLLoss, BCELoss, ..., CTCLoss) over
--                     functional/loss_core.lua and functional/ctc.lua
--   normalization.lua BatchNorm1d/2d, GroupNorm, RMSNorm
--   recurrent.lua     RNN layers and cells (LSTM, GRU, LSTMCell, GRUCell)
--   transformer.lua   MultiheadAttention, TransformerEncoderLayer
--   containers.lua    Sequential, ModuleList
--   moe.lua           MoE: a mixture-of-experts feed-forward over tl.grouped_mm
--   block_sparse.lua  BlockSparseLinear (from_dense), sparsify, block_layout, block_mask, random_block_mask
--   block_layout.lua  a block mask's three indexes, built with tensor ops
--   data_parallel.lua DataParallel: gradients averaged over the ranks in buckets during backward
--   buckets.lua       the bucket layout and the reducer DataParallel uses
local base = require("tlua.nn.module")
local state = require("tlua.nn.state_dict")

local nn = {
  Module = base.Module,
  is_module = base.is_module,
  keys = state.keys,
  init = require("tlua.nn.init_weights"),
  functional = require("tlua.nn.functional"),
}

for _, file in ipairs({ "activations", "layers", "convolution", "pooling", "losses", "normalization", "recurrent", "transformer", "containers", "moe",
  "block_sparse", "data_parallel" }) do
  for name, cls in pairs(require("tlua.nn." .. file)) do nn[name] = cls end
end

-- a name nn does not have is an error naming the closest ones (rawget(nn, name) probes)
return setmetatable(nn, { __index = function(t, key) require("tlua.names").missing("tl.nn", t, key) end })
