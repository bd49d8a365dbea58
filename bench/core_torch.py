# Issue-2 benchmark, PyTorch side: the cost of a tiny op from Python and 1024^3 float32 matmul GFLOP/s (run by scripts/bench).
# usage: /usr/bin/python3 bench/core_torch.py [--threads N] [--iters N] [--batches N] [--repeats N] [--size N]
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int)
p.add_argument("--iters", type=int, default=200000)
p.add_argument("--batches", type=int, default=7)
p.add_argument("--repeats", type=int, default=15)
p.add_argument("--size", type=int, default=1024)
opts = p.parse_args()

if opts.threads:
    torch.set_num_threads(opts.threads)

# (a) tiny op: c = a + b on two 1-element float32 tensors
a = torch.tensor([1.5], dtype=torch.float32)
b = torch.tensor([2.25], dtype=torch.float32)
c = a + b
assert c.item() == 3.75
for _ in range(opts.iters // 10):  # warm-up
    c = a + b
per_op = []
for _ in range(opts.batches):
    t0 = time.perf_counter()
    for _ in range(opts.iters):
        c = a + b
    per_op.append((time.perf_counter() - t0) / opts.iters * 1e6)
print(f"tiny_add_us {statistics.median(per_op):.4f}")

# (b) float32 matmul n x n x n
n = opts.size
torch.manual_seed(0)
x = torch.randn(n, n)
y = torch.randn(n, n)
for _ in range(3):  # warm-up
    z = torch.matmul(x, y)
secs = []
for _ in range(opts.repeats):
    t0 = time.perf_counter()
    z = torch.matmul(x, y)
    secs.append(time.perf_counter() - t0)
assert z.shape == (n, n)
print(f"matmul_gflops {2 * n**3 / statistics.median(secs) / 1e9:.2f}")
print(f"threads {torch.get_num_threads()}")
print(f"version {torch.__version__}")
