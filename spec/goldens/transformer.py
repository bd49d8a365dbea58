# /usr/bin/python3 spec/goldens/transformer.py
# Writes spec/goldens/transformer.lua: PyTorch 1.13's MultiheadAttention, TransformerEncoderLayer and
# TransformerEncoder in float64 (parameters by state_dict name, inputs, masks, outputs, attention weights, and for
# some cases the gradients of sum(out * g_out) (+ sum(weights * g_w)) with respect to every parameter and input).
# Where torch 1.13 lacks a form tlua has, the golden is made of the equivalent torch call, said beside the case:
# a float key_padding_mask (torch 2's) is folded into a [N * heads, L, S] float attn_mask; is_causal (torch 2's) is
# the causal float attn_mask; bias = false of the encoder layer is torch's layer with its biases zeroed.
import os
import torch
from recurrent import lua, params

torch.set_default_dtype(torch.float64)


def grads(m):
    return {f'["{k}"]': p.grad.detach().clone() for k, p in m.named_parameters()}


def mha_case(E, H, L, S, N, self_attn=False, masks=None, grad=False, average=True, fold_kpm=False,
             causal=False, **kw):
    """masks: dict of attn_mask / key_padding_mask tensors as tlua gets them."""
    m = torch.nn.MultiheadAttention(E, H, **kw)
    kdim, vdim = kw.get("kdim", E), kw.get("vdim", E)
    bf = kw.get("batch_first", False)
    batched = N is not None

    def shape(T, D):
        if not batched:
            return (T, D)
        return (N, T, D) if bf else (T, N, D)

    q = torch.randn(*shape(L, E)).requires_grad_(grad)
    if self_attn:
        k = v = q
    else:
        k = torch.randn(*shape(S, kdim)).requires_grad_(grad)
        v = torch.randn(*shape(S, vdim)).requires_grad_(grad)
    masks = masks or {}
    case = {"embed_dim": E, "num_heads": H, "opts": kw, "params": params(m), "query": q, "self_attn": self_attn,
            "average_attn_weights": average, "is_causal": causal}
    if not self_attn:
        case["key"], case["value"] = k, v
    for name, t in masks.items():
        case[name] = t
    attn_mask, kpm = masks.get("attn_mask"), masks.get("key_padding_mask")
    if fold_kpm:  # a float key_padding_mask [N, S] added to a float attn_mask as [N * H, L, S]
        base = attn_mask if attn_mask is not None else torch.zeros(L, S)
        if base.dim() == 2:
            base = base.expand(N * H, L, S)
        attn_mask = base + kpm.view(N, 1, 1, S).expand(N, H, L, S).reshape(N * H, L, S)
        kpm = None
    if causal:
        attn_mask = torch.zeros(L, S).masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    out, w = m(q, k, v, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True, average_attn_weights=average)
    case["output"], case["weights"] = out, w
    if grad:
        g_out, g_w = torch.randn_like(out), torch.randn_like(w)
        ((out * g_out).sum() + (w * g_w).sum()).backward()
        case["g_out"], case["g_w"] = g_out, g_w
        case["grads"] = grads(m)
        case["grad_query"] = q.grad
        if not self_attn:
            case["grad_key"], case["grad_value"] = k.grad, v.grad
    return case


def layer_case(E, H, src_shape, layer_kw, masks=None, grad=False, zero_bias=False, num_layers=None):
    kw = dict(layer_kw)
    lua_opts = dict(kw)
    if zero_bias:
        lua_opts["bias"] = False
    act = kw.get("activation")
    layer = torch.nn.TransformerEncoderLayer(E, H, **kw)
    if zero_bias:
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
    m = layer
    if num_layers:
        m = torch.nn.TransformerEncoder(layer, num_layers, norm=torch.nn.LayerNorm(E), enable_nested_tensor=False)
        with torch.no_grad():  # each copy its own values
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.1)
    src = torch.randn(*src_shape).requires_grad_(grad)
    masks = masks or {}
    sd = {f'["{k}"]': p.detach().clone() for k, p in m.state_dict().items()
          if not (zero_bias and k.endswith("bias"))}
    case = {"d_model": E, "nhead": H, "opts": lua_opts, "params": sd, "src": src, "num_layers": num_layers}
    if act is not None:
        case["opts"]["activation"] = act
    for name, t in masks.items():
        case[name] = t
    if num_layers:
        out = m(src, mask=masks.get("src_mask"), src_key_padding_mask=masks.get("src_key_padding_mask"))
    else:
        out = m(src, src_mask=masks.get("src_mask"), src_key_padding_mask=masks.get("src_key_padding_mask"))
    case["output"] = out
    if grad:
        g_out = torch.randn_like(out)
        (out * g_out).sum().backward()
        case["g_out"] = g_out
        case["grads"] = grads(m)
        case["grad_src"] = src.grad
    return case


