# Issue-28 benchmark (point 8), PyTorch side: the measurements of bench/vocabulary.lua (copy_, cat, gather, index_select, scatter_add_, masked_fill, erf, maximum, sum, amax, logsumexp, std on x [rows, cols] float32; the same shapes, indices and byte counts, 0-based). Prints "key value" lines: <op>_ms and <op>_gbs.
# usage: python3 bench/vocabulary_torch.py [--device cpu|cuda] [--rows N] [--cols N] [--repeats N] [--warmup N] [--inner N] [--threads N]
import argparse

import torch

from timing import median_time, synchronizer

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--rows", type=int)
parser.add_argument("--cols", type=int)
parser.add_argument("--repeats", type=int)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--inner", type=int)
parser.add_argument("--threads", type=int)
args = parser.parse_args()
cuda = args.device != "cpu"
if args.threads:
    torch.set_num_threads(args.threads)
rows = args.rows or (8192 if cuda else 4096)
cols = args.cols or (8192 if cuda else 4096)
repeats = args.repeats or (20 if cuda else 10)
inner = args.inner or (10 if cuda else 1)
m = rows * cols
sync = synchronizer(args.device)


def report(key, nbytes, fn):
    def calls():
        for _ in range(inner):
            fn()

    s = median_time(calls, args.warmup, repeats, sync) / inner
    print("%s_ms %.4f" % (key, s * 1e3))
    print("%s_gbs %.1f" % (key, nbytes / s / 1e9))


dev = {"device": args.device}
torch.manual_seed(0)
with torch.no_grad():
    x = torch.randn(rows, cols, **dev)
    out = torch.empty(rows, cols, **dev)
    report("copy", 8 * m, lambda: out.copy_(x))
    del out

    a, b = torch.randn(rows // 2, cols, **dev), torch.randn(rows // 2, cols, **dev)
    report("cat1", 8 * m, lambda: torch.cat((a, b), 0))
    a, b = torch.randn(rows, cols // 2, **dev), torch.randn(rows, cols // 2, **dev)
    report("cat2", 8 * m, lambda: torch.cat((a, b), 1))
    del a, b

    idx = torch.randint(0, cols, (rows, cols), **dev)
    report("gather", 16 * m, lambda: x.gather(1, idx))
    del idx

    w = torch.randn(m // 1024, 1024, **dev)
    ridx = torch.randint(0, m // 1024, (m // 1024,), **dev)
    report("index_select", 8 * m + 8 * (m // 1024), lambda: w.index_select(0, ridx))
    del w, ridx

    perm = torch.rand(rows, cols, **dev).argsort(1)
    y, src = torch.zeros(rows, cols, **dev), torch.randn(rows, cols, **dev)
    report("scatter_add", 20 * m, lambda: y.scatter_add_(1, perm, src))
    del perm, y, src

    mask = torch.rand(rows, cols, **dev) < 0.5
    report("masked_fill", 9 * m, lambda: x.masked_fill(mask, 0))
    del mask

    report("erf", 8 * m, lambda: x.erf())
    z = torch.randn(rows, cols, **dev)
    report("maximum", 12 * m, lambda: torch.maximum(x, z))
    del z

    report("sum", 4 * m + 4 * rows, lambda: x.sum(1))
    report("amax", 4 * m + 4 * rows, lambda: x.amax(1))
    report("logsumexp", 4 * m + 4 * rows, lambda: x.logsumexp(1))
    report("std", 4 * m + 4 * rows, lambda: x.std(1))
