"""The char-GPT of examples/gpt in PyTorch (same architecture, parameter names and init), the
fortunes corpus read the same way, and a small safetensors reader/writer (no extra package):
shared by bench/gpt_match.py (same numbers) and bench/gpt.py (speed against torch.compile)."""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DATA = os.environ.get("TLUA_GPT_DATA", "/usr/share/games/fortunes")


# ---- corpus ---------------------------------------------------------------------------------
def corpus_bytes(path=DEFAULT_DATA):
    """A file's bytes, or every plain file (no dot in its name) of a folder, sorted, joined:
    the same text examples/gpt/data.lua reads."""
    if os.path.isfile(path):
        return open(path, "rb").read()
    names = sorted(n for n in os.listdir(path) if "." not in n and os.path.isfile(os.path.join(path, n)))
    return b"".join(open(os.path.join(path, n), "rb").read() for n in names)


def encode(text):
    """vocabulary (sorted distinct bytes) and the 0-based ids of the text (tlua's are 1-based)"""
    chars = sorted(set(text))
    lookup = torch.full((256,), -1, dtype=torch.int64)
    lookup[torch.tensor(chars)] = torch.arange(len(chars))
    ids = lookup[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    return chars, ids


def train_split(ids, val_fraction=0.1):
    n_val = int(math.floor(len(ids) * val_fraction))
    return ids[: len(ids) - n_val]


# ---- model ----------------------------------------------------------------------------------
class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch < 2.1 has no bias=False)"""

    def __init__(self, dim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def composed_attention(q, k, v):
    T, D = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c["heads"]
        self.c_attn = nn.Linear(c["dim"], 3 * c["dim"], bias=c["bias"])
        self.c_proj = nn.Linear(c["dim"], c["dim"], bias=c["bias"])
        self.fused = c.get("fused", hasattr(F, "scaled_dot_product_attention"))
        self.dropout = c.get("dropout", 0.0)
        self.resid_dropout = nn.Dropout(self.dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            y = composed_attention(q, k, v)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["dim"], 4 * c["dim"], bias=c["bias"])
        self.c_proj = nn.Linear(4 * c["dim"], c["dim"], bias=c["bias"])
        self.dropout = nn.Dropout(c.get("dropout", 0.0))

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["dim"], c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["dim"], c["bias"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab"], c["dim"])
        self.wpe = nn.Embedding(c["context"], c["dim"])
        self.drop = nn.Dropout(c.get("dropout", 0.0))
        self.h = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.ln_f = LayerNorm(c["dim"], c["bias"])
        self.lm_head = nn.Linear(c["dim"], c["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight
        proj_std = 0.02 / math.sqrt(2 * c["layers"])
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


def tlua_name(name):
    """torch's 0-based ModuleList names -> tlua's 1-based ones (h.0.x -> h.1.x)"""
    parts = name.split(".")
    if parts[0] == "h":
        parts[1] = str(int(parts[1]) + 1)
    return ".".join(parts)


def param_groups(model, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]


# ---- safetensors ----------------------------------------------------------------------------
DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}
BY_CODE = {v: k for k, v in DTYPES.items()}


def save_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        raw = bytearray(data[8 + n + a : 8 + n + b])
        out[name] = torch.frombuffer(raw, dtype=BY_CODE[e["dtype"]]).reshape(e["shape"]).clone()
    return out, meta
