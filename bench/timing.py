# What the PyTorch benchmarks share: the median time of a function after warm-up, with the device
# synchronised around each run (nothing to wait for on the CPU).
import statistics
import time

import torch


def synchronizer(device):
    """A function that waits for the work queued on device."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def median_time(fn, warmup, repeats, sync):
    """The median seconds of one run of fn over repeats runs, after warmup runs."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)
