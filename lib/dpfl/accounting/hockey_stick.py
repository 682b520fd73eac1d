"""The E_ε (hockey-stick) divergence and its contraction under Markov kernels.

Implements Asoodeh & Calmon, *Differentially Private Federated Learning: An Information-Theoretic
Perspective* (FL-ICML 2020), Section 2 and Theorem 2:

* ``E_ε(μ‖ν) = sup_A μ(A) − e^ε ν(A)`` for discrete distributions (eq. 2);
* ``θ_ε(r) = Q(ε/r − r/2) − e^ε Q(ε/r + r/2)`` (eq. 5), the E_ε divergence between two
  isotropic Gaussians whose means are r standard deviations apart (Lemma 1);
* the contraction coefficient ``η_ε(K) = sup_{y1,y2} E_ε(K(y1)‖K(y2))`` (Theorem 1), and for a
  Gaussian kernel on a bounded set, ``θ_ε(diam/σ)`` (Lemma 2);
* δ(ε) of Algorithm 1 when only the last iterate is released (Theorem 2).

Neighbouring relation: replace-one (datasets of equal size differing in one entry), as in the
paper. A mechanism M is (ε, δ)-DP iff ``sup_{x∼x'} E_ε(M_x‖M_x') ≤ δ`` (eq. 1).

All functions are pure NumPy/SciPy and broadcast over array arguments.
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, ndtr

from dpfl import checks

__all__ = [
    "hockey_stick",
    "theta",
    "theta_complement",
    "gaussian_hockey_stick",
    "contraction_coefficient",
    "contraction_ratio",
    "gaussian_kernel_contraction",
    "last_iterate_delta",
    "all_iterates_delta",
]


def hockey_stick(p, q, eps):
    """E_ε(p‖q) = Σ_y (p(y) − e^ε q(y))₊ for discrete distributions (Asoodeh & Calmon eq. 2).

    ``p`` and ``q`` are probability vectors along the last axis (they broadcast against each
    other); ``eps`` broadcasts against the leading axes. Used by tests and by Theorem 1 checks.
    """
    checks.nonnegative("eps", eps)
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    if np.any(p < 0) or np.any(q < 0):
        raise ValueError("p and q must be probability vectors (non-negative entries)")
    scale = np.exp(np.asarray(eps, dtype=float))[..., None]
    return np.clip(p - scale * q, 0.0, None).sum(axis=-1)


def _theta_parts(eps, r):
    eps = np.asarray(checks.nonnegative("eps", eps), dtype=float)
    r = np.asarray(checks.nonnegative("r", r, finite=False), dtype=float)
    eps, r = np.broadcast_arrays(eps, r)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = eps / r - r / 2.0  # θ = Q(a) − e^ε Q(b) with b = a + r
        b = eps / r + r / 2.0
    return eps, r, a, b


def theta(eps, r):
    """θ_ε(r) = Q(ε/r − r/2) − e^ε Q(ε/r + r/2) (Asoodeh & Calmon eq. 5, Lemma 1).

    The E_ε divergence between N(m₁, σ²I) and N(m₂, σ²I) with r = ‖m₁ − m₂‖/σ; equivalently the
    δ(ε) of the Gaussian mechanism with sensitivity/σ = r (Balle & Wang 2018, Thm 8) and of
    r-GDP (Dong, Roth & Su 2019, Cor. 2.13). Computed as Q(a)·(1 − e^{ε + log Q(b) − log Q(a)})
    so that it keeps full relative precision down to δ ≈ 1e-300. θ_ε(0) = 0, θ_ε(∞) = 1.
    """
    eps, r, a, b = _theta_parts(eps, r)
    log_qa = log_ndtr(-a)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.exp(log_qa) * -np.expm1(eps + log_ndtr(-b) - log_qa)
    out = np.where(r == 0, 0.0, out)
    out = np.where(np.isinf(r), 1.0, out)
    out = np.clip(out, 0.0, 1.0)
    return out[()] if out.ndim == 0 else out


def theta_complement(eps, r):
    """1 − θ_ε(r) = Φ(a) + e^ε Q(b), computed without cancellation when θ_ε(r) is close to 1.

    Theorem 2's geometric factor needs 1 − θ_ε(2ρ√m/(ησ)), which is ~1e-5 for the paper's
    parameters; subtracting θ from 1 would lose most of its digits.
    """
    eps, r, a, b = _theta_parts(eps, r)
    with np.errstate(over="ignore", invalid="ignore"):
        out = ndtr(a) + np.exp(eps + log_ndtr(-b))
    out = np.where(r == 0, 1.0, out)
    out = np.where(np.isinf(r), 0.0, out)
    out = np.clip(out, 0.0, 1.0)
    return out[()] if out.ndim == 0 else out


def gaussian_hockey_stick(m1, m2, sigma, eps):
    """E_ε(N(m₁, σ²I)‖N(m₂, σ²I)) = θ_ε(‖m₁ − m₂‖/σ) (Asoodeh & Calmon Lemma 1).

    ``m1``, ``m2`` are mean vectors along the last axis (a scalar is a 1-D mean).
    """
    checks.positive("sigma", sigma)
    diff = np.atleast_1d(np.asarray(m1, dtype=float) - np.asarray(m2, dtype=float))
    return theta(eps, np.linalg.norm(diff, axis=-1) / np.asarray(sigma, dtype=float))


def contraction_coefficient(kernel, eps):
    """η_ε(K) of a finite Markov kernel by the two-point formula (Asoodeh & Calmon Theorem 1).

    ``kernel`` is a row-stochastic matrix, row y being the distribution K(y). Returns
    ``max_{y1,y2} E_ε(K(y1)‖K(y2))``; with ``eps`` an array, one value per ε.
    """
    K = _stochastic_matrix(kernel)
    eps = np.asarray(checks.nonnegative("eps", eps), dtype=float)
    pairs = hockey_stick(K[:, None, :], K[None, :, :], eps[..., None, None])
    out = pairs.reshape(*eps.shape, -1).max(axis=-1)
    return out[()] if out.ndim == 0 else out


def contraction_ratio(kernel, mu, nu, eps):
    """E_ε(μK‖νK) / E_ε(μ‖ν), the quantity whose supremum defines η_ε(K) (eq. 8).

    ``mu`` and ``nu`` may be stacks of input distributions (leading axes broadcast); pairs with
    E_ε(μ‖ν) = 0 give NaN, since they are excluded from the supremum.
    """
    K = _stochastic_matrix(kernel)
    mu = np.asarray(mu, dtype=float)
    nu = np.asarray(nu, dtype=float)
    num = hockey_stick(mu @ K, nu @ K, eps)
    den = hockey_stick(mu, nu, eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, np.nan)


def gaussian_kernel_contraction(eps, diameter, sigma):
    """η_ε of K(y) = N(y, σ²I) on a set of the given diameter: θ_ε(diam/σ) (Lemma 2)."""
    checks.positive("sigma", sigma)
    checks.nonnegative("diameter", diameter)
    return theta(eps, np.asarray(diameter, dtype=float) / np.asarray(sigma, dtype=float))


def _algorithm1_checks(q, n, sigma, eta, lipschitz, rho):
    n = checks.positive_int("n", n)
    checks.in_range("q", q, 0, 1, lo_open=True)
    checks.positive("sigma", sigma)
    checks.positive("eta", eta)
    checks.positive("lipschitz", lipschitz)
    checks.positive("rho", rho)
    return n


def last_iterate_delta(eps, q, n, sigma, eta=0.5, lipschitz=1.0, rho=1.0, *, variant="statement"):
    """δ(ε) of Algorithm 1 when only W_T is released (Asoodeh & Calmon Theorem 2).

    n users, batches of m = q·n users drawn without replacement so that each user is in exactly one
    of the T = n/m = 1/q rounds; local noise N(0, σ²I) per user; step size η; loss convex,
    L-Lipschitz and β-smooth with η ≤ 2/β; iterates projected onto the ρ-ball.
    Neighbouring: replace-one (one user's data replaced). With c = θ_ε(2ρ√m/(ησ)):

    * ``variant="statement"`` (Theorem 2 as stated):
      δ = (m/n) · θ_ε(2L/(√m σ)) · (1 − c^{n/m}) / (1 − c);
    * ``variant="proof"`` (the proof's final display, which has √m in the numerator):
      δ = (m/n) · θ_ε(2L√m/σ) · (1 − c^{n/m}) / (1 − c).

    The exponent n/m is used as a real number, as in the statement (for q = 0.3 it is 3.33).
    When c = 1 the geometric factor is its limit n/m.
    """
    n = _algorithm1_checks(q, n, sigma, eta, lipschitz, rho)
    checks.one_of("variant", variant, ("statement", "proof"))
    q = np.asarray(q, dtype=float)
    m = q * n
    rounds = 1.0 / q
    if variant == "statement":
        r_step = 2.0 * lipschitz / (np.sqrt(m) * sigma)
    else:
        r_step = 2.0 * lipschitz * np.sqrt(m) / sigma
    r_contract = 2.0 * rho * np.sqrt(m) / (eta * sigma)
    u = np.asarray(theta_complement(eps, r_contract))  # 1 − c
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = np.where(u > 0, -np.expm1(rounds * np.log1p(-u)) / u, rounds)
    return q * theta(eps, r_step) * geometric


def all_iterates_delta(eps, q, n, sigma, lipschitz=1.0):
    """δ(ε) of Algorithm 1 when every iterate W_1, …, W_T is released (not in the paper).

    Conditional on the round t in which the changed user participates, the trajectories agree up
    to t − 1, differ at t by one Gaussian step whose means are at most 2Lη/m apart under noise
    ησ/√m, and after t are a post-processing of W_t. Joint convexity of E_ε over the (data-
    independent) batch assignment then gives δ = Σ_t P(t)·θ_ε(2L/(√m σ)) = θ_ε(2L/(√m σ)).
    Theorem 2 multiplies this by q·(1 − c^T)/(1 − c) ≤ 1: that factor is what hiding the
    intermediate iterates buys. Neighbouring: replace-one.
    """
    n = _algorithm1_checks(q, n, sigma, 1.0, lipschitz, 1.0)
    m = np.asarray(q, dtype=float) * n
    return theta(eps, 2.0 * lipschitz / (np.sqrt(m) * sigma))


def _stochastic_matrix(kernel) -> np.ndarray:
    K = np.asarray(kernel, dtype=float)
    if K.ndim != 2:
        raise ValueError(f"kernel must be a 2-D row-stochastic matrix; got shape {K.shape}")
    if np.any(K < 0) or not np.allclose(K.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError("kernel must be row-stochastic: non-negative rows that sum to 1")
    return K
