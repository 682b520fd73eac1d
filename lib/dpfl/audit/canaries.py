"""Canary audits of the engine's two Gaussian mechanisms, run through the engine's own code, each
next to the guarantee the engine's accounting claims for what the audit observes (docs/audits.md).

(a) **Record-level DP-SGD** as PriFedSync's clients run it (``local.local_train``: per-sample clipping
    to C — ghost clipping by default —, noise z·C on the sum, division by B, an SGD step). White-box
    Dirac canary: the model is ``models.softmax_regression`` at its zero initialisation; the "in" run's
    batch holds an image whose one non-zero pixel is +a, the "out" run's the same image with −a (a
    replaced record); the other B − 1 records are blank images, whose gradient is zero. The canary's
    gradient is confined to its pixel's column of the weights and is clipped to C, the replaced one is
    its exact opposite: the two differ by 2C, Zheng et al.'s replace-one sensitivity. Score: the
    trained column projected on the canary's direction. The canary is in every step's batch, so what
    is audited is K steps given its inclusion: claimed μ = 2√K/z (σ = z/2, ``G_{1/σ}`` per step).
(b) **Client-level DP-FedAvg** as ``ClientLevelDP`` runs a round (``server.clip_updates`` with a fixed
    bound S, whole-model or per layer, then ``server.gaussian_mean``). White-box canary client whose
    update is a fixed random direction of norm 10·S ("in") or zero ("out": the client sends nothing),
    beside m − 1 clients with random updates of norm ≈ S per tensor. Score: the round's mean update
    projected on the canary's clipped update (Andrew et al. 2024's statistic, with the canary known). Claimed μ for the round
    given the canary's inclusion: 1/z_event, the multiplier the engine accounts
    (``client_dp.event_multiplier``: z, or z/√L for L tensors clipped separately).
(c) **Geyer et al.'s median bound**: (b) per layer with each tensor's bound the median of the round's
    update norms (``server.median_bounds``), which the canary moves and nobody privatises; the claim is
    the engine's, that of a fixed per-layer bound.
(d) **FedHDP's two groups** as ``FedHDP`` aggregates a round (Aldaghri et al., Alg. 2): the private
    group's mean through ``server.clip_updates`` and ``server.gaussian_mean`` (divided by the group's
    expected count, as the engine does under Poisson sampling), the opted-out group's
    clipped mean without noise (``server.clip_updates``, ``server.fedavg``), then ``server.two_step``
    with the ratio r; a canary client in one group,
    audited on the global step. Claimed: μ = 1/z for the private group's event (``fedhdp``'s
    accountant ``group1``; the step's weighting is post-processing), none for the opted-out group.
(e) **A round of Poisson-sampled clients** (add/remove-one, the relation ``PoissonClients.event``
    accounts): the "out" world has one client fewer, the other clients' updates are aligned against
    the canary (each −S·û), and the noised sum is divided by the expected count m
    (``PoissonClients.denominator``). Claimed: μ = 1/z. With the realised count as the denominator (the
    engine before 2026-11-24, planted as ``"realised-denominator"``) one client moves the mean by 2S/m.
(f) **Adaptive clipping's joint release** (Andrew et al. 2021, FedHDP's DP-FedAvg baseline) under
    Poisson sampling: a round releases the noised mean (multiplier z_Δ) *and* the noised fraction of
    updates under the bound (``server.adaptive_clip``, noise σ_b on the recentred count), both divided
    by the expected count m. The canary client (update of norm 10·S, so clipped and not counted) is
    added ("in") or absent ("out"); the others send zero updates (under the bound) or −10·S·û (above
    it, aligned against the canary). Score: the likelihood-ratio combination of the two releases the
    claim describes, ⟨mean, û⟩·m/(z_Δ² S) − b̃·m/(2σ_b²). Claimed: μ = 1/z, with
    z⁻² = z_Δ⁻² + (2σ_b)⁻² (``server.effective_noise_multiplier``). Planted ``"realised-count"``: both
    divided by the realised count and the count not recentred (the engine before 2026-11-24).
(g) **DP-SGD with sampled batches**, the amplification the accountant credits: a client of n records,
    record 0 the canary (+a) or its replacement (−a), the others blank; K steps whose batches of B the
    engine's sampler draws (``FederatedDataset.batches``: the canary in a step's batch with probability
    q = B/n), ``local_train`` called step by step so that every step's update is seen. Score: the sum
    over steps of the log-likelihood ratio of the two mixtures (1 − q)·N(0, z²) + q·N(±1, z²) of the
    update projected on the canary's direction (in units of C/B). Claimed: ε(δ) by RDP of K ×
    ``sampling.batch_event`` — a guarantee; Zheng et al.'s CLT μ is reported beside it, not claimed.

``bug`` plants a fault in the mechanism while the claim stays what the engine would account:
``"noise/10"`` (the noise multiplier divided by 10; for (g) the attack then knows the noise as run),
``"no-clip"`` (clipping disabled, the noise still
scaled to C or S), for (b) with per-layer clipping ``"one-layer-accounting"`` (the claim composed
as if one tensor were released — the bug fixed on 2026-11-22), and the two bugs fixed on 2026-11-24
named in (e) and (f) (docs/privacy-accounting.md, "Dividing by the clients"). An audit that does not catch
them proves nothing: ``tests/test_audit.py`` asserts both directions.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from dpfl import checks
from dpfl.accounting import gdp
from dpfl.accounting.accountant import Accountant
from dpfl.data.federated import FederatedDataset
from dpfl.audit.bounds import audit_scores
from dpfl.federated import server
from dpfl.federated.client_dp import event_multiplier
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train
from dpfl.federated.sampling import batch_event
from dpfl.models import softmax_regression

__all__ = ["BUGS", "dp_sgd_audit", "client_level_audit", "fedhdp_audit", "adaptive_clip_audit", "sampled_dp_sgd_audit"]

#: the planted faults each audit accepts
BUGS = {"dp_sgd": (None, "noise/10", "no-clip"),
        "client_level": (None, "noise/10", "no-clip", "one-layer-accounting", "realised-denominator"),
        "fedhdp": (None, "noise/10"), "adaptive": (None, "realised-count"), "sampled_dp_sgd": (None, "noise/10")}


def _row(mechanism, bug, z, claimed_mu, scores_in, scores_out, delta, alpha, claimed_eps=None, **setting) -> dict:
    """The audit's row; ``claimed_mu = inf``: the mechanism claims no privacy (FedHDP's opted-out group);
    ``claimed_mu = nan`` with ``claimed_eps``: the claim is an (ε, δ) guarantee only (audit (g))."""
    found = audit_scores(scores_in, scores_out, delta, alpha)
    if claimed_eps is None:
        claimed_eps = gdp.epsilon(claimed_mu, delta) if math.isfinite(claimed_mu) else math.inf
    return {"mechanism": mechanism, "bug": bug or "none", "z": z, **setting, "trials per side": len(scores_in),
            "claimed μ": claimed_mu, "μ lower bound": found["mu_lo"], f"claimed ε(δ={delta:g})": claimed_eps,
            "ε lower bound": found["eps_lo"], "μ bound / claim": found["mu_lo"] / claimed_mu,
            "exceeds claim": found["mu_lo"] > claimed_mu or found["eps_lo"] > claimed_eps,
            "confidence": found["confidence"]}


def _canary_direction() -> torch.Tensor:
    """The unit direction of a Dirac canary's gradient in its pixel's column of
    ``models.softmax_regression`` at its zero initialisation (label 0): softmax − one-hot."""
    direction = torch.full((10,), 0.1)
    direction[0] -= 1.0
    return direction / direction.norm()


def _zero_models(model, n: int) -> dict:
    """``n`` copies of ``model``'s (zero) initial parameters, stacked as ``local_train`` takes them."""
    return {k: v.unsqueeze(0).repeat(n, 1, 1) for k, v in model.init(None).items()}


