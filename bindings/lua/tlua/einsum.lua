-- tlua.einsum: tl.einsum(spec, ...) and tl.tensordot(a, b, dims), lowered to diagonals, sums, permutes (views) and batched matmuls, never a loop over the contraction.
local tl = require("tlua.core")
local options = require("tlua.options")

local M = {}

-- raises at the user's line: depth is how many calls the raising function is below the user's
-- (1 for einsum and tensordot themselves, 3 for einsum's planning steps), for a sandbox where the
-- stack cannot be read
local function fail(depth, who, fmt, ...)
  options.error(string.format(who .. ": " .. fmt, ...), depth + 2)
end

-- ---- the tape: einsum's tensor ops as it plans a call, replayed by later calls of the same spec
-- and shapes (planning is Lua work of the order of the ops' own launch cost on a GPU)
local tape -- while einsum plans: {steps = {}, slot = tensor -> its slot (operands 1..n)}

-- t:method(...) (tl.matmul(t, other) for "matmul"), written on the tape when one is running
local function op(method, t, ...)
  local out
  if method == "matmul" then out = tl.matmul(t, ...) else out = t[method](t, ...) end
  if tape then
    local args = table.pack(...)
    if method == "matmul" then args = { n = 0, other = tape.slot[args[1]] } end
    tape.steps[#tape.steps + 1] = { method = method, input = tape.slot[t], args = args }
    tape.slot[out] = tape.operands + #tape.steps
  end
  return out
end

-- the result of the steps on new operands (of the shapes they were planned for)
local function replay(plan, operands)
  local values = { table.unpack(operands) }
  local n = #values
  for i, s in ipairs(plan.steps) do
    local t = values[s.input]
    if s.method == "matmul" then
      values[n + i] = tl.matmul(t, values[s.args.other])
    else
      values[n + i] = t[s.method](t, table.unpack(s.args, 1, s.args.n))
    end
  end
  return values[plan.result]
end

local plans, plan_count = {}, 0 -- spec and shapes -> plan; cleared when it holds 256

-- the positions (1-based) of labels in list, as a table label -> position
local function positions(list)
  local at = {}
  for i, label in ipairs(list) do at[label] = i end
  return at
end

local function is_identity(perm)
  for i, p in ipairs(perm) do if p ~= i then return false end end
  return true
end

local function same_shape(t, shape)
  if t:dim() ~= #shape then return false end
  for i, s in ipairs(shape) do if t:size(i) ~= s then return false end end
  return true
end

-- t permuted so its labels (list) come in the order of want (views; nothing when in order)
local function arrange(t, list, want)
  local at, perm = positions(list), {}
  for i, label in ipairs(want) do perm[i] = at[label] end
  if #perm == 0 or is_identity(perm) then return t end
  return op("permute", t, perm)
end

local function reshaped(t, shape)
  if same_shape(t, shape) then return t end
  return op("reshape", t, shape)
end

-- t with the labels of list that keep does not hold summed away: the tensor and its labels
local function sum_unneeded(t, list, keep)
  local dims, rest = {}, {}
  for i, label in ipairs(list) do
    if keep[label] then rest[#rest + 1] = label else dims[#dims + 1] = i end
  end
  if #dims == 0 then return t, list end
  return op("sum", t, dims), rest
end

--- contract(a, la, b, lb, keep, size) -> the product of a (labels la) and b (labels lb) summed
-- over the labels they share that keep does not hold, and its labels: a's and b's shared kept
-- labels lead as batch dims, then a's own, then b's own. One matmul: a as [batch..., M, K], b as
-- [batch..., K, N] (permuted views, reshaped where groups merge), the result [batch..., M, N].
local function contract(a, la, b, lb, keep, size)
  local in_a, in_b = positions(la), positions(lb)
  local need = {}
  for label in pairs(keep) do need[label] = true end
  for _, label in ipairs(la) do if in_b[label] then need[label] = true end end
  a, la = sum_unneeded(a, la, need)
  b, lb = sum_unneeded(b, lb, need)
  in_a, in_b = positions(la), positions(lb)
  local batch, a_own, shared, b_own = {}, {}, {}, {}
  for _, label in ipairs(la) do
    if not in_b[label] then a_own[#a_own + 1] = label
    elseif keep[label] then batch[#batch + 1] = label
    else shared[#shared + 1] = label end
  end
  for _, label in ipairs(lb) do if not in_a[label] then b_own[#b_own + 1] = label end end
  local function product(list)
    local p = 1
    for _, label in ipairs(list) do p = p * size[label] end
    return p
  end
  local lead = {}
  for i, label in ipairs(batch) do lead[i] = size[label] end
  local function with_lead(...)
    local shape = { table.unpack(lead) }
    for _, s in ipairs({ ... }) do shape[#shape + 1] = s end
    return shape
  end
  local ordered_a = { table.unpack(batch) }
  for _, label in ipairs(a_own) do ordered_a[#ordered_a + 1] = label end
  for _, label in ipairs(shared) do ordered_a[#ordered_a + 1] = label end
  local ordered_b = { table.unpack(batch) }
  for _, label in ipairs(shared) do ordered_b[#ordered_b + 1] = label end
  for _, label in ipairs(b_own) do ordered_b[#ordered_b + 1] = label end
  local m, k, n = product(a_own), product(shared), product(b_own)
  local am = reshaped(arrange(a, la, ordered_a), with_lead(m, k))
  local bm = reshaped(arrange(b, lb, ordered_b), with_lead(k, n))
  local c = op("matmul", am, bm)
  local labels, shape = { table.unpack(batch) }, { table.unpack(lead) }
  for _, label in ipairs(a_own) do labels[#labels + 1], shape[#shape + 1] = label, size[label] end
  for _, label in ipairs(b_own) do labels[#labels + 1], shape[#shape + 1] = label, size[label] end
  return reshaped(c, shape), labels
end

-- ---- einsum's spec ------------------------------------------------------------------------

-- a term's labels: letters, and "..." once (the string "..."); nil and a message when invalid
local function parse_term(term, what)
  local labels, i, seen_ellipsis = {}, 1, false
  while i <= #term do
    local c = term:sub(i, i)
    if term:sub(i, i + 2) == "..." then
      if seen_ellipsis then return nil, string.format("%s has two ellipses", what) end
      seen_ellipsis = true
      labels[#labels + 1] = "..."
      i = i + 3
    elseif c:match("%a") then
      labels[#labels + 1] = c
      i = i + 1
    else
      return nil, string.format("invalid character '%s' in %s (expected letters and '...')", c, what)
    end
  end
  return labels
end

-- the operands' and the output's labels, with each "..." replaced by ellipsis labels ("...1",
-- "...2", ..., aligned to the right) and the implicit output made as torch makes it: the
-- ellipsis dims, then the labels used once, in alphabetical (ASCII) order
local function parse(spec, operands)
  local who = "einsum"
  local body = spec:gsub("%s", "")
  local lhs, rhs = body:match("^(.-)%->(.*)$")
  if not lhs then lhs = body end
  if rhs and rhs:find("->", 1, true) then fail(3, who, "the spec '%s' has more than one '->'", spec) end
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  if #terms ~= #operands then
    fail(3, who, "the spec '%s' names %d operand%s but %d tensor%s given", spec, #terms,
      #terms == 1 and "" or "s", #operands, #operands == 1 and " was" or "s were")
  end
  local inputs, ellipsis_rank = {}, 0
  for i, term in ipairs(terms) do
    local labels, message = parse_term(term, string.format("the subscripts of operand %d ('%s')", i, term))
    if not labels then fail(3, who, "%s", message) end
    local named, has_ellipsis = 0, false
    for _, label in ipairs(labels) do
      if label == "..." then has_ellipsis = true else named = named + 1 end
    end
    local ndim = operands[i]:dim()
    if (has_ellipsis and named > ndim) or (not has_ellipsis and named ~= ndim) then
      fail(3, who, "operand %d has %d dims but its subscripts '%s' name %s%d", i, ndim, term,
        has_ellipsis and "at least " or "", named)
    end
    local count = has_ellipsis and ndim - named or 0
    if count > ellipsis_rank then ellipsis_rank = count end
    inputs[i] = { labels = labels, ellipsis = count }
  end
  local function expand_ellipsis(labels, count)
    local out = {}
    for _, label in ipairs(labels) do
      if label == "..." then
        for e = ellipsis_rank - count + 1, ellipsis_rank do out[#out + 1] = "..." .. e end
      else
        out[#out + 1] = label
      end
    end
    return out
  end
  for i, input in ipairs(inputs) do inputs[i] = expand_ellipsis(input.labels, input.ellipsis) end
  local uses = {}
  for _, labels in ipairs(inputs) do
    for _, label in ipairs(labels) do uses[label] = (uses[label] or 0) + 1 end
  end
  local output
  if rhs then
    local labels, message = parse_term(rhs, string.format("the output's subscripts ('%s')", rhs))
    if not labels then fail(3, who, "%s", message) end
    output = expand_ellipsis(labels, ellipsis_rank)
    local seen = {}
    for _, label in ipairs(output) do
      if seen[label] then fail(3, who, "label '%s' appears twice in the output '%s'", label, rhs) end
      if not uses[label] then
        fail(3, who, "output label '%s' appears in no operand", label:sub(1, 3) == "..." and "..." or label)
      end
      seen[label] = true
    end
  else
    output = {}
    for e = 1, ellipsis_rank do output[#output + 1] = "..." .. e end
    local once = {}
    for label, n in pairs(uses) do
      if n == 1 and label:sub(1, 3) ~= "..." then once[#once + 1] = label end
    end
    table.sort(once)
    for _, label in ipairs(once) do output[#output + 1] = label end
  end
  return inputs, output
end

-- each label's size over every operand (size-1 dims broadcast); an error names the label
local function label_sizes(operands, inputs)
  local size, where = {}, {}
  for i, labels in ipairs(inputs) do
    for d, label in ipairs(labels) do
      local s = operands[i]:size(d)
      local known = size[label]
      if known == nil or known == 1 then
        if known == nil or s ~= 1 then size[label], where[label] = s, i end
      elseif s ~= known and s ~= 1 then
        local name = label:sub(1, 3) == "..." and "the ellipsis's dim " .. label:sub(4) or "label '" .. label .. "'"
        fail(3, "einsum", "%s has size %d in operand %d but %d in operand %d", name, known, where[label], s, i)
      end
    end
  end
  return size
end

-- an operand with its repeated labels turned into diagonals, its size-1 dims expanded to the
-- label's size elsewhere, and the labels no one else needs summed away
local function prepare(t, labels, i, size, keep)
  labels = { table.unpack(labels) }
  while true do
    local first, d1, d2 = {}, nil, nil
    for d, label in ipairs(labels) do
      if first[label] then d1, d2 = first[label], d break end
      first[label] = d
    end
    if not d1 then break end
    if t:size(d1) ~= t:size(d2) then
      fail(3, "einsum", "label '%s' repeats in operand %d with sizes %d and %d", labels[d1], i, t:size(d1), t:size(d2))
    end
    local label = labels[d1]
    t = op("diagonal", t, 0, d1, d2)
    table.remove(labels, d2)
    table.remove(labels, d1)
    labels[#labels + 1] = label
  end
  local shape, grows = {}, false
  for d, label in ipairs(labels) do
    shape[d] = size[label]
    if t:size(d) ~= size[label] then grows = true end
  end
  if grows then t = op("expand", t, shape) end
  return sum_unneeded(t, labels, keep)
end

-- the labels that operands other than those in skip, and the output, need
local function needed(list, skip, output)
  local keep = {}
  for _, label in ipairs(output) do keep[label] = true end
  for j, entry in ipairs(list) do
    if not skip[j] then for _, label in ipairs(entry.labels) do keep[label] = true end end
  end
  return keep
end

--- einsum(spec, a, b?, c?, ...) -> the tensor spec describes ("bhqd,bhkd->bhqk", "ii->i",
-- "...ij,...jk", "ij,jk,kl->il"): each operand's repeated labels become diagonals, labels used
-- nowhere else are summed, then operands are contracted two at a time (the cheapest pair first,
-- by the product of the sizes of their labels), each contraction one batched matmul over
-- permuted views; the result is permuted to the output's order.
function M.einsum(spec, ...)
  if type(spec) ~= "string" then
    fail(1, "einsum", "argument 1 expected a spec (a string), got %s", tl.is_tensor(spec) and "a tensor" or type(spec))
  end
  local operands = { ... }
  if #operands == 1 and type(operands[1]) == "table" and not tl.is_tensor(operands[1]) then
    operands = operands[1]
  end
  if #operands == 0 then fail(1, "einsum", "expected at least one operand after the spec") end
  -- the plan's key: the spec and each operand's shape, dtype and device
  local parts, shared = { spec }, false
  for i, t in ipairs(operands) do
    if not tl.is_tensor(t) then fail(1, "einsum", "operand %d expected a tensor, got %s", i, type(t)) end
    parts[i + 1] = t._layout_key
    for j = 1, i - 1 do shared = shared or rawequal(operands[j], t) end
  end
  local key = table.concat(parts, "|")
  local plan = plans[key]
  if plan then return replay(plan, operands) end
  for i, t in ipairs(operands) do
    if t.dtype ~= operands[1].dtype or t.device ~= operands[1].device then
      fail(1, "einsum", "operand %d is %s on %s, expected operand 1's %s on %s", i, t.dtype, t.device,
        operands[1].dtype, operands[1].device)
    end
  end
  -- an operand given twice would be one slot of the tape: such calls are planned every time (a
  -- planning that raised leaves its tape behind, weak, until the next call)
  tape = nil
  if not shared then
    tape = { steps = {}, slot = setmetatable({}, { __mode = "k" }), operands = #operands }
    for i, t in ipairs(operands) do tape.slot[t] = i end
  end
  local result = M._plan(spec, operands)
  local recorded = tape
  tape = nil
  if recorded then
    if plan_count >= 256 then plans, plan_count = {}, 0 end
    plans[key], plan_count = { steps = recorded.steps, result = recorded.slot[result] }, plan_count + 1
  end
  return result
end

-- einsum's work on checked operands, its tensor ops through op (on the tape while one runs)
function M._plan(spec, operands)
  local inputs, output = parse(spec, operands)
  local size = label_sizes(operands, inputs)
  local list = {}
  for i, t in ipairs(operands) do list[i] = { tensor = t, labels = inputs[i] } end
  for i, entry in ipairs(list) do
    local keep = needed(list, { [i] = true }, output)
    entry.tensor, entry.labels = prepare(entry.tensor, entry.labels, i, size, keep)
  end
  while #list > 1 do
    local best, bi, bj = nil, nil, nil
    for i = 1, #list do
      for j = i + 1, #list do
        local union, cost = {}, 1
        for _, e in ipairs({ list[i], list[j] }) do
          for _, label in ipairs(e.labels) do
            if not union[label] then union[label], cost = true, cost * size[label] end
          end
        end
        if not best or cost < best then best, bi, bj = cost, i, j end
      end
    end
    local keep = needed(list, { [bi] = true, [bj] = true }, output)
    local t, labels = contract(list[bi].tensor, list[bi].labels, list[bj].tensor, list[bj].labels, keep, size)
    table.remove(list, bj)
    list[bi] = { tensor = t, labels = labels }
  end
  local result, labels = sum_unneeded(list[1].tensor, list[1].labels, positions(output))
  return arrange(result, labels, output)
end

--- tensordot(a, b, dims = 2) -> a and b summed over pairs of dims: dims an integer n (a's last n
-- with b's first n) or a pair of tables {{a's dims}, {b's dims}} (1-based, negative from the end);
-- the result has a's other dims, then b's. One matmul.
function M.tensordot(a, b, dims)
  local who = "tensordot"
  tape = nil
  if not tl.is_tensor(a) then fail(1, who, "argument 1 expected a tensor, got %s", type(a)) end
  if not tl.is_tensor(b) then fail(1, who, "argument 2 expected a tensor, got %s", type(b)) end
  if a.dtype ~= b.dtype or a.device ~= b.device then
    fail(1, who, "b is %s on %s, expected a's %s on %s", b.dtype, b.device, a.dtype, a.device)
  end
  dims = dims == nil and 2 or dims
  local da, db = {}, {}
  if math.type(dims) == "integer" or (type(dims) == "number" and dims == math.floor(dims)) then
    local n = math.tointeger(dims)
    if n < 0 or n > a:dim() or n > b:dim() then
      fail(1, who, "dims %d is out of range for tensors of %d and %d dims", n, a:dim(), b:dim())
    end
    for i = 1, n do da[i], db[i] = a:dim() - n + i, i end
  elseif type(dims) == "table" and type(dims[1]) == "table" and type(dims[2]) == "table" then
    if #dims[1] ~= #dims[2] then
      fail(1, who, "got %d dims of a but %d of b (expected pairs)", #dims[1], #dims[2])
    end
    local function wrap(t, name, d)
      if math.type(d) ~= "integer" or d == 0 or d > t:dim() or d < -t:dim() then
        fail(2, who, "dim %s of %s is out of range for a tensor of %d dims (expected 1 to %d, or -%d to -1)",
          tostring(d), name, t:dim(), t:dim(), t:dim())
      end
      return d < 0 and d + t:dim() + 1 or d
    end
    for i = 1, #dims[1] do da[i], db[i] = wrap(a, "a", dims[1][i]), wrap(b, "b", dims[2][i]) end
  else
    fail(1, who, "dims expected an integer or a pair of tables of dims, got %s", type(dims))
  end
  local la, lb, size, keep = {}, {}, {}, {}
  for d = 1, a:dim() do la[d] = "a" .. d end
  for d = 1, b:dim() do lb[d] = "b" .. d end
  local seen_a, seen_b = {}, {}
  for i = 1, #da do
    if seen_a[da[i]] then fail(1, who, "dim %d of a appears twice", da[i]) end
    if seen_b[db[i]] then fail(1, who, "dim %d of b appears twice", db[i]) end
    seen_a[da[i]], seen_b[db[i]] = true, true
    if a:size(da[i]) ~= b:size(db[i]) then
      fail(1, who, "dim %d of a has size %d but dim %d of b has size %d", da[i], a:size(da[i]), db[i], b:size(db[i]))
    end
    lb[db[i]] = la[da[i]]
  end
  for d = 1, a:dim() do
    size[la[d]] = a:size(d)
    if not seen_a[d] then keep[la[d]] = true end
  end
  for d = 1, b:dim() do
    size[lb[d]] = b:size(d)
    if not seen_b[d] then keep[lb[d]] = true end
  end
  local result, labels = contract(a, la, b, lb, keep, size)
  local order = {}
  for d = 1, a:dim() do if not seen_a[d] then order[#order + 1] = la[d] end end
  for d = 1, b:dim() do if not seen_b[d] then order[#order + 1] = lb[d] end end
  return arrange(result, labels, order)
end

return M
