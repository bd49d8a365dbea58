-- tlua.plot: line plots, histograms and images of tensors and of training CSVs, drawn by gnuplot (Torch7's gnuplot package) into PNG or SVG files or as text in the terminal.
--
--   local plot = require("tlua.plot")            -- or tl.plot
--   plot.plot(losses, { output = "loss.png", title = "loss", logscale = "y" })
--   plot.plot({ { steps, train, label = "train" }, { steps, val, label = "val" } }, { output = "l.svg" })
--   plot.csv("gpt_loss.csv", { x = "step", y = { "loss" }, output = "gpt_loss.png" })
--   plot.hist(weights, { bins = 50 })             -- no output: a text plot on stdout
--   plot.imagesc(attention_map, { output = "a.png" })
--   plot.grid(conv1.weight, { nrow = 8, output = "filters.png" })
--
-- Where a plot goes: `output` names a file, drawn as PNG or SVG by its extension (.png, .svg;
-- .txt for text) or by `terminal` ("png", "svg", "dumb"); without `output` the plot is text
-- (gnuplot's dumb terminal), written to io.output() (stdout unless redirected) and returned.
-- gnuplot-nox has no window to draw in, so a plot never opens one. gnuplot is found by
-- `command -v gnuplot`, or is the program TLUA_GNUPLOT names. Each call writes a gnuplot script
-- (data inline) to an os.tmpname() file, runs gnuplot on it through io.popen, checks its exit
-- status (an error carries gnuplot's message) and removes its temporary files.
local options = require("tlua.options")
local core = require("tlua.core")

local plot = {}

-- ---- options -----------------------------------------------------------------------------------

local COMMON = { title = "string", xlabel = "string", ylabel = "string", size = "table", output = "string",
  terminal = "string" }
local function accepted(extra)
  local t = {}
  for k, v in pairs(COMMON) do t[k] = v end
  for k, v in pairs(extra) do t[k] = v end
  return t
end
local LINES = { logscale = "string", style = "string", xrange = "table", yrange = "table" }
local PLOT = accepted(LINES)
local CSV = accepted({ x = "string", y = "string|table", logscale = "string", style = "string", xrange = "table",
  yrange = "table" })
local HIST = accepted({ bins = "integer", range = "table", logscale = "string" })
local IMAGESC = accepted({ palette = "string" })
local GRID = accepted({ nrow = "integer", padding = "integer", scale_each = "boolean", palette = "string" })
local SERIES = { [1] = "tensor|table", [2] = "tensor|table", label = "string", style = "string" }

local STYLES = { lines = true, points = true, linespoints = true, impulses = true, steps = true, dots = true }
local LOGSCALES = { x = "x", y = "y", xy = "xy", yx = "xy" }
local PALETTES = { color = "set palette rgbformulae 7,5,15", gray = "set palette gray" }
local DEFAULT_SIZES = { png = { 640, 480 }, svg = { 640, 480 }, dumb = { 79, 24 } }

-- raises "who: message" at the user's line
local function fail(who, fmt, ...)
  options.error(who .. ": " .. string.format(fmt, ...), 3)
end

local function shape_text(t)
  return "(" .. table.concat(t.shape, ", ") .. ")"
end

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- a gnuplot string in double quotes (escapes read), and a file name in single quotes (none read)
local function gp_string(s)
  return '"' .. (s:gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("\n", "\\n")) .. '"'
end
local function gp_path(s)
  return "'" .. s:gsub("'", "''") .. "'"
end

-- a number as gnuplot reads it; NaN and infinities as NaN (a missing point)
local function num(x)
  if x ~= x or x == math.huge or x == -math.huge then return "NaN" end
  return string.format("%.10g", x)
end

local function is_finite(x)
  return x == x and x ~= math.huge and x ~= -math.huge
end

-- {lo, hi} of two numbers, lo < hi, or fails naming the option
local function check_range(who, name, r)
  if type(r[1]) ~= "number" or type(r[2]) ~= "number" or #r ~= 2 or not (r[1] < r[2]) then
    fail(who, "option %s expected {lo, hi} with lo < hi, got {%s}", name, table.concat(
      (function() local s = {} for i = 1, #r do s[i] = tostring(r[i]) end return s end)(), ", "))
  end
  return r
end

-- ---- values out of tensors ----------------------------------------------------------------------

-- a tensor on the CPU in float64 (any device, any dtype), refusing an empty one
local function host(who, name, t)
  if t:numel() == 0 then fail(who, "%s is empty (shape %s)", name, shape_text(t)) end
  return t:to("cpu"):to("float64")
end

-- the values of a 1-d tensor or of a Lua list of numbers, as a Lua list
local function values_1d(who, name, v)
  if core.is_tensor(v) then
    if v:dim() ~= 1 then fail(who, "%s expected a 1-d tensor, got shape %s", name, shape_text(v)) end
    return host(who, name, v):totable()
  end
  if type(v) ~= "table" then fail(who, "%s expected a 1-d tensor or a list of numbers, got %s", name, type(v)) end
  if #v == 0 then fail(who, "%s is empty", name) end
  for i = 1, #v do
    if type(v[i]) ~= "number" then fail(who, "%s[%d] expected a number, got %s", name, i, type(v[i])) end
  end
  return v
end

-- ---- running gnuplot ---------------------------------------------------------------------------

local NOT_INSTALLED = "plot: gnuplot is not installed (apt-get install gnuplot-nox)"

-- the gnuplot program: TLUA_GNUPLOT when set, else the gnuplot on PATH
local function gnuplot_program()
  if not (io.popen and os.tmpname and os.getenv) then
    options.error("plot: needs io.popen, os.tmpname and os.getenv (not in this Lua state)", 3)
  end
  local env = os.getenv("TLUA_GNUPLOT")
  local name = (env and env ~= "") and env or "gnuplot"
  local p = io.popen("command -v " .. sh_quote(name) .. " 2>/dev/null")
  local found = p and p:read("l")
  if p then p:close() end
  if not found or found == "" or (name:find("/") and os.execute("test -f " .. sh_quote(found)) ~= true) then
    if env and env ~= "" then
      options.error(NOT_INSTALLED .. "; TLUA_GNUPLOT names '" .. env .. "', which is not a program", 3)
    end
    options.error(NOT_INSTALLED, 3)
  end
  return found
end

--- plot.gnuplot() -> the path of the gnuplot program plots run (TLUA_GNUPLOT or the one on PATH);
-- raises "plot: gnuplot is not installed (apt-get install gnuplot-nox)" without one
function plot.gnuplot()
  return gnuplot_program()
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- runs the script's lines; returns gnuplot's stdout
local function run(who, lines)
  local program = gnuplot_program()
  local script, errors = os.tmpname(), os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local p = io.popen(sh_quote(program) .. " " .. sh_quote(script) .. " 2>" .. sh_quote(errors) .. " </dev/null")
  local out = p:read("a")
  local ok, how, code = p:close()
  local message = read_all(errors)
  os.remove(script)
  os.remove(errors)
  if not ok then
    -- gnuplot echoes the command, a caret under it, then '"<script>" line N: what went wrong'
    local last, command = {}, nil
    for l in message:gmatch("[^\n]+") do
      if l:find('^"' .. script:gsub("%p", "%%%0") .. '" line %d+:') then
        last = { (l:gsub('^"[^"]*" ', "")) }
      elseif l:find("^%s*%^%s*$") then
        command = last[#last]
      elseif l:find("%S") then
        last[#last + 1] = l
      end
    end
    while #last > 4 do table.remove(last, 1) end
    local text = #last > 0 and table.concat(last, "; ") or "no message"
    if command and not text:find(command, 1, true) then text = text .. " (at: " .. command .. ")" end
    fail(who, "gnuplot failed (%s %s): %s", how == "signal" and "signal" or "exit status", tostring(code), text)
  end
  return out
end

-- the terminal's lines ({kind = "png"|"svg"|"dumb", lines}) from output, terminal and size
local function terminal_of(who, opts)
  local kind, output = opts.terminal, opts.output
  if kind and not DEFAULT_SIZES[kind] then
    fail(who, "option terminal expected \"png\", \"svg\" or \"dumb\", got '%s'", kind)
  end
  if output == "" then fail(who, "option output is an empty path") end
  if not kind and output then
    local ext = (output:match("%.(%w+)$") or ""):lower()
    kind = ({ png = "png", svg = "svg", txt = "dumb" })[ext]
    if not kind then
      fail(who, "cannot tell the format of output '%s' from its extension (.png, .svg or .txt; or give " ..
        "terminal = \"png\", \"svg\" or \"dumb\")", output)
    end
  elseif not kind then
    kind = "dumb"
  elseif kind ~= "dumb" and not output then
    fail(who, "terminal \"%s\" writes a file: give output = \"plot.%s\"", kind, kind)
  end
  local size = opts.size or DEFAULT_SIZES[kind]
  if #size ~= 2 or math.type(size[1]) ~= "integer" or math.type(size[2]) ~= "integer" or size[1] < 1 or size[2] < 1
  then
    fail(who, "option size expected {width, height}, two positive integers (%s), got %d values",
      kind == "dumb" and "characters" or "pixels", #size)
  end
  local term = ({ png = "pngcairo", svg = "svg", dumb = "dumb" })[kind]
  local lines = { string.format("set terminal %s noenhanced size %d,%d", term, size[1], size[2]) }
  if output then lines[#lines + 1] = "set output " .. gp_path(output) end
  return kind, lines
end

-- the lines every plot starts with: terminal, title, labels, log scale
local function header(who, opts, default)
  local kind, lines = terminal_of(who, opts)
  for _, key in ipairs({ "title", "xlabel", "ylabel" }) do
    local text = opts[key] or (default and default[key])
    if text then lines[#lines + 1] = "set " .. key .. " " .. gp_string(text) end
  end
  if opts.logscale then
    local axes = LOGSCALES[opts.logscale]
    if not axes then fail(who, "option logscale expected \"x\", \"y\" or \"xy\", got '%s'", opts.logscale) end
    lines[#lines + 1] = "set logscale " .. axes
  end
  return kind, lines
end

-- runs the plot; a file plot returns its path, a text plot is written to io.output() and returned
local function finish(who, opts, lines)
  local out = run(who, lines)
  if opts.output then return opts.output end
  local rows = {}
  for l in (out:gsub("^\f", "") .. "\n"):gmatch("(.-)\r?\n") do rows[#rows + 1] = (l:gsub("%s+$", "")) end
  while #rows > 0 and rows[#rows] == "" do rows[#rows] = nil end
  while #rows > 0 and rows[1] == "" do table.remove(rows, 1) end
  local text = table.concat(rows, "\n") .. "\n"
  io.write(text)
  return text
end

-- a datablock $name of rows of numbers
local function datablock(lines, name, rows)
  lines[#lines + 1] = "$" .. name .. " << EOD"
  for _, row in ipairs(rows) do
    local cells = {}
    for i, v in ipairs(row) do cells[i] = num(v) end
    lines[#lines + 1] = table.concat(cells, " ")
  end
  lines[#lines + 1] = "EOD"
end

-- ---- line plots --------------------------------------------------------------------------------

-- draws series {x = list, y = list, label = string?, style = string?} with the options
local function draw_lines(who, series, opts, default)
  local style = opts.style or "lines"
  if not STYLES[style] then fail(who, "option style expected lines, points, linespoints, impulses, steps or " ..
    "dots, got '%s'", style) end
  local kind, lines = header(who, opts, default)
  if kind ~= "dumb" then lines[#lines + 1] = "set grid" end
  lines[#lines + 1] = "set key top right"
  for _, axis in ipairs({ "x", "y" }) do
    local r = opts[axis .. "range"]
    if r then
      check_range(who, axis .. "range", r)
      lines[#lines + 1] = string.format("set %srange [%s:%s]", axis, num(r[1]), num(r[2]))
    end
  end
  local parts = {}
  for i, s in ipairs(series) do
    local rows = {}
    for k = 1, #s.y do rows[k] = { s.x[k], s.y[k] } end
    datablock(lines, "s" .. i, rows)
    local with = s.style or style
    if not STYLES[with] then fail(who, "series %d: style expected lines, points, linespoints, impulses, steps or " ..
      "dots, got '%s'", i, with) end
    parts[i] = string.format("$s%d using 1:2 with %s %s", i, with, s.label and ("title " .. gp_string(s.label))
      or "notitle")
  end
  lines[#lines + 1] = "plot " .. table.concat(parts, ", ")
  return finish(who, opts, lines)
end

-- {x, y} lists of one series, x defaulting to 1..n, of equal lengths
local function series_of(who, x, y, where)
  y = values_1d(who, where .. "y", y)
  if x == nil then
    x = {}
    for i = 1, #y do x[i] = i end
  else
    x = values_1d(who, where .. "x", x)
    if #x ~= #y then fail(who, "%sx has %d values and y %d", where, #x, #y) end
  end
  return x, y
end

local function is_list_of_numbers(v)
  return core.is_tensor(v) or (type(v) == "table" and type(v[1]) == "number")
end

--- plot.plot(y, opts?), plot.plot(x, y, opts?), plot.plot({series, ...}, opts?) -> the output path
-- or the text plot. A series is a 1-d tensor (its y) or {y} or {x, y}, with label and style.
function plot.plot(a, b, c)
  local who = "plot.plot"
  local series, opts = {}, nil
  if is_list_of_numbers(a) and is_list_of_numbers(b) then
    local x, y = series_of(who, a, b, "")
    series[1], opts = { x = x, y = y }, c
  elseif is_list_of_numbers(a) then
    local x, y = series_of(who, nil, a, "")
    series[1], opts = { x = x, y = y }, b
    if c ~= nil then fail(who, "a third argument after (y, opts): give (x, y, opts)") end
  elseif type(a) == "table" then
    if #a == 0 then fail(who, "expected y, (x, y) or a list of series, got an empty table") end
    for i, s in ipairs(a) do
      if core.is_tensor(s) then s = { s } end
      if type(s) ~= "table" then fail(who, "series %d expected a tensor or {x?, y, label =}, got %s", i, type(s)) end
      options.check(s, who .. " (series " .. i .. ")", SERIES, 2)
      if s[1] == nil then fail(who, "series %d has no values", i) end
      local x, y
      if s[2] ~= nil then x, y = series_of(who, s[1], s[2], "series " .. i .. ": ")
      else x, y = series_of(who, nil, s[1], "series " .. i .. ": ") end
      series[i] = { x = x, y = y, label = s.label, style = s.style }
    end
    opts = b
    if c ~= nil then fail(who, "a third argument after (series, opts)") end
  else
    fail(who, "expected y (a 1-d tensor), (x, y) or a list of series, got %s", type(a))
  end
  opts = options.check(opts, who, PLOT, 2)
  return draw_lines(who, series, opts)
end

-- ---- CSV files ---------------------------------------------------------------------------------

local function split_csv(line)
  local cells = {}
  for cell in (line .. ","):gmatch("([^,]*),") do cells[#cells + 1] = cell:match("^%s*(.-)%s*$") end
  return cells
end

-- a cell's number; nil for an empty cell or nan/inf (a missing point); fails on other text
local function cell_number(who, path, line, column, cell)
  if cell == nil or cell == "" then return nil end
  local n = tonumber(cell)
  if n then return is_finite(n) and n or nil end
  local lower = cell:lower():gsub("^[-+]", "")
  if lower == "nan" or lower == "inf" or lower == "infinity" then return nil end
  fail(who, "%s:%d: column '%s' is not a number ('%s')", path, line, column, cell)
end

--- plot.csv(path, opts?) -> the output path or the text plot: columns of a CSV file with a header
-- (the training examples' loss files) as lines; x defaults to "step" (else the first column), y to
-- "loss" (else every other column). An empty cell is a missing point.
function plot.csv(path, opts)
  local who = "plot.csv"
  if type(path) ~= "string" then fail(who, "path expected a string, got %s", type(path)) end
  opts = options.check(opts, who, CSV, 2)
  local f, why = io.open(path, "r")
  if not f then fail(who, "cannot open '%s' (%s)", path, why) end
  local text = f:read("a")
  f:close()
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = line end
  if not lines[1]:find("%S") then fail(who, "'%s' is empty (expected a header line such as step,loss)", path) end
  local columns, index = split_csv(lines[1]), {}
  for i, name in ipairs(columns) do index[name] = i end
  local function column(name)
    if not index[name] then
      fail(who, "'%s' has no column '%s' (columns: %s)", path, name, table.concat(columns, ", "))
    end
    return index[name]
  end
  local xname = opts.x or (index.step and "step") or columns[1]
  local xi = column(xname)
  local ynames = opts.y
  if type(ynames) == "string" then ynames = { ynames } end
  if ynames == nil then
    if index.loss and xname ~= "loss" then
      ynames = { "loss" }
    else
      ynames = {}
      for _, name in ipairs(columns) do if name ~= xname then ynames[#ynames + 1] = name end end
    end
  end
  if #ynames == 0 then fail(who, "option y names no column") end
  local series = {}
  for i, name in ipairs(ynames) do
    if type(name) ~= "string" then fail(who, "option y[%d] expected a column name, got %s", i, type(name)) end
    series[i] = { x = {}, y = {}, label = name, column = column(name) }
  end
  for number = 2, #lines do
    if lines[number]:find("%S") then
      local cells = split_csv(lines[number])
      local x = cell_number(who, path, number, xname, cells[xi])
      for _, s in ipairs(series) do
        local y = cell_number(who, path, number, s.label, cells[s.column])
        if x and y then s.x[#s.x + 1], s.y[#s.y + 1] = x, y end
      end
    end
  end
  for _, s in ipairs(series) do
    if #s.y == 0 then fail(who, "column '%s' of '%s' has no values", s.label, path) end
  end
  return draw_lines(who, series, opts, { xlabel = xname, ylabel = #series == 1 and series[1].label or nil })
end

-- ---- histograms --------------------------------------------------------------------------------

--- plot.hist(t, opts?) -> the output path or the text plot: the histogram of t's elements (any
-- shape) in `bins` equal bins (default 50) over `range` (default: min to max of the finite values)
function plot.hist(t, opts)
  local who = "plot.hist"
  if not core.is_tensor(t) then fail(who, "t expected a tensor, got %s", type(t)) end
  opts = options.check(opts, who, HIST, 2)
  local bins = opts.bins or 50
  if bins < 1 then fail(who, "option bins expected a positive integer, got %d", bins) end
  local flat = host(who, "t", t):reshape(-1):totable()
  local lo, hi = math.huge, -math.huge
  local finite = 0
  for _, v in ipairs(flat) do
    if is_finite(v) then
      finite = finite + 1
      if v < lo then lo = v end
      if v > hi then hi = v end
    end
  end
  if finite == 0 then fail(who, "t has no finite values (%d elements)", #flat) end
  if opts.range then lo, hi = table.unpack(check_range(who, "range", opts.range))
  elseif lo == hi then lo, hi = lo - 0.5, hi + 0.5 end
  local width = (hi - lo) / bins
  local counts = {}
  for i = 1, bins do counts[i] = 0 end
  for _, v in ipairs(flat) do
    if is_finite(v) and v >= lo and v <= hi then
      local i = math.min(bins, math.floor((v - lo) / width) + 1)
      counts[i] = counts[i] + 1
    end
  end
  local log_y = opts.logscale and opts.logscale:find("y")
  local rows = {}
  for i = 1, bins do
    if not (log_y and counts[i] == 0) then rows[#rows + 1] = { lo + (i - 0.5) * width, counts[i] } end
  end
  local kind, lines = header(who, opts, { ylabel = "count" })
  if kind ~= "dumb" then lines[#lines + 1] = "set grid ytics" end
  lines[#lines + 1] = "set style fill solid 0.6 border -1"
  lines[#lines + 1] = "set boxwidth " .. num(width) .. " absolute"
  lines[#lines + 1] = string.format("set xrange [%s:%s]", num(lo), num(hi))
  if not log_y then lines[#lines + 1] = "set yrange [0:*]" end
  if #rows == 0 then rows[1] = { lo, 0 / 0 } end
  datablock(lines, "h", rows)
  lines[#lines + 1] = "plot $h using 1:2 with boxes notitle"
  return finish(who, opts, lines)
end

-- ---- images ------------------------------------------------------------------------------------

-- lines that draw a matrix (rows of numbers, NaN transparent) as an image, row 1 at the top
local function image_lines(lines, rows, width, height)
  lines[#lines + 1] = "set size ratio -1"
  lines[#lines + 1] = string.format("set xrange [0.5:%s]", num(width + 0.5))
  lines[#lines + 1] = string.format("set yrange [%s:0.5]", num(height + 0.5))
  datablock(lines, "m", rows)
end

local function palette_of(who, opts, default)
  local palette = opts.palette or default
  if not PALETTES[palette] then fail(who, "option palette expected \"color\" or \"gray\", got '%s'", palette) end
  return PALETTES[palette]
end

--- plot.imagesc(t, opts?) -> the output path or the text plot: a 2-d tensor as an image, its
-- values scaled to the palette ("color", the default, or "gray") with a color bar; row 1 on top
function plot.imagesc(t, opts)
  local who = "plot.imagesc"
  if not core.is_tensor(t) then fail(who, "t expected a 2-d tensor, got %s", type(t)) end
  opts = options.check(opts, who, IMAGESC, 2)
  if t:dim() ~= 2 then
    fail(who, "t expected a 2-d tensor (rows, columns), got shape %s%s", shape_text(t),
      t:dim() >= 3 and " (plot.grid draws a batch of images)" or "")
  end
  local rows = host(who, "t", t):totable()
  local lo, hi = math.huge, -math.huge
  for _, row in ipairs(rows) do
    for _, v in ipairs(row) do
      if is_finite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end
    end
  end
  local _, lines = header(who, opts)
  lines[#lines + 1] = palette_of(who, opts, "color")
  if lo == hi then lines[#lines + 1] = string.format("set cbrange [%s:%s]", num(lo - 0.5), num(hi + 0.5))
  elseif lo < hi then lines[#lines + 1] = string.format("set cbrange [%s:%s]", num(lo), num(hi)) end
  lines[#lines + 1] = "set tics out"
  image_lines(lines, rows, t.shape[2], t.shape[1])
  lines[#lines + 1] = "plot $m matrix using ($1+1):($2+1):3 with image notitle"
  return finish(who, opts, lines)
end

-- the images of t ((N, H, W) or (N, C, H, W), C 1 or 3) as {N, C, H, W, data[n][c][h][w]}
local function images_of(who, t)
  if not core.is_tensor(t) then fail(who, "t expected a 3-d or 4-d tensor, got %s", type(t)) end
  local shape = t.shape
  if t:dim() == 3 then
    local data = host(who, "t", t):totable()
    for n = 1, #data do data[n] = { data[n] } end
    return shape[1], 1, shape[2], shape[3], data
  elseif t:dim() == 4 then
    if shape[2] ~= 1 and shape[2] ~= 3 then
      fail(who, "t expected images of 1 or 3 channels (N, C, H, W), got %d channels (shape %s)", shape[2],
        shape_text(t))
    end
    return shape[1], shape[2], shape[3], shape[4], host(who, "t", t):totable()
  end
  fail(who, "t expected a 3-d (N, H, W) or 4-d (N, C, H, W) tensor, got shape %s", shape_text(t))
end

--- plot.grid(t, opts?) -> the output path or the text plot: a batch of images (N, H, W) or
-- (N, C, H, W) with C 1 (gray, or the palette) or 3 (RGB) in a grid of nrow images a row
function plot.grid(t, opts)
  local who = "plot.grid"
  opts = options.check(opts, who, GRID, 2)
  local N, C, H, W, data = images_of(who, t)
  local nrow, pad = opts.nrow or 8, opts.padding or 2
  if nrow < 1 then fail(who, "option nrow expected a positive integer, got %d", nrow) end
  if pad < 0 then fail(who, "option padding expected an integer >= 0, got %d", pad) end
  if C == 3 and opts.palette then fail(who, "option palette is for 1-channel images (t has 3 channels: RGB)") end
  -- each image (or all together) scaled to [0, 1]
  local function bounds(from, to)
    local lo, hi = math.huge, -math.huge
    for n = from, to do
      for c = 1, C do
        for _, row in ipairs(data[n][c]) do
          for _, v in ipairs(row) do if is_finite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end end
        end
      end
    end
    return lo, hi
  end
  local glo, ghi = bounds(1, N)
  local cols = math.min(nrow, N)
  local grid_rows = (N + cols - 1) // cols
  local width, height = cols * W + (cols + 1) * pad, grid_rows * H + (grid_rows + 1) * pad
  local planes = {}
  for c = 1, C do
    planes[c] = {}
    for y = 1, height do
      local row = {}
      for x = 1, width do row[x] = 0 / 0 end
      planes[c][y] = row
    end
  end
  for n = 1, N do
    local lo, hi = glo, ghi
    if opts.scale_each then lo, hi = bounds(n, n) end
    local scale = hi > lo and 1 / (hi - lo) or 0
    local y0 = pad + ((n - 1) // cols) * (H + pad)
    local x0 = pad + ((n - 1) % cols) * (W + pad)
    for c = 1, C do
      for h = 1, H do
        local src, dst = data[n][c][h], planes[c][y0 + h]
        for w = 1, W do
          local v = src[w]
          dst[x0 + w] = is_finite(v) and (hi > lo and (v - lo) * scale or 0.5) or 0 / 0
        end
      end
    end
  end
  local _, lines = header(who, opts)
  lines[#lines + 1] = "unset tics"
  lines[#lines + 1] = "unset border"
  lines[#lines + 1] = "unset colorbox"
  if C == 1 then
    lines[#lines + 1] = palette_of(who, opts, "gray")
    lines[#lines + 1] = "set cbrange [0:1]"
    image_lines(lines, planes[1], width, height)
    lines[#lines + 1] = "plot $m matrix using ($1+1):($2+1):3 with image notitle"
  else
    -- x y r g b alpha, padding transparent
    local rows = {}
    for y = 1, height do
      for x = 1, width do
        local r, g, b = planes[1][y][x], planes[2][y][x], planes[3][y][x]
        if r == r then rows[#rows + 1] = { x, y, r, g, b, 1 } else rows[#rows + 1] = { x, y, 0, 0, 0, 0 } end
      end
    end
    lines[#lines + 1] = "set rgbmax 1.0"
    image_lines(lines, rows, width, height)
    lines[#lines + 1] = "plot $m using 1:2:3:4:5:6 with rgbalpha notitle"
  end
  return finish(who, opts, lines)
end

return plot
