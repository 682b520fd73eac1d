"""Kim, Günlü & Schaefer 2021 — privacy, utility and transmission rate of FedSGD with local DP.

**Reconstruction.** The paper's equations were lost in extraction; this module implements the
reconstruction of Theorem 1 in ``docs/kim2021.md`` §1, which is consistent with every surviving
statement. Nothing here is the authors' own equation.

Setting: user i samples each of its data points with probability q, clips its whole local gradient
to norm C (replace-one sensitivity 2C) and sends g̃ᵢ + N(0, σ²I_d); T rounds. With σ̄ = σ/(2C):

* validity (Abadi et al. 2016, Lemma 3): σ̄ ≥ 1 (noise floor σ² ≥ 4C²) and q < 1/(16σ̄)
  (cap σ² < C²/(64q²)); orders λ ≤ σ̄² ln(1/(qσ̄));
* **Proposed**: T-fold RDP of the Poisson-subsampled Gaussian, γ(α) = T q² α/((1−q)σ̄²) (the
  leading term of Lemma 3, ``rdp_form="abadi_lemma3"``; ``"exact"`` uses the exact RDP),
  converted with Asoodeh et al.'s improved RDP → DP conversion;
* **MA**: the same with the classic moments-accountant conversion;
* **AC1**: advanced composition (Dwork, Rothblum & Vadhan) of T per-round (ε₀, δ₀) guarantees;
* **AC2**: the KOV composition bound (Kairouz, Oh & Viswanath 2015, Thm 3.4);
  for both, ε₀ = ln(1 + q(e^{ε_b} − 1)), δ₀ = q δ_b (amplification by sampling), the base
  Gaussian calibrated by Dwork & Roth Thm 3.22, δ′ = δ/2 and δ₀ = δ/(2T) (details §2.3 choices);
* **exact** (beyond the paper): numerical f-DP composition of C_q(G_{2C/σ}) (``tradeoff``).

Utility (11): U(T) ≥ λ²T / (2β(C² + d Σᵢ pᵢ² σᵢ²)); rate (12): R ≤ ½ log₂(2πe(σ² + C²/d)).
"""
from __future__ import annotations

import math

import numpy as np

from dpfl import checks
from dpfl.accounting import calibrate, composition, gaussian, rdp, tradeoff

__all__ = ["METHODS", "PAPER_METHODS", "noise_floor", "noise_cap", "min_noise_variance",
           "utility_bound", "rate_bound"]

PAPER_METHODS = ("proposed", "ma", "ac2", "ac1")
METHODS = PAPER_METHODS + ("exact",)


def _check(q, C, delta, T):
    checks.in_range("q", q, 0, 1, lo_open=True, hi_open=True)
    checks.positive("C", C)
    checks.in_range("delta", delta, 0, 1, lo_open=True, hi_open=True)
    return checks.positive_int("T", T)


def noise_floor(C):
    """σ² ≥ 4C², i.e. σ̄ = σ/(2C) ≥ 1 (Abadi et al. Lemma 3; details §2.3 (8))."""
    checks.positive("C", C)
    return 4.0 * np.asarray(C, dtype=float) ** 2


def noise_cap(q, C):
    """σ² < C²/(64q²), i.e. q < 1/(16σ̄) (Abadi et al. Lemma 3; details §2.3 (9))."""
    checks.in_range("q", q, 0, 1, lo_open=True, hi_open=True)
    checks.positive("C", C)
    return np.asarray(C, dtype=float) ** 2 / (64.0 * np.asarray(q, dtype=float) ** 2)


def _rdp_epsilon(sigma_bar, q, delta, T, conversion, rdp_form):
    if rdp_form == "exact":
        orders = rdp.DEFAULT_ORDERS
        return rdp.epsilon(T * rdp.subsampled_gaussian(q, sigma_bar, orders), orders, delta, conversion)
    if q * sigma_bar >= 1:
        return math.inf
    lam_max = math.floor(sigma_bar ** 2 * math.log(1 / (q * sigma_bar)))
    if lam_max < 1:
        return math.inf
    orders = np.arange(2, lam_max + 2, dtype=float)
    return rdp.epsilon(T * q ** 2 * orders / ((1 - q) * sigma_bar ** 2), orders, delta, conversion)


def _base_gaussian(eps, q, delta, T, method):
    """(ε_b, δ_b) of the per-round Gaussian before amplification by sampling: the per-round budget
    (ε₀, δ₀) of the T-fold composition, inverted through ε₀ = ln(1 + q(e^{ε_b} − 1)), δ₀ = q δ_b."""
    delta0, delta_prime = delta / (2 * T), delta / 2
    if method == "ac1":
        target = lambda e0: composition.advanced(e0, delta0, T, delta_prime)[0]
    else:
        target = lambda e0: composition.kov_bound(e0, delta0, T, delta)[0]
    lo, hi = 0.0, eps
    for _ in range(100):                  # ε(ε₀) is increasing: bisect to machine precision
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if target(mid) <= eps else (lo, mid)
    return math.log1p(math.expm1(lo) / q), delta0 / q


