"""Asoodeh & Calmon 2020 (*Differentially Private Federated Learning: An Information-Theoretic
Perspective*, FL-ICML workshop): the notebook's numerical experiments as cached run configs
(``dpfl.runs``). The closed forms and simulators they call live in ``dpfl.accounting.hockey_stick``
and ``dpfl.theory``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from scipy.stats import norm

from dpfl.accounting.hockey_stick import (all_iterates_delta, contraction_coefficient, gaussian_kernel_contraction,
                                          last_iterate_delta)
from dpfl.theory.contraction_search import random_kernel, search_ratio
from dpfl.theory.projected_noisy_gd import empirical_hockey_stick, simulate_last_iterate

__all__ = ["FIG2", "FIG2_QS", "FIG2_VALUES", "discretised_gaussian_kernel", "lemma2_table", "hiding_factor",
           "Theorem1Check", "Algorithm1MonteCarlo"]

#: Figure 2's setting (§3.2): n users, local noise σ, step η, Lipschitz constant L, projection radius ρ;
#: and its sampling rates q = m/n
FIG2 = dict(n=100, sigma=1.5, eta=0.5, lipschitz=1.0, rho=1.0)
FIG2_QS = (0.1, 0.2, 0.3)

#: Values of Theorem 2's formula as stated at Figure 2's setting, {(q, ε): δ} (docs/asoodeh2020.md §3)
FIG2_VALUES = {(0.1, 0.0): 0.167, (0.1, 1.0): 2.02e-3, (0.1, 2.0): 2.30e-7, (0.2, 1.0): 5.04e-5, (0.3, 1.0): 1.76e-6,
               (0.1, 0.5): 3.08e-2, (0.2, 0.0): 0.119, (0.2, 0.5): 7.34e-3, (0.3, 0.0): 0.0969, (0.3, 0.5): 2.28e-3}


def discretised_gaussian_kernel(diameter: float, sigma: float, n_in: int, n_out: int) -> np.ndarray:
    """K(y) = N(y, σ²) for n_in inputs y evenly spaced on [0, D], its outputs binned into n_out bins
    over [−8σ, D + 8σ] (the two outer bins extended to ±∞): an (n_in, n_out) row-stochastic matrix."""
    ys = np.linspace(0.0, diameter, n_in)
    edges = np.linspace(-8 * sigma, diameter + 8 * sigma, n_out + 1)
    edges[0], edges[-1] = -np.inf, np.inf
    return np.diff(norm.cdf((edges[None, :] - ys[:, None]) / sigma), axis=1)


def lemma2_table(n_out: int, settings=((1.0, 1.0), (2.0, 1.5), (0.5, 0.3)), eps=(0.0, 0.5, 1.0)) -> pd.DataFrame:
    """Lemma 2 against Theorem 1: the two-point contraction coefficient of the discretised kernel
    (9 inputs, ``n_out`` bins) next to θ_ε(D/σ), per (D, σ) and ε."""
    rows = []
    for diameter, sigma in settings:
        K = discretised_gaussian_kernel(diameter, sigma, n_in=9, n_out=n_out)
        for e in eps:
            rows.append({"diameter": diameter, "sigma": sigma, "eps": e,
                         "two-point on discretised kernel": contraction_coefficient(K, e),
                         "Lemma 2: θ_ε(D/σ)": gaussian_kernel_contraction(e, diameter, sigma)})
    table = pd.DataFrame(rows)
    table["abs. difference"] = (table.iloc[:, 3] - table.iloc[:, 4]).abs()
    return table


def hiding_factor(eps, q: float, rho=FIG2["rho"], setting: dict = FIG2):
    """δ of Theorem 2 (only the last iterate released) over δ with every iterate released, at ``setting``
    with projection radius ``rho`` (a number or an array): the whole benefit of hiding the iterates."""
    n, sigma, L = setting["n"], setting["sigma"], setting["lipschitz"]
    return last_iterate_delta(eps, q, n, sigma, setting["eta"], L, rho) / all_iterates_delta(eps, q, n, sigma, L)


@dataclasses.dataclass(frozen=True)
class Theorem1Check:
    """Search sup E_ε(μK‖νK)/E_ε(μ‖ν) for random kernels and compare with the two-point value."""

    n_kernels: int = 20
    n_in: int = 4
    n_out: int = 6
    eps: tuple = (0.0, 0.25, 0.5, 1.0)
    n_pairs: int = 20_000
    seed: int = 0

    def compute(self) -> pd.DataFrame:
        rows = []
        root = np.random.SeedSequence([self.seed, 1])
        for k, child in enumerate(root.spawn(self.n_kernels)):
            rng = np.random.default_rng(child)
            kernel = random_kernel(self.n_in, self.n_out, rng, concentration=rng.choice([0.3, 1.0, 3.0]))
            for eps in self.eps:
                two_point = float(contraction_coefficient(kernel, eps))
                by_alpha, refined = search_ratio(kernel, eps, rng, self.n_pairs)
                rows.append({"kernel": k, "eps": eps, "two_point": two_point,
                             **{f"random_max_a{a:g}": v for a, v in by_alpha.items()},
                             "refined_max": refined})
        table = pd.DataFrame(rows)
        table["gap"] = table["two_point"] - table["refined_max"]
        return table


@dataclasses.dataclass(frozen=True)
class Algorithm1MonteCarlo:
    """Empirical E_ε of the last iterate versus Theorem 2's δ, for one sub-sampling rate q."""

    q: float = 0.1
    n: int = 100
    sigma: float = 1.5
    eta: float = 0.5
    lipschitz: float = 1.0
    rho: float = 1.0
    eps: tuple = (0.0, 0.1, 0.25, 0.5)
    n_samples: int = 200_000
    bins: int = 40
    seed: int = 0

    def compute(self) -> pd.DataFrame:
        root = np.random.SeedSequence([self.seed, 2, int(round(self.q * 1000))])
        data_rng, rng_p, rng_q, rng_floor = (np.random.default_rng(s) for s in root.spawn(4))
        x = data_rng.uniform(-self.lipschitz, self.lipschitz, self.n)
        x_prime = x.copy()
        x[0], x_prime[0] = self.lipschitz, -self.lipschitz
        args = (self.q, self.sigma, self.eta, self.rho, self.n_samples)
        w = simulate_last_iterate(x, *args, rng_p)
        w_prime = simulate_last_iterate(x_prime, *args, rng_q)
        w_again = simulate_last_iterate(x, *args, rng_floor)
        eps = np.asarray(self.eps, dtype=float)
        est = np.maximum(empirical_hockey_stick(w, w_prime, eps, rho=self.rho, bins=self.bins),
                         empirical_hockey_stick(w_prime, w, eps, rho=self.rho, bins=self.bins))
        floor = empirical_hockey_stick(w, w_again, eps, rho=self.rho, bins=self.bins)
        bound = last_iterate_delta(eps, self.q, self.n, self.sigma, self.eta, self.lipschitz, self.rho)
        return pd.DataFrame({"q": self.q, "eps": eps, "empirical": est, "noise_floor": floor,
                             "theorem2": bound, "mass_at_boundary": np.mean(np.abs(w) >= self.rho)})
