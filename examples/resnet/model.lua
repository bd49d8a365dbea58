-- examples/resnet/model.lua: a small ResNet for 28x28 images (BasicBlocks with BatchNorm2d, residual adds, stride-2 stages with 1x1 downsample convolutions, global average pooling, a Linear head) and the batch augmentation (random crop with padding, horizontal flip) in tensor ops.
local tl = require("tlua")
local nn = tl.nn

local M = {}

-- a 3x3 convolution without bias (a BatchNorm follows)
local function conv3x3(cin, cout, stride)
  return nn.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false })
end

--- BasicBlock(cin, cout, stride): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the
--- shortcut is the identity, or a 1x1 convolution of that stride and a BatchNorm where the shape
--- changes. The second BatchNorm's weight starts at zero: each block starts as its shortcut.
local BasicBlock = nn.Module:extend("BasicBlock")
M.BasicBlock = BasicBlock

function BasicBlock:init(cin, cout, stride)
  self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
  self.conv2, self.bn2 = conv3x3(cout, cout, 1), nn.BatchNorm2d(cout)
  nn.init.zeros_(self.bn2.weight)
  if stride ~= 1 or cin ~= cout then
    self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, { stride = stride, bias = false }), nn.BatchNorm2d(cout))
  end
end

function BasicBlock:forward(x)
  local out = self.bn1(self.conv1(x)):relu()
  out = self.bn2(self.conv2(out))
  local shortcut = self.downsample and self.downsample(x) or x
  return (out + shortcut):relu()
end

--- ResNet{width = 32, blocks = 2, classes = 10, channels = 1}: a 3x3 stem of `width` channels,
--- three stages of `blocks` BasicBlocks of widths width, 2 width, 4 width (the last two start
--- with stride 2: 28 -> 14 -> 7), the mean over H and W, a Linear head.
--- forward(x [N, channels, H, W]) -> logits [N, classes]
local ResNet = nn.Module:extend("ResNet")
M.ResNet = ResNet

function ResNet:init(c)
  c = c or {}
  local width, blocks = c.width or 32, c.blocks or 2
  self.stem = nn.Sequential(conv3x3(c.channels or 1, width, 1), nn.BatchNorm2d(width), nn.ReLU())
  local layers, cin = {}, width
  for stage = 1, 3 do
    local cout = width << (stage - 1)
    for b = 1, blocks do
      layers[#layers + 1] = BasicBlock(cin, cout, (stage > 1 and b == 1) and 2 or 1)
      cin = cout
    end
  end
  self.layers = nn.Sequential(table.unpack(layers))
  self.fc = nn.Linear(cin, c.classes or 10)
end

function ResNet:forward(x)
  local features = self.layers(self.stem(x))
  return self.fc(features:mean({ 3, 4 })) -- global average pooling
end

--- augment(x [N, C, H, W], pad = 2) -> a batch of random crops (the images padded with pad zeros
--- on each side, a window of H x W at a random offset per image) flipped left-right at random,
--- half of them; draws from tl's generator (tl.manual_seed fixes it; checkpoints restore it)
function M.augment(x, pad)
  pad = pad or 2
  local N, C, H, W = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  local device = x.device
  local padded = tl.pad(x, { pad, pad, pad, pad })
  local span = 2 * pad + 1
  local dy = tl.randint(0, span, { N }, { dtype = "int64", device = device })
  local dx = tl.randint(0, span, { N }, { dtype = "int64", device = device })
  local flip = tl.rand({ N }, { device = device }):lt(0.5)
  -- rows dy + 1 .. dy + H of every column, then columns dx + 1 .. dx + W (reversed when flipped)
  local rows = (dy:view(N, 1, 1, 1) + tl.arange(1, H + 1, { dtype = "int64", device = device }):view(1, 1, H, 1))
    :expand(N, C, H, W + 2 * pad):contiguous()
  local cut = padded:gather(3, rows)
  local j = tl.arange(1, W + 1, { dtype = "int64", device = device }):view(1, W)
  local cols = tl.where(flip:view(N, 1), (W + 1) - j, j) + dx:view(N, 1)
  cols = cols:view(N, 1, 1, W):expand(N, C, H, W):contiguous()
  return cut:gather(4, cols)
end

return M
