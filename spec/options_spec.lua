-- Options tables: every public constructor and functional form of tl.nn, tl.optim and tl.data, the other Lua modules that take options (tlua.options) and the C ops that do (bindings/lua/options.c) refuse a misspelled key, naming the function, the key and the accepted keys, at the caller's line; a public name that is neither a case here nor listed as taking no options fails.
local tl = require("tlua")
local options = require("tlua.options")
local nn, optim, data = tl.nn, tl.optim, tl.data
local F = nn.functional

local function param() return tl.randn(2, { requires_grad = true }) end
local function sgd() return optim.SGD({ param() }, { lr = 0.1 }) end
local function model() return nn.Sequential(nn.Linear(8, 8), nn.ReLU()) end
local function dataset() return data.TensorDataset(tl.arange(1, 5)) end
local SILENT = { write = function() end, flush = function() end }

-- Lua cases: { public name, who (the message's prefix), the misspelled key, the call }
local lua_cases = {
  -- tl.nn layers and losses
  { "nn.Linear", "nn.Linear", "biass", function() nn.Linear(2, 3, { biass = false }) end },
  { "nn.Conv2d", "nn.Conv2d", "strides", function() nn.Conv2d(1, 1, 3, { strides = 2 }) end },
  { "nn.Conv1d", "nn.Conv1d", "strides", function() nn.Conv1d(1, 1, 3, { strides = 2 }) end },
  { "nn.ConvTranspose1d", "nn.ConvTranspose1d", "outpad", function() nn.ConvTranspose1d(1, 1, 3, { outpad = 1 }) end },
  { "nn.ConvTranspose2d", "nn.ConvTranspose2d", "padding_mod",
    function() nn.ConvTranspose2d(1, 1, 3, { padding_mod = "zeros" }) end },
  { "nn.MaxPool2d", "nn.MaxPool2d", "strid", function() nn.MaxPool2d(2, { strid = 1 }) end },
  { "nn.MaxPool1d", "nn.MaxPool1d", "dilatio", function() nn.MaxPool1d(2, { dilatio = 1 }) end },
  { "nn.AvgPool1d", "nn.AvgPool1d", "ceil", function() nn.AvgPool1d(2, { ceil = true }) end },
  { "nn.AvgPool2d", "nn.AvgPool2d", "divisor", function() nn.AvgPool2d(2, { divisor = 2 }) end },
  { "nn.AdaptiveMaxPool1d", "nn.AdaptiveMaxPool1d", "indices",
    function() nn.AdaptiveMaxPool1d(2, { indices = true }) end },
  { "nn.AdaptiveMaxPool2d", "nn.AdaptiveMaxPool2d", "indices",
    function() nn.AdaptiveMaxPool2d(2, { indices = true }) end },
  { "nn.Upsample", "nn.Upsample", "scale", function() nn.Upsample({ scale = 2 }) end },
  { "nn.UpsamplingNearest2d", "nn.UpsamplingNearest2d", "mode",
    function() nn.UpsamplingNearest2d({ mode = "nearest" }) end },
  { "nn.UpsamplingBilinear2d", "nn.UpsamplingBilinear2d", "align_corners",
    function() nn.UpsamplingBilinear2d({ size = 2, align_corners = true }) end },
  { "nn.LayerNorm", "nn.LayerNorm", "epsilon", function() nn.LayerNorm(4, { epsilon = 1e-6 }) end },
  { "nn.Embedding", "nn.Embedding", "dtyp", function() nn.Embedding(4, 3, { dtyp = "float64" }) end },
  { "nn.CrossEntropyLoss", "nn.CrossEntropyLoss", "label_smothing",
    function() nn.CrossEntropyLoss({ label_smothing = 0.1 }) end },
  { "nn.GELU", "nn.GELU", "approximat", function() nn.GELU({ approximat = "tanh" }) end },
  { "nn.MoE", "nn.MoE", "topk", function() nn.MoE{ dim = 4, hidden = 8, experts = 2, top_k = 1, topk = 1 } end },
  { "nn.MoE", "nn.MoE", "activaton", function() nn.MoE(4, 8, 2, 1, { activaton = "relu" }) end },
  { "nn.BlockSparseLinear", "nn.BlockSparseLinear", "densty",
    function() nn.BlockSparseLinear(8, 8, { block = 4, densty = 0.5 }) end },
  { "nn.BlockSparseLinear", "nn.BlockSparseLinear.from_dense", "blok",
    function() nn.BlockSparseLinear.from_dense(nn.Linear(8, 8), { blok = 4, density = 0.5 }) end },
  { "nn.sparsify", "nn.sparsify", "fliter",
    function() nn.sparsify(model(), { block = 4, density = 0.5, fliter = print }) end },
  { "nn.DataParallel", "nn.DataParallel", "bucketmb", function() nn.DataParallel(model(), { bucketmb = 1 }) end },
  -- recurrent and attention layers (nn/recurrent.lua, nn/transformer.lua), their constructors and forwards
  { "nn.LSTM", "nn.LSTM", "bidirectinal", function() nn.LSTM(2, 3, { bidirectinal = true }) end },
  { "nn.GRU", "nn.GRU", "batchfirst", function() nn.GRU(2, 3, { batchfirst = true }) end },
  { "nn.RNN", "nn.RNN", "nonlinearty", function() nn.RNN(2, 3, { nonlinearty = "relu" }) end },
  { "nn.LSTMCell", "nn.LSTMCell", "biass", function() nn.LSTMCell(2, 3, { biass = false }) end },
  { "nn.GRUCell", "nn.GRUCell", "biass", function() nn.GRUCell(2, 3, { biass = false }) end },
  { "nn.RNNCell", "nn.RNNCell", "nonlinearty", function() nn.RNNCell(2, 3, { nonlinearty = "relu" }) end },
  { "nn.MultiheadAttention", "nn.MultiheadAttention", "batchfirst",
    function() nn.MultiheadAttention(4, 2, { batchfirst = true }) end },
  { "nn.MultiheadAttention", "nn.MultiheadAttention", "need_weight", function()
      local m, x = nn.MultiheadAttention(4, 2), tl.randn(3, 4)
      m(x, x, x, { need_weight = false })
    end },
  { "nn.TransformerEncoderLayer", "nn.TransformerEncoderLayer", "dim_feed_forward",
    function() nn.TransformerEncoderLayer(4, 2, { dim_feed_forward = 8 }) end },
  { "nn.TransformerEncoderLayer", "nn.TransformerEncoderLayer", "mask",
    function()
      nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 8 })(tl.randn(3, 4), { mask = tl.zeros(3, 3) })
    end },
  { "nn.TransformerEncoder", "nn.TransformerEncoder", "nrom",
    function() nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 8 }), 2, { nrom = 1 }) end },
  { "nn.TransformerEncoder", "nn.TransformerEncoder", "src_mask", function()
      nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 8 }), 1)(tl.randn(3, 4),
        { src_mask = tl.zeros(3, 3) })
    end },
  -- normalization, dropout and embedding (issue 29)
  { "nn.BatchNorm1d", "nn.BatchNorm1d", "momentun", function() nn.BatchNorm1d(4, { momentun = 0.1 }) end },
  { "nn.BatchNorm2d", "nn.BatchNorm2d", "track_running_stat",
    function() nn.BatchNorm2d(4, { track_running_stat = false }) end },
  { "nn.GroupNorm", "nn.GroupNorm", "afine", function() nn.GroupNorm(2, 4, { afine = false }) end },
  { "nn.RMSNorm", "nn.RMSNorm", "elementwise_afine", function() nn.RMSNorm(4, { elementwise_afine = false }) end },
  { "nn.functional.batch_norm", "batch_norm", "trainning",
    function() F.batch_norm(tl.randn(3, 2), nil, nil, { trainning = true }) end },
  { "nn.functional.group_norm", "group_norm", "epsilon",
    function() F.group_norm(tl.randn(3, 2), 1, { epsilon = 1 }) end },
  { "nn.functional.rms_norm", "rms_norm", "wieght", function() F.rms_norm(tl.randn(3, 2), 2, { wieght = 1 }) end },
  { "nn.Dropout", "nn.Dropout", "prob", function() nn.Dropout({ prob = 0.1 }) end },
  { "nn.Dropout1d", "nn.Dropout1d", "prob", function() nn.Dropout1d({ prob = 0.1 }) end },
  { "nn.Dropout2d", "nn.Dropout2d", "prob", function() nn.Dropout2d({ prob = 0.1 }) end },
  { "nn.AlphaDropout", "nn.AlphaDropout", "prob", function() nn.AlphaDropout({ prob = 0.1 }) end },
  { "nn.FeatureAlphaDropout", "nn.FeatureAlphaDropout", "prob", function() nn.FeatureAlphaDropout({ prob = 0.1 }) end },
  { "nn.Embedding", "nn.Embedding", "padding_index", function() nn.Embedding(4, 3, { padding_index = 1 }) end },
  { "nn.Embedding", "nn.Embedding.from_pretrained", "frozen",
    function() nn.Embedding.from_pretrained(tl.randn(4, 3), { frozen = true }) end },
  -- nn.init and nn.functional
  { "nn.init.kaiming_uniform_", "nn.init.kaiming_uniform_", "mod",
    function() nn.init.kaiming_uniform_(tl.empty(3, 4), { mod = "fan_out" }) end },
  { "nn.init.kaiming_normal_", "nn.init.kaiming_normal_", "nonlinearty",
    function() nn.init.kaiming_normal_(tl.empty(3, 4), { nonlinearty = "relu" }) end },
  { "nn.functional.gelu", "gelu", "approx", function() F.gelu(tl.randn(3), { approx = "tanh" }) end },
  { "autograd.grad", "autograd.grad", "retain", function()
    local x = tl.randn(2, { requires_grad = true })
    tl.autograd.grad((x * x):sum(), x, { retain = true })
  end },
  { "nn.functional.conv1d", "conv1d", "dilations",
    function() F.conv1d(tl.randn(1, 1, 5), tl.randn(1, 1, 3), nil, { dilations = 2 }) end },
  { "nn.functional.conv_transpose1d", "conv_transpose1d", "group",
    function() F.conv_transpose1d(tl.randn(1, 1, 5), tl.randn(1, 1, 3), { group = 1 }) end },
  { "nn.functional.conv_transpose2d", "conv_transpose2d", "output_pad",
    function() F.conv_transpose2d(tl.randn(1, 1, 5, 5), tl.randn(1, 1, 3, 3), { output_pad = 1 }) end },
  { "nn.functional.max_pool1d", "max_pool1d", "padd", function() F.max_pool1d(tl.randn(1, 2, 4), 2, { padd = 1 }) end },
  { "nn.functional.avg_pool1d", "avg_pool1d", "padd", function() F.avg_pool1d(tl.randn(1, 2, 4), 2, { padd = 1 }) end },
  { "nn.functional.adaptive_max_pool1d", "adaptive_max_pool1d", "indices",
    function() F.adaptive_max_pool1d(tl.randn(1, 2, 4), 2, { indices = true }) end },
  { "nn.functional.interpolate", "interpolate", "scale",
    function() F.interpolate(tl.randn(1, 1, 2, 2), { scale = 2 }) end },
  -- tl.optim
  { "optim.SGD", "optim.SGD", "momentun", function() optim.SGD({ param() }, { lr = 0.1, momentun = 0.9 }) end },
  { "optim.Adam", "optim.Adam", "beta", function() optim.Adam({ param() }, { beta = { 0.9, 0.99 } }) end },
  { "optim.AdamW", "optim.AdamW", "weightdecay", function() optim.AdamW({ param() }, { weightdecay = 0 }) end },
  { "optim.SGD", "optim.SGD: parameter group 1", "lrr",
    function() optim.SGD({ { params = { param() }, lrr = 0.1 } }, { lr = 0.1 }) end },
  { "optim.StepLR", "optim.StepLR", "gama", function() optim.StepLR(sgd(), { step_size = 2, gama = 0.5 }) end },
  { "optim.CosineAnnealingLR", "optim.CosineAnnealingLR", "eta_mn",
    function() optim.CosineAnnealingLR(sgd(), { T_max = 10, eta_mn = 0 }) end },
  { "optim.WarmupCosineLR", "optim.WarmupCosineLR", "warmup",
    function() optim.WarmupCosineLR(sgd(), { total_steps = 10, warmup = 2 }) end },
  { "optim.RMSprop", "optim.RMSprop", "centred", function() optim.RMSprop({ param() }, { centred = true }) end },
  { "optim.Adagrad", "optim.Adagrad", "lr_decy", function() optim.Adagrad({ param() }, { lr_decy = 0.1 }) end },
  { "optim.Adamax", "optim.Adamax", "beta", function() optim.Adamax({ param() }, { beta = { 0.9, 0.99 } }) end },
  { "optim.NAdam", "optim.NAdam", "momentum_decy", function() optim.NAdam({ param() }, { momentum_decy = 0 }) end },
  { "optim.RAdam", "optim.RAdam", "amsgrad", function() optim.RAdam({ param() }, { amsgrad = true }) end },
  { "optim.MultiStepLR", "optim.MultiStepLR", "gama", function() optim.MultiStepLR(sgd(), { 2 }, { gama = 0.5 }) end },
  { "optim.ExponentialLR", "optim.ExponentialLR", "gama", function() optim.ExponentialLR(sgd(), { gama = 0.5 }) end },
  { "optim.ConstantLR", "optim.ConstantLR", "factr", function() optim.ConstantLR(sgd(), { factr = 0.5 }) end },
  { "optim.LinearLR", "optim.LinearLR", "start", function() optim.LinearLR(sgd(), { start = 0.5 }) end },
  { "optim.CosineAnnealingWarmRestarts", "optim.CosineAnnealingWarmRestarts", "Tmult",
    function() optim.CosineAnnealingWarmRestarts(sgd(), 5, { Tmult = 2 }) end },
  { "optim.OneCycleLR", "optim.OneCycleLR", "total", function() optim.OneCycleLR(sgd(), 1, { total = 10 }) end },
  { "optim.SequentialLR", "optim.SequentialLR", "milestone",
    function() optim.SequentialLR(sgd(), { schedulers = {}, milestone = {} }) end },
  { "optim.ReduceLROnPlateau", "optim.ReduceLROnPlateau", "patiance",
    function() optim.ReduceLROnPlateau(sgd(), { patiance = 2 }) end },
  { "optim.clip_grad_norm", "clip_grad_norm", "for_each",
    function() optim.clip_grad_norm({ param() }, 1, 2, { for_each = false }) end },
  -- tl.data
  { "data.DataLoader", "data.DataLoader", "batchsize", function() data.DataLoader { dataset(), batchsize = 2 } end },
  { "data.FashionMNIST", "data.FashionMNIST", "rot", function() data.FashionMNIST { rot = "/nowhere" } end },
  { "data.RandomSampler", "data.RandomSampler", "sed", function() data.RandomSampler(4, { sed = 1 }) end },
  { "data.SubsetRandomSampler", "data.SubsetRandomSampler", "seeds",
    function() data.SubsetRandomSampler({ 1, 2 }, { seeds = 1 }) end },
  { "data.random_split", "data.random_split", "generater",
    function() data.random_split(dataset(), { 2, 2 }, { generater = print }) end },
  -- tl.autograd
  { "autograd.Function", "autograd.Function", "nme", function()
      tl.autograd.Function { forward = function(_, x) return x end, backward = function(_, g) return g end,
        nme = "Same" }
    end },
  { "autograd.gradgradcheck", "gradgradcheck", "rtoll", function()
      tl.autograd.gradgradcheck(function(x) return x * x end, { tl.randn(2, { dtype = "float64", requires_grad = true }) },
        { rtoll = 1 })
    end },
  { "autograd.gradcheck", "gradcheck", "atoll", function()
      tl.autograd.gradcheck(function(x) return x * 2 end, { tl.randn(2, { dtype = "float64", requires_grad = true }) },
        { atoll = 1e-6 })
    end },
  -- tl.checkpoint (the options are checked before the file is touched)
  { "checkpoint.save", "checkpoint.save", "rgn", function() tl.checkpoint.save("/nowhere/x", {}, { rgn = false }) end },
  { "checkpoint.load", "checkpoint.load", "rgn", function() tl.checkpoint.load("/nowhere/x", {}, { rgn = false }) end },
  -- the other Lua modules
  { "progress.new", "progress.new", "totl", function() require("tlua.progress").new { totl = 3 } end },
  { "progress.Bar:update", "progress.Bar:update", "los", function()
      local bar = require("tlua.progress").new { total = 3, tty = false, out = SILENT }
      bar:update(1, { los = 0.5 })
    end },
  { "progress.Bar:finish", "progress.Bar:finish", "samples", function()
      local bar = require("tlua.progress").new { total = 3, tty = false, out = SILENT }
      bar:finish({ samples = 3 })
    end },
  { "cli.parse", "cli.parse", "numerc",
    function() require("tlua.cli").parse({}, { program = "t.lua", usage = "", numerc = {} }) end },
  { "distributed.init", "tl.distributed.init", "timout", function() tl.distributed.init { timout = 5 } end },
  { "buckets.assign", "buckets.assign", "cap", function() require("tlua.nn.buckets").assign({}, { cap = 8 }) end },
  { "shapes.meshgrid", "meshgrid", "index", function() tl.meshgrid({ tl.ones(2) }, { index = "xy" }) end },
  { "shapes.isclose", "isclose", "rtoll", function() tl.isclose(tl.ones(2), tl.ones(2), { rtoll = 1 }) end },
  { "shapes.allclose", "allclose", "equalnan", function() tl.allclose(tl.ones(2), tl.ones(2), { equalnan = true }) end },
}

