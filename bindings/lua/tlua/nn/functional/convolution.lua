-- tl.nn.functional's convolution forms (merged into tl.nn.functional by functional.lua).
local part = {}

return part
