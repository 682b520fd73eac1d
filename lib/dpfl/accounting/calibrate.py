"""Calibration: the smallest noise, or the largest number of steps, that meets a privacy target.

Works with any accounting in this package through a callable: ``epsilon_of_sigma(σ)`` must be
non-increasing in σ, ``epsilon_of_steps(T)`` non-decreasing in T. The search brackets the answer
geometrically, then bisects (on log σ; on integers for steps), so it needs no derivative and
tolerates plateaus and infinities.
"""
from __future__ import annotations

import math
from typing import Callable

from dpfl import checks
from dpfl.accounting.accountant import GUARANTEES, Accountant, SampledGaussianEvent

__all__ = ["smallest_sigma", "largest_steps", "dpsgd_sigma"]


def smallest_sigma(epsilon_of_sigma: Callable[[float], float], target_eps: float, *,
                   lo: float = 0.05, hi: float = 1.0, rtol: float = 1e-6, max_sigma: float = 1e6) -> float:
    """Smallest σ in [lo, max_sigma] with ``epsilon_of_sigma(σ) ≤ target_eps`` (relative
    tolerance ``rtol``); ``lo`` itself when it already meets the target.

    Raises ``ValueError`` when even ``max_sigma`` does not meet the target.
    """
    checks.positive("target_eps", target_eps)
    checks.positive("lo", lo)
    ok = lambda s: epsilon_of_sigma(s) <= target_eps
    lo_known_bad = False
    while not ok(hi):
        lo, hi, lo_known_bad = hi, hi * 2, True
        if hi > max_sigma:
            raise ValueError(f"target_eps {target_eps} is not reached for any sigma ≤ {max_sigma:g}")
    if not lo_known_bad:
        if ok(lo):
            return lo         # the target is met already at the lower end of the search
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def largest_steps(epsilon_of_steps: Callable[[int], float], target_eps: float, *,
                  max_steps: int = 10 ** 9) -> int:
    """Largest integer T in [0, max_steps] with ``epsilon_of_steps(T) ≤ target_eps`` (0 if even T = 1 fails).

    Every T returned has been evaluated and meets the target (``max_steps`` too: it is returned only
    when it meets the target itself, never because the search ran into it)."""
    checks.positive("target_eps", target_eps)
    max_steps = checks.positive_int("max_steps", max_steps)
    ok = lambda t: epsilon_of_steps(t) <= target_eps
    if not ok(1):
        return 0
    if ok(max_steps):
        return max_steps
    lo, hi = 1, 2                       # invariant: ok(lo); the answer lies in [lo, max_steps)
    while hi < max_steps and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, max_steps)             # not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def dpsgd_sigma(eps: float, delta: float, q: float, steps: int, *, method: str = "rdp",
                sampling: str = "poisson", rtol: float = 1e-6) -> float:
    """Smallest noise multiplier for ``steps`` subsampled-Gaussian steps to be (ε, δ)-DP, under an
    accounting that is a guarantee (``Accountant``'s ``GUARANTEES``: "rdp", "rdp-classic", "fdp").

    The GDP CLT ("gdp-clt") is refused: it is an approximation and can understate ε, so a σ
    calibrated with it does not promise (ε, δ)-DP (``gdp.clt_mu`` gives the papers' value)."""
    checks.positive_int("steps", steps)
    if method not in GUARANTEES:
        raise ValueError(f"method must be one of {GUARANTEES} (accountings that bound ε); got {method!r}"
                         + (": the GDP CLT is an approximation, not a guarantee" if method == "gdp-clt" else ""))

    def eps_of(sigma: float) -> float:
        acc = Accountant(method).compose(SampledGaussianEvent(sigma, q, sampling), steps)
        return acc.epsilon(delta)

    return smallest_sigma(eps_of, eps, rtol=rtol)
