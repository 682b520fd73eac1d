"""f-differential privacy: trade-off functions, subsampling, federated amplification, composition.

Follows Dong, Roth & Su 2019 (*Gaussian Differential Privacy*) as used by Zheng et al. 2021
(*Federated f-Differential Privacy*, §3). Neighbouring: replace-one; every trade-off function
here is **symmetric** (f = f⁻¹), as all those in the papers are.

Representation. A symmetric trade-off function f is the trade-off T(P, Q) of P = U[0,1] against Q
with density −f′; it is determined by the law of the privacy loss L = log(dQ/dP):

* ``survival_q(ℓ) = Q(L > ℓ)`` and ``survival_p(ℓ) = P(L > ℓ)``;
* f(α) is the curve α = P(L > ℓ), f(α) = 1 − Q(L > ℓ) traced over ℓ (Neyman–Pearson);
* δ(ε) = Q(L > ε) − e^ε P(L > ε) (the hockey-stick divergence; Dong et al. Prop. 2.12).

Composition convolves the laws of L under Q on a grid of width ``h`` (FFT), rounding losses **up**
so that every δ(ε) and every trade-off value we report errs on the side of less privacy
(docs/privacy-accounting.md, "Numerical composition: which way each step errs").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from scipy.stats import norm

from dpfl import checks
from dpfl.accounting._solve import smallest_meeting

__all__ = ["TradeOff", "gaussian", "identity", "subsample", "subsample_parts", "federated_amplify",
           "compose", "compose_n", "to_epsilon_delta", "epsilon"]


@dataclasses.dataclass(frozen=True)
class TradeOff:
    """A symmetric trade-off function, evaluated on arrays of α ∈ [0, 1]."""

    name: str
    fn: Callable = dataclasses.field(repr=False)
    survival_q: Callable = dataclasses.field(repr=False)
    survival_p: Callable = dataclasses.field(repr=False)
    loss_range: tuple = dataclasses.field(repr=False)   # (ℓ_lo, ℓ_hi) holding all but ~1e-16 mass
    log_survival_p: Callable | None = dataclasses.field(default=None, repr=False)   # log P(L > ℓ), if known

    def __call__(self, alpha):
        alpha = np.asarray(checks.in_range("alpha", alpha, 0, 1), dtype=float)
        out = np.clip(self.fn(alpha), 0.0, 1.0 - alpha)
        return out[()] if out.ndim == 0 else out


def _gaussian_range(mu: float) -> tuple:
    half = mu * mu / 2
    return (-half - 10 * mu, half + 10 * mu)


def gaussian(mu: float) -> TradeOff:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) = T(N(0,1), N(μ,1)) (Dong, Roth & Su 2019, eq. 2.2)."""
    mu = float(checks.nonnegative("mu", mu))
    if mu == 0:
        return identity()
    return TradeOff(
        f"G_{mu:g}",
        lambda a: norm.cdf(norm.isf(a) - mu),
        lambda l: norm.cdf(mu / 2 - np.asarray(l, dtype=float) / mu),
        lambda l: norm.cdf(-mu / 2 - np.asarray(l, dtype=float) / mu),
        _gaussian_range(mu),
        lambda l: norm.logcdf(-mu / 2 - np.asarray(l, dtype=float) / mu))


def identity() -> TradeOff:
    """Id(α) = 1 − α: perfect privacy (L ≡ 0)."""
    step = lambda l: (np.asarray(l, dtype=float) < 0).astype(float)
    return TradeOff("Id", lambda a: 1.0 - a, step, step, (0.0, 0.0))


def _f_p(f: TradeOff, p: float):
    return lambda a: p * f.fn(a) + (1 - p) * (1 - a)


def _inverse(g, alpha, upper: float, iterations: int = 80):
    """f⁻¹(α) = inf{t ∈ [0, upper] : g(t) ≤ α} for decreasing g, by vectorised bisection."""
    lo = np.zeros_like(alpha)
    hi = np.full_like(alpha, upper)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = g(mid) > alpha
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return hi


def subsample_parts(f: TradeOff, p: float):
    """(f_p, f_p⁻¹) with f_p = p f + (1 − p) Id (Zheng et al. §3.4), for figures such as Fig. E.1."""
    checks.in_range("p", p, 0, 1, lo_open=True)
    f_p = _f_p(f, float(p))
    return f_p, lambda a: _inverse(f_p, np.asarray(a, dtype=float), 1.0)


