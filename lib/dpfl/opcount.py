"""Counting what a piece of code asks the device to do: the ATen operations it runs (each one kernel
launch on a GPU; counted below ``vmap``, so a vmapped call counts its batched kernels once), how
many of them are random draws, and how many of each kind. ``make bench`` reports them per round; the
tests pin the draws and which operations a route runs.

>>> import torch
>>> with OpCounter() as count:
...     _ = torch.randn(3) + 1
>>> (count.ops, count.draws, count.names["add"])
(2, 1, 1)
"""
from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "RANDOM_OPS"]

#: ATen operations that draw random numbers
RANDOM_OPS = ("randn", "rand", "bernoulli", "normal", "uniform", "randint")


class OpCounter(TorchDispatchMode):
    """A context manager counting ``ops`` (ATen operations), ``draws`` (random ones) and ``names``
    ({operation name: count}, e.g. "convolution", "bmm") inside it."""

    def __init__(self):
        super().__init__()
        self.ops = self.draws = 0
        self.names = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        self.ops += 1
        self.draws += name.startswith(RANDOM_OPS)
        self.names[name] += 1
        return func(*args, **(kwargs or {}))
