-- tlua.help: help(x) prints the reference's entry for a function, module or name; help() says
-- where to start. The tlua executable makes it the global `help` and turns `?name` into help.
local doc = require("tlua.doc")

local help = {}

local START = [[
tlua: tensors, autograd, nn, optim and data in Lua (tl is loaded).

  help(tl.cat)          the entry of a function, module or class (help(tl.nn.Linear))
  help("nn.Conv2d")     the same by name ("cat", "Tensor:view", "optim.AdamW")
  ?tl.cat               the same, typed at the prompt
  help("tl")            the modules: tl, tl.nn, tl.nn.functional, tl.optim, tl.data,
                        tl.autograd, tl.distributed, tl.cuda, tlua.cli, tlua.plot

Start with docs/tutorial.md (tensors, autograd, a module, a training loop, a checkpoint,
the GPU) and docs/torch.md (what differs from PyTorch and Torch7). The whole reference is
docs/reference/README.md; Tab completes names (tl.nn.<Tab>, x:<Tab>).]]

--- help.text(x) -> what help(x) prints, as a string
function help.text(x)
  if x == nil then return START end
  local entry, near = doc.find(x)
  if entry then return doc.text(entry) end
  local what = type(x) == "string" and string.format("%q", x) or ("this " .. type(x))
  local message = "help: no entry for " .. what
  if near and #near > 0 then message = message .. " (did you mean " .. table.concat(near, ", ") .. "?)" end
  return message
end

--- help.help(x) prints the entry of x (a function, module, class or name), or where to start
function help.help(x)
  print(help.text(x))
end

return help
