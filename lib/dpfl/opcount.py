"""Counting what a piece of code asks the device to do: the ATen operations it runs (each one kernel
launch on a GPU; counted below ``vmap``, so a vmapped call counts its batched kernels once), how
many of them are random draws, how many make the host wait for the device (``syncs``: a scalar read
back, or an output whose size depends on the data), and how many of each kind. ``make bench`` reports
the operations and draws per round; the tests pin the draws, which operations a route runs, and that a
round's syncs do not grow with its local steps (``tests/test_loop.py``).

>>> with OpCounter() as count:
...     _ = torch.randn(3) + 1
>>> (count.ops, count.draws, count.names["add"])
(2, 1, 1)
>>> with OpCounter() as count:
...     _ = torch.empty(3, device="meta") + 1       # shape inference only: no kernel
>>> count.ops
0
>>> with OpCounter() as count:
...     _ = float(torch.ones(2).sum()), torch.tensor([0, 3]).nonzero()
>>> count.syncs
2
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["OpCounter", "RANDOM_OPS", "SYNC_OPS"]

#: ATen operations that draw random numbers
RANDOM_OPS = ("randn", "rand", "bernoulli", "normal", "uniform", "randint")
#: ATen operations after which a GPU's host waits for the device: a scalar read back (``item``, ``float``, ``bool``,
#: ``tolist``: ``_local_scalar_dense``) or an output sized by the data (``nonzero``, ``unique``, ``masked_select``, …;
#: ``repeat_interleave`` only without ``output_size``, counted always: an upper count). In a launch-bound loop each
#: one drains the queue of kernels the host had run ahead with
SYNC_OPS = ("_local_scalar_dense", "is_nonzero", "equal", "nonzero", "_unique", "_unique2", "unique_dim",
            "unique_consecutive", "masked_select", "repeat_interleave")


class OpCounter(TorchDispatchMode):
    """A context manager counting ``ops`` (ATen operations), ``draws`` (random ones), ``syncs`` (:data:`SYNC_OPS`)
    and ``names`` ({operation name: count}, e.g. "convolution", "bmm") inside it. Operations on the ``meta`` device
    (shape inference, e.g. ``local._conv_outputs_of``) launch no kernel and are not counted."""

    def __init__(self):
        super().__init__()
        self.ops = self.draws = self.syncs = 0
        self.names = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if tensors and all(t.is_meta for t in tensors):
            return out
        name = func.__name__.split(".")[0]
        self.ops += 1
        self.draws += name.startswith(RANDOM_OPS)
        self.syncs += name in SYNC_OPS
        self.names[name] += 1
        return out
