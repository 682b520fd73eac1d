"""Asoodeh & Calmon 2020 (*Differentially Private Federated Learning: An Information-Theoretic
Perspective*, FL-ICML workshop): the notebook's numerical experiments as cached run configs
(``dpfl.runs``). The closed forms and simulators they call live in ``dpfl.accounting.hockey_stick``
and ``dpfl.theory``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from dpfl.accounting.hockey_stick import contraction_coefficient, last_iterate_delta
from dpfl.theory.contraction_search import random_kernel, search_ratio
from dpfl.theory.projected_noisy_gd import empirical_hockey_stick, simulate_last_iterate

__all__ = ["Theorem1Check", "Algorithm1MonteCarlo"]


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
