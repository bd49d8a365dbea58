# Issue-29 benchmark (point 9), PyTorch side: the measurements of bench/batch_norm.lua (nn.BatchNorm2d in training mode, forward and forward+backward, float32 and bfloat16 input with float32 parameters, the same shapes). Prints "key value" lines: fwd_f32_ms, fwdbwd_f32_ms, fwd_bf16_ms, fwdbwd_bf16_ms.
# usage: python3 bench/batch_norm_torch.py [--device cpu|cuda] [--n N] [--c N] [--hw N] [--repeats N] [--warmup N] [--inner N] [--threads N] [--bf16 0|1]
import argparse

import torch

from timing import median_time, synchronizer

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--n", type=int)
parser.add_argument("--c", type=int, default=64)
parser.add_argument("--hw", type=int, default=56)
parser.add_argument("--repeats", type=int)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--inner", type=int)
parser.add_argument("--threads", type=int)
parser.add_argument("--bf16", type=int)
args = parser.parse_args()
cuda = args.device != "cpu"
if args.threads:
    torch.set_num_threads(args.threads)
n = args.n or (64 if cuda else 16)
repeats = args.repeats or (20 if cuda else 10)
inner = args.inner or (10 if cuda else 1)
bf16 = cuda if args.bf16 is None else args.bf16 == 1
sync = synchronizer(args.device)


def seconds(fn):
    def calls():
        for _ in range(inner):
            fn()

    return median_time(calls, args.warmup, repeats, sync) / inner


dev = {"device": args.device}
torch.manual_seed(0)
m = torch.nn.BatchNorm2d(args.c, **dev)
m.train()
for dtype, key in [(torch.float32, "f32")] + ([(torch.bfloat16, "bf16")] if bf16 else []):
    x = torch.randn(n, args.c, args.hw, args.hw, **dev).to(dtype)
    g = torch.randn(n, args.c, args.hw, args.hw, **dev).to(dtype)

    def fwd():
        with torch.no_grad():
            m(x)

    print("fwd_%s_ms %.4f" % (key, seconds(fwd) * 1e3))
    xg = x.detach().requires_grad_()

    def step():
        xg.grad, m.weight.grad, m.bias.grad = None, None, None
        m(xg).backward(g)

    print("fwdbwd_%s_ms %.4f" % (key, seconds(step) * 1e3))
