"""Numerical check of Asoodeh & Calmon Theorem 1 (two-point formula for η_ε).

η_ε(K) = sup_{μ,ν} E_ε(μK‖νK)/E_ε(μ‖ν) (eq. 8) is searched directly, over many random input
pairs (Dirichlet draws from flat to nearly point masses) followed by a local optimisation of the
best ones, and compared with the two-point value max_{y1,y2} E_ε(K(y1)‖K(y2)) (eq. 9). Theorem 1
says no ratio exceeds the two-point value and that the supremum reaches it.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import softmax

from dpfl import checks
from dpfl.accounting.hockey_stick import contraction_ratio, hockey_stick

__all__ = ["CONCENTRATIONS", "random_kernel", "search_ratio"]

#: Dirichlet concentrations of the random input pairs, from flat to nearly point masses.
CONCENTRATIONS = (1.0, 0.3, 0.1, 0.03)


def random_kernel(n_in: int, n_out: int, rng: np.random.Generator, concentration: float = 1.0):
    """A random row-stochastic ``n_in × n_out`` matrix with Dirichlet(concentration) rows."""
    checks.positive_int("n_in", n_in)
    checks.positive_int("n_out", n_out)
    checks.positive("concentration", concentration)
    return rng.dirichlet(np.full(n_out, concentration), size=n_in)


def search_ratio(kernel, eps: float, rng: np.random.Generator, n_pairs: int = 20_000,
                 concentrations=CONCENTRATIONS, n_refine: int = 3, min_divergence: float = 1e-6):
    """Largest E_ε(μK‖νK)/E_ε(μ‖ν) found by random search, then Nelder–Mead from the best pairs.

    Random pairs are drawn from Dirichlet distributions of each concentration in turn (small
    concentrations give nearly point masses). Pairs with E_ε(μ‖ν) < ``min_divergence`` are
    skipped: there the ratio is 0/0 up to rounding. Returns ``{concentration: max ratio}`` and
    the best ratio after refining the ``n_refine`` best pairs over softmax-parametrised μ, ν.
    """
    checks.positive_int("n_pairs", n_pairs)
    kernel = np.asarray(kernel, dtype=float)
    n_in = kernel.shape[0]
    per = max(1, n_pairs // len(concentrations))

    def ratios(mu, nu):
        r = contraction_ratio(kernel, mu, nu, eps)
        return np.where(hockey_stick(mu, nu, eps) >= min_divergence, r, -np.inf)

    best_by_alpha, pool = {}, []
    for alpha in concentrations:
        mu = rng.dirichlet(np.full(n_in, alpha), size=per)
        nu = rng.dirichlet(np.full(n_in, alpha), size=per)
        r = ratios(mu, nu)
        best_by_alpha[alpha] = float(r.max())
        top = np.argsort(r)[::-1][:n_refine]
        pool += [(r[i], mu[i], nu[i]) for i in top]

    refined = max(r for r, _, _ in pool)
    for _, mu0, nu0 in sorted(pool, key=lambda item: -item[0])[:n_refine]:
        z0 = np.concatenate([np.log(mu0 + 1e-12), np.log(nu0 + 1e-12)])
        res = minimize(lambda z: -float(ratios(softmax(z[:n_in]), softmax(z[n_in:]))), z0,
                       method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-10, "fatol": 1e-14})
        refined = max(refined, -float(res.fun))
    return best_by_alpha, refined