def bool_mask(*shape, p=0.3):
    m = torch.rand(*shape) < p
    m[..., 0] = False  # no row fully masked
    return m


def main():
    torch.manual_seed(2929)
    E, H, L, S, N = 8, 2, 4, 6, 3
    cases = {
        "self": mha_case(E, H, L, L, N, self_attn=True, grad=True),
        "bool_masks": mha_case(E, H, L, S, N, grad=True, masks={
            "attn_mask": bool_mask(L, S), "key_padding_mask": bool_mask(N, S)}),
        "float_masks": mha_case(E, H, L, S, N, fold_kpm=True, masks={
            "attn_mask": torch.randn(N * H, L, S), "key_padding_mask": torch.randn(N, S)}),
        "float_attn_bool_kpm": mha_case(E, H, L, S, N, average=False, masks={
            "attn_mask": torch.randn(L, S), "key_padding_mask": bool_mask(N, S)}),
        "bool_attn_3d": mha_case(E, H, L, S, N, masks={"attn_mask": bool_mask(N * H, L, S)}),
        "kdim_vdim": mha_case(E, H, L, S, N, grad=True, average=False, kdim=3, vdim=5, batch_first=True,
                              masks={"key_padding_mask": bool_mask(N, S)}),
        "bias_kv_zero_attn": mha_case(E, H, L, S, N, grad=True, add_bias_kv=True, add_zero_attn=True, masks={
            "attn_mask": bool_mask(L, S), "key_padding_mask": bool_mask(N, S)}),
        "bias_kv_no_mask": mha_case(E, H, L, S, N, add_bias_kv=True),
        "unbatched": mha_case(E, H, L, S, None, average=False, masks={"attn_mask": bool_mask(H, L, S)}),
        "unbatched_self": mha_case(E, H, L, L, None, self_attn=True, masks={"key_padding_mask": bool_mask(L)}),
        "no_bias": mha_case(E, H, L, S, N, bias=False),
        "causal": mha_case(E, H, L, L, N, self_attn=True, causal=True, batch_first=True),
        "causal_cross": mha_case(E, H, L, S, N, causal=True),
    }
    ff = {"dim_feedforward": 16, "dropout": 0.0}
    layers = {
        "post_norm": layer_case(E, H, (L, N, E), ff, grad=True, masks={"src_key_padding_mask": bool_mask(N, L)}),
        "pre_norm_gelu": layer_case(E, H, (N, L, E), dict(ff, norm_first=True, activation="gelu", batch_first=True),
                                    grad=True, masks={"src_mask": torch.randn(L, L)}),
        "pre_norm_eps": layer_case(E, H, (L, E), dict(ff, norm_first=True, layer_norm_eps=1e-3),
                                   masks={"src_mask": bool_mask(L, L)}),
        "no_bias": layer_case(E, H, (L, N, E), ff, zero_bias=True),
        "encoder": layer_case(E, H, (L, N, E), dict(ff, norm_first=True), num_layers=2, grad=True,
                              masks={"src_mask": bool_mask(L, L), "src_key_padding_mask": bool_mask(N, L)}),
    }
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "transformer.lua"), "w") as f:
        f.write("-- Written by /usr/bin/python3 spec/goldens/transformer.py (PyTorch " + torch.__version__ +
                ", float64)\n")
        f.write("return " + lua({"mha": cases, "encoder": layers}) + "\n")


if __name__ == "__main__":
    main()
