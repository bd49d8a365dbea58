# /usr/bin/python3 spec/goldens/optim_trajectories.py
# Writes spec/goldens/optim_trajectories.lua: PyTorch 1.13's optimizers over 10 steps of fixed
# gradients on two float64 parameters (one or two parameter groups), the parameters after each step.
# A case with negate = true (maximize on NAdam/RAdam, which torch 1.13 lacks) is torch run on the
# negated gradients without maximize: tlua's maximize = true must give the same trajectory.
import os
import sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from luatable import lua as luatable_lua  # noqa: E402


def lua(v):
    return luatable_lua(v, dicts="nested", lists="nested")

torch.set_default_dtype(torch.float64)
torch.manual_seed(29)
STEPS = 10
P0 = [torch.randn(2, 3), torch.randn(4)]
GRADS = [[torch.randn(2, 3) * 0.5, torch.randn(4) * 0.5] for _ in range(STEPS)]
GRADS[3][1][2] = 0.0  # a zero gradient entry

# (name, optimizer, options, groups or None, negate): groups are (indices of parameters, options)
CASES = [
    ("sgd", "SGD", dict(lr=0.1), None, False),
    ("sgd_momentum", "SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), None, False),
    ("sgd_nesterov", "SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), None, False),
    ("sgd_maximize", "SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1, maximize=True), None, False),
    ("sgd_groups", "SGD", dict(lr=0.1, momentum=0.9),
     [([0], dict()), ([1], dict(lr=0.03, momentum=0.5, nesterov=True, weight_decay=0.2))], False),
    ("adam", "Adam", dict(lr=0.01), None, False),
    ("adam_wd", "Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), None, False),
    ("adam_amsgrad", "Adam", dict(lr=0.02, amsgrad=True, weight_decay=0.05), None, False),
    ("adam_maximize", "Adam", dict(lr=0.01, maximize=True, weight_decay=0.1), None, False),
    ("adam_amsgrad_maximize", "Adam", dict(lr=0.02, betas=(0.5, 0.9), amsgrad=True, maximize=True), None, False),
    ("adam_groups", "Adam", dict(lr=0.01),
     [([0], dict(amsgrad=True)), ([1], dict(lr=0.05, betas=(0.7, 0.95), weight_decay=0.1))], False),
    ("adamw", "AdamW", dict(lr=0.01, weight_decay=0.1), None, False),
    ("adamw_amsgrad", "AdamW", dict(lr=0.02, amsgrad=True), None, False),
    ("adamw_maximize", "AdamW", dict(lr=0.01, maximize=True, amsgrad=True, weight_decay=0.3), None, False),
    ("rmsprop", "RMSprop", dict(lr=0.01), None, False),
    ("rmsprop_wd", "RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1), None, False),
    ("rmsprop_momentum", "RMSprop", dict(lr=0.01, momentum=0.9), None, False),
    ("rmsprop_centered", "RMSprop", dict(lr=0.01, centered=True), None, False),
    ("rmsprop_all", "RMSprop", dict(lr=0.005, alpha=0.95, momentum=0.5, centered=True, weight_decay=0.05,
                                     maximize=True), None, False),
    ("rmsprop_groups", "RMSprop", dict(lr=0.01),
     [([0], dict(centered=True)), ([1], dict(momentum=0.7, alpha=0.8))], False),
    ("adagrad", "Adagrad", dict(lr=0.1), None, False),
    ("adagrad_all", "Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.1,
                                     eps=1e-8), None, False),
    ("adagrad_maximize", "Adagrad", dict(lr=0.1, maximize=True, lr_decay=0.01), None, False),
    # (torch 1.13 fills every sum with the constructor's initial_accumulator_value, a group's own
    # value unused; tlua takes the group's: the same here)
    ("adagrad_groups", "Adagrad", dict(lr=0.1, initial_accumulator_value=0.5),
     [([0], dict()), ([1], dict(lr=0.2, eps=1e-6, weight_decay=0.1))], False),
    ("adamax", "Adamax", dict(lr=0.02), None, False),
    ("adamax_wd", "Adamax", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), None, False),
    ("adamax_maximize", "Adamax", dict(lr=0.02, maximize=True), None, False),
    ("nadam", "NAdam", dict(lr=0.01), None, False),
    ("nadam_all", "NAdam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, momentum_decay=0.01),
     None, False),
    ("nadam_maximize", "NAdam", dict(lr=0.01, maximize=True), None, True),
    ("radam", "RAdam", dict(lr=0.01), None, False),
    ("radam_all", "RAdam", dict(lr=0.01, betas=(0.9, 0.9), eps=1e-6, weight_decay=0.1), None, False),
    ("radam_maximize", "RAdam", dict(lr=0.01, maximize=True), None, True),
    ("radam_groups", "RAdam", dict(lr=0.01),
     [([0], dict()), ([1], dict(betas=(0.8, 0.85), weight_decay=0.2))], False),
]


def run(cls_name, opts, groups, negate):
    params = [p.clone().requires_grad_() for p in P0]
    kw = {k: v for k, v in opts.items() if not (negate and k == "maximize")}
    if groups is None:
        opt = getattr(torch.optim, cls_name)(params, **kw)
    else:
        opt = getattr(torch.optim, cls_name)([dict(params=[params[i] for i in idx], **g) for idx, g in groups], **kw)
    out = []
    for step in range(STEPS):
        for p, g in zip(params, GRADS[step]):
            p.grad = -g.clone() if negate else g.clone()
        opt.step()
        out.append([p.detach().reshape(-1).tolist() for p in params])
    return out


def lua_opts(opts):
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()}


cases = []
for name, cls_name, opts, groups, negate in CASES:
    case = dict(name=name, optim=cls_name, opts=lua_opts(opts))
    if groups is not None:
        case["groups"] = [dict(params=[i + 1 for i in idx], opts=lua_opts(g)) for idx, g in groups]
    case["trajectory"] = run(cls_name, opts, groups, negate)
    cases.append(case)

golden = dict(
    torch=torch.__version__,
    shapes=[list(p.shape) for p in P0],
    p0=[p.reshape(-1).tolist() for p in P0],
    grads=[[g.reshape(-1).tolist() for g in gs] for gs in GRADS],
    cases=cases,
)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_trajectories.lua")
with open(path, "w") as f:
    f.write("-- made by /usr/bin/python3 spec/goldens/optim_trajectories.py (do not edit)\n")
    f.write("return " + lua(golden) + "\n")
print("wrote", path, len(cases), "cases")
