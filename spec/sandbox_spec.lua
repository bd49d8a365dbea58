-- The embedding sandbox's allow-list (tlua/sandbox.lua): every public name of tl is allowed, granted or denied there, no entry names something gone, and the view a configuration gets holds exactly the allowed names (plus the granted ones with their grants).
local tl = require("tlua")
local sandbox = require("tlua.sandbox")

local submodules = { "nn", "optim", "autograd", "data", "cuda", "distributed" }

-- every public name of tl (submodules loaded), without the op table's rows and their in-place forms
local function public_names()
  for _, name in ipairs(submodules) do local _ = tl[name] end
  local ops, names = sandbox.op_names(tl), {}
  for name in pairs(tl) do
    if not ops[name] and not name:match("^_") then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

describe("the sandbox's allow-list", function()
  it("classifies every public name of tl as allowed, granted or denied", function()
    local allowed = set_of(sandbox.allowed)
    local unclassified = {}
    for _, name in ipairs(public_names()) do
      if not (allowed[name] or sandbox.granted[name] or sandbox.denied[name]) then
        unclassified[#unclassified + 1] = name
      end
    end
    assert.are.same({}, unclassified,
      "add these names to tlua/sandbox.lua (allowed, granted or denied): " .. table.concat(unclassified, ", "))
  end)

  it("names nothing that no longer exists", function()
    local stale = {}
    for _, name in ipairs(sandbox.allowed) do
      if tl[name] == nil then stale[#stale + 1] = name end
    end
    for name in pairs(sandbox.granted) do
      if tl[name] == nil then stale[#stale + 1] = name end
    end
    for name in pairs(sandbox.denied) do
      if not package.searchpath("tlua." .. name, package.path) then stale[#stale + 1] = name end
    end
    assert.are.same({}, stale)
  end)

  it("gives a view of the allowed names, and the granted ones only with their grants", function()
    local none = sandbox.view(tl, {})
    local all = sandbox.view(tl, { read = true, write = true, network = true })
    for _, name in ipairs(sandbox.allowed) do
      assert.is_not_nil(none[name], name)
    end
    for name in pairs(sandbox.granted) do
      assert.is_nil(none[name], name .. " without its grant")
      assert.is_not_nil(all[name], name .. " with its grant")
    end
    for name in pairs(none) do
      assert.is_nil(name:match("^_"), "an internal name in the view: " .. name)
    end
    assert.is_nil(none.cuda.set_device)
    assert.is_nil(none.data.read_idx)
    assert.are.equal(tl.data.read_idx, all.data.read_idx)
    -- tl.checkpoint: load and read with the read grant, save with the write grant
    assert.is_nil(none.checkpoint.save)
    assert.is_nil(none.checkpoint.load)
    local read_only = sandbox.view(tl, { read = true })
    assert.are.equal(tl.checkpoint.load, read_only.checkpoint.load)
    assert.are.equal(tl.checkpoint.read, read_only.checkpoint.read)
    assert.is_nil(read_only.checkpoint.save)
    assert.are.equal(tl.checkpoint.save, sandbox.view(tl, { write = true }).checkpoint.save)
    local classified = {}
    for _, name in ipairs({ "read", "load", "save" }) do classified[name] = true end
    for name in pairs(tl.checkpoint) do
      assert.is_true(classified[name] or name:match("^_") ~= nil, "tl.checkpoint." .. name .. " is not classified")
    end
    assert.are.equal(tl.add, none.add)
    assert.are.equal(tl.add_, none.add_)
  end)
end)
