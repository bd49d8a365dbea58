-- tl.autograd: custom differentiable functions (function.lua) and gradcheck (gradcheck.lua).
local autograd = {}
for _, part in ipairs({ "tlua.autograd.function", "tlua.autograd.gradcheck" }) do
  for name, value in pairs(require(part)) do autograd[name] = value end
end
return autograd
