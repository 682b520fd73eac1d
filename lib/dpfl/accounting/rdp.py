"""Rényi differential privacy of the (subsampled) Gaussian mechanism and RDP → (ε, δ) conversions.

σ is always the **noise multiplier**: noise standard deviation divided by the query's ℓ2
sensitivity under the stated neighbouring relation. Orders α > 1; RDP values are per mechanism
invocation and compose additively (Mironov 2017, Prop. 1), so T steps give ``steps * rdp``.

* Poisson subsampling (each record included independently with probability q), add/remove-one
  neighbours: the exact RDP of the sampled Gaussian mechanism (Mironov, Talwar & Zhang 2019,
  §3.3; Abadi et al. 2016 for integer orders) — what Abadi's moments accountant, Geyer et al.'s
  code and FedHDP use.
* Sampling a fixed-size batch without replacement, replace-one neighbours: the general upper
  bound of Wang, Balle & Kasiviswanathan 2019, Thm 9, with ε(∞) = ∞ for the Gaussian (their
  Gaussian-specific Thm 27, used by dp_accounting, is somewhat tighter).
"""
from __future__ import annotations

import numpy as np
from scipy.special import gammaln, log_ndtr, logsumexp

from dpfl import checks

__all__ = ["gaussian", "subsampled_gaussian", "epsilon", "delta", "moments_accountant_delta",
           "DEFAULT_ORDERS", "CONVERSIONS", "SAMPLINGS"]

#: Orders used when none are given: dense near 1, integers to 64, a few large ones.
DEFAULT_ORDERS = np.concatenate([1 + np.arange(1, 100) / 10.0, np.arange(11, 64), [128, 256, 512, 1024]])
CONVERSIONS = ("classic", "improved")
SAMPLINGS = ("poisson", "without_replacement")


def _orders(orders) -> np.ndarray:
    orders = np.atleast_1d(np.asarray(orders if orders is not None else DEFAULT_ORDERS, dtype=float))
    if orders.size == 0 or orders.ndim != 1:
        raise ValueError(f"orders must be a non-empty 1-d sequence of Rényi orders > 1; got {orders.tolist()!r}")
    checks.in_range("orders", orders, 1, None, lo_open=True)
    return orders


def _log_comb(n, k):
    """log |C(n, k)| for real n (the magnitude, as in Mironov et al.'s series)."""
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def gaussian(sigma, orders=None):
    """RDP of the Gaussian mechanism: α / (2σ²) (Mironov 2017, Prop. 7). Any neighbouring relation
    for which σ is the noise multiplier."""
    checks.positive("sigma", sigma)
    return _orders(orders) / (2.0 * float(sigma) ** 2)


def _log_a_int(q: float, sigma: float, alpha: np.ndarray) -> np.ndarray:
    """log A_α = log Σ_j C(α,j) q^j (1−q)^{α−j} e^{(j²−j)/(2σ²)}, integer α (vectorised over α)."""
    j = np.arange(int(alpha.max()) + 1)
    a = alpha[:, None]
    terms = _log_comb(a, j) + j * np.log(q) + (a - j) * np.log1p(-q) + (j * j - j) / (2 * sigma ** 2)
    return logsumexp(np.where(j <= a, terms, -np.inf), axis=1)


def _log_a_frac(q: float, sigma: float, alpha: np.ndarray, n_terms: int = 1000) -> np.ndarray:
    """log A_α for fractional α by the two-sided series of Mironov, Talwar & Zhang 2019, §3.3."""
    i = np.arange(n_terms)[None, :]
    a = alpha[:, None]
    z0 = sigma ** 2 * np.log(1 / q - 1) + 0.5
    coef = _log_comb(a, i)
    j = a - i
    log_t0 = coef + i * np.log(q) + j * np.log1p(-q)
    log_t1 = coef + j * np.log(q) + i * np.log1p(-q)
    log_e0 = log_ndtr(-(i - z0) / sigma)          # ½ erfc((i − z0)/(√2 σ))
    log_e1 = log_ndtr(-(z0 - j) / sigma)
    s0 = log_t0 + (i * i - i) / (2 * sigma ** 2) + log_e0
    s1 = log_t1 + (j * j - j) / (2 * sigma ** 2) + log_e1
    return np.logaddexp(logsumexp(s0, axis=1), logsumexp(s1, axis=1))


def _wor_bound(q: float, sigma: float, alpha: np.ndarray) -> np.ndarray:
    """Wang, Balle & Kasiviswanathan 2019 Thm 9 for integer α with ε(j) = j/(2σ²), ε(∞) = ∞."""
    out = np.empty_like(alpha)
    for k, a in enumerate(alpha):
        lo, hi = np.floor(a), np.ceil(a)
        vals = []
        for order in {lo, hi}:
            if order < 2:
                vals.append((order, 0.0))
                continue
            eps2 = 2.0 / (2 * sigma ** 2)
            first = 2 * np.log(q) + _log_comb(order, 2) + min(np.log(4) + np.log(np.expm1(eps2)), eps2 + np.log(2))
            j = np.arange(3, int(order) + 1)
            rest = j * np.log(q) + _log_comb(order, j) + np.log(2) + (j - 1) * j / (2 * sigma ** 2)
            vals.append((order, logsumexp(np.concatenate([[0.0, first], rest]))))
        # The cumulant (α−1)·RDP(α) is convex in α: interpolate it linearly between integers
        # (Wang et al. Cor. 10).
        (o1, c1), (o2, c2) = vals[0], vals[-1]
        t = 0.0 if o2 == o1 else (a - o1) / (o2 - o1)
        out[k] = ((1 - t) * c1 + t * c2) / (a - 1)
    return out


