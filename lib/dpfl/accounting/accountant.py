"""A small stateful accountant over the pure functions, for training loops.

Events are immutable (as in Google's dp_accounting): a :class:`GaussianEvent` is one release of a
Gaussian mechanism with noise multiplier σ; a :class:`SampledGaussianEvent` is one step on a
subsample (rate q; ``"poisson"`` or ``"without_replacement"``); a :class:`NonPrivateEvent` is a
release with no guarantee at all (training without noise; dp_accounting's ``NonPrivateDpEvent``):
once one is composed, every method reports ε = ∞, δ(ε) = 1 and μ = ∞. The accountant records
``(event, count)`` pairs and reports ε(δ), δ(ε) — and μ for the GDP method — under one method:

* ``"rdp"`` / ``"rdp-classic"`` — RDP composed over the events, improved or classic conversion;
* ``"gdp-clt"`` — the central-limit μ of Bu et al. / Zheng et al. (Poisson / without replacement):
  **an approximation, not a guarantee** (every report warns ``gdp.ApproximationWarning``; it can
  understate ε by orders of magnitude at small T), kept because the papers report it;
* ``"fdp"`` — exact numerical f-DP composition of C_q(G_{1/σ}) (``tradeoff.compose_n``).

``state_dict()`` / ``load_state_dict()`` make a run resumable.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Union

import numpy as np

from dpfl import checks
from dpfl.accounting import gdp, rdp, tradeoff

__all__ = ["GaussianEvent", "SampledGaussianEvent", "NonPrivateEvent", "Accountant", "METHODS", "GUARANTEES"]

METHODS = ("rdp", "rdp-classic", "gdp-clt", "fdp")
#: the methods whose ε(δ) is a guarantee (an upper bound on the true ε), not an approximation
GUARANTEES = ("rdp", "rdp-classic", "fdp")


@dataclasses.dataclass(frozen=True)
class GaussianEvent:
    """One Gaussian mechanism with noise multiplier σ (noise std / sensitivity)."""

    sigma: float

    def __post_init__(self):
        checks.positive("sigma", self.sigma)


@dataclasses.dataclass(frozen=True)
class SampledGaussianEvent:
    """One Gaussian step on a subsample: Poisson with rate q (add/remove-one neighbours) or a
    fixed fraction q drawn without replacement (replace-one neighbours)."""

    sigma: float
    q: float
    sampling: str = "poisson"

    def __post_init__(self):
        checks.positive("sigma", self.sigma)
        checks.in_range("q", self.q, 0, 1, lo_open=True)
        checks.one_of("sampling", self.sampling, rdp.SAMPLINGS)


@dataclasses.dataclass(frozen=True)
class NonPrivateEvent:
    """A release with no privacy guarantee (e.g. a round trained without noise): composed with
    anything, it leaves none — ε = ∞, δ(ε) = 1, μ = ∞ (never 0, which would claim perfect privacy)."""


Event = Union[GaussianEvent, SampledGaussianEvent, NonPrivateEvent]
_EVENT_TYPES = {cls.__name__: cls for cls in (GaussianEvent, SampledGaussianEvent, NonPrivateEvent)}


@functools.lru_cache(maxsize=256)
def _event_rdp(event, orders: tuple) -> np.ndarray:
    """One event's RDP at ``orders`` (read-only; cached: a round loop composes the same event every
    round and reads the total every round)."""
    grid = np.asarray(orders, dtype=float)
    if isinstance(event, GaussianEvent):
        curve = rdp.gaussian(event.sigma, grid)
    else:
        curve = rdp.subsampled_gaussian(event.q, event.sigma, grid, event.sampling)
    curve = np.asarray(curve, dtype=float)
    curve.setflags(write=False)
    return curve


class Accountant:
    """Records privacy events and reports their composition under one method."""

    def __init__(self, method: str = "rdp", *, orders=None, h: float = 1e-4):
        self.method = checks.one_of("method", method, METHODS)
        self.orders = rdp._orders(orders)
        self.h = float(checks.positive("h", h))
        self.events: list[tuple[Event, int]] = []

    def compose(self, event: Event, count: int = 1) -> "Accountant":
        """Record ``count`` repetitions of ``event``; returns ``self`` for chaining."""
        if not isinstance(event, tuple(_EVENT_TYPES.values())):
            raise ValueError(f"event must be one of {', '.join(_EVENT_TYPES)}; got {type(event).__name__}")
        count = checks.positive_int("count", count)
        if self.method == "fdp" and isinstance(event, SampledGaussianEvent) and event.sampling != "without_replacement":
            raise ValueError("the 'fdp' accountant composes C_q(G_{1/σ}): sampling without replacement, replace-one "
                             f"neighbours; a {event.sampling!r} event needs method 'rdp'")
        if self.events and self.events[-1][0] == event:
            self.events[-1] = (event, self.events[-1][1] + count)
        else:
            self.events.append((event, count))
        return self

    # -- reports ------------------------------------------------------------------------------
    @property
    def private(self) -> bool:
        """False once a :class:`NonPrivateEvent` has been composed: there is no guarantee to report."""
        return not any(isinstance(event, NonPrivateEvent) for event, _ in self.events)

    def rdp_curve(self) -> np.ndarray:
        if not self.private:
            return np.full_like(self.orders, np.inf)
        total = np.zeros_like(self.orders)
        for event, count in self.events:
            total += count * _event_rdp(event, tuple(self.orders))
        return total

    def mu(self) -> float:
        """**Approximate** μ of the composition under the GDP CLT (method ``"gdp-clt"`` only)."""
        if self.method != "gdp-clt":
            raise ValueError(f"mu is defined for method 'gdp-clt'; this accountant uses {self.method!r}")
        if not self.private:
            return np.inf
        mus = []
        for event, count in self.events:
            if isinstance(event, GaussianEvent):
                mus.append(np.sqrt(count) / event.sigma)
            elif event.sampling == "poisson":
                mus.append(gdp.clt_mu_poisson(event.sigma, event.q, count))
            else:
                mus.append(gdp.clt_mu_fraction(event.sigma, event.q, count))
        return float(gdp.compose(*mus)) if mus else 0.0

    def tradeoff(self) -> tradeoff.TradeOff:
        """The composed trade-off function (method ``"fdp"``; none after a :class:`NonPrivateEvent`)."""
        if not self.private:
            raise ValueError("a NonPrivateEvent has been composed: there is no trade-off function to report")
        result = tradeoff.identity()
        for event, count in self.events:
            single = tradeoff.gaussian(1.0 / event.sigma)
            if isinstance(event, SampledGaussianEvent):
                single = tradeoff.subsample(single, event.q)
            part = tradeoff.compose_n(single, count, h=self.h)
            result = part if result.name == "Id" else tradeoff.compose(result, part, h=self.h)
        return result

    @property
    def _conversion(self) -> str:
        return "classic" if self.method == "rdp-classic" else "improved"

    def epsilon(self, delta: float) -> float:
        checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
        if not self.events:
            return 0.0
        if not self.private:
            return np.inf
        if self.method.startswith("rdp"):
            return rdp.epsilon(self.rdp_curve(), self.orders, delta, self._conversion)
        if self.method == "gdp-clt":
            return float(gdp.epsilon(self.mu(), delta))
        return tradeoff.epsilon(self.tradeoff(), delta)

    def delta(self, eps: float) -> float:
        checks.nonnegative("eps", eps)
        if not self.events:
            return 0.0
        if not self.private:
            return 1.0
        if self.method.startswith("rdp"):
            return rdp.delta(self.rdp_curve(), self.orders, eps, self._conversion)
        if self.method == "gdp-clt":
            return float(gdp.delta(self.mu(), eps))
        return float(tradeoff.to_epsilon_delta(self.tradeoff(), eps))

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """A JSON-able snapshot: method, options and the recorded events."""
        return {"method": self.method, "orders": self.orders.tolist(), "h": self.h,
                "events": [{"type": type(e).__name__, **dataclasses.asdict(e), "count": c}
                           for e, c in self.events]}

    def load_state_dict(self, state: dict) -> "Accountant":
        self.method = checks.one_of("method", state["method"], METHODS)
        self.orders = np.asarray(state["orders"], dtype=float)
        self.h = float(state["h"])
        self.events = []
        for record in state["events"]:
            record = dict(record)
            kind, count = record.pop("type"), record.pop("count")
            self.compose(_EVENT_TYPES[kind](**record), count)
        return self

    def __repr__(self) -> str:
        return f"Accountant(method={self.method!r}, events={self.events!r})"