def dp_sgd_audit(noise_multiplier: float, *, clip: float = 1.0, batch_size: int = 8, steps: int = 1, trials: int = 1000,
                 delta: float = 1e-5, alpha: float = 0.05, bug: str | None = None, per_sample: str = "ghost",
                 seed: int = 0) -> dict:
    """Audit (a) (module docstring): ``trials`` runs with the canary and as many with its replacement,
    all trained in one ``local_train`` call (one simulated client per run). Returns one row: the
    claimed μ and ε(δ) next to the audit's lower bounds (confidence 1 − α)."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.positive("clip", clip)
    checks.positive_int("batch_size", batch_size)
    checks.positive_int("steps", steps)
    checks.positive_int("trials", trials)
    checks.one_of("bug", bug, BUGS["dp_sgd"])
    z_run, clip_run = {None: (noise_multiplier, clip), "noise/10": (noise_multiplier / 10, clip),
                       "no-clip": (noise_multiplier / 1e4, clip * 1e4)}[bug]     # no-clip: the same noise z·C
    model = softmax_regression()
    cfg = LocalConfig(optimizer="sgd", lr=1.0, dp=True, clip=clip_run, noise_multiplier=z_run, per_sample=per_sample)
    a = 10.0 * clip                                          # the canary's gradient norm ≈ 9.5·C before clipping
    x = torch.zeros(2 * trials, steps, batch_size, 1, 28, 28)
    x[:trials, :, 0, 0, 0, 0], x[trials:, :, 0, 0, 0, 0] = a, -a
    y = torch.zeros(2 * trials, steps, batch_size, dtype=torch.long)
    params = _zero_models(model, 2 * trials)
    trained, _ = local_train(model, cfg, params, init_state(params, cfg), x, y,
                             client_generators(seed, 0, range(2 * trials)), chunk=256)
    scores = -(trained["fc.weight"][:, :, 0] @ _canary_direction()).numpy()
    return _row("DP-SGD (record level, PriFedSync clients)", bug, noise_multiplier, 2 * math.sqrt(steps) / noise_multiplier,
                scores[:trials], scores[trials:], delta, alpha, steps=steps, batch=batch_size)


def client_level_audit(noise_multiplier: float, *, bound: float = 1.0, per_layer: bool = False, layers: int = 4,
                       clients: int = 10, trials: int = 1000, delta: float = 1e-5, alpha: float = 0.05,
                       bug: str | None = None, median: bool = False, poisson: bool = False, seed: int = 0) -> dict:
    """Audit (b) (module docstring): ``trials`` rounds with the canary client and as many without,
    each through ``server.clip_updates`` and ``server.gaussian_mean``. ``median``: audit (c), Geyer et
    al.'s per-layer bound, the median of the round's update norms (``server.median_bounds``, not
    privatised; ``per_layer`` is then implied) — the claim is the one the engine makes for it, that of a
    fixed per-layer bound. ``poisson``: audit (e) (whole model only). Returns one row like
    :func:`dp_sgd_audit`'s."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.positive("bound", bound)
    checks.positive_int("layers", layers)
    checks.positive_int("clients", clients)
    checks.positive_int("trials", trials)
    checks.one_of("bug", bug, BUGS["client_level"])
    per_layer = per_layer or median
    if bug == "one-layer-accounting" and not per_layer:
        raise ValueError("bug 'one-layer-accounting' needs per_layer=True")
    if poisson and per_layer:
        raise ValueError("poisson=True audits the whole-model bound: per_layer and median must be False")
    if bug == "realised-denominator" and not poisson:
        raise ValueError("bug 'realised-denominator' needs poisson=True")
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
    shapes = {f"layer{i}.weight": (16, 16) for i in range(layers)}
    canary = {k: torch.randn(sh, generator=gen) for k, sh in shapes.items()}
    scale = 10 * bound / math.sqrt(sum(float(v.pow(2).sum()) for v in canary.values()))
    canary = {k: v * scale for k, v in canary.items()}
    known, _ = server.clip_updates({k: v.unsqueeze(0).clone() for k, v in canary.items()}, bound, per_layer=per_layer)
    z_run = noise_multiplier / 10 if bug == "noise/10" else noise_multiplier
    scores = []
    for world in ("in", "out"):
        for _ in range(trials):
            # the other clients' updates: random, of norm ≈ S per tensor (so the median bound is ≈ S too)
            if poisson:                        # the others aligned against the canary; "out": one client fewer
                updates = {k: torch.cat([-known[k].repeat(clients - 1, *[1] * len(sh))]
                                        + ([canary[k].unsqueeze(0)] if world == "in" else [])) for k, sh in shapes.items()}
            else:
                updates = {k: torch.randn(clients, *sh, generator=gen) * (bound / math.sqrt(math.prod(sh)))
                           for k, sh in shapes.items()}
                for k in updates:
                    updates[k][0] = canary[k] if world == "in" else 0.0
            bounds = server.median_bounds(updates) if median else bound
            clipped, _ = server.clip_updates(updates, math.inf if bug == "no-clip" else bounds, per_layer=per_layer)
            denominator = float(clients) if poisson and bug != "realised-denominator" else None
            mean = server.gaussian_mean(clipped, bounds, z_run, gen, denominator)
            scores.append(float(sum((mean[k] * known[k][0]).sum() for k in shapes)))
    claimed = 1 / event_multiplier(noise_multiplier, 1 if bug == "one-layer-accounting" else layers, per_layer)
    name = (" (Geyer's per-layer median bound)" if median else " (per-layer clipping)" if per_layer
            else " (Poisson clients, aligned others)" if poisson else "")
    return _row("client-level DP-FedAvg" + name, bug, noise_multiplier,
                claimed, scores[:trials], scores[trials:], delta, alpha, clients=clients, layers=layers)


