"""Same numbers as PyTorch, the PyTorch side: builds the char-GPT of bench/gpt_torch.py from a
seed, writes its initial weights (tlua's names), the batch offsets of every step and the losses
of training on them to one safetensors file that bench/gpt_match.lua replays in tlua.

  python3 bench/gpt_match.py --out ref.safetensors [--device cpu|cuda] [--dtype float64|bfloat16]
      [--steps N] [--layers N] [--dim N] [--heads N] [--context N] [--batch N] [--lr X] [--warmup N]
      [--seed N]

float64 (the CPU check): the model in float64. bfloat16 (the GPU check): float32 parameters under
autocast to bfloat16, and a second float32 run from the same weights, whose distance from the
bf16 run measures the bf16 noise."""
import argparse

import torch

import gpt_torch as G

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--device", default="cpu")
ap.add_argument("--dtype", default="float64", choices=["float64", "bfloat16"])
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--dim", type=int, default=64)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--context", type=int, default=32)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--warmup", type=int, default=0, help="linear warm-up steps: lr * min(1, step / warmup), step from 1")
ap.add_argument("--weight-decay", type=float, default=0.1)
ap.add_argument("--grad-clip", type=float, default=1.0)
ap.add_argument("--seed", type=int, default=1337)
ap.add_argument("--data", default=G.DEFAULT_DATA)
a = ap.parse_args()

torch.manual_seed(a.seed)
chars, ids = G.encode(G.corpus_bytes(a.data))
train = G.train_split(ids).to(a.device)
config = dict(vocab=len(chars), context=a.context, layers=a.layers, dim=a.dim, heads=a.heads, bias=False,
              fused=a.device != "cpu" and hasattr(torch.nn.functional, "scaled_dot_product_attention"))
param_dtype = torch.float64 if a.dtype == "float64" else torch.float32
model = G.GPT(config).to(device=a.device, dtype=param_dtype)
init = {G.tlua_name(n): t.detach().clone() for n, t in model.state_dict().items()}
offsets = torch.randint(0, len(train) - a.context, (a.steps, a.batch))


def run(model, autocast):
    opt = torch.optim.AdamW(G.param_groups(model, a.weight_decay), lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    positions = torch.arange(a.context + 1)
    losses = []
    for step in range(a.steps):
        for group in opt.param_groups:
            group["lr"] = a.lr * min(1.0, (step + 1) / a.warmup) if a.warmup > 0 else a.lr
        windows = train[(offsets[step].view(-1, 1) + positions.view(1, -1)).to(a.device)]
        x, y = windows[:, :-1], windows[:, 1:]
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=autocast):
            loss = model(x, y)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


out = dict(init)
out["offsets"] = offsets
if a.dtype == "bfloat16":
    reference = G.GPT(config).to(device=a.device, dtype=torch.float32)
    reference.load_state_dict(model.state_dict())
    out["losses"] = run(model, True)
    out["losses_float32"] = run(reference, False)
else:
    out["losses"] = run(model, False)
meta = dict(config)
meta.update(dtype=a.dtype, lr=a.lr, warmup=a.warmup, weight_decay=a.weight_decay, grad_clip=a.grad_clip, steps=a.steps, batch=a.batch,
            torch=torch.__version__, vocab_bytes=",".join(str(c) for c in chars))
G.save_safetensors(a.out, out, meta)
print("gpt_match.py: %d steps, %s on %s, final loss %.6f -> %s" % (a.steps, a.dtype, a.device, out["losses"][-1], a.out))
