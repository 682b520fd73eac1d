"""Figures of Zheng et al. (2021) drawn from runs' metrics (``notebooks/zheng2021_federated_fdp.ipynb``)."""
from __future__ import annotations

import textwrap

import pandas as pd

__all__ = ["SIGMA_COLORS", "plot_batch_sizes", "plot_paper_cells", "plot_personalized_vs_global", "plot_rounds_offset"]

#: one colour per noise multiplier σ (Okabe–Ito, readable in colour-blind vision), the same in every panel
SIGMA_COLORS = {1.0: "#0072B2", 0.9: "#E69F00", 0.75: "#009E73", 0.5: "#CC79A7"}


def _check_colours(sigmas) -> None:
    """Raise before drawing when a σ has no colour in :data:`SIGMA_COLORS`."""
    unknown = sorted(set(sigmas) - set(SIGMA_COLORS))
    if unknown:
        raise ValueError(f"σ = {unknown} has no colour: SIGMA_COLORS covers σ in {sorted(SIGMA_COLORS)}")


def plot_paper_cells(done: dict, published: pd.DataFrame, table: str = "1", target: float = 0.9):
    """Table ``table``'s cells computed at the paper's setting, round by round: one panel per client
    sampling rate p, one colour per σ (:data:`SIGMA_COLORS`); in each, the paper's metric (every client's
    stored local accuracy: solid), the global model (dotted), the paper's R (a vertical line in the σ's
    colour), the target (grey) and the p's non-private twin (black, dashed) to the last round of its cells.
    The legend names each σ's colour with the paper's R, and the twin; the title says which line style is which.

    ``done``: {(p, σ): (config, metrics, twin's metrics or None)} as :func:`dpfl.experiments.zheng2021.cached_cells`
    returns it; ``published``: :func:`dpfl.experiments.zheng2021.published`. Returns the figure."""
    import matplotlib.pyplot as plt

    if not done:
        raise ValueError("done is empty: no cell computed at the paper's setting to plot")
    _check_colours(s for _, s in done)
    ps = sorted({p for p, _ in done}, reverse=True)
    fig, axes = plt.subplots(1, len(ps), figsize=(3.3 * len(ps) + 1.2, 3.4), sharey=True, squeeze=False)
    for ax, p in zip(axes[0], ps):
        cells = sorted(((s, v) for (q, s), v in done.items() if q == p), reverse=True)
        legend = []                          # one entry per σ and the twin: the title says what each style is
        for s, (_, metrics, _) in cells:
            color = SIGMA_COLORS[s]
            solid, = ax.plot(metrics["round"], 100 * metrics.acc_stored_local, color=color, lw=1.4,
                             label=f"σ = {s:g}: stored local")
            ax.plot(metrics["round"], 100 * metrics.acc_global, color=color, ls=":", lw=0.8, alpha=0.8,
                    label=f"σ = {s:g}: global model")
            paper_R = published.query("table == @table and p == @p and sigma == @s").R.iloc[0]
            ax.axvline(paper_R, color=color, lw=0.9, ls="--", alpha=0.8, label=f"σ = {s:g}: paper's R = {paper_R}")
            legend.append((solid, f"σ = {s:g} (paper's R = {paper_R})"))
        twins = [t for _, (_, _, t) in cells if t is not None]       # a shorter twin is a longer one's prefix
        if twins:
            last = max(metrics["round"].max() for _, (_, metrics, _) in cells)
            twin = max(twins, key=len).query("round <= @last")
            dashed, = ax.plot(twin["round"], 100 * twin.acc_stored_local, color="k", ls="--", lw=1,
                              label="non-private twin")
            legend.append((dashed, "non-private twin"))
        ax.axhline(100 * target, color="grey", lw=0.8, ls=":")
        ax.set(title=f"p = {p:g}", xlabel="round", ylim=(0, 100))
        ax.grid(alpha=0.3)
        ax.legend(*zip(*legend), fontsize=6.5, loc="lower right")
    axes[0][0].set_ylabel("average test accuracy %")
    title = (f"Table {table} at the paper's setting (100 clients), the cells computed so far: solid, the paper's "
             f"metric (stored local accuracy); dotted, the global model; dashed, the paper's R; grey, the target")
    fig.suptitle(textwrap.fill(title, width=int(16 * fig.get_figwidth())), fontsize=8.5)   # one panel: wrap, not widen
    fig.tight_layout()
    return fig


