"""The benchmarks' timer: best of several repeats after a warm-up, the device synchronised around each."""
from __future__ import annotations

import time

import torch


def best(fn, repeat: int = 3, device: str = "cpu") -> float:
    """Seconds of the fastest of ``repeat`` calls of ``fn`` after one untimed warm-up call (start-up,
    allocation, cuDNN's first plans); on CUDA the queue is drained before and after each call."""
    cuda = torch.device(device).type == "cuda"
    fn()
    times = []
    for _ in range(repeat):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)
