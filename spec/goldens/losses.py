# /usr/bin/python3 spec/goldens/losses.py
# Writes spec/goldens/losses.lua: PyTorch 1.13's values and gradients (float64) of every loss of
# torch.nn.functional over seeded random inputs, for spec/losses_spec.lua. Classes, ignore_index
# and the CTC blank are written as tlua counts them (from 1: torch's value + 1). A case whose
# loss is not a scalar records cw, the weights of its elements in the scalar that backward runs
# on (sum(out * cw)). A case with log_softmax = d feeds the loss log_softmax(input, d) (CTC: torch
# returns for log_probs the gradient through log_softmax, so gradients are compared there).
import os
import torch
import torch.nn.functional as F
import luatable

torch.manual_seed(29)
torch.set_default_dtype(torch.float64)

CASES = []


num = luatable.number


def lua(v):
    return luatable.lua(v, pad=" ", sort_keys=True, tensors="records")


def case(name, fn, args, torch_kwargs, lua_opts, grads=None, log_softmax=None, no_grad=False):
    """args: tensors (and lists of lengths for ctc); grads: indices of args differentiated"""
    torch_fn = getattr(F, fn)
    lua_args = [a[1] + 1 if isinstance(a, tuple) else a for a in args]
    args = [a[1] if isinstance(a, tuple) else a for a in args]
    if grads is None:
        grads = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    leaves = []
    for i, a in enumerate(args):
        if i in grads and not no_grad:
            leaves.append(a.clone().requires_grad_(True))
        else:
            leaves.append(a)
    call = list(leaves)
    if log_softmax is not None:
        call[0] = call[0].log_softmax(log_softmax - 1)
    out = torch_fn(*call, **torch_kwargs)
    entry = {"name": name, "fn": fn, "args": [], "opts": lua_opts, "out": out}
    for i, a in enumerate(lua_args):
        entry["args"].append({"value": a, "grad": i in grads and not no_grad})
    if log_softmax is not None:
        entry["log_softmax"] = log_softmax
    if not no_grad:
        if out.dim() > 0:
            cw = torch.rand(out.shape)
            entry["cw"] = cw
            (out * cw).sum().backward()
        else:
            out.backward()
        entry["grads"] = [leaves[i].grad if i in grads else False for i in range(len(args))]
    CASES.append(entry)


def shift(t):
    """a class tensor: torch gets t, tlua t + 1"""
    return ("shift", t)


REDUCTIONS = ["none", "mean", "sum"]

# ---- cross_entropy ----------------------------------------------------------------------------
N, C = 5, 4
logits = torch.randn(N, C) * 2
target = torch.tensor([0, 3, 2, 2, 1])
weight = torch.rand(C) + 0.5
target_ign = torch.tensor([0, 3, 2, 2, 3])  # ignore_index 2 (tlua 3): two ignored
for r in REDUCTIONS:
    case("cross_entropy %s" % r, "cross_entropy", [logits, shift(target)], {"reduction": r},
         {"reduction": r})
    case("cross_entropy weight %s" % r, "cross_entropy", [logits, shift(target)], {"weight": weight, "reduction": r},
         {"weight": weight, "reduction": r})
    case("cross_entropy ignore_index %s" % r, "cross_entropy", [logits, shift(target_ign)],
         {"ignore_index": 2, "reduction": r}, {"ignore_index": 3, "reduction": r})
    case("cross_entropy weight ignore_index %s" % r, "cross_entropy", [logits, shift(target_ign)],
         {"weight": weight, "ignore_index": 2, "reduction": r}, {"weight": weight, "ignore_index": 3, "reduction": r})
    case("cross_entropy label_smoothing %s" % r, "cross_entropy", [logits, shift(target)],
         {"label_smoothing": 0.2, "reduction": r}, {"label_smoothing": 0.2, "reduction": r})
    case("cross_entropy label_smoothing weight ignore_index %s" % r, "cross_entropy", [logits, shift(target_ign)],
         {"label_smoothing": 0.3, "weight": weight, "ignore_index": 2, "reduction": r},
         {"label_smoothing": 0.3, "weight": weight, "ignore_index": 3, "reduction": r})
    case("cross_entropy label_smoothing ignore_index %s" % r, "cross_entropy", [logits, shift(target_ign)],
         {"label_smoothing": 0.1, "ignore_index": 2, "reduction": r},
         {"label_smoothing": 0.1, "ignore_index": 3, "reduction": r})
# ignore_index outside the classes (torch's default -100, tlua -99) and 0 (tlua 1)
case("cross_entropy ignore_index -100", "cross_entropy", [logits, shift(torch.tensor([0, -100, 2, -100, 1]))],
     {"ignore_index": -100}, {"ignore_index": -99})
