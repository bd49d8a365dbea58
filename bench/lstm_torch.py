# Issue-29 benchmark (point 9), PyTorch side: the measurements of bench/lstm.lua with torch.nn.LSTM (cuDNN on CUDA): a 2-layer LSTM forward + backward of out.sum(), float32 and under bfloat16 autocast, the same shapes and defaults. Prints "key value" lines: f32_ms and bf16_ms.
# usage: python3 bench/lstm_torch.py [--device cpu|cuda] [--hidden N] [--input N] [--steps N] [--batch N] [--layers N] [--repeats N] [--warmup N] [--threads N] [--bf16 0|1]
import argparse

import torch

from timing import median_time, synchronizer

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
for name in ("hidden", "input", "steps", "batch", "repeats", "threads", "bf16"):
    parser.add_argument("--" + name, type=int)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--warmup", type=int, default=2)
args = parser.parse_args()
cuda = args.device != "cpu"
if args.threads:
    torch.set_num_threads(args.threads)
H = args.hidden or (1024 if cuda else 256)
I = args.input or (1024 if cuda else 256)
T = args.steps or (256 if cuda else 64)
N = args.batch or (64 if cuda else 32)
repeats = args.repeats or (10 if cuda else 5)
bf16 = cuda if args.bf16 is None else args.bf16 == 1
sync = synchronizer(args.device)

# float32 products in float32 on both sides: tlua's float32 GEMMs keep full precision unless
# tl.set_matmul_precision("high") says otherwise, while cuDNN's RNNs take TF32 by default
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False

torch.manual_seed(0)
lstm = torch.nn.LSTM(I, H, num_layers=args.layers, device=args.device)
x = torch.randn(T, N, I, device=args.device, requires_grad=True)


def step(autocast):
    with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=autocast):
        out, _ = lstm(x)
        loss = out.float().sum()
    loss.backward()
    lstm.zero_grad(set_to_none=True)
    x.grad = None


print("f32_ms %.3f" % (median_time(lambda: step(False), args.warmup, repeats, sync) * 1e3))
if bf16:
    print("bf16_ms %.3f" % (median_time(lambda: step(True), args.warmup, repeats, sync) * 1e3))
