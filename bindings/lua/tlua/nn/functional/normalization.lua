-- tl.nn.functional's normalization forms (merged into tl.nn.functional by functional.lua).
local part = {}

return part
