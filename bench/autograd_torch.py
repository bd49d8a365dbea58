# Issue-3 benchmark, PyTorch side: nn.Linear forward+backward (batch 256,
# 1024->1024, float32) and a tiny op recorded by autograd (run by scripts/bench).
# usage: /usr/bin/python3 bench/autograd_torch.py [--threads N] [--iters N] [--repeats N]
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int)
p.add_argument("--iters", type=int, default=100000)
p.add_argument("--repeats", type=int, default=15)
opts = p.parse_args()
if opts.threads:
    torch.set_num_threads(opts.threads)

torch.manual_seed(0)
linear = torch.nn.Linear(1024, 1024)
x = torch.randn(256, 1024, requires_grad=True)
g = torch.randn(256, 1024)


def step():
    x.grad = None
    linear.weight.grad = None
    linear.bias.grad = None
    linear(x).backward(g)


for _ in range(3):
    step()
times = []
for _ in range(opts.repeats):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
print("linear_fwd_bwd_ms %.4f" % (statistics.median(times) * 1e3))

a = torch.tensor([1.5], requires_grad=True)
b = torch.tensor([2.0], requires_grad=True)
for _ in range(opts.iters // 10):
    c = a * b
per_op = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(opts.iters):
        c = a * b
    per_op.append((time.perf_counter() - t0) / opts.iters * 1e6)
assert c.requires_grad
print("tiny_mul_grad_us %.4f" % statistics.median(per_op))
