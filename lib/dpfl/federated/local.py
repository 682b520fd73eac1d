"""Local training for all sampled clients at once (torch.func), with record-level DP-SGD.

Parameters and optimiser states carry a leading client axis; in one local step every client's
gradient is ``vmap``-ed over that axis (in chunks of ``chunk`` clients to bound memory), then the
noise and the optimiser step act in place on the stacked tensors, so there is no Python loop over
clients or samples in the training computation. DP-SGD follows Zheng et al.'s
Algorithm 2 (and Opacus): per-sample gradients by ``vmap(grad)``, each clipped to norm C with
factor min(1, C/(‖g‖ + 1e-6)), summed, plus N(0, (z·C)²) noise, divided by the batch size B.
Zheng's σ corresponds to z = 2σ (replace-one sensitivity 2C; docs/zheng2021.md §2).

Randomness (dropout masks, DP noise) comes from one ``torch.Generator`` per client, drawn in a
fixed order, so results do not depend on the chunk size.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from dpfl import checks
from dpfl.federated import graphs, mlp_sgd, threads
from dpfl.models import Model, Tap, im2col

__all__ = ["CONV_ROUTES", "LocalConfig", "init_state", "local_train", "updates_from", "client_generators", "step_noise",
           "take", "put"]


#: DP-SGD's routes to the convolutions' per-sample gradients (``LocalConfig.per_sample``, :func:`_clipped_sum`):
#: the same numbers up to round-off, at different speeds by device (``benchmarks/route.py`` measures them)
CONV_ROUTES = ("ghost", "unfold", "grouped", "matmul")


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
    per_sample: str = "ghost"         # how DP-SGD gets per-sample gradients: one of CONV_ROUTES or "full" (_clipped_sum);
    #                                   "matmul" computes a non-private step's convolutions as matrix products too (_gradient)
    prox: float = 0.0                 # λ of a proximal term λ/2·‖w − anchor‖² (Ditto; see dpfl.federated.personalize)

    def __post_init__(self):
        checks.one_of("optimizer", self.optimizer, ("sgd", "adam"))
        checks.positive("lr", self.lr)
        checks.nonnegative("weight_decay", self.weight_decay)
        checks.positive("clip", self.clip)
        checks.nonnegative("noise_multiplier", self.noise_multiplier)
        checks.one_of("per_sample", self.per_sample, (*CONV_ROUTES, "full"))
        checks.nonnegative("prox", self.prox)


#: Clients per call on a CPU for a plain MLP trained by SGD (``mlp_sgd``): measured best of
#: 1/5/10/16/25/50 for Geyer's MLP at 50 clients (``make bench``); other models train one at a time
CPU_MLP_CHUNK = 10


def client_generators(root_seed: int, round_: int, client_ids, device="cpu") -> list:
    """One generator per client for this round: seeded from ``numpy.random.SeedSequence(root_seed,
    spawn_key=(round, client id))``, so every (round, client) stream is independent of the others.

    On a GPU pass ``device="cuda"``: noise and masks are then drawn there (a CPU and a GPU run with
    the same seed draw different numbers; each is repeatable)."""
    gens = []
    for c in client_ids:
        seq = np.random.SeedSequence(int(root_seed), spawn_key=(int(round_), int(c)))
        gens.append(torch.Generator(device=device).manual_seed(int(seq.generate_state(1, np.uint64)[0] >> 1)))
    return gens


def step_noise(shapes: dict, generators: list) -> dict:
    """Standard normal noise for one DP-SGD step of each client: {name: (m, *shape)}.

    Client c's noise is one draw of Σ|shape| values from ``generators[c]``, split into the
    parameters in the order of ``shapes`` — one kernel launch per client and step, and each
    client's stream does not depend on which other clients share the call (chunk-independence)."""
    sizes = [math.prod(sh) for sh in shapes.values()]
    flat = torch.empty(len(generators), sum(sizes), device=generators[0].device)
    for row, g in zip(flat, generators):
        row.normal_(generator=g)
    return {n: part.reshape(len(generators), *sh) for (n, sh), part in zip(shapes.items(), flat.split(sizes, dim=1))}


