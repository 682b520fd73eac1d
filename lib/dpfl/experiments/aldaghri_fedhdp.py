"""Aldaghri, Mahdavifar & Beirami (FedHDP, arXiv:2110.15252): the notebook's experiments as cached
run configs (``dpfl.runs``), on the re-derived closed forms and the protocol simulator of
``dpfl.theory.hetero_linear`` (docs/aldaghri_fedhdp.md §3).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd

from dpfl.theory.hetero_linear import (Population, dp_fedavg_mse, hdp_fedavg_mse, optimal_lambda,
                                       optimal_server_mse, personalized_mse, simulate_rounds)

__all__ = ["MonteCarloCheck"]


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