# [N, C, d1, d2]
logits4 = torch.randn(3, C, 2, 3)
target4 = torch.randint(0, C, (3, 2, 3))
target4_ign = target4.clone()
target4_ign[0, 1, 2] = 1
target4_ign[2, 0, 0] = 1
for r in REDUCTIONS:
    case("cross_entropy [N, C, d1, d2] %s" % r, "cross_entropy", [logits4, shift(target4)], {"reduction": r},
         {"reduction": r})
    case("cross_entropy [N, C, d1, d2] weight ignore_index label_smoothing %s" % r, "cross_entropy",
         [logits4, shift(target4_ign)], {"weight": weight, "ignore_index": 1, "label_smoothing": 0.15, "reduction": r},
         {"weight": weight, "ignore_index": 2, "label_smoothing": 0.15, "reduction": r})
case("cross_entropy [N, C, d1] label_smoothing", "cross_entropy",
     [torch.randn(2, C, 3), shift(torch.randint(0, C, (2, 3)))],
     {"label_smoothing": 0.25}, {"label_smoothing": 0.25})
# class probabilities
probs = torch.softmax(torch.randn(N, C), 1)
probs4 = torch.softmax(torch.randn(3, C, 2, 3), 1)
for r in REDUCTIONS:
    case("cross_entropy probabilities %s" % r, "cross_entropy", [logits, probs], {"reduction": r}, {"reduction": r},
         grads=[0, 1])
    case("cross_entropy probabilities weight label_smoothing %s" % r, "cross_entropy", [logits, probs],
         {"weight": weight, "label_smoothing": 0.2, "reduction": r},
         {"weight": weight, "label_smoothing": 0.2, "reduction": r}, grads=[0, 1])
    case("cross_entropy probabilities [N, C, d1, d2] %s" % r, "cross_entropy", [logits4, probs4], {"reduction": r},
         {"reduction": r}, grads=[0, 1])
# unbatched
logits1 = torch.randn(C)
for r in REDUCTIONS:
    case("cross_entropy unbatched %s" % r, "cross_entropy", [logits1, shift(torch.tensor(2))], {"reduction": r},
         {"reduction": r})
    case("cross_entropy unbatched weight %s" % r, "cross_entropy", [logits1, shift(torch.tensor(3))],
         {"weight": weight, "reduction": r}, {"weight": weight, "reduction": r})
    case("cross_entropy unbatched probabilities %s" % r, "cross_entropy", [logits1, torch.softmax(torch.randn(C), 0)],
         {"reduction": r}, {"reduction": r})

# ---- nll_loss ---------------------------------------------------------------------------------
lp = torch.randn(N, C).log_softmax(1)
lp4 = torch.randn(3, C, 2, 3)  # any values: nll_loss does not need log-probabilities
for r in REDUCTIONS:
    case("nll_loss %s" % r, "nll_loss", [lp, shift(target)], {"reduction": r}, {"reduction": r})
    case("nll_loss weight ignore_index %s" % r, "nll_loss", [lp, shift(target_ign)],
         {"weight": weight, "ignore_index": 2, "reduction": r}, {"weight": weight, "ignore_index": 3, "reduction": r})
    case("nll_loss [N, C, d1, d2] weight ignore_index %s" % r, "nll_loss", [lp4, shift(target4_ign)],
         {"weight": weight, "ignore_index": 1, "reduction": r}, {"weight": weight, "ignore_index": 2, "reduction": r})
    case("nll_loss unbatched %s" % r, "nll_loss", [torch.randn(C), shift(torch.tensor(1))], {"reduction": r},
         {"reduction": r})
case("nll_loss weight", "nll_loss", [lp, shift(target)], {"weight": weight}, {"weight": weight})
case("nll_loss ignore_index", "nll_loss", [lp, shift(target_ign)], {"ignore_index": 2}, {"ignore_index": 3})

# ---- binary cross entropy ---------------------------------------------------------------------
p = torch.rand(4, 3) * 0.9 + 0.05
y = torch.rand(4, 3)
bweight = torch.rand(3) + 0.5
for r in REDUCTIONS:
    case("binary_cross_entropy %s" % r, "binary_cross_entropy", [p, y], {"reduction": r}, {"reduction": r})
    case("binary_cross_entropy weight %s" % r, "binary_cross_entropy", [p, y], {"weight": bweight, "reduction": r},
         {"weight": bweight, "reduction": r})
