"""Calibrating the Gaussian mechanism: classic (Dwork & Roth) and analytic (Balle & Wang).

M(x) = f(x) + N(0, σ²I) for a query with ℓ2-sensitivity Δ under the chosen neighbouring relation
(the caller's Δ encodes it: replace-one for a clipped sum is 2C, add/remove-one is C).
"""
from __future__ import annotations

import math

import numpy as np

from dpfl import checks
from dpfl.accounting._solve import smallest_meeting
from dpfl.accounting.hockey_stick import theta

__all__ = ["classic_sigma", "classic_delta_bound", "analytic_delta", "analytic_epsilon", "analytic_sigma"]


def classic_sigma(eps, delta, sensitivity=1.0, *, strict: bool = True):
    """σ = Δ √(2 ln(1.25/δ)) / ε, (ε, δ)-DP for ε < 1 (Dwork & Roth 2014, Thm 3.22).

    ``strict=False`` evaluates the formula for any ε > 0 — outside the theorem for ε ≥ 1, which
    some papers' accountings do (Kim et al.'s AC1/AC2 reconstruction flags those cases).
    """
    checks.in_range("eps", eps, 0, 1 if strict else None, lo_open=True, hi_open=True)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    checks.positive("sensitivity", sensitivity)
    return np.asarray(sensitivity) * np.sqrt(2.0 * np.log(1.25 / np.asarray(delta))) / np.asarray(eps)


def classic_delta_bound(sigma, eps):
    """δ ≤ (4/5) exp(−(σε)²/2) for the Gaussian mechanism with noise multiplier σ and ε < 1.

    The form of Dwork & Roth's Thm 3.22 quoted by Geyer, Klein & Nabi 2017 (§2): with σ the
    noise multiplier (σ = noise std / Δ), the mechanism is (ε, δ)-DP for this δ.
    """
    checks.positive("sigma", sigma)
    checks.in_range("eps", eps, 0, 1, lo_open=True, hi_open=True)
    return 0.8 * np.exp(-0.5 * (np.asarray(sigma) * np.asarray(eps)) ** 2)


def analytic_delta(sigma, eps, sensitivity=1.0):
    """Exact δ(ε) of the Gaussian mechanism: θ_ε(Δ/σ) (Balle & Wang 2018, Thm 8)."""
    checks.positive("sigma", sigma)
    checks.positive("sensitivity", sensitivity)
    return theta(eps, np.asarray(sensitivity, dtype=float) / np.asarray(sigma, dtype=float))


def analytic_epsilon(sigma, delta, sensitivity=1.0) -> float:
    """Smallest ε ≥ 0 with ``analytic_delta(σ, ε) ≤ δ`` (Balle & Wang 2018)."""
    checks.positive("sigma", sigma)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    r = float(sensitivity) / float(sigma)
    return smallest_meeting(lambda e: theta(e, r), delta, 0.0, 1.0)


def analytic_sigma(eps, delta, sensitivity=1.0) -> float:
    """Smallest σ with ``analytic_delta(σ, ε) ≤ δ`` — the analytic Gaussian mechanism."""
    checks.nonnegative("eps", eps)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    checks.positive("sensitivity", sensitivity)
    # θ_ε(Δ/σ) decreases in σ: search σ itself (no 1/s inversion to round to the unsafe side).
    sigma = smallest_meeting(lambda s_: theta(eps, float(sensitivity) / s_), float(delta), 1e-12, 1.0, log_scale=True)
    if not math.isfinite(sigma):
        raise ValueError("no finite σ reaches this (eps, delta)")
    return sigma