def init_state(params: dict, cfg: LocalConfig) -> dict:
    """Optimiser state for stacked parameters (client axis first): Adam moments and step count."""
    if cfg.optimizer == "sgd":
        return {}
    first = next(iter(params.values()))
    return {"m": {k: torch.zeros_like(v) for k, v in params.items()},
            "v": {k: torch.zeros_like(v) for k, v in params.items()},
            "step": torch.zeros(first.shape[0], dtype=first.dtype, device=first.device)}


def _nll(model: Model, params, x, y, masks, tap=None):
    logp = model.forward(params, x, masks, tap)
    return -logp.gather(-1, y.unsqueeze(-1)).mean()


def _conv_outputs(model: Model, params, sample_shape) -> dict:
    """The output shape of each of ``model.convs`` for one sample of ``sample_shape``."""
    shapes = tuple((k, tuple(v.shape)) for k, v in params.items())
    return _conv_outputs_of(model, shapes, tuple(sample_shape))


@functools.lru_cache(maxsize=None)
def _conv_outputs_of(model: Model, shapes: tuple, sample_shape: tuple) -> dict:
    params = {k: torch.empty(shape, device="meta") for k, shape in shapes}
    tap = Tap({name: torch.zeros((), device="meta") for name in model.convs})
    model.forward(params, torch.empty(1, *sample_shape, device="meta"), None, tap)
    out = {}
    for name in model.convs:                                      # stride 1, no padding (Model.convs)
        weight, seen = params[name + ".weight"], tap.inputs[name]
        out[name] = (weight.shape[0], *(n - k + 1 for n, k in zip(seen.shape[-2:], weight.shape[-2:])))
    return out


def _conv_grads_of_columns(cols, g):
    """Per-sample weight and bias gradients of a convolution from its unfolded inputs ``cols``
    (B, in·k², L) and output gradients ``g`` (B, out, H', W'), as (B, out, in·k²) and (B, out):
    g_i · cols_iᵀ, one batched product."""
    out = g.flatten(2)                                                  # (B, out, L)
    return torch.bmm(out, cols.transpose(1, 2)), out.sum(2)


def _conv_grads_unfolded(a, g):
    """Per-sample weight and bias gradients of a stride-1 convolution without padding from its inputs
    ``a`` (B, in, H, W) and output gradients ``g`` (B, out, H', W'), as (B, out, in·k²) and (B, out):
    g_i · unfold(a_i)ᵀ."""
    kernel = tuple(n - m + 1 for n, m in zip(a.shape[2:], g.shape[2:]))
    return _conv_grads_of_columns(im2col(a, kernel), g)


def _conv_grads_grouped(a, g):
    """As :func:`_conv_grads_unfolded`, by one forward convolution with B groups: the B inputs become
    the channels of a batch of ``in`` images, each sample's output gradients the ``out`` kernels of
    its group; the result (in, B·out, k, k) is every sample's ∂ℓ_i/∂W."""
    batch, c_in = a.shape[:2]
    c_out = g.shape[1]
    grads = F.conv2d(a.transpose(0, 1), g.reshape(batch * c_out, 1, *g.shape[2:]), groups=batch)
    grads = grads.reshape(c_in, batch, c_out, -1).permute(1, 2, 0, 3)   # (B, out, in, k²)
    return grads.reshape(batch, c_out, -1), g.flatten(2).sum(2)


