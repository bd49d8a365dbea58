# PyTorch golden values of pooling and interpolate (spec/pooling_spec.lua), float64.
# Run from the repository root: /usr/bin/python3 spec/goldens/pooling.py  (writes spec/goldens/pooling.lua)
import os

import torch
import torch.nn.functional as F
import luatable

torch.manual_seed(29)


def lua(v):
    return luatable.lua(v, pad=" ")


def flat(t):
    return [float(e) for e in t.detach().reshape(-1).tolist()]


def pair(v):
    return list(v) if isinstance(v, (list, tuple)) else v


cases = []


def case(name, op, shape, args, torch_fn, indices=False):
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    result = torch_fn(x)
    y, idx = (result if indices else (result, None))
    g = torch.randn(*y.shape, dtype=torch.float64)
    (y * g).sum().backward()
    c = {"name": name, "op": op, "args": args, "shape": list(shape), "x": flat(x), "out_shape": list(y.shape),
         "out": flat(y), "g": flat(g), "grad": flat(x.grad)}
    if idx is not None:
        c["indices"] = [int(e) + 1 for e in idx.reshape(-1).tolist()]
    cases.append(c)


# ---- max pooling: odd sizes, padding, dilation, ceil_mode (with the window that would start in the right
# padding dropped)
def max2d(name, shape, k, opts):
    o = dict(opts)
    o["return_indices"] = True
    case(name, "max_pool2d", shape, [pair(k), o],
         lambda x: F.max_pool2d(x, k, o.get("stride"), o.get("padding", 0), o.get("dilation", 1),
                                o.get("ceil_mode", False), True), indices=True)


max2d("k3 s2 p1", (2, 3, 7, 6), 3, {"stride": 2, "padding": 1})
max2d("k2 s2 p1 ceil (last window dropped)", (1, 2, 5, 5), 2, {"stride": 2, "padding": 1, "ceil_mode": True})
max2d("k3 s2 ceil", (1, 2, 6, 8), 3, {"stride": 2, "ceil_mode": True})
max2d("k3 d2 s2 p1", (2, 2, 7, 8), 3, {"stride": 2, "padding": 1, "dilation": 2})
max2d("k(2,3) d(2,1) s(1,2) p1 ceil", (1, 3, 6, 7), (2, 3),
      {"stride": (1, 2), "padding": (1, 1), "dilation": (2, 1), "ceil_mode": True})
max2d("unbatched k2", (3, 5, 5), 2, {})


def max1d(name, shape, k, opts):
    o = dict(opts)
    o["return_indices"] = True
    case(name, "max_pool1d", shape, [k, o],
         lambda x: F.max_pool1d(x, k, o.get("stride"), o.get("padding", 0), o.get("dilation", 1),
                                o.get("ceil_mode", False), True), indices=True)


