"""One learning-rate schedule for every algorithm: lr · factor^(count / every), with the exponent
floored (a step schedule, PyTorch's ``StepLR``) or not (``smooth``: exponential decay).

``per`` names the count: ``"round"`` (rounds done before this one), ``"step"`` (local steps done
before this round: the global step of Geyer et al.'s code) or ``"client_epoch"`` (a client's own
local epochs so far, one per round it took part in: Zheng et al.'s per-client ``StepLR``). The
papers' schedules:

* Zheng et al. (CIFAR-10): ``LearningRate(0.99, 10, per="client_epoch")``;
* Geyer et al.: ``LearningRate(0.1, 27_000, per="step", smooth=True)``;
* Aldaghri et al. (FedHDP, Table 7): ``LearningRate(0.9, 50, per="round")``.
"""
from __future__ import annotations

import dataclasses

import torch

from dpfl import checks

__all__ = ["LearningRate", "PER"]

PER = ("round", "step", "client_epoch")


@dataclasses.dataclass(frozen=True)
class LearningRate:
    """lr · factor^⌊count/every⌋ (or lr · factor^(count/every) when ``smooth``); the default is constant."""

    factor: float = 1.0
    every: float = 1
    per: str = "round"
    smooth: bool = False

    def __post_init__(self):
        checks.in_range("lr schedule factor", self.factor, 0, 1, lo_open=True)
        checks.positive("lr schedule every", self.every)
        checks.one_of("lr schedule per", self.per, PER)

    @property
    def constant(self) -> bool:
        return self.factor == 1.0

    def count(self, round_: int, local_steps: int, client_epochs=None):
        """The count for round ``round_`` (from 1): rounds or local steps before it, or the clients' own
        epochs (``client_epochs``, a tensor, for ``per="client_epoch"``)."""
        if self.per == "client_epoch":
            if client_epochs is None:
                raise ValueError("per='client_epoch' needs each client's epochs (an algorithm with local models)")
            return client_epochs
        return (round_ - 1) * (local_steps if self.per == "step" else 1)

    def __call__(self, lr: float, count):
        """The learning rate after ``count`` (a number, or a tensor of per-client counts)."""
        if isinstance(count, torch.Tensor):
            exponent = count.double() / self.every if self.smooth else (count // self.every).double()
        else:
            exponent = count / self.every if self.smooth else count // self.every
        return lr * self.factor ** exponent
