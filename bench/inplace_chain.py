# In-place chain benchmark, PyTorch side: the chain of bench/inplace_chain.lua out of place
# (y = y @ W eight times, torch.softmax(y, -1)) under no_grad and as a training step with the
# weights frozen and x requiring grad (y.sum().backward()): the median time of one chain
# (synchronised, after warm-up) and, on CUDA, the peak of allocated memory above the inputs (x and
# the weights, counted right after they are made) over the activation's bytes. Prints "key value"
# lines. usage: python3 bench/inplace_chain.py [--device cpu|cuda] [--rows N] [--cols N]
#   [--layers N] [--dtype float32|bfloat16|...] [--threads N] [--repeats N] [--warmup N]
# defaults as bench/inplace_chain.lua: cuda 65536 x 1024 bfloat16, cpu 32768 x 512 float32
import argparse
import gc
import math

import torch

from timing import median_time, synchronizer

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--rows", type=int)
p.add_argument("--cols", type=int)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--dtype")
p.add_argument("--threads", type=int)
p.add_argument("--repeats", type=int)
p.add_argument("--warmup", type=int)
opts = p.parse_args()
cuda = opts.device != "cpu"
defaults = (dict(rows=65536, cols=1024, dtype="bfloat16", repeats=50, warmup=5) if cuda else
            dict(rows=32768, cols=512, dtype="float32", repeats=5, warmup=1))
for k, v in defaults.items():
    if getattr(opts, k) is None:
        setattr(opts, k, v)
if opts.threads:
    torch.set_num_threads(opts.threads)
dev = torch.device(opts.device)
dtype = getattr(torch, opts.dtype)


sync = synchronizer(dev)


torch.manual_seed(0)
x = torch.randn(opts.rows, opts.cols, device=dev).to(dtype)
ws = [(torch.randn(opts.cols, opts.cols, device=dev) / math.sqrt(opts.cols)).to(dtype)
      for _ in range(opts.layers)]
act_bytes = x.numel() * x.element_size()
gc.collect()
sync()
inputs = torch.cuda.memory_allocated(dev) if cuda else None


def chain(y):
    for w in ws:
        y = y @ w
    return torch.softmax(y, -1)


def infer():
    with torch.no_grad():
        chain(x)


def train():
    x.grad = None
    chain(x).sum().backward()


def peak_ratio(fn):
    x.grad = None
    gc.collect()
    sync()
    torch.cuda.reset_peak_memory_stats(dev)
    fn()
    sync()
    peak = torch.cuda.max_memory_allocated(dev)
    x.grad = None
    return (peak - inputs) / act_bytes


def timed(fn):
    return median_time(fn, opts.warmup, opts.repeats, sync)


print("version %s" % torch.__version__)
print("shape %dx%d" % (opts.rows, opts.cols))
print("dtype %s" % opts.dtype)
print("activation_mib %.1f" % (act_bytes / 2**20))
print("infer_ms %.3f" % (timed(infer) * 1e3))
if cuda:
    print("inputs_mib %.1f" % (inputs / 2**20))
    print("infer_peak %.3f" % peak_ratio(infer))
x.requires_grad_(True)
print("train_ms %.3f" % (timed(train) * 1e3))
if cuda:
    print("train_peak %.3f" % peak_ratio(train))
    gc.collect()
    # what stays allocated besides the inputs once the runs are over (cuBLAS's workspace), inside
    # the peaks above
    print("held_after_mib %.1f" % ((torch.cuda.memory_allocated(dev) - inputs) / 2**20))
