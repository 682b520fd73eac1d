"""Clients side by side on a CPU: one thread per core, each running its clients' operations single-threaded.

A client's local step is small (MnistCNN at B = 8: a few MFLOP per operation), so PyTorch's intra-op threads
share each operation between the cores badly: on a 2-core CPU two threads, each training its own clients with
single-threaded operations, ran a DP-SGD client step in 9.4–9.7 ms against 14.9–15.5 ms for one client at a time
on two intra-op threads, and a round of Zheng's Table 2 cell (50 clients, B = 8) in 42–44 s against 65–74 s
(``benchmarks/RESULTS.md``; ``make bench``, row (j)). The clients of a round are independent (each has its own
parameters, optimiser state and generator), and a single-threaded operation gives the same bits on any machine
with the same kernels, so the result is the same bit for bit whatever the core count (``tests/test_local.py``) —
where intra-op threads make it depend on their number by round-off. Callers split whole chunks of clients (each
one vmapped call), never a chunk, so which clients share a call does not depend on the core count either.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

__all__ = ["spread", "by_chunks"]


def spread(fn, items: int, workers: int | None = None) -> None:
    """Call ``fn(part)`` for contiguous slices ``part`` covering ``range(items)``, one slice per worker thread
    (``workers``: default torch's intra-op thread count, at most ``items``), every operation single-threaded
    meanwhile (torch's thread count is restored after, also on an error). ``fn`` must write its results into
    its own part of shared outputs: it returns nothing. While operations are counted or profiled (a
    ``TorchDispatchMode`` such as ``dpfl.opcount.OpCounter``, ``torch.profiler``), which see the calling thread's
    only, the parts run one after the other in the calling thread: the same operations, the same bits."""
    workers = min(torch.get_num_threads() if workers is None else workers, items)
    bounds = np.linspace(0, items, max(workers, 1) + 1).round().astype(int)
    parts = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if len(parts) == 1 or _observed():
            for part in parts:
                fn(part)
            return
        with ThreadPoolExecutor(len(parts)) as pool:
            for done in [pool.submit(_single_threaded, fn, part) for part in parts]:
                done.result()                                       # re-raises a worker's error here
    finally:
        torch.set_num_threads(before)


def by_chunks(fn, items: int, chunk: int, *, side_by_side: bool) -> None:
    """Call ``fn(slices)`` on the slices of ``range(items)`` in chunks of ``chunk`` (one vmapped call each): all of
    them in the calling thread, or with ``side_by_side`` (a CPU) whole chunks spread over one thread a core
    (:func:`spread`), each thread's ``fn`` getting its own run of chunks, so which items share a call never depends
    on the core count. ``fn`` writes its results into shared outputs and may keep state for its run of chunks."""
    run = lambda part: fn(_slices(part, chunk, items))
    chunks = -(-items // chunk)
    if side_by_side:
        spread(run, chunks)
    else:
        run(slice(0, chunks))


def _slices(chunks: slice, chunk: int, items: int):
    """The item slices of the chunks ``chunks.start, …, chunks.stop - 1`` of ``chunk`` items each (of ``items``)."""
    for start in range(chunks.start * chunk, min(chunks.stop * chunk, items), chunk):
        yield slice(start, min(start + chunk, items))


def _single_threaded(fn, part):
    torch.set_num_threads(1)        # per thread where torch's threads are OpenMP's (a new thread starts with the default)
    return fn(part)


def _observed() -> bool:
    """Operations are being counted or profiled in this thread."""
    return _get_current_dispatch_mode() is not None or torch.autograd._profiler_enabled()
