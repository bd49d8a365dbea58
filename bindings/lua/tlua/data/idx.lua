-- tl.data's files on disk: the IDX reader (MNIST's format, gzip or plain) and the Fashion-MNIST dataset.
local tl = require("tlua")
local options = require("tlua.options")
local TensorDataset = require("tlua.data.datasets").TensorDataset

local idx = {}

--- read_idx(path) -> tensor: int32 for the byte/short/int types, float32/float64 for the float
-- ones, shaped by the file's dims. A missing, truncated or corrupt file raises naming it.
function idx.read_idx(path)
  if type(path) ~= "string" then options.error("data.read_idx: expected a path (a string), got " .. type(path), 2) end
  local ok, result = pcall(tl._read_idx, path)
  if not ok then
    local message = tostring(result):gsub("^[^:]*:%d+: ", ""):gsub("^read_idx: ", "")
    options.error("data.read_idx: " .. message, 2)
  end
  return result
end

local function file_in(root, name)
  for _, candidate in ipairs({ name, name .. ".gz" }) do
    local path = root .. "/" .. candidate
    -- core's check: in an embedded sandbox, only the folders the host granted are readable
    if tl._is_readable(path) then return path end
  end
  options.error(string.format("data.FashionMNIST: neither %s/%s nor %s/%s.gz exists (install the Debian package " ..
    "dataset-fashion-mnist, or pass root =)", root, name, root, name), 3)
end

idx.FASHION_MNIST_CLASSES = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
  "Sneaker", "Bag", "Ankle boot" }

-- Where FashionMNIST looks by default: $TLUA_FASHION_MNIST if set, else Debian's
-- dataset-fashion-mnist package.
idx.FASHION_MNIST_ROOT = (os.getenv and os.getenv("TLUA_FASHION_MNIST")) or "/usr/share/datasets/fashion-mnist"

--- FashionMNIST{root = data.FASHION_MNIST_ROOT, train = true, normalize = false,
-- device = "cpu"}: a TensorDataset of images [N, 1, 28, 28] float32 in [0, 1] (normalize = true:
-- (x - 0.2860) / 0.3530, the training set's mean and std) and labels [N] int64, classes 1..10
-- (the files' 0..9 plus one). ds.images, ds.labels, ds.classes.
local FASHION_MNIST_OPTIONS = { root = "string", train = "boolean", normalize = "boolean", device = "string" }

function idx.FashionMNIST(opts)
  opts = options.check(opts, "data.FashionMNIST", FASHION_MNIST_OPTIONS, 2)
  local root = opts.root or idx.FASHION_MNIST_ROOT
  local prefix = (opts.train == false) and "t10k" or "train"
  local images = idx.read_idx(file_in(root, prefix .. "-images-idx3-ubyte"))
  local labels = idx.read_idx(file_in(root, prefix .. "-labels-idx1-ubyte"))
  if images:dim() ~= 3 or labels:dim() ~= 1 or images:size(1) ~= labels:size(1) then
    options.error(string.format("data.FashionMNIST: expected images [N, 28, 28] and labels [N], got [%s] and [%s]",
      table.concat(images.shape, ", "), table.concat(labels.shape, ", ")), 2)
  end
  local n, h, w = images:size(1), images:size(2), images:size(3)
  local x = images:float():view(n, 1, h, w) / 255
  if opts.normalize then x = (x - 0.2860) / 0.3530 end
  local y = labels:long() + 1
  if opts.device and opts.device ~= "cpu" then
    x, y = x:to(opts.device), y:to(opts.device)
  end
  local ds = TensorDataset(x, y)
  ds.images, ds.labels, ds.classes = x, y, idx.FASHION_MNIST_CLASSES
  return ds
end

return idx
