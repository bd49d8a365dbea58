# /usr/bin/python3 spec/goldens/normalization.py
# PyTorch 1.13 (CPU, float64) goldens for spec/normalization_spec.lua: BatchNorm1d/2d (several training
# steps, running statistics, cumulative momentum, eval, track_running_stats = False, affine = False,
# gradients), F.batch_norm, GroupNorm and RMSNorm (torch 1.13 has no RMSNorm: its formula
# x * rsqrt(mean(x^2) + eps) * weight in float64 torch ops). Dims in the Lua table count from 1.
import torch
import torch.nn as nn
import torch.nn.functional as F
import luatable

torch.set_default_dtype(torch.float64)
torch.manual_seed(29)


def lua(v):
    return luatable.lua(v, dicts="lines")


out = {}


def batch_norm_case(cls, shape, steps, **kw):
    m = cls(shape[1], **kw)
    if m.affine:
        with torch.no_grad():
            m.weight.copy_(torch.randn(shape[1]))
            m.bias.copy_(torch.randn(shape[1]))
    case = {"weight": m.weight if m.affine else [], "bias": m.bias if m.affine else [], "xs": [], "ys": [],
            "gys": [], "gxs": [], "gws": [], "gbs": [], "running_means": [], "running_vars": []}
    for _ in range(steps):
        x = (torch.randn(*shape) * 2 + 0.5).requires_grad_()
        gy = torch.randn(*shape)
        y = m(x)
        (y * gy).sum().backward()
        case["xs"].append(x); case["ys"].append(y); case["gys"].append(gy); case["gxs"].append(x.grad)
        if m.affine:
            case["gws"].append(m.weight.grad.clone()); case["gbs"].append(m.bias.grad.clone())
            m.weight.grad = None; m.bias.grad = None
        if m.track_running_stats:
            case["running_means"].append(m.running_mean.clone()); case["running_vars"].append(m.running_var.clone())
    m.eval()
    x = (torch.randn(*shape) * 2 + 0.5).requires_grad_()
    gy = torch.randn(*shape)
    y = m(x)
    (y * gy).sum().backward()
    case["eval_x"], case["eval_y"], case["eval_gy"], case["eval_gx"] = x, y, gy, x.grad
    if m.track_running_stats:
        case["num_batches_tracked"] = int(m.num_batches_tracked)
    return case


out["bn2d"] = batch_norm_case(nn.BatchNorm2d, (4, 3, 2, 3), 3)
out["bn2d_m03_eps"] = batch_norm_case(nn.BatchNorm2d, (2, 2, 3, 2), 2, momentum=0.3, eps=1e-3)
out["bn1d_nc"] = batch_norm_case(nn.BatchNorm1d, (5, 4), 3)
out["bn1d_ncl"] = batch_norm_case(nn.BatchNorm1d, (3, 2, 4), 3)
out["bn1d_cumulative"] = batch_norm_case(nn.BatchNorm1d, (3, 2, 4), 4, momentum=None)
out["bn2d_untracked"] = batch_norm_case(nn.BatchNorm2d, (2, 3, 2, 2), 2, track_running_stats=False)
out["bn2d_no_affine"] = batch_norm_case(nn.BatchNorm2d, (3, 2, 2, 2), 2, affine=False)

# F.batch_norm, not training, with running statistics and weight/bias
x = torch.randn(3, 4, 5)
rm, rv = torch.randn(4), torch.rand(4) + 0.5
w, b = torch.randn(4), torch.randn(4)
out["f_bn_eval"] = {"x": x, "rm": rm, "rv": rv, "w": w, "b": b,
                    "y": F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-4)}
rm2, rv2 = rm.clone(), rv.clone()
y = F.batch_norm(x, rm2, rv2, None, None, training=True, momentum=0.25, eps=1e-5)
out["f_bn_train"] = {"y": y, "rm": rm2, "rv": rv2}


def group_norm_case(shape, groups, affine=True, eps=1e-5):
    m = nn.GroupNorm(groups, shape[1], eps=eps, affine=affine)
    if affine:
        with torch.no_grad():
            m.weight.copy_(torch.randn(shape[1])); m.bias.copy_(torch.randn(shape[1]))
    x = (torch.randn(*shape) * 1.5 - 0.3).requires_grad_()
    gy = torch.randn(*shape)
    y = m(x)
    (y * gy).sum().backward()
    case = {"x": x, "y": y, "gy": gy, "gx": x.grad}
    if affine:
        case.update(weight=m.weight, bias=m.bias, gw=m.weight.grad, gb=m.bias.grad)
    return case


out["gn_ncl"] = group_norm_case((2, 4, 3), 2)
out["gn_nchw"] = group_norm_case((2, 6, 2, 3), 3, eps=1e-3)
out["gn_nc"] = group_norm_case((3, 4), 4)
out["gn_no_affine"] = group_norm_case((2, 4, 5), 1, affine=False)


def rms_norm_case(shape, k, eps, affine=True):
    x = (torch.randn(*shape) * 1.5 + 0.2).requires_grad_()
    w = torch.randn(*shape[-k:]).requires_grad_()
    gy = torch.randn(*shape)
    dims = tuple(range(-k, 0))
    e = torch.finfo(torch.float64).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + e)
    if affine:
        y = y * w
    (y * gy).sum().backward()
    case = {"x": x, "y": y, "gy": gy, "gx": x.grad}
    if affine:
        case.update(weight=w, gw=w.grad)
    return case


out["rms_last"] = rms_norm_case((3, 5), 1, None)
out["rms_two"] = rms_norm_case((2, 3, 2, 4), 2, 1e-3)
out["rms_no_affine"] = rms_norm_case((4, 6), 1, 1e-6, affine=False)

with open("spec/goldens/normalization.lua", "w") as f:
    f.write("-- written by /usr/bin/python3 spec/goldens/normalization.py (PyTorch %s); do not edit\n" % torch.__version__)
    f.write("return " + lua(out) + "\n")
