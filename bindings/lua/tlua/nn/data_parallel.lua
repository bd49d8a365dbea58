-- nn.DataParallel: one model per rank (tlua --nproc N), gradients averaged over the ranks during
-- backward.
--
--   local model = nn.DataParallel(MyModel():to("cuda"))   -- parameters broadcast from rank 0
--   loss = criterion(model(x), y); loss:backward()         -- gradients averaged across ranks
--   opt:step()
--
-- The gradients live in flat buffers, one per bucket of about 25 MiB (bucket_mb): each
-- parameter's grad is a view of its bucket, so backward accumulates straight into it. A hook on
-- each parameter tells the reducer when its gradient is final; once a bucket's last gradient is
-- in, its all-reduce ("avg") starts on the communication stream while backward goes on. Buckets
-- go in a fixed order (the same on every rank); the compute stream waits for all of them when
-- backward ends, so the optimizer sees the averaged gradients. After the first backward the
-- buckets are laid out again in the order rank 0's gradients became ready.
--
-- Options: bucket_mb = 25, broadcast = true (parameters and buffers from rank 0 at start),
-- find_unused_parameters = false (true: parameters that get no gradient in a backward are
-- reduced as they are, instead of an error), rebuild_buckets = true (false with shard_optimizer),
-- shard_optimizer = false.
-- shard_optimizer = true is ZeRO-1 (tlua.nn.zero): backward reduce-scatters each bucket, so each
-- rank gets the averaged gradient of its shard only; an optimizer built on model:parameters()
-- keeps state (moments, master weights) for this rank's shard alone (about 1/N of it) and its
-- step all-gathers the parameters; optim.clip_grad_norm takes the norm over every rank's shard;
-- the optimizer's state_dict() gathers the whole state (every rank calls it) in the layout of a
-- plain optimizer, which loads at any world size. A parameter's .grad then holds the average on
-- this rank's shard only.
-- model:no_sync(fn) runs fn with the reduction off (gradient accumulation: the next backward
-- outside no_sync reduces the sum). model:stats() reports the last step's communication.
-- model:state_dict() and load_state_dict() are the wrapped module's (no prefix), so checkpoints
-- load into the model with or without the wrapper.
local tl = require("tlua")
local base = require("tlua.nn.module")
local buckets = require("tlua.nn.buckets")
local options = require("tlua.options")
local zero = require("tlua.nn.zero")

local dist = tl.distributed
local autograd = tl.autograd

