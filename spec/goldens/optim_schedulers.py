# /usr/bin/python3 spec/goldens/optim_schedulers.py
# Writes spec/goldens/optim_schedulers.lua: PyTorch 1.13's learning-rate schedulers over 100 steps,
# get_last_lr() of each parameter group (lr 0.1 and 0.05; SGD with momentum 0.9, or Adam for a
# OneCycleLR case) when made and after each step; for OneCycleLR also each group's momentum (or
# beta1); for ReduceLROnPlateau the metrics fed to it. The spec builds the same schedulers by name.
import math
import os
import sys
import warnings
import torch
from torch.optim import lr_scheduler as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from luatable import lua as luatable_lua  # noqa: E402


def lua(v):
    return luatable_lua(v, dicts="nested", lists="nested")

warnings.simplefilter("ignore")
STEPS = 100


def optimizer(kind="sgd"):
    ps = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    groups = [dict(params=[ps[0]], lr=0.1), dict(params=[ps[1]], lr=0.05)]
    if kind == "adam":
        return torch.optim.Adam(groups)
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


# metrics for ReduceLROnPlateau: falling, then a noisy plateau, then rising
METRICS = [1.0 / (1 + i / 8) + 0.02 * math.sin(1.7 * i) if i < 60 else 0.1 + 0.002 * (i - 60) for i in range(STEPS)]

CASES = {
    "step": lambda o: S.StepLR(o, 7, gamma=0.5),
    "step_default": lambda o: S.StepLR(o, 30),
    "multistep": lambda o: S.MultiStepLR(o, [10, 25, 25, 60], gamma=0.3),
    "exponential": lambda o: S.ExponentialLR(o, 0.95),
    "constant": lambda o: S.ConstantLR(o, factor=0.25, total_iters=12),
    "constant_default": lambda o: S.ConstantLR(o),
    "linear": lambda o: S.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=30),
    "linear_default": lambda o: S.LinearLR(o),
    "cosine": lambda o: S.CosineAnnealingLR(o, 30, eta_min=0.001),
    "cosine_long": lambda o: S.CosineAnnealingLR(o, 150),
    "warm_restarts": lambda o: S.CosineAnnealingWarmRestarts(o, 10, T_mult=2, eta_min=0.0005),
    "warm_restarts_default": lambda o: S.CosineAnnealingWarmRestarts(o, 7),
    "one_cycle": lambda o: S.OneCycleLR(o, [1.0, 0.5], total_steps=100),
    "one_cycle_linear_three_phase": lambda o: S.OneCycleLR(
        o, 0.8, epochs=10, steps_per_epoch=12, pct_start=0.25, anneal_strategy="linear", three_phase=True,
        div_factor=10.0, final_div_factor=100.0, base_momentum=0.8, max_momentum=0.9),
    "lambda": lambda o: S.LambdaLR(o, lambda e: 0.97 ** e),
    "lambda_per_group": lambda o: S.LambdaLR(o, [lambda e: 1 / (1 + e), lambda e: 0.9 ** (e // 10)]),
    "sequential": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=10), S.CosineAnnealingLR(o, 40)], milestones=[10]),
    "sequential3": lambda o: S.SequentialLR(
        o, [S.ConstantLR(o, factor=0.5, total_iters=5), S.ExponentialLR(o, 0.9), S.StepLR(o, 10, gamma=0.5)],
        milestones=[20, 50]),
    "plateau": lambda o: S.ReduceLROnPlateau(o, factor=0.5, patience=3, cooldown=2, threshold=0.01,
                                             min_lr=[0.001, 0.01]),
    "plateau_max_abs": lambda o: S.ReduceLROnPlateau(o, mode="max", threshold_mode="abs", threshold=0.05,
                                                     patience=2, factor=0.3),
}
KIND = {"one_cycle_linear_three_phase": "adam"}


def momentum(o, kind):
    return [g["betas"][0] if kind == "adam" else g["momentum"] for g in o.param_groups]


out = {}
for name, make in CASES.items():
    kind = KIND.get(name, "sgd")
    o = optimizer(kind)
    s = make(o)
    plateau = isinstance(s, S.ReduceLROnPlateau)
    lrs = [[g["lr"] for g in o.param_groups] if plateau else list(s.get_last_lr())]
    moms = [momentum(o, kind)]
    for i in range(STEPS):
        o.step()
        if plateau:
            s.step(METRICS[i])
            lrs.append([g["lr"] for g in o.param_groups])
        else:
            s.step()
            lrs.append(list(s.get_last_lr()))
        moms.append(momentum(o, kind))
    case = dict(lrs=lrs)
    if name.startswith("one_cycle"):
        case["momentum"] = moms
    out[name] = case

# two schedulers on one optimizer (chained: each steps from the lr the other left)
o = optimizer()
a, b = S.StepLR(o, 10, gamma=0.5), S.ExponentialLR(o, 0.99)
lrs = [list(b.get_last_lr())]
for i in range(STEPS):
    o.step()
    a.step()
    b.step()
    lrs.append(list(b.get_last_lr()))
out["chained"] = dict(lrs=lrs)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_schedulers.lua")
with open(path, "w") as f:
    f.write("-- made by /usr/bin/python3 spec/goldens/optim_schedulers.py (do not edit)\n")
    f.write("return " + lua(dict(torch=torch.__version__, metrics=METRICS, cases=out)) + "\n")
print("wrote", path, len(out), "cases")
