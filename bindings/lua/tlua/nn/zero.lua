-- ZeRO-1 for nn.DataParallel {shard_optimizer = true}: each rank keeps the optimizer state (and master weights) of its shard only.
--
-- The layout. Every bucket of nn.DataParallel is padded to a multiple of the world size N and cut
-- into N equal shards; rank r owns shard r of every bucket. The parameters become views of one
-- flat buffer per bucket (the gradients already are views of the bucket's gradient buffer), so
-- a shard of the buffer covers pieces of several parameters: the "slices", one per parameter and
-- rank at most (elements [a, a + len) of the bucket, where the parameter's range meets the shard).
--
-- A step. Backward reduce-scatters each bucket's gradients ("avg"): rank r gets the average over
-- the ranks on its shard only (the rest of its buffer keeps its own, unreduced gradients). The
-- optimizer is the user's class (optim.AdamW, ...) over the slices, so its state (moments, master
-- weights) is made for the shard alone: about 1/N of the whole per rank. After the update every
-- bucket's parameter buffer is all-gathered from the shards, and every rank holds the same whole
-- parameters again. The slices are elementwise pieces of the parameters, so every optimizer of
-- tl.optim (all elementwise) computes on them what it computes on the whole tensor.
--
-- Checkpoints. state_dict() gathers the shards' state into the layout a plain optimizer over the
-- same parameters has ({state = {[i] = {...}}, param_groups}): every rank calls it (tl.checkpoint.save
-- does, on every rank), and any world size loads it, sharded or not. load_state_dict() needs no
-- communication: each rank keeps its slice of every state tensor.
local tl = require("tlua")
local core = require("tlua.core")
local options = require("tlua.options")

local is_tensor = tl.is_tensor

local zero = {}

-- parameter -> the DataParallel that shards it (weak keys; on core, shared by every load of this
-- module as tlua.nn.replaced is)
if not rawget(core, "_sharded_parameters") then
  rawset(core, "_sharded_parameters", setmetatable({}, { __mode = "k" }))
end
local owner = rawget(core, "_sharded_parameters")

--- owner_of(p) -> the nn.DataParallel {shard_optimizer = true} whose shards hold p, or nil
function zero.owner_of(p) return owner[p] end

--- pad(numel, world) -> the bucket's length padded to a multiple of world, and the shard's
function zero.pad(numel, world)
  local shard = (numel + world - 1) // world
  return shard * world, shard
end

-- ---- the layout ---------------------------------------------------------------------------
--- flatten(dp): dp's parameters become views of one flat buffer per bucket (bucket.param_buffer,
--- padded as its gradient buffer is), their gradients the bucket's views as before; the module
--- holds the new tensors, and an optimizer built before refuses the old ones
function zero.flatten(dp)
  local params, map = dp._params, {}
  tl.no_grad(function()
    for _, bucket in ipairs(dp._buckets) do
      local flat = tl.zeros({ bucket.buffer:numel() }, { dtype = bucket.dtype, device = bucket.device })
      for k, i in ipairs(bucket.params) do
        local p = params[i]
        local view = flat:narrow(1, bucket.offsets[k] + 1, p:numel()):view(table.unpack(p.shape))
        view:copy_(p)
        local new = view:detach()
        new:requires_grad_(p.requires_grad)
        new.grad = bucket.views[k]
        map[p], params[i] = new, new
        dp._place[new] = dp._place[p]
        owner[new] = dp
      end
      bucket.param_buffer = flat
    end
  end)
  dp.module:_replace_parameters(map, "nn.DataParallel's flat buffers (shard_optimizer)")
end

-- this rank's shard of a bucket: its first element (0-based) and length
local function own_shard(bucket)
  local world, rank = tl.distributed.world_size(), tl.distributed.rank()
  local shard = bucket.buffer:numel() // world
  return rank * shard, shard
end
zero.own_shard = own_shard

--- gather_parameters(dp): every rank's parameters become the whole of every shard (after a step)
function zero.gather_parameters(dp)
  tl.no_grad(function()
    for _, bucket in ipairs(dp._buckets) do
      local first, shard = own_shard(bucket)
      tl.distributed.all_gather(bucket.param_buffer, bucket.param_buffer:narrow(1, first + 1, shard))
    end
  end)
end

