-- tl.optim.clip_grad_norm: scales the gradients of a list of parameters to a maximum total norm.
local tl = require("tlua")
local options = require("tlua.options")
local zero = require("tlua.nn.zero")

local is_tensor = tl.is_tensor

-- The old path, one gradient at a time (the reference of the fused op, and its fallback for
-- strided gradients): the norm of each gradient with tensor ops in float64, the sum read on the
-- host (a synchronization).
local function clip_each(grads, max_norm, norm_type)
  local total, all_f64 = nil, true
  tl.no_grad(function()
    if norm_type == math.huge then
      total = 0
      for _, g in ipairs(grads) do
        if g:numel() > 0 then
          local m = g:abs():max():item()
          if m ~= m or m > total then total = m end
        end
      end
    else
      local acc
      for _, g in ipairs(grads) do
        local d = g:double()
        local s = norm_type == 2 and (d * d):sum() or (d:abs() ^ norm_type):sum()
        acc = acc and acc + s or s
      end
      total = acc:item() ^ (1 / norm_type)
    end
    for _, g in ipairs(grads) do all_f64 = all_f64 and g.dtype == "float64" end
    local coef = max_norm / (total + 1e-6)
    if not (coef >= 1) then -- torch multiplies by clamp(coef, max = 1): a NaN coefficient too
      for _, g in ipairs(grads) do g:copy_(g * coef) end
    end
  end)
  return tl.tensor(total, { dtype = all_f64 and "float64" or "float32" }):to(grads[1].device)
end

local CLIP_OPTIONS = { foreach = "boolean" } -- (tlua.options)

--- clip_grad_norm(parameters, max_norm, norm_type = 2, opts) -> the total norm of all the
-- gradients together, as torch.nn.utils.clip_grad_norm_: a 0-dim tensor on the gradients' device
-- (float32, or float64 when every gradient is float64; `total:item()` reads it, which waits for
-- the device). Every gradient is scaled in place by coef = max_norm / (total + 1e-6) when coef < 1,
-- or when it is NaN (torch multiplies by clamp(coef, max = 1): a NaN total makes every gradient
-- NaN, an infinite one makes them 0, or NaN where they are infinite). Parameters without a
-- gradient are skipped, one listed twice counts once; without any the total is a CPU float32 0.
-- max_norm: a number > 0; norm_type: a number >= 1, or math.huge (the largest |element|).
-- opts.foreach (default true): one fused op for every gradient (tl._clip_grad_norm_multi: on CUDA
-- three kernels whatever the number of gradients, no host synchronization); false: one gradient
-- at a time with tensor ops, the total read on the host (the reference path, also taken when a
-- gradient is not contiguous).
local function clip_grad_norm(parameters, max_norm, norm_type, opts)
  if is_tensor(parameters) then parameters = { parameters } end
  if type(parameters) ~= "table" then
    options.error("clip_grad_norm: argument 1 expected a tensor or a list of tensors, got " .. type(parameters), 2)
  end
  if type(max_norm) ~= "number" then
    options.error("clip_grad_norm: argument 2 (max_norm) expected a number, got " .. type(max_norm), 2)
  end
  if not (max_norm > 0) then
    options.error("clip_grad_norm: argument 2 (max_norm) must be a number > 0, got " .. tostring(max_norm), 2)
  end
  norm_type = norm_type or 2
  if type(norm_type) ~= "number" or not (norm_type >= 1) then
    options.error("clip_grad_norm: norm_type must be a number >= 1 or math.huge, got " .. tostring(norm_type), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    options.error("clip_grad_norm: argument 4 (opts) expected a table, got " .. type(opts), 2)
  end
  opts = options.check(opts, "clip_grad_norm", CLIP_OPTIONS, 2)
  local foreach = opts.foreach ~= false
  -- the parameters of an nn.DataParallel {shard_optimizer = true}: the norm over every rank's shard
  local sharded, plain = nil, false
  for _, p in ipairs(parameters) do
    local owner = is_tensor(p) and zero.owner_of(p) or nil
    if (owner and sharded and owner ~= sharded) or (owner and plain) or (not owner and sharded) then
      options.error("clip_grad_norm: the parameters of an nn.DataParallel with shard_optimizer are clipped all " ..
        "together (pass model:parameters()), not with other tensors", 2)
    end
    sharded, plain = owner or sharded, plain or not owner
  end
  if sharded then
    local distinct = {}
    for _, p in ipairs(parameters) do distinct[p] = true end
    for _, p in ipairs(sharded._params) do
      if not distinct[p] then
        options.error("clip_grad_norm: the parameters of an nn.DataParallel with shard_optimizer are clipped all " ..
          "together (pass model:parameters()), not some of them", 2)
      end
    end
    return zero.clip_grad_norm(sharded, max_norm, norm_type)
  end
  local grads, seen = {}, {}
  for _, p in ipairs(parameters) do
    local g = not seen[p] and p.grad
    seen[p] = true
    if g then
      grads[#grads + 1] = g
      if not g:is_contiguous() then foreach = false end
    end
  end
  if #grads == 0 then return tl.tensor(0.0) end
  if foreach then return tl._clip_grad_norm_multi(grads, max_norm, norm_type) end
  return clip_each(grads, max_norm, norm_type)
end

return clip_grad_norm