def fedhdp_audit(noise_multiplier: float, *, group: int = 1, ratio: float = 0.5, clients: int = 10, bound: float = 1.0,
                 trials: int = 1000, delta: float = 1e-5, alpha: float = 0.05, bug: str | None = None,
                 seed: int = 0) -> dict:
    """Audit (d) (module docstring): ``clients`` clients in each of FedHDP's two groups (0: opted out,
    no noise; 1: private, multiplier z, fixed bound S), the canary client in ``group``. Returns one
    row like :func:`dp_sgd_audit`'s; the opted-out group's claimed μ is ∞ (no privacy is claimed)."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.one_of("group", group, (0, 1))
    checks.in_range("ratio", ratio, 0, 1, lo_open=True)
    checks.positive_int("clients", clients)
    checks.positive("bound", bound)
    checks.positive_int("trials", trials)
    checks.one_of("bug", bug, BUGS["fedhdp"])
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 4]).generate_state(1)[0]))
    shape = (16, 16)
    canary = torch.randn(shape, generator=gen)
    canary = canary * (10 * bound / canary.norm())
    known = canary * (bound / canary.norm()) if group == 1 else canary
    z_run = noise_multiplier / 10 if bug == "noise/10" else noise_multiplier
    scores = []
    for world in ("in", "out"):
        for _ in range(trials):
            updates = [{"w": torch.randn(clients, *shape, generator=gen) * (bound / 16)} for _ in range(2)]
            updates[group]["w"][0] = canary if world == "in" else 0.0
            (opted_out, _), (private, _) = (server.clip_updates(u, bound) for u in updates)
            means = [server.fedavg(opted_out), server.gaussian_mean(private, bound, z_run, gen, float(clients))]
            step = server.two_step(means, [clients, clients], [1.0, ratio])
            scores.append(float((step["w"] * known).sum()))
    claimed = 1 / noise_multiplier if group == 1 else math.inf
    return _row(f"FedHDP, canary in the {'private' if group else 'opted-out'} group", bug, noise_multiplier, claimed,
                scores[:trials], scores[trials:], delta, alpha, clients=clients, ratio=ratio)


def adaptive_clip_audit(noise_multiplier: float, *, count_share: float = 0.7, below: float = 0.5, clients: int = 10,
                        bound: float = 1.0, trials: int = 1000, delta: float = 1e-5, alpha: float = 0.05,
                        bug: str | None = None, seed: int = 0) -> dict:
    """Audit (f) (module docstring): ``trials`` rounds with the canary among ``clients`` Poisson-sampled
    clients (expected count ``clients``) and as many without it. ``count_share``: the share of the
    privacy budget, 1/z², spent on the count — σ_b = z/(2√count_share), z_Δ = z/√(1 − count_share) —,
    large so that the audit watches the count; ``below``: the share of the other clients whose update
    is under the bound. Returns one row like :func:`dp_sgd_audit`'s."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.in_range("count_share", count_share, 0, 1, lo_open=True, hi_open=True)
    checks.in_range("below", below, 0, 1)
    checks.positive_int("clients", clients)
    checks.positive("bound", bound)
    checks.positive_int("trials", trials)
    checks.one_of("bug", bug, BUGS["adaptive"])
    count_std = noise_multiplier / (2 * math.sqrt(count_share))
    z_update = server.effective_noise_multiplier(noise_multiplier, count_std)
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 6]).generate_state(1)[0]))
    direction = torch.randn(16, 16, generator=gen)
    direction /= direction.norm()
    n_below = int(round(below * (clients - 1)))
    others = torch.stack([torch.zeros_like(direction)] * n_below
                         + [-10 * bound * direction] * (clients - 1 - n_below))
    denominator = None if bug == "realised-count" else float(clients)
    weights = (clients / (z_update ** 2 * bound), -clients / (2 * count_std ** 2))
    scores = []
    for world in ("in", "out"):
        updates = {"w": torch.cat([others, 10 * bound * direction.unsqueeze(0)]) if world == "in" else others}
        for _ in range(trials):
            clipped, norms = server.clip_updates(updates, bound)
            mean = server.gaussian_mean(clipped, bound, z_update, gen, denominator)["w"]
            _, fraction = server.adaptive_clip(norms, bound, count_noise_std=count_std, generator=gen,
                                               denominator=denominator)
            scores.append(weights[0] * float((mean * direction).sum()) + weights[1] * fraction)
    name = "adaptive clipping (mean and count, Poisson clients" + (", others all under the bound)" if below == 1 else ")")
    return _row(name, bug, noise_multiplier, 1 / noise_multiplier,
                scores[:trials], scores[trials:], delta, alpha, clients=clients, count_share=count_share, below=below)


