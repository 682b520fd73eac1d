"""FedAvg with client-level DP: Geyer, Klein & Nabi (2017), "A client level perspective"
(docs/geyer2017.md), with the DP-FedAvg variants of McMahan et al. (fixed bound) and Andrew et al.
(adaptive clipping).

Each round the sampled clients start from the global model, train locally without record-level
noise, and send their updates; the server clips them, averages and adds Gaussian noise
(``dpfl.federated.server``); a moments accountant tracks δ at a target ε, and the run stops
once δ exceeds the budget. One algorithm of the round loop (:mod:`dpfl.federated.loop`), which
owns seeding (round t's sample, batches and server noise from (seed, t), client c's from
(seed, t, c)), accounting, checkpoints and the stopping rule's application.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant, SampledGaussianEvent
from dpfl.data.federated import FederatedDataset
from dpfl.federated import server
from dpfl.federated.local import client_generators, updates_from
from dpfl.federated.loop import Algorithm, LoopConfig, Privacy, Round
from dpfl.models import Model

__all__ = ["ServerDPConfig", "ClientDPConfig", "ClientLevelDP", "spread"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerDPConfig(LoopConfig):
    """What the algorithms that add client-level noise at the server share (DP-FedAvg here, FedHDP):
    non-private local training from the global model (``local.dp`` must be False), a learning rate
    per round or step (clients keep no local model), and Andrew et al.'s adaptive clipping — the
    bound starts at ``clip_init`` and moves geometrically (rate ``clip_lr``) toward the
    ``target_quantile`` of the update norms."""

    clip_init: float = 0.1
    target_quantile: float = 0.5
    clip_lr: float = 0.2

    def __post_init__(self):
        super().__post_init__()
        if self.local.dp:
            raise ValueError("local must be non-private (dp=False): client-level DP adds noise at the server")
        if self.lr_schedule.per == "client_epoch":
            raise ValueError("lr schedule per must be 'round' or 'step': clients keep no local model here")
        checks.positive("clip_init", self.clip_init)
        checks.in_range("target_quantile", self.target_quantile, 0, 1, lo_open=True, hi_open=True)
        checks.positive("clip_lr", self.clip_lr)

    def next_bound(self, norms, bound: float, count_noise_std: float, generator) -> float:
        """The adaptive bound after a round whose update norms were ``norms`` (``server.adaptive_clip``)."""
        return server.adaptive_clip(norms, bound, target_quantile=self.target_quantile, lr=self.clip_lr,
                                    count_noise_std=count_noise_std, generator=generator)[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientDPConfig(ServerDPConfig):
    """FedAvg with client-level DP (Geyer, Klein & Nabi 2017; docs/geyer2017.md §1).

    Each round the sampled clients start from the global model, train locally (no record-level
    noise), and send Δ_k = w_k − w; the server clips each Δ_k and adds Gaussian noise to the mean.
    ``clip``: a fixed bound; ``"median"``: Geyer's per-layer median of the round's update norms (their
    code; *not* privatised, and the accounting ignores it); ``"adaptive"``: Andrew et al.'s geometric
    update of a whole-model bound toward the ``target_quantile`` of the norms from a noised count
    (std ``count_noise_std``), starting at ``clip_init``, with the update's noise multiplier reduced
    so that update and count together have multiplier ``noise_multiplier``. The mean gets
    N(0, (z·S)²)/m per layer (or for the whole model). Privacy at ``target_eps``, each round with its
    own q_t (Geyer's code accounts ``accumulations_per_round`` mechanisms per round: 3, one per weight
    matrix): ``delta`` is a guarantee, RDP of the event the sampler implies (``sampler.event``: m_t of K
    without replacement is replace-one, multiplier z/2); ``delta_paper`` is Geyer's code's moments
    accountant (Poisson at q_t = m_t/K, multiplier z). The run stops once the δ of ``stop_on``
    ("guarantee" or "paper", to reproduce the paper's number of rounds) exceeds ``delta_budget``.

    Local training: ``batch_sampling="shuffle"`` runs epochs over a random permutation (Geyer: the
    client's data split into b batches, E epochs: ``local_steps`` = E·b, ``batch_size`` = n/b);
    ``lr_schedule``: the clients' learning rate, constant within a round (``dpfl.federated.schedule``;
    Geyer: ``LearningRate(0.1, 27_000, per="step", smooth=True)``, s counting every round's local steps).
    ``diagnostics``: also record Geyer's V_c and U_s of each round's updates (:func:`spread`).
    """

    noise_multiplier: float
    clip: float | str = "median"
    per_layer: bool = True
    target_eps: float = 8.0
    delta_budget: float | None = None
    accumulations_per_round: int = 1
    batch_sampling: str = "fixed"
    count_noise_std: float = 0.0
    stop_on: str = "guarantee"
    diagnostics: bool = False

    def __post_init__(self):
        super().__post_init__()
        checks.one_of("stop_on", self.stop_on, ("guarantee", "paper"))
        checks.nonnegative("noise_multiplier", self.noise_multiplier)
        if isinstance(self.clip, str):
            checks.one_of("clip", self.clip, ("median", "adaptive"))
        else:
            try:
                checks.positive("clip", self.clip)
            except ValueError:
                raise ValueError(f"clip must be a positive finite number, 'median' or 'adaptive'; "
                                 f"got {self.clip!r}") from None
        checks.positive("target_eps", self.target_eps)
        if self.delta_budget is not None:
            checks.in_range("delta_budget", self.delta_budget, 0, 1, lo_open=True, hi_open=True)
        checks.nonnegative("count_noise_std", self.count_noise_std)
        checks.positive_int("accumulations_per_round", self.accumulations_per_round)
        checks.one_of("batch_sampling", self.batch_sampling, ("fixed", "poisson", "shuffle"))
        if self.clip == "adaptive":
            if self.per_layer:
                raise ValueError("per_layer must be False with clip='adaptive' (one whole-model bound)")
            if self.noise_multiplier > 0:
                server.effective_noise_multiplier(self.noise_multiplier, self.count_noise_std)   # validates


def spread(updates: dict) -> tuple[float, float]:
    """Geyer et al.'s Fig. 2 quantities of one round's updates Δw^k (stacked, (m, …)):
    between-clients variance V_c = (1/P) Σ_ij (1/m) Σ_k (Δw^k_ij − μ_ij)² and update scale
    U_s = (1/P) Σ_ij μ_ij², μ = the mean update, P the number of weights (pooled over layers)."""
    total = sum(v[0].numel() for v in updates.values())
    means = {k: v.mean(dim=0) for k, v in updates.items()}
    # Σ_k (Δ^k − μ)² per weight, summed: Σ_k ‖Δ^k‖² − m‖μ‖² (one pass over the stack; var(dim=0) is a strided walk)
    m = next(iter(updates.values())).shape[0]
    scale = sum(float(mu.double().pow(2).sum()) for mu in means.values())
    squares = sum(float(v.double().pow(2).sum()) for v in updates.values())
    var = max(squares / m - scale, 0.0) / total
    scale /= total
    return var, scale


class ClientLevelDP(Algorithm):
    """The algorithm's state (global model, adaptive clip bound) and its round; run it with
    :func:`dpfl.federated.loop.run`, which gives one row per round: accuracy and loss of the global
    model on every client's test set, δ spent at ``target_eps`` (the guarantee and Geyer's code's),
    clip bound, mean update norm, V_c, U_s.

    Two accountings, named: ``delta`` is the guarantee (RDP of the sampler's own event, each round
    at its own q_t, ``sampler.event``); ``delta_paper`` is Geyer's code's (Abadi's moments accountant:
    Poisson at q_t = m_t/K, multiplier z, integer orders 2…33, classic conversion) — they differ when
    m of K are drawn without replacement."""

    progress_metric = "acc_global"

    def __init__(self, model: Model, cfg: ClientDPConfig):
        super().__init__(model, cfg)
        self.z = cfg.noise_multiplier
        if cfg.clip == "adaptive" and self.z > 0:
            self.z = server.effective_noise_multiplier(cfg.noise_multiplier, cfg.count_noise_std)

    def setup(self, fd: FederatedDataset, device: str) -> None:
        super().setup(fd, device)
        self.state = {"global": self.initial_params(device), "bound": self.cfg.clip_init}

    def accountants(self) -> list[Privacy]:
        eps = self.cfg.target_eps
        if self.cfg.noise_multiplier == 0:
            return []
        return [Privacy("guarantee", Accountant("rdp"), lambda a: {"delta": a.delta(eps)}),
                Privacy("paper", Accountant("rdp-classic", orders=np.arange(2, 34)),
                        lambda a: {"delta_paper": a.delta(eps)})]

    def events(self, r: Round) -> dict:
        cfg, t = self.cfg, r.t
        if cfg.noise_multiplier == 0:
            return {}
        q = cfg.sampler.rate(self.K, t - 1)
        return {"guarantee": [(cfg.sampler.event(cfg.noise_multiplier, self.K, t - 1), cfg.accumulations_per_round)],
                "paper": [(SampledGaussianEvent(cfg.noise_multiplier, q, "poisson"), cfg.accumulations_per_round)]}

    def round(self, r: Round) -> dict:
        cfg, global_ = self.cfg, self.state["global"]
        x, y, _ = self.fd.batches(r.selected, cfg.batch_size, cfg.local_steps, r.rng, sampling=cfg.batch_sampling)
        lr = cfg.lr_schedule(cfg.local.lr, cfg.lr_schedule.count(r.t, cfg.local_steps))
        updates = updates_from(self.model, cfg.local, global_, x, y,
                               client_generators(cfg.seed, r.t, r.selected, device=r.device), lr, chunk=cfg.chunk)
        v_c, u_s = spread(updates) if cfg.diagnostics else (np.nan, np.nan)
        noise_gen = torch.Generator(device=r.device).manual_seed(int(r.rng.integers(2 ** 62)))
        if cfg.clip == "median":
            bound = server.median_bounds(updates)
        elif cfg.clip == "adaptive":
            bound = self.state["bound"]
        else:
            bound = cfg.clip
        clipped, norms = server.clip_updates(updates, bound, per_layer=cfg.per_layer)
        step = server.gaussian_mean(clipped, bound, self.z, noise_gen)
        if cfg.clip == "adaptive":
            self.state["bound"] = cfg.next_bound(norms, bound, cfg.count_noise_std, noise_gen)
        self.state["global"] = {k: global_[k] + step[k] for k in global_}
        acc, loss = self.evaluate_global(self.state["global"])
        row = {"lr": lr, "acc_global": float(acc.mean()),
               "loss_global": float(loss.mean()),
               "mean_update_norm": float(torch.stack(list(norms.values())).mean()) if isinstance(norms, dict)
               else float(norms.mean()),
               "clip_bound": float(np.mean(list(bound.values()))) if isinstance(bound, dict) else float(bound),
               "V_c": v_c, "U_s": u_s}
        if cfg.noise_multiplier == 0:
            row.update(delta=1.0, delta_paper=1.0)
        return row

    def stop(self, row: dict) -> bool:
        """δ of ``cfg.stop_on``'s accounting has exceeded ``cfg.delta_budget`` (Geyer's code returns
        this model: the first whose δ exceeds the budget)."""
        cfg = self.cfg
        return cfg.delta_budget is not None and row["delta" if cfg.stop_on == "guarantee" else "delta_paper"] > cfg.delta_budget

