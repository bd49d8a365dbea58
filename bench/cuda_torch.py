# Issue-4 benchmark, PyTorch side (run on a GPU machine by scripts/bench-cuda):
# the same four measurements as bench/cuda.lua. Prints "key value" lines.
import statistics
import sys
import time

import torch


def timed(fn, repeats, inner=1):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


dev = "cuda"
if sys.argv[1:] == ["--tiny"]:  # only the tiny-op launch figure
    u = torch.ones(1, device=dev)
    v = torch.ones(1, device=dev)
    s = timed(lambda: u + v, 9, 20000)
    print("tiny_add_us %.3f" % (s * 1e6))
    sys.exit(0)

torch.manual_seed(0)
n = 4096
a = torch.randn(n, n, device=dev).bfloat16()
b = torch.randn(n, n, device=dev).bfloat16()
s = timed(lambda: torch.matmul(a, b), 20, 5)
print("gemm_bf16_tflops %.2f" % (2 * n**3 / s / 1e12))

x = torch.randn(8192, 4096, device=dev).bfloat16().requires_grad_()
lin = torch.nn.Linear(4096, 4096, device=dev, dtype=torch.bfloat16)
g = torch.randn(8192, 4096, device=dev).bfloat16()


def step():
    x.grad = None
    lin.weight.grad = None
    lin.bias.grad = None
    lin(x).backward(g)


s = timed(step, 20)
print("linear_bf16_ms %.4f" % (s * 1e3))
print("linear_bf16_tflops %.2f" % (3 * 2 * 8192 * 4096 * 4096 / s / 1e12))
del x, lin, g, a, b

m = 64 * 1024 * 1024
p = torch.randn(m, device=dev)
q = torch.randn(m, device=dev)
out = torch.empty(m, device=dev)
s = timed(lambda: out.copy_(p), 20)
print("copy_f32_gbs %.1f" % (2 * 4 * m / s / 1e9))
s = timed(lambda: p + q, 20)
print("add_f32_gbs %.1f" % (3 * 4 * m / s / 1e9))
del p, q, out

u = torch.ones(1, device=dev)
v = torch.ones(1, device=dev)
s = timed(lambda: u + v, 9, 20000)
print("tiny_add_us %.3f" % (s * 1e6))

# the floor under any tiny op: one empty kernel launch (torch.cuda._sleep(0))
s = timed(lambda: torch.cuda._sleep(0), 9, 20000)
print("bare_launch_us %.3f" % (s * 1e6))