def _mixture_llr(o, z: float, q: float):
    """Per step, log of the "in" over the "out" density of o = ±I + z·ξ, I ~ Bernoulli(q) (the canary's
    inclusion, its gradient +1 or −1 in units of C), summed over the steps (last axis)."""
    log_in = np.logaddexp(np.log1p(-q) - o ** 2 / (2 * z ** 2), np.log(q) - (o - 1) ** 2 / (2 * z ** 2))
    log_out = np.logaddexp(np.log1p(-q) - o ** 2 / (2 * z ** 2), np.log(q) - (o + 1) ** 2 / (2 * z ** 2))
    return (log_in - log_out).sum(-1)


def sampled_dp_sgd_audit(noise_multiplier: float, *, records: int = 80, batch_size: int = 8, steps: int = 10,
                         clip: float = 1.0, trials: int = 1000, delta: float = 1e-5, alpha: float = 0.05,
                         bug: str | None = None, seed: int = 0, block: int = 500) -> dict:
    """Audit (g) (module docstring): ``trials`` clients of ``records`` records whose record 0 is the canary
    (+a) and as many whose record 0 is its replacement (−a), the others blank; ``steps`` DP-SGD steps
    whose batches ``FederatedDataset.batches`` draws (B of n afresh each step, as PriFedSync's clients).
    Each step's update is observed (``local_train`` called step by step); the score is the likelihood
    ratio of the steps' mixtures. Claimed: ε(δ) by RDP of ``steps`` × ``batch_event`` — a
    guarantee; the GDP CLT μ (Zheng et al.'s Theorem 2, an approximation) is reported beside it, not
    claimed. Returns one row like :func:`dp_sgd_audit`'s, with ``claimed μ`` NaN."""
    checks.positive("noise_multiplier", noise_multiplier)
    checks.positive_int("batch_size", batch_size)
    checks.positive_int("steps", steps)
    checks.positive("clip", clip)
    checks.positive_int("trials", trials)
    checks.positive_int("block", block)
    checks.one_of("bug", bug, BUGS["sampled_dp_sgd"])
    if not batch_size < checks.positive_int("records", records):
        raise ValueError(f"records must exceed batch_size {batch_size}; got {records}")
    z, q = noise_multiplier, batch_size / records
    model = softmax_regression()
    lr = 1e-3                                                # small: the canary's gradient direction stays put
    z_run = z / 10 if bug == "noise/10" else z
    cfg = LocalConfig(optimizer="sgd", lr=lr, dp=True, clip=clip, noise_multiplier=z_run)
    images = torch.zeros(records + 1, 1, 28, 28)
    images[0, 0, 0, 0], images[1, 0, 0, 0] = 10.0 * clip, -10.0 * clip     # canary, its replacement
    labels = torch.zeros(records + 1, dtype=torch.long)
    blanks = list(range(2, records + 1))
    fd = FederatedDataset(images, labels, images, labels, [[0] + blanks, [1] + blanks], [[0], [1]], "canary")
    direction = _canary_direction()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    observed = []
    for start in range(0, 2 * trials, block):
        worlds = np.arange(start, min(start + block, 2 * trials)) >= trials      # False: "in"
        x, y, _ = fd.batches(worlds.astype(np.int64), batch_size, steps, rng)
        params = _zero_models(model, worlds.size)
        state, gens = init_state(params, cfg), client_generators(seed, 0, range(start, start + worlds.size))
        steps_seen = []
        for k in range(steps):
            before = params["fc.weight"][:, :, 0].clone()
            params, state = local_train(model, cfg, params, state, x[:, k:k + 1], y[:, k:k + 1], gens, chunk=256)
            steps_seen.append(((before - params["fc.weight"][:, :, 0]) @ direction).numpy() * batch_size / (lr * clip))
        observed.append(np.stack(steps_seen, axis=1))
    # observed: ±1 where the canary was in the batch, + z·ξ; white-box, the attack knows the noise as run
    scores = _mixture_llr(np.concatenate(observed), z_run, q)
    event = batch_event(z, batch_size, records, "fixed")
    claimed_eps = Accountant("rdp").compose(event, steps).epsilon(delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gdp.ApproximationWarning)
        clt = float(gdp.clt_mu_fraction(event.sigma, q, steps))
    return _row("DP-SGD, sampled batches, every step seen", bug, z, math.nan, scores[:trials], scores[trials:], delta,
                alpha, claimed_eps=claimed_eps, steps=steps, batch=batch_size, records=records,
                **{"CLT μ (approximation)": clt})
