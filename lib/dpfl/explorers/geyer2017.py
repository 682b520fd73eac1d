"""Geyer, Klein & Nabi 2017 explorer: (K, m, σ, δ′) → the rounds until the privacy budget, theirs and tight.

Their code stops a run at the first round whose δ at ε = 8 exceeds δ′ (CR), accounting each round
as three Poisson-subsampled Gaussians at q = m/K with their moments accountant; it samples m of K
without replacement, which one client's replacement moves by σ/(2√3) per layer-stacked Gaussian.
Per accounting of ``geyer2017_tables.ACCOUNTINGS`` (theirs; Poisson with the layers as one Gaussian;
as run under RDP; as run under f-DP on a pessimistic loss grid of step h, which never allows more
rounds than the exact): the rounds within δ′ (``geyer2017_tables.rounds_allowed``). Cached per
setting. docs/geyer2017.md §3; arXiv:1712.07557 §4, Table 1.
"""
from __future__ import annotations

import functools

import pandas as pd

from dpfl.experiments import geyer2017_tables as gt
from dpfl.explorers import Control, Explorer, Reading

__all__ = ["EXPLORER", "compute", "LIMIT", "H"]

#: the most rounds searched; the f-DP accounting's loss grid (a setting answers in about a second)
LIMIT, H = 20_000, 2e-3


@functools.lru_cache(maxsize=512)
def _allowed(name: str, K: int, m: int, sigma: float, delta_budget: float, start: int = 0) -> int:
    return gt.rounds_allowed(name, K, (m,), sigma, delta_budget, limit=LIMIT, h=H, start=start)


def compute(K: int, m: int, sigma: float, delta_budget: float) -> Reading:
    """Rounds within δ′ per accounting; CR = theirs + 1 (their code returns the first model over δ′)."""
    if m > K:
        raise ValueError(f"m must not exceed K (clients per round of K clients); got m = {m}, K = {K}")
    rows, names = [], list(gt.ACCOUNTINGS)
    for name in names:
        # the f-DP search starts at the RDP count of the same mechanism, which it usually exceeds
        start = rows[-1]["rounds within δ′"] if name == names[3] else 0
        n = _allowed(name, int(K), int(m), float(sigma), float(delta_budget), start)
        rows.append({"accounting": name, "rounds within δ′": n, "at the search's limit": n >= LIMIT})
    table = pd.DataFrame(rows)
    cr = int(table["rounds within δ′"].iloc[0]) + 1
    note = (f"Their code's CR = {cr} (it returns the first model over δ′); CC = m·CR = {m * cr}. ε = 8 throughout. "
            f"f-DP on a loss grid h = {H:g} (a lower count than exact); searched up to {LIMIT} rounds.")
    return Reading(table, {"CR": cr}, note)


def draw(reading: Reading, fig) -> None:
    ax = fig.subplots()
    t = reading.table
    ax.barh(t.accounting, t["rounds within δ′"].clip(lower=0.5), color=[f"C{i}" for i in range(len(t))])
    ax.axvline(reading.curves["CR"], color="k", ls="--", lw=1, label=f"their CR = {reading.curves['CR']}")
    ax.set(xscale="log", xlabel="rounds within δ′ (ε = 8)", title="Rounds until the budget, per accounting")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(fontsize=8)


EXPLORER = Explorer(
    "Geyer, Klein & Nabi 2017 — rounds until δ′ under their accountant and the tight ones",
    (Control("K", "clients K", (100, 1000, 10000), 1000),
     Control("m", "clients per round m", (10, 20, 50, 100, 220, 508, 1000), 220),
     Control("sigma", "noise multiplier σ", (0.8, 1.0, 1.25, 1.5, 1.75, 2.0, 2.13, 2.5, 3.0, 4.0), 2.13),
     Control("delta_budget", "δ′", (1e-3, 1e-4, 1e-5, 1e-6), 1e-5)),
    compute, draw)
