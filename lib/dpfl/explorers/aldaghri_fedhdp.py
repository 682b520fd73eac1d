"""FedHDP explorer (Aldaghri, Mahdavifar & Beirami): (ρ, σ_p², N, τ²) → r*, λ* and the MSEs.

The paper's linear model: N clients, a fraction ρ of them opting out of privacy (non-private), the
rest adding noise of variance σ_p² (per-client V_p = N_p σ_p²) to their updates; heterogeneity τ²
and local noise s² (s² = 0.5 as at the check point). FedHDP weights the private group's updates by
r* = A/B (Lemma 6), and each client personalises with λ* (Theorem 8). The server MSE of FedHDP,
HDP-FedAvg (r = 1) and DP-FedAvg, and each group's personalised MSE at its λ*
(``theory.hetero_linear``; our reconstruction, checked by Monte Carlo in the notebook). Closed
forms: every setting answers at once. docs/aldaghri_fedhdp.md §3; arXiv:2110.15252 Lemmas 2, 6, 7, Thm 8.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dpfl.experiments.aldaghri_fedhdp import CHECK_POINT
from dpfl.explorers import Control, Explorer, Reading
from dpfl.theory import hetero_linear as hl

__all__ = ["EXPLORER", "compute"]

RS = np.linspace(0.0, 1.0, 201)[1:]
LAMS = np.concatenate([[0.0], np.geomspace(1e-2, 1e3, 200)])


def compute(rho: float, sigma2_p: float, N: int, tau2: float, *, s2: float = CHECK_POINT["s2"]) -> Reading:
    """r*, the three server MSEs, λ*_np and λ*_p with each group's personalised MSE at its λ*."""
    pop = hl.two_groups(N=N, rho=rho, tau2=tau2, s2=s2, sigma2_p=sigma2_p)
    if min(pop.counts) == 0:
        raise ValueError(f"rho·N must leave both groups non-empty; got rho = {rho:g}, N = {N} "
                         f"({pop.counts[0]} non-private, {pop.counts[1]} private clients)")
    r_star = float(hl.optimal_ratio(pop)[1])
    lam = {g: hl.optimal_lambda(pop, g) for g in (0, 1)}
    rows = [("r* = A/B (private / non-private weight)", r_star),
            ("server MSE, FedHDP (r*)", hl.optimal_server_mse(pop)),
            ("server MSE, HDP-FedAvg (r = 1)", hl.hdp_fedavg_mse(pop)),
            ("server MSE, DP-FedAvg", hl.dp_fedavg_mse(pop)),
            ("λ*_np (non-private clients)", lam[0]), ("λ*_p (private clients)", lam[1]),
            ("personalised MSE at λ*_np, non-private", float(hl.personalized_mse(pop, 0, lam[0]))),
            ("personalised MSE at λ*_p, private", float(hl.personalized_mse(pop, 1, lam[1])))]
    curves = {"rs": RS, "server": hl.server_mse(pop, RS), "r_star": r_star, "best": hl.optimal_server_mse(pop),
              "lams": LAMS, "np": hl.personalized_mse(pop, 0, LAMS), "p": hl.personalized_mse(pop, 1, LAMS), "lam": lam}
    note = (f"{pop.counts[0]} non-private and {pop.counts[1]} private clients; A = τ² + s² = {tau2 + s2:g}, "
            f"B = A + N_p σ_p² = {hl.update_variances(pop)[1]:g}; s² = {s2:g}. A reconstruction of the paper's "
            "closed forms (docs/aldaghri_fedhdp.md §3).")
    return Reading(pd.DataFrame(rows, columns=["quantity", "value"]), curves, note)


def draw(reading: Reading, fig) -> None:
    c = reading.curves
    ax1, ax2 = fig.subplots(1, 2)
    ax1.semilogy(c["rs"], c["server"], color="C0")
    ax1.plot(c["r_star"], c["best"], "ko", ms=5, label="r* = A/B")
    ax1.set(xlabel="weight ratio r (private / non-private)", ylabel="server MSE", title="Lemma 6: the server's MSE")
    ax1.legend(fontsize=8)
    for g, key, label in ((0, "np", "non-private client"), (1, "p", "private client")):
        line, = ax2.plot(c["lams"], c[key], label=label)
        lam = c["lam"][g]
        if np.isfinite(lam):
            ax2.plot(lam, np.interp(lam, c["lams"], c[key]), "o", color=line.get_color())
    ax2.set(xscale="symlog", xlabel="λ (personalisation)", ylabel="personalised MSE", title="Theorem 8: dots at λ*")
    ax2.legend(fontsize=8)


EXPLORER = Explorer(
    "FedHDP — the optimal weight ratio r*, λ* and the MSEs in the paper's linear model",
    (Control("rho", "fraction opting out ρ", (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8), 0.05),
     Control("sigma2_p", "private noise σ_p²", (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0), 0.05),
     Control("N", "clients N", (20, 50, 100, 200, 1000, 10000), 100),
     Control("tau2", "heterogeneity τ²", (0.01, 0.05, 0.1, 0.2, 0.5, 1.0), 0.1)),
    compute, draw, figsize=(10.0, 3.4))
