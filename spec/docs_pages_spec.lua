-- The pages docs/tutorial.md and docs/torch.md run as written: every ```lua block runs under the
-- tlua executable (TLUA_BIN, or build/tlua) in a fresh temporary directory. The tutorial's blocks
-- run in order in one process and one environment (later blocks use the globals of earlier ones;
-- after a failure the rest are not run); each block of torch.md runs in a process of its own. A
-- block whose first line is `-- needs: cuda` is pending without a usable GPU
-- (tl.cuda.is_available()), one with `-- needs: fashion-mnist` without the dataset's files.
-- Other fences (```python, ```text, ```sh) are not run. A failure names the page, the block's
-- line and first line, and the error (its line numbers are the page's).
local files = require("helpers.files")
local sh_quote, write_file, read_file, BIN, ROOT = files.sh_quote, files.write_file, files.read_file, files.BIN,
  files.ROOT

local PAGES = { tutorial = "docs/tutorial.md", torch = "docs/torch.md" }

-- the ```lua blocks of a page: a list of {line = the line of its first code line, code, first
-- (its first non-blank line), needs (the word after `-- needs:` on that line, or nil)}
local function lua_blocks(text)
  local blocks, current, in_other = {}, nil, false
  local n = 0
  for line in (text:gsub("\r\n", "\n") .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if current then
      if line:match("^%s*```%s*$") then
        current.code = table.concat(current.lines, "\n") .. "\n"
        current.lines = nil
        blocks[#blocks + 1] = current
        current = nil
      else
        current.lines[#current.lines + 1] = line
        if not current.first and line:match("%S") then current.first = line:match("^%s*(.-)%s*$") end
      end
    elseif in_other then
      if line:match("^%s*```%s*$") then in_other = false end
    elseif line:match("^%s*```%s*lua%s*$") then
      current = { line = n + 1, lines = {} }
    elseif line:match("^%s*```") then
      in_other = true
    end
  end
  assert(current == nil and not in_other, "a code fence is not closed")
  for _, b in ipairs(blocks) do
    b.first = b.first or "(an empty block)"
    b.needs = b.first:match("^%-%-%s*needs:%s*([%w%-_]+)")
  end
  return blocks
end

-- runs blocks in the tlua process: arg[1] the blocks (a Lua file returning the list), arg[2] the
-- report (statements R[i] = {status = "ok" | "fail" | "pending" | "skipped", message = ...},
-- written and flushed block by block, so a crash leaves the results before it)
local DRIVER = [=[
local blocks = dofile(arg[1])
local report = assert(io.open(arg[2], "w"))
local env = setmetatable({}, { __index = _G })
local function have(need)
  if need == "cuda" then return tl.cuda.is_available() end
  if need == "fashion-mnist" then
    local f = io.open(tl.data.FASHION_MNIST_ROOT .. "/t10k-images-idx3-ubyte.gz", "rb")
    if f then f:close() end
    return f ~= nil
  end
  error("unknown need '" .. need .. "' (known: cuda, fashion-mnist)", 0)
end
local failed = false
for i, b in ipairs(blocks) do
  local status, message = "ok", ""
  if failed then
    status, message = "skipped", "not run: an earlier block failed"
  else
    local ok, present = true, true
    if b.needs then ok, present = pcall(have, b.needs) end
    if not ok then
      status, message = "fail", present
    elseif not present then
      status, message = "pending", "needs " .. b.needs
    else
      -- the page's line numbers in errors: the chunk starts with as many newlines
      local chunk, err = load(string.rep("\n", b.line - 1) .. b.code, "@" .. b.page, "t", env)
      if not chunk then
        status, message = "fail", err
      else
        local done, run_err = xpcall(chunk, debug.traceback)
        -- the traceback down to the block's own frames (not the driver's)
        if not done then
          status, message = "fail", (tostring(run_err):gsub("\n\t%[C%]: in function 'xpcall'.*$", ""))
        end
      end
    end
    failed = status == "fail"
  end
  report:write(string.format("R[%d] = { status = %q, message = %q }\n", i, status, message))
  report:flush()
end
report:close()
]=]

-- runs blocks (a list of lua_blocks entries of page) in one tlua process in a fresh directory;
-- returns a result {status, message} per block
local function run_blocks(page, blocks)
  local tmp = files.make_temp_dir()
  local list = {}
  for i, b in ipairs(blocks) do
    list[i] = string.format("{ page = %q, line = %d, code = %q, needs = %s }", page, b.line, b.code,
      b.needs and string.format("%q", b.needs) or "nil")
  end
  write_file(tmp .. "/blocks.lua", "return {\n" .. table.concat(list, ",\n") .. "\n}\n")
  write_file(tmp .. "/driver.lua", DRIVER)
  local cmd = "cd " .. sh_quote(tmp) .. " && " .. sh_quote(BIN) .. " driver.lua blocks.lua report.lua"
    .. " < /dev/null > stdout.txt 2> stderr.txt"
  local ok, how, code = os.execute(cmd)
  local results = {}
  local report = read_file(tmp .. "/report.lua")
  if report then
    local env = { R = results }
    assert(load(report, "=report", "t", env))()
  end
  if not (ok == true) then
    local stderr = read_file(tmp .. "/stderr.txt") or ""
    local why = string.format("the tlua process ended by %s %s: %s", tostring(how), tostring(code), stderr)
    for i = 1, #blocks do
      if not results[i] then results[i] = { status = "fail", message = why } end
    end
  end
  files.remove_dir(tmp)
  return results
end

local function check(page, block, result)
  assert(result, "no result for the block")
  if result.status == "pending" then
    pending(result.message)
  elseif result.status == "skipped" then
    pending(result.message)
  elseif result.status ~= "ok" then
    error(string.format("%s:%d: the block beginning `%s` failed:\n%s", page, block.line, block.first,
      result.message), 0)
  end
end

local function page_blocks(page)
  local text = read_file(ROOT .. "/" .. page)
  assert(text, "cannot read " .. page)
  return lua_blocks(text)
end

describe("docs/tutorial.md", function()
  local page = PAGES.tutorial
  local blocks = page_blocks(page)
  local results -- run once, on the first block's test

  it("has lua blocks, and the executable exists (" .. BIN .. ")", function()
    assert.is_true(#blocks >= 10, "only " .. #blocks .. " lua blocks")
    assert.is_true(os.execute("test -x " .. sh_quote(BIN)) == true, BIN .. " is not an executable file")
  end)

  for i, block in ipairs(blocks) do
    it(string.format("block %d (line %d) runs: %s", i, block.line, block.first), function()
      results = results or run_blocks(page, blocks)
      check(page, block, results[i])
    end)
  end
end)

describe("docs/torch.md", function()
  local page = PAGES.torch
  local blocks = page_blocks(page)

  it("has lua blocks", function()
    assert.is_true(#blocks >= 10, "only " .. #blocks .. " lua blocks")
  end)

  for i, block in ipairs(blocks) do
    it(string.format("block %d (line %d) runs on its own: %s", i, block.line, block.first), function()
      check(page, block, run_blocks(page, { block })[1])
    end)
  end
end)

describe("the block extraction", function()
  it("takes ```lua fences only, with their lines and needs", function()
    local text = table.concat({
      "# a page",
      "```lua",
      "x = 1",
      "```",
      "```python",
      "x = torch.ones(2)",
      "```",
      "```text",
      "> ?tl.cat",
      "```",
      "```lua",
      "",
      "-- needs: cuda",
      "y = tl.ones(2, { device = 'cuda' })",
      "```",
    }, "\n")
    local blocks = lua_blocks(text)
    assert.equal(2, #blocks)
    assert.equal(3, blocks[1].line)
    assert.equal("x = 1\n", blocks[1].code)
    assert.is_nil(blocks[1].needs)
    assert.equal(12, blocks[2].line)
    assert.equal("cuda", blocks[2].needs)
    assert.equal("-- needs: cuda", blocks[2].first)
  end)

  it("reports a failing block with the page's line of the error", function()
    local page = "text\n```lua\nlocal a = 1\nerror('boom')\n```\n```lua\nprint(2)\n```\n"
    local results = run_blocks("docs/example.md", lua_blocks(page))
    assert.equal("fail", results[1].status)
    assert.truthy(results[1].message:find("docs/example.md:4: boom", 1, true), results[1].message)
    assert.equal("skipped", results[2].status)
  end)
end)
