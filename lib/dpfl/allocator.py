"""Keep freed CPU memory for reuse: long CPU training runs without a page fault per fresh tensor page.

PyTorch's CPU allocator takes its memory from the C library's ``malloc``. glibc serves a block of
32 MiB or more (its largest ``mmap`` threshold on 64-bit) with a fresh ``mmap`` and unmaps it again
on ``free``; every operation that writes a new tensor of that size then faults each of its 4 KiB
pages in from the kernel. The engine's stacked client tensors are that large: MnistCNN's first
fully connected layer is 1.2 M floats, 236 MiB stacked over 50 clients, and a round writes such tensors
at every local step (the clients' gradients among them). In Zheng et al.'s MNIST p = 0.5 run on a
2-core CPU this cost 29 % of the CPU in the kernel (≈ 150 000 page faults a second); with mmap off and
the heap kept, 5 % (≈ 1 100 a second) and the median round 73 → 64 s (``benchmarks/RESULTS.md``,
2026-11-25; ``make bench`` row (g) measures it again on the machine at hand).

The price: memory the process frees stays with it for reuse instead of going back to the system, so
its resident size stays near its peak (in that run 8.2 GiB, where the default process was seen at
3.9 GiB between peaks); the peak itself does not change (``make bench`` (g)). The numbers computed are
the same: only where the bytes live changes (tested bit for bit). Settings a process gives glibc's
``mallopt`` (https://man7.org/linux/man-pages/man3/mallopt.3.html) hold for that process alone;
``MALLOC_MMAP_MAX_=0`` and ``MALLOC_TRIM_THRESHOLD_`` in the environment do the same for a process
started with them (e.g. a notebook kernel).
"""
from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: free memory at the top of the heap is given back to the system above this (mallopt takes an int)
TRIM_THRESHOLD = 2 ** 31 - 1


def keep_freed_memory() -> bool:
    """Make this process's ``malloc`` keep what it frees for reuse: no ``mmap`` per large block
    (``M_MMAP_MAX`` = 0) and no giving the heap's top back below 2 GiB (``M_TRIM_THRESHOLD``).

    True when glibc accepted both settings; False (and nothing changed) on other systems or C
    libraries. Call it once at the start of a long CPU job (``dpfl.experiments.runner`` does)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):                # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
