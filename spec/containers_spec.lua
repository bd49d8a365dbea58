-- tl.nn containers: Sequential:add, ModuleList append/extend/insert/pop (state_dict keys renumbered), ModuleDict, and the walks (named_parameters, named_modules, children) against torch's orders.
local tl = require("tlua")
local nn = tl.nn

local NAMES = dofile("spec/goldens/containers_names.lua") -- /usr/bin/python3 spec/goldens/containers_names.py

local function collect(iterator)
  local names, values = {}, {}
  for name, value in iterator do
    names[#names + 1] = name
    values[#values + 1] = value
  end
  return names, values
end

-- "name:shape" of every entry of a state dict, in order
local function described(sd)
  local out = {}
  for _, name in ipairs(nn.keys(sd)) do out[#out + 1] = name .. ":" .. table.concat(sd[name].shape, "x") end
  return out
end

describe("nn.Sequential", function()
  it("add (Torch7's name) appends and returns the container, so calls chain", function()
    local seq = nn.Sequential()
    assert.are.equal(seq, seq:add(nn.Linear(3, 4)):add(nn.ReLU()))
    seq:append(nn.Linear(4, 2))
    assert.are.equal(3, #seq)
    assert.are.same({ "Linear", "ReLU", "Linear" }, { seq[1]._class_name, seq[2]._class_name, seq[3]._class_name })
    local x = tl.randn(5, 3)
    assert.tensor_equal(seq[3](seq[2](seq[1](x))), seq(x))
    assert.are.same({ "1.weight:4x3", "1.bias:4", "3.weight:2x4", "3.bias:2" }, described(seq:state_dict()))
    assert.error_matches(function() seq:add(tl.ones(2)) end, { "nn.Sequential:append: the argument expected a module" })
  end)

  it("insert, extend and pop keep the modules numbered from 1", function()
    local a, b, c = nn.Linear(1, 1), nn.Linear(1, 1), nn.Linear(1, 1)
    local seq = nn.Sequential(a)
    seq:insert(1, b):extend({ c })
    assert.are.same({ b, a, c }, { seq[1], seq[2], seq[3] })
    assert.are.equal(a, seq:pop(2))
    assert.are.same({ b, c }, { seq[1], seq[2] })
    assert.is_nil(rawget(seq, 3))
    assert.are.equal(c, seq:pop())
    assert.are.equal(1, #seq)
  end)
end)

describe("nn.ModuleList", function()
  it("append, extend and insert renumber the entries and their state_dict keys as torch does", function()
    local list = nn.ModuleList({ nn.Linear(1, 2), nn.Linear(2, 3) })
    local first, second = list[1], list[2]
    list:insert(1, nn.Linear(5, 1))
    list:insert(3, nn.Linear(7, 1))
    assert.are.equal(list, list:extend(nn.ModuleList({ nn.Linear(3, 4) })))
    list:append(nn.Linear(4, 5))
    assert.are.same(NAMES.list_state_dict, described(list:state_dict()))
    assert.are.equal(6, #list)
    assert.are.equal(first, list[2])
    assert.are.equal(second, list[4])
    local seen = {}
    for i, m in ipairs(list) do seen[i] = m end
    assert.are.equal(6, #seen)
    -- the keys follow the modules: "2.weight" is the first module's weight
    local sd = list:state_dict()
    assert.tensor_equal(first.weight, sd["2.weight"])
    assert.tensor_equal(second.bias, sd["4.bias"])
    assert.are.same(list:parameters(), (function()
      local out = {}
      for _, m in ipairs(list) do
        out[#out + 1] = m.weight
        out[#out + 1] = m.bias
      end
      return out
    end)())
    -- a state dict saved before the insert loads into a list built in the new order
    local old = nn.ModuleList({ nn.Linear(1, 2), nn.Linear(2, 3) })
    local old_sd = old:state_dict()
    old:insert(2, nn.Linear(2, 2))
    local before = old:state_dict()
    local fresh = nn.ModuleList({ nn.Linear(1, 2), nn.Linear(2, 2), nn.Linear(2, 3) })
    fresh:load_state_dict(before)
    assert.tensor_equal(old_sd["2.weight"], fresh[3].weight)
    assert.tensor_equal(old_sd["1.bias"], fresh[1].bias)
  end)

  it("extend takes a list, a ModuleList or a Sequential; pop removes and renumbers", function()
    local list = nn.ModuleList()
    list:extend({ nn.ReLU() }):extend(nn.Sequential(nn.Tanh(), nn.Linear(2, 2))):extend({})
    assert.are.same({ "ReLU", "Tanh", "Linear" }, { list[1]._class_name, list[2]._class_name, list[3]._class_name })
    local tanh = list:pop(2)
    assert.are.equal("Tanh", tanh._class_name)
    assert.are.same({ "1", "2" }, (collect(list:named_children())))
    assert.are.same({ "2.weight", "2.bias" }, nn.keys(list:state_dict()))
  end)

  it("refuses what is not a module or an index, changing nothing", function()
    local list = nn.ModuleList({ nn.ReLU(), nn.Tanh() })
    assert.error_matches(function() list:insert(4, nn.ReLU()) end,
      { "nn.ModuleList:insert: index must be an integer in [1, 3], got 4" })
    assert.error_matches(function() list:insert(0, nn.ReLU()) end, { "nn.ModuleList:insert", "got 0" })
    assert.error_matches(function() list:insert(1.5, nn.ReLU()) end, { "nn.ModuleList:insert", "got 1.5" })
    assert.error_matches(function() list:insert(1, "relu") end,
      { "nn.ModuleList:insert: argument 2 expected a module, got string" })
    assert.error_matches(function() list:extend({ nn.ReLU(), 3 }) end,
      { "nn.ModuleList:extend: entry 2 expected a module, got number" })
    assert.error_matches(function() list:extend(nn.Linear(2, 2)) end, { "nn.ModuleList:extend", "Linear" })
    assert.error_matches(function() list:extend(5) end, { "nn.ModuleList:extend", "number" })
    assert.error_matches(function() list:append({}) end, { "nn.ModuleList:append: the argument expected a module" })
    assert.error_matches(function() list:pop(3) end, { "nn.ModuleList:pop: index must be an integer in [1, 2], got 3" })
    assert.are.equal(2, #list)
    assert.are.same({ "ReLU", "Tanh" }, { list[1]._class_name, list[2]._class_name })
    assert.error_matches(function() list(tl.ones(1)) end, { "nn.ModuleList", "no forward" })
  end)
end)

describe("nn.ModuleDict", function()
  it("holds modules by name in insertion order: dict[name], keys, values, items, pairs, #", function()
    local enc, dec = nn.Linear(2, 3), nn.Linear(3, 2)
    local dict = nn.ModuleDict({ { "enc", enc }, { "dec", dec } })
    assert.are.equal(enc, dict.enc)
    assert.are.equal(dec, dict["dec"])
    assert.are.same({ "enc", "dec" }, dict:keys())
    assert.are.same({ enc, dec }, dict:values())
    assert.are.same({ "enc", "dec" }, (collect(dict:items())))
    local names, modules = {}, {}
    for name, m in pairs(dict) do
      names[#names + 1] = name
      modules[#modules + 1] = m
    end
    assert.are.same({ "enc", "dec" }, names)
    assert.are.same({ enc, dec }, modules)
    assert.are.equal(2, #dict)
    assert.is_true(dict:contains("enc"))
    assert.is_false(dict:contains("keys"))
    assert.are.same({ "enc.weight:3x2", "enc.bias:3", "dec.weight:2x3", "dec.bias:2" }, described(dict:state_dict()))
    assert.are.same({ enc.weight, enc.bias, dec.weight, dec.bias }, dict:parameters())
    -- a new field is an entry at the end
    dict.act = nn.ReLU()
    assert.are.same({ "enc", "dec", "act" }, dict:keys())
    assert.are.same({ "", "enc", "dec", "act" }, (collect(dict:named_modules())))
    -- a table name -> module comes in sorted order of the names; another ModuleDict in its order
    assert.are.same({ "a", "b", "c" }, nn.ModuleDict({ c = nn.ReLU(), a = nn.ReLU(), b = nn.ReLU() }):keys())
    assert.are.same({ "enc", "dec", "act" }, nn.ModuleDict(dict):keys())
    assert.are.same({}, nn.ModuleDict():keys())
    assert.error_matches(function() dict(tl.ones(1)) end, { "nn.ModuleDict", "no forward" })
  end)

  it("update keeps a name's place and replaces its module, as torch; pop and clear remove", function()
    local dict = nn.ModuleDict({ b = nn.Linear(4, 2) })
    dict:update({ { "a", nn.Linear(4, 2) } })
    dict.c = nn.Linear(4, 2)
    assert.are.same(NAMES.heads_keys, dict:keys())
    local replacement = nn.Tanh()
    assert.are.equal(dict, dict:update({ { "b", replacement }, { "d", nn.ReLU() } }))
    assert.are.same({ "b", "a", "c", "d" }, dict:keys())
    assert.are.equal(replacement, dict.b)
    assert.are.same({ "a.weight", "a.bias", "c.weight", "c.bias" }, nn.keys(dict:state_dict()))
    local a = dict.a
    assert.are.equal(a, dict:pop("a"))
    assert.is_nil(rawget(dict, "a"))
    assert.are.same({ "b", "c", "d" }, dict:keys())
    assert.are.same({ "c.weight", "c.bias" }, nn.keys(dict:state_dict()))
    dict:update(nn.ModuleDict({ { "e", nn.ReLU() } }))
    assert.are.same({ "b", "c", "d", "e" }, dict:keys())
    assert.are.equal(dict, dict:clear())
    assert.are.same({}, dict:keys())
    assert.are.equal(0, #dict)
    assert.is_nil(rawget(dict, "c"))
  end)

  it("refuses names that are not strings, hold a '.', or would hide its methods and fields", function()
    local dict = nn.ModuleDict({ { "x", nn.ReLU() } })
    assert.error_matches(function() nn.ModuleDict({ ["a.b"] = nn.ReLU() }) end,
      { "nn.ModuleDict: the name 'a.b' is empty or holds a '.'" })
    assert.error_matches(function() nn.ModuleDict({ { "", nn.ReLU() } }) end, { "nn.ModuleDict: the name ''" })
    for _, name in ipairs({ "keys", "forward", "training", "update", "parameters", "_module_keys", "_x" }) do
      assert.error_matches(function() nn.ModuleDict({ { name, nn.ReLU() } }) end,
        { "nn.ModuleDict: the name '" .. name .. "' would hide the ModuleDict's own '" .. name .. "'" })
    end
    assert.error_matches(function() dict.keys = nn.ReLU() end, { "nn.ModuleDict: the name 'keys' would hide" })
    assert.error_matches(function() dict:update({ { 1, nn.ReLU() } }) end,
      { "nn.ModuleDict:update: a name must be a string, got number" })
    assert.error_matches(function() dict:update({ { "y", 5 } }) end,
      { "nn.ModuleDict:update: 'y' expected a module, got number" })
    assert.error_matches(function() dict:update({ { "y", nn.ReLU() }, nn.ReLU() }) end,
      { "nn.ModuleDict:update: entry 2 expected a {name, module} pair, got a module" })
    assert.error_matches(function() dict:update({ { "y", nn.ReLU() }, z = nn.ReLU() }) end,
      { "nn.ModuleDict:update", "named entry 'z'" })
    assert.error_matches(function() dict:update(nn.Linear(1, 1)) end, { "nn.ModuleDict:update", "Linear" })
    assert.error_matches(function() dict:update("x") end, { "nn.ModuleDict:update", "got string" })
    assert.error_matches(function() dict:pop("nope") end, { "nn.ModuleDict:pop: no entry 'nope' (entries: x)" })
    assert.are.same({ "x" }, dict:keys()) -- the refused updates added nothing
  end)
end)

describe("the walks of a module tree", function()
  -- torch's Net of spec/goldens/containers_names.py, built the same way
  local function net()
    local Net = nn.Module:extend("WalkNet")
    function Net:init()
      self.scale = tl.ones(4, { dtype = "float64" }):requires_grad_()
      self.encoder = nn.Linear(3, 4)
      self.blocks = nn.ModuleList({ nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()) })
      self.heads = nn.ModuleDict({ b = nn.Linear(4, 2) })
      self.heads:update({ { "a", nn.Linear(4, 2) } })
      self.heads.c = nn.Linear(4, 2)
      self.alias = self.encoder -- a module reachable by two paths
      self.heads.c.weight = self.heads.b.weight -- tied weights
    end
    return Net()
  end

  it("named_parameters, named_modules and named_children walk in torch's order, shared ones once", function()
    local m = net()
    local names, tensors = collect(m:named_parameters())
    assert.are.same(NAMES.named_parameters, names)
    assert.are.same(m:parameters(), tensors)
    local module_names, modules = collect(m:named_modules())
    assert.are.same(NAMES.named_modules, module_names)
    assert.are.same(m:modules(), modules)
    local child_names, children = collect(m:named_children())
    assert.are.same(NAMES.named_children, child_names)
    assert.are.same(m:children(), children)
    assert.are.equal(m.encoder, children[1])
    -- every named parameter is the tensor its module holds under that name
    local by_name = {}
    for i, name in ipairs(module_names) do by_name[name] = modules[i] end
    for i, name in ipairs(names) do
      local owner, key = name:match("^(.*)%.([^.]+)$")
      if not owner then owner, key = "", name end
      assert.are.equal(tensors[i], rawget(by_name[owner], tonumber(key) or key), name)
    end
  end)

  it("apply and train reach each module once, in the walk's order (children before parents for apply)", function()
    local m = net()
    local order = {}
    m:apply(function(mod) order[#order + 1] = mod end)
    local modules = m:modules()
    assert.are.equal(#modules, #order)
    assert.are.equal(m, order[#order])
    m:eval()
    for _, mod in ipairs(modules) do assert.is_false(mod.training) end
  end)
end)
