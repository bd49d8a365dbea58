# einsum benchmark, PyTorch side: torch.einsum("bhqd,bhkd->bhqk", q, k) and torch.matmul(q, k.transpose(2, 3)) on the shapes of bench/einsum.lua; prints "key value" lines (einsum_ms, matmul_ms).
# usage: python3 bench/einsum.py [--device cpu|cuda] [--repeats N] [--warmup N] [--threads N]
import argparse

import torch

from timing import median_time, synchronizer

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--repeats", type=int)
parser.add_argument("--warmup", type=int)
parser.add_argument("--threads", type=int)
args = parser.parse_args()
cuda = args.device != "cpu"
if args.threads:
    torch.set_num_threads(args.threads)
B, H, T, D = (8, 16, 1024, 64) if cuda else (4, 8, 256, 64)
dtype = torch.bfloat16 if cuda else torch.float32
repeats = args.repeats or (50 if cuda else 20)
warmup = args.warmup or (5 if cuda else 3)
sync = synchronizer(args.device)

torch.manual_seed(0)
q = torch.randn(B, H, T, D, dtype=dtype, device=args.device)
k = torch.randn(B, H, T, D, dtype=dtype, device=args.device)
with torch.no_grad():
    te, tm = [], []
    for _ in range(3):
        te.append(median_time(lambda: torch.einsum("bhqd,bhkd->bhqk", q, k), warmup, repeats, sync))
        tm.append(median_time(lambda: torch.matmul(q, k.transpose(2, 3)), warmup, repeats, sync))
print("einsum_ms", sorted(te)[1] * 1e3)
print("matmul_ms", sorted(tm)[1] * 1e3)
