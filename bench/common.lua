-- What the Lua benchmarks share: their options (--name N, --name word) and the median of timings.
local common = {}

--- Reads `--name value` pairs of arg into a copy of defaults; names must be keys of defaults or in
-- extra (a set of names without a default, e.g. threads). A name whose default is a string takes
-- a word (--device cuda), every other name an integer. Errors name the script.
function common.options(script, defaults, extra)
  local opts = {}
  for k, v in pairs(defaults) do opts[k] = v end
  local i = 1
  while i <= #arg do
    local name = arg[i]:match("^%-%-([%w_]+)$")
    if not name or (defaults[name] == nil and not (extra and extra[name])) then
      error(script .. ": unknown argument '" .. arg[i] .. "'", 0)
    end
    if type(defaults[name]) == "string" then
      opts[name] = arg[i + 1]
      if not opts[name] then error(script .. ": --" .. name .. " needs a value", 0) end
    else
      opts[name] = math.tointeger(tonumber(arg[i + 1]))
      if not opts[name] then error(script .. ": --" .. name .. " needs an integer", 0) end
    end
    i = i + 2
  end
  return opts
end

--- The median of a list of numbers (sorts it).
function common.median(xs)
  table.sort(xs)
  local n = #xs
  if n % 2 == 1 then return xs[(n + 1) // 2] end
  return (xs[n // 2] + xs[n // 2 + 1]) / 2
end

return common