def _sigma_bar(method, eps, q, delta, T, rdp_form):
    """σ̄ = σ/(2C) by calibration, for the RDP methods and the exact f-DP composition."""
    if method in ("proposed", "ma"):
        # Below σ̄ = 1 Lemma 3 does not hold: the search starts at the floor.
        conversion = "improved" if method == "proposed" else "classic"
        return calibrate.smallest_sigma(lambda s: _rdp_epsilon(s, q, delta, T, conversion, rdp_form),
                                        eps, lo=1.0, hi=2.0)
    # exact: losses are rounded up on a grid of width h, which can add up to T·h to ε; keep that
    # below 5 % of the target (the result is a valid upper bound on the exact noise).
    h = min(1e-3, max(1e-5, eps / (20 * T)))
    step = lambda s: tradeoff.subsample(tradeoff.gaussian(1.0 / s), q)
    return calibrate.smallest_sigma(
        lambda s: tradeoff.epsilon(tradeoff.compose_n(step(s), T, h=h), delta), eps, lo=0.3, rtol=1e-3)


def min_noise_variance(method: str, eps: float, q: float, C: float, delta: float, T: int, *,
                       rdp_form: str = "abadi_lemma3"):
    """Smallest per-user noise variance σ² for (ε, δ)-LDP after T rounds, and its status.

    Returns ``(sigma2, status)``. For Proposed and MA, which rest on Abadi et al.'s Lemma 3, the
    status is ``"ok"``, ``"floor"`` (the target is met at the validity floor 4C², which is
    returned) or ``"infeasible: …"`` with ``sigma2 = nan`` when the required noise reaches the
    validity cap C²/(64q²). AC1/AC2 do not rest on Lemma 3; their status says when the base
    Gaussian's ε_b ≥ 1, outside Dwork & Roth's Thm 3.22 (the formula is then used as the
    reconstruction does, and flagged). ``"exact"`` is an upper bound within 5 % of the exact
    composition's ε (grid h ≤ ε/(20T)).
    """
    checks.one_of("method", method, METHODS)
    checks.positive("eps", eps)
    T = _check(q, C, delta, T)
    checks.one_of("rdp_form", rdp_form, ("abadi_lemma3", "exact"))
    if method in ("ac1", "ac2"):
        eps_base, delta_base = _base_gaussian(eps, q, delta, T, method)
        sigma2 = (2 * C * float(gaussian.classic_sigma(eps_base, delta_base, strict=False))) ** 2
        return sigma2, "ok (base ε_b ≥ 1: outside Dwork–Roth Thm 3.22)" if eps_base >= 1 else "ok"
    try:
        sigma_bar = _sigma_bar(method, eps, q, delta, T, rdp_form)
    except ValueError:
        return math.nan, "infeasible: no finite noise meets the target"
    sigma2 = (2 * C * sigma_bar) ** 2
    if method == "exact":
        return sigma2, "ok"
    # Lemma 3's validity region applies to the two RDP-based bounds.
    floor, cap = float(noise_floor(C)), float(noise_cap(q, C))
    if sigma2 >= cap:
        return math.nan, f"infeasible: σ² = {sigma2:.4g} ≥ cap C²/(64q²) = {cap:.4g}"
    if sigma2 <= floor * (1 + 1e-9):
        return floor, "floor"
    return sigma2, "ok"


def utility_bound(T, sigma2, C, d, lam, beta, weights=None):
    """U(T) ≥ λ²T / (2β(C² + d Σᵢ pᵢ² σᵢ²)) (reconstruction of Kim et al. (11); Rakhlin, Shamir &
    Sridharan 2012 for SGD with step 1/(λt)). ``sigma2`` is one σ² per user (or a scalar for all);
    ``weights`` the pᵢ = |D̃ᵢ|/|D̃| (default equal)."""
    checks.positive("T", T)
    checks.positive("C", C)
    checks.positive("d", d)
    checks.positive("lam", lam)
    checks.positive("beta", beta)
    if lam > beta:
        raise ValueError(f"lam must not exceed beta (strong convexity ≤ smoothness); got {lam} > {beta}")
    sigma2 = np.atleast_1d(np.asarray(sigma2, dtype=float))
    p = np.full(sigma2.shape[-1], 1.0 / sigma2.shape[-1]) if weights is None else np.asarray(weights, float)
    second_moment = C ** 2 + d * np.sum(p ** 2 * sigma2, axis=-1)
    return lam ** 2 * np.asarray(T, dtype=float) / (2 * beta * second_moment)


def rate_bound(sigma2, C, d):
    """R ≤ ½ log₂(2πe(σ² + C²/d)) bits per symbol (reconstruction of Kim et al. (12): Hadamard's
    inequality, AM–GM and ‖g̃‖ ≤ C)."""
    checks.nonnegative("sigma2", sigma2)
    checks.positive("C", C)
    checks.positive("d", d)
    return 0.5 * np.log2(2 * np.pi * np.e * (np.asarray(sigma2, dtype=float) + C ** 2 / d))