def subsampled_gaussian(q, sigma, orders=None, sampling: str = "poisson"):
    """RDP per step of the subsampled Gaussian mechanism at the given orders.

    ``sampling="poisson"``: exact (Mironov, Talwar & Zhang 2019), add/remove-one neighbours.
    ``sampling="without_replacement"``: upper bound (Wang, Balle & Kasiviswanathan 2019, Thm 9,
    capped by the un-subsampled Gaussian's RDP), replace-one neighbours, batch of q·n records.
    """
    checks.in_range("q", q, 0, 1, lo_open=True)
    checks.positive("sigma", sigma)
    checks.one_of("sampling", sampling, SAMPLINGS)
    alpha = _orders(orders)
    q, sigma = float(q), float(sigma)
    if q == 1.0:
        return gaussian(sigma, alpha)
    if sampling == "without_replacement":
        # Subsampling never costs privacy (joint quasi-convexity of the Rényi divergence), so the
        # un-subsampled Gaussian caps Thm 9, which alone is not monotone in q (σ = 99.6: ε at
        # q = 0.53 came out 12× ε at q = 1).
        return np.minimum(_wor_bound(q, sigma, alpha), gaussian(sigma, alpha))
    out = np.empty_like(alpha)
    integer = alpha == np.round(alpha)
    if integer.any():
        out[integer] = _log_a_int(q, sigma, alpha[integer]) / (alpha[integer] - 1)
    if (~integer).any():
        out[~integer] = _log_a_frac(q, sigma, alpha[~integer]) / (alpha[~integer] - 1)
    return out


def _log_expm1(x):
    """log(e^x − 1) without overflow (−inf at x = 0)."""
    x = np.asarray(x, dtype=float)
    big = np.maximum(x, 30.0)
    with np.errstate(divide="ignore"):
        small = np.log(np.expm1(np.minimum(x, 30.0)))
    return np.where(x > 30, big + np.log1p(-np.exp(-big)), small)


def _check_curve(rdp, orders):
    orders = _orders(orders)
    rdp = np.broadcast_to(np.asarray(rdp, dtype=float), orders.shape)
    checks.nonnegative("rdp", rdp, finite=False)   # an order may have infinite RDP
    return rdp, orders


def epsilon(rdp, orders, delta, conversion: str = "improved") -> float:
    """Smallest ε over the orders such that the RDP curve implies (ε, δ)-DP.

    * ``"classic"`` — ε = γ + log(1/δ)/(α−1) (Mironov 2017, Prop. 3; Abadi's moments accountant).
    * ``"improved"`` — Asoodeh, Liao, Calmon, Kosut & Sankar 2021, Lemma 1 (the same bound as
      Canonne, Kamath & Steinke 2020, Prop. 12; Balle et al. 2020):
      ε = γ + log1p(−1/α) − log(αδ)/(α−1), together with the second branch of the authors'
      conversion, ε = log(1 + (e^{(α−1)γ} − 1)/(αδ))/(α−1); the smaller is kept.
    """
    rdp, orders = _check_curve(rdp, orders)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    checks.one_of("conversion", conversion, CONVERSIONS)
    am1 = orders - 1
    if conversion == "classic":
        eps = rdp - np.log(delta) / am1
    else:
        branch1 = rdp + np.log1p(-1 / orders) - (np.log(delta) + np.log(orders)) / am1
        branch2 = np.logaddexp(0.0, _log_expm1(am1 * rdp) - np.log(orders * delta)) / am1
        eps = np.minimum(branch1, branch2)
    return float(max(0.0, np.min(eps)))


def delta(rdp, orders, eps, conversion: str = "improved") -> float:
    """Smallest δ over the orders such that the RDP curve implies (ε, δ)-DP (see :func:`epsilon`)."""
    rdp, orders = _check_curve(rdp, orders)
    checks.nonnegative("eps", eps)
    checks.one_of("conversion", conversion, CONVERSIONS)
    am1 = orders - 1
    if conversion == "classic":
        log_delta = am1 * (rdp - eps)
    else:
        branch1 = am1 * (rdp - eps + np.log1p(-1 / orders)) - np.log(orders)
        branch2 = (_log_expm1(am1 * rdp) - np.log(orders) - _log_expm1(am1 * eps)
                   if eps > 0 else np.full_like(rdp, np.inf))
        log_delta = np.minimum(branch1, branch2)
    return float(np.exp(min(0.0, np.min(log_delta))))


def moments_accountant_delta(q, sigma, steps, eps, max_order: int = 32) -> float:
    """δ at fixed ε of Abadi et al.'s moments accountant, as in Geyer et al.'s code.

    Log-moments α(λ) = log E[(p/q)^λ] for λ = 1…max_order of the Poisson-subsampled Gaussian
    (Abadi et al. 2016, §3.2; exact binomial form), composed over ``steps``; then
    δ = min(1, min_λ exp(steps·α(λ) − λε)) (Abadi et al. Thm 2). Since α(λ) = λ·RDP(λ+1), this is
    the classic RDP conversion at integer orders 2…max_order+1. Neighbouring: add/remove-one,
    Poisson sampling with rate q (Geyer's code samples m of K clients without replacement and
    accounts them as Poisson with q = m/K; the notebook says so).
    """
    checks.counts("steps", steps)
    checks.positive_int("max_order", max_order)
    orders = np.arange(2, max_order + 2, dtype=float)
    return delta(steps * subsampled_gaussian(q, sigma, orders), orders, eps, conversion="classic")
