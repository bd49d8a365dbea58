-- tl.nn normalization modules (merged into tl.nn by nn/init.lua).
local classes = {}

return classes
