# /usr/bin/python3 spec/goldens/init.py
# PyTorch 1.13 (CPU, float64) goldens for spec/init_spec.lua: calculate_gain of every nonlinearity, eye_ and
# dirac_ (deterministic), orthogonal_'s matrix from given draws (torch's QR, q * sign(diag(r))), and the
# mean and standard deviation of truncated normals (closed form).
import math
import torch
import torch.nn as nn
import luatable

torch.set_default_dtype(torch.float64)
torch.manual_seed(37)


def lua(v):
    return luatable.lua(v, dicts="lines")


out = {}
gains = {}
for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
             "sigmoid", "tanh", "relu", "leaky_relu", "selu"):
    gains[name] = nn.init.calculate_gain(name)
gains["leaky_relu_02"] = nn.init.calculate_gain("leaky_relu", 0.2)
out["gains"] = gains

out["eye_3x5"] = nn.init.eye_(torch.empty(3, 5))
out["eye_4x2"] = nn.init.eye_(torch.empty(4, 2))
out["dirac_3d"] = nn.init.dirac_(torch.empty(4, 3, 3))
out["dirac_4d_groups2"] = nn.init.dirac_(torch.empty(6, 2, 3, 2), groups=2)
out["dirac_5d"] = nn.init.dirac_(torch.empty(2, 3, 1, 3, 3))


def orthogonal_from(a):
    rows, cols = a.shape
    flattened = a.clone()
    if rows < cols:
        flattened.t_()
    q, r = torch.linalg.qr(flattened)
    d = torch.diag(r, 0)
    q *= d.sign()
    if rows < cols:
        q.t_()
    return q


out["orthogonal"] = []
for shape in ((5, 3), (3, 5), (4, 4), (1, 6)):
    a = torch.randn(*shape)
    out["orthogonal"].append({"a": a, "q": orthogonal_from(a)})


def truncated_moments(mean, std, a, b):
    n = torch.distributions.Normal(0.0, 1.0)
    al, be = torch.tensor((a - mean) / std), torch.tensor((b - mean) / std)
    z = n.cdf(be) - n.cdf(al)
    pa, pb = n.log_prob(al).exp(), n.log_prob(be).exp()
    m = mean + std * (pa - pb) / z
    var = std ** 2 * (1 + (al * pa - be * pb) / z - ((pa - pb) / z) ** 2)
    return {"mean": float(m), "std": math.sqrt(float(var))}


out["trunc_default"] = truncated_moments(0.0, 1.0, -2.0, 2.0)
out["trunc_shifted"] = truncated_moments(1.0, 2.0, -1.0, 2.0)

with open("spec/goldens/init.lua", "w") as f:
    f.write("-- written by /usr/bin/python3 spec/goldens/init.py (PyTorch %s); do not edit\n" % torch.__version__)
    f.write("return " + lua(out) + "\n")