max1d("k3 s2 p1 d2 ceil", (2, 3, 9), 3, {"stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True})
max1d("unbatched k2", (3, 8), 2, {})


# ---- average pooling
def avg2d(name, shape, k, opts):
    case(name, "avg_pool2d", shape, [pair(k), opts],
         lambda x: F.avg_pool2d(x, k, opts.get("stride"), opts.get("padding", 0), opts.get("ceil_mode", False),
                                opts.get("count_include_pad", True), opts.get("divisor_override")))


avg2d("k3 s2 p1", (2, 3, 7, 6), 3, {"stride": 2, "padding": 1})
avg2d("k3 s2 p1 no pad count", (2, 3, 7, 6), 3, {"stride": 2, "padding": 1, "count_include_pad": False})
avg2d("k3 s2 p1 ceil", (1, 2, 6, 6), 3, {"stride": 2, "padding": 1, "ceil_mode": True})
avg2d("k3 s2 p1 ceil no pad count", (1, 2, 6, 6), 3,
      {"stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False})
avg2d("k2 s2 ceil past the input", (1, 1, 5, 5), 2, {"stride": 2, "ceil_mode": True})
avg2d("divisor_override", (1, 2, 5, 7), (2, 3), {"stride": (1, 2), "padding": (1, 1), "divisor_override": 5})
avg2d("unbatched", (2, 4, 5), 2, {})


def avg1d(name, shape, k, opts):
    case(name, "avg_pool1d", shape, [k, opts],
         lambda x: F.avg_pool1d(x, k, opts.get("stride"), opts.get("padding", 0), opts.get("ceil_mode", False),
                                opts.get("count_include_pad", True)))


avg1d("k3 s2 p1 ceil no pad count", (2, 3, 8), 3,
      {"stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False})
avg1d("k2", (2, 2, 7), 2, {})

# ---- adaptive pooling: sizes that do not divide, larger than the input, global
for shape, size in [((2, 3, 7, 5), (3, 4)), ((1, 2, 5, 4), (9, 6)), ((2, 2, 5, 6), 1), ((3, 7, 5), (2, 3))]:
    case(f"adaptive avg {size}", "adaptive_avg_pool2d", shape, [pair(size)],
         lambda x, size=size: F.adaptive_avg_pool2d(x, size))
    case(f"adaptive max {size}", "adaptive_max_pool2d", shape, [pair(size), {"return_indices": True}],
         lambda x, size=size: F.adaptive_max_pool2d(x, size, True), indices=True)
for shape, size in [((2, 3, 7), 3), ((1, 2, 4), 10), ((3, 10), 4)]:
    case(f"adaptive avg 1d {size}", "adaptive_avg_pool1d", shape, [size],
         lambda x, size=size: F.adaptive_avg_pool1d(x, size))
    case(f"adaptive max 1d {size}", "adaptive_max_pool1d", shape, [size, {"return_indices": True}],
         lambda x, size=size: F.adaptive_max_pool1d(x, size, True), indices=True)


# ---- interpolate
def interp(name, shape, opts):
    def fn(x):
        return F.interpolate(x, size=opts.get("size"), scale_factor=opts.get("scale_factor"), mode=opts["mode"],
                             align_corners=opts.get("align_corners"))
    lopts = {k: pair(v) for k, v in opts.items()}
    case(name, "interpolate", shape, [lopts], fn)


interp("nearest size", (2, 2, 3, 4), {"size": (5, 7), "mode": "nearest"})
interp("nearest scale 2", (1, 2, 3, 4), {"scale_factor": 2.0, "mode": "nearest"})
interp("nearest scale 1.5", (1, 2, 4, 5), {"scale_factor": 1.5, "mode": "nearest"})
interp("nearest scales (1.7, 0.6)", (1, 1, 5, 6), {"scale_factor": (1.7, 0.6), "mode": "nearest"})
interp("nearest scale 2.05 (twice the size)", (1, 1, 10, 3), {"scale_factor": 2.05, "mode": "nearest"})
interp("nearest down", (1, 2, 5, 7), {"size": (2, 3), "mode": "nearest"})
interp("nearest 3-D scale 2.5", (2, 2, 4), {"scale_factor": 2.5, "mode": "nearest"})
for align in (False, True):
    interp(f"bilinear size align={align}", (2, 2, 3, 4), {"size": (5, 7), "mode": "bilinear", "align_corners": align})
    interp(f"bilinear scale 1.5 align={align}", (1, 2, 4, 5),
           {"scale_factor": 1.5, "mode": "bilinear", "align_corners": align})
    interp(f"bilinear down align={align}", (1, 2, 5, 7), {"size": (2, 3), "mode": "bilinear", "align_corners": align})
    interp(f"bilinear scales (0.6, 1.7) align={align}", (1, 1, 6, 5),
           {"scale_factor": (0.6, 1.7), "mode": "bilinear", "align_corners": align})
    interp(f"linear size align={align}", (2, 2, 4), {"size": 9, "mode": "linear", "align_corners": align})
    interp(f"bilinear to 1 row align={align}", (1, 1, 3, 4), {"size": (1, 6), "mode": "bilinear",
                                                              "align_corners": align})
interp("bilinear scale 2", (1, 2, 3, 3), {"scale_factor": 2.0, "mode": "bilinear"})
interp("bilinear scale 1.2 keeps the size", (1, 1, 3, 4), {"scale_factor": 1.2, "mode": "bilinear"})
interp("linear scale 1.5", (1, 2, 5), {"scale_factor": 1.5, "mode": "linear"})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pooling.lua")
with open(out, "w") as f:
    f.write("-- Generated by /usr/bin/python3 spec/goldens/pooling.py (PyTorch %s); do not edit.\n" % torch.__version__)
    f.write("return {\n")
    for c in cases:
        f.write("  " + lua(c) + ",\n")
    f.write("}\n")
print(f"{len(cases)} cases -> {out}")
