# Issue-29 benchmark, PyTorch side: the same training step of examples/resnet's small ResNet (SGD
# with Nesterov momentum; bf16 autocast on CUDA) and the same depthwise 3x3 Conv2d forward+backward
# as bench/resnet.lua. Prints "key value" lines (medians, ms).
# usage: python3 bench/resnet_torch.py [--device cpu|cuda] [--batch N] [--steps N] [--threads N (default: one per CPU)]
import argparse
import os
import statistics
import time

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--batch", type=int, default=128)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--threads", type=int)
opts = p.parse_args()
# the thread count, set explicitly and printed: one per CPU unless --threads says otherwise, as
# bench/resnet.lua defaults (torch's own default may be lower: 1 on a 2-CPU VM)
threads = opts.threads or os.cpu_count()
torch.set_num_threads(threads)
print("threads %d" % threads)
cuda = opts.device != "cpu"
torch.backends.cudnn.benchmark = False


def sync():
    if cuda:
        torch.cuda.synchronize()


def conv3x3(cin, cout, stride):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout, 1), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, width=32, blocks=2):
        super().__init__()
        self.stem = nn.Sequential(conv3x3(1, width, 1), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for stage in range(3):
            cout = width << stage
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


def median_ms(fn, steps):
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


torch.manual_seed(0)
model = ResNet().to(opts.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
loss_fn = nn.CrossEntropyLoss()
x = torch.randn(opts.batch, 1, 28, 28, device=opts.device)
y = torch.randint(0, 10, (opts.batch,), device=opts.device)


def step():
    optimizer.zero_grad()
    if cuda:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
    else:
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()


print("resnet_step_ms %.4f" % median_ms(step, opts.steps))

channels, size = (256, 56) if cuda else (64, 28)
dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False).to(opts.device)
dx = torch.randn(64 if cuda else 16, channels, size, size, device=opts.device, requires_grad=True)


def depthwise():
    dw.weight.grad, dx.grad = None, None
    dw(dx).sum().backward()


print("depthwise_ms %.4f" % median_ms(depthwise, opts.steps))
