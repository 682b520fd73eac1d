"""Asoodeh & Calmon 2020 explorer: (q, σ, n, η) → δ(ε) of Theorem 2 against the all-iterates bound.

Algorithm 1: n users, batches of m = q·n users without replacement (T = 1/q rounds), local noise
N(0, σ²I), step η, projection onto the ρ-ball (ρ = 1, L = 1 as in Fig. 2). Theorem 2 bounds δ(ε)
when only the last iterate is released (``hockey_stick.last_iterate_delta``, as stated; the proof's
final display is drawn too, docs/asoodeh2020.md §2); releasing every iterate gives
θ_ε(2L/(√m σ)) (``hockey_stick.all_iterates_delta``, ours). Their ratio is what hiding the iterates
buys. Closed forms: every setting answers at once. docs/asoodeh2020.md §3; arXiv:2007.15789 Thm 2.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dpfl.accounting import hockey_stick as hs
from dpfl.experiments.asoodeh2020 import FIG2
from dpfl.explorers import Control, Explorer, Reading

__all__ = ["EXPLORER", "compute", "EPS"]

EPS = np.linspace(0.0, 3.0, 61)
AT = (0.0, 1.0, 2.0)


def compute(q: float, sigma: float, n: int, eta: float, *, lipschitz: float = FIG2["lipschitz"],
            rho: float = FIG2["rho"]) -> Reading:
    """δ(ε) on :data:`EPS` (Theorem 2 as stated, the proof's final display, all iterates) and at ε ∈ {0, 1, 2}."""
    if q * n < 1:
        raise ValueError(f"q·n must be at least one user per batch; got q = {q:g}, n = {n} (m = {q * n:g})")
    args = dict(q=q, n=n, sigma=sigma, eta=eta, lipschitz=lipschitz, rho=rho)
    curves = {"statement": hs.last_iterate_delta(EPS, **args),
              "proof": hs.last_iterate_delta(EPS, **args, variant="proof"),
              "all": hs.all_iterates_delta(EPS, q, n, sigma, lipschitz)}
    rows = []
    for e in AT:
        last, every = float(hs.last_iterate_delta(e, **args)), float(hs.all_iterates_delta(e, q, n, sigma, lipschitz))
        proof = float(hs.last_iterate_delta(e, **args, variant="proof"))
        rows.append({"ε": e, "δ Theorem 2 (last iterate)": last, "δ proof's display": proof, "δ all iterates (ours)": every,
                     "hiding factor": last / every if every > 0 else np.nan})
    note = (f"m = q·n = {q * n:g} users per round, T = 1/q = {1 / q:g} rounds; L = {lipschitz:g}, ρ = {rho:g}. "
            "Replace-one neighbours. The hiding factor δ_Thm2/δ_all ≤ 1 is what releasing only W_T buys.")
    return Reading(pd.DataFrame(rows), {"eps": EPS, **curves}, note)


def draw(reading: Reading, fig) -> None:
    ax = fig.subplots()
    c = reading.curves
    ax.semilogy(c["eps"], c["all"], color="C1", label="all iterates released (ours)")
    ax.semilogy(c["eps"], c["statement"], color="C0", ls=":", lw=3, label="Theorem 2, last iterate (as stated)")
    ax.semilogy(c["eps"], c["proof"], color="C0", ls="--", lw=1, label="the proof's final display")
    ax.set(xlabel="ε", ylabel="δ", title="δ(ε) of Algorithm 1")
    ax.legend(fontsize=8)


EXPLORER = Explorer(
    "Asoodeh & Calmon 2020 — δ(ε) of Theorem 2 vs releasing every iterate (L = ρ = 1)",
    (Control("q", "batch fraction q", (0.05, 0.1, 0.2, 0.25, 0.5), 0.1),
     Control("sigma", "local noise σ", (0.5, 1.0, 1.5, 2.0, 3.0, 5.0), 1.5),
     Control("n", "users n", (20, 50, 100, 200, 1000), 100),
     Control("eta", "step η", (0.05, 0.1, 0.25, 0.5, 1.0), 0.5)),
    compute, draw)
