-- scripts/cdoc.lua: the C API's reference entries (engine/include/tlua/doc/*.dox, Doxygen-style
-- blocks naming their function with @fn), the functions the public headers declare, and the
-- examples as one C program; used by scripts/docgen.lua and spec/reference_c_spec.lua.
local cdoc = {}

-- the public headers (what `#include <tlua/tlua.h>` and `<tlua/embed.h>` declare)
cdoc.HEADERS = { "engine/include/tlua", "bindings/lua/embed/include/tlua" }
cdoc.DOC_FOLDER = "engine/include/tlua/doc"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end
cdoc.read = read

local function list(root, pattern)
  local out = {}
  local p = io.popen("ls -1 '" .. root .. "' 2>/dev/null")
  for f in p:lines() do
    if f:match(pattern) then out[#out + 1] = f end
  end
  p:close()
  table.sort(out)
  return out
end

-- the function's name in a declaration: the identifier before the first "("
local function declared_name(fn)
  return fn:match("([%w_<>]+)%s*%(")
end

local function parse_block(body, file, line)
  local e = { file = file, line = line, fns = {}, params = {}, returns = {}, see = {}, problems = {} }
  local prose, tag, lines = {}, nil, nil
  local function finish()
    if not tag then return end
    local text = table.concat(lines, "\n")
    local one = text:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
    if tag == "fn" then
      e.fns[#e.fns + 1] = one
    elseif tag == "rows" then
      e.rows = one
    elseif tag == "param" then
      local name, rest = one:match("^(%S+)%s*(.*)$")
      e.params[#e.params + 1] = { name = name, text = rest }
    elseif tag == "return" then
      e.returns[#e.returns + 1] = one
    elseif tag == "see" then
      for n in one:gmatch("[^%s,]+") do e.see[#e.see + 1] = n end
    elseif tag == "code" then
      e.code = text:gsub("^%s*\n", ""):gsub("%s+$", "")
    end
    tag, lines = nil, nil
  end
  local in_code = false
  for l in (body .. "\n"):gmatch("(.-)\n") do
    l = l:gsub("^%s*%*%s?", "", 1)
    if in_code then
      if l:match("^%s*@endcode") then
        in_code = false
        finish()
      else
        lines[#lines + 1] = l
      end
    else
      local name, rest = l:match("^@(%w+)%s?(.*)$")
      if name == "code" then
        finish()
        tag, lines, in_code = "code", {}, true
      elseif name then
        finish()
        if name ~= "fn" and name ~= "rows" and name ~= "param" and name ~= "return" and name ~= "see" then
          e.problems[#e.problems + 1] = "unknown tag @" .. name
        else
          tag, lines = name, { rest }
        end
      elseif tag == "fn" or tag == "rows" then -- one line each: the text after is the prose
        finish()
        prose[#prose + 1] = l
      elseif tag then
        lines[#lines + 1] = l
      else
        prose[#prose + 1] = l
      end
    end
  end
  if in_code then e.problems[#e.problems + 1] = "@code without @endcode" end
  finish()
  local text = table.concat(prose, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
  local paragraph = text:match("^(.-)\n%s*\n") or text
  local summary = paragraph:match("^(.-%.)%s") or paragraph
  e.summary = summary:gsub("%s+", " ")
  e.description = text:sub(#summary + 1):gsub("^%s+", "")
  if e.description == "" then e.description = nil end
  if #e.fns == 0 then e.problems[#e.problems + 1] = "no @fn" end
  if e.summary == "" then e.problems[#e.problems + 1] = "no summary" end
  if not e.code then e.problems[#e.problems + 1] = "no @code example" end
  e.names = {}
  for _, fn in ipairs(e.fns) do
    local n = declared_name(fn)
    if not n then e.problems[#e.problems + 1] = "@fn without a declaration: " .. fn end
    e.names[#e.names + 1] = n
  end
  e.name = e.names[1] or "?"
  if e.rows then e.name = e.name .. " (" .. e.rows .. ")" end -- families share forms across macros
  return e
end

--- cdoc.parse(text, file) -> the entries of one .dox text: each /** ... */ block
function cdoc.parse(text, file)
  local entries = {}
  for start, body in text:gmatch("()/%*%*(.-)%*/") do
    local line = select(2, text:sub(1, start):gsub("\n", "")) + 1
    entries[#entries + 1] = parse_block(body, file, line)
  end
  return entries
end

--- cdoc.files(root) -> the .dox files' stems, sorted
function cdoc.files(root)
  local out = {}
  for _, f in ipairs(list(root .. "/" .. cdoc.DOC_FOLDER, "%.dox$")) do out[#out + 1] = f:sub(1, -5) end
  return out
end

--- cdoc.entries(root) -> every entry, and name -> entry (a family's names expanded by its rows)
function cdoc.entries(root)
  local all, by_name = {}, {}
  local rows = cdoc.op_rows(root)
  for _, stem in ipairs(cdoc.files(root)) do
    for _, e in ipairs(cdoc.parse(read(root .. "/" .. cdoc.DOC_FOLDER .. "/" .. stem .. ".dox"), stem)) do
      e.page = stem
      all[#all + 1] = e
      for _, n in ipairs(e.names) do
        if n:find("<name>", 1, true) then
          local macros = {}
          for m in (e.rows or ""):gmatch("[%u_]+") do macros[#macros + 1] = m end
          if #macros == 0 then
            e.problems[#e.problems + 1] = "a family (" .. n .. ") needs @rows naming macros of ops.def"
          end
          for _, m in ipairs(macros) do
            if not rows[m] then e.problems[#e.problems + 1] = "@rows " .. m .. ": no such rows in ops.def" end
            for _, row in ipairs(rows[m] or {}) do
              local expanded = n:gsub("<name>", row)
              by_name[expanded] = by_name[expanded] or e
            end
          end
        else
          by_name[n] = by_name[n] or e
        end
      end
    end
  end
  return all, by_name
end

--- cdoc.op_rows(root) -> macro -> the op names of its rows in engine/include/tlua/ops.def
function cdoc.op_rows(root)
  local rows = {}
  for macro, name in (read(root .. "/engine/include/tlua/ops.def") or ""):gmatch("\n([%u_]+)%(([%w_]+)[,)]") do
    rows[macro] = rows[macro] or {}
    table.insert(rows[macro], name)
  end
  return rows
end

--- cdoc.includes(root) -> "#include <tlua/x.h>" for every public header
function cdoc.includes(root)
  local out = {}
  for _, dir in ipairs(cdoc.HEADERS) do
    for _, h in ipairs(list(root .. "/" .. dir, "%.h$")) do out[#out + 1] = "#include <tlua/" .. h .. ">\n" end
  end
  return table.concat(out)
end

--- cdoc.declared(root) -> the sorted names of the functions the public headers declare (after
-- the preprocessor: the generated families included), and whether each is written out literally
function cdoc.declared(root)
  local src = os.tmpname() .. ".c"
  local f = assert(io.open(src, "w"))
  f:write(cdoc.includes(root))
  f:close()
  local cmd = string.format("cc -E -P -I'%s/engine/include' -I'%s/bindings/lua/embed/include' '%s'", root, root, src)
  local p = assert(io.popen(cmd))
  local text = p:read("a")
  p:close()
  os.remove(src)
  local literal = ""
  for _, dir in ipairs(cdoc.HEADERS) do
    for _, h in ipairs(list(root .. "/" .. dir, "%.h$")) do literal = literal .. read(root .. "/" .. dir .. "/" .. h) end
  end
  local seen, names = {}, {}
  -- a declaration: "name(" not preceded by "(*" (a function pointer type) nor by "." or "->"
  -- a declaration "name(" (not "tl_status (*pointer)(": a function pointer type's return type)
  for _, name, after in text:gmatch("([%w_%*%s])(tl_[%w_]+)%s*%(%s*(.)") do
    if after == "*" then goto continue end
    if not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
    ::continue::
  end
  for pointer in text:gmatch("%(%s*%*%s*(tl_[%w_]+)%s*%)") do seen[pointer] = "pointer" end
  local out = {}
  for _, n in ipairs(names) do
    if seen[n] ~= "pointer" then out[#out + 1] = n end
  end
  table.sort(out)
  local is_literal = {}
  for _, n in ipairs(out) do is_literal[n] = literal:find(n .. "%s*%(") ~= nil end
  return out, is_literal
end

--- cdoc.coverage(root) -> the declared functions without an entry, the entries' functions that
-- are not declared ("page.dox: name"), the entries' problems, the number of functions declared,
-- and the entries
function cdoc.coverage(root)
  local entries, by_name = cdoc.entries(root)
  local declared = cdoc.declared(root)
  local is_declared, missing, unknown, problems = {}, {}, {}, {}
  for _, n in ipairs(declared) do
    is_declared[n] = true
    if not by_name[n] then missing[#missing + 1] = n end
  end
  for _, e in ipairs(entries) do
    for _, n in ipairs(e.names) do
      if not n:find("<name>", 1, true) and not is_declared[n] then unknown[#unknown + 1] = e.page .. ".dox: " .. n end
    end
    for _, p in ipairs(e.problems) do problems[#problems + 1] = string.format("%s.dox:%d: %s: %s", e.page, e.line, e.name, p) end
  end
  return missing, unknown, problems, #declared, entries
end

--- cdoc.program(root, entries) -> a C program running every entry's example (each the body of a
-- function returning int: 0 passes), printing "FAIL name" for the others
function cdoc.program(root, entries)
  local out = { "#include <math.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>",
    cdoc.includes(root) }
  local calls = {}
  for i, e in ipairs(entries) do
    if e.code then
      out[#out + 1] = string.format("/* %s (%s.dox:%d) */", e.name, e.page or "?", e.line)
      out[#out + 1] = string.format("static int example_%d(void) {", i)
      out[#out + 1] = string.format('#line 1 "%s.dox:%d %s"', e.page or "?", e.line, e.name)
      out[#out + 1] = e.code
      out[#out + 1] = "    return 0;"
      out[#out + 1] = "}"
      calls[#calls + 1] = string.format('    if (example_%d() != 0) { printf("FAIL %s: %%s\\n", tl_last_error()); failed++; }', i,
        e.name:gsub("%%", "%%%%"))
    end
  end
  out[#out + 1] = "int main(void) {"
  out[#out + 1] = "    int failed = 0;"
  for _, c in ipairs(calls) do out[#out + 1] = c end
  out[#out + 1] = '    printf("%d failed\\n", failed);'
  out[#out + 1] = "    return failed != 0;"
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

--- cdoc.run_examples(root, build, entries) -> true, or false and what failed (compile or run)
function cdoc.run_examples(root, build, entries)
  local base = os.tmpname()
  local src, exe, log = base .. ".c", base .. ".exe", base .. ".log"
  local f = assert(io.open(src, "w"))
  f:write(cdoc.program(root, entries))
  f:close()
  local compile = string.format("cc -std=c11 -Wall -Wextra -Wno-unused-variable -Wno-unused-but-set-variable -I'%s/engine/include' "
    .. "-I'%s/bindings/lua/embed/include' '%s' -o '%s' -L'%s' -ltlua_embed -ltlua -Wl,-rpath,'%s' -lm > '%s' 2>&1",
    root, root, src, exe, build, build, log)
  local ok = os.execute(compile)
  local compiled = read(log) or ""
  if not ok then
    os.remove(src) os.remove(log)
    return false, "the examples do not compile:\n" .. compiled
  end
  local dir = base .. ".d"
  os.execute("mkdir -p '" .. dir .. "'")
  -- a sanitizer build's library needs its runtimes loaded first (scripts/test --sanitize names
  -- them in TLUA_ASAN_PRELOAD)
  local preload = os.getenv("TLUA_ASAN_PRELOAD")
  local prefix = preload and ("LD_PRELOAD='" .. preload .. "' ASAN_OPTIONS=detect_leaks=0 ") or ""
  ok = os.execute("cd '" .. dir .. "' && " .. prefix .. "'" .. exe .. "' > '" .. log .. "' 2>&1")
  os.execute("rm -rf '" .. dir .. "'")
  local ran = read(log) or ""
  os.remove(src) os.remove(exe) os.remove(log)
  if not ok then return false, ran end
  return true, compiled .. ran
end

return cdoc