--- DataParallel(module, {bucket_mb = 25, broadcast = true, find_unused_parameters = false,
--- rebuild_buckets = true, shard_optimizer = false}): module replicated on every rank (its parameters broadcast from rank 0
--- unless broadcast = false), forward(...) is module's, and backward averages the gradients over the
--- ranks in buckets of about bucket_mb MiB (see the file's comment); outside tlua --nproc, a world of
--- one. shard_optimizer = true: ZeRO-1, the optimizer's state sharded over the ranks (tlua.nn.zero).
local DataParallel = base.Module:extend("DataParallel")
local instances = 0 -- wrappers made so far: every rank makes them in the same order

local ACCEPTED = { bucket_mb = "number", broadcast = "boolean", find_unused_parameters = "boolean",
  rebuild_buckets = "boolean", shard_optimizer = "boolean" }

function DataParallel:init(module, opts)
  if not base.is_module(module) then
    options.error("nn.DataParallel: expected a module, got " .. type(module), 3)
  end
  opts = options.check(opts, "nn.DataParallel", ACCEPTED, 3)
  local mb = opts.bucket_mb or 25
  if not (mb > 0) then options.error("nn.DataParallel: bucket_mb must be a number > 0, got " .. tostring(mb), 3) end
  local shard = opts.shard_optimizer == true
  if shard and opts.rebuild_buckets == true then
    options.error("nn.DataParallel: rebuild_buckets = true cannot go with shard_optimizer = true (the optimizer's " ..
      "shards keep the buckets' first layout)", 3)
  end
  self.module = module
  rawset(self, "_opts", {
    cap_bytes = mb * 1024 * 1024,
    find_unused = opts.find_unused_parameters and true or false,
    rebuild = opts.rebuild_buckets ~= false and not shard,
    shard = shard,
  })
  rawset(self, "_sync", true)
  rawset(self, "_passes", 0)
  instances = instances + 1
  rawset(self, "_id", instances)
  rawset(self, "_params", module:parameters())
  if #self._params == 0 then options.error("nn.DataParallel: the module has no parameters", 3) end
  if opts.broadcast ~= false then self:_broadcast_state() end
  self:_build_buckets(nil)
  if shard then zero.flatten(self) end
  -- the hooks hold the wrapper weakly: a parameter's hook must not keep the model alive
  local weak = setmetatable({ self }, { __mode = "v" })
  for i, p in ipairs(self._params) do
    autograd.set_grad_ready_hook(p, function()
      local wrapper = weak[1]
      if wrapper then wrapper:_on_ready(i) end
    end)
  end
end

-- every rank starts from rank 0's parameters and buffers
function DataParallel:_broadcast_state()
  tl.no_grad(function()
    for _, p in ipairs(self._params) do dist.broadcast(p, 0) end
    for _, b in ipairs(self.module:buffers()) do
      if b:is_contiguous() then dist.broadcast(b, 0) end
    end
  end)
end

local function describe(p)
  return { numel = p:numel(), bytes_per_element = p:element_size(), dtype = p.dtype, device = p.device }
end

-- lays the gradients out in buckets (order: parameter indices in expected ready order, or
-- nil), keeping the gradients they hold
function DataParallel:_build_buckets(order)
  local params = self._params
  local described = {}
  for i, p in ipairs(params) do described[i] = describe(p) end
  local list = buckets.assign(described, { cap_bytes = self._opts.cap_bytes, order = order })
  local place = setmetatable({}, { __mode = "k" }) -- parameter -> {bucket, offset}
  local view_of = {} -- parameter index -> its gradient's view of its bucket
  tl.no_grad(function()
    for b, bucket in ipairs(list) do
      -- sharded: a multiple of the world size, cut into equal shards (the padding stays 0)
      local length = self._opts.shard and zero.pad(bucket.numel, dist.world_size()) or bucket.numel
      bucket.buffer = tl.zeros({ length }, { dtype = bucket.dtype, device = bucket.device })
      bucket.views = {}
      for k, i in ipairs(bucket.params) do
        local p = params[i]
        local view = bucket.buffer:narrow(1, bucket.offsets[k] + 1, p:numel()):view(table.unpack(p.shape))
        local old = p.grad
        if old ~= nil then view:copy_(old) end
        bucket.views[k] = view
        place[p] = { bucket = b, offset = bucket.offsets[k] }
        view_of[i] = view
        p.grad = view
      end
    end
  end)
  rawset(self, "_buckets", list)
  rawset(self, "_place", place)
  rawset(self, "_view_of", view_of)
  rawset(self, "_reducer", buckets.Reducer(list, function(b) self:_launch(b) end))
  rawset(self, "_works", {})
end

-- gradients set to nil (zero_grad) become their bucket's views again, zeroed
function DataParallel:_attach_grads()
  local params = self._params
  tl.no_grad(function()
    for _, bucket in ipairs(self._buckets) do
      local missing = 0
      for _, i in ipairs(bucket.params) do
        if params[i].grad == nil then missing = missing + 1 end
      end
      if missing == #bucket.params then
        bucket.buffer:fill_(0)
        for k, i in ipairs(bucket.params) do params[i].grad = bucket.views[k] end
      elseif missing > 0 then
        for k, i in ipairs(bucket.params) do
          if params[i].grad == nil then
            bucket.views[k]:fill_(0)
            params[i].grad = bucket.views[k]
          end
        end
      end
    end
  end)
end

function DataParallel:forward(...)
  rawset(self, "_in_pass", false) -- a backward that failed half way leaves no pass open
  self:_attach_grads()
  return self.module:forward(...)
end

-- a parameter's gradient is final for this backward
function DataParallel:_on_ready(i)
  if not self._sync then return end
  local reducer = self._reducer
  if not self._in_pass then
    rawset(self, "_in_pass", true)
    rawset(self, "_works", {})
    reducer:reset()
    autograd.queue_callback(function() self:_finish_pass() end)
  end
  -- a gradient made outside its bucket (zero_grad between forward and backward sets it to nil,
  -- and backward then makes a new one) goes into its bucket's view before the bucket reduces
  local p, view = self._params[i], self._view_of[i]
  local g = p.grad
  if g == nil or g._data_ptr ~= view._data_ptr then
    tl.no_grad(function()
      if g == nil then view:zero_() else view:copy_(g) end
    end)
    p.grad = view
  end
  reducer:mark_ready(i)
end

function DataParallel:_launch(b)
  local bucket = self._buckets[b]
  if self._opts.shard then
    self._works[b] = zero.reduce_scatter_start(bucket)
  else
    self._works[b] = dist.all_reduce_start(bucket.buffer, "avg")
  end
end

local function names_of(self, indices)
  local names, index = {}, {}
  for name, p in self.module:named_parameters() do index[p] = name end
  for k, i in ipairs(indices) do
    if k > 5 then
      names[#names + 1] = string.format("and %d more", #indices - 5)
      break
    end
    names[#names + 1] = index[self._params[i]] or ("#" .. i)
  end
  return table.concat(names, ", ")
end

-- the end of a backward: every bucket reduced, the compute stream waits for the reductions
function DataParallel:_finish_pass()
  rawset(self, "_in_pass", false)
  local reducer = self._reducer
  if not reducer:done() then
    local unready = reducer:unready()
    if not self._opts.find_unused then
      error(string.format("nn.DataParallel: %d parameter(s) got no gradient in this backward (%s); " ..
        "every rank must reduce every bucket: pass find_unused_parameters = true", #unready,
        names_of(self, unready)), 0)
    end
    reducer:finish_unready()
  end
  for b = 1, #self._buckets do self._works[b]:wait() end
  -- a pass captured into a CUDA graph (tl.cuda.graph): its works' events time nothing
  local device = self._buckets[1].device
  rawset(self, "_captured", device ~= "cpu" and tl._cuda_is_capturing(device))
  rawset(self, "_passes", self._passes + 1)
  if self._passes == 1 and self._opts.rebuild then self:_rebuild_in_ready_order(reducer.order) end
end

-- after the first backward: buckets in the order rank 0's gradients became ready
function DataParallel:_rebuild_in_ready_order(order)
  if #order ~= #self._params then return end -- unused parameters: keep the layout
  if dist.world_size() > 1 then
    local key = string.format("nn.DataParallel/%d/order", self._id)
    if dist.is_main() then dist.store_set(key, table.concat(order, ",")) end
    local got = {}
    for n in dist.store_get(key):gmatch("%d+") do got[#got + 1] = math.tointeger(n) end
    order = got
  end
  local current = {}
  for _, bucket in ipairs(self._buckets) do
    for _, i in ipairs(bucket.params) do current[#current + 1] = i end
  end
  if table.concat(current, ",") == table.concat(order, ",") then return end
  local works = self._works
  self:_build_buckets(order)
  rawset(self, "_works", works)
end

--- no_sync(fn, ...): runs fn with the reduction off; the gradients of its backwards add up
--- locally and the next backward outside no_sync reduces them
function DataParallel:no_sync(fn, ...)
  local previous = self._sync
  rawset(self, "_sync", false)
  local result = table.pack(pcall(fn, ...))
  rawset(self, "_sync", previous)
  if not result[1] then error(result[2], 0) end
  return table.unpack(result, 2, result.n)
end

--- stats() -> {buckets, bucket_bytes = {...}, comm_ms, exposed_ms}: the last backward's
--- all-reduces (waits on the host for them): comm_ms the time the reductions ran, exposed_ms
--- the time from the end of the gradients' computation to the end of the last reduction (the
--- communication backward did not hide). 0 on the CPU; nil (and captured = true) when the last
--- backward was captured into a CUDA graph, whose replays are not timed.
function DataParallel:stats()
  local out = { buckets = #self._buckets, bucket_bytes = {}, comm_ms = 0, exposed_ms = 0 }
  for b, bucket in ipairs(self._buckets) do out.bucket_bytes[b] = bucket.bytes end
  if self._captured then -- the last pass was captured into a CUDA graph: replays are not timed
    out.comm_ms, out.exposed_ms, out.captured = nil, nil, true
    return out
  end
  local works = self._works
  for b = 1, #works do
    local queued, comm = works[b]:timing()
    out.comm_ms = out.comm_ms + comm
    if b == #works then out.exposed_ms = queued end
  end
  return out
end

function DataParallel:state_dict() return self.module:state_dict() end
function DataParallel:load_state_dict(sd, strict) return self.module:load_state_dict(sd, strict) end

function DataParallel:extra_repr()
  return string.format("world_size=%d, buckets=%d%s", dist.world_size(), #self._buckets,
    self._opts.shard and ", shard_optimizer=true" or "")
end

return { DataParallel = DataParallel }