def subsample(f: TradeOff, p: float) -> TradeOff:
    """C_p(f) = min{f_p, f_p⁻¹}** (Zheng et al. §3.4; Dong, Roth & Su 2019, Thm 4.2).

    The trade-off of one step of a mechanism that is f-DP run on a subsample of a fixed fraction
    p drawn **without replacement** (replace-one neighbours). For symmetric f, with x* the point
    where f′ = −1 (x* = Φ(−μ/2) for G_μ, independent of p): C_p(f) = f_p on [0, x*], the line
    x* + f_p(x*) − α on [x*, f_p(x*)], and f_p⁻¹ beyond (docs/zheng2021.md §1).
    """
    checks.in_range("p", p, 0, 1, lo_open=True)
    p = float(p)
    if p == 1.0:
        return f
    f_p = _f_p(f, p)
    x_star = float(f.survival_p(0.0))
    y_star = float(f_p(np.asarray(x_star)))

    def fn(a):
        a = np.asarray(a, dtype=float)
        inv = _inverse(f_p, a, x_star)
        return np.where(a <= x_star, f_p(a), np.where(a <= y_star, x_star + y_star - a, inv))

    def shifted(l):  # loss ℓ of C_p(f) ↔ loss of f: e^ℓ' = (e^|ℓ| − 1 + p)/p, in log space (no overflow)
        a = np.abs(np.asarray(l, dtype=float))
        return a + np.log1p(-(1 - p) * np.exp(-a)) - math.log(p)

    def survival_q(l):
        l = np.asarray(l, dtype=float)
        s = shifted(l)
        pos = p * f.survival_q(s) + (1 - p) * f.survival_p(s)
        return np.where(l >= 0, pos, 1 - f.survival_p(s))

    def survival_p(l):
        l = np.asarray(l, dtype=float)
        s = shifted(l)
        neg = 1 - (p * f.survival_q(s) + (1 - p) * f.survival_p(s))
        return np.where(l >= 0, f.survival_p(s), neg)

    def log_survival_p(l):
        l = np.asarray(l, dtype=float)
        with np.errstate(divide="ignore"):
            return np.where(l >= 0, _log_survival_p(f, shifted(l)), np.log(survival_p(l)))

    lo, hi = f.loss_range
    bound = max(abs(lo), abs(hi))
    span = bound + math.log(p + (1 - p) * math.exp(-bound))        # log(1 + p(e^bound − 1)), no overflow
    return TradeOff(f"C_{p:g}({f.name})", fn, survival_q, survival_p, (-span, span), log_survival_p)


def _log_survival_p(f: TradeOff, l):
    """log P(L > ℓ): the trade-off's own log form where it has one (no underflow), else the log of P(L > ℓ)."""
    if f.log_survival_p is not None:
        return f.log_survival_p(l)
    with np.errstate(divide="ignore"):
        return np.log(f.survival_p(l))


def federated_amplify(f: TradeOff, p: float) -> TradeOff:
    """g_p(α) = max(f(α), 1 − α − p²): client sampling with probability p (Zheng et al. Lemma 3.8).

    The TV bound 1 − α − p² adds a straight piece of slope −1 (loss 0) between the points a and
    b = 1 − a − p² where f crosses it.
    """
    checks.in_range("p", p, 0, 1, hi_open=False, lo_open=True)
    c = float(p) ** 2
    x0 = float(f.survival_p(0.0))
    gap = lambda x: f.fn(np.asarray(x)) - (1 - x - c)
    if float(gap(x0)) >= 0:          # the TV line never rises above f
        return dataclasses.replace(f, name=f"max({f.name}, 1-α-{c:g})")
    a = float(_inverse(lambda x: gap(x), np.asarray(0.0), x0))     # first root of f − line
    fa = float(f.fn(np.asarray(a)))
    b = 1 - a - c

    def survival_q(l):
        l = np.asarray(l, dtype=float)
        return np.where(l >= 0, np.minimum(f.survival_q(l), 1 - fa), np.maximum(f.survival_q(l), 1 - a))

    def survival_p(l):
        l = np.asarray(l, dtype=float)
        return np.where(l >= 0, np.minimum(f.survival_p(l), a), np.maximum(f.survival_p(l), b))

    return TradeOff(f"max({f.name}, 1-α-{c:g})", lambda x: np.maximum(f.fn(x), 1 - x - c),
                    survival_q, survival_p, f.loss_range)


