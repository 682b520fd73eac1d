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


def sgd_steps(model, cfg, params: dict, x, y, lr, prox, anchor: dict) -> dict:
    """``y.shape[1]`` SGD steps of mean cross-entropy for the c clients of ``params`` (stacked,
    (c, …); a fresh copy is returned); ``x``: (c, steps, B, …), ``y``: (c, steps, B); ``lr``: (c,);
    ``prox``: the clients' λ (c,), float64, or None."""
    layers = model.linear
    p = {k: v.clone() for k, v in params.items()}
    c, steps, batch = y.shape
    rate = float(lr[0]) if bool((lr == lr[0]).all()) else None         # one learning rate: fused updates
    shrink, pull = _decay(cfg, prox, rate, lr)
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
            _descend(p, name + ".weight", shrink, pull, anchor, rate, lr, product=(delta.transpose(1, 2), a))
            if name + ".bias" in p:
                _descend(p, name + ".bias", shrink, pull, anchor, rate, lr, grad=delta.sum(1))
            if i:
                delta = back * (a > 0)
    return p


def _decay(cfg, prox, rate, lr):
    """The per-step coefficients of w ← shrink·w + pull·anchor − η·g: shrink = 1 − η(λ + κ), pull = ηλ —
    per client (c,) when λ is (rounded once from float64, as a Python scalar would be), else scalars or
    None (nothing to do)."""
    if prox is not None:
        eta = rate if rate is not None else lr.double()
        return (1 - eta * (prox + cfg.weight_decay)).to(lr.dtype), (eta * prox).to(lr.dtype)
    if cfg.weight_decay:
        return 1 - (rate if rate is not None else lr) * cfg.weight_decay, None
    return None, None


def _descend(p: dict, key: str, shrink, pull, anchor: dict, rate, lr, *, product=None, grad=None) -> None:
    """One SGD step of parameter ``key``, in place: w ← shrink·w + pull·anchor − η·g (:func:`_decay`), where
    g is ``grad`` or the batched product of the pair ``product`` — added by ``baddbmm_`` without forming g
    when every client has the same learning rate ``rate``."""
    w = p[key]
    per_client = lambda v: v.view(-1, *[1] * (w.ndim - 1)) if torch.is_tensor(v) else v
    if shrink is not None:
        w.mul_(per_client(shrink))
    if pull is not None:
        w.add_(per_client(pull) * anchor[key])
    if product is not None and rate is not None:
        w.baddbmm_(*product, alpha=-rate)
    else:
        eta = rate if rate is not None else per_client(lr)
        w.sub_(eta * (torch.bmm(*product) if product is not None else grad))