full_w = torch.rand(4, 3)
case("binary_cross_entropy full weight", "binary_cross_entropy", [p, y], {"weight": full_w}, {"weight": full_w})
# probabilities of exactly 0 and 1: logs clamped at -100, the gradient (x - y) / 1e-12
p01 = torch.tensor([0.0, 1.0, 0.5, 1.0, 0.0, 0.25])
y01 = torch.tensor([0.3, 0.6, 1.0, 1.0, 0.0, 0.0])
case("binary_cross_entropy at 0 and 1", "binary_cross_entropy", [p01, y01], {"reduction": "sum"},
     {"reduction": "sum"})

x = torch.randn(4, 3) * 3
x[0, 0] = 0.0
x[1, 1] = 40.0
x[2, 2] = -40.0
x[3, 0] = 800.0
x[3, 1] = -800.0
pos_weight = torch.rand(3) * 2 + 0.2
for r in REDUCTIONS:
    case("binary_cross_entropy_with_logits %s" % r, "binary_cross_entropy_with_logits", [x, y], {"reduction": r},
         {"reduction": r})
    case("binary_cross_entropy_with_logits weight pos_weight %s" % r, "binary_cross_entropy_with_logits", [x, y],
         {"weight": bweight, "pos_weight": pos_weight, "reduction": r},
         {"weight": bweight, "pos_weight": pos_weight, "reduction": r})
case("binary_cross_entropy_with_logits pos_weight", "binary_cross_entropy_with_logits", [x, y],
     {"pos_weight": pos_weight}, {"pos_weight": pos_weight})
case("binary_cross_entropy_with_logits weight", "binary_cross_entropy_with_logits", [x, y],
     {"weight": full_w}, {"weight": full_w})

# ---- regression -------------------------------------------------------------------------------
a = torch.randn(3, 4) * 2
b = torch.randn(3, 4) * 2
for r in REDUCTIONS:
    case("mse_loss %s" % r, "mse_loss", [a, b], {"reduction": r}, {"reduction": r})
    case("l1_loss %s" % r, "l1_loss", [a, b], {"reduction": r}, {"reduction": r})
    case("smooth_l1_loss %s" % r, "smooth_l1_loss", [a, b], {"reduction": r}, {"reduction": r})
    case("smooth_l1_loss beta 0.7 %s" % r, "smooth_l1_loss", [a, b], {"beta": 0.7, "reduction": r},
         {"beta": 0.7, "reduction": r})
    case("huber_loss %s" % r, "huber_loss", [a, b], {"reduction": r}, {"reduction": r})
    case("huber_loss delta 0.4 %s" % r, "huber_loss", [a, b], {"delta": 0.4, "reduction": r},
         {"delta": 0.4, "reduction": r})
case("smooth_l1_loss beta 0", "smooth_l1_loss", [a, b], {"beta": 0.0}, {"beta": 0.0})
case("huber_loss delta 2.5", "huber_loss", [a, b], {"delta": 2.5}, {"delta": 2.5})

# ---- kl_div -----------------------------------------------------------------------------------
kin = torch.randn(3, 5).log_softmax(1)
ktar = torch.softmax(torch.randn(3, 5), 1)
ktar[0, 1] = 0.0  # xlogy: 0 log 0 = 0
for r in REDUCTIONS + ["batchmean"]:
    case("kl_div %s" % r, "kl_div", [kin, ktar], {"reduction": r}, {"reduction": r}, grads=[0])
    case("kl_div log_target %s" % r, "kl_div", [kin, torch.randn(3, 5).log_softmax(1)],
         {"reduction": r, "log_target": True}, {"reduction": r, "log_target": True})

# ---- embedding and ranking --------------------------------------------------------------------
x1 = torch.randn(6, 4)
x2 = torch.randn(6, 4)
yc = torch.tensor([1, -1, 1, -1, -1, 1])
for r in REDUCTIONS:
    case("cosine_embedding_loss %s" % r, "cosine_embedding_loss", [x1, x2, yc], {"reduction": r}, {"reduction": r})
    case("cosine_embedding_loss margin %s" % r, "cosine_embedding_loss", [x1, x2, yc], {"margin": -0.2,
         "reduction": r}, {"margin": -0.2, "reduction": r})
    case("margin_ranking_loss %s" % r, "margin_ranking_loss", [x1[:, 0].clone(), x2[:, 0].clone(), yc],
         {"reduction": r}, {"reduction": r})
    case("margin_ranking_loss margin %s" % r, "margin_ranking_loss", [x1[:, 0].clone(), x2[:, 0].clone(),
         yc.double()], {"margin": 0.5, "reduction": r}, {"margin": 0.5, "reduction": r}, grads=[0, 1])
case("cosine_embedding_loss unbatched", "cosine_embedding_loss", [x1[0].clone(), x2[0].clone(), torch.tensor(-1)],
     {"margin": -0.5, "reduction": "none"}, {"margin": -0.5, "reduction": "none"})
