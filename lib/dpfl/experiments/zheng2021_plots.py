"""Figures of Zheng et al. (2021)'s cells computed at the paper's setting (``notebooks/zheng2021_federated_fdp.ipynb``)."""
from __future__ import annotations

import pandas as pd

__all__ = ["SIGMA_COLORS", "plot_paper_cells"]

#: one colour per noise multiplier σ (Okabe–Ito, readable in colour-blind vision), the same in every panel
SIGMA_COLORS = {1.0: "#0072B2", 0.9: "#E69F00", 0.75: "#009E73", 0.5: "#CC79A7"}


def plot_paper_cells(done: dict, published: pd.DataFrame, table: str = "1", target: float = 0.9):
    """Table ``table``'s cells computed at the paper's setting, round by round: one panel per client
    sampling rate p, one colour per σ (:data:`SIGMA_COLORS`); in each, the paper's metric (every client's
    stored local accuracy: solid), the global model (dotted), the paper's R (a vertical line in the σ's
    colour), the target (grey) and the p's non-private twin (black, dashed) to the last round of its cells.

    ``done``: {(p, σ): (config, metrics, twin's metrics or None)} as :func:`dpfl.experiments.zheng2021.cached_cells`
    returns it; ``published``: :func:`dpfl.experiments.zheng2021.published`. Returns the figure."""
    import matplotlib.pyplot as plt

    if not done:
        raise ValueError("done is empty: no cell computed at the paper's setting to plot")
    unknown = sorted({s for _, s in done} - set(SIGMA_COLORS))
    if unknown:
        raise ValueError(f"σ = {unknown} has no colour: SIGMA_COLORS covers σ in {sorted(SIGMA_COLORS)}")
    ps = sorted({p for p, _ in done}, reverse=True)
    fig, axes = plt.subplots(1, len(ps), figsize=(3.3 * len(ps) + 1.2, 3.4), sharey=True, squeeze=False)
    for ax, p in zip(axes[0], ps):
        cells = sorted(((s, v) for (q, s), v in done.items() if q == p), reverse=True)
        for s, (_, metrics, _) in cells:
            color = SIGMA_COLORS[s]
            ax.plot(metrics["round"], 100 * metrics.acc_stored_local, color=color, lw=1.4, label=f"σ = {s:g}: stored local")
            ax.plot(metrics["round"], 100 * metrics.acc_global, color=color, ls=":", lw=0.8, alpha=0.8,
                    label=f"σ = {s:g}: global model")
            paper_R = published.query("table == @table and p == @p and sigma == @s").R.iloc[0]
            ax.axvline(paper_R, color=color, lw=0.9, ls="--", alpha=0.8, label=f"σ = {s:g}: paper's R = {paper_R}")
        twins = [t for _, (_, _, t) in cells if t is not None]       # a shorter twin is a longer one's prefix
        if twins:
            last = max(metrics["round"].max() for _, (_, metrics, _) in cells)
            twin = max(twins, key=len).query("round <= @last")
            ax.plot(twin["round"], 100 * twin.acc_stored_local, color="k", ls="--", lw=1, label="non-private twin")
        ax.axhline(100 * target, color="grey", lw=0.8, ls=":")
        ax.set(title=f"p = {p:g}", xlabel="round", ylim=(0, 100))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="lower right")
    axes[0][0].set_ylabel("average test accuracy %")
    fig.suptitle(f"Table {table} at the paper's setting (100 clients), the cells computed so far: solid, the paper's "
                 f"metric (stored local accuracy); dotted, the global model; dashed, the paper's R", fontsize=8.5)
    fig.tight_layout()
    return fig
