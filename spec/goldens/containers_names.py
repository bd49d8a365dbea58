# Golden walk orders of torch.nn containers: named_parameters, named_modules, named_children, a ModuleList after insert.
# /usr/bin/python3 spec/goldens/containers_names.py
# Numbered path components are written from 1 (tlua's numbering): torch's "blocks.0" is "blocks.1" here.
import os

import torch
from torch import nn
from luatable import lua


def from_one(name):
    return ".".join(str(int(p) + 1) if p.isdigit() else p for p in name.split(".")) if name else name


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4, dtype=torch.float64))
        self.encoder = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU())])
        self.heads = nn.ModuleDict({"b": nn.Linear(4, 2)})
        self.heads.update([("a", nn.Linear(4, 2))])
        self.heads["c"] = nn.Linear(4, 2)
        self.alias = self.encoder  # a module reachable by two paths
        self.heads["c"].weight = self.heads["b"].weight  # tied weights


net = Net()
walks = {
    "named_parameters": [from_one(n) for n, _ in net.named_parameters()],
    "named_modules": [from_one(n) for n, _ in net.named_modules()],
    "named_children": [from_one(n) for n, _ in net.named_children()],
    "heads_keys": list(net.heads.keys()),
}
lst = nn.ModuleList([nn.Linear(1, 2), nn.Linear(2, 3)])
lst.insert(0, nn.Linear(5, 1))
lst.insert(2, nn.Linear(7, 1))
lst.extend([nn.Linear(3, 4)])
lst.append(nn.Linear(4, 5))
walks["list_state_dict"] = ["%s:%s" % (from_one(k), "x".join(str(s) for s in v.shape)) for k, v in lst.state_dict().items()]

lines = ["-- written by spec/goldens/containers_names.py (/usr/bin/python3 spec/goldens/containers_names.py): torch's walk",
         "-- orders of a model with a shared module and tied weights, numbered from 1", "return {"]
for key in sorted(walks):
    lines.append("  %s = %s," % (key, lua(walks[key], pad=" ")))
lines.append("}")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "containers_names.lua"), "w") as f:
    f.write("\n".join(lines) + "\n")
