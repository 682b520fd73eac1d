"""Robust monotone root finding shared by the accounting modules (bracket, then Brent)."""
from __future__ import annotations

import math

from scipy.optimize import brentq


def solve_increasing(fn, target: float, lo: float, hi: float, *, log_scale: bool = True,
                     grow: float = 2.0, max_expand: int = 200, xtol: float = 1e-12) -> float:
    """Smallest-error x in [lo, ∞) with fn(x) = target for a non-decreasing ``fn``.

    Expands ``hi`` geometrically until ``fn(hi) ≥ target``; returns ``lo`` when ``fn(lo) ≥
    target`` and ``inf`` when no bracket is found. With ``log_scale`` the search runs on log x.
    """
    f_lo = fn(lo)
    if f_lo >= target:
        return lo
    for _ in range(max_expand):
        if fn(hi) >= target:
            break
        lo, hi = hi, hi * grow
    else:
        return math.inf
    if log_scale and lo > 0:
        root = brentq(lambda z: fn(math.exp(z)) - target, math.log(lo), math.log(hi), xtol=1e-14,
                      rtol=1e-15, maxiter=500)
        return math.exp(root)
    return brentq(lambda x: fn(x) - target, lo, hi, xtol=xtol, rtol=1e-15, maxiter=500)
