"""Server aggregation of stacked client models."""
from __future__ import annotations

import torch

from dpfl import checks

__all__ = ["fedavg", "elastic"]


def fedavg(local: dict, weights=None) -> dict:
    """Mean of the client models (weighted by ``weights`` when given): McMahan et al.'s FedAvg."""
    if weights is None:
        return {k: v.mean(dim=0) for k, v in local.items()}
    w = torch.as_tensor(weights, dtype=next(iter(local.values())).dtype)
    w = w / w.sum()
    return {k: torch.einsum("m,m...->...", w, v) for k, v in local.items()}


def elastic(global_: dict, local: dict, selected, alpha: float, eta: float = 1.0):
    """Zheng et al.'s elastic averaging (Alg. 1, eq. 2.1; their ``run_ma``).

    ``global ← (1 − η)·global + η·mean(selected locals)``; each *selected* client moves toward it,
    ``local ← (1 − α)·local + α·global``; unselected clients are untouched. Returns
    (new global, new locals) for the full client stack.
    """
    checks.in_range("alpha", alpha, 0, 1)
    checks.in_range("eta", eta, 0, 1)
    idx = torch.as_tensor(selected, dtype=torch.long)
    mean = fedavg({k: v[idx] for k, v in local.items()})
    new_global = {k: (1 - eta) * global_[k] + eta * mean[k] for k in global_}
    new_local = {}
    for k, v in local.items():
        moved = v.clone()
        moved[idx] = (1 - alpha) * v[idx] + alpha * new_global[k]
        new_local[k] = moved
    return new_global, new_local
