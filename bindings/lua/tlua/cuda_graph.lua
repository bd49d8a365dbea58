-- tl.cuda.graph: a function of tensors (a whole training step) captured into a CUDA graph once and replayed.
local core = require("tlua.core")
local options = require("tlua.options")

local is_tensor = core.is_tensor

local graph = {}

local Graph = {}
Graph.__index = Graph

local capturing = nil -- the Graph whose capture runs now (captures do not nest)

local GRAPH_OPTIONS = { warmup = "integer", device = "integer|string" }

local function shape_text(t) return "[" .. table.concat(t.shape, ", ") .. "]" end

-- the argument list of a call as the graph keeps it: tensors copied into its own (static) ones
local function static_inputs(args)
  local statics = {}
  for i = 1, args.n do
    local a = args[i]
    statics[i] = is_tensor(a) and a:detach():clone() or a
  end
  statics.n = args.n
  return statics
end

-- copies the arguments of a replay into the static inputs, after checking they match
local function load_inputs(self, args)
  local statics = self._inputs
  if args.n ~= statics.n then
    options.error(string.format("tl.cuda.graph: the step was captured with %d arguments, got %d", statics.n, args.n), 3)
  end
  for i = 1, args.n do
    local a, s = args[i], statics[i]
    if is_tensor(s) then
      if not is_tensor(a) then
        options.error(string.format("tl.cuda.graph: argument %d was a tensor at capture, got %s", i, type(a)), 3)
      end
      if shape_text(a) ~= shape_text(s) then
        options.error(string.format("tl.cuda.graph: argument %d has shape %s, the captured step took %s (a graph replays "
          .. "one shape: capture another graph for this one)", i, shape_text(a), shape_text(s)), 3)
      end
      if a.dtype ~= s.dtype then
        options.error(string.format("tl.cuda.graph: argument %d is %s, the captured step took %s", i, a.dtype, s.dtype), 3)
      end
      if a ~= s then s:copy_(a) end
    elseif a ~= s then
      options.error(string.format("tl.cuda.graph: argument %d was %s at capture, got %s (a replay runs with the values it "
        .. "was captured with; pass numbers that change as tensors)", i, tostring(s), tostring(a)), 3)
    end
  end
end

local function run_hooks(self)
  for _, hook in ipairs(self._hooks) do hook() end
end

local function capture(self, args)
  self._inputs = static_inputs(args)
  self._hooks = {}
  -- dead tensors freed now, not kept from reuse while the graph lives (their blocks might be read)
  collectgarbage("collect")
  -- the capture begins and ends inside _cuda_graph_capture, whatever fn does
  capturing = self
  local results = table.pack(pcall(core._cuda_graph_capture, self.device, self.fn,
    table.unpack(self._inputs, 1, self._inputs.n)))
  capturing = nil
  local handle = results[1] and results[2]
  if not handle then
    self._inputs, self._hooks = nil, nil
    local why = results[1] and results[3] or results[2]
    options.error("tl.cuda.graph: the capture failed: " .. tostring(why):gsub("^graph: ", ""), 3)
  end
  self._handle = handle
  self._outputs = table.pack(table.unpack(results, 3, results.n))
  self.captured = true
end

--- graph(fn, {warmup = 1, device}) -> g: fn (a function of tensors and other values, e.g. a whole training
-- step: forward, backward, clipping, optimizer step) run eagerly for the first `warmup` calls of g (which make
-- the optimizer's state and the gradients), captured into a CUDA graph at the next and replayed from then on:
-- g(...) copies its tensor arguments into the graph's own inputs (same shapes and dtypes as at capture; other
-- arguments must equal the captured ones) and returns fn's results at capture, the same tensors each time,
-- overwritten by every replay (clone one to keep it). The captured call runs fn once to record it, then
-- replays it, so every call of g runs the step once.
-- Inside fn, anything the host would wait for (item, a copy to the CPU, a size read back), a copy of host
-- values to the GPU, and new optimizer state raise an error naming the op; the capture then fails and g stays
-- uncaptured. Random draws (dropout) take fresh numbers at each replay. An optimizer's lr may change between
-- replays (a scheduler); its other options may not. device: the GPU (default the current one).
function graph.graph(fn, opts)
  if type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    options.error("tl.cuda.graph: argument 1 expected a function, got " .. type(fn), 2)
  end
  opts = options.check(opts, "tl.cuda.graph", GRAPH_OPTIONS, 2)
  local warmup = opts.warmup or 1
  if warmup < 0 then options.error("tl.cuda.graph: warmup must be >= 0, got " .. warmup, 2) end
  local device = opts.device
  if type(device) == "string" then
    local index = device == "cuda" and core._cuda_current_device() or tonumber(device:match("^cuda:(%d+)$"))
    if not index then options.error("tl.cuda.graph: device must be a CUDA device, got '" .. device .. "'", 2) end
    device = index
  end
  device = device or core._cuda_current_device()
  if device >= core.cuda_device_count() then
    options.error(string.format("tl.cuda.graph: cuda:%d is not available (%d CUDA device%s%s)", device, core.cuda_device_count(),
      core.cuda_device_count() == 1 and "" or "s", core._cuda_is_available() and "" or
      "; this build has no CUDA support or no GPU is present"), 2)
  end
  return setmetatable({ fn = fn, warmup = warmup, device = device, calls = 0,
    captured = false }, Graph)
end

function Graph:__call(...)
  local args = table.pack(...)
  self.calls = self.calls + 1
  if not self.captured then
    if self.calls <= self.warmup then return self.fn(...) end
    if capturing then options.error("tl.cuda.graph: a graph cannot be called while another is being captured", 2) end
    capture(self, args)
  else
    load_inputs(self, args)
  end
  return self:replay()
end

--- g:replay(): one more replay with the inputs as they are (after the replay hooks)
function Graph:replay()
  if not self.captured then options.error("tl.cuda.graph: replay of a graph that was not captured", 2) end
  run_hooks(self)
  core._cuda_graph_replay(self._handle)
  return table.unpack(self._outputs, 1, self._outputs.n)
end

--- g:reset(): frees the graph and its memory; the next call captures again
function Graph:reset()
  if self._handle then core._cuda_graph_destroy(self._handle) end
  self._handle, self._inputs, self._outputs, self._hooks, self.captured = nil, nil, nil, nil, false
end

--- is_capturing(device?): true while a graph captures the device (default: the current one)
function graph.is_capturing(device) return core._cuda_is_capturing(device) end

--- on_replay(fn): inside a captured function, runs fn before every replay of the graph (what the host must
-- do at each step: write an optimizer's lr and step count where the captured kernels read them); an error
-- outside a capture
function graph.on_replay(fn)
  if not capturing then options.error("tl.cuda.on_replay: called outside a tl.cuda.graph capture", 2) end
  if type(fn) ~= "function" then options.error("tl.cuda.on_replay: argument 1 expected a function, got " .. type(fn), 2) end
  local hooks = capturing._hooks
  hooks[#hooks + 1] = fn
end

return graph
