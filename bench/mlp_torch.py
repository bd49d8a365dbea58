# Issue-5 benchmark, PyTorch side: the same MLP training step (Adam, batch 128)
# on the CPU, and one epoch with data on the GPU. Prints "key value" lines.
# usage: python3 bench/mlp_torch.py [--device cpu|cuda] [--threads N] [--steps N]
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--threads", type=int)
p.add_argument("--steps", type=int, default=200)
opts = p.parse_args()
if opts.threads:
    torch.set_num_threads(opts.threads)
cuda = opts.device != "cpu"


def sync():
    if cuda:
        torch.cuda.synchronize()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(opts.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
n, batch = 60000, 128
images = torch.rand(n, 784, device=opts.device)
labels = torch.randint(0, 10, (n,), device=opts.device)


def step(x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


x, y = images[:batch], labels[:batch]
for _ in range(20):
    step(x, y)
sync()
samples = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(opts.steps // 5):
        step(x, y)
    sync()
    samples.append((time.perf_counter() - t0) / (opts.steps // 5))
samples.sort()
print("step_ms %.4f" % (samples[2] * 1e3))

if cuda:
    def epoch():
        for start in range(0, n - batch + 1, batch):
            step(images[start:start + batch], labels[start:start + batch])
        sync()

    epoch()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - t0)
    times.sort()
    print("epoch_s %.4f" % times[1])
