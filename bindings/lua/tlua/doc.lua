-- tlua.doc: the reference's entries (tlua/doc/*.luadoc) parsed, the public names they cover, and
-- an entry as text; help() and scripts/docgen.lua both read the reference through it.
local options = require("tlua.options")

local doc = {}

-- The .luadoc files, in the order of the reference's pages (spec/reference_spec.lua checks this
-- list is the folder's).
doc.files = {
  "constructors", "tensor", "methods", "shapes", "pointwise", "pointwise_2", "reduce", "ops",
  "ops_2", "inplace", "sort", "scan", "nn_ops", "pool_ops", "attention", "grouped",
  "block_sparse", "init", "runtime", "autograd", "io", "cuda", "distributed", "nn_module",
  "nn_state_dict", "nn_containers", "nn_layers", "nn_activations", "nn_activations_2",
  "nn_block_layout", "nn_block_sparse", "nn_convolution", "nn_data_parallel", "nn_init_weights",
  "nn_losses", "nn_moe", "nn_normalization", "nn_pooling", "nn_recurrent", "nn_transformer",
  "nn_functional", "nn_functional_2", "nn_functional_activations", "nn_functional_convolution",
  "nn_functional_dropout", "nn_functional_losses", "nn_functional_normalization",
  "nn_functional_pooling", "nn_functional_recurrent", "optim", "optim_adagrad", "optim_adamax",
  "optim_clip_grad", "optim_nadam", "optim_optimizer", "optim_optimizers", "optim_plateau",
  "optim_radam", "optim_rmsprop", "optim_scheduler", "optim_schedulers",
  "optim_schedulers_cyclic", "data", "data_collate", "data_datasets", "data_idx", "data_loader",
  "data_samplers", "checkpoint", "cli", "modules", "plot",
}

-- where the .luadoc files are: beside this module (tlua/doc/ on package.path)
function doc.folder()
  local here = package.searchpath("tlua.doc", package.path)
  if not here then options.error("tlua.doc: cannot find tlua/doc.lua on package.path", 2) end
  return (here:gsub("doc%.lua$", "doc"))
end

local TAGS = {
  ["function"] = true, module = true, also = true, call = true, tparam = true, param = true,
  treturn = true, ["return"] = true, input = true, output = true, raise = true, see = true,
  usage = true,
}

-- "[opt=1] integer dim text" -> { opt, default, type, name, text } (also "[opt] T name", "T name")
local function parse_tparam(text, typed)
  local entry = {}
  local modifier, rest = text:match("^%[([^%]]*)%]%s*(.*)$")
  if modifier then
    entry.optional = true
    entry.default = modifier:match("^opt=(.*)$")
    text = rest
  end
  if typed then
    entry.type, text = text:match("^(%S+)%s*(.*)$")
  end
  entry.name, entry.text = (text or ""):match("^(%S+)%s*(.*)$")
  return entry
end

