-- scripts/docgen.lua: the API reference from tlua/doc/*.luadoc (through tlua.doc) as Markdown
-- (docs/reference/) and HTML (docs/html/); --check its coverage of the public names; --run
-- FILE... the examples of some files. Run by scripts/docs with the build's tlua.
--
--   tlua scripts/docgen.lua [--out DIR]     writes DIR/reference/*.md and DIR/html/*.html (docs)
--   tlua scripts/docgen.lua --check         names without an entry, entries naming nothing
--   tlua scripts/docgen.lua --run FILE...   parses the .luadoc files and runs their examples
-- (lua5.4 works too: the repo's modules and build-rel's tlua.core are then put on the paths)
local ROOT = (arg and arg[0] or ""):match("^(.*)/scripts/[^/]*$") or "."

if not rawget(_G, "tl") then
  local build = os.getenv("TLUA_BUILD") or (ROOT .. "/build-rel")
  package.path = ROOT .. "/bindings/lua/?.lua;" .. ROOT .. "/bindings/lua/?/init.lua;" .. package.path
  package.cpath = build .. "/lua/?.so;" .. package.cpath
  tl = require("tlua")
end
local doc = require("tlua.doc")

local function fail(message)
  io.stderr:write("docgen: ", message, "\n")
  os.exit(1)
end

-- ---- examples ---------------------------------------------------------------------------------

--- runs one entry's example in an environment of its own (tl and the globals); true or false, why
local function run_example(entry)
  if not entry.usage then return true end
  local needs = entry.usage:match("^%-%-%s*needs:%s*(%S+)")
  if needs == "cuda" and not tl.cuda.is_available() then return true, "pending: needs cuda" end
  local env = setmetatable({ tl = tl }, { __index = _G })
  local chunk, err = load(entry.usage, "=" .. entry.name .. " (example)", "t", env)
  if not chunk then return false, err end
  local ok, run_err = xpcall(chunk, debug.traceback)
  tl.set_grad_enabled(true)
  return ok, run_err
end

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then fail(err) end
  local text = f:read("a")
  f:close()
  return text
end

local function run_files(files)
  local failed, count, pending = 0, 0, 0
  for _, path in ipairs(files) do
    local entries = doc.parse(read(path), path)
    if not read(path):match("^%-%- [^\n]+\n") then
      print(path .. ":1: the first line is a comment saying what the file documents")
      failed = failed + 1
    end
    for _, e in ipairs(entries) do
      count = count + 1
      for _, p in ipairs(e.problems) do
        print(string.format("%s:%d: %s: %s", path, e.line, e.name or "?", p))
        failed = failed + 1
      end
      if e.name then
        for _, n in ipairs({ e.name, table.unpack(e.also) }) do
          local value, why = doc.resolve(n)
          if value == nil then
            print(string.format("%s:%d: %s names nothing (%s)", path, e.line, n, why))
            failed = failed + 1
          end
        end
      end
      if not e.usage then
        print(string.format("%s:%d: %s has no @usage example", path, e.line, e.name or "?"))
        failed = failed + 1
      end
      local ok, why = run_example(e)
      if not ok then
        print(string.format("%s:%d: %s: the example failed: %s", path, e.line, e.name or "?", why))
        failed = failed + 1
      elseif why then
        pending = pending + 1
      end
    end
  end
  print(string.format("%d entries, %d problems, %d examples pending", count, failed, pending))
  return failed == 0
end

-- ---- coverage --------------------------------------------------------------------------------

-- ---- Markdown and HTML -------------------------------------------------------------------------

-- GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped
local function anchor(text)
  return (text:lower():gsub("[^%w%-_ ]", ""):gsub(" ", "-"))
end

local function page_title(stem)
  local first = read(doc.folder() .. "/" .. stem .. ".luadoc"):match("^%-%-%s*([^\n]+)")
  return (first or stem):gsub("^Reference entries of ", ""):gsub("%.$", "")
end

local function markdown_entry(e, out)
  out[#out + 1] = "## " .. e.name
  out[#out + 1] = ""
  out[#out + 1] = "`" .. doc.call_line(e) .. "`"
  out[#out + 1] = ""
  out[#out + 1] = e.summary
  if e.description then out[#out + 1] = "" out[#out + 1] = e.description end
  out[#out + 1] = ""
  if #e.also > 0 then
    local also = {}
    for i, n in ipairs(e.also) do also[i] = "`" .. n .. "`" end
    out[#out + 1] = "Also: " .. table.concat(also, ", ")
    out[#out + 1] = ""
  end
  if #e.params > 0 then
    out[#out + 1] = "| argument | type | default | |"
    out[#out + 1] = "|---|---|---|---|"
    for _, p in ipairs(e.params) do
      local default = p.default and ("`" .. p.default .. "`") or (p.optional and "optional" or "")
      local function cell(text) return (text:gsub("|", "\\|")) end
      out[#out + 1] = string.format("| `%s` | %s | %s | %s |", p.name, p.type and ("`" .. cell(p.type) .. "`") or "",
        cell(default), cell(p.text or ""))
    end
    out[#out + 1] = ""
  end
  if e.input then out[#out + 1] = "Input: `" .. e.input .. "`  " end
  if e.output then out[#out + 1] = "Output: `" .. e.output .. "`" end
  if e.input or e.output then out[#out + 1] = "" end
  for _, r in ipairs(e.returns) do
    out[#out + 1] = "Returns " .. (r.type and ("`" .. r.type .. "`: ") or "") .. r.text .. "  "
  end
  if #e.returns > 0 then out[#out + 1] = "" end
  for _, r in ipairs(e.raises) do out[#out + 1] = "- Error: " .. r end
  if #e.raises > 0 then out[#out + 1] = "" end
  if #e.see > 0 then
    local see = {}
    for i, n in ipairs(e.see) do see[i] = "`" .. n .. "`" end
    out[#out + 1] = "See also " .. table.concat(see, ", ") .. "."
    out[#out + 1] = ""
  end
  if e.usage then
    out[#out + 1] = "```lua"
    out[#out + 1] = e.usage
    out[#out + 1] = "```"
    out[#out + 1] = ""
  end
end

local function escape(s)
  return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

-- inline Markdown of the entries' prose: `code` and **bold**
local function inline(s)
  return (escape(s):gsub("`([^`]+)`", "<code>%1</code>"):gsub("%*%*(.-)%*%*", "<b>%1</b>"))
end

-- prose: paragraphs, "- " lists, and tables or indented lines kept as they are
local function html_prose(text, out)
  for paragraph in (text .. "\n\n"):gmatch("(.-)\n%s*\n") do
    if paragraph:match("^%s*|") or paragraph:match("^    ") then
      out[#out + 1] = "<pre>" .. escape(paragraph) .. "</pre>"
    elseif paragraph:match("^%s*%- ") then
      out[#out + 1] = "<ul>"
      for item in ("\n" .. paragraph):gmatch("\n%s*%- ([^\n]*)") do out[#out + 1] = "<li>" .. inline(item) .. "</li>" end
      out[#out + 1] = "</ul>"
    elseif paragraph:match("%S") then
      out[#out + 1] = "<p>" .. inline(paragraph) .. "</p>"
    end
  end
end

local function html_entry(e, out)
  out[#out + 1] = string.format('<h2 id="%s">%s</h2>', anchor(e.name), escape(e.name))
  out[#out + 1] = "<p><code>" .. escape(doc.call_line(e)) .. "</code></p>"
  html_prose(e.summary .. (e.description and ("\n\n" .. e.description) or ""), out)
  if #e.also > 0 then out[#out + 1] = "<p>Also: <code>" .. escape(table.concat(e.also, "</code>, <code>")) .. "</code></p>" end
  if #e.params > 0 then
    out[#out + 1] = "<table><tr><th>argument</th><th>type</th><th>default</th><th></th></tr>"
    for _, p in ipairs(e.params) do
      out[#out + 1] = string.format("<tr><td><code>%s</code></td><td><code>%s</code></td><td>%s</td><td>%s</td></tr>",
        escape(p.name), escape(p.type or ""), p.default and ("<code>" .. escape(p.default) .. "</code>") or (p.optional and "optional" or ""),
        inline(p.text or ""))
    end
    out[#out + 1] = "</table>"
  end
  if e.input then out[#out + 1] = "<p>Input: <code>" .. escape(e.input) .. "</code></p>" end
  if e.output then out[#out + 1] = "<p>Output: <code>" .. escape(e.output) .. "</code></p>" end
  for _, r in ipairs(e.returns) do
    out[#out + 1] = "<p>Returns " .. (r.type and ("<code>" .. escape(r.type) .. "</code>: ") or "") .. inline(r.text) .. "</p>"
  end
  if #e.raises > 0 then
    out[#out + 1] = "<ul>"
    for _, r in ipairs(e.raises) do out[#out + 1] = "<li>Error: " .. inline(r) .. "</li>" end
    out[#out + 1] = "</ul>"
  end
  if #e.see > 0 then out[#out + 1] = "<p>See also <code>" .. escape(table.concat(e.see, "</code>, <code>")) .. "</code>.</p>" end
  if e.usage then out[#out + 1] = '<pre class="example">' .. escape(e.usage) .. "</pre>" end
end

local STYLE = [[<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.4}
code,pre{font-family:monospace}pre{background:#f4f4f4;padding:.6em;overflow-x:auto}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
h2{border-top:1px solid #ddd;padding-top:.6em;font-family:monospace}</style>]]

local function write(path, text)
  local f, err = io.open(path, "wb")
  if not f then fail(err) end
  f:write(text)
  f:close()
end

-- ---- the C API (scripts/cdoc.lua) -------------------------------------------------------------

package.path = ROOT .. "/scripts/?.lua;" .. package.path
local cdoc = require("cdoc")

local function c_markdown(e, out)
  out[#out + 1] = "## " .. e.name
  out[#out + 1] = ""
  out[#out + 1] = "```c"
  for _, fn in ipairs(e.fns) do out[#out + 1] = fn .. ";" end
  out[#out + 1] = "```"
  if e.rows then out[#out + 1] = "" out[#out + 1] = "For every `" .. e.rows .. "` row of `ops.def` (`<name>`)." end
  out[#out + 1] = ""
  out[#out + 1] = e.summary
  if e.description then out[#out + 1] = "" out[#out + 1] = e.description end
  out[#out + 1] = ""
  for _, p in ipairs(e.params) do out[#out + 1] = string.format("- `%s`: %s", p.name or "?", p.text or "") end
  if #e.params > 0 then out[#out + 1] = "" end
  for _, r in ipairs(e.returns) do out[#out + 1] = "Returns " .. r .. "  " end
  if #e.returns > 0 then out[#out + 1] = "" end
  if #e.see > 0 then out[#out + 1] = "See also `" .. table.concat(e.see, "`, `") .. "`." out[#out + 1] = "" end
  if e.code then out[#out + 1] = "```c" out[#out + 1] = e.code out[#out + 1] = "```" out[#out + 1] = "" end
end

local function c_html(e, out)
  out[#out + 1] = string.format('<h2 id="%s">%s</h2>', anchor(e.name), escape(e.name))
  out[#out + 1] = "<pre>" .. escape(table.concat(e.fns, ";\n")) .. ";</pre>"
  if e.rows then out[#out + 1] = "<p>For every <code>" .. escape(e.rows) .. "</code> row of <code>ops.def</code>.</p>" end
  html_prose(e.summary .. (e.description and ("\n\n" .. e.description) or ""), out)
  if #e.params > 0 then
    out[#out + 1] = "<ul>"
    for _, p in ipairs(e.params) do out[#out + 1] = "<li><code>" .. escape(p.name or "?") .. "</code>: " .. inline(p.text or "") .. "</li>" end
    out[#out + 1] = "</ul>"
  end
  for _, r in ipairs(e.returns) do out[#out + 1] = "<p>Returns " .. inline(r) .. "</p>" end
  if #e.see > 0 then out[#out + 1] = "<p>See also <code>" .. escape(table.concat(e.see, "</code>, <code>")) .. "</code>.</p>" end
  if e.code then out[#out + 1] = '<pre class="example">' .. escape(e.code) .. "</pre>" end
end

--- the C pages: one per .dox file, and their part of the index
local function generate_c(out_dir, index_md, index_html, names)
  local entries = cdoc.entries(ROOT)
  local by_page = {}
  for _, e in ipairs(entries) do
    by_page[e.page] = by_page[e.page] or {}
    table.insert(by_page[e.page], e)
  end
  index_md[#index_md + 1] = ""
  index_md[#index_md + 1] = "## The C API (`tlua/tlua.h`, `tlua/embed.h`)"
  index_md[#index_md + 1] = ""
  index_html[#index_html + 1] = "</ul><h2>The C API</h2><ul>"
  for _, stem in ipairs(cdoc.files(ROOT)) do
    local list = by_page[stem] or {}
    local first = cdoc.read(ROOT .. "/" .. cdoc.DOC_FOLDER .. "/" .. stem .. ".dox"):match("^/%*%s*(.-)%s*%*/") or stem
    local title = first:gsub("^Reference entries of ", ""):gsub("%.$", "")
    local md = { "# " .. title, "", "Entries from `" .. cdoc.DOC_FOLDER .. "/" .. stem .. ".dox`. [All pages](README.md)", "" }
    local html = { "<!doctype html><meta charset=utf-8><title>" .. escape(title) .. "</title>" .. STYLE,
      "<h1>" .. escape(title) .. '</h1><p><a href="index.html">All pages</a></p>' }
    for _, e in ipairs(list) do
      c_markdown(e, md)
      c_html(e, html)
      names[#names + 1] = { e.name, "c_" .. stem, e.name }
    end
    write(out_dir .. "/reference/c_" .. stem .. ".md", table.concat(md, "\n") .. "\n")
    write(out_dir .. "/html/c_" .. stem .. ".html", table.concat(html, "\n") .. "\n")
    index_md[#index_md + 1] = string.format("- [%s](c_%s.md) (%d entries)", title, stem, #list)
    index_html[#index_html + 1] = string.format('<li><a href="c_%s.html">%s</a> (%d entries)</li>', stem, escape(title), #list)
  end
end

local function generate(out_dir)
  local list = doc.entries()
  local by_page = {}
  for _, e in ipairs(list) do
    by_page[e.page] = by_page[e.page] or {}
    table.insert(by_page[e.page], e)
  end
  assert(os.execute("mkdir -p '" .. out_dir .. "/reference' '" .. out_dir .. "/html'"))
  local index_md = { "# tlua API reference", "",
    "Generated by `scripts/docs` from `bindings/lua/tlua/doc/*.luadoc`; the same entries print in the REPL with",
    "`help(tl.cat)` or `?tl.cat`. Start with the [tutorial](../tutorial.md) and the notes",
    "[for PyTorch and Torch7 users](../torch.md).", "", "## Pages", "" }
  local index_html = { "<!doctype html><meta charset=utf-8><title>tlua API reference</title>" .. STYLE,
    "<h1>tlua API reference</h1><h2>Pages</h2><ul>" }
  local names = {}
  for _, stem in ipairs(doc.files) do
    local entries = by_page[stem]
    if entries then
      local title = page_title(stem)
      local md = { "# " .. title, "", "Entries from `bindings/lua/tlua/doc/" .. stem .. ".luadoc`. [All pages](README.md)", "" }
      local html = { "<!doctype html><meta charset=utf-8><title>" .. escape(title) .. "</title>" .. STYLE,
        "<h1>" .. escape(title) .. '</h1><p><a href="index.html">All pages</a></p>' }
      for _, e in ipairs(entries) do
        markdown_entry(e, md)
        html_entry(e, html)
        for _, n in ipairs({ e.name, table.unpack(e.also) }) do names[#names + 1] = { n, stem, e.name } end
      end
      write(out_dir .. "/reference/" .. stem .. ".md", table.concat(md, "\n") .. "\n")
      write(out_dir .. "/html/" .. stem .. ".html", table.concat(html, "\n") .. "\n")
      index_md[#index_md + 1] = string.format("- [%s](%s.md) (%d entries)", title, stem, #entries)
      index_html[#index_html + 1] = string.format('<li><a href="%s.html">%s</a> (%d entries)</li>', stem, escape(title), #entries)
    end
  end
  generate_c(out_dir, index_md, index_html, names)
  table.sort(names, function(a, b) return a[1] < b[1] end)
  index_md[#index_md + 1] = ""
  index_md[#index_md + 1] = "## Every name"
  index_md[#index_md + 1] = ""
  index_html[#index_html + 1] = "</ul><h2>Every name</h2><p>"
  for _, n in ipairs(names) do
    index_md[#index_md + 1] = string.format("[`%s`](%s.md#%s)  ", n[1], n[2], anchor(n[3]))
    index_html[#index_html + 1] = string.format('<a href="%s.html#%s"><code>%s</code></a><br>', n[2], anchor(n[3]), escape(n[1]))
  end
  index_html[#index_html + 1] = "</p>"
  write(out_dir .. "/reference/README.md", table.concat(index_md, "\n") .. "\n")
  write(out_dir .. "/html/index.html", table.concat(index_html, "\n") .. "\n")
  print(string.format("docgen: %d entries, %d names, into %s/reference and %s/html", #list, #names, out_dir, out_dir))
end

-- ---- main ----------------------------------------------------------------------------------

local args = { ... }
if args[1] == "--run" then
  table.remove(args, 1)
  if #args == 0 then fail("--run needs .luadoc files") end
  os.exit(run_files(args) and 0 or 1)
elseif args[1] == "--check-c" or args[1] == "--run-c" then
  local missing, unknown, problems, total, entries = cdoc.coverage(ROOT)
  for _, n in ipairs(missing) do print("no entry: " .. n) end
  for _, n in ipairs(unknown) do print("names nothing declared: " .. n) end
  for _, p in ipairs(problems) do print(p) end
  print(string.format("%d C functions, %d without an entry, %d entry names declaring nothing, %d problems", total,
    #missing, #unknown, #problems))
  local ok = #missing == 0 and #unknown == 0 and #problems == 0
  if args[1] == "--run-c" then
    local build = os.getenv("TLUA_BUILD") or (ROOT .. "/build-rel")
    local ran, report = cdoc.run_examples(ROOT, build, entries)
    print(report)
    ok = ran
  end
  os.exit(ok and 0 or 1)
elseif args[1] == "--check" then
  local missing, unknown, total = doc.coverage()
  for _, n in ipairs(missing) do print("no entry: " .. n) end
  for _, n in ipairs(unknown) do print("names nothing: " .. n) end
  print(string.format("%d public names, %d without an entry, %d entry names naming nothing", total, #missing, #unknown))
  os.exit((#missing == 0 and #unknown == 0) and 0 or 1)
else
  local out_dir = ROOT .. "/docs"
  if args[1] == "--out" then out_dir = args[2] or fail("--out needs a folder") end
  generate(out_dir)
end