--- reduce_scatter_start(bucket) -> work: the bucket's gradients averaged over the ranks, onto this
--- rank's shard (in place)
function zero.reduce_scatter_start(bucket)
  local first, shard = own_shard(bucket)
  return tl.distributed.reduce_scatter_start(bucket.buffer:narrow(1, first + 1, shard), bucket.buffer, "avg")
end

-- ---- gradient clipping -----------------------------------------------------------------------
--- clip_grad_norm(dp, max_norm, norm_type) -> the total norm (0-dim, on the gradients' device):
--- the norm over every rank's shard (one all-reduce of a number), then each shard scaled as
--- optim.clip_grad_norm scales whole gradients (coef = max_norm / (total + 1e-6), when < 1 or NaN)
function zero.clip_grad_norm(dp, max_norm, norm_type)
  local total
  tl.no_grad(function()
    local shards = {}
    for _, bucket in ipairs(dp._buckets) do
      local first, shard = own_shard(bucket)
      shards[#shards + 1] = bucket.buffer:narrow(1, first + 1, shard)
    end
    local device = shards[1].device
    local acc = tl.zeros({ 1 }, { dtype = "float64", device = device })
    for _, g in ipairs(shards) do
      local d = g:double()
      if norm_type == math.huge then
        if d:numel() > 0 then acc = acc:maximum(d:abs():max():view(1)) end
      else
        acc = acc + (norm_type == 2 and (d * d):sum() or (d:abs() ^ norm_type):sum())
      end
    end
    acc = acc:contiguous()
    tl.distributed.all_reduce(acc, norm_type == math.huge and "max" or "sum")
    total = norm_type == math.huge and acc or acc ^ (1 / norm_type)
    local coef = (total + 1e-6):reciprocal() * max_norm
    coef = tl.where(coef:gt(1), tl.ones_like(coef), coef) -- torch's clamp(max = 1): NaN stays NaN
    for _, g in ipairs(shards) do g:mul_(coef:to(g.dtype)) end
  end)
  local all_f64 = true
  for _, bucket in ipairs(dp._buckets) do all_f64 = all_f64 and bucket.dtype == "float64" end
  local dtype = all_f64 and "float64" or "float32"
  return total:reshape({}):to(dtype)
end

-- ---- the sharded optimizer -------------------------------------------------------------------
-- Entries: one per parameter of the optimizer, in its order over the groups: {param, group,
-- bucket, offset (0-based in the bucket), numel, shape, a (0-based start of this rank's slice in
-- the bucket), len (0: no slice here), slice, grad}.
local function entry_of(dp, p, gi)
  local place = dp._place[p]
  local bucket = dp._buckets[place.bucket]
  local first, shard = own_shard(bucket)
  local a = math.max(place.offset, first)
  local e = math.min(place.offset + p:numel(), first + shard)
  local entry = { param = p, group = gi, bucket = place.bucket, offset = place.offset, numel = p:numel(),
    shape = p.shape, a = a, len = math.max(e - a, 0) }
  if entry.len > 0 then
    tl.no_grad(function()
      entry.slice = bucket.param_buffer:narrow(1, a + 1, entry.len):detach()
      entry.slice:requires_grad_(true)
      entry.grad = bucket.buffer:narrow(1, a + 1, entry.len)
    end)
  end
  return entry
end

local methods = {}

--- shard(opt) -> opt: a freshly built optimizer whose parameters all belong to one nn.DataParallel
--- {shard_optimizer = true} steps the slices of this rank instead (its class, options, groups and
--- schedulers unchanged); called by optim.Optimizer.new
function zero.shard(opt, level)
  local dp, entries = nil, {}
  for gi, group in ipairs(opt.param_groups) do
    local slices = {}
    for pi, p in ipairs(group.params) do
      local o = owner[p]
      if o == nil or (dp ~= nil and o ~= dp) then
        options.error(string.format("optim.%s: parameter %d of group %d %s; an optimizer of an nn.DataParallel with " ..
          "shard_optimizer takes that model's parameters only (model:parameters())", opt.name, pi, gi,
          o == nil and "is not one of the sharded model's parameters" or "belongs to another sharded nn.DataParallel"),
          level + 1)
      end
      dp = o
      local entry = entry_of(dp, p, gi)
      entries[#entries + 1] = entry
      if entry.slice then slices[#slices + 1] = entry.slice end
    end
    group.params = slices
  end
  rawset(opt, "_zero", { dp = dp, entries = entries })
  for name, fn in pairs(methods) do rawset(opt, name, fn) end
  return opt
end

--- is_sharded(opt) -> whether opt steps shards of an nn.DataParallel {shard_optimizer = true}
function zero.is_sharded(opt) return type(opt) == "table" and rawget(opt, "_zero") ~= nil end

-- the class's own method (the instance's are these)
local function class_method(opt, name) return getmetatable(opt)[name] end

--- step(closure?): the class's step on this rank's slices (their gradients: the reduce-scattered
--- shard), then the parameters all-gathered
function methods.step(self, closure)
  local loss
  if closure then loss = tl.enable_grad(closure) end
  for _, e in ipairs(self._zero.entries) do
    if e.slice then e.slice.grad = e.param.grad ~= nil and e.grad or nil end
  end
  class_method(self, "step")(self)
  zero.gather_parameters(self._zero.dp)
  return loss
end

function methods.zero_grad(self)
  for _, e in ipairs(self._zero.entries) do
    e.param.grad = nil
    if e.slice then e.slice.grad = nil end
  end
end

-- ---- state dicts -------------------------------------------------------------------------------
-- every rank's text, by rank (through two collectives of CPU tensors)
local function exchange(text)
  local world = tl.distributed.world_size()
  if world == 1 then return { text } end
  local length = tl.tensor({ #text }, { dtype = "int64" })
  tl.distributed.all_reduce(length, "max")
  local n = length:item()
  if n == 0 then
    local out = {}
    for r = 1, world do out[r] = "" end
    return out
  end
  local codes = {}
  for i = 1, n do codes[i] = text:byte(i) or 0 end
  local all = tl.zeros({ world * n }, { dtype = "int64" })
  tl.distributed.all_gather(all, tl.tensor(codes, { dtype = "int64" }))
  local list, out = all:totable(), {}
  for r = 1, world do
    local chars = {}
    for i = 1, n do
      local c = list[(r - 1) * n + i]
      if c == 0 then break end
      chars[#chars + 1] = string.char(c)
    end
    out[r] = table.concat(chars)
  end
  return out
end

local function encode(value)
  if is_tensor(value) then return "T" .. value.dtype end
  if math.type(value) == "integer" then return "I" .. string.format("%d", value) end
  if type(value) == "number" then return "F" .. string.format("%.17g", value) end
  if type(value) == "boolean" then return value and "B1" or "B0" end
  if type(value) == "string" and not value:find("[\n;=]") then return "S" .. value end
  options.error("state_dict: a sharded optimizer's state holds numbers, booleans, strings and tensors, got " ..
    type(value), 4)
end

local function decode(code)
  local kind, rest = code:sub(1, 1), code:sub(2)
  if kind == "I" then return math.tointeger(tonumber(rest)) end
  if kind == "F" then return tonumber(rest) end
  if kind == "B" then return rest == "1" end
  if kind == "S" then return rest end
  return { tensor = rest }
end

-- what every rank's slices hold: described[j][key] = a value, or {tensor = dtype}
local function describe_all(self)
  local lines = {}
  for j, e in ipairs(self._zero.entries) do
    local s = e.slice and self.state[e.slice]
    if s then
      local parts = {}
      for key, value in pairs(s) do
        if is_tensor(value) and value:numel() ~= e.len then
          options.error(string.format("state_dict: state '%s' of a sharded parameter has %d elements, its slice %d " ..
            "(a sharded optimizer keeps elementwise state)", key, value:numel(), e.len), 4)
        end
        parts[#parts + 1] = key .. "=" .. encode(value)
      end
      table.sort(parts)
      lines[#lines + 1] = j .. ";" .. table.concat(parts, ";")
    end
  end
  local described = {}
  for _, text in ipairs(exchange(table.concat(lines, "\n"))) do
    for line in text:gmatch("[^\n]+") do
      local j = math.tointeger(tonumber(line:match("^(%d+)")))
      described[j] = described[j] or {}
      for key, code in line:gmatch(";([^=;]+)=([^;]*)") do
        if described[j][key] == nil then described[j][key] = decode(code) end
      end
    end
  end
  return described
end

local function copy_options(group)
  local out = {}
  for k, v in pairs(group) do
    if k ~= "params" then
      if type(v) == "table" then
        local c = {}
        for kk, vv in pairs(v) do c[kk] = vv end
        v = c
      end
      out[k] = v
    end
  end
  return out
end

--- state_dict() -> the state of a plain optimizer over the same parameters (whole tensors, the
--- parameters numbered over the groups): every rank's shards gathered (every rank must call it)
function methods.state_dict(self)
  local z = self._zero
  local described = describe_all(self)
  local state = {}
  for j, d in pairs(described) do
    state[j] = {}
    for key, v in pairs(d) do
      if type(v) ~= "table" then state[j][key] = v end
    end
  end
  -- the tensors: per bucket and (key, dtype), the shards all-gathered into one padded buffer
  local in_bucket = {}
  for j, e in ipairs(z.entries) do
    in_bucket[e.bucket] = in_bucket[e.bucket] or {}
    table.insert(in_bucket[e.bucket], j)
  end
  tl.no_grad(function()
    for b, bucket in ipairs(z.dp._buckets) do
      local kinds, seen = {}, {}
      for _, j in ipairs(in_bucket[b] or {}) do
        for key, v in pairs(described[j] or {}) do
          local kind = type(v) == "table" and key .. "=" .. v.tensor
          if kind and not seen[kind] then
            seen[kind] = true
            kinds[#kinds + 1] = kind
          end
        end
      end
      table.sort(kinds)
      local first, shard = own_shard(bucket)
      for _, kind in ipairs(kinds) do
        local key, dtype = kind:match("^(.*)=(.*)$")
        local flat = tl.zeros({ bucket.buffer:numel() }, { dtype = dtype, device = bucket.device })
        for _, j in ipairs(in_bucket[b]) do
          local e = z.entries[j]
          local s = e.slice and self.state[e.slice]
          if s and is_tensor(s[key]) then flat:narrow(1, e.a + 1, e.len):copy_(s[key]:view(-1)) end
        end
        tl.distributed.all_gather(flat, flat:narrow(1, first + 1, shard))
        for _, j in ipairs(in_bucket[b]) do
          local d, e = described[j], z.entries[j]
          if d and type(d[key]) == "table" and d[key].tensor == dtype then
            state[j][key] = flat:narrow(1, e.offset + 1, e.numel):view(table.unpack(e.shape)):clone()
          end
        end
      end
    end
  end)
  local groups = {}
  for gi, group in ipairs(self.param_groups) do
    groups[gi] = copy_options(group)
    groups[gi].params = {}
  end
  for j, e in ipairs(z.entries) do table.insert(groups[e.group].params, j) end
  return { state = state, param_groups = groups }
end

--- load_state_dict(sd): a state dict of state_dict() (this world size or another) or of a plain
--- optimizer over the same parameters; each rank keeps its slices (no communication)
function methods.load_state_dict(self, sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    options.error("load_state_dict: expected {state = ..., param_groups = ...} from Optimizer:state_dict()", 2)
  end
  local z = self._zero
  local per_group = {}
  for _, e in ipairs(z.entries) do
    per_group[e.group] = per_group[e.group] or {}
    table.insert(per_group[e.group], e)
  end
  if #sd.param_groups ~= #self.param_groups then
    options.error(string.format("load_state_dict: the state dict has %d parameter groups, the optimizer %d",
      #sd.param_groups, #self.param_groups), 2)
  end
  local inner = { state = {}, param_groups = {} }
  local k = 0
  for gi, g in ipairs(sd.param_groups) do
    local list = per_group[gi] or {}
    local n = type(g.params) == "table" and #g.params or 0
    if n ~= #list then
      options.error(string.format("load_state_dict: parameter group %d has %d parameters in the state dict, %d in the " ..
        "optimizer", gi, n, #list), 2)
    end
    local ig = copy_options(g)
    ig.params = {}
    for pi, e in ipairs(list) do
      local s = sd.state[g.params[pi]]
      if e.slice then
        k = k + 1
        ig.params[#ig.params + 1] = k
        if s then
          local ps = {}
          for key, v in pairs(s) do
            if is_tensor(v) then
              if v:numel() ~= e.numel then
                options.error(string.format("load_state_dict: state '%s' of parameter %d has shape [%s], the parameter [%s]",
                  key, g.params[pi], table.concat(v.shape, ", "), table.concat(e.shape, ", ")), 2)
              end
              v = v:detach():contiguous():view(-1):narrow(1, e.a - e.offset + 1, e.len)
            end
            ps[key] = v
          end
          inner.state[k] = ps
        end
      end
    end
    inner.param_groups[gi] = ig
  end
  return class_method(self, "load_state_dict")(self, inner)
end

return zero
