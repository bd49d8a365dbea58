-- examples/lstm/model.lua: a character-level LSTM language model (Embedding -> LSTM of num_layers -> Dropout -> Linear) whose state is carried from one chunk of text to the next, and its batches: the corpus cut into B parallel streams read in chunks of T characters (truncated backpropagation through time).
local tl = require("tlua")
local nn = tl.nn

local M = {}

M.defaults = { vocab = 0, embed = 64, hidden = 256, layers = 2, dropout = 0 }

--- config(overrides) -> the defaults with the overrides
function M.config(overrides)
  local c = {}
  for k, v in pairs(M.defaults) do c[k] = v end
  for k, v in pairs(overrides or {}) do c[k] = v end
  return c
end

--- CharLSTM(config): forward(ids [B, T] 1..vocab, state = {h, c} or nil) -> logits [B, T, vocab],
--- the state after the last character ({h, c}, each [layers, B, hidden]: pass it, detached, to
--- the next chunk)
local CharLSTM = nn.Module:extend("CharLSTM")
M.CharLSTM = CharLSTM

function CharLSTM:init(c)
  self.config = c
  self.embed = nn.Embedding(c.vocab, c.embed)
  self.lstm = nn.LSTM(c.embed, c.hidden, { num_layers = c.layers, batch_first = true, dropout = c.dropout })
  self.drop = nn.Dropout(c.dropout)
  self.head = nn.Linear(c.hidden, c.vocab)
end

function CharLSTM:forward(ids, state)
  local out, new_state = self.lstm(self.embed(ids), state)
  return self.head(self.drop(out)), new_state
end

--- detach(state) -> the state cut from the graph of the chunk that made it
function M.detach(state)
  return { state[1]:detach(), state[2]:detach() }
end

--- streams(ids [N, 1] or [N], B) -> [B, L]: the ids cut into B contiguous streams of L = N // B
--- characters (the rest left out): each row a contiguous run of the text, read left to right
--- chunk by chunk
function M.streams(ids, B)
  local n = ids:numel()
  local L = n // B
  if L < 2 then error(string.format("lstm: %d characters cannot make %d streams of 2 or more", n, B), 2) end
  return ids:reshape(n):narrow(1, 1, B * L):reshape(B, L):contiguous()
end

--- chunks(streams [B, L], T) -> the number of chunks of an epoch: (L - 1) // T (the targets are
--- the inputs shifted by one)
function M.chunks(streams, T)
  return (streams.shape[2] - 1) // T
end

--- chunk(streams, T, k) -> x, y [B, T]: chunk k (from 1) of the streams and its targets
function M.chunk(streams, T, k)
  local start = (k - 1) * T + 1
  return streams:narrow(2, start, T), streams:narrow(2, start + 1, T)
end

return M
