-- tl.nn.functional's convolutions: conv1d, conv2d, conv_transpose1d, conv_transpose2d over the engine's 2-D ops, with padding "same" / "valid" and unbatched inputs.
local tl = require("tlua")
local options = require("tlua.options")

local part = {}

local CONV = { stride = "integer|table", padding = "integer|table|string", dilation = "integer|table",
  groups = "integer" }
local CONV_TRANSPOSE = { stride = "integer|table", padding = "integer|table", output_padding = "integer|table",
  dilation = "integer|table", groups = "integer" }

-- v (an integer or a table of n integers) as a table of n integers, or an error naming who and what
local function tuple(v, n, what, who)
  if math.type(v) == "integer" then
    local out = {}
    for i = 1, n do out[i] = v end
    return out
  end
  if type(v) == "table" and #v == n then
    local out = {}
    for i = 1, n do
      if math.type(v[i]) ~= "integer" then break end
      out[i] = v[i]
    end
    if #out == n then return out end
  end
  local shape = n == 1 and "an integer or {l}" or "an integer or {h, w}"
  options.error(string.format("%s: %s must be %s, got %s", who, what, shape,
    type(v) == "table" and ("a table of " .. #v) or tostring(v)), 3)
end
part._tuple = tuple

-- The symmetric padding the 2-D op takes, and the extra F.pad (torch's order: the last dim first)
-- "same" needs when a dim's total padding dilation (k - 1) is odd (the extra goes after, as
-- torch); kernel and dilation are per spatial dim ({kw} for 1-D: n = 1)
function part._resolve_padding(padding, kernel, stride, dilation, n, who)
  if padding == "valid" then return tuple(0, n), nil end
  if padding == "same" then
    for i = 1, n do
      if stride[i] ~= 1 then
        options.error(who .. ": padding 'same' needs stride 1, got stride " .. stride[i], 3)
      end
    end
    local sym, extra, any = {}, {}, false
    for i = 1, n do
      local total = dilation[i] * (kernel[i] - 1)
      sym[i] = total // 2
      local odd = total - 2 * sym[i]
      extra[2 * (n - i) + 1], extra[2 * (n - i) + 2] = 0, odd
      any = any or odd > 0
    end
    return sym, any and extra or nil
  end
  if type(padding) == "string" then
    options.error(string.format("%s: padding must be an integer, a table, 'same' or 'valid', got '%s'", who,
      padding), 3)
  end
  return tuple(padding, n, "padding", who), nil
end

-- x with a leading batch dim of 1 when it has dims (an unbatched input), and whether it was added
local function batched(x, dims, who, what)
  local nd = x:dim()
  if nd == dims then return x, false end
  if nd == dims - 1 then return x:unsqueeze(1), true end
  options.error(string.format("%s: %s must have %d dims (batched) or %d (unbatched), got shape [%s]", who, what,
    dims, dims - 1, table.concat(x.shape, ", ")), 3)
end

local function bias_and_opts(bias, opts)
  if type(bias) == "table" and not tl.is_tensor(bias) then return nil, bias end
  return bias, opts
end

-- runs the 2-D op over spatial dims n (1: [N, C, L] as [N, C, 1, L]) with the table options
local function conv_nd(n, transposed, input, weight, bias, opts)
  local who = (transposed and "conv_transpose" or "conv") .. n .. "d"
  bias, opts = bias_and_opts(bias, opts)
  opts = options.check(opts, who, transposed and CONV_TRANSPOSE or CONV)
  local x, unbatched = batched(input, n + 2, who, "input")
  if weight:dim() ~= n + 2 then
    options.error(string.format("%s: weight must have %d dims, got shape [%s]", who, n + 2,
      table.concat(weight.shape, ", ")), 2)
  end
  local stride = tuple(opts.stride or 1, n, "stride", who)
  local dilation = tuple(opts.dilation or 1, n, "dilation", who)
  local kernel = {}
  for i = 1, n do kernel[i] = weight.shape[2 + i] end
  local padding, extra
  if transposed then
    padding = tuple(opts.padding or 0, n, "padding", who)
  else
    padding, extra = part._resolve_padding(opts.padding or 0, kernel, stride, dilation, n, who)
  end
  if extra then x = tl.pad(x, extra) end
  local o = { stride = stride, padding = padding, dilation = dilation, groups = opts.groups or 1 }
  if transposed then o.output_padding = tuple(opts.output_padding or 0, n, "output_padding", who) end
  local w = weight
  if n == 1 then
    x, w = x:unsqueeze(3), w:unsqueeze(3)
    for _, key in ipairs({ "stride", "padding", "dilation", "output_padding" }) do
      if o[key] then o[key] = { key == "stride" and 1 or (key == "dilation" and 1 or 0), o[key][1] } end
    end
  end
  local y = transposed and tl.conv_transpose2d(x, w, bias, o) or tl.conv2d(x, w, bias, o)
  if n == 1 then y = y:squeeze(3) end
  if unbatched then y = y:squeeze(1) end
  return y
end

--- conv2d(input [N, C, H, W] or [C, H, W], weight [O, C / groups, kh, kw], bias [O]?,
-- {stride = 1, padding = 0 (an integer, {h, w}, "same" or "valid"), dilation = 1, groups = 1})
-- -> [N, O, OH, OW], OH = (H + 2 padding - dilation (kh - 1) - 1) // stride + 1
function part.conv2d(input, weight, bias, opts) return conv_nd(2, false, input, weight, bias, opts) end

--- conv1d(input [N, C, L] or [C, L], weight [O, C / groups, k], bias [O]?, {stride = 1,
-- padding = 0 (an integer, "same" or "valid"), dilation = 1, groups = 1}) -> [N, O, OL]
function part.conv1d(input, weight, bias, opts) return conv_nd(1, false, input, weight, bias, opts) end

--- conv_transpose2d(input [N, C, H, W] or [C, H, W], weight [C, O / groups, kh, kw], bias [O]?,
-- {stride = 1, padding = 0, output_padding = 0, dilation = 1, groups = 1}) -> [N, O, OH, OW],
-- OH = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1 (output_padding <
-- max(stride, dilation)): the gradient of conv2d with respect to its input, as a layer
function part.conv_transpose2d(input, weight, bias, opts)
  return conv_nd(2, true, input, weight, bias, opts)
end

--- conv_transpose1d(input [N, C, L] or [C, L], weight [C, O / groups, k], bias [O]?, {stride = 1,
-- padding = 0, output_padding = 0, dilation = 1, groups = 1}) -> [N, O, OL]
function part.conv_transpose1d(input, weight, bias, opts)
  return conv_nd(1, true, input, weight, bias, opts)
end

return part
