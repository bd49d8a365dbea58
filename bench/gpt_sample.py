"""Generation speed of a GPT in torch eager with a KV cache of its own: the reference of
bench/gpt_sample.lua (examples/gpt's model and cache in tlua), the same work step by step.

  python3 bench/gpt_sample.py [--device cpu|cuda] [--layers 6 --dim 384 --heads 6 --context 256
      --vocab 65] [--tokens 500] [--dtype float32|bfloat16] [--threads N] [--repeats 3]

nanoGPT's architecture (pre-norm blocks, tanh GELU, tied head, no biases), random weights; a
prompt of 1 token, then --tokens tokens: each one token's forward whose keys and values are
written into preallocated [1, H, context, D] tensors and whose attention runs over the cached
prefix (F.scaled_dot_product_attention without a mask; matmul and softmax on a torch before 2.0,
which has none: `attention composed` in the output); at the context the cache slides to the
last context // 2 tokens (one causal pass), as examples/gpt/model.lua's generate_step does. Each
token is drawn on the device (temperature 0.8, top-k 40, softmax, multinomial) and read back with
.item(). Prints tokens_per_s (--tokens over the median of --repeats generations after a short
warm-up) and ms_per_token."""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
for name, default in [("layers", 6), ("dim", 384), ("heads", 6), ("context", 256), ("vocab", 65), ("tokens", 500),
                      ("threads", 0), ("repeats", 3)]:
    ap.add_argument("--" + name, type=int, default=default)
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
a = ap.parse_args()
if a.threads > 0:
    torch.set_num_threads(a.threads)
dev, dtype = torch.device(a.device), getattr(torch, a.dtype)


def composed_attention(q, k, v, causal):
    """softmax(q k^T / sqrt(D) + causal mask) v, for a torch without F.scaled_dot_product_attention (< 2.0)"""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


if hasattr(F, "scaled_dot_product_attention"):
    attention_name = "sdpa"

    def attention(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
else:
    attention_name = "composed"
    attention = composed_attention


class LayerNorm(nn.Module):
    """a layer norm without a bias (torch 1.13's nn.LayerNorm has no bias=False)"""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_proj = nn.Linear(dim, dim, bias=False)
        self.ln_2 = LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.mlp_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, cache, pos):
        """x [B, T, C] at positions pos .. pos + T - 1 (0-based); cache = [k, v] of [B, H, context, D]"""
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)
        cache[0][:, :, pos:pos + T] = k
        cache[1][:, :, pos:pos + T] = v
        y = attention(q, cache[0][:, :, :pos + T], cache[1][:, :, :pos + T], pos == 0 and T > 1)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.dim)
        self.wpe = nn.Embedding(a.context, a.dim)
        self.h = nn.ModuleList([Block(a.dim, a.heads) for _ in range(a.layers)])
        self.ln_f = LayerNorm(a.dim)

    def new_cache(self):
        shape = (1, a.heads, a.context, a.dim // a.heads)
        return {"first": 0, "length": 0,
                "layers": [[torch.empty(shape, dtype=dtype, device=dev), torch.empty(shape, dtype=dtype, device=dev)]
                           for _ in self.h]}

    def forward_cached(self, idx, cache):
        T, pos = idx.shape[1], cache["length"]
        x = self.wte(idx) + self.wpe(torch.arange(pos, pos + T, device=dev))
        for block, layer in zip(self.h, cache["layers"]):
            x = block(x, layer, pos)
        cache["length"] = pos + T
        return F.linear(self.ln_f(x[:, -1]), self.wte.weight)

    def generate_step(self, ids, t, cache):
        """logits after ids[:, :t] (t tokens), the window sliding as examples/gpt/model.lua's"""
        if cache["length"] > 0 and cache["first"] + cache["length"] == t - 1:  # holds ids[:, :t - 1]
            if cache["length"] < a.context:
                return self.forward_cached(ids[:, t - 1:t], cache)
            first = t - max(1, a.context // 2)
        else:
            first = max(0, t - a.context)
        cache["first"], cache["length"] = first, 0
        return self.forward_cached(ids[:, first:t], cache)


torch.manual_seed(1)
model = GPT().to(device=dev, dtype=dtype).eval()


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def generate(n):
    ids = torch.zeros((1, 1 + n), dtype=torch.int64, device=dev)
    cache = model.new_cache()
    text = []
    sync()
    start = time.perf_counter()
    for t in range(1, n + 1):
        logits = model.generate_step(ids, t, cache).float() / 0.8
        top, where = logits.topk(min(40, a.vocab), dim=-1)
        drawn = where.gather(1, torch.multinomial(top.softmax(-1), 1))
        ids[:, t:t + 1] = drawn
        text.append(drawn.item())  # what a streaming sampler prints: one read back per token
    return time.perf_counter() - start


generate(min(a.tokens, 20))
t = statistics.median(generate(a.tokens) for _ in range(a.repeats))
print(f"tokens_per_s {a.tokens / t:.1f}\nms_per_token {1000 * t / a.tokens:.3f}\nattention {attention_name}")