-- every loss: its module (built with the misspelled key) and its functional form (called with
-- valid tensors and the misspelled key)
local losses = {
  cross_entropy = { "CrossEntropyLoss", function() return tl.randn(2, 3), tl.tensor({ 1, 2 }) end },
  nll_loss = { "NLLLoss", function() return tl.randn(2, 3), tl.tensor({ 1, 2 }) end },
  binary_cross_entropy = { "BCELoss", function() return tl.rand(2), tl.rand(2) end },
  binary_cross_entropy_with_logits = { "BCEWithLogitsLoss", function() return tl.randn(2), tl.rand(2) end },
  mse_loss = { "MSELoss", function() return tl.randn(2), tl.randn(2) end },
  l1_loss = { "L1Loss", function() return tl.randn(2), tl.randn(2) end },
  smooth_l1_loss = { "SmoothL1Loss", function() return tl.randn(2), tl.randn(2) end },
  huber_loss = { "HuberLoss", function() return tl.randn(2), tl.randn(2) end },
  kl_div = { "KLDivLoss", function() return tl.randn(2), tl.rand(2) end },
  cosine_embedding_loss = { "CosineEmbeddingLoss",
    function() return tl.randn(2, 3), tl.randn(2, 3), tl.tensor({ 1, -1 }) end },
  margin_ranking_loss = { "MarginRankingLoss", function() return tl.randn(2), tl.randn(2), tl.tensor({ 1, -1 }) end },
  triplet_margin_loss = { "TripletMarginLoss", function() return tl.randn(2, 3), tl.randn(2, 3), tl.randn(2, 3) end },
  ctc_loss = { "CTCLoss", function() return tl.randn(4, 1, 3):log_softmax(3), tl.tensor({ { 2 } }), { 4 }, { 1 } end },
}
local loss_names = {}
for name in pairs(losses) do loss_names[#loss_names + 1] = name end
table.sort(loss_names)
for _, name in ipairs(loss_names) do
  local class, args = losses[name][1], losses[name][2]
  lua_cases[#lua_cases + 1] = { "nn." .. class, "nn." .. class, "reductio",
    function() nn[class]({ reductio = "sum" }) end }
  lua_cases[#lua_cases + 1] = { "nn.functional." .. name, name, "reductio", function()
      local a = table.pack(args())
      a[a.n + 1] = { reductio = "sum" }
      F[name](table.unpack(a, 1, a.n + 1))
    end }
end

-- each activation class (one per one-tensor op of the op table) takes no options
for name in pairs(require("tlua.nn.activations")) do
  if name ~= "GELU" and name ~= "Identity" then
    lua_cases[#lua_cases + 1] = { "nn." .. name, "nn." .. name, "inplace", function() nn[name]({ inplace = true }) end }
  end
end

-- public names that take no options table, and why
local no_options = {
  ["checkpoint.read"] = "a path",
  ["nn.Module"] = "the base class", ["nn.ModuleList"] = "modules", ["nn.Sequential"] = "modules",
  ["nn.Flatten"] = "start_dim, end_dim", ["nn.Unflatten"] = "dim, sizes",
  ["nn.Identity"] = "argument-insensitive, as PyTorch's (a drop-in for a layer)",
  ["nn.is_module"] = "a value", ["nn.keys"] = "a state dict", ["nn.block_layout"] = "a mask",
  ["nn.block_mask"] = "a module or layout and sizes", ["nn.random_block_mask"] = "sizes and a density",
  ["nn.functional"] = "walked below", ["nn.init"] = "walked below",
  ["nn.functional.linear"] = "tensors", ["nn.functional.embedding"] = "tensors",
  ["nn.functional.layer_norm"] = "tensors and eps", ["nn.functional.dropout"] = "p and training",
  ["nn.functional.lstm_cell"] = "tensors", ["nn.functional.gru_cell"] = "tensors",
  ["nn.functional.rnn_tanh_cell"] = "tensors", ["nn.functional.rnn_relu_cell"] = "tensors",
  ["nn.functional.lstm_layer"] = "tensors and reverse", ["nn.functional.gru_layer"] = "tensors and reverse",
  ["nn.functional.rnn_layer"] = "tensors, reverse and the nonlinearity",
  ["nn.functional.dropout1d"] = "p and training", ["nn.functional.dropout2d"] = "p and training",
  ["nn.functional.alpha_dropout"] = "p and training", ["nn.functional.feature_alpha_dropout"] = "p and training",
  ["nn.functional.relu6"] = "a tensor", ["nn.functional.softsign"] = "a tensor",
  ["nn.functional.tanhshrink"] = "a tensor", ["nn.functional.logsigmoid"] = "a tensor",
  ["nn.functional.hardshrink"] = "lambd", ["nn.functional.softshrink"] = "lambd",
  ["nn.functional.threshold"] = "threshold, value", ["nn.functional.prelu"] = "tensors",
  ["nn.functional.glu"] = "dim", ["nn.functional.softmin"] = "dim",
  ["nn.init.trunc_normal_"] = "mean, std, a, b", ["nn.init.eye_"] = "a tensor", ["nn.init.dirac_"] = "groups",
  ["nn.init.orthogonal_"] = "gain",
  ["nn.functional.mse_loss"] = "tensors",
  ["nn.AdaptiveAvgPool1d"] = "an output size", ["nn.AdaptiveAvgPool2d"] = "an output size",
  ["nn.functional.adaptive_avg_pool1d"] = "a tensor and an output size",
  ["nn.init.calculate_gain"] = "a name and a parameter", ["nn.init.constant_"] = "a value",
  ["nn.init.normal_"] = "mean, std", ["nn.init.uniform_"] = "a, b", ["nn.init.zeros_"] = "a tensor",
  ["nn.init.ones_"] = "a tensor", ["nn.init.xavier_uniform_"] = "gain", ["nn.init.xavier_normal_"] = "gain",
  ["optim.Optimizer"] = "the base class (Optimizer.subclass makes the optimizers)",
  ["optim.Scheduler"] = "the base class", ["optim.LambdaLR"] = "a function of the epoch",
  ["optim.cosine_with_warmup"] = "numbers",
  ["data.TensorDataset"] = "tensors", ["data.read_idx"] = "a path", ["data.splitmix"] = "a seed",
  ["data.FASHION_MNIST_CLASSES"] = "a list", ["data.FASHION_MNIST_ROOT"] = "a path",
  ["data.Subset"] = "a dataset and indices", ["data.ConcatDataset"] = "a list of datasets",
  ["data.SequentialSampler"] = "a dataset or a count", ["data.BatchSampler"] = "sampler, batch_size, drop_last",
  ["data.default_collate"] = "a list of samples", ["nn.ModuleDict"] = "modules",
  ["autograd.set_grad_ready_hook"] = "a tensor and a function", ["autograd.queue_callback"] = "a function",
}
-- the C ops of nn.functional (cases below) and its ops of the op table (one tensor, no options)
local c_functional = { conv2d = true, max_pool2d = true, scaled_dot_product_attention = true,
  avg_pool2d = true, adaptive_max_pool2d = true, adaptive_avg_pool2d = true, gelu_linear = true,
  linear_gelu_linear = true }
local table_ops = {}
for _, op in ipairs(tl.ops()) do table_ops[op.name] = true end

-- every public name of tl.nn (with nn.functional and nn.init), tl.optim, tl.data, tl.autograd and
-- tl.checkpoint
local function public_names()
  local names = {}
  local function add(prefix, module)
    for name in pairs(module) do
      if not name:match("^_") then names[#names + 1] = prefix .. name end
    end
  end
  add("nn.", nn)
  add("nn.functional.", F)
  add("nn.init.", nn.init)
  add("optim.", optim)
  add("data.", data)
  add("autograd.", tl.autograd)
  add("checkpoint.", tl.checkpoint)
  table.sort(names)
  return names
end

local function refused(fn)
  local ok, err = pcall(fn)
  return not ok and tostring(err) or nil
end

-- the message names who and the key, lists the accepted keys, and (Lua) points at this file
local function check_refusal(case, positioned)
  local name, who, key, fn = case[1], case[2], case[3], case[4]
  local err = refused(fn)
  assert.is_not_nil(err, name .. " accepted the misspelled option '" .. key .. "'")
  local wanted = who .. ": unknown option '" .. key .. "' (accepted: "
  assert.is_truthy(err:find(wanted, 1, true), name .. ": expected '" .. wanted .. "...', got: " .. err)
  if positioned then
    assert.is_truthy(err:match("^[^:]*options_spec%.lua:%d+: "), name .. ": the error points elsewhere: " .. err)
  end
end

describe("options tables of the Lua modules", function()
  it("cover every public name of tl.nn, tl.optim, tl.data, tl.autograd and tl.checkpoint", function()
    local covered = {}
    for _, case in ipairs(lua_cases) do covered[case[1]] = true end
    local unclassified = {}
    for _, name in ipairs(public_names()) do
      local op = name:match("^nn%.functional%.(.*)$")
      if not (covered[name] or no_options[name] or (op and (c_functional[op] or table_ops[op]))) then
        unclassified[#unclassified + 1] = name
      end
    end
    assert.are.same({}, unclassified, "give these names a case in spec/options_spec.lua (or list them as taking no "
      .. "options): " .. table.concat(unclassified, ", "))
  end)

  it("refuse a misspelled key, naming the function, the key and the accepted keys, at the caller's line", function()
    for _, case in ipairs(lua_cases) do check_refusal(case, true) end
  end)

  it("point at the caller's line by the levels they give when the stack cannot be read (a sandbox)", function()
    options._walk_stack = false
    local ok, err = pcall(function()
      for _, case in ipairs(lua_cases) do check_refusal(case, true) end
    end)
    options._walk_stack = true
    assert(ok, err)
  end)

  it("list the accepted keys and check the kinds of values", function()
    assert.error_matches(function() nn.Linear(2, 3, { biass = false }) end,
      { "nn.Linear: unknown option 'biass' (accepted: bias, device, dtype)" })
    assert.error_matches(function() nn.Linear(2, 3, { bias = 1 }) end,
      { "nn.Linear: option bias expected a boolean, got number" })
    assert.error_matches(function() nn.Linear(2, 3, 5) end,
      { "nn.Linear: expected an options table {bias, device, dtype}, got number" })
    assert.error_matches(function() nn.Conv2d(1, 1, 3, { stride = 1.5 }) end,
      { "nn.Conv2d: option stride expected an integer or a table, got 1.5" })
    assert.error_matches(function() nn.ReLU({ inplace = true }) end,
      { "nn.ReLU: unknown option 'inplace' (accepted: none)" })
    assert.error_matches(function() data.DataLoader { dataset(), shuffle = "yes" } end,
      { "data.DataLoader: option shuffle expected a boolean, got string" })
    assert.error_matches(function() data.DataLoader { dataset(), 3 } end,
      { "data.DataLoader: unknown option [2] (accepted: [1], batch_sampler, batch_size, collate_fn, dataset," })
    assert.error_matches(function() nn.MoE { 4, 8, 2, 1, 5 } end,
      { "nn.MoE: unknown entry [5] (by position it takes dim, hidden, experts, top_k)" })
    assert.error_matches(function() optim.Adam({ param() }, { [true] = 1 }) end,
      { "optim.Adam: unknown option (a boolean key)" })
  end)

  it("keep the options they had", function()
    assert.are.equal(3, nn.Linear(2, 3, { bias = true, dtype = "float64", device = "cpu" }).bias:numel())
    assert.are.same({ 2, 2 }, nn.Conv2d(1, 1, 3, { stride = { 2, 2 }, padding = 1, bias = false }).stride)
    local group = optim.SGD({ { params = { param() }, lr = 0.5, initial_lr = 1 } }, { lr = 0.1, momentum = 0.9 })
      .param_groups[1]
    assert.are.same({ 0.5, 0.9 }, { group.lr, group.momentum })
    local loader = data.DataLoader { dataset = dataset(), batch_size = 2, shuffle = true, seed = 1, drop_last = true }
    assert.are.equal(2, loader:len())
    assert.are.equal(tl.gelu_tanh, F._gelu_form({ approximate = "tanh" }, "gelu", 1))
  end)
end)

describe("tlua.options", function()
  it("checks keys and kinds, and returns the table (or a new empty one for nil)", function()
    local opts = { a = 1, b = "x", c = print, d = tl.ones(1), [1] = {} }
    local accepted = { a = "integer", b = "string|table", c = "callable", d = "tensor", [1] = "table" }
    assert.are.equal(opts, options.check(opts, "f", accepted))
    assert.are.same({}, options.check(nil, "f", accepted))
    assert.is_true(options.check({ c = setmetatable({}, { __call = print }) }, "f", accepted) ~= nil)
    assert.error_matches(function() options.check({ a = 1.5 }, "f", accepted) end,
      { "f: option a expected an integer, got 1.5" })
    assert.error_matches(function() options.check({ b = 1 }, "f", accepted) end,
      { "f: option b expected a string or a table, got number" })
    assert.error_matches(function() options.check({ d = {} }, "f", accepted) end,
      { "f: option d expected a tensor, got table" })
    assert.error_matches(function() options.check({ e = 1 }, "f", accepted) end,
      { "f: unknown option 'e' (accepted: [1], a, b, c, d)" })
    assert.error_matches(function() options.check({ a = 1 }, "f", { a = "intger" }) end, { "unknown kind 'intger'" })
  end)

  it("raises at the caller's line", function()
    local function api(opts) return options.check(opts, "api", { x = "number" }) end
    local err = refused(function() api({ y = 1 }) end)
    assert.is_truthy(err:match("^[^:]*options_spec%.lua:%d+: api: unknown option 'y'"), err)
    err = refused(function() options.error("api: nope") end)
    assert.is_truthy(err:match("^[^:]*options_spec%.lua:%d+: api: nope"), err)
  end)
end)

-- C cases: { op, the misspelled key, the call }
local q = tl.randn(1, 2, 3, 4)
local like = tl.ones(2)
local c_cases = {
  { "zeros", "dtpye", function() tl.zeros(2, { dtpye = "float64" }) end },
  { "zeros", "dtpye", function() tl.zeros({ dtpye = "float64" }) end }, -- a lone table of options
  { "ones", "devise", function() tl.ones({ 2 }, { devise = "cpu" }) end },
  { "empty", "requires_gard", function() tl.empty(2, { requires_gard = true }) end },
  { "rand", "dtpye", function() tl.rand(2, 2, { dtpye = "float64" }) end },
  { "randn", "dtpye", function() tl.randn(2, { dtpye = "float64" }) end },
  { "full", "dtpye", function() tl.full({ 2 }, 1, { dtpye = "float64" }) end },
  { "arange", "dtpye", function() tl.arange(1, 5, { dtpye = "float64" }) end },
  { "linspace", "dtpye", function() tl.linspace(0, 1, 5, { dtpye = "float64" }) end },
  { "eye", "dtpye", function() tl.eye(2, { dtpye = "float64" }) end },
  { "randint", "dtpye", function() tl.randint(0, 5, { 2 }, { dtpye = "int32" }) end },
  { "randperm", "dtpye", function() tl.randperm(4, { dtpye = "int32" }) end },
  { "tensor", "dtpye", function() tl.tensor({ 1, 2 }, { dtpye = "float64" }) end },
  { "tensor", "dtpye", function() tl.tensor(like, { dtpye = "float64" }) end },
  { "tensor", "dtpye", function() tl.tensor(1.5, { dtpye = "float64" }) end },
  { "to", "requires_grad", function() like:to({ dtype = "float64", requires_grad = true }) end },
  { "scaled_dot_product_attention", "casual",
    function() tl.scaled_dot_product_attention(q, q, q, { casual = true }) end },
  { "pad", "mod", function() tl.pad(like, { 1, 1 }, { mod = "reflect" }) end },
  { "conv2d", "strides", function() tl.conv2d(tl.randn(1, 1, 4, 4), tl.randn(1, 1, 2, 2), { strides = 2 }) end },
  { "max_pool2d", "padd", function() tl.max_pool2d(tl.randn(1, 1, 4, 4), 2, { padd = 1 }) end },
  { "avg_pool2d", "divisor", function() tl.avg_pool2d(tl.randn(1, 1, 4, 4), 2, { divisor = 1 }) end },
  { "adaptive_max_pool2d", "indices",
    function() tl.adaptive_max_pool2d(tl.randn(1, 1, 4, 4), 2, { indices = true }) end },
  { "cross_entropy", "smoothing",
    function() tl.cross_entropy(tl.randn(2, 3), tl.tensor({ 1, 2 }), { smoothing = 0.1 }) end },
  { "batch_norm", "trainning", function() tl.batch_norm(tl.randn(3, 2), nil, nil, { trainning = true }) end },
  { "gelu_linear", "aproximate", function() tl.gelu_linear(tl.randn(2, 3), tl.randn(4, 3), nil, { aproximate = "tanh" }) end },
  { "linear_gelu_linear", "aproximate", function()
    tl.linear_gelu_linear(tl.randn(2, 3), tl.randn(4, 3), nil, tl.randn(3, 4), nil, { aproximate = "tanh" })
  end },
  { "add_layer_norm", "epsilon",
    function() tl.add_layer_norm(tl.randn(2, 3), tl.randn(2, 3), nil, nil, { epsilon = 1e-3 }) end },
  { "backward", "retain", function()
      local x = tl.randn(2, { requires_grad = true })
      x:sum():backward({ retain = true })
    end },
}
for _, op in ipairs({ "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like" }) do
  c_cases[#c_cases + 1] = { op, "dtpye", function() tl[op](like, { dtpye = "float64" }) end }
end
c_cases[#c_cases + 1] = { "full_like", "dtpye", function() tl.full_like(like, 2, { dtpye = "float64" }) end }

describe("options tables of the C ops", function()
  it("refuse an option written into a shape table instead of dropping it", function()
    for _, make in ipairs({ tl.zeros, tl.ones, tl.empty, tl.rand, tl.randn }) do
      local ok, err = pcall(make, { 2, 3, dtype = "float64" })
      assert.is_false(ok)
      assert.matches("the shape table has a key 'dtype' besides its 2 sizes", err, 1, true)
    end
    assert.are.same({ 2, 3 }, tl.zeros(table.pack(2, 3)).shape, "table.pack's n is not an option")
    assert.are.same({ 2, 3 }, tl.zeros({ 2, 3 }, { dtype = "float64" }).shape)
  end)

  it("refuse a misspelled key, naming the op, the key and the accepted keys", function()
    for _, case in ipairs(c_cases) do check_refusal({ case[1], case[1], case[2], case[3] }, false) end
  end)

  it("list the accepted keys and check the kinds of values", function()
    assert.error_matches(function() tl.scaled_dot_product_attention(q, q, q, { casual = true }) end,
      { "scaled_dot_product_attention: unknown option 'casual' (accepted: causal, scale, dropout)" })
    assert.error_matches(function() tl.scaled_dot_product_attention(q, q, q, 5) end,
      { "scaled_dot_product_attention: argument 4 expected an options table {causal, scale, dropout}, got number" })
    assert.error_matches(function() tl.zeros(2, { requires_grad = 1 }) end,
      { "zeros: option requires_grad expected a boolean, got number" })
    assert.error_matches(function() tl.zeros(2, { dtype = 32 }) end, { "zeros: option dtype expected a dtype" })
    assert.error_matches(function() tl.zeros(2, { [1.5] = 1 }) end,
      { "zeros: unknown option [1.5] (accepted: dtype, device, requires_grad)" })
    assert.error_matches(function() tl.conv2d(tl.randn(1, 1, 4, 4), tl.randn(1, 1, 2, 2), { stride = 1.5 }) end,
      { "conv2d: option stride expected an integer or a table {h, w}, got 1.5" })
    assert.error_matches(function() tl.cross_entropy(tl.randn(2, 3), tl.tensor({ 1, 2 }), { reduction = 1 }) end,
      { "cross_entropy: option reduction expected a string, got number" })
  end)

  it("keep the options they had", function()
    assert.are.same({}, tl.zeros({}).shape) -- {} is a 0-dim shape, not options
    assert.are.equal("float64", tl.zeros({ dtype = "float64" }).dtype)
    local t = tl.ones(2, { dtype = "float64", device = "cpu", requires_grad = true })
    assert.are.same({ "float64", true }, { t.dtype, t.requires_grad })
    assert.are.equal("float64", like:to({ dtype = "float64", device = "cpu" }).dtype)
    local x = tl.randn(2, { requires_grad = true })
    local y = x:sum()
    y:backward({ retain_graph = true })
    y:backward({ retain_graph = false })
  end)
end)