def _clipped_sum(model: Model, cfg: LocalConfig, params, x, y, masks):
    """Σ_i clip_C(∇ℓ_i): the sum of per-sample gradients, each scaled by min(1, C/(‖∇ℓ_i‖ + 1e-6)).

    ``per_sample="full"`` materialises every per-sample gradient (``vmap(grad)``). ``"ghost"``
    (the default) does so only for the layers that are not fully connected: for a fully connected
    layer z = W a + b, the per-sample gradient is g aᵀ with g = ∂ℓ_i/∂z, so ‖∇_W ℓ_i‖² = ‖g‖²‖a‖²
    and Σ_i c_i g_i a_iᵀ = (c·G)ᵀA — the B per-sample copies of W (MnistCNN's fc1: 1.2 M entries
    each) are never formed ("ghost clipping", Goodfellow 2015; Li et al. 2022). The probes of
    :class:`dpfl.models.Tap` give g. ``"unfold"`` and ``"grouped"`` also tap the convolutions
    (``Model.convs``): autograd then computes no weight gradient at all, and a convolution's
    per-sample weight gradients come from its input a and output gradient g in one call per layer.
    ``"unfold"``: one batched product g_i · unfold(a_i)ᵀ (as Opacus does for ``nn.Conv2d``).
    ``"grouped"``: one *forward* convolution with one group per sample, the samples' inputs as its
    batch of channels and their output gradients as its kernels (Rochette et al. 2019): for a stride-1
    convolution without padding ∂ℓ_i/∂W[o, c, u, v] = Σ_hw g_i[o, h, w]·a_i[c, h + u, w + v], a
    cross-correlation of a_i[c] with g_i[o]. Where ``vmap(grad)`` takes the same gradients as the weight
    gradient of a grouped convolution, which cuDNN's deterministic algorithms run as one small kernel per
    group (per sample: ``benchmarks/conv_grads.py``). ``"matmul"`` computes the tapped convolutions themselves as
    matrix products of their unfolded inputs (:class:`dpfl.models.Tap`), whose vmapped forward and backward
    passes are batched products over all clients and samples where cuDNN runs a convolution with one
    group per client as one kernel per client; their per-sample weight gradients are then g_i · cols_iᵀ from
    the columns the forward pass made. All agree to round-off (tested against a per-sample loop);
    the identities are derived in docs/per-sample-gradients.md §1 (ghost norms) and §2 (convolutions).
    """
    linear = model.linear if cfg.per_sample != "full" else ()
    convs = model.convs if cfg.per_sample in ("unfold", "grouped", "matmul") else ()
    tapped = {k: v for k, v in params.items() if k.split(".")[0] in (*linear, *convs)}
    rest = {k: v for k, v in params.items() if k not in tapped}
    like = dict(dtype=x.dtype, device=x.device)
    probes = {name: torch.zeros(x.shape[0], tapped[name + ".weight"].shape[0], **like) for name in linear}
    if convs:
        probes |= {name: torch.zeros(x.shape[0], *shape, **like)
                   for name, shape in _conv_outputs(model, params, x.shape[1:]).items()}

    def sample_loss(rest_, probes_, xi, yi, mi):
        tap = Tap({n: v.unsqueeze(0) for n, v in probes_.items()}, matmul=cfg.per_sample == "matmul") if probes_ else None
        mi = {k: v.unsqueeze(0) for k, v in mi.items()}
        logp = model.forward({**rest_, **tapped}, xi.unsqueeze(0), mi, tap)
        return -logp[0].gather(0, yi.unsqueeze(0)).squeeze(0), ({n: a[0] for n, a in tap.inputs.items()} if tap else {})

    (g_rest, g_out), inputs = vmap(grad(sample_loss, argnums=(0, 1), has_aux=True),
                                   in_dims=(None, 0, 0, 0, 0))(rest, probes, x, y, masks)
    sq = sum(g.flatten(1).pow(2).sum(1) for g in g_rest.values()) if g_rest else 0.0
    for name in linear:
        out_sq = g_out[name].pow(2).sum(1)
        sq = sq + out_sq * inputs[name].pow(2).sum(1)
        if name + ".bias" in tapped:
            sq = sq + out_sq
    unfolded = {}
    conv_grads = {"grouped": _conv_grads_grouped, "matmul": _conv_grads_of_columns}.get(cfg.per_sample, _conv_grads_unfolded)
    for name in convs:
        unfolded[name] = conv_grads(inputs[name], g_out[name])
        sq = sq + unfolded[name][0].pow(2).sum((1, 2)) + unfolded[name][1].pow(2).sum(1)
    factor = (cfg.clip / (torch.sqrt(sq) + 1e-6)).clamp(max=1.0)
    total = {k: torch.einsum("b,b...->...", factor, g) for k, g in g_rest.items()}
    for name in linear:
        scaled = g_out[name] * factor[:, None]
        total[name + ".weight"] = scaled.T @ inputs[name]
        if name + ".bias" in tapped:
            total[name + ".bias"] = scaled.sum(0)
    for name, (weight, bias) in unfolded.items():
        total[name + ".weight"] = torch.einsum("b,boi->oi", factor, weight).reshape(tapped[name + ".weight"].shape)
        total[name + ".bias"] = factor @ bias
    return total


