-- Gradient buckets for data-parallel training: which parameters share a flat buffer (and one
-- all-reduce), and the reducer that launches each bucket's all-reduce as soon as its gradients
-- are ready, in bucket order (so every rank issues the same collectives in the same order).
-- Pure bookkeeping on sizes and indices: nn.DataParallel brings the tensors and the collectives.
local options = require("tlua.options")

local buckets = {}

local ASSIGN_OPTIONS = { cap_bytes = "number", order = "table" } -- (tlua.options)

--- assign(params, opts) -> list of buckets {params = {i, ...}, offsets = {...}, numel, bytes,
--- dtype, device}. params: a list of {numel =, bytes_per_element =, dtype =, device =} (a
--- model's parameters in registration order). opts.order: the indices in the order their
--- gradients are expected (default: reverse registration order, which is how backward reaches
--- a model that uses its parameters in the order it registers them); opts.cap_bytes: a bucket
--- closes once it holds at least this many bytes (default 25 MiB); one parameter never spans two
--- buckets. Parameters of another dtype or device than the open bucket's go to a bucket of their
--- own kind (a bucket holds one kind).
function buckets.assign(params, opts)
  opts = options.check(opts, "buckets.assign", ASSIGN_OPTIONS, 2)
  local cap = opts.cap_bytes or 25 * 1024 * 1024
  if not (cap > 0) then
    options.error("buckets.assign: cap_bytes must be a number > 0, got " .. tostring(cap), 2)
  end
  local order = opts.order
  if order == nil then
    order = {}
    for i = #params, 1, -1 do order[#order + 1] = i end
  end
  if #order ~= #params then
    options.error(string.format("buckets.assign: order lists %d parameters, expected %d", #order, #params), 2)
  end
  local seen = {}
  for _, i in ipairs(order) do
    if math.type(i) ~= "integer" or i < 1 or i > #params or seen[i] then
      options.error("buckets.assign: order must list each parameter index once, got " .. tostring(i), 2)
    end
    seen[i] = true
  end
  local result, open = {}, {} -- open[kind] = the bucket being filled for that dtype/device
  for _, i in ipairs(order) do
    local p = params[i]
    local kind = tostring(p.dtype) .. "@" .. tostring(p.device)
    local b = open[kind]
    if b == nil then
      b = { params = {}, offsets = {}, numel = 0, bytes = 0, dtype = p.dtype, device = p.device }
      result[#result + 1] = b
      open[kind] = b
    end
    b.params[#b.params + 1] = i
    b.offsets[#b.offsets + 1] = b.numel
    b.numel = b.numel + p.numel
    b.bytes = b.bytes + p.numel * p.bytes_per_element
    if b.bytes >= cap then open[kind] = nil end
  end
  return result
end

-- ---- the reducer ---------------------------------------------------------------------------
local Reducer = {}
Reducer.__index = Reducer

--- Reducer(list, launch) -> reducer: launch(b) starts bucket b's all-reduce; it is called once
--- per pass for each bucket, in bucket order, as soon as the bucket and every earlier one are
--- ready.
function buckets.Reducer(list, launch)
  local of = {}
  for b, bucket in ipairs(list) do
    for _, i in ipairs(bucket.params) do of[i] = b end
  end
  local r = setmetatable({ buckets = list, bucket_of = of, launch = launch }, Reducer)
  r:reset()
  return r
end

--- reset(): a new pass begins (every bucket waits for all its parameters again)
function Reducer:reset()
  self.pending, self.ready, self.marked = {}, {}, {}
  for b, bucket in ipairs(self.buckets) do self.pending[b] = #bucket.params end
  self.next_launch = 1
  self.order = {} -- parameter indices in the order they became ready in this pass
end

--- mark_ready(i): parameter i's gradient is final for this pass; launches what can go
function Reducer:mark_ready(i)
  local b = self.bucket_of[i]
  if b == nil then options.error("buckets.Reducer: parameter " .. tostring(i) .. " is in no bucket", 2) end
  if self.marked[i] then
    options.error(string.format("buckets.Reducer: parameter %d was marked ready twice in one pass", i), 2)
  end
  self.marked[i] = true
  self.order[#self.order + 1] = i
  self.pending[b] = self.pending[b] - 1
  if self.pending[b] == 0 then self.ready[b] = true end
  self:_launch_ready()
end

function Reducer:_launch_ready()
  while self.next_launch <= #self.buckets and self.ready[self.next_launch] do
    local b = self.next_launch
    self.next_launch = b + 1
    self.launch(b)
  end
end

--- done() -> whether every bucket of this pass was launched
function Reducer:done() return self.next_launch > #self.buckets end

--- unready() -> the parameter indices not marked ready in this pass
function Reducer:unready()
  local out = {}
  for b = 1, #self.buckets do
    for _, i in ipairs(self.buckets[b].params) do
      if not self.marked[i] then out[#out + 1] = i end
    end
  end
  table.sort(out)
  return out
end

--- finish_unready(): marks ready the parameters this pass gave no gradient (their bucket
--- reduces what they hold), launching every bucket left
function Reducer:finish_unready()
  for b = 1, #self.buckets do
    for _, i in ipairs(self.buckets[b].params) do
      if not self.marked[i] then
        self.marked[i] = true
        self.pending[b] = self.pending[b] - 1
      end
    end
    if self.pending[b] == 0 then self.ready[b] = true end
  end
  self:_launch_ready()
end

return buckets
