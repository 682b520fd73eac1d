"""Aldaghri, Mahdavifar & Beirami (FedHDP, arXiv:2110.15252): the notebook's experiments as cached
run configs (``dpfl.runs``), on the re-derived closed forms and the protocol simulator of
``dpfl.theory.hetero_linear`` (docs/aldaghri_fedhdp.md §3).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd

from dpfl.theory.hetero_linear import (Population, dp_fedavg_mse, gap_limits, gaps, hdp_fedavg_mse, optimal_lambda,
                                       optimal_server_mse, personalized_mse, simulate_rounds, two_groups)

__all__ = ["CHECK_POINT", "CHECK_POINT_VALUES", "closed_forms", "MONTE_CARLO_GRID", "population_label",
           "MonteCarloCheck"]

#: The check point of docs/aldaghri_fedhdp.md §3: N = 100 clients, 5 % non-private, τ² = 0.1, s² = 0.5,
#: σ_p² = 0.05 (arguments of ``hetero_linear.two_groups``)
CHECK_POINT = dict(N=100, rho=0.05, tau2=0.1, s2=0.5, sigma2_p=0.05)

#: Its reference values (docs/aldaghri_fedhdp.md §3, "Check point": the re-derived closed forms,
#: confirmed by a Monte Carlo simulation of 2·10⁵ repetitions) — a reconstruction, not the paper's numbers
CHECK_POINT_VALUES = {
    "server MSE, FedHDP (r*)": 0.03833, "server MSE, HDP-FedAvg": 0.05113, "server MSE, DP-FedAvg": 0.0535,
    "λ*_np": 5.0, "λ*_p": 3.72, "gap_HDP at N = 1e5": 0.04501, "gap_DP at N = 1e5": 0.04739,
    "gap_HDP limit (1−ρ)²σ_p²": 0.04512, "gap_DP limit (1−ρ)σ_p²": 0.0475,
}


def closed_forms(point: dict = CHECK_POINT) -> dict:
    """The quantities of :data:`CHECK_POINT_VALUES` from the closed forms at ``point`` (the gaps at
    N = 10⁵ and their N → ∞ limits at the point's ρ and σ_p²)."""
    pop, big = two_groups(**point), two_groups(**(point | {"N": 100_000}))
    limits = gap_limits(point["rho"], point["sigma2_p"])
    return {"server MSE, FedHDP (r*)": optimal_server_mse(pop), "server MSE, HDP-FedAvg": hdp_fedavg_mse(pop),
            "server MSE, DP-FedAvg": dp_fedavg_mse(pop), "λ*_np": optimal_lambda(pop, 0), "λ*_p": optimal_lambda(pop, 1),
            "gap_HDP at N = 1e5": gaps(big)[0], "gap_DP at N = 1e5": gaps(big)[1],
            "gap_HDP limit (1−ρ)²σ_p²": limits[0], "gap_DP limit (1−ρ)σ_p²": limits[1]}


#: The populations whose closed forms the notebook checks by Monte Carlo (keyword arguments of
#: :class:`MonteCarloCheck`): the check point, regression at d = 3, three other two-group
#: populations, a three-level one (App. A.6); ``"full"`` adds a large and a regression one
MONTE_CARLO_GRID = {
    "smoke": (dict(counts=(5, 95), sigma2=(0.0, 0.05), tau2=0.1, s2=0.5),
              dict(counts=(5, 95), sigma2=(0.0, 0.05), tau2=0.1, s2=0.5, d=3, n=6),
              dict(counts=(20, 30), sigma2=(0.0, 0.2), tau2=0.5, s2=0.1),
              dict(counts=(2, 8), sigma2=(0.0, 1.0), tau2=0.01, s2=1.0),
              dict(counts=(10, 30, 60), sigma2=(0.0, 0.02, 0.1), tau2=0.2, s2=0.3)),
}
MONTE_CARLO_GRID["full"] = MONTE_CARLO_GRID["smoke"] + (
    dict(counts=(50, 450), sigma2=(0.0, 0.01), tau2=0.05, s2=2.0),
    dict(counts=(40, 10), sigma2=(0.0, 5.0), tau2=1.0, s2=0.2, d=5, n=5))


def population_label(cfg: dict) -> str:
    """One line naming a :data:`MONTE_CARLO_GRID` population."""
    return (f"N={sum(cfg['counts'])}, groups={cfg['counts']}, σ²={cfg['sigma2']}, τ²={cfg['tau2']}, s²={cfg['s2']}, "
            f"d={cfg.get('d', 1)}")


@dataclasses.dataclass(frozen=True)
class MonteCarloCheck:
    """Closed forms next to Monte Carlo estimates (mean, standard error, z-score) for one population."""

    code_version: ClassVar[int] = 2     # 2: reports z-scores

    counts: tuple
    sigma2: tuple
    tau2: float
    s2: float
    reps: int = 20_000
    d: int = 1
    n: int = 1
    seed: int = 0

    def compute(self) -> pd.DataFrame:
        pop = Population(self.counts, self.sigma2, self.tau2, self.s2)
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 3]))
        groups = [g for g, c in enumerate(self.counts) if c > 0]
        lam_star = [optimal_lambda(pop, g) for g in groups]
        finite = [lam for lam in lam_star if np.isfinite(lam)]
        run = lambda **kw: simulate_rounds(pop, self.reps, rng, d=self.d, n=self.n, **kw)
        server, personal = run(lams=finite)
        uniform, _ = run(r=np.ones(len(self.counts)))
        dp, _ = run(dp_fedavg=True)
        rows = [("server MSE, FedHDP (r*)", optimal_server_mse(pop), server),
                ("server MSE, HDP-FedAvg (r=1)", hdp_fedavg_mse(pop), uniform),
                ("server MSE, DP-FedAvg", dp_fedavg_mse(pop), dp)]
        for i, (g, lam) in enumerate((g, lam) for g, lam in zip(groups, lam_star) if np.isfinite(lam)):
            rows.append((f"personalised MSE, group {g} at λ*={lam:.4g}",
                         float(personalized_mse(pop, g, lam)), personal[:, i, groups.index(g)]))
        out = []
        for name, formula, samples in rows:                    # errors are per coordinate
            mean = float(np.mean(samples))
            se = float(np.std(samples, ddof=1) / np.sqrt(samples.size))
            out.append({"quantity": name, "formula": formula, "monte carlo": mean, "s.e.": se,
                        "z": (mean - formula) / se})
        return pd.DataFrame(out)
