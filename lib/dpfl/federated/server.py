"""Server aggregation of stacked client models: FedAvg, Zheng et al.'s elastic averaging, and the
client-level Gaussian mechanism (clip each client's update, average, add noise) with a fixed bound
or Geyer et al.'s per-layer median bound."""
from __future__ import annotations

import torch

from dpfl import checks
from dpfl.federated.personalize import interpolate

__all__ = ["fedavg", "elastic", "clip_updates", "median_bounds", "gaussian_mean", "two_step",
           "adaptive_clip", "effective_noise_multiplier"]


def fedavg(local: dict) -> dict:
    """Mean of the client models: McMahan et al.'s FedAvg."""
    return {k: v.mean(dim=0) for k, v in local.items()}


def elastic(global_: dict, local: dict, selected, alpha: float, eta: float = 1.0):
    """Zheng et al.'s elastic averaging (Alg. 1, eq. 2.1; their ``run_ma``).

    ``global ← (1 − η)·global + η·mean(selected locals)``; each *selected* client moves toward it,
    ``local ← (1 − α)·local + α·global``; unselected clients are untouched. Returns
    (new global, new locals) for the full client stack.
    """
    checks.in_range("alpha", alpha, 0, 1)
    checks.in_range("eta", eta, 0, 1)
    idx = torch.as_tensor(selected, dtype=torch.long, device=next(iter(local.values())).device)
    chosen = {k: v[idx] for k, v in local.items()}
    mean = fedavg(chosen)
    new_global = {k: (1 - eta) * global_[k] + eta * mean[k] for k in global_}
    helpers = interpolate(chosen, new_global, alpha)
    return new_global, {k: v.index_copy(0, idx, helpers[k]) for k, v in local.items()}


def clip_updates(updates: dict, bound, *, per_layer: bool = False, inplace: bool = False):
    """Scale each client's update Δ to norm ≤ bound: Δ / max(1, ‖Δ‖/S).

    ``per_layer=False``: one norm over the whole model, ``bound`` a scalar. ``per_layer=True``:
    each parameter tensor separately, ``bound`` a scalar or a dict of per-layer bounds (Geyer).
    ``bound = math.inf`` clips nothing (and still returns the norms). ``inplace``: scale ``updates``
    themselves (same numbers; no second copy of m updates).
    Returns (clipped updates, norms before clipping: (m,) or {layer: (m,)}).
    """
    if per_layer:
        bounds = bound if isinstance(bound, dict) else {k: bound for k in updates}
        norms = {k: v.flatten(1).norm(dim=1) for k, v in updates.items()}
        factors = {k: torch.clamp(norms[k] / bounds[k], min=1.0) for k in updates}
    else:
        checks.positive("bound", bound, finite=False)
        norms = torch.sqrt(sum(_squared_norms(v) for v in updates.values()))
        factors = dict.fromkeys(updates, torch.clamp(norms / bound, min=1.0))
    shaped = {k: factors[k].view(-1, *[1] * (v.ndim - 1)) for k, v in updates.items()}
    clipped = ({k: v.div_(shaped[k]) for k, v in updates.items()} if inplace
               else {k: v / shaped[k] for k, v in updates.items()})
    return clipped, norms


def _squared_norms(v: torch.Tensor, chunk: int = 8) -> torch.Tensor:
    """‖v_k‖² of each client's slice, ``chunk`` clients at a time: the squares of all m updates are
    never held at once (each row's sum is the same as in one call)."""
    return torch.cat([part.pow(2).sum(1) for part in v.flatten(1).split(chunk)])


def median_bounds(updates: dict) -> dict:
    """Geyer et al.'s per-layer clip bound: the median over clients of ‖Δ_layer‖ (their code's
    ``WeightsAccountant``). Computed from the clients' updates and *not* privatised — the paper's
    accounting ignores this data-dependent choice; we say so wherever it is used."""
    return {k: float(v.flatten(1).norm(dim=1).median()) for k, v in updates.items()}


