# Issue-28 benchmark (point 3), PyTorch side: the measurements of bench/sort.lua (topk(k) of x [rows, cols], bfloat16 on CUDA and float32 on the CPU, and a sort of n float32). Prints "key value" lines.
# usage: /usr/bin/python3 bench/sort_torch.py [--cuda 1] [--rows N] [--cols N] [--k N] [--n N] [--repeats N] [--threads N]
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--cuda", type=int, default=0)
p.add_argument("--rows", type=int, default=8192)
p.add_argument("--cols", type=int, default=50304)
p.add_argument("--k", type=int, default=50)
p.add_argument("--n", type=int, default=16 * 1024 * 1024)
p.add_argument("--repeats", type=int, default=10)
p.add_argument("--threads", type=int)
opts = p.parse_args()
if opts.threads:
    torch.set_num_threads(opts.threads)
dev = "cuda" if opts.cuda else "cpu"
sync = torch.cuda.synchronize if opts.cuda else (lambda: None)


def timed(fn):
    for _ in range(2):
        fn()
    sync()
    samples = []
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


torch.manual_seed(0)
x = torch.randn(opts.rows, opts.cols, device=dev)
if opts.cuda:
    x = x.bfloat16()
print("topk_ms %.4f" % (timed(lambda: x.topk(opts.k)) * 1e3))
del x
v = torch.randn(opts.n, device=dev)
print("sort_ms %.4f" % (timed(lambda: v.sort()) * 1e3))