an, po, ne = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
for r in REDUCTIONS:
    case("triplet_margin_loss %s" % r, "triplet_margin_loss", [an, po, ne], {"reduction": r}, {"reduction": r})
    case("triplet_margin_loss p 1 margin 2 swap %s" % r, "triplet_margin_loss", [an, po, ne],
         {"p": 1.0, "margin": 2.0, "swap": True, "reduction": r},
         {"p": 1.0, "margin": 2.0, "swap": True, "reduction": r})
case("triplet_margin_loss p 3 eps 0", "triplet_margin_loss", [an, po, ne], {"p": 3.0, "eps": 0.0},
     {"p": 3.0, "eps": 0.0})
case("triplet_margin_loss unbatched", "triplet_margin_loss", [an[0].clone(), po[0].clone(), ne[0].clone()],
     {"reduction": "none", "swap": True}, {"reduction": "none", "swap": True})

# ---- ctc_loss (log_softmax over the logits first) ---------------------------------------------
T, Nb, Cc = 12, 4, 5
clogits = torch.randn(T, Nb, Cc)
# repeated labels (needing a blank between), lengths varying, an empty target
ctargets = torch.tensor([[1, 2, 2, 3], [4, 4, 1, 0], [2, 0, 0, 0], [3, 1, 4, 2]])
in_len = [12, 9, 7, 10]
tg_len = [4, 3, 0, 4]
for r in REDUCTIONS:
    case("ctc_loss padded %s" % r, "ctc_loss", [clogits, shift(ctargets), in_len, tg_len], {"reduction": r},
         {"reduction": r}, grads=[0], log_softmax=3)
concat = torch.cat([ctargets[i, :tg_len[i]] for i in range(Nb)])
case("ctc_loss concatenated", "ctc_loss", [clogits, shift(concat), in_len, tg_len], {}, {}, grads=[0],
     log_softmax=3)
# blank 2 (tlua 3): labels avoid it
btargets = torch.tensor([[0, 1, 4], [4, 4, 0], [1, 0, 0], [3, 3, 3]])
case("ctc_loss blank", "ctc_loss", [clogits, shift(btargets), [12, 11, 5, 12], [3, 2, 1, 3]],
     {"blank": 2, "reduction": "sum"}, {"blank": 3, "reduction": "sum"}, grads=[0], log_softmax=3)
# an impossible alignment (3 repeated labels need 5 steps; 4 given): inf, or 0 with zero_infinity
itargets = torch.tensor([[2, 2, 2], [1, 3, 0]])
ilogits = torch.randn(6, 2, Cc)
case("ctc_loss impossible", "ctc_loss", [ilogits, shift(itargets), [4, 6], [3, 2]], {"reduction": "none"},
     {"reduction": "none"}, grads=[0], log_softmax=3, no_grad=True)
for r in REDUCTIONS:
    case("ctc_loss zero_infinity %s" % r, "ctc_loss", [ilogits, shift(itargets), [4, 6], [3, 2]],
         {"reduction": r, "zero_infinity": True}, {"reduction": r, "zero_infinity": True}, grads=[0], log_softmax=3)
case("ctc_loss unbatched", "ctc_loss",
     [torch.randn(7, Cc), shift(torch.tensor([2, 3, 3])), torch.tensor(7), torch.tensor(3)],
     {"reduction": "none"}, {"reduction": "none"}, grads=[0], log_softmax=2)

# ---- write ------------------------------------------------------------------------------------
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "losses.lua"), "w") as f:
    f.write("-- Generated by /usr/bin/python3 spec/goldens/losses.py (PyTorch %s, float64); do not edit.\n"
            % torch.__version__)
    f.write("return {\n")
    for c in CASES:
        fields = ["name = %s" % lua(c["name"]), "fn = %s" % lua(c["fn"])]
        args = []
        for a in c["args"]:
            args.append("{ value = %s, grad = %s }" % (lua(a["value"]), num(a["grad"])))
        fields.append("args = { %s }" % ", ".join(args))
        fields.append("opts = %s" % lua(c["opts"]))
        fields.append("out = %s" % lua(c["out"]))
        if "log_softmax" in c:
            fields.append("log_softmax = %d" % c["log_softmax"])
        if "cw" in c:
            fields.append("cw = %s" % lua(c["cw"]))
        if "grads" in c:
            fields.append("grads = { %s }" % ", ".join(lua(g) for g in c["grads"]))
        f.write("  { " + ",\n    ".join(fields) + " },\n")
    f.write("}\n")
print(len(CASES), "cases")
