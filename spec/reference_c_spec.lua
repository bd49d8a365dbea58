-- The C API's reference (engine/include/tlua/doc/*.dox through scripts/cdoc.lua): every function
-- the public headers declare has an entry, every entry declares a function that exists, and
-- every example compiles against the headers, links against the library under test and runs.
local files = require("helpers.files")
local ROOT, BIN = files.ROOT, files.BIN

package.path = ROOT .. "/scripts/?.lua;" .. package.path
local cdoc = require("cdoc")
local BUILD = BIN:match("^(.*)/[^/]*$")

describe("the C API reference", function()
  local entries, by_name = cdoc.entries(ROOT)

  it("reads entries: the declaration, prose, parameters, a family's rows, the example", function()
    local e = cdoc.parse(table.concat({
      "/* a comment */",
      "/**",
      " * @fn tl_status tl_<name>(const tl_tensor *a, tl_tensor **out)",
      " * @fn tl_status tl_<name>_with(const tl_tensor *a, const double *numbers, tl_tensor **out)",
      " * Applies the op. More",
      " * about it.",
      " * @rows POINTWISE_OP",
      " * @param a the input",
      " * @return TL_OK or TL_ERR_DTYPE",
      " * @code",
      " *     if (1) return 0;",
      " * @endcode",
      " */",
    }, "\n"), "x")
    assert.equal(1, #e)
    e = e[1]
    assert.same({}, e.problems)
    assert.same({ "tl_<name>", "tl_<name>_with" }, e.names)
    assert.equal("Applies the op.", e.summary)
    assert.equal("More\nabout it.", e.description)
    assert.equal("POINTWISE_OP", e.rows)
    assert.same({ { name = "a", text = "the input" } }, e.params)
    assert.equal("    if (1) return 0;", e.code)
    local bad = cdoc.parse("/** No declaration.\n * @bogus\n */", "x")[1]
    assert.same({ "unknown tag @bogus", "no @fn", "no @code example" }, bad.problems)
  end)

  it("each .dox file starts with a comment saying what it documents, at most 800 lines, entries well formed", function()
    local problems = {}
    for _, stem in ipairs(cdoc.files(ROOT)) do
      local text = cdoc.read(ROOT .. "/" .. cdoc.DOC_FOLDER .. "/" .. stem .. ".dox")
      if not text:match("^/%* [^\n]+%*/\n") then problems[#problems + 1] = stem .. ": no first comment" end
      local lines = select(2, text:gsub("\n", ""))
      if lines > 800 then problems[#problems + 1] = stem .. ": " .. lines .. " lines" end
    end
    for _, e in ipairs(entries) do
      for _, p in ipairs(e.problems) do problems[#problems + 1] = e.page .. ":" .. e.line .. ": " .. e.name .. ": " .. p end
    end
    assert.same({}, problems)
  end)

  it("every function the public headers declare has an entry, and every entry's function is declared", function()
    local missing, unknown, _, declared = cdoc.coverage(ROOT)
    assert.is_true(declared > 1000, "found only " .. declared .. " declarations")
    assert.same({}, unknown)
    assert.same({}, missing)
  end)

  it("one entry per function (a family once per set of rows)", function()
    local seen, twice = {}, {}
    for _, e in ipairs(entries) do
      for _, n in ipairs(e.names) do
        local key = n:find("<name>", 1, true) and (n .. " " .. (e.rows or "")) or n
        if seen[key] then twice[#twice + 1] = key .. " in " .. seen[key] .. " and " .. e.page end
        seen[key] = e.page
      end
    end
    assert.same({}, twice)
  end)

  it("the examples compile against the headers, link against the library and run", function()
    local ok, report = cdoc.run_examples(ROOT, BUILD, entries)
    assert.is_true(ok, report)
    assert.truthy(report:find("\n?0 failed\n"), report)
  end)
end)
