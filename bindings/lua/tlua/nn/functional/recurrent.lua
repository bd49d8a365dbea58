-- tl.nn.functional's recurrent forms (merged into tl.nn.functional by functional.lua).
local part = {}

return part
