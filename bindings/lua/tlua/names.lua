-- tlua.names: the error for a name a module does not have ("tl.X does not exist"), with the
-- closest names it does have.
local options = require("tlua.options")
local names = {}

-- the edit distance between a and b (insertions, deletions, substitutions, swaps of neighbours),
-- case folded
local function distance(a, b)
  a, b = a:lower(), b:lower()
  local before, previous = {}, {}
  for j = 0, #b do previous[j] = j end
  for i = 1, #a do
    local current = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      current[j] = math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
      -- two neighbours swapped count as one edit (cta for cat)
      if i > 1 and j > 1 and a:sub(i, i) == b:sub(j - 1, j - 1) and a:sub(i - 1, i - 1) == b:sub(j, j) then
        current[j] = math.min(current[j], before[j - 2] + 1)
      end
    end
    before, previous = previous, current
  end
  return previous[#b]
end

--- names.closest(name, candidates, count?) -> up to count (3) of the candidate strings nearest to
-- name: within a third of its length in edits (at least one), or starting with it, nearest first
function names.closest(name, candidates, count)
  count = count or 3
  local scored = {}
  for _, c in ipairs(candidates) do
    local d = distance(name, c)
    if #name >= 3 and c:lower():find(name:lower(), 1, true) == 1 then d = math.min(d, 1) end
    if d <= math.max(1, #name // 3) then scored[#scored + 1] = { c, d } end
  end
  table.sort(scored, function(x, y) return x[2] < y[2] or (x[2] == y[2] and x[1] < y[1]) end)
  local out = {}
  for i = 1, math.min(count, #scored) do out[i] = scored[i][1] end
  return out
end

--- names.missing(module, t, key, extra?) raises "<module>.<key> does not exist" naming the closest
-- string keys of t (and of the list extra), at the line that asked for it
function names.missing(module, t, key, extra)
  local candidates = {}
  for k in pairs(t) do
    if type(k) == "string" and not k:match("^_") then candidates[#candidates + 1] = k end
  end
  for _, k in ipairs(extra or {}) do candidates[#candidates + 1] = k end
  local message = string.format("%s.%s does not exist", module, tostring(key))
  local near = type(key) == "string" and names.closest(key, candidates) or {}
  if #near > 0 then
    for i, n in ipairs(near) do near[i] = module .. "." .. n end
    message = message .. " (did you mean " .. table.concat(near, ", ") .. "?)"
  end
  options.error(message, 3)
end

return names