def _gradient(model: Model, cfg: LocalConfig, params, x, y, masks):
    """One client's gradient on one batch: the mean gradient, or DP-SGD's Σ_i clip_C(∇ℓ_i) (its
    noise and the division by B are added in place afterwards, for all clients at once: :func:`_step`).
    ``per_sample="matmul"`` computes the mean gradient's convolutions as matrix products of unfolded
    inputs, as DP-SGD's matmul route does: under ``vmap`` over clients, batched products where cuDNN runs
    a convolution with one group per client as one kernel per client (the same numbers up to round-off)."""
    if not cfg.dp:
        matmul = cfg.per_sample == "matmul" and model.convs
        return grad(lambda p: _nll(model, p, x, y, masks, Tap({}, matmul=True) if matmul else None))(params)
    return _clipped_sum(model, cfg, params, x, y, masks)


def _per_client(values, like):
    """Per-client scalars (m,) shaped to broadcast against a stacked tensor ``like`` (m, …)."""
    return values.reshape(-1, *[1] * (like.dim() - 1))


def _noisy_mean_(cfg: LocalConfig, sums: dict, noise: dict, batch: int):
    """DP-SGD's step direction (Σ_i clip_C(∇ℓ_i) + N(0, (zC)²I)) / B (Zheng et al. Alg. 2), in place on
    ``sums``; ``noise`` is standard normal and is overwritten."""
    for k, total in sums.items():
        total.add_(noise[k].mul_(cfg.noise_multiplier * cfg.clip)).div_(batch)


def _update_(cfg: LocalConfig, params, state, grads, lr, prox, anchor, work):
    """One optimiser step of every client, in place on the stacked (m, …) parameters and optimiser
    state (``grads`` and the scratch tensors ``work``, shaped as ``params``, are overwritten): SGD, or Adam
    with per-client step counts (``lr``: (m,)); ``prox``: the per-client λ (m,) of the proximal term, or None.

    Element-wise, outside ``vmap`` and without temporaries per operation: on a CPU the Adam step of
    MnistCNN's 1.2 M-entry fc1 was a third of a client step when every operation allocated its
    result (a DP-SGD client step took 39 ms on a 2-core CPU, 31 ms since). Each value is the same IEEE
    operation, in the same order, as b₁m + (1 − b₁)g, b₂v + (1 − b₂)g², w − (lr/c₁)·m / (√(v/c₂) + ε)
    (no fused multiply-adds)."""
    step = None
    if cfg.optimizer == "adam":
        b1, b2 = cfg.betas
        step = state["step"].add_(1)
        scale, c2 = lr / (1 - b1 ** step), 1 - b2 ** step
    for k, p in params.items():
        g, w = grads[k], work[k]
        if prox is not None:
            g.add_(torch.sub(p, anchor[k], out=w).mul_(_per_client(prox, p)))
        if cfg.weight_decay:
            g.add_(torch.mul(p, cfg.weight_decay, out=w))
        if step is None:
            p.sub_(g.mul_(_per_client(lr, p)))
            continue
        m, v = state["m"][k], state["v"][k]
        m.mul_(b1).add_(torch.mul(g, 1 - b1, out=w))
        v.mul_(b2).add_(torch.mul(g, 1 - b2, out=w).mul_(g))
        denominator = torch.div(v, _per_client(c2, v), out=w).sqrt_().add_(cfg.eps)
        p.sub_(torch.mul(m, _per_client(scale, m), out=g).div_(denominator))


