-- The configuration examples/embed/host.c runs: a model (an MLP), its checkpoint and the batch size.

-- What the host reads (tl_lua_get_number / tl_lua_get_string)
model = {
  inputs = 4,
  hidden = { 16, 8 },
  outputs = 3,
  activation = "Tanh", -- a class of tl.nn: Tanh, ReLU, Sigmoid, SiLU, GELU, ...
  seed = 1234, -- the initial weights when there is no checkpoint yet
}
checkpoint = "mlp.safetensors" -- relative to the host's working folder
batch_size = 5

-- The model this configuration describes, built with tl.nn
local nn = tl.nn
tl.manual_seed(model.seed)
local layers, width = {}, model.inputs
for _, size in ipairs(model.hidden) do
  layers[#layers + 1] = nn.Linear(width, size)
  layers[#layers + 1] = nn[model.activation]()
  width = size
end
layers[#layers + 1] = nn.Linear(width, model.outputs)
local net = nn.Sequential(table.unpack(layers))
net:eval()

-- What the host calls (tl_lua_call): tensors in, tensors out
function save_checkpoint() tl.save(checkpoint, net:state_dict(), { seed = model.seed }) end

function load_checkpoint() net:load_state_dict((tl.load(checkpoint))) end

function predict(x)
  return tl.no_grad(net, x)
end
