"""Kim, Günlü & Schaefer 2021 explorer: target ε → the smallest σ² per accounting, and the utility and rate bounds.

For a target (ε, δ) after T rounds at sampling rate q, each accounting method's smallest per-user
noise variance σ² (``ldp_tradeoffs.min_noise_variance``: Proposed, MA, AC2, AC1 as reconstructed,
and our exact f-DP composition), then the utility bound U(T) (reconstructed (11)) and the
transmission-rate bound (reconstructed (12)) that noise allows. Defaults as in the notebook
(C = 1, δ = 1e-5, N = 100 users, d = 100, λ = 0.5, β = 1; ours, the paper's are lost:
docs/kim2021.md §3). The paper's four methods are closed forms or one-dimensional searches; the
exact method composes numerically (≈ 2 s on a laptop CPU), so it is off unless asked for, and
every setting is cached. arXiv:2102.04737 Table 1, Fig. 1.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from dpfl.experiments.kim2021 import LABELS
from dpfl.explorers import Control, Explorer, Reading
from dpfl.theory import ldp_tradeoffs as kim

__all__ = ["EXPLORER", "compute", "DEFAULTS"]

#: the notebook's stated defaults (docs/kim2021.md §3)
DEFAULTS = dict(C=1.0, delta=1e-5, n_users=100, d=100, lam=0.5, beta=1.0)


@functools.lru_cache(maxsize=1024)
def _sigma2(method: str, eps: float, q: float, C: float, delta: float, T: int) -> tuple:
    return kim.min_noise_variance(method, eps, q, C, delta, T)


def compute(eps: float, T: int, q: float, exact: str = "no", *, C: float = DEFAULTS["C"], delta: float = DEFAULTS["delta"],
            n_users: int = DEFAULTS["n_users"], d: int = DEFAULTS["d"], lam: float = DEFAULTS["lam"],
            beta: float = DEFAULTS["beta"]) -> Reading:
    """Per method: σ², its status, U(T) and the rate bound at the target ``eps``."""
    methods = kim.METHODS if exact == "yes" else kim.PAPER_METHODS
    rows = []
    for m in methods:
        s2, status = _sigma2(m, float(eps), float(q), float(C), float(delta), int(T))
        ok = np.isfinite(s2)
        rows.append({"method": LABELS[m], "σ²": s2, "status": status,
                     "utility bound U(T)": (float(kim.utility_bound(T, np.full(n_users, s2), C, d, lam, beta)[()])
                                            if ok else np.nan),
                     "rate bound (bits/symbol)": float(kim.rate_bound(s2, C, d)) if ok else np.nan})
    floor, cap = float(kim.noise_floor(C)), float(kim.noise_cap(q, C))
    note = (f"Validity region of Abadi et al.'s Lemma 3 (Proposed, MA): σ² ∈ [4C², C²/(64q²)] = [{floor:g}, {cap:g}]; "
            f"a method at the floor reads 'floor'. δ = {delta:g}, C = {C:g}, N = {n_users}, d = {d}, λ = {lam:g}, β = {beta:g}.")
    return Reading(pd.DataFrame(rows), {"floor": floor, "cap": cap}, note)


def draw(reading: Reading, fig) -> None:
    t = reading.table
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for ax, col, log in ((ax1, "σ²", True), (ax2, "utility bound U(T)", True), (ax3, "rate bound (bits/symbol)", False)):
        ax.bar(t.method, t[col].fillna(0.0), color=[f"C{i}" for i in range(len(t))])
        ax.set(title=col, yscale="log" if log else "linear")
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax1.axhline(reading.curves["floor"], color="k", ls="--", lw=1)
    ax1.axhline(reading.curves["cap"], color="k", ls=":", lw=1)


EXPLORER = Explorer(
    "Kim, Günlü & Schaefer 2021 — the smallest noise per accounting and what it costs",
    (Control("eps", "target ε", tuple(float(e) for e in np.round(np.geomspace(0.1, 10, 13), 3)), 1.0),
     Control("T", "rounds T", (10, 100, 1000, 10000), 100),
     Control("q", "sampling rate q", (0.001, 0.005, 0.01, 0.02, 0.05), 0.01),
     Control("exact", "with exact f-DP (≈2 s per new setting)", ("no", "yes"), "no")),
    compute, draw, figsize=(11.0, 3.4))