-- One entry from its lines (the leading "--- " or "-- " already removed).
local function parse_block(lines, file, line)
  local entry = { file = file, line = line, also = {}, params = {}, returns = {}, raises = {},
                  see = {}, problems = {} }
  local prose, tag, tag_lines = {}, nil, nil
  local function finish_tag()
    if not tag then return end
    local text = table.concat(tag_lines, "\n")
    local one = text:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
    if tag == "function" or tag == "module" then
      if entry.name then entry.problems[#entry.problems + 1] = "two names: " .. entry.name .. ", " .. one end
      entry.name, entry.kind = one, tag
    elseif tag == "also" then
      for n in one:gmatch("%S+") do entry.also[#entry.also + 1] = n end
    elseif tag == "call" then
      entry.call = one
    elseif tag == "tparam" or tag == "param" then
      local p = parse_tparam(one, tag == "tparam")
      if not p.name then
        entry.problems[#entry.problems + 1] = "@" .. tag .. " without a name: " .. one
      else
        entry.params[#entry.params + 1] = p
      end
    elseif tag == "treturn" or tag == "return" then
      local kind, text_rest = one:match("^(%S+)%s*(.*)$")
      if tag == "return" then kind, text_rest = nil, one end
      entry.returns[#entry.returns + 1] = { type = kind, text = text_rest }
    elseif tag == "input" or tag == "output" then
      entry[tag] = one
    elseif tag == "raise" then
      entry.raises[#entry.raises + 1] = one
    elseif tag == "see" then
      for n in one:gmatch("[^%s,]+") do entry.see[#entry.see + 1] = n end
    elseif tag == "usage" then
      entry.usage = text:gsub("^%s*\n", ""):gsub("%s+$", "")
    end
    tag, tag_lines = nil, nil
  end
  for _, l in ipairs(lines) do
    local name, rest = l:match("^@(%w+)%s?(.*)$")
    if name then
      finish_tag()
      if not TAGS[name] then
        entry.problems[#entry.problems + 1] = "unknown tag @" .. name
      else
        tag, tag_lines = name, { rest }
      end
    elseif tag then
      tag_lines[#tag_lines + 1] = l
    else
      prose[#prose + 1] = l
    end
  end
  finish_tag()
  local text = table.concat(prose, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
  -- the summary: the first sentence (up to ". " or the paragraph's end)
  local paragraph = text:match("^(.-)\n%s*\n") or text
  local summary = paragraph:match("^(.-%.)%s") or paragraph
  entry.summary = summary:gsub("%s+", " ")
  entry.description = text:sub(#summary + 1):gsub("^%s+", "")
  if entry.description == "" then entry.description = nil end
  if not entry.name then entry.problems[#entry.problems + 1] = "no @function or @module" end
  if entry.summary == "" then entry.problems[#entry.problems + 1] = "no summary" end
  return entry
end

--- doc.parse(text, file) -> the entries of one .luadoc text, in order. An entry is a run of
-- "--" lines whose first starts with "---"; each has `problems` (empty when well formed).
function doc.parse(text, file)
  local entries, block, start = {}, nil, nil
  local number = 0
  local function close()
    if block then entries[#entries + 1] = parse_block(block, file, start) end
    block = nil
  end
  for l in (text .. "\n"):gmatch("(.-)\r?\n") do
    number = number + 1
    if l:match("^%-%-%-") and not l:match("^%-%-%-%-") then
      close()
      block, start = { (l:gsub("^%-%-%-%s?", "")) }, number
    elseif block and l:match("^%-%-") then
      block[#block + 1] = l:gsub("^%-%-%s?", "")
    else
      close()
    end
  end
  close()
  return entries
end

local cache
--- doc.entries() -> every entry of the reference (read once), and a map from each name an
-- entry documents (its name and its @also names) to the entry.
function doc.entries()
  if cache then return cache.list, cache.by_name end
  local list, by_name = {}, {}
  local folder = doc.folder()
  for _, stem in ipairs(doc.files) do
    local path = folder .. "/" .. stem .. ".luadoc"
    local f = io.open(path, "rb")
    if f then
      local text = f:read("a")
      f:close()
      for _, e in ipairs(doc.parse(text, stem .. ".luadoc")) do
        e.page = stem
        list[#list + 1] = e
        if e.name and not by_name[e.name] then by_name[e.name] = e end
        for _, n in ipairs(e.also) do
          if not by_name[n] then by_name[n] = e end
        end
      end
    end
  end
  cache = { list = list, by_name = by_name }
  return list, by_name
end

-- ---- the public names ------------------------------------------------------------------------

-- the modules of the reference: name -> how to load it
local ROOTS = {
  { "tl", function() return require("tlua") end },
  { "tlua.cli", function() return require("tlua.cli") end },
  { "tlua.plot", function() return require("tlua.plot") end },
}

local function public_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" and not k:match("^_") then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

-- a class (tlua/class.lua's): a table that is its instances' __index and is called to make one
local function is_class(v)
  if type(v) ~= "table" or rawget(v, "__index") ~= v then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

-- a namespace: a table holding functions by name (constants beside them allowed), not a class
-- and not a list of values
local function is_namespace(v)
  if type(v) ~= "table" or is_class(v) or #v > 0 then return false end
  for k, x in pairs(v) do
    if type(k) == "string" and not k:match("^_") and type(x) == "function" then return true end
  end
  return false
end

--- doc.public_names() -> the sorted list of every public name reachable from require("tlua")
-- (with tlua.cli and tlua.plot), and a map name -> { value, class = C, method = m } for class
-- methods. Submodules tl loads on first use are loaded; names starting with "_" are private.
function doc.public_names()
  local tl = require("tlua")
  local names, info = {}, {}
  local function add(name, value, extra)
    if info[name] then return end
    names[#names + 1] = name
    info[name] = extra or { value = value }
    info[name].value = value
  end
  local function walk(prefix, t, depth)
    for _, k in ipairs(public_keys(t)) do
      local v = t[k]
      local name = prefix .. "." .. k
      add(name, v)
      if is_class(v) then
        for _, m in ipairs(public_keys(v)) do
          if type(rawget(v, m)) == "function" then
            add(name .. ":" .. m, rawget(v, m), { class = name, method = m })
          end
        end
      elseif is_namespace(v) and depth < 3 and name ~= "tl.Tensor" then -- methods: below
        walk(name, v, depth + 1)
      end
    end
  end
  -- tl's lazily loaded submodules first, so that pairs(tl) sees them
  local mt = getmetatable(tl)
  for _, sub in ipairs(mt and mt.__completions or {}) do
    local ok = pcall(function() return tl[sub] end)
    if not ok then options.error("tlua.doc: tl." .. sub .. " does not load", 2) end
  end
  for _, root in ipairs(ROOTS) do
    local ok, module = pcall(root[2])
    if ok and type(module) == "table" then
      if root[1] ~= "tl" then add(root[1], module) end
      walk(root[1], module, 1)
    end
  end
  -- the Tensor's methods (tl.Tensor is its method table)
  for _, m in ipairs(public_keys(tl.Tensor)) do
    add("tl.Tensor:" .. m, tl.Tensor[m], { class = "tl.Tensor", method = m })
  end
  table.sort(names)
  return names, info
end

--- doc.coverage() -> the public names without an entry, and the entry names ("page: name (why)")
-- that resolve to nothing. A class's method is covered by its own entry, or by an entry of that
-- method on any class of the same module (a protocol method such as forward, documented once on
-- nn.Module).
function doc.coverage()
  local list, by_name = doc.entries()
  local names, info = doc.public_names()
  local methods = {}
  for n in pairs(by_name) do
    local module, method = n:match("^(.*)%.[%w_]+[:%.]([%w_]+)$")
    if module then methods[module .. ":" .. method] = true end
  end
  local missing = {}
  for _, n in ipairs(names) do
    local i = info[n]
    local covered = by_name[n] ~= nil
    if not covered and i.class then
      covered = by_name[i.class .. "." .. i.method] ~= nil
        or methods[(i.class:match("^(.*)%.[%w_]+$") or i.class) .. ":" .. i.method] ~= nil
    end
    if not covered then missing[#missing + 1] = n end
  end
  local unknown = {}
  for _, e in ipairs(list) do
    for _, n in ipairs({ e.name, table.unpack(e.also) }) do
      local value, why = doc.resolve(n)
      if value == nil then unknown[#unknown + 1] = e.page .. ": " .. n .. " (" .. tostring(why) .. ")" end
    end
  end
  return missing, unknown, #names
end

--- doc.resolve(name) -> the value a reference name stands for, or nil and why: "tl.cat",
-- "tl.Tensor:add", "tl.nn.Module:parameters", "tl.Tensor.shape" (a tensor's field).
function doc.resolve(name)
  local tl = require("tlua")
  local root, path
  for _, r in ipairs(ROOTS) do
    if name == r[1] or name:sub(1, #r[1] + 1) == r[1] .. "." or name:sub(1, #r[1] + 1) == r[1] .. ":" then
      if not root or #r[1] > #root[1] then root = r end
    end
  end
  if not root then return nil, "not under tl, tlua.cli or tlua.plot" end
  local ok, value = pcall(root[2])
  if not ok then return nil, tostring(value) end
  path = name:sub(#root[1] + 1)
  -- a tensor's field: tl.Tensor.<field> that is not a method
  local field = path:match("^%.Tensor%.([%w_]+)$")
  if root[1] == "tl" and field and rawget(tl.Tensor, field) == nil then
    local x = tl.ones(1)
    local got, v = pcall(function() return x[field] end)
    if got and (v ~= nil or field == "grad" or field == "grad_fn") then return true end
    return nil, "a tensor has no field " .. field
  end
  for sep, key in path:gmatch("([%.:])([^%.:]+)") do
    if type(value) ~= "table" then return nil, "not a table before " .. sep .. key end
    local got, v = pcall(function() return value[key] end)
    if not got or v == nil then return nil, "no " .. key end
    value = v
  end
  return value
end

--- doc.find(query) -> the entry for a name or value, or nil and the closest names. A string may
-- leave out "tl." ("nn.Conv2d", "cat"), write a method "Tensor:add" or "Tensor.add".
function doc.find(query)
  local _, by_name = doc.entries()
  if type(query) ~= "string" then
    local names, info = doc.public_names()
    for _, n in ipairs(names) do
      if rawequal(info[n].value, query) and by_name[n] then return by_name[n] end
    end
    return nil, {}
  end
  local q = query:gsub("^%s+", ""):gsub("%s+$", ""):gsub("%(%)$", "")
  local tries = { q, "tl." .. q, "tlua." .. q, (q:gsub("^tl%.Tensor%.", "tl.Tensor:")),
                  "tl." .. q:gsub("^Tensor%.", "Tensor:"), (q:gsub("^t:", "tl.Tensor:")) }
  for _, t in ipairs(tries) do
    if by_name[t] then return by_name[t] end
  end
  local all = {}
  for n in pairs(by_name) do all[#all + 1] = n end
  table.sort(all)
  local short = {}
  for i, n in ipairs(all) do short[i] = n:gsub("^tl%.", "") end
  local near = require("tlua.names").closest(q:gsub("^tl%.", ""), short, 5)
  return nil, near
end

-- ---- an entry as text (help) ---------------------------------------------------------------

--- doc.call_line(entry) -> how the entry is called: its @call, or its name with its parameters
function doc.call_line(e)
  if e.call then return e.call end
  if e.kind == "module" then return e.name end
  local args = {}
  for _, p in ipairs(e.params) do
    if not p.name:find(".", 1, true) then args[#args + 1] = p.name .. (p.optional and "?" or "") end
  end
  if #args == 0 and #e.params == 0 and not e.name:find(":", 1, true) and e.returns[1] == nil then
    return e.name
  end
  return e.name .. "(" .. table.concat(args, ", ") .. ")"
end

--- doc.text(entry) -> the entry as plain text for a terminal
function doc.text(e)
  local out = { doc.call_line(e), "", "  " .. e.summary }
  if e.description then
    out[#out + 1] = ""
    for l in (e.description .. "\n"):gmatch("(.-)\n") do out[#out + 1] = "  " .. l end
  end
  if #e.also > 0 then out[#out + 1] = "\n  also: " .. table.concat(e.also, ", ") end
  if #e.params > 0 then
    out[#out + 1] = "\nArguments:"
    for _, p in ipairs(e.params) do
      local extra = p.default and (" (default " .. p.default .. ")") or (p.optional and " (optional)" or "")
      out[#out + 1] = string.format("  %s%s%s  %s", p.name, p.type and (" : " .. p.type) or "", extra, p.text or "")
    end
  end
  if e.input then out[#out + 1] = "\nInput: " .. e.input end
  if e.output then out[#out + 1] = "Output: " .. e.output end
  if #e.returns > 0 then
    out[#out + 1] = "\nReturns:"
    for _, r in ipairs(e.returns) do out[#out + 1] = "  " .. (r.type and (r.type .. "  ") or "") .. r.text end
  end
  if #e.raises > 0 then
    out[#out + 1] = "\nErrors:"
    for _, r in ipairs(e.raises) do out[#out + 1] = "  " .. r end
  end
  if #e.see > 0 then out[#out + 1] = "\nSee also: " .. table.concat(e.see, ", ") end
  if e.usage then
    out[#out + 1] = "\nExample:"
    for l in (e.usage .. "\n"):gmatch("(.-)\n") do out[#out + 1] = "  " .. l end
  end
  return table.concat(out, "\n")
end

return doc
