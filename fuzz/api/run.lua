-- The tlua API fuzzer: seeded random statements over the Lua face, each logged before it runs, invariants after.
--
--   tlua fuzz/api/run.lua [--seed S] [--statements N] [--seconds T] [--skip f,f.v] [--only f,f.v]
--                         [--log PATH] [--keep-going] [--verbose] [--errors] [--list]
--   tlua fuzz/api/run.lua --replay LOG [--episode N] [--verbose]
--
-- Statements are Lua source made by the makers of fuzz/api/families/*.lua (one table per API area, one
-- entry per statement kind: "family.variant", drawn by the family's weight and then the variant's, 1 unless
-- the family's `weights` says otherwise). They run with load() + pcall in an environment holding tl, the
-- pool V[1..16] of tensors, optimizers O, modules M, the custom Functions F of the prelude, the value checks
-- H, TMP (a fresh folder) and THREADS (the engine's thread count at the start). After each statement: an
-- error must have a clear message and the engine must still compute (a canary); a failed in-place statement
-- must leave its targets unchanged; every live tensor's .grad must have its shape and dtype; the pool's
-- tensors must have sane metadata; the value checks (H:check_*) must agree with Lua. A crash (signal,
-- ASan/UBSan report) ends the process: the last record of the log is the statement that did it.
-- Exit status: 0 without findings, 1 with a finding (the log is kept), 2 for bad usage.
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/families/?.lua;" .. here .. "/../../spec/?.lua;"
  .. package.path

local tl = require("tlua")
local Gen = require("gen")
local Checks = require("checks")
local H = require("reference")
local Log = require("log")

local FAMILY_FILES = { "tensors", "ops", "vocabulary", "sort", "nn", "autograd", "state", "values" }
local POOL, CAP, EPISODE = 16, 100000, 250

-- ---- arguments ---------------------------------------------------------------------------------------------
local usage = [[
usage: tlua fuzz/api/run.lua [options]
  --seed S          seed of the generator (default: from the clock, printed)
  --statements N    stop after N statements (default: no limit; 2000 when --seconds is not given either)
  --seconds T       stop after T seconds
  --skip LIST       leave out families or variants (comma-separated: views,autograd.custom_reentrant)
  --only LIST       run only these families or variants
  --log PATH        write the statement log there (default: a temporary file, removed when nothing was found)
  --keep-going      after a finding, report it and go on (each kind of finding is printed once)
  --verbose         print each statement before it runs
  --errors          print the message of each error a statement raised (to review them)
  --list            list the families and their variants
  --replay LOG      run the statements of a log again, with the same checks
  --episode N       with --replay: run only the prelude and episode N (each episode starts with an empty
                    pool, no files, the first thread count and a seed: it usually replays alone)]]

local function fail_usage(message)
  io.stderr:write("fuzz/api/run.lua: ", message, "\n", usage, "\n")
  os.exit(2)
end

local opts = { skip = {}, only = nil }
do
  local numeric = { seed = true, statements = true, seconds = true, episode = true }
  local i, argv = 1, arg or {}
  while i <= #argv do
    local a = argv[i]
    local key = a:match("^%-%-([%w-]+)$")
    if not key then fail_usage("unexpected argument '" .. a .. "'") end
    key = key:gsub("-", "_")
    if key == "help" then
      print(usage)
      os.exit(0)
    elseif key == "keep_going" or key == "verbose" or key == "list" or key == "errors" then
      opts[key] = true
    elseif key == "skip" or key == "only" or key == "log" or key == "replay" or numeric[key] then
      local value = argv[i + 1]
      if value == nil then fail_usage("--" .. key .. " needs a value") end
      i = i + 1
      if numeric[key] then
        value = math.tointeger(tonumber(value))
        if not value or value < 0 then fail_usage("--" .. key .. " expects an integer >= 0") end
        opts[key] = value
      elseif key == "skip" or key == "only" then
        local set = key == "skip" and opts.skip or (opts.only or {})
        for name in value:gmatch("[^,%s]+") do set[name] = true end
        opts[key] = set
      else
        opts[key] = value
      end
    else
      fail_usage("unknown option --" .. key)
    end
    i = i + 1
  end
end

-- ---- the families ------------------------------------------------------------------------------------------
local families = {}
for _, file in ipairs(FAMILY_FILES) do
  for _, family in ipairs(require(file)) do
    family.names = {}
    for name in pairs(family.variants) do family.names[#family.names + 1] = name end
    table.sort(family.names)
    families[#families + 1] = family
  end
end

if opts.list then
  for _, family in ipairs(families) do print(family.name .. ": " .. table.concat(family.names, " ")) end
  os.exit(0)
end

--- the families and variants this run draws from, after --skip and --only (the weights of the table)
local function selection()
  local choices, known = {}, {}
  for _, family in ipairs(families) do
    known[family.name] = true
    local names = {}
    for _, v in ipairs(family.names) do
      local full = family.name .. "." .. v
      known[full] = true
      local wanted = not opts.only or opts.only[family.name] or opts.only[full]
      if wanted and not opts.skip[family.name] and not opts.skip[full] then
        names[#names + 1] = { (family.weights or {})[v] or 1, v }
      end
    end
    if #names > 0 then choices[#choices + 1] = { family.weight, { family = family, names = names } } end
  end
  for _, option in ipairs { "skip", "only" } do
    for name in pairs(opts[option] or {}) do
      if not known[name] then fail_usage(string.format("--%s: no family or variant '%s'", option, name)) end
    end
  end
  if #choices == 0 then fail_usage("--skip/--only left nothing to run") end
  return choices
end

-- ---- the environment of the statements ---------------------------------------------------------------------
local tmpdir = os.tmpname()
os.remove(tmpdir)
if not os.execute("mkdir -p '" .. tmpdir .. "'") then fail_usage("cannot make a temporary folder") end

local env = setmetatable({ tl = tl, V = {}, O = {}, M = {}, F = {}, TMP = tmpdir, THREADS = tl.get_num_threads() },
  { __index = _G })
local checks = Checks.new(tl, env, { pool = POOL, cap = CAP })
local pending = {} -- findings reported by H:check_* during the current statement
env.H = H.new(tl, function(message) pending[#pending + 1] = message end, tmpdir,
  function(err) return checks:message(err) end)
local gen = Gen.new(tl, env, { pool = POOL, cap = CAP })

-- ---- one statement -------------------------------------------------------------------------------------------
--- runs a record {n, name, targets, src}; returns a finding (a sentence) or nil, and the error it raised
local function run_record(record)
  local snapshots = {}
  for i, target in ipairs(record.targets) do snapshots[i] = checks:snapshot_target(target) end
  pending = {}
  local chunk, syntax = load(record.src, "=stmt", "t", env)
  if not chunk then return "the fuzzer made a statement that does not compile: " .. syntax end
  local ok, err = pcall(chunk)
  local finding
  if not ok then
    finding = (record.src:find("^error%(\"fuzzer bug: ") and err) or checks:message(err) or checks:canary()
    for i, target in ipairs(record.targets) do
      finding = finding or checks:target_unchanged(target, snapshots[i])
    end
  elseif record.n % 25 == 0 or record.name == "prelude" then
    finding = checks:canary()
  end
  finding = finding or pending[1] or checks:grads() or checks:tensors()
  checks:prune()
  return finding, (not ok) and err or nil
end

local function episode_record(n, episode)
  return { n = n, name = "episode", targets = {},
    src = string.format("V, O, M = {}, {}, {}; H:clear_files(); collectgarbage(); tl.set_num_threads(THREADS); " ..
      "tl.manual_seed(%d)", episode) }
end

local choices = (not opts.replay) and selection() or nil

--- the next record; a maker that raises is a bug of the fuzzer, reported as a finding (a record that only
-- raises that error, so that the log shows it)
local function generate(n)
  for _ = 1, 50 do
    local pick = gen:weighted(choices)
    local variant = gen:weighted(pick.names)
    local name = pick.family.name .. "." .. variant
    local ok, src, targets = pcall(pick.family.variants[variant], gen)
    if not ok then
      return { n = n, name = name, targets = {},
        src = "error(" .. Gen.literal("fuzzer bug: the maker raised: " .. tostring(src)) .. ", 0)" }
    end
    if src then return { n = n, name = name, targets = targets or {}, src = src } end
  end
  -- every maker declined (the pool lacks what they need, e.g. under --only views): a fresh tensor for it
  return { n = n, name = "fallback", targets = {},
    src = string.format("%s = %s", gen:target(), gen:fresh(gen:shape(), gen:dtype(), gen:chance(0.3))) }
end

-- ---- the run -------------------------------------------------------------------------------------------------
local found, seen_findings, errors, count = 0, {}, 0, 0
local log_path = opts.log or opts.replay
local seed = opts.seed or (os.time() % 1000000)

local function report(record, finding, err)
  found = found + 1
  local key = record.name .. ": " .. finding:gsub("%d+", "#"):sub(1, 80)
  if seen_findings[key] then return end
  seen_findings[key] = true
  print(string.format("FINDING at statement %d (%s): %s", record.n, record.name, finding))
  print("  statement: " .. record.src:gsub("\n", "\n             "))
  if err ~= nil then print("  its error: " .. tostring(err)) end
end

local function finish()
  os.execute("rm -rf '" .. tmpdir .. "'")
  local kept = found > 0 or opts.log or opts.replay
  print(string.format("api fuzz: %d statements (%d raised errors), %d findings; %s; log %s", count, errors, found,
    opts.replay and "replay" or ("seed " .. seed), kept and log_path or "(removed)"))
  if found > 0 and not opts.replay then
    print(string.format("  replay: fuzz/api/replay %s", log_path))
  end
  env.V, env.O, env.M, env.F, env.H = nil, nil, nil, nil, nil
  os.exit(found > 0 and 1 or 0, true)
end

local function step(record, log)
  if log then log:write(record) end
  if opts.verbose then io.stderr:write(string.format("[%d %s] %s\n", record.n, record.name, record.src)) end
  count = count + 1
  local finding, err = run_record(record)
  if err ~= nil then
    errors = errors + 1
    if opts.errors then print(string.format("error %d %s: %s", record.n, record.name, tostring(err))) end
  end
  if finding then
    report(record, finding, err)
    if not opts.keep_going then finish() end
    return true
  end
  return false
end

if opts.replay then
  local ok, records = pcall(Log.read, opts.replay)
  if not ok then fail_usage(records) end
  local in_episode = not opts.episode
  local episode = 0
  for _, record in ipairs(records) do
    if record.name == "episode" then
      episode = episode + 1
      in_episode = not opts.episode or episode == opts.episode
    end
    if record.name == "prelude" or in_episode then step(record) end
  end
  finish()
end

math.randomseed(seed)
if not opts.log then log_path = os.tmpname() end
local log = Log.create(log_path, {
  string.format("tlua API fuzz log (fuzz/api/run.lua): seed %d, pool %d, cap %d", seed, POOL, CAP),
  "replay: fuzz/api/replay " .. log_path,
})
local limit = opts.statements or (opts.seconds and math.huge or 2000)
local deadline = opts.seconds and tl.clock() + opts.seconds or math.huge
local n, episode = 1, 0
step({ n = n, name = "prelude", targets = {}, src = require("prelude") }, log)
while n < limit and tl.clock() < deadline do
  n = n + 1
  local record
  if (n - 2) % EPISODE == 0 then
    episode = episode + 1
    record = episode_record(n, episode)
  else
    record = generate(n)
  end
  if step(record, log) then -- a finding with --keep-going: start a fresh episode
    n = n + 1
    episode = episode + 1
    step(episode_record(n, episode), log)
  end
end
log:close()
if found == 0 and not opts.log then os.remove(log_path) end
finish()
