"""The one search every accounting inversion is: the smallest x whose δ(x) meets a target.

ε(δ) of a mechanism, σ of a Gaussian mechanism, ε of a composition: each is the smallest x with
δ(x) ≤ δ for a non-increasing δ(x). Brent's method runs on log δ (accurate for δ down to 1e-300),
and the answer is then checked on δ itself and nudged toward the bracket's safe end until it meets
the target in floating point: a privacy search never misses its guarantee by round-off.
"""
from __future__ import annotations

import math

from scipy.optimize import brentq

__all__ = ["smallest_meeting"]


def smallest_meeting(delta_of, delta: float, lo: float, hi: float, *, log_scale: bool = False,
                     grow: float = 2.0, max_expand: int = 200) -> float:
    """The smallest x ≥ lo (to Brent's tolerance) with ``delta_of(x) ≤ delta``, for a non-increasing
    ``delta_of``; the x returned always satisfies it.

    Expands ``hi`` geometrically until it meets the target; returns ``lo`` when ``lo`` does and
    ``inf`` when no bracket is found. With ``log_scale`` the search runs on log x.
    """
    ok = lambda x: float(delta_of(x)) <= delta
    if ok(lo):
        return lo
    for _ in range(max_expand):
        if ok(hi):
            break
        lo, hi = hi, hi * grow
    else:
        return math.inf
    gap = lambda x: math.log(delta) - math.log(max(float(delta_of(x)), 1e-320))     # < 0 at lo, ≥ 0 at hi
    if log_scale and lo > 0:
        root = math.exp(brentq(lambda z: gap(math.exp(z)), math.log(lo), math.log(hi), xtol=1e-14, rtol=1e-15,
                               maxiter=500))
    else:
        root = brentq(gap, lo, hi, xtol=1e-12, rtol=1e-15, maxiter=500)
    step = max(abs(root) * 1e-15, 1e-300)
    while root < hi and not ok(root):           # ok(hi), so this ends at hi at the latest
        root = min(root + step, hi)
        step *= 2
    return root