def gaussian_mean(clipped: dict, bound, noise_multiplier: float, generator: torch.Generator,
                  denominator: float | None = None):
    """(Σ_k clipped Δ_k + N(0, (z·S)²))/m — the client-level Gaussian mechanism of Geyer et al. (and
    of DP-FedAvg, McMahan et al. 2018, with sensitivity S/m of the mean). ``bound``: S, or a dict of
    per-layer bounds (each layer gets noise with its own). ``denominator``: m, a public number (the
    sampler's ``denominator``: the expected count under Poisson sampling); None: the realised count,
    computed as the mean plus noise/m (public only where the sampling fixes it). With z = 0 the plain
    quotient (for any S, infinite included); the noise is drawn all the same, so the generator moves
    as with z > 0. With a ``denominator`` the stack may be empty (no client: noise alone)."""
    checks.nonnegative("noise_multiplier", noise_multiplier)
    if denominator is not None:
        checks.positive("denominator", denominator)
    m = next(iter(clipped.values())).shape[0]
    out = {}
    for k, v in clipped.items():
        s = bound[k] if isinstance(bound, dict) else bound
        noise = torch.randn(v.shape[1:], generator=generator, dtype=v.dtype, device=v.device)
        scaled = noise_multiplier * s * noise if noise_multiplier else 0.0       # z = 0: no 0·∞ when S = ∞
        out[k] = v.mean(dim=0) + scaled / m if denominator is None else (v.sum(dim=0) + scaled) / denominator
    return out


def two_step(group_means: list, counts, ratios) -> dict:
    """FedHDP's aggregation (Aldaghri et al., Alg. 2): first a (DP) average Δ̄_l within each
    privacy group, then Δ = Σ_l r_l N_l Δ̄_l / Σ_l r_l N_l, i.e. per-client weights r_l / Σ_j N_j r_j.
    For (non-private, private) with ratios (1, r): (N_np Δ̄_np + r N_p Δ̄_p)/(N_np + r N_p);
    r = 1 is HDP-FedAvg, r = 0 ignores the private clients. Groups with no client this round drop out.
    ``counts``: the realised N_l, or for a private group under Poisson sampling the public number its
    noised sum was divided by (``FedHDP``), so that N_l Δ̄_l is that noised sum and nothing else."""
    counts = [float(checks.nonnegative("counts", c)) for c in counts]
    ratios = [float(r) for r in ratios]
    if not (len(group_means) == len(counts) == len(ratios)):
        raise ValueError("group_means, counts and ratios must have one entry per group")
    for r in ratios:
        checks.in_range("ratios", r, 0, 1)
    weights = [r * c for r, c in zip(ratios, counts)]
    total = sum(weights)
    if total <= 0:
        raise ValueError("counts and ratios leave no weight on any group this round")
    keys = next(g for g, w in zip(group_means, weights) if w > 0).keys()
    return {k: sum(w * g[k] for g, w in zip(group_means, weights) if w > 0) / total for k in keys}


def adaptive_clip(norms, clip: float, *, target_quantile: float = 0.5, lr: float = 0.2,
                  count_noise_std: float, generator: torch.Generator, denominator: float | None = None):
    """One step of adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy 2021; the DP-FedAvg
    baseline of FedHDP, docs/aldaghri_fedhdp.md §2): the noised fraction b̃ of updates with norm ≤ C,
    then C ← C·exp(−η_C (b̃ − γ)). Returns (new clip, b̃).

    ``denominator`` m (public: the expected count under Poisson sampling) gives TF-Privacy's
    ``QuantileEstimatorQuery``: b̃ = clamp(1/2 + (Σ_k (1{‖Δ_k‖ ≤ C} − 1/2) + N(0, σ_b²))/m, 0, 1), each
    client's term ±1/2, so the count's add/remove sensitivity is 1/2 — what z_Δ
    (:func:`effective_noise_multiplier`) assumes. None: b̃ = (#{‖Δ_k‖ ≤ C} + N(0, σ_b²))/m with m the
    realised count, for fixed-size sampling (replace-one: sensitivity 1, covered by its event's z/2)."""
    checks.positive("clip", clip)
    checks.in_range("target_quantile", target_quantile, 0, 1)
    checks.positive("lr", lr)
    checks.nonnegative("count_noise_std", count_noise_std)
    norms = torch.as_tensor(norms)
    noise = count_noise_std * float(torch.randn((), generator=generator, device=generator.device))
    if denominator is None:
        fraction = (float((norms <= clip).sum()) + noise) / norms.numel()
    else:
        centred = float((norms <= clip).sum()) - norms.numel() / 2
        fraction = min(1.0, max(0.0, 0.5 + (centred + noise) / checks.positive("denominator", denominator)))
    return clip * float(torch.exp(torch.tensor(-lr * (fraction - target_quantile)))), fraction


def effective_noise_multiplier(noise_multiplier: float, count_noise_std: float) -> float:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): the update's noise multiplier when the clipped count also
    consumes privacy, so that (update, count) together have multiplier z (Andrew et al. 2021;
    docs/aldaghri_fedhdp.md §2)."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.positive("count_noise_std", count_noise_std)
    rest = noise_multiplier ** -2 - (2 * count_noise_std) ** -2
    if rest <= 0:
        raise ValueError(f"count_noise_std must exceed z/2 = {noise_multiplier / 2:.4g}: the count would "
                         "use the whole privacy budget")
    return rest ** -0.5
