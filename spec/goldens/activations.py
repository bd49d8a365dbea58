# /usr/bin/python3 spec/goldens/activations.py
# PyTorch 1.13 (CPU, float64) goldens for spec/activations_spec.lua: every activation module's output and
# the gradient of sum(y * gy); Embedding with padding_idx, max_norm and from_pretrained; AlphaDropout's
# two output values. Keys name the Lua constructors in the spec; dims there count from 1.
import torch
import torch.nn as nn
import torch.nn.functional as F
import luatable

torch.set_default_dtype(torch.float64)
torch.manual_seed(31)


def lua(v):
    return luatable.lua(v, dicts="lines")


x = torch.randn(2, 3, 4) * 3
gy = torch.randn(2, 3, 4)
prelu3 = nn.PReLU(3)
with torch.no_grad():
    prelu3.weight.copy_(torch.tensor([0.25, -0.5, 1.5]))

modules = {
    "ReLU": nn.ReLU(), "ReLU6": nn.ReLU6(), "LeakyReLU": nn.LeakyReLU(), "LeakyReLU_02": nn.LeakyReLU(0.2),
    "ELU": nn.ELU(), "ELU_15": nn.ELU(alpha=1.5), "SELU": nn.SELU(), "CELU_07": nn.CELU(0.7),
    "GELU": nn.GELU(), "GELU_tanh": nn.GELU(approximate="tanh"), "SiLU": nn.SiLU(), "Mish": nn.Mish(),
    "Sigmoid": nn.Sigmoid(), "Tanh": nn.Tanh(), "Hardswish": nn.Hardswish(), "Hardsigmoid": nn.Hardsigmoid(),
    "Hardtanh": nn.Hardtanh(), "Hardtanh_m05_15": nn.Hardtanh(-0.5, 1.5), "Softplus": nn.Softplus(),
    "Softplus_2_3": nn.Softplus(beta=2, threshold=3), "Softsign": nn.Softsign(), "Tanhshrink": nn.Tanhshrink(),
    "Hardshrink": nn.Hardshrink(), "Hardshrink_13": nn.Hardshrink(1.3), "Softshrink": nn.Softshrink(),
    "Softshrink_2": nn.Softshrink(2.0), "Threshold_01_20": nn.Threshold(0.1, 20.0), "LogSigmoid": nn.LogSigmoid(),
    "Softmax_2": nn.Softmax(dim=1), "Softmax_m1": nn.Softmax(dim=-1), "LogSoftmax_1": nn.LogSoftmax(dim=0),
    "LogSoftmax_3": nn.LogSoftmax(dim=2), "Softmin_2": nn.Softmin(dim=1), "GLU": nn.GLU(), "GLU_1": nn.GLU(dim=0),
    "PReLU": nn.PReLU(), "PReLU_3": prelu3, "PReLU_init": nn.PReLU(init=-0.1),
}
out = {"x": x, "gy": gy, "cases": {}}
for key, m in modules.items():
    xi = x.clone().requires_grad_()
    y = m(xi)
    g = gy[tuple(slice(0, s) for s in y.shape)]
    (y * g).sum().backward()
    case = {"y": y, "gx": xi.grad}
    if isinstance(m, nn.PReLU):
        case["weight"] = m.weight
        case["gw"] = m.weight.grad
    out["cases"][key] = case

# Embedding: padding_idx (0-based 2 = Lua 3), its output and the weight's gradient
w = torch.randn(6, 3) * 2
idx = torch.tensor([[0, 2, 5], [2, 4, 2]])
e = nn.Embedding.from_pretrained(w.clone(), freeze=False, padding_idx=2)
with torch.no_grad():
    e.weight[2] = torch.tensor([0.5, -1.0, 2.0])  # a padding row set by hand still gives its value
gyy = torch.randn(2, 3, 3)
y = e(idx)
(y * gyy).sum().backward()
out["embedding"] = {"weight": w, "pad_row": [0.5, -1.0, 2.0], "idx": idx + 1, "gy": gyy, "y": y, "gw": e.weight.grad}

# max_norm: the looked-up rows renormed in place (norm 2 and norm 1)
for key, max_norm, norm_type in (("max_norm_2", 1.5, 2.0), ("max_norm_1", 2.0, 1.0)):
    e = nn.Embedding.from_pretrained(w.clone(), freeze=False, max_norm=max_norm, norm_type=norm_type)
    y = e(idx)
    (y * gyy).sum().backward()
    out["embedding"][key] = {"y": y, "weight_after": e.weight, "gw": e.weight.grad}

# AlphaDropout on ones: kept a + alpha a p, dropped alpha a (p - 1)
torch.manual_seed(5)
a = F.alpha_dropout(torch.ones(4000), 0.3, True)
out["alpha_dropout_ones_p03"] = sorted(set(a.tolist()))

with open("spec/goldens/activations.lua", "w") as f:
    f.write("-- written by /usr/bin/python3 spec/goldens/activations.py (PyTorch %s); do not edit\n" % torch.__version__)
    f.write("return " + lua(out) + "\n")
