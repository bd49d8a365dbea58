# Grouped GEMM benchmark, PyTorch side: torch._grouped_mm(A [T, K], B [G, K, N], offs) and a loop
# of torch matmuls, as bench/grouped_mm.lua times tl.grouped_mm: the shapes gmm64 (G = 64,
# K = N = 1024, T = 32768) and gmm8 (G = 8, K = 2048, N = 4096, T = 16384) in bfloat16, the even
# split and the fixed uneven split (the same LCG as the Lua side; *_signature to check), forward
# under no_grad and forward+backward (A and B requiring grad, y.backward(g) with a fixed random g,
# grads set to None before each step). offs: the cumulative ends of the groups, int32 on the
# device. B is a contiguous [G, K, N] tensor as on the tlua side (--b-layout nk makes it the
# transpose of a contiguous [G, N, K], the layout of stacked nn.Linear weights).
# torch_loop64_*: shape gmm64, even split, as G separate matmuls of per-group leaf tensors
# (A_g [T / G, K] @ B_g [K, N]; backward: one torch.autograd.backward over the G outputs).
# Each figure: the median time of one call (synchronised, after warm-up). Prints "key value" lines.
# usage: python3 bench/grouped_mm.py [--device cuda|cpu] [--dtype bfloat16|float32|...] [--small]
#   [--repeats N] [--warmup N] [--b-layout kn|nk]
# defaults: cuda: 50 repeats, 5 warm-ups; cpu: 3 repeats, 1 warm-up; --small: the tiny shapes of
# bench/grouped_mm.lua --small
import argparse
import gc
import math
import sys

import torch

from timing import median_time, synchronizer

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda")
p.add_argument("--dtype", default="bfloat16")
p.add_argument("--small", action="store_true")
p.add_argument("--repeats", type=int)
p.add_argument("--warmup", type=int)
p.add_argument("--b-layout", choices=["kn", "nk"], default="kn")
opts = p.parse_args()
cuda = opts.device != "cpu"
if opts.repeats is None:
    opts.repeats = 50 if cuda else 3
if opts.warmup is None:
    opts.warmup = 5 if cuda else 1
dev = torch.device(opts.device)
dtype = getattr(torch, opts.dtype)

grouped_mm = getattr(torch, "_grouped_mm", None)
if grouped_mm is None:
    grouped_mm = getattr(torch.nn.functional, "grouped_mm", None)
if grouped_mm is None:
    sys.exit("bench/grouped_mm.py: this torch (%s) has neither torch._grouped_mm nor "
             "torch.nn.functional.grouped_mm" % torch.__version__)

if opts.small:
    shapes = [dict(key="gmm64", G=4, K=64, N=64, T=256), dict(key="gmm8", G=2, K=64, N=128, T=128)]
else:
    shapes = [dict(key="gmm64", G=64, K=1024, N=1024, T=32768),
              dict(key="gmm8", G=8, K=2048, N=4096, T=16384)]


sync = synchronizer(dev)


# the splits (the same in bench/grouped_mm.lua)
def even_split(T, G):
    return [T // G + (1 if g < T % G else 0) for g in range(G)]


def uneven_split(T, G):
    s, w = 12345 + G, []
    for _ in range(G):
        s = (1103515245 * s + 12345) % 2147483648
        v = s % 1000
        w.append(0 if v < 100 else v)
    total = sum(w)
    sizes = [T * wg // total for wg in w]
    used, g = sum(sizes), -1
    while used < T:
        g = (g + 1) % G
        if w[g] > 0:
            sizes[g] += 1
            used += 1
    return sizes


def offs_of(sizes):
    ends, acc = [], 0
    for n in sizes:
        acc += n
        ends.append(acc)
    return torch.tensor(ends, dtype=torch.int32, device=dev)


def signature(sizes):
    return sum((g + 1) * n for g, n in enumerate(sizes))


def timed(fn):
    return median_time(fn, opts.warmup, opts.repeats, sync)


def report(key, seconds):
    print("%s %.4f" % (key, seconds * 1e3))


print("version %s" % torch.__version__)
print("device %s" % opts.device)
print("dtype %s" % opts.dtype)
print("b_layout %s" % opts.b_layout)
torch.manual_seed(0)
for sh in shapes:
    G, K, N, T = sh["G"], sh["K"], sh["N"], sh["T"]
    A = torch.randn(T, K, device=dev).to(dtype).requires_grad_()
    if opts.b_layout == "kn":
        B = (torch.randn(G, K, N, device=dev) / math.sqrt(K)).to(dtype)
    else:
        B = (torch.randn(G, N, K, device=dev) / math.sqrt(K)).to(dtype).transpose(-2, -1)
    B.requires_grad_()
    gout = torch.randn(T, N, device=dev).to(dtype)
    print("%s_shape G=%d K=%d N=%d T=%d" % (sh["key"], G, K, N, T))
    for suffix, sizes in (("", even_split(T, G)), ("_uneven", uneven_split(T, G))):
        key = sh["key"] + suffix
        offs = offs_of(sizes)
        if suffix == "_uneven":
            print("%s_signature %d" % (key, signature(sizes)))
            print("%s_groups min=%d max=%d empty=%d" % (key, min(sizes), max(sizes),
                                                       sum(1 for n in sizes if n == 0)))

        def fwd():
            with torch.no_grad():
                grouped_mm(A, B, offs=offs)

        def fwdbwd():
            A.grad, B.grad = None, None
            grouped_mm(A, B, offs=offs).backward(gout)

        report(key + "_fwd_ms", timed(fwd))
        report(key + "_fwdbwd_ms", timed(fwdbwd))
        A.grad, B.grad = None, None
        gc.collect()

    if sh["key"] == "gmm64":
        sizes = even_split(T, G)
        with torch.no_grad():
            As = [a.clone().requires_grad_() for a in torch.split(A, sizes)]
            Bs = [B[g].clone().requires_grad_() for g in range(G)]
            gs = [c.contiguous() for c in torch.split(gout, sizes)]
            y = grouped_mm(A, B, offs=offs_of(sizes))
            diff = max((yg.float() - (a @ b).float()).abs().max().item()
                       for yg, a, b in zip(torch.split(y, sizes), As, Bs))
            print("check_max_abs_diff %.3g" % diff)
            del y

        def loop_fwd():
            with torch.no_grad():
                for a, b in zip(As, Bs):
                    a @ b

        def loop_fwdbwd():
            for a, b in zip(As, Bs):
                a.grad, b.grad = None, None
            ys = [a @ b for a, b in zip(As, Bs)]
            torch.autograd.backward(ys, gs)

        report("torch_loop64_fwd_ms", timed(loop_fwd))
        report("torch_loop64_fwdbwd_ms", timed(loop_fwdbwd))
        del As, Bs, gs
    del A, B, gout
    gc.collect()
