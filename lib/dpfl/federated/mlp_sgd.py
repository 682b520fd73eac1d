"""Plain SGD for a chunk of clients' fully connected ReLU networks, by hand: forward, backward and
update as batched matrix products over the client axis (``torch.baddbmm``).

The networks of Geyer et al. (784-600-100-10, no biases) and FedHDP's MNIST MLP train without
record-level noise inside client-level DP, so a step is three matrix products forward and five
backward. ``torch.func.grad`` under ``vmap`` computes the same numbers (to round-off), but on a CPU
it spends much of a step on the transform's bookkeeping and on a separate update pass; here the
weight gradient is folded into the update, W ← (1 − ηλ − ηκ)W + ηλ·anchor − η·δᵀa, one matrix
product per layer (λ: Ditto's proximal weight, κ: weight decay). Used by
:func:`dpfl.federated.local.local_train` when :func:`applies`; tested against the generic path.
"""
from __future__ import annotations

import torch

__all__ = ["applies", "sgd_steps"]


def applies(model, cfg) -> bool:
    """Whether ``model`` is a plain ReLU MLP (``model.plain_mlp``) trained by non-private SGD."""
    return getattr(model, "plain_mlp", False) and cfg.optimizer == "sgd" and not cfg.dp


def sgd_steps(model, cfg, params: dict, x, y, lr, anchor: dict) -> dict:
    """``y.shape[1]`` SGD steps of mean cross-entropy for the c clients of ``params`` (stacked,
    (c, …); a fresh copy is returned); ``x``: (c, steps, B, …), ``y``: (c, steps, B); ``lr``: (c,)."""
    layers = model.linear
    p = {k: v.clone() for k, v in params.items()}
    c, steps, batch = y.shape
    rate = float(lr[0]) if bool((lr == lr[0]).all()) else None         # one learning rate: fused updates
    per = lambda t: rate if rate is not None else lr.view(c, *[1] * (t.ndim - 1))
    shrink = cfg.prox + cfg.weight_decay
    for k in range(steps):
        acts = [x[:, k].reshape(c, batch, -1)]
        for i, name in enumerate(layers):
            z = torch.bmm(acts[-1], p[name + ".weight"].transpose(1, 2))
            if name + ".bias" in p:
                z = z + p[name + ".bias"].unsqueeze(1)
            acts.append(torch.relu(z) if i < len(layers) - 1 else z)
        delta = torch.softmax(acts.pop(), dim=-1)                         # ∂(mean NLL)/∂logits
        delta.scatter_add_(-1, y[:, k].unsqueeze(-1), torch.full_like(delta[..., :1], -1.0))
        delta /= batch
        for i in reversed(range(len(layers))):
            name, a = layers[i], acts[i]
            back = torch.bmm(delta, p[name + ".weight"]) if i else None   # through the old weights
            grads = {name + ".weight": lambda: torch.bmm(delta.transpose(1, 2), a), name + ".bias": lambda: delta.sum(1)}
            for key, grad in grads.items():
                if key not in p:
                    continue
                w, eta = p[key], per(p[key])
                if shrink:
                    w.mul_(1 - eta * shrink)
                    if cfg.prox:
                        w.add_(eta * cfg.prox * anchor[key])
                if rate is not None and key.endswith(".weight"):
                    w.baddbmm_(delta.transpose(1, 2), a, alpha=-rate)
                else:
                    w.sub_(eta * grad())
            if i:
                delta = back * (a > 0)
    return p
