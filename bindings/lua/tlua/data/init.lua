-- tl.data (require("tlua.data")): gathers the IDX reader and Fashion-MNIST, the datasets, samplers, collation and the DataLoader.
--
--   idx.lua       read_idx (IDX files, gzip or plain), FashionMNIST, FASHION_MNIST_CLASSES/ROOT
--   datasets.lua  TensorDataset, Subset, ConcatDataset, random_split
--   samplers.lua  splitmix, SequentialSampler, RandomSampler, SubsetRandomSampler, BatchSampler
--   collate.lua   default_collate
--   loader.lua    DataLoader (shuffle, samplers, shard, collate_fn, device prefetch, state_dict)
--
--   local train = tl.data.FashionMNIST { train = true }
--   local loader = tl.data.DataLoader { train, batch_size = 128, shuffle = true, seed = 1 }
--   for images, labels in loader:iter() do ... end       -- or: for i, x, y in loader:enumerate()
local data = {}

for _, file in ipairs({ "samplers", "datasets", "collate", "idx", "loader" }) do
  for name, value in pairs(require("tlua.data." .. file)) do
    if name:sub(1, 1) ~= "_" then data[name] = value end
  end
end

return data
