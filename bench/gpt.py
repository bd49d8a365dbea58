"""Char-GPT training step speed and peak memory in PyTorch, eager and torch.compile (the
reference of scripts/bench-cuda's GPT row; bench/gpt.lua is tlua's side).

  python3 bench/gpt.py [--device cuda] [--layers 6 --dim 384 --heads 6 --context 256 --batch 64
      --vocab 65 --dropout 0.2] [--steps 30] [--warmup 10] [--no-compile]

One step: forward under bf16 autocast (flash attention), backward, gradient clipping to 1.0,
fused AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices), zero_grad; batches of
random tokens made beforehand on the device. Prints `key value` lines: eager_step_ms,
compile_step_ms (the median of three windows' mean step time over --steps steps), eager_peak_mib, compile_peak_mib (peak allocated
over the timed steps, from a reset after warm-up, parameters and optimizer state included)."""
import argparse
import statistics
import time

import torch

import gpt_torch as G

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
for name, default in [("layers", 6), ("dim", 384), ("heads", 6), ("context", 256), ("batch", 64), ("vocab", 65),
                      ("steps", 30), ("warmup", 10)]:
    ap.add_argument("--" + name, type=int, default=default)
ap.add_argument("--dropout", type=float, default=0.2)
ap.add_argument("--no-compile", action="store_true")
a = ap.parse_args()
dev = a.device
config = dict(vocab=a.vocab, context=a.context, layers=a.layers, dim=a.dim, heads=a.heads, bias=False,
              dropout=a.dropout, fused=True)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def measure(compiled):
    torch.manual_seed(1)
    model = G.GPT(config).to(dev)
    opt = torch.optim.AdamW(G.param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, fused=True)
    step_fn = torch.compile(model) if compiled else model
    n = a.warmup + a.steps
    xs = torch.randint(0, a.vocab, (n, a.batch, a.context), device=dev)
    ys = torch.randint(0, a.vocab, (n, a.batch, a.context), device=dev)

    def step(i):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn(xs[i], ys[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    # three windows of --steps steps back to back (the CPU runs ahead as in training), the
    # median of their mean step times
    windows = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(a.warmup, n):
            loss = step(i)
        torch.cuda.synchronize()
        windows.append(1000 * (time.perf_counter() - t0) / a.steps)
    peak = torch.cuda.max_memory_allocated() / 2**20
    return statistics.median(windows), peak, loss.item()


eager_ms, eager_peak, eager_loss = measure(False)
print("eager_step_ms %.3f\neager_peak_mib %.1f\neager_loss %.4f" % (eager_ms, eager_peak, eager_loss))
if not a.no_compile:
    compile_ms, compile_peak, compile_loss = measure(True)
    print("compile_step_ms %.3f\ncompile_peak_mib %.1f\ncompile_loss %.4f" % (compile_ms, compile_peak, compile_loss))
