-- tl.nn.functional's losses forms (merged into tl.nn.functional by functional.lua).
local part = {}

return part