def to_epsilon_delta(f: TradeOff, eps):
    """δ(ε) such that f-DP implies (ε, δ(ε))-DP: 1 + f*(−e^ε) = Q(L > ε) − e^ε P(L > ε)
    (Dong, Roth & Su 2019, Prop. 2.12). Exact for the tightest (ε, δ) pairs of f.
    Computed as Q(L > ε) − exp(ε + log P(L > ε)), so that e^ε never overflows (ε > 709.78)."""
    eps = np.asarray(checks.nonnegative("eps", eps), dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        out = f.survival_q(eps) - np.exp(eps + _log_survival_p(f, eps))
    if np.isnan(out).any():
        raise FloatingPointError(f"δ(ε) of {f.name} is undefined at ε = {eps[np.isnan(out)].ravel()[:3]}")
    out = np.clip(out, 0.0, 1.0)
    return out[()] if out.ndim == 0 else out


def epsilon(f: TradeOff, delta: float) -> float:
    """Smallest ε ≥ 0 with ``to_epsilon_delta(f, ε) ≤ δ``."""
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    return smallest_meeting(lambda e: to_epsilon_delta(f, e), delta, 0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Numerical composition on a loss grid
# ----------------------------------------------------------------------------------------------

def _discretise(f: TradeOff, h: float, pessimistic: bool):
    """Q-law of the loss rounded to the grid: (first index, pmf, mass at +∞).

    Pessimistic: mass in (ℓ_{i−1}, ℓ_i] goes to ℓ_i and mass above the top to +∞, so every δ(ε)
    is an upper bound. Optimistic: mass in (ℓ_i, ℓ_{i+1}] goes to ℓ_i and mass above the top to
    the top, so δ(ε) is a lower bound (but for ~1e-16 of mass below the bottom of the range).
    """
    lo, hi = f.loss_range
    i_lo, i_hi = math.floor(lo / h) - 1, math.ceil(hi / h) + 1
    grid = np.arange(i_lo, i_hi + 1) * h
    surv = np.asarray(f.survival_q(grid), dtype=float)
    pmf = np.empty_like(surv)
    if pessimistic:
        pmf[0] = 1.0 - surv[0]
        pmf[1:] = surv[:-1] - surv[1:]
        inf_mass = float(max(surv[-1], 0.0))
    else:
        pmf[:-1] = surv[:-1] - surv[1:]
        pmf[0] += 1.0 - surv[0]
        pmf[-1] = surv[-1]
        inf_mass = 0.0
    return i_lo, np.clip(pmf, 0.0, None), inf_mass


def _from_pmf(name: str, i_lo: int, pmf: np.ndarray, inf_mass: float, h: float) -> TradeOff:
    keep = np.nonzero(pmf > 0)[0]
    if keep.size == 0:
        pmf, i_lo, keep = np.array([0.0]), 0, np.array([0])
    pmf = pmf[keep[0]:keep[-1] + 1]
    i_lo += int(keep[0])
    grid = (i_lo + np.arange(pmf.size)) * h
    cache = {}

    def tails():
        """Q(L > ℓ_i) and P(L > ℓ_i) = Σ_{ℓ_j > ℓ_i} q_j e^{−ℓ_j}, computed on first use."""
        if "q" not in cache:
            with np.errstate(divide="ignore"):
                p_mass = np.exp(np.log(pmf) - grid)
            cache["q"] = np.concatenate([np.cumsum(pmf[::-1])[::-1], [0.0]]) + inf_mass
            cache["p"] = np.concatenate([np.cumsum(p_mass[::-1])[::-1], [0.0]])
        return cache["q"], cache["p"]

    def index(l):
        return np.searchsorted(grid, np.asarray(l, dtype=float), side="right")

    survival_q = lambda l: np.minimum(tails()[0][index(l)], 1.0)
    survival_p = lambda l: np.minimum(tails()[1][index(l)], 1.0)

    def knots():
        """The trade-off curve of the discrete pair: the points (P(L > ℓ_i), 1 − Q(L > ℓ_i)) in
        increasing α, computed on first use."""
        if "knots" not in cache:
            sq, sp = tails()
            alphas = np.minimum(np.maximum.accumulate(np.concatenate([[0.0], sp[::-1][1:], [1.0]])), 1.0)
            cache["knots"] = alphas, np.concatenate([[1.0 - sq[-1]], 1.0 - sq[::-1][1:], [0.0]])
        return cache["knots"]

    fn = lambda a: np.interp(a, *knots())     # the knots joined linearly

    return TradeOff(name, fn, survival_q, survival_p, (grid[0], grid[-1]))


def compose(f: TradeOff, g: TradeOff, *, h: float = 1e-4, pessimistic: bool = True) -> TradeOff:
    """f ⊗ g, the trade-off of the product pair (Dong, Roth & Su 2019, Def. 3.1), numerically.

    The laws of the privacy loss under Q are discretised on a grid of width ``h`` and convolved;
    the result is again a symmetric trade-off function. With ``pessimistic=True`` losses are
    rounded up, so the result's δ(ε) bounds the exact one from above (and its trade-off curve
    from below); ``pessimistic=False`` rounds down and bounds from the other side. The two
    bracket the exact composition; their gap shrinks linearly in ``h``.
    """
    return _compose_grid([(f, 1), (g, 1)], h, pessimistic, f"{f.name} ⊗ {g.name}")


def compose_n(f: TradeOff, k: int, *, h: float = 1e-4, pessimistic: bool = True) -> TradeOff:
    """f^{⊗k}, numerically (FFT power of the discretised loss law; see :func:`compose`)."""
    k = checks.positive_int("k", k)
    if k == 1:
        return f
    return _compose_grid([(f, k)], h, pessimistic, f"{f.name}^⊗{k}")


def _log_mgf(x: np.ndarray, mass: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """log Σ_j mass_j e^{λ x_j} for each λ, shifted by the largest exponent (no overflow)."""
    out = np.empty(lambdas.size)
    for i, lam in enumerate(lambdas):
        z = lam * x
        top = float(z.max())
        out[i] = top + math.log(float(mass @ np.exp(z - top)))
    return out


def _chernoff_halfwidth(pieces, h: float, log_tail: float = math.log(1e-20)) -> float:
    """Smallest t (on a geometric grid) with both Chernoff tail bounds of the composed loss ≤ 1e-20:
    P(±(ΣL − mean) > t) ≤ min_λ exp(K(±λ) − λt), K the centred log-MGF of ΣL (upper tail at +λ, lower at −λ)."""
    lambdas = np.geomspace(1e-2, 1e2, 25)
    signed = np.concatenate([lambdas, -lambdas])
    cgf = np.zeros(signed.size)
    for i_lo, pmf, k in pieces:
        nz = np.nonzero(pmf)[0]
        mass = pmf[nz]
        grid = (i_lo + nz) * h
        cgf += k * _log_mgf(grid - float(mass @ grid) / max(mass.sum(), 1e-300), mass, signed)
    ts = np.geomspace(h, 1e4, 2000)
    worst = 0.0
    for side in (cgf[:lambdas.size], cgf[lambdas.size:]):
        log_bound = np.min(side[None, :] - ts[:, None] * lambdas[None, :], axis=1)
        ok = np.nonzero(log_bound <= log_tail)[0]
        worst = max(worst, ts[ok[0]] if ok.size else ts[-1])
    return worst


def _compose_grid(parts, h: float, pessimistic: bool, name: str) -> TradeOff:
    """Compose [(f, k), …] on a loss grid of width h by FFT (circular, over a window that holds
    all but a negligible mass of the composed loss)."""
    checks.positive("h", h)
    pieces, mean, width, log_keep = [], 0.0, 0, 0.0
    for f, k in parts:
        i_lo, pmf, inf_mass = _discretise(f, h, pessimistic)
        grid = (i_lo + np.arange(pmf.size)) * h
        mean += k * float(pmf @ grid) / max(pmf.sum(), 1e-300)
        width += k * (pmf.size - 1)
        log_keep += k * math.log1p(-inf_mass) if inf_mass < 1 else -math.inf
        pieces.append((i_lo, pmf, k))
    # Window of the circular FFT: mean ± t with t from a Chernoff bound on each side,
    # P(|ΣL − mean| > t) ≤ min_λ exp(Σ k·K(λ) − λt) ≤ 1e-20, using the exact cumulant
    # generating functions K of the discretised single-step laws (no aliasing beyond 1e-20).
    half = min(_chernoff_halfwidth(pieces, h), width * h) / h + 8
    size = 1 << max(4, math.ceil(math.log2(2 * half + 4)))
    start = math.floor(mean / h - size / 2)
    spectrum = np.ones(size // 2 + 1, dtype=complex)
    for i_lo, pmf, k in pieces:
        buf = np.zeros(size)
        np.add.at(buf, np.arange(i_lo, i_lo + pmf.size) % size, pmf)  # absolute index mod size
        spectrum *= np.fft.rfft(buf) ** k
    dense = np.clip(np.fft.irfft(spectrum, n=size), 0.0, None)
    pmf = np.roll(dense, -(start % size))          # composed index J sits at J mod size
    inf_mass = 1.0 - (math.exp(log_keep) if log_keep > -math.inf else 0.0)
    # Trim the ends that hold < 1e-18 of mass (FFT round-off lives there): the low end is
    # rounded up onto the first kept loss; the high end goes to +∞ (pessimistic) or onto the
    # last kept loss (optimistic).
    head = np.cumsum(pmf)
    tail = np.cumsum(pmf[::-1])[::-1]
    first = int(np.searchsorted(head, 1e-18))
    last = int(pmf.size - 1 - np.searchsorted(tail[::-1], 1e-18))
    if first < last:
        low, high = head[first - 1] if first else 0.0, tail[last + 1] if last + 1 < pmf.size else 0.0
        pmf = pmf[first:last + 1].copy()
        pmf[0] += low
        if pessimistic:
            inf_mass += high
        else:
            pmf[-1] += high
        start += first
    return _from_pmf(name, start, pmf, inf_mass, h)
