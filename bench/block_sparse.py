"""Block-sparse linear benchmark, torch side: dense F.linear and torch's BSR (W.to_sparse_bsr) forward, blocks 32/64 at densities 50/25/10%.

The patterns are bench/block_sparse.lua's (the same LCG shuffle per block row). Shape and dtype as
there: cuda 8192 x 4096 -> 4096 bfloat16, cpu 2048 x 2048 -> 2048 float32. Prints "key value" lines:
dense_fwd_ms, dense_fwdbwd_ms, bsr_b<block>_d<percent>_fwd_ms (torch's sparse side is timed
forward only: it has no weight gradient for a BSR weight).
usage: python3 bench/block_sparse.py [--device cpu|cuda] [--repeats N] [--warmup N] [--threads N]
         [--blocks 32,64] [--densities 50,25,10]
"""
import argparse

import torch
import torch.nn.functional as F

from timing import median_time, synchronizer

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
ap.add_argument("--repeats", type=int)
ap.add_argument("--warmup", type=int)
ap.add_argument("--threads", type=int)
ap.add_argument("--blocks", default="32,64", help="0: dense only")
ap.add_argument("--densities", default="50,25,10")
a = ap.parse_args()
cuda = a.device != "cpu"
if a.threads:
    torch.set_num_threads(a.threads)
repeats = a.repeats or (30 if cuda else 3)
warmup = a.warmup or (5 if cuda else 1)
dtype = torch.bfloat16 if cuda else torch.float32
rows, IN, OUT = (8192, 4096, 4096) if cuda else (2048, 2048, 2048)


sync = synchronizer("cuda" if cuda else "cpu")


def time_ms(fn):
    return median_time(fn, warmup, repeats, sync) * 1000


def pattern(R, C, block, density):
    k = max(1, int(density * C + 0.5))
    mask = torch.zeros(R, C, dtype=torch.bool)
    for r in range(R):
        cols, s = list(range(C)), (7919 * r + 17 * block + k) % 2147483648
        for j in range(C - 1, 0, -1):
            s = (1103515245 * s + 12345) % 2147483648
            m = s % (j + 1)
            cols[j], cols[m] = cols[m], cols[j]
        mask[r, cols[:k]] = True
    return mask


torch.manual_seed(0)
x = torch.randn(rows, IN, dtype=dtype, device=a.device)
g = torch.randn(rows, OUT, dtype=dtype, device=a.device)
w = (torch.randn(OUT, IN, dtype=dtype, device=a.device) * 0.02).requires_grad_()
xg = x.detach().requires_grad_()
with torch.no_grad():
    print("dense_fwd_ms %.4f" % time_ms(lambda: F.linear(x, w)))


def dense_step():
    xg.grad, w.grad = None, None
    F.linear(xg, w).backward(g)


print("dense_fwdbwd_ms %.4f" % time_ms(dense_step))
for block in [int(v) for v in a.blocks.split(",") if int(v) > 0]:
    for percent in [int(v) for v in a.densities.split(",")]:
        mask = pattern(OUT // block, IN // block, block, percent / 100)
        full = mask.repeat_interleave(block, 0).repeat_interleave(block, 1).to(a.device)
        wb = (torch.randn(OUT, IN, dtype=dtype, device=a.device) * 0.02 * full).to_sparse_bsr((block, block))
        with torch.no_grad():
            print("bsr_b%d_d%d_fwd_ms %.4f" % (block, percent, time_ms(lambda: F.linear(x, wb))))
