-- tlua.plot (gnuplot): each kind of plot writes its PNG or SVG file, the text plot carries the title, a training CSV plots, its temporary files go, and bad options, bad inputs, gnuplot's failures and a missing gnuplot give clear errors.
local tl = require("tlua")
local plot = require("tlua.plot")
local files = require("helpers.files")
local sh_quote = files.sh_quote

local PNG = "\137PNG\r\n\26\n"

local dir -- a fresh directory per test

-- asserts path holds a PNG (or an SVG) of a real plot, not a stub
local function assert_png(path)
  local bytes = files.read_file(path)
  assert.is_not_nil(bytes, "no file " .. path)
  assert.are.equal(PNG, bytes:sub(1, 8), path .. " is not a PNG")
  assert.is_true(#bytes > 2000, path .. " has only " .. #bytes .. " bytes")
end
local function assert_svg(path)
  local bytes = files.read_file(path)
  assert.is_not_nil(bytes, "no file " .. path)
  assert.is_true(bytes:sub(1, 5) == "<?xml" or bytes:find("<svg", 1, true) ~= nil, path .. " is not an SVG")
  assert.is_true(#bytes > 2000, path .. " has only " .. #bytes .. " bytes")
end

-- what fn writes through io.write (io.output), and fn's results
local function captured(fn)
  local path = dir .. "/stdout"
  local f = assert(io.open(path, "w"))
  io.output(f)
  local ok, result = pcall(fn)
  io.output(io.stdout)
  f:close()
  assert(ok, result)
  return files.read_file(path), result
end

-- a CSV as the training examples write it (tlua.cli.csv): a header, then one row a step
local function write_loss_csv(path)
  local rows = { "step,loss,lr,val_loss" }
  for step = 1, 40 do
    rows[#rows + 1] = string.format("%d,%.6f,%.6g,%s", step, 3 * math.exp(-step / 10) + 0.1, 1e-3,
      step % 10 == 0 and string.format("%.6f", 3.2 * math.exp(-step / 12) + 0.2) or "")
  end
  files.write_file(path, table.concat(rows, "\n") .. "\n")
end

-- the exit status and output (stdout and stderr) of a child tlua running the Lua code
local function child(code, env)
  files.write_file(dir .. "/child.lua", code)
  local p = io.popen(string.format("cd %s && %s %s %s 2>&1", sh_quote(files.ROOT), env or "", sh_quote(files.BIN),
    sh_quote(dir .. "/child.lua")))
  local out = p:read("a")
  local _, _, status = p:close()
  return status, out
end

describe("tlua.plot", function()
  before_each(function() dir = files.make_temp_dir() end)
  after_each(function() files.remove_dir(dir) end)

  it("is tl.plot, loaded on first use and listed for completion", function()
    -- the same module (by its functions' names: busted reloads modules between spec files, so
    -- tl.plot may be an earlier file's load of it)
    local function names(m) local r = {} for k in pairs(m) do r[#r + 1] = k end table.sort(r) return r end
    assert.same(names(plot), names(tl.plot))
    local listed = false
    for _, name in ipairs(getmetatable(tl).__completions) do listed = listed or name == "plot" end
    assert.is_true(listed)
    assert.is_truthy(plot.gnuplot():find("gnuplot"))
  end)

  it("plot.plot draws y, (x, y) and labelled series; PNG or SVG by the extension or terminal", function()
    local y = tl.linspace(0, 6, 50):sin()
    assert.are.equal(dir .. "/y.png", plot.plot(y, { output = dir .. "/y.png", title = "sin" }))
    assert_png(dir .. "/y.png")
    plot.plot(tl.linspace(0, 6, 50), y, { output = dir .. "/xy.svg", xlabel = "t", ylabel = "sin t" })
    assert_svg(dir .. "/xy.svg")
    plot.plot({ { y, label = "sin" }, { tl.arange(1, 51), y:cos(), label = "cos", style = "points" }, y * 2 },
      { output = dir .. "/series", terminal = "png", size = { 800, 400 }, xrange = { 0, 60 } })
    assert_png(dir .. "/series")
    plot.plot({ 1, 2, 3 }, { 1, 10, 100 }, { output = dir .. "/lists.svg", logscale = "y" })
    assert_svg(dir .. "/lists.svg")
  end)

  it("plot.hist draws a histogram of any shape's elements", function()
    plot.hist(tl.randn(20, 50), { bins = 50, output = dir .. "/hist.png", title = "normal" })
    assert_png(dir .. "/hist.png")
    plot.hist(tl.rand(1000), { bins = 10, range = { 0, 2 }, logscale = "y", output = dir .. "/hist.svg" })
    assert_svg(dir .. "/hist.svg")
    plot.hist(tl.full({ 5 }, 3), { output = dir .. "/one_value.png" }) -- one value: a bin around it
    assert_png(dir .. "/one_value.png")
  end)

  it("plot.imagesc draws a 2-d tensor as an image, color or gray", function()
    plot.imagesc(tl.randn(20, 30), { output = dir .. "/image.png", title = "noise" })
    assert_png(dir .. "/image.png")
    plot.imagesc(tl.eye(8), { palette = "gray", output = dir .. "/eye.svg" })
    assert_svg(dir .. "/eye.svg")
    plot.imagesc(tl.zeros(4, 4), { output = dir .. "/flat.png" }) -- constant: no empty color range
    assert_png(dir .. "/flat.png")
  end)

  it("plot.grid draws (N, H, W), (N, 1, H, W) and RGB (N, 3, H, W) batches", function()
    plot.grid(tl.rand(20, 8, 8), { nrow = 5, output = dir .. "/gray.png" })
    assert_png(dir .. "/gray.png")
    plot.grid(tl.randn(16, 1, 5, 5), { scale_each = true, padding = 1, palette = "color", output = dir .. "/c.svg" })
    assert_svg(dir .. "/c.svg")
    plot.grid(tl.rand(10, 3, 6, 6), { nrow = 4, output = dir .. "/rgb.png", title = "rgb" })
    assert_png(dir .. "/rgb.png")
  end)

  it("plot.csv plots a training CSV's columns; an empty cell is a missing point", function()
    local csv = dir .. "/loss.csv"
    write_loss_csv(csv)
    plot.csv(csv, { x = "step", y = { "loss", "val_loss" }, output = dir .. "/loss.png", title = "loss" })
    assert_png(dir .. "/loss.png")
    plot.csv(csv, { output = dir .. "/default.svg", logscale = "y" }) -- x = step, y = loss
    assert_svg(dir .. "/default.svg")
    local text = captured(function() plot.csv(csv, { y = "val_loss", title = "validation" }) end)
    assert.is_truthy(text:find("validation", 1, true), text)
    assert.is_truthy(text:find("val_loss", 1, true), text)
  end)

  it("plots the CSV an example writes through tlua.cli.csv", function()
    local f = require("tlua.cli").csv(dir .. "/run.csv", "epoch,batch,step,loss,accuracy\n", 3)
    for step = 1, 12 do f:write(string.format("%d,%d,%d,%.6f,%.6f\n", 1, step, step, 2 / step, step / 12)) end
    f:close()
    plot.csv(dir .. "/run.csv", { output = dir .. "/run.png" })
    assert_png(dir .. "/run.png")
  end)

  it("without output, draws text (the dumb terminal) to stdout and returns it, with the title", function()
    local out, result = captured(function()
      return plot.plot(tl.arange(1, 21):to("float32"):sqrt(), { title = "my_text_plot", size = { 70, 20 } })
    end)
    assert.are.equal(out, result)
    assert.is_truthy(out:find("my_text_plot", 1, true), out)
    assert.is_truthy(select(2, out:gsub("\n", "")) <= 20, out)
    local hist = captured(function() plot.hist(tl.randn(500), { terminal = "dumb", title = "hist_title" }) end)
    assert.is_truthy(hist:find("hist_title", 1, true), hist)
    -- output = "x.txt" writes the text to the file
    plot.imagesc(tl.eye(4), { output = dir .. "/eye.txt", title = "text_image" })
    assert.is_truthy(files.read_file(dir .. "/eye.txt"):find("text_image", 1, true))
    -- in a child tlua: on its stdout
    local status, printed = child('tl.plot.plot(tl.ones(5), { title = "child_title" })')
    assert.are.equal(0, status, printed)
    assert.is_truthy(printed:find("child_title", 1, true), printed)
  end)

  it("takes every float dtype (and integers), and removes its temporary files", function()
    local made = {}
    local tmpname = os.tmpname
    os.tmpname = function() -- luacheck: ignore
      local name = tmpname()
      made[#made + 1] = name
      return name
    end
    local ok, err = pcall(function()
      for _, dtype in ipairs({ "float32", "float64", "bfloat16", "float16", "int64" }) do
        local t = tl.randn(40):mul(10):to(dtype)
        plot.plot(t, { output = dir .. "/" .. dtype .. ".png" })
        assert_png(dir .. "/" .. dtype .. ".png")
        plot.imagesc(t:view(5, 8), { output = dir .. "/" .. dtype .. "_image.png" })
        assert_png(dir .. "/" .. dtype .. "_image.png")
      end
      pcall(plot.plot, tl.ones(3), { output = dir .. "/no/such/dir.png" })
    end)
    os.tmpname = tmpname -- luacheck: ignore
    assert(ok, err)
    assert.is_true(#made > 0)
    for _, name in ipairs(made) do assert.is_nil(io.open(name), name .. " was left behind") end
  end)

  it("copies a tensor on the GPU to the CPU #cuda", function()
    if not tl.cuda.is_available() then
      pending("no CUDA device")
      return
    end
    plot.plot(tl.randn(30, { device = "cuda" }):to("float16"), { output = dir .. "/gpu.png" })
    assert_png(dir .. "/gpu.png")
    plot.grid(tl.rand(4, 3, 5, 5, { device = "cuda" }), { output = dir .. "/gpu_grid.png" })
    assert_png(dir .. "/gpu_grid.png")
  end)

  it("refuses an unknown option, naming it", function()
    local y = tl.ones(3)
    assert.error_matches(function() plot.plot(y, { colour = "red" }) end,
      { "plot.plot: unknown option 'colour'", "accepted:", "title" })
    assert.error_matches(function() plot.hist(y, { bin = 5 }) end, { "plot.hist: unknown option 'bin'" })
    assert.error_matches(function() plot.imagesc(tl.eye(3), { logscale = "y" }) end,
      { "plot.imagesc: unknown option 'logscale'" })
    assert.error_matches(function() plot.grid(tl.ones(2, 3, 3), { rows = 2 }) end,
      { "plot.grid: unknown option 'rows'" })
    assert.error_matches(function() plot.csv("x.csv", { ycol = "loss" }) end, { "plot.csv: unknown option 'ycol'" })
    assert.error_matches(function() plot.plot({ { y, lable = "a" } }) end, { "unknown option 'lable'" })
    assert.error_matches(function() plot.plot(y, { title = 3 }) end, { "plot.plot: option title expected a string" })
    assert.error_matches(function() plot.plot(y, { logscale = "z" }) end, { "option logscale", "'z'" })
    assert.error_matches(function() plot.plot(y, { style = "bars" }) end, { "option style", "'bars'" })
    assert.error_matches(function() plot.plot(y, { terminal = "x11" }) end, { "option terminal", "'x11'" })
    assert.error_matches(function() plot.plot(y, { terminal = "png" }) end,
      { "plot.plot: terminal \"png\" writes a file" })
    assert.error_matches(function() plot.plot(y, { output = dir .. "/a.jpg" }) end,
      { "cannot tell the format of output", "a.jpg" })
    assert.error_matches(function() plot.plot(y, { size = { 10 } }) end, { "option size expected {width, height}" })
    assert.error_matches(function() plot.hist(y, { range = { 2, 1 } }) end, { "option range expected {lo, hi}" })
  end)

  it("refuses bad inputs with clear errors", function()
    assert.error_matches(function() plot.imagesc(tl.ones(2, 3, 4)) end,
      { "plot.imagesc: t expected a 2-d tensor", "(2, 3, 4)" })
    assert.error_matches(function() plot.plot(tl.zeros(0)) end, { "plot.plot: y is empty" })
    assert.error_matches(function() plot.hist(tl.zeros(0, 3)) end, { "plot.hist: t is empty" })
    assert.error_matches(function() plot.imagesc(tl.zeros(0, 3)) end, { "plot.imagesc: t is empty" })
    assert.error_matches(function() plot.grid(tl.zeros(0, 4, 4)) end, { "plot.grid: t is empty" })
    assert.error_matches(function() plot.plot(tl.ones(2, 3)) end, { "plot.plot: y expected a 1-d tensor", "(2, 3)" })
    assert.error_matches(function() plot.plot(tl.ones(3), tl.ones(4)) end, { "plot.plot: x has 3 values and y 4" })
    assert.error_matches(function() plot.plot("loss") end, { "plot.plot: expected y" })
    assert.error_matches(function() plot.plot({ 1, "a" }) end, { "plot.plot: y[2] expected a number" })
    assert.error_matches(function() plot.hist(tl.full({ 3 }, 0 / 0)) end, { "plot.hist: t has no finite values" })
    assert.error_matches(function() plot.grid(tl.ones(2, 2, 4, 4)) end,
      { "plot.grid: t expected images of 1 or 3 channels", "2 channels" })
    assert.error_matches(function() plot.grid(tl.ones(4, 4)) end, { "plot.grid: t expected a 3-d (N, H, W) or 4-d" })
    assert.error_matches(function() plot.csv(dir .. "/none.csv") end, { "plot.csv: cannot open", "none.csv" })
    local csv = dir .. "/loss.csv"
    write_loss_csv(csv)
    assert.error_matches(function() plot.csv(csv, { y = { "loss", "accuracy" } }) end,
      { "plot.csv:", "has no column 'accuracy' (columns: step, loss, lr, val_loss)" })
    files.write_file(dir .. "/bad.csv", "step,loss\n1,0.5\n2,oops\n")
    assert.error_matches(function() plot.csv(dir .. "/bad.csv") end,
      { "bad.csv:3: column 'loss' is not a number ('oops')" })
  end)

  it("reports gnuplot's own failure with its message", function()
    assert.error_matches(function() plot.plot(tl.ones(3), { output = dir .. "/no/such/dir.png" }) end,
      { "plot.plot: gnuplot failed (exit status 1)", "cannot open file" })
  end)

  it("the examples' --plot draws their loss CSV as a PNG beside it, and fails at once without gnuplot", function()
    local script = sh_quote(files.ROOT .. "/examples/lstm/train.lua")
    local args = " --steps 6 --hidden 16 --embed 8 --bptt 8 --batch 4 --eval-every 0 --sample-tokens 0" ..
      " --csv run.csv --plot"
    local function train(env)
      local p = io.popen(string.format("cd %s && TLUA_PROGRESS=off %s %s %s%s 2>&1", sh_quote(dir), env or "",
        sh_quote(files.BIN), script, args))
      local out = p:read("a")
      local _, _, status = p:close()
      return status, out
    end
    local status, out = train()
    assert.are.equal(0, status, out)
    assert.is_truthy(out:find("loss plot: run.png", 1, true), out)
    assert_png(dir .. "/run.png")
    os.remove(dir .. "/run.csv")
    status, out = train("TLUA_GNUPLOT=/nonexistent")
    assert.are_not.equal(0, status)
    assert.is_truthy(out:find("plot: gnuplot is not installed", 1, true), out)
    assert.is_nil(io.open(dir .. "/run.csv"), "trained before failing")
  end)

  it("says gnuplot is not installed when TLUA_GNUPLOT names no program", function()
    local status, out = child('tl.plot.plot(tl.ones(3), { output = "x.png" })', "TLUA_GNUPLOT=/nonexistent")
    assert.are_not.equal(0, status)
    assert.is_truthy(out:find("plot: gnuplot is not installed (apt-get install gnuplot-nox)", 1, true), out)
    assert.is_truthy(out:find("TLUA_GNUPLOT names '/nonexistent'", 1, true), out)
    status, out = child('print(pcall(require("tlua.plot").gnuplot))', "TLUA_GNUPLOT=" .. sh_quote(dir))
    assert.is_truthy(out:find("^false\t.*plot: gnuplot is not installed"), out)
  end)
end)
