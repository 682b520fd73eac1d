"""Robust monotone root finding shared by the accounting modules (bracket, then Brent, then the safe side)."""
from __future__ import annotations

import math

from scipy.optimize import brentq

__all__ = ["solve_increasing"]


def solve_increasing(fn, target: float, lo: float, hi: float, *, safe: str = "above", log_scale: bool = True,
                     grow: float = 2.0, max_expand: int = 200, xtol: float = 1e-12) -> float:
    """A root x ≥ lo of fn(x) = target for a non-decreasing ``fn``, returned on the **safe side**.

    Privacy searches must never return a point that misses their guarantee by round-off: with
    ``safe="above"`` the x returned satisfies fn(x) ≥ target (e.g. fn = −log δ(ε): the ε returned
    has δ(ε) ≤ the target); with ``safe="below"``, fn(x) ≤ target. Brent's root is nudged outward
    until that holds.

    Expands ``hi`` geometrically until ``fn(hi) ≥ target``; returns ``lo`` when ``fn(lo) ≥ target``
    (safe above) and ``inf`` when no bracket is found. With ``log_scale`` the search runs on log x.
    """
    if safe not in ("above", "below"):
        raise ValueError(f"safe must be 'above' or 'below'; got {safe!r}")
    f_lo = fn(lo)
    if f_lo >= target and (safe == "above" or f_lo <= target):
        return lo
    if f_lo >= target:                  # safe below, but even lo is above the target
        raise ValueError(f"no x ≥ {lo:g} has fn(x) ≤ {target:g}")
    for _ in range(max_expand):
        if fn(hi) >= target:
            break
        lo, hi = hi, hi * grow
    else:
        return math.inf
    if log_scale and lo > 0:
        root = math.exp(brentq(lambda z: fn(math.exp(z)) - target, math.log(lo), math.log(hi), xtol=1e-14,
                               rtol=1e-15, maxiter=500))
    else:
        root = brentq(lambda x: fn(x) - target, lo, hi, xtol=xtol, rtol=1e-15, maxiter=500)
    return _safe_side(fn, target, root, lo, hi, safe)


def _safe_side(fn, target, root, lo, hi, safe):
    """Move ``root`` toward ``hi`` (safe above) or ``lo`` (safe below) until it is on the safe side
    (fn(lo) < target ≤ fn(hi), so the bracket's ends always are)."""
    good = (lambda x: fn(x) >= target) if safe == "above" else (lambda x: fn(x) <= target)
    if good(root):
        return root
    step = max(abs(root) * 1e-15, 1e-300)
    for _ in range(2000):
        x = min(root + step, hi) if safe == "above" else max(root - step, lo)
        if good(x):
            return x
        step *= 2
    return hi if safe == "above" else lo     # the bracket's ends are on their sides
