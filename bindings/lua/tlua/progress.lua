-- tlua.progress: a one-line progress bar for training loops. On a terminal the line is redrawn
-- in place (\r); otherwise (a pipe, a log file) plain lines are printed every `every` seconds
-- and at the end. TLUA_PROGRESS=tty|plain|off overrides the detection. In a data-parallel job
-- (tlua --nproc N) only rank 0 draws: the other ranks' bars are off unless opts.all_ranks.
--
--   local progress = require("tlua.progress")
--   local bar = progress.new { total = #loader, label = "epoch 1/5" }
--   for i, x, y in loader:enumerate() do ...; bar:update(i, { loss = l, acc = a, samples = n }) end
--   bar:finish()
local tl = require("tlua")
local options = require("tlua.options")

local progress = {}

local tty_cache

--- is_tty(): whether stdout is a terminal (asked once, through `test -t 1`)
function progress.is_tty()
  if tty_cache == nil then
    local mode = os.getenv("TLUA_PROGRESS")
    if mode == "tty" then
      tty_cache = true
    elseif mode == "plain" or mode == "off" then
      tty_cache = false
    else
      local ok = os.execute("test -t 1")
      tty_cache = ok == true or ok == 0
    end
  end
  return tty_cache
end

local function duration(seconds)
  if seconds ~= seconds or seconds == math.huge then return "?" end
  seconds = math.floor(seconds + 0.5)
  if seconds >= 3600 then
    return string.format("%d:%02d:%02d", seconds // 3600, seconds % 3600 // 60, seconds % 60)
  end
  return string.format("%d:%02d", seconds // 60, seconds % 60)
end

local Bar = {}
Bar.__index = Bar

-- the options of new and the stats of update and finish (tlua.options)
local NEW_OPTIONS = { total = "any", label = "string", width = "integer", out = "any", every = "number",
  tty = "boolean", unit = "string", rate = "string", all_ranks = "boolean" }
local UPDATE_STATS = { loss = "number", acc = "number", samples = "number" }
local FINISH_STATS = { loss = "number", acc = "number" }

--- new{total = n, label = "epoch 1/5", width = 24, out = io.stdout, every = 5 (s, plain mode),
-- tty = auto, unit = "batch" (what i counts), rate = "samples" (what update's samples count),
-- all_ranks = false (draw on every rank of a data-parallel job, not only rank 0)}

function progress.new(opts)
  opts = options.check(opts, "progress.new", NEW_OPTIONS, 2)
  if math.type(opts.total) ~= "integer" or opts.total < 0 then
    options.error("progress.new: total must be an integer >= 0, got " .. tostring(opts.total), 2)
  end
  local tty = opts.tty
  if tty == nil then tty = progress.is_tty() end
  local off = os.getenv("TLUA_PROGRESS") == "off" and opts.tty == nil
  if not opts.all_ranks and not tl.distributed.is_main() then off = true end
  return setmetatable({
    total = opts.total, label = opts.label or "", width = opts.width or 24, out = opts.out or io.stdout,
    every = opts.every or 5, tty = tty, off = off, start = tl.clock(), last_print = -math.huge,
    samples = 0, i = 0, stats = {}, last_len = 0, unit = opts.unit or "batch", rate = opts.rate or "samples",
  }, Bar)
end

function Bar:_line(final)
  local elapsed = tl.clock() - self.start
  local fraction = self.total > 0 and self.i / self.total or 1
  local parts = { self.label ~= "" and self.label or nil }
  if self.tty then
    local filled = math.floor(fraction * self.width + 0.5)
    parts[#parts + 1] = "[" .. string.rep("=", filled) .. string.rep(" ", self.width - filled) .. "]"
  end
  local digits = #tostring(self.total)
  parts[#parts + 1] = string.format("%s %" .. digits .. "d/%d", self.unit, self.i, self.total)
  local s = self.stats
  if s.loss then parts[#parts + 1] = string.format("loss %.4f", s.loss) end
  if s.acc then parts[#parts + 1] = string.format("acc %.2f%%", 100 * s.acc) end
  if self.samples > 0 and elapsed > 0 then
    parts[#parts + 1] = string.format("%.0f %s/s", self.samples / elapsed, self.rate)
  end
  if final then
    parts[#parts + 1] = "time " .. duration(elapsed)
  else
    local eta = fraction > 0 and elapsed * (1 - fraction) / fraction or math.huge
    parts[#parts + 1] = "ETA " .. duration(eta)
  end
  return table.concat(parts, "  ")
end

function Bar:_draw(final)
  if self.off then return end
  local line = self:_line(final)
  if self.tty then
    local pad = self.last_len > #line and string.rep(" ", self.last_len - #line) or ""
    self.out:write("\r", line, pad, final and "\n" or "")
    self.last_len = #line
  else
    self.out:write(line, "\n")
  end
  self.out:flush()
end

--- update(i, {loss =, acc = (a fraction), samples = (processed in this step)}): batch i done
function Bar:update(i, stats)
  self.i = i
  if stats then
    options.check(stats, "progress.Bar:update", UPDATE_STATS, 2)
    for k, v in pairs(stats) do
      if k == "samples" then self.samples = self.samples + v else self.stats[k] = v end
    end
  end
  local now = tl.clock()
  local interval = self.tty and 0.1 or self.every
  if now - self.last_print >= interval and i < self.total then
    self.last_print = now
    self:_draw(false)
  end
end

--- clear(): erases the bar's line on a terminal, so that a print starts on a clean line (the
--- next update draws the bar again)
function Bar:clear()
  if self.off or not self.tty or self.last_len == 0 then return end
  self.out:write("\r", string.rep(" ", self.last_len), "\r")
  self.out:flush()
  self.last_len = 0
end

--- finish(stats?): the final line (with the elapsed time); returns the elapsed seconds
function Bar:finish(stats)
  if stats then
    options.check(stats, "progress.Bar:finish", FINISH_STATS, 2)
    for k, v in pairs(stats) do self.stats[k] = v end
  end
  self:_draw(true)
  return tl.clock() - self.start
end

return progress
