-- The API fuzzer's statement log: each record is written and flushed before its statement runs, so a crash
-- leaves the statement that caused it as the last record, and the log replays exactly.
--
-- Format: comment lines first (the header), then records, each a marker line and the statement's source:
--   --@ <number> <family.variant> [targets=<target>,<target>]   (a target: k for V[k], Mk for M[k])
--   V[3]:fill_(2.5)
local Log = {}
Log.__index = Log

--- Log.create(path, header_lines) -> log (raises when the file cannot be written)
function Log.create(path, header)
  local f, err = io.open(path, "w")
  if not f then error("cannot write the log: " .. tostring(err), 0) end
  for _, line in ipairs(header) do f:write("-- ", line, "\n") end
  f:flush()
  return setmetatable({ f = f, path = path }, Log)
end

--- writes a record {n, name, targets, src} and flushes it
function Log:write(record)
  local targets = ""
  if #record.targets > 0 then targets = " targets=" .. table.concat(record.targets, ",") end
  self.f:write(string.format("--@ %d %s%s\n%s\n", record.n, record.name, targets, record.src))
  self.f:flush()
end

function Log:close()
  if self.f then self.f:close() end
  self.f = nil
end

--- Log.read(path) -> list of records {n, name, targets, src}, the header's lines (raises on a bad file)
function Log.read(path)
  local f, err = io.open(path, "r")
  if not f then error("cannot read the log: " .. tostring(err), 0) end
  local records, header, current = {}, {}, nil
  local number = 0
  for line in f:lines() do
    number = number + 1
    local n, name, rest = line:match("^%-%-@ (%d+) (%S+)(.*)$")
    if n then
      current = { n = tonumber(n), name = name, targets = {}, lines = {} }
      for target in (rest:match("targets=(%S+)") or ""):gmatch("[^,]+") do
        current.targets[#current.targets + 1] = math.tointeger(tonumber(target)) or target
      end
      records[#records + 1] = current
    elseif current then
      current.lines[#current.lines + 1] = line
    elseif line:match("^%-%-") then
      header[#header + 1] = line
    elseif line:match("%S") then
      f:close()
      error(string.format("%s:%d: a statement before the first record marker", path, number), 0)
    end
  end
  f:close()
  for _, r in ipairs(records) do
    r.src = table.concat(r.lines, "\n")
    r.lines = nil
  end
  return records, header
end

return Log
