"""A 1-D instance of Asoodeh & Calmon's Algorithm 1, simulated to check Theorem 2 empirically.

Instance: loss ℓ(w, x) = x·w on w ∈ [−ρ, ρ] with |x| ≤ L (convex, L-Lipschitz, and β-smooth for
every β, so η ≤ 2/β holds), n users, T = n/m rounds, each user in exactly one batch of m (a random
partition), aggregate step W_t = proj_ρ(W_{t−1} − η·mean_{j∈B_t} x_j − (ησ/√m)·Z_t), W_0 = 0.
Neighbouring datasets differ in one user: x_i = L versus x'_i = −L (gradient gap 2L, the worst
case). Only W_T is released. E_ε between the two laws of W_T is estimated from samples by a
histogram plug-in estimator (the projection puts atoms at ±ρ, which get their own cells).
"""
from __future__ import annotations

import numpy as np

from dpfl import checks
from dpfl.accounting.hockey_stick import hockey_stick

__all__ = ["simulate_last_iterate", "empirical_hockey_stick"]


def simulate_last_iterate(x, q: float, sigma: float, eta: float, rho: float, n_samples: int,
                          rng: np.random.Generator, chunk: int = 50_000) -> np.ndarray:
    """``n_samples`` independent draws of W_T of Algorithm 1 on data ``x`` (length n)."""
    x = np.asarray(x, dtype=float)
    n = x.size
    checks.in_range("q", q, 0, 1, lo_open=True)
    m = int(round(q * n))
    if m < 1 or abs(m - q * n) > 1e-9 or n % m:
        raise ValueError(f"q must make m = q·n an integer divisor of n = {n} (T = n/m rounds); "
                         f"got q = {q}")
    checks.positive("sigma", sigma)
    checks.positive("eta", eta)
    checks.positive("rho", rho)
    checks.positive_int("n_samples", n_samples)
    rounds, noise = n // m, eta * sigma / np.sqrt(m)
    out = np.empty(n_samples)
    for start in range(0, n_samples, chunk):
        size = min(chunk, n_samples - start)
        perm = rng.permuted(np.broadcast_to(np.arange(n), (size, n)), axis=1)
        grads = x[perm].reshape(size, rounds, m).mean(axis=2)
        w = np.zeros(size)
        for t in range(rounds):
            w = np.clip(w - eta * grads[:, t] - noise * rng.standard_normal(size), -rho, rho)
        out[start:start + size] = w
    return out


def empirical_hockey_stick(a, b, eps, *, rho: float, bins: int = 40):
    """Plug-in estimate of E_ε(P‖Q) from samples ``a`` ~ P and ``b`` ~ Q on [−ρ, ρ].

    Equal-width cells on the open interval plus one cell for each atom at ±ρ. The estimate is
    biased upward by sampling noise (see the noise floor in :class:`dpfl.experiments.asoodeh2020.Algorithm1MonteCarlo`) and
    downward by binning.
    """
    checks.positive_int("bins", bins)
    edges = np.linspace(-rho, rho, bins + 1)

    def cells(s):
        s = np.asarray(s, dtype=float)
        inner = s[(s > -rho) & (s < rho)]
        counts = np.concatenate([[np.sum(s <= -rho)], np.histogram(inner, edges)[0], [np.sum(s >= rho)]])
        return counts / s.size

    return hockey_stick(cells(a), cells(b), eps)
