"""Figure helpers for federated data."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_label_proportions"]


def plot_label_proportions(ax, proportions, class_names=None, *, title=None):
    """Stacked bars of each client's label proportions (clients × classes), as Zheng et al.'s
    Figure E.3a draws the Dirichlet split of CIFAR-10."""
    proportions = np.asarray(proportions, dtype=float)
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10" if proportions.shape[1] <= 10 else "tab20")(np.arange(proportions.shape[1]))
    bottom = np.zeros(proportions.shape[0])
    clients = np.arange(proportions.shape[0])
    for k in range(proportions.shape[1]):
        label = class_names[k] if class_names is not None else str(k)
        ax.bar(clients, proportions[:, k], bottom=bottom, width=1.0, color=colours[k], label=label, linewidth=0)
        bottom += proportions[:, k]
    ax.set(xlim=(-0.5, proportions.shape[0] - 0.5), ylim=(0, 1), xlabel="client", ylabel="label proportion")
    if title:
        ax.set_title(title)
    ax.legend(ncol=min(proportions.shape[1], 10), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    return ax