def plot_personalized_vs_global(curves: dict, title: str, setting: str = "", ylabel: str = "average test accuracy %"):
    """Fig. 4.1 (MNIST) and Fig. 4.3 (CIFAR-10) of Zheng et al. (2021): per σ, the personalized accuracy (every
    client's own model on its own test set, ``acc_local_all``: solid, at the rounds it was evaluated) and the
    global model's on the same test sets (``acc_global``: dashed), in the σ's colour (:data:`SIGMA_COLORS`; black
    for the non-private run), the legend beside the axes. The paper draws the personalized curves above the global ones.

    ``curves``: {σ, or None for the non-private run: a run's metrics}; ``setting``: a line under the axes
    (the profile, the clients, the device). Returns the figure."""
    import matplotlib.pyplot as plt

    if not curves:
        raise ValueError("curves is empty: no run to plot")
    _check_colours(s for s in curves if s is not None)
    fig, ax = plt.subplots(figsize=(6.6, 3.4))
    for s, metrics in curves.items():
        m = metrics.dropna(subset=["acc_local_all"])
        color, name = ("k", "non-private") if s is None else (SIGMA_COLORS[s], f"σ = {s:g}")
        ax.plot(m["round"], 100 * m["acc_local_all"], color=color, marker=".", label=f"{name}, personalized")
        ax.plot(m["round"], 100 * m["acc_global"], color=color, ls="--", lw=1, label=f"{name}, global")
    ax.set(xlabel="round", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)   # beside the curves, not on them
    if setting:
        ax.text(0.01, -0.25, setting, transform=ax.transAxes, fontsize=7)
    fig.tight_layout()
    return fig


def plot_batch_sizes(pairs: dict, title: str, setting: str = ""):
    """Fig. 4.2 of Zheng et al. (2021): B = 8 (dashed) against B = 16 (solid) at one p, one colour per σ
    (:data:`SIGMA_COLORS`). Left, the paper's metric (every client's stored local accuracy); right, the
    global model's test loss at the rounds it was evaluated (the gauge that does not depend on which clients a
    round sampled). ``pairs``: {(σ, B): (config, metrics)} (``zheng2021_tables.batch_size_pairs``, or the
    profile's own runs); ``setting``: a line under the axes. Returns the figure."""
    import matplotlib.pyplot as plt

    if not pairs:
        raise ValueError("pairs is empty: no run to plot")
    _check_colours(s for s, _ in pairs)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for (s, B), (_, metrics) in sorted(pairs.items(), reverse=True):
        style = dict(color=SIGMA_COLORS[s], ls="--" if B == 8 else "-", label=f"σ = {s:g}, B = {B}")
        ax.plot(metrics["round"], 100 * metrics.acc_stored_local, **style)
        m = metrics.dropna(subset=["loss_global"])
        ax2.plot(m["round"], m.loss_global, **style)
    ax.set(xlabel="round", ylabel="average test accuracy % (stored, paper's)", title=title)
    ax2.set(xlabel="round", ylabel="global model's test loss (nats)", title="the same runs: global test loss")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if setting:
        ax.text(0.01, -0.25, setting, transform=ax.transAxes, fontsize=7)
    return fig


def plot_rounds_offset(offset: pd.DataFrame):
    """Our R over the paper's, one point per cell computed at the paper's setting (rows of
    :func:`dpfl.experiments.zheng2021_tables.rounds_offset`), coloured by σ, with the ±20 % a match allows and
    the geometric mean of the ratios. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    if not len(offset):
        raise ValueError("offset is empty: no cell computed at the paper's setting to plot")
    labels = [f"T{r.table} p={r.p:g} σ={r['σ']:g}" + (f" B={r.B}" if r.B != 16 else "") for _, r in offset.iterrows()]
    ratio = offset["R ours / paper"].to_numpy()
    mean = float(np.exp(np.log(ratio).mean()))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(offset) + 1.5), 3.4))
    ax.axhspan(0.8, 1.2, color="grey", alpha=0.12, label="a match: within ±20 %")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(mean, color="#D55E00", lw=1, ls="--", label=f"geometric mean {mean:.2f}")
    ax.scatter(range(len(offset)), ratio, c=[SIGMA_COLORS.get(s, "k") for s in offset["σ"]], zorder=3)
    ax.set_xticks(range(len(offset)), labels, rotation=45, ha="right", fontsize=7)
    ax.set(ylabel="R ours / R paper", ylim=(min(0.75, ratio.min() - 0.05), max(1.25, ratio.max() + 0.05)))
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Rounds to the target: ours over the paper's, per cell at the paper's setting", fontsize=8.5)
    fig.tight_layout()
    return fig
