"""Client samplers. Each names the accounting event its sampling implies, so that the sampler and
the privacy accounting cannot silently disagree."""
from __future__ import annotations

import dataclasses

import numpy as np

from dpfl import checks
from dpfl.accounting.accountant import SampledGaussianEvent

__all__ = ["PoissonClients", "FixedClients", "round_rng"]


@dataclasses.dataclass(frozen=True)
class PoissonClients:
    """Each client joins a round independently with probability p; an empty draw is redrawn
    (Zheng et al.'s code: ``where(U(0,1) ≤ p)``, redrawn if empty)."""

    p: float

    def __post_init__(self):
        checks.in_range("p", self.p, 0, 1, lo_open=True)

    def sample(self, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        while True:
            chosen = np.flatnonzero(rng.random(num_clients) <= self.p)
            if chosen.size:
                return chosen

    def event(self, noise_multiplier: float) -> SampledGaussianEvent:
        """Client-level Gaussian noise under this sampling: Poisson subsampling at rate p."""
        return SampledGaussianEvent(noise_multiplier, self.p, "poisson")


@dataclasses.dataclass(frozen=True)
class FixedClients:
    """m clients per round drawn uniformly without replacement (Geyer et al.); ``schedule``
    optionally gives m_t per round (the last value repeats)."""

    m: int
    schedule: tuple = ()

    def __post_init__(self):
        checks.positive_int("m", self.m)
        for m_t in self.schedule:
            checks.positive_int("schedule", m_t)

    def size(self, round_: int) -> int:
        if not self.schedule:
            return self.m
        return self.schedule[min(round_, len(self.schedule) - 1)]

    def sample(self, num_clients: int, rng: np.random.Generator, round_: int = 0) -> np.ndarray:
        m = self.size(round_)
        if m > num_clients:
            raise ValueError(f"m = {m} exceeds the number of clients K = {num_clients}")
        return np.sort(rng.choice(num_clients, size=m, replace=False))

    def event(self, noise_multiplier: float, num_clients: int, round_: int = 0) -> SampledGaussianEvent:
        """m of K without replacement (Geyer's code accounts it as Poisson with q = m/K)."""
        return SampledGaussianEvent(noise_multiplier, self.size(round_) / num_clients, "without_replacement")


def round_rng(seed: int, round_: int) -> np.random.Generator:
    """Round ``round_``'s generator (client sample, batches, server noise), from (seed, round) alone,
    so that a resumed run draws what an uninterrupted one would."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(round_), 17]))
