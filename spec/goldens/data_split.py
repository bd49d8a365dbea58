# Golden split lengths of torch.utils.data.random_split (counts and fractions, torch's rule for the remainder).
# /usr/bin/python3 spec/goldens/data_split.py
import os
import warnings

import torch
from torch.utils.data import random_split
from luatable import lua

CASES = [
    (10, [0.3, 0.3, 0.4]),
    (30, [0.3, 0.3, 0.4]),
    (11, [0.5, 0.5]),
    (7, [0.2, 0.2, 0.2, 0.2, 0.2]),
    (101, [0.1, 0.9]),
    (5, [1.0]),
    (3, [0.25, 0.25, 0.25, 0.25]),
    (10, [3, 7]),
    (10, [0, 10]),
    (1, [1, 0]),
    (60000, [0.8, 0.1, 0.1]),
]


def lua_list(values):
    return lua(values, pad=" ")


lines = ["-- written by spec/goldens/data_split.py (/usr/bin/python3 spec/goldens/data_split.py): "
         "torch.utils.data.random_split's lengths", "return {"]
for n, lengths in CASES:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = random_split(range(n), lengths, generator=torch.Generator().manual_seed(0))
    lines.append("  { n = %d, lengths = %s, sizes = %s }," % (n, lua_list(lengths), lua_list([len(p) for p in parts])))
lines.append("}")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_split.lua"), "w") as f:
    f.write("\n".join(lines) + "\n")
