"""Local training for all sampled clients at once (torch.func), with record-level DP-SGD.

Parameters and optimiser states carry a leading client axis; one local step of every client is
``vmap``-ed over that axis (in chunks of ``chunk`` clients to bound memory), so there is no Python
loop over clients or samples in the training computation. DP-SGD follows Zheng et al.'s
Algorithm 2 (and Opacus): per-sample gradients by ``vmap(grad)``, each clipped to norm C with
factor min(1, C/(‖g‖ + 1e-6)), summed, plus N(0, (z·C)²) noise, divided by the batch size B.
Zheng's σ corresponds to z = 2σ (replace-one sensitivity 2C; details.md §1.4).

Randomness (dropout masks, DP noise) comes from one ``torch.Generator`` per client, drawn in a
fixed order, so results do not depend on the chunk size.
"""
from __future__ import annotations

import dataclasses

import torch
from torch.func import grad, vmap

from dpfl import checks
from dpfl.models import Model

__all__ = ["LocalConfig", "init_state", "local_train", "client_generators"]


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """How each client trains: optimiser, learning rate, and record-level DP-SGD (optional)."""

    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    dp: bool = False
    clip: float = 1.0
    noise_multiplier: float = 0.0     # z: noise std z·C on the sum of clipped gradients

    def __post_init__(self):
        checks.one_of("optimizer", self.optimizer, ("sgd", "adam"))
        checks.positive("lr", self.lr)
        checks.nonnegative("weight_decay", self.weight_decay)
        checks.positive("clip", self.clip)
        checks.nonnegative("noise_multiplier", self.noise_multiplier)


def client_generators(root_seed: int, round_: int, client_ids) -> list:
    """One generator per client for this round, derived from (root seed, round, client id)."""
    gens = []
    for c in client_ids:
        g = torch.Generator()
        g.manual_seed(hash((int(root_seed), int(round_), int(c))) & 0x7FFF_FFFF_FFFF_FFFF)
        gens.append(g)
    return gens


def init_state(params: dict, cfg: LocalConfig) -> dict:
    """Optimiser state for stacked parameters (client axis first): Adam moments and step count."""
    if cfg.optimizer == "sgd":
        return {}
    first = next(iter(params.values()))
    return {"m": {k: torch.zeros_like(v) for k, v in params.items()},
            "v": {k: torch.zeros_like(v) for k, v in params.items()},
            "step": torch.zeros(first.shape[0], dtype=first.dtype)}


def _nll(model: Model, params, x, y, masks):
    logp = model.forward(params, x, masks)
    return -logp.gather(-1, y.unsqueeze(-1)).mean()


def _gradient(model: Model, cfg: LocalConfig, params, x, y, masks, noise):
    """The client's update direction for one batch: mean gradient, or DP-SGD's noisy clipped mean."""
    if not cfg.dp:
        return grad(lambda p: _nll(model, p, x, y, masks))(params)

    def sample_loss(p, xi, yi, mi):
        return _nll(model, p, xi.unsqueeze(0), yi.unsqueeze(0), {k: v.unsqueeze(0) for k, v in mi.items()})

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0, 0))(params, x, y, masks)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample.values()))
    factor = (cfg.clip / (norms + 1e-6)).clamp(max=1.0)
    batch = x.shape[0]
    return {k: (torch.einsum("b,b...->...", factor, g) + cfg.noise_multiplier * cfg.clip * noise[k]) / batch
            for k, g in per_sample.items()}


def _update(cfg: LocalConfig, params, state, grads, lr):
    if cfg.weight_decay:
        grads = {k: g + cfg.weight_decay * params[k] for k, g in grads.items()}
    if cfg.optimizer == "sgd":
        return {k: p - lr * grads[k] for k, p in params.items()}, state
    b1, b2 = cfg.betas
    step = state["step"] + 1
    m = {k: b1 * state["m"][k] + (1 - b1) * g for k, g in grads.items()}
    v = {k: b2 * state["v"][k] + (1 - b2) * g * g for k, g in grads.items()}
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step
    new = {k: p - lr / c1 * m[k] / (torch.sqrt(v[k] / c2) + cfg.eps) for k, p in params.items()}
    return new, {"m": m, "v": v, "step": step}


def _step(model, cfg):
    def one_client(params, state, x, y, masks, noise, lr):
        grads = _gradient(model, cfg, params, x, y, masks, noise)
        return _update(cfg, params, state, grads, lr)

    return vmap(one_client, in_dims=(0, 0, 0, 0, 0, 0, 0), randomness="error")


def _slice(tree, sl):
    if isinstance(tree, dict):
        return {k: _slice(v, sl) for k, v in tree.items()}
    return tree[sl]


def _cat(trees):
    if isinstance(trees[0], dict):
        return {k: _cat([t[k] for t in trees]) for k in trees[0]}
    return torch.cat(trees)


def local_train(model: Model, cfg: LocalConfig, params: dict, state: dict, x, y, generators: list,
                lr=None, *, chunk: int | None = None):
    """K local steps for m clients at once.

    ``params``/``state``: stacked over clients (m, …); ``x``: (m, K, B, C, H, W); ``y``: (m, K, B);
    ``generators``: one per client (dropout masks and DP noise are drawn from it, step by step);
    ``lr``: per-client learning rates (m,) (default ``cfg.lr``); ``chunk``: clients per vmapped
    call — default all on a GPU, one on a CPU, where vmapping convolutions over clients measured
    slower than sequential calls (``benchmarks/RESULTS.md``). Returns the new (params, state).
    """
    m, steps, batch = y.shape
    if len(generators) != m:
        raise ValueError(f"need one generator per client: {len(generators)} for {m} clients")
    if tuple(x.shape[3:]) != tuple(model.input_shape):
        raise ValueError(f"inputs of shape {tuple(x.shape[3:])} do not fit {model.name}, which expects "
                         f"{tuple(model.input_shape)}")
    dtype = next(iter(params.values())).dtype
    lr = torch.full((m,), cfg.lr, dtype=dtype) if lr is None else torch.as_tensor(lr, dtype=dtype)
    if chunk is None:
        chunk = m if next(iter(params.values())).is_cuda else 1
    chunk = checks.positive_int("chunk", chunk)
    step_fn = _step(model, cfg)
    shapes = {k: v.shape[1:] for k, v in params.items()}
    outs = []
    # Chunks outside, steps inside: a chunk's parameters and optimiser state stay hot in cache for
    # all K steps, and the client stacks are concatenated once. Each client draws from its own
    # generator in the same order (masks, then noise, step by step), so chunking never matters.
    for start in range(0, m, chunk):
        sl = slice(start, start + chunk)
        gens = generators[sl]
        p, st = _slice(params, sl), _slice(state, sl)
        for k in range(steps):
            masks = [model.masks(batch, g) for g in gens]
            masks = {} if masks[0] is None else {n: torch.stack([mk[n] for mk in masks]) for n in masks[0]}
            noise = ({n: torch.stack([torch.randn(sh, generator=g) for g in gens]) for n, sh in shapes.items()}
                     if cfg.dp else {n: torch.zeros(len(gens)) for n in shapes})
            p, st = step_fn(p, st, x[sl, k], y[sl, k], masks, noise, lr[sl])
        outs.append((p, st))
    params, state = _cat([o[0] for o in outs]), _cat([o[1] for o in outs])
    return params, state