def _step(model, cfg):
    """One local step of a chunk of clients, in place: the per-client gradients ``vmap``-ed over the
    client axis, then the noise and the optimiser step on the stacked tensors."""
    gradients = vmap(lambda params, x, y, masks: _gradient(model, cfg, params, x, y, masks), randomness="error")

    def step_(params, state, x, y, masks, noise, lr, prox, anchor, work):
        grads = gradients(params, x, y, masks)
        if cfg.dp:
            _noisy_mean_(cfg, grads, noise, y.shape[1])
        _update_(cfg, params, state, grads, lr, prox, anchor, work)

    return step_


def take(tree, index):
    """The clients ``index`` (a slice or index tensor) of a stacked tree (params, optimiser state)."""
    if isinstance(tree, dict):
        return {k: take(v, index) for k, v in tree.items()}
    return tree[index]


def _empty_like(tree):
    if isinstance(tree, dict):
        return {k: _empty_like(v) for k, v in tree.items()}
    return torch.empty_like(tree)


def put(out, index, tree):
    """Write a stacked tree into the clients ``index`` of ``out``, in place (the inverse of :func:`take`)."""
    for k, v in tree.items():
        if isinstance(v, dict):
            put(out[k], index, v)
        else:
            out[k][index] = v


def local_train(model: Model, cfg: LocalConfig, params: dict, state: dict, x, y, generators: list,
                lr=None, *, chunk: int | None = None, anchor: dict | None = None, prox=None):
    """K local steps for m clients at once.

    ``params``/``state``: stacked over clients (m, …); ``x``: (m, K, B, C, H, W); ``y``: (m, K, B);
    ``generators``: one per client (dropout masks and DP noise are drawn from it, step by step);
    ``lr``: per-client learning rates (m,) (default ``cfg.lr``); ``chunk``: clients per vmapped
    call — default all on a GPU; on a CPU :data:`CPU_MLP_CHUNK` for a plain MLP trained by SGD
    (``mlp_sgd``) and one otherwise, where vmapping convolutions over clients measured slower than
    sequential calls (``benchmarks/RESULTS.md``); the chunk changes results only by floating-point
    round-off. On a CPU (but for ``mlp_sgd``) the chunks are spread over one thread a core, each operation
    single-threaded (``dpfl.federated.threads``): the same bits whatever the core count; ``anchor``: the point of the
    proximal term (one model, shared by all clients); ``prox``: per-client λ of that term (m,) (default
    ``cfg.prox``), so that clients with different λ — Ditto's privacy groups and its sets of λ — train in one
    call. Returns the new (params, state).
    """
    m, steps, batch = y.shape
    lams = np.full(m, cfg.prox) if prox is None else np.asarray(prox, dtype=np.float64)
    if lams.shape != (m,):
        raise ValueError(f"prox must hold one λ per client: shape {lams.shape} for {m} clients")
    checks.nonnegative("prox", float(lams.min(initial=0.0)))
    if lams.any() and anchor is None:
        raise ValueError("anchor is required when prox > 0 (the model the proximal term pulls toward)")
    if len(generators) != m:
        raise ValueError(f"need one generator per client: {len(generators)} for {m} clients")
    if tuple(x.shape[3:]) != tuple(model.input_shape):
        raise ValueError(f"inputs of shape {tuple(x.shape[3:])} do not fit {model.name}, which expects "
                         f"{tuple(model.input_shape)}")
    first = next(iter(params.values()))
    dtype, device = first.dtype, first.device
    stray = {str(g.device) for g in generators if g.device.type != device.type}
    if stray:
        raise ValueError(f"generators on {sorted(stray)} for parameters on {device}: pass "
                         f"client_generators(..., device={str(device)!r}) (noise would be drawn on one device "
                         "and copied to the other every step)")
    lr = (torch.full((m,), cfg.lr, dtype=dtype, device=device) if lr is None
          else torch.as_tensor(lr, dtype=dtype, device=device))
    prox_t = torch.as_tensor(lams, device=device) if lams.any() else None     # float64: mlp_sgd's coefficients
    by_hand = mlp_sgd.applies(model, cfg)           # no masks, no noise: the same numbers by hand, faster
    graph = graphs.enabled(device) and not by_hand  # replay each chunk's steps as a CUDA graph (DPFL_CUDA_GRAPHS)
    if chunk is None:
        chunk = m if first.is_cuda else (min(m, CPU_MLP_CHUNK) if by_hand else 1)
    chunk = checks.positive_int("chunk", chunk)
    step_fn = _step(model, cfg)
    shapes = {k: v.shape[1:] for k, v in params.items()}
    new_params = {k: torch.empty_like(v) for k, v in params.items()}
    new_state = _empty_like(state)

    # Chunks outside, steps inside: a chunk's parameters and optimiser state stay hot in cache for
    # all K steps, and each chunk's result is written straight into the output stack (no list of
    # chunk results to concatenate: peak memory stays ≈ 2 copies of the clients' state, plus one
    # chunk's parameters as scratch per thread). Each client draws from its own generator in the same
    # order (masks, then noise, step by step), so chunking never matters.
    def train(slices):                                 # one thread's run of chunks
        scratch = None if by_hand else _empty_like(take(params, slice(0, chunk)))   # the optimiser step's temporaries
        for sl in slices:
            gens = generators[sl]
            if by_hand:
                put(new_params, sl, mlp_sgd.sgd_steps(model, cfg, take(params, sl), x[sl], y[sl], lr[sl],
                                                      None if prox_t is None else prox_t[sl], anchor))
                continue
            put(new_params, sl, take(params, sl))
            put(new_state, sl, take(state, sl))
            p, st = take(new_params, sl), take(new_state, sl)      # views of the output: trained in place
            lr_, lam = lr[sl], None if prox_t is None else prox_t[sl].to(dtype)
            work = take(scratch, slice(0, len(gens)))

            def one_step(b):                           # run at once (graphs.run_steps): the loop's names are current
                masks = model.masks(batch, gens) or {}
                step_fn(p, st, b["x"], b["y"], masks, step_noise(shapes, gens) if cfg.dp else None, lr_, lam, anchor,
                        work)

            graphs.run_steps(one_step, lambda k: {"x": x[sl, k], "y": y[sl, k]}, steps, gens, graph)

    threads.by_chunks(train, m, chunk, side_by_side=not (first.is_cuda or by_hand))
    return new_params, new_state


def updates_from(model: Model, cfg: LocalConfig, global_: dict, x, y, generators: list, lr: float, *,
                 chunk: int | None = None) -> dict:
    """FedAvg's local step: every client starts from the one model ``global_`` with a fresh optimiser,
    trains on its batches (as :func:`local_train`) and returns its update Δ_k = w_k − w, stacked (m, …).
    The m starting points are views of ``global_`` (no copies): a chunk's copy is made as it trains."""
    m = y.shape[0]
    start = {k: v.unsqueeze(0).expand(m, *v.shape) for k, v in global_.items()}
    local, _ = local_train(model, cfg, start, init_state(start, cfg), x, y, generators, [lr] * m, chunk=chunk)
    return {k: local[k].sub_(global_[k]) for k in global_}
