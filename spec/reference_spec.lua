-- The API reference (tlua/doc/*.luadoc through tlua.doc): every public name has an entry,
-- every entry names something that exists, every example runs; help() and `?name` print
-- entries; scripts/docgen.lua writes the Markdown and HTML pages.
local tl = require("tlua")
local doc = require("tlua.doc")
local help = require("tlua.help")
local files = require("helpers.files")
local sh_quote, BIN, ROOT = files.sh_quote, files.BIN, files.ROOT

local function luadoc_files()
  local found = {}
  local p = assert(io.popen("ls -1 " .. sh_quote(doc.folder())))
  for f in p:lines() do
    local stem = f:match("^(.*)%.luadoc$")
    if stem then found[#found + 1] = stem end
  end
  p:close()
  table.sort(found)
  return found
end

describe("the reference's files", function()
  it("doc.files lists exactly the .luadoc files of tlua/doc/", function()
    local listed = { table.unpack(doc.files) }
    table.sort(listed)
    assert.same(luadoc_files(), listed)
  end)

  it("each file starts with a comment saying what it documents, and its entries are well formed", function()
    local problems = {}
    for _, stem in ipairs(doc.files) do
      local path = doc.folder() .. "/" .. stem .. ".luadoc"
      local text = assert(files.read_file(path))
      if not text:match("^%-%- [^\n]+\n") then problems[#problems + 1] = stem .. ": no first comment" end
      local lines = select(2, text:gsub("\n", ""))
      if lines > 800 then problems[#problems + 1] = stem .. ": " .. lines .. " lines (at most 800)" end
      for _, e in ipairs(doc.parse(text, stem)) do
        for _, p in ipairs(e.problems) do problems[#problems + 1] = stem .. ":" .. e.line .. ": " .. p end
        if not e.usage then problems[#problems + 1] = stem .. ":" .. e.line .. ": " .. tostring(e.name) .. " has no example" end
      end
    end
    assert.same({}, problems)
  end)

  it("the parser reads names, parameters with defaults, options, results, errors and the example", function()
    local e = doc.parse(table.concat({
      "-- a comment, not an entry",
      "--- Adds things. More about it",
      "-- on two lines.",
      "-- @function tl.thing",
      "-- @also tl.thing_ tl.Tensor:thing",
      "-- @tparam Tensor x the input",
      "-- @tparam[opt=1] integer dim the dim",
      "-- @tparam[opt] table opts options:",
      "-- @tparam[opt=true] boolean opts.bias a bias",
      "-- @treturn Tensor the sum",
      "-- @raise `thing: bad x`",
      "-- @see tl.add, tl.sub",
      "-- @usage",
      "-- local y = 1",
      "--   assert(y == 1)",
      "local code_after = true",
    }, "\n"), "x")
    assert.equal(1, #e)
    e = e[1]
    assert.same({}, e.problems)
    assert.equal("tl.thing", e.name)
    assert.same({ "tl.thing_", "tl.Tensor:thing" }, e.also)
    assert.equal("Adds things.", e.summary)
    assert.equal("More about it\non two lines.", e.description)
    assert.same({ name = "dim", type = "integer", optional = true, default = "1", text = "the dim" }, e.params[2])
    assert.same({ name = "opts.bias", type = "boolean", optional = true, default = "true", text = "a bias" }, e.params[4])
    assert.same({ { type = "Tensor", text = "the sum" } }, e.returns)
    assert.same({ "`thing: bad x`" }, e.raises)
    assert.same({ "tl.add", "tl.sub" }, e.see)
    assert.equal("local y = 1\n  assert(y == 1)", e.usage)
    assert.equal("tl.thing(x, dim?, opts?)", doc.call_line(e))
    local bad = doc.parse("--- No name.\n-- @bogus x\n", "x")[1]
    assert.same({ "unknown tag @bogus", "no @function or @module" }, bad.problems)
  end)
end)

describe("the reference's coverage", function()
  local list = doc.entries()
  local names = doc.public_names()

  it("finds the public names: tl, its submodules, Tensor methods, class methods, tlua.cli", function()
    local set = {}
    for _, n in ipairs(names) do set[n] = true end
    for _, n in ipairs({ "tl.cat", "tl.Tensor:view", "tl.nn.Linear", "tl.nn.Module:parameters",
                         "tl.nn.functional.relu", "tl.optim.AdamW", "tl.data.DataLoader", "tl.autograd.grad",
                         "tl.distributed.init", "tl.cuda.is_available", "tlua.cli.parse", "tl.nn.init.xavier_uniform_" }) do
      assert.is_true(set[n], n)
    end
    assert.is_nil(set["tl._private"])
  end)

  it("every public name has an entry (its own, an @also, or its class's method of the same name)", function()
    local missing = doc.coverage()
    assert.same({}, missing)
  end)

  it("finds a public name added without an entry, and a class method without one", function()
    local Probe = tl.nn.Module:extend("ProbeForTheReference")
    function Probe:undocumented_probe() end
    rawset(tl, "undocumented_probe", function() end)
    rawset(tl.nn, "ProbeForTheReference", Probe)
    local missing = doc.coverage()
    rawset(tl, "undocumented_probe", nil)
    rawset(tl.nn, "ProbeForTheReference", nil)
    local set = {}
    for _, n in ipairs(missing) do set[n] = true end
    assert.is_true(set["tl.undocumented_probe"])
    assert.is_true(set["tl.nn.ProbeForTheReference"])
    assert.is_true(set["tl.nn.ProbeForTheReference:undocumented_probe"])
  end)

  it("every entry names something that exists", function()
    local _, unknown = doc.coverage()
    assert.same({}, unknown)
  end)

  it("one entry per name", function()
    local seen, twice = {}, {}
    for _, e in ipairs(list) do
      for _, n in ipairs({ e.name, table.unpack(e.also) }) do
        if seen[n] then twice[#twice + 1] = n .. " in " .. seen[n] .. " and " .. e.page end
        seen[n] = e.page
      end
    end
    assert.same({}, twice)
  end)
end)

describe("the reference's examples", function()
  local list = doc.entries()
  local pages = {}
  for _, e in ipairs(list) do
    if not pages[e.page] then pages[#pages + 1] = e.page pages[e.page] = {} end
    table.insert(pages[e.page], e)
  end
  for _, page in ipairs(pages) do
    it("run: " .. page, function()
      local failed = {}
      for _, e in ipairs(pages[page]) do
        local needs = e.usage and e.usage:match("^%-%-%s*needs:%s*(%S+)")
        if e.usage and not (needs == "cuda" and not tl.cuda.is_available()) then
          local env = setmetatable({ tl = tl }, { __index = _G })
          local chunk, err = load(e.usage, "=" .. e.name, "t", env)
          local ok, run_err = false, err
          if chunk then ok, run_err = pcall(chunk) end
          tl.set_grad_enabled(true)
          if not ok then failed[#failed + 1] = e.name .. ": " .. tostring(run_err) end
        end
      end
      assert.same({}, failed)
    end)
  end

  it("examples that need a GPU #cuda", function()
    if not tl.cuda.is_available() then
      pending("no CUDA device: the reference's GPU examples did not run")
      return
    end
    local count = 0
    for _, e in ipairs(list) do
      if e.usage and e.usage:match("^%-%-%s*needs:%s*cuda") then count = count + 1 end
    end
    assert.is_true(count > 0)
  end)
end)

describe("help", function()
  it("help(fn) and help(name) print the entry: call, summary, arguments, example", function()
    local by_value = help.text(tl.cat)
    assert.equal(by_value, help.text("tl.cat"))
    assert.equal(by_value, help.text("cat"))
    assert.truthy(by_value:find("^tl%.cat%("), by_value)
    assert.truthy(by_value:find("Example:", 1, true), by_value)
    local conv = help.text("nn.Conv2d")
    assert.equal(conv, help.text(tl.nn.Conv2d))
    assert.truthy(conv:find("tl.nn.Conv2d", 1, true), conv)
    assert.truthy(conv:find("kernel_size", 1, true), conv)
    assert.truthy(help.text("Tensor:view"):find("tl.Tensor:view", 1, true))
    assert.equal(help.text(tl.Tensor.add), help.text("tl.add")) -- a method documented by tl.add's entry
  end)

  it("help() says where to start; an unknown name gives the closest ones", function()
    local start = help.text()
    assert.truthy(start:find("help(tl.cat)", 1, true), start)
    assert.truthy(start:find("docs/tutorial.md", 1, true), start)
    local near = help.text("nn.Lineer")
    assert.truthy(near:find('^help: no entry for "nn.Lineer" %(did you mean nn%.Linear'), near)
    assert.equal("help: no entry for this table", help.text({}))
  end)

  it("the tlua executable has help and ?name at its prompt", function()
    local out = os.tmpname()
    local cmd = "printf '%s\\n' '?tl.cat' 'help(\"nn.Conv2d\")' '? optim.AdamW' | " .. sh_quote(BIN) .. " -i > " .. sh_quote(out) .. " 2>&1"
    assert.is_true(os.execute(cmd))
    local text = assert(files.read_file(out))
    os.remove(out)
    assert.truthy(text:find(help.text("tl.cat"), 1, true), text)
    assert.truthy(text:find(help.text("nn.Conv2d"), 1, true), text)
    assert.truthy(text:find(help.text("optim.AdamW"), 1, true), text)
  end)
end)

describe("scripts/docgen.lua", function()
  it("writes a Markdown and an HTML page per file and an index of every name", function()
    local dir = os.tmpname()
    os.remove(dir)
    local log = dir .. ".log"
    local ok = os.execute(sh_quote(BIN) .. " " .. sh_quote(ROOT .. "/scripts/docgen.lua") .. " --out " .. sh_quote(dir)
      .. " > " .. sh_quote(log) .. " 2>&1")
    assert.is_true(ok, files.read_file(log))
    os.remove(log)
    local index = assert(files.read_file(dir .. "/reference/README.md"))
    local html = assert(files.read_file(dir .. "/html/index.html"))
    for _, e in ipairs((doc.entries())) do
      assert.truthy(index:find("[`" .. e.name .. "`]", 1, true), e.name)
      assert.truthy(html:find("<code>" .. e.name:gsub("&", "&amp;"):gsub("<", "&lt;") .. "</code>", 1, true), e.name)
    end
    -- the Markdown in the repository (docs/reference/, read on the repository's pages) is what
    -- scripts/docs makes now: run it after changing an entry
    local listing = assert(io.popen("ls -1 " .. sh_quote(dir .. "/reference") .. " " .. sh_quote(ROOT .. "/docs/reference")))
    local made, kept = {}, {}
    local current = made
    for line in listing:lines() do
      if line:match(":$") then current = line:find(ROOT, 1, true) and kept or made
      elseif line:match("%.md$") then current[#current + 1] = line end
    end
    listing:close()
    assert.same(made, kept)
    local stale = {}
    for _, name in ipairs(made) do
      if files.read_file(dir .. "/reference/" .. name) ~= files.read_file(ROOT .. "/docs/reference/" .. name) then
        stale[#stale + 1] = name
      end
    end
    assert.same({}, stale, "docs/reference is not what scripts/docs makes now: run scripts/docs")
    for _, stem in ipairs(doc.files) do
      local md = assert(files.read_file(dir .. "/reference/" .. stem .. ".md"), stem)
      assert.truthy(md:find("^# "), stem)
      local page = assert(files.read_file(dir .. "/html/" .. stem .. ".html"), stem)
      assert.truthy(page:find("^<!doctype html>"), stem)
    end
    os.execute("rm -rf " .. sh_quote(dir))
  end)
end)
