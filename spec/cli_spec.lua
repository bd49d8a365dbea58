-- tlua.cli.parse, the options parser of the example scripts: values, forms, defaults, --help and each error (run in a child tlua, as it exits).
local files = require("helpers.files")

local SCRIPT = [[
local cli = require("tlua.cli")
local opts = cli.parse(arg, { program = "t.lua", usage = "usage: t.lua [options]",
  numeric = { steps = "integer", lr = "number", top_k = "integer" }, text = { device = true },
  flags = { data_parallel = true },
  defaults = { steps = 5, device = "cpu" } })
local keys = {}
for k in pairs(opts) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do io.write(k, "=", tostring(opts[k]), " ", math.type(opts[k]) or type(opts[k]), "\n") end
]]

local dir
setup(function()
  dir = files.make_temp_dir()
  local f = assert(io.open(dir .. "/t.lua", "w"))
  f:write(SCRIPT)
  f:close()
end)
teardown(function() files.remove_dir(dir) end)

-- the output and the exit status of t.lua with the arguments
local function run(args)
  local p = io.popen(string.format("%s %s %s 2>&1", files.sh_quote(files.BIN), files.sh_quote(dir .. "/t.lua"), args))
  local out = p:read("a")
  local _, _, status = p:close()
  return out, status
end

describe("tlua.cli.parse", function()
  it("reads --key value and --key=value, dashes as underscores, numbers typed, defaults kept", function()
    local out, status = run("--lr 3e-4 --top-k=7 --device cuda")
    assert.are.equal(0, status)
    assert.are.equal("device=cuda string\nlr=0.0003 float\nsteps=5 integer\ntop_k=7 integer\n", out)
  end)

  it("reads flags: --flag is true, --flag=false false, any other value an error", function()
    local out, status = run("--data-parallel --steps 2")
    assert.are.equal(0, status)
    assert.are.equal("data_parallel=true boolean\ndevice=cpu string\nsteps=2 integer\n", out)
    out, status = run("--data-parallel=false")
    assert.are.equal(0, status)
    assert.matches("data_parallel=false boolean", out, 1, true)
    out, status = run("--data-parallel=yes")
    assert.are.equal(2, status)
    assert.matches("t.lua: --data-parallel takes no value, or =true or =false", out, 1, true)
  end)

  it("prints the usage for --help and exits 0", function()
    local out, status = run("--help")
    assert.are.equal(0, status)
    assert.are.equal("usage: t.lua [options]\n", out)
  end)

  it("names each bad argument, prints the usage and exits 2", function()
    local cases = {
      { "--stepz 3", "t.lua: unknown option --stepz" },
      { "--steps 2.5", "t.lua: --steps expects an integer, got '2.5'" },
      { "--lr fast", "t.lua: --lr expects a number, got 'fast'" },
      { "--steps", "t.lua: --steps needs a value" },
      { "extra", "t.lua: unexpected argument 'extra'" },
    }
    for _, c in ipairs(cases) do
      local out, status = run(c[1])
      assert.are.equal(2, status, c[1])
      assert.are.equal(c[2] .. "\nusage: t.lua [options]\n", out, c[1])
    end
  end)
end)
