"""Gaussian differential privacy (μ-GDP): the CLT accountants of Zheng et al. and Bu et al.

A mechanism is μ-GDP if every neighbouring pair is at least as hard to tell apart as N(0,1)
from N(μ,1) (Dong, Roth & Su 2019). Neighbouring: **replace-one** throughout, as in Zheng et al.
(*Federated f-Differential Privacy*, AISTATS 2021, §3), so one DP-SGD step with clipping norm C
and noise N(0, 4C²σ²) on the sum has sensitivity 2C and noise multiplier σ.

**The μ of DP-SGD here is a central-limit approximation, not a guarantee** (:func:`clt_mu`,
:func:`clt_mu_poisson`): the composition of T subsampled Gaussian steps tends to G_μ as T → ∞,
but at finite T its true privacy can be worse than G_μ: at T = 1, σ = 1, q = 0.01 the CLT's
ε(10⁻⁵) is 0.037 where dp_accounting's PLD lower bound is 0.199 (``tests/test_privacy_safety.py``).
The papers report it, so it is kept, named ``clt_*`` and flagged by an :class:`ApproximationWarning`;
for a guarantee use ``tradeoff.compose_n`` (exact f-DP) or ``rdp``. :func:`delta` and :func:`epsilon`
are exact *for a mechanism that is μ-GDP*.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import norm

from dpfl import checks
from dpfl.accounting._solve import smallest_meeting
from dpfl.accounting.hockey_stick import theta

__all__ = ["ApproximationWarning", "clt_mu", "clt_mu_fraction", "clt_mu_poisson", "delta", "epsilon", "compose",
           "strong_federated_mu"]


class ApproximationWarning(UserWarning):
    """A privacy number from an approximation (the GDP central limit theorem), not a guarantee."""


def _warn_clt(stacklevel: int = 3) -> None:
    warnings.warn("the GDP CLT μ is an approximation, not a privacy guarantee (it can understate ε); "
                  "use tradeoff.compose_n or rdp for a bound", ApproximationWarning, stacklevel=stacklevel)


def clt_mu(sigma, batch_size, n, steps):
    """**Approximate** (CLT) μ of DP-SGD with fixed-size batches drawn **without replacement** (Zheng et al. Thm 2).

    Each of ``steps`` steps samples ``batch_size`` of the ``n`` records uniformly without
    replacement and is C_{B/n}(G_{1/σ})-DP; as (B/n)√steps → c the composition tends to G_μ with

        μ = √2 · c · √(e^{σ⁻²} Φ(1.5 σ⁻¹) + 3 Φ(−0.5 σ⁻¹) − 2)        (Zheng et al. Thm 2;
                                                                       Bu et al. 2020, Thm 5)

    ``steps`` is K·R (local steps per round × rounds) for a client in Zheng's Algorithm 2.
    Neighbouring: replace-one. A CLT limit, not a bound (warns :class:`ApproximationWarning`):
    see ``tradeoff.compose_n`` for the exact composition.
    """
    checks.counts("batch_size", batch_size)
    checks.counts("n", n)
    if np.any(np.asarray(batch_size) > np.asarray(n)):
        raise ValueError("batch_size must lie in (0, n]")
    return clt_mu_fraction(sigma, np.asarray(batch_size, dtype=float) / np.asarray(n, dtype=float), steps,
                           stacklevel=4)


def clt_mu_fraction(sigma, q, steps, *, stacklevel: int = 3):
    """:func:`clt_mu` with the sampled fraction q = B/n given directly (an accountant's
    ``SampledGaussianEvent(σ, q, "without_replacement")``). **Approximate**; replace-one."""
    _warn_clt(stacklevel)
    checks.positive("sigma", sigma)
    checks.in_range("q", q, 0, 1, lo_open=True)
    checks.counts("steps", steps)
    s = 1.0 / np.asarray(sigma, dtype=float)
    c = np.asarray(q, dtype=float) * np.sqrt(steps)
    inner = np.exp(s * s) * norm.cdf(1.5 * s) + 3.0 * norm.cdf(-0.5 * s) - 2.0
    return np.sqrt(2.0) * c * np.sqrt(inner)


def clt_mu_poisson(sigma, q, steps):
    """**Approximate** (CLT) μ of DP-SGD with **Poisson** sampling at rate q: μ = q √steps √(e^{σ⁻²} − 1).

    Bu, Dong, Long & Su 2020 (*Deep Learning with Gaussian DP*), Cor. 5 (CLT). Neighbouring:
    add/remove-one with sensitivity C and noise σC (equivalently replace-one at 2C and 2σC).
    Not a bound (warns :class:`ApproximationWarning`).
    """
    _warn_clt()
    checks.positive("sigma", sigma)
    checks.in_range("q", q, 0, 1, lo_open=True)
    checks.counts("steps", steps)
    return np.asarray(q, dtype=float) * np.sqrt(steps) * np.sqrt(np.expm1(1.0 / np.asarray(sigma, dtype=float) ** 2))


def delta(mu, eps):
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2019, Cor. 2.13).

    The same function as the E_ε divergence between N(μ,1) and N(0,1), θ_ε(μ) (Asoodeh & Calmon
    eq. 5), which is how it is computed.
    """
    checks.nonnegative("mu", mu)
    return theta(eps, mu)


def epsilon(mu, delta_):
    """Smallest ε ≥ 0 with δ_μ(ε) ≤ δ for μ-GDP (inverts :func:`delta`; scalar or array)."""
    checks.nonnegative("mu", mu)
    checks.in_range("delta", delta_, 0, 1, lo_open=True, hi_open=True)
    mus, deltas = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(delta_, dtype=float))
    out = np.array([smallest_meeting(lambda e, m=m: theta(e, m), d, 0.0, 1.0) if m > 0 else 0.0
                    for m, d in zip(mus.ravel(), deltas.ravel())])
    out = out.reshape(mus.shape)
    return out[()] if out.ndim == 0 else out


def compose(*mus):
    """μ of the composition of μ_i-GDP mechanisms: √(Σ μ_i²) (Dong, Roth & Su 2019, Cor. 3.3)."""
    arr = np.asarray(mus, dtype=float)
    checks.nonnegative("mu", arr)
    return np.sqrt(np.sum(arr ** 2, axis=0))


def strong_federated_mu(mu_max, n_clients):
    """Strong federated GDP: √(m − 1) · μ_max for m clients (Zheng et al. Thm 2, Def. 3.6).

    Weak federated GDP is μ_max itself (Def. 3.5).
    """
    checks.nonnegative("mu_max", mu_max)
    checks.in_range("n_clients", n_clients, 2, None)
    return np.sqrt(np.asarray(n_clients, dtype=float) - 1.0) * np.asarray(mu_max, dtype=float)
