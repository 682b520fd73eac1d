"""Client samplers. Each names the accounting event its sampling implies, so that the sampler and
the privacy accounting cannot silently disagree: a loop asks the sampler that drew the round's
clients for the round's event (``sampler.event(z, K, round)``), never switches on its type.

Both samplers share one interface: ``check(num_clients)``, ``sample(num_clients, rng, round_)``,
``event(noise_multiplier, num_clients, round_)`` and ``denominator(members)`` (what a noised sum of the
round's clients is divided by so that the event stays true), where ``noise_multiplier`` z is the server's noise
standard deviation divided by the clipping bound S of one client's contribution (noise N(0, (zS)²)
on the sum of clipped updates). z = 0 (no noise) releases the exact sum: its event is a
``NonPrivateEvent``, which leaves no guarantee (docs/privacy-accounting.md)."""
from __future__ import annotations

import dataclasses

import numpy as np

from dpfl import checks
from dpfl.accounting.accountant import NonPrivateEvent, SampledGaussianEvent

__all__ = ["PoissonClients", "FixedClients", "batch_event", "round_rng"]


@dataclasses.dataclass(frozen=True)
class PoissonClients:
    """Each client joins a round independently with probability p; an empty draw is redrawn
    (Zheng et al.'s code: ``where(U(0,1) ≤ p)``, redrawn if empty)."""

    p: float

    def __post_init__(self):
        checks.in_range("p", self.p, 0, 1, lo_open=True)

    def check(self, num_clients: int) -> None:
        """Any number of clients fits Poisson sampling."""

    def sample(self, num_clients: int, rng: np.random.Generator, round_: int = 0) -> np.ndarray:
        while True:
            chosen = np.flatnonzero(rng.random(num_clients) <= self.p)
            if chosen.size:
                return chosen

    def rate(self, num_clients: int, round_: int = 0) -> float:
        """The probability that a given client takes part in round ``round_``."""
        return self.p

    def event(self, noise_multiplier: float, num_clients: int | None = None, round_: int = 0):
        """One round's client-level Gaussian noise under this sampling: Poisson subsampling at rate p,
        add/remove-one neighbouring clients (sensitivity S of the sum, so multiplier z).

        The redraw of an empty sample is ignored, as in Zheng et al.'s and every DP-FedAvg accounting
        (it changes the sample's law by at most (1 − p)^K)."""
        return _event(noise_multiplier, noise_multiplier, self.p, "poisson")

    def denominator(self, members: int) -> float:
        """What a noised sum over the round's clients of a group of ``members`` is divided by: their
        expected number p·members, a public constant. Under add/remove-one neighbours the realised
        count is itself private — dividing by it makes the released mean a function of it, and with
        the other clients' updates aligned a client moves that mean by up to 2S/m, twice the
        sensitivity the event assumes (docs/privacy-accounting.md, "Dividing by the clients").
        McMahan et al. 2018's fixed-denominator estimator; TF-Privacy's ``expected_num_records``."""
        return self.p * checks.positive_int("members", members)


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

    def check(self, num_clients: int) -> None:
        """Refuse K clients fewer than the largest m_t (before a run starts, not at its round t)."""
        largest = max(self.schedule or (self.m,))
        if largest > num_clients:
            raise ValueError(f"m = {largest} exceeds the number of clients K = {num_clients}")

    def sample(self, num_clients: int, rng: np.random.Generator, round_: int = 0) -> np.ndarray:
        self.check(num_clients)
        return np.sort(rng.choice(num_clients, size=self.size(round_), replace=False))

    def rate(self, num_clients: int, round_: int = 0) -> float:
        """The fraction m_t/K of clients that take part in round ``round_``."""
        return self.size(round_) / num_clients

    def event(self, noise_multiplier: float, num_clients: int, round_: int = 0):
        """One round's client-level Gaussian noise: m_t of K drawn without replacement, replace-one
        neighbouring clients. Replacing a client moves the sum of clipped updates by up to 2S, so the
        event's multiplier is z/2 (``rdp``'s convention: noise std over the sensitivity of the stated
        relation). Geyer et al.'s code instead accounts this sampling as Poisson at q = m/K with
        multiplier z (``dpfl.federated.client_dp`` reports both, named)."""
        return _event(noise_multiplier, noise_multiplier / 2, self.rate(num_clients, round_), "without_replacement")

    def denominator(self, members: int) -> None:
        """None: divide by the realised count. m_t is fixed by the design and public, and replacing one
        client by another (the event's relation) changes no count."""
        checks.positive_int("members", members)
        return None


def _event(noise_multiplier: float, multiplier: float, q: float, sampling: str):
    """The subsampled Gaussian of ``multiplier`` at rate ``q`` — or, for ``noise_multiplier`` z = 0 (no
    noise: the exact sum is released), a ``NonPrivateEvent``."""
    if checks.nonnegative("noise_multiplier", noise_multiplier) == 0:
        return NonPrivateEvent()
    return SampledGaussianEvent(multiplier, q, sampling)


def batch_event(noise_multiplier: float, batch_size: int, n: int, sampling: str = "fixed"):
    """One DP-SGD step's event for a client with ``n`` records whose batches come from
    ``FederatedDataset.batches(..., sampling)``, with noise N(0, (zC)²) on the sum of per-sample
    gradients clipped to C: ``"fixed"`` (B of n without replacement, replace-one: sensitivity 2C, so
    multiplier z/2 — Zheng et al.'s σ) or ``"poisson"`` (rate B/n, add/remove-one: multiplier z).
    ``"shuffle"`` (epochs over a permutation) has no subsampling analysis here and is refused."""
    checks.one_of("sampling", sampling, ("fixed", "poisson"))
    if batch_size > n:
        raise ValueError(f"batch_size {batch_size} exceeds the client's {n} records")
    if sampling == "fixed":
        return _event(noise_multiplier, noise_multiplier / 2, batch_size / n, "without_replacement")
    return _event(noise_multiplier, noise_multiplier, batch_size / n, "poisson")


def round_rng(seed: int, round_: int) -> np.random.Generator:
    """Round ``round_``'s generator (client sample, batches, server noise), from (seed, round) alone,
    so that a resumed run draws what an uninterrupted one would."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(round_), 17]))
