"""Vectorised evaluation: many models on many clients' test sets at once."""
from __future__ import annotations

import torch
from torch.func import vmap

from dpfl.models import Model

__all__ = ["accuracy"]


def accuracy(model: Model, params: dict, x, y, mask, *, stacked: bool, chunk: int = 25) -> torch.Tensor:
    """Accuracy of each client's test set (x: (m, n, …), y/mask: (m, n)).

    ``stacked=True``: ``params`` carry a client axis (each client's own model); otherwise one model
    (e.g. the global one) is evaluated on every client. Returns (m,) accuracies.
    """
    def one(p, xc, yc, mc):
        pred = model.forward(p, xc, None).argmax(-1)
        return ((pred == yc) & mc).sum() / mc.sum().clamp(min=1)

    fn = vmap(one, in_dims=(0 if stacked else None, 0, 0, 0))
    out = []
    with torch.no_grad():
        for start in range(0, y.shape[0], chunk):
            sl = slice(start, start + chunk)
            p = {k: v[sl] for k, v in params.items()} if stacked else params
            out.append(fn(p, x[sl], y[sl], mask[sl]))
    return torch.cat(out)
