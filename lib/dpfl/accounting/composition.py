"""k-fold composition of (ε₀, δ₀)-DP mechanisms: basic, advanced, optimal.

All results hold for any neighbouring relation (the one the per-step guarantee was stated for)
and adaptive composition. Each function returns ``(eps, delta)`` of the composition.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp

from dpfl import checks
from dpfl.accounting._solve import smallest_meeting

__all__ = ["basic", "advanced", "optimal", "optimal_delta", "kov_bound"]


def _check(eps0, delta0, k):
    checks.nonnegative("eps0", eps0)
    checks.in_range("delta0", delta0, 0, 1, hi_open=True)
    return checks.positive_int("k", k)


def basic(eps0: float, delta0: float, k: int):
    """(kε₀, kδ₀) (Dwork & Roth 2014, Thm 3.16)."""
    k = _check(eps0, delta0, k)
    return k * float(eps0), min(1.0, k * float(delta0))


def advanced(eps0: float, delta0: float, k: int, delta_prime: float):
    """(√(2k ln(1/δ′)) ε₀ + k ε₀ (e^{ε₀} − 1), kδ₀ + δ′) (Dwork, Rothblum & Vadhan 2010;
    Dwork & Roth 2014, Thm 3.20)."""
    k = _check(eps0, delta0, k)
    checks.in_range("delta_prime", delta_prime, 0, 1, lo_open=True, hi_open=True)
    eps0 = float(eps0)
    try:
        eps = math.sqrt(2 * k * math.log(1 / delta_prime)) * eps0 + k * eps0 * math.expm1(eps0)
    except OverflowError:
        eps = math.inf
    if not math.isfinite(eps):
        raise ValueError(f"eps0 = {eps0:g} with k = {k} overflows the advanced composition bound "
                         "(ε > 1.8e308); the bound is vacuous there — use basic() or optimal()")
    return eps, min(1.0, k * float(delta0) + float(delta_prime))


def optimal_delta(eps0: float, delta0: float, k: int, eps: float) -> float:
    """Exact δ(ε) of the k-fold composition of (ε₀, δ₀)-DP (Kairouz, Oh & Viswanath 2015, Thm 3.3).

    δ = 1 − (1 − δ₀)^k (1 − Σ_l C(k,l) [e^{(k−l)ε₀} − e^ε e^{lε₀}]₊ / (1 + e^{ε₀})^k): the
    hockey-stick divergence of k independent randomized-response pairs, the worst case.
    """
    k = _check(eps0, delta0, k)
    checks.nonnegative("eps", eps)
    eps0 = float(eps0)
    if eps0 == 0:
        inner = 0.0
    else:
        l = np.arange(k + 1)
        gap = (k - 2 * l) * eps0 - eps
        keep = gap > 0
        l, gap = l[keep], gap[keep]
        log_terms = (gammaln(k + 1) - gammaln(l + 1) - gammaln(k - l + 1) + (k - l) * eps0
                     - k * np.logaddexp(0.0, eps0) + np.log(-np.expm1(-gap)))
        inner = float(np.exp(logsumexp(log_terms))) if l.size else 0.0
    with np.errstate(divide="ignore"):          # inner = 1: log1p(−1) = −∞, δ = 1
        return float(-np.expm1(k * np.log1p(-float(delta0)) + np.log1p(-min(inner, 1.0))))


def optimal(eps0: float, delta0: float, k: int, delta: float):
    """Smallest ε with ``optimal_delta(ε) ≤ δ``: the optimal composition theorem (KOV Thm 3.3)."""
    k = _check(eps0, delta0, k)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    floor = -math.expm1(k * math.log1p(-float(delta0)))
    if delta <= floor:
        raise ValueError(f"delta must exceed 1 − (1 − delta0)^k = {floor:.3g} for k-fold composition")
    eps = smallest_meeting(lambda e: optimal_delta(eps0, delta0, k, e), delta, 0.0, max(float(eps0), 1e-3))
    return min(eps, k * float(eps0)), float(delta)


def kov_bound(eps0: float, delta0: float, k: int, delta: float):
    """The closed-form bound of Kairouz, Oh & Viswanath 2015, Thm 3.4 (as in autodp's ``dp_acct``).

    ε = min{kε₀, kε₀(e^{ε₀}−1)/(e^{ε₀}+1) + ε₀√(2k log(e + √(kε₀²)/δ̃)),
    kε₀(e^{ε₀}−1)/(e^{ε₀}+1) + ε₀√(2k log(1/δ̃))} with total δ = 1 − (1−δ₀)^k (1−δ̃).
    """
    k = _check(eps0, delta0, k)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    eps0 = float(eps0)
    delta_tilde = 1 - (1 - delta) / (1 - float(delta0)) ** k
    if delta_tilde <= 0:
        raise ValueError("delta must exceed 1 − (1 − delta0)^k for k-fold composition")
    drift = k * eps0 * math.expm1(eps0) / (math.exp(eps0) + 1)
    eps = min(k * eps0,
              drift + eps0 * math.sqrt(2 * k * math.log(math.e + math.sqrt(k * eps0 ** 2) / delta_tilde)),
              drift + eps0 * math.sqrt(2 * k * math.log(1 / delta_tilde)))
    return eps, float(delta)
