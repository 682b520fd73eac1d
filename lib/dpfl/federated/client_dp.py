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
import math

import numpy as np
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant
from dpfl.data.federated import FederatedDataset
from dpfl.federated import server
from dpfl.federated.local import client_generators, updates_from
from dpfl.federated.loop import Algorithm, LoopConfig, Privacy, Round
from dpfl.models import Model

__all__ = ["ServerDPConfig", "ClientDPConfig", "ServerDP", "ClientLevelDP", "event_multiplier"]


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

    def next_bound(self, norms, bound: float, count_noise_std: float, generator, denominator=None) -> float:
        """The adaptive bound after a round whose update norms were ``norms`` (``server.adaptive_clip``;
        ``denominator``: the sampler's, see there)."""
        return server.adaptive_clip(norms, bound, target_quantile=self.target_quantile, lr=self.clip_lr,
                                    count_noise_std=count_noise_std, generator=generator, denominator=denominator)[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientDPConfig(ServerDPConfig):
    """FedAvg with client-level DP (Geyer, Klein & Nabi 2017; McMahan et al. 2018; docs/geyer2017.md §1).

    Each round the sampled clients start from the global model, train locally (no record-level
    noise), and send Δ_k = w_k − w; the server clips each Δ_k and adds Gaussian noise to the mean — the
    noised sum divided by the sampler's ``denominator`` (m under fixed-size sampling, the expected
    count p·K under Poisson sampling, where the realised count is private).
    ``clip``: a fixed bound; ``"median"``: Geyer's per-layer median of the round's update norms (their
    code; *not* privatised); ``"adaptive"``: Andrew et al.'s geometric update of a whole-model bound
    toward the ``target_quantile`` of the norms from a noised count (std ``count_noise_std``), starting
    at ``clip_init``, with the update's noise multiplier reduced so that update and count together
    have multiplier ``noise_multiplier``; ``None``: no clipping (only without noise: plain FedAvg).
    The mean gets N(0, (z·S)²)/m per layer (``per_layer``) or for the whole model.

    ``delta`` of each row is δ at ``target_eps`` by RDP of the event the sampler implies
    (``sampler.event``: m_t of K without replacement is replace-one, multiplier z/2), each round at
    its own q_t; with ``per_layer`` clipping of L parameter tensors a client moves the whole update by
    √L·S in the noise's units, so the event's multiplier is divided by √L (docs/geyer2017.md §3).
    It is a guarantee when the bounds do not depend on the data — not for ``clip="median"``
    (docs/geyer2017.md §4). The run stops once ``delta`` exceeds ``delta_budget``.

    Local training: ``batch_sampling="shuffle"`` runs epochs over a random permutation (Geyer: the
    client's data split into b batches, E epochs: ``local_steps`` = E·b, ``batch_size`` = n/b);
    ``lr_schedule``: the clients' learning rate, constant within a round (``dpfl.federated.schedule``;
    Geyer: ``LearningRate(0.1, 27_000, per="step", smooth=True)``, s counting every round's local steps).
    """

    noise_multiplier: float
    clip: float | str | None = "median"
    per_layer: bool = True
    target_eps: float = 8.0
    delta_budget: float | None = None
    batch_sampling: str = "fixed"
    count_noise_std: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        checks.nonnegative("noise_multiplier", self.noise_multiplier)
        if self.clip is None:
            if self.noise_multiplier > 0:
                raise ValueError("clip=None (no clipping) needs noise_multiplier = 0: noise is scaled to the bound")
        elif isinstance(self.clip, str):
            checks.one_of("clip", self.clip, ("median", "adaptive"))
        else:
            try:
                checks.positive("clip", self.clip)
            except ValueError:
                raise ValueError(f"clip must be a positive finite number, 'median', 'adaptive' or None; "
                                 f"got {self.clip!r}") from None
        checks.positive("target_eps", self.target_eps)
        if self.delta_budget is not None:
            checks.in_range("delta_budget", self.delta_budget, 0, 1, lo_open=True, hi_open=True)
        checks.nonnegative("count_noise_std", self.count_noise_std)
        checks.one_of("batch_sampling", self.batch_sampling, ("fixed", "shuffle"))    # local training has no masks
        if self.clip == "adaptive":
            if self.per_layer:
                raise ValueError("per_layer must be False with clip='adaptive' (one whole-model bound)")
            if self.noise_multiplier > 0:
                server.effective_noise_multiplier(self.noise_multiplier, self.count_noise_std)   # validates


def event_multiplier(noise_multiplier: float, tensors: int, per_layer: bool) -> float:
    """The noise multiplier of one round's accounting event: z, or z/√L when each of the L parameter
    tensors is clipped to S and gets noise z·S of its own (one Gaussian release of sensitivity √L·S;
    docs/privacy-accounting.md). ``dpfl.audit.canaries`` audits both."""
    return noise_multiplier / math.sqrt(tensors if per_layer else 1)


class ServerDP(Algorithm):
    """What the algorithms of :class:`ServerDPConfig` share: the sampled clients train from the global
    model ``state["global"]`` and send their updates (:meth:`local_updates`); the server clips and
    noises them and moves the global model by the resulting step (:meth:`move`)."""

    def local_updates(self, r: Round, sampling: str = "fixed") -> tuple:
        """Round ``r``'s batches ``x``, ``y``, the clients' generators, the learning rate and the
        clients' updates Δ_k = w_k − w_t (stacked, unclipped)."""
        cfg = self.cfg
        x, y, _ = self.fd.batches(r.selected, cfg.batch_size, cfg.local_steps, r.rng, sampling=sampling)
        lr = cfg.lr_schedule(cfg.local.lr, cfg.lr_schedule.count(r.t, cfg.local_steps))
        gens = client_generators(cfg.seed, r.t, r.selected, device=r.device)
        return x, y, gens, lr, updates_from(self.model, cfg.local, self.state["global"], x, y, gens, lr, chunk=cfg.chunk)

    def move(self, step: dict) -> None:
        """w_{t+1} = w_t + step."""
        self.state["global"] = {k: v + step[k] for k, v in self.state["global"].items()}


class ClientLevelDP(ServerDP):
    """The algorithm's state (global model, adaptive clip bound) and its round; run it with
    :func:`dpfl.federated.loop.run`, which gives one row per round: accuracy and loss of the global
    model on every client's test set (every ``cfg.eval_every`` rounds), δ at ``target_eps`` (:class:`ClientDPConfig`), clip bound,
    mean update norm, and what :meth:`inspect` adds. A paper's reading of the same run (another
    accountant, another stopping rule, diagnostics of the updates) is a subclass: Geyer et al.'s is
    ``dpfl.experiments.geyer2017.GeyerDP``."""

    progress_metric = "acc_global"

    def __init__(self, model: Model, cfg: ClientDPConfig):
        super().__init__(model, cfg)
        self.z = cfg.noise_multiplier
        if cfg.clip == "adaptive" and self.z > 0:
            self.z = server.effective_noise_multiplier(cfg.noise_multiplier, cfg.count_noise_std)

    def setup(self, fd: FederatedDataset, device: str) -> None:
        super().setup(fd, device)
        self.state = {"global": self.initial_params(device), "bound": self.cfg.clip_init}
        self.z_event = event_multiplier(self.z, len(self.state["global"]), self.cfg.per_layer)

    def accountants(self) -> list[Privacy]:
        eps = self.cfg.target_eps
        return [Privacy("guarantee", Accountant("rdp"), lambda a: {"delta": a.delta(eps)})]

    def events(self, r: Round) -> dict:
        """The sampler's event (a ``NonPrivateEvent``, δ = 1, for a run without noise)."""
        return {"guarantee": [(self.cfg.sampler.event(self.z_event, self.K, r.t - 1), 1)]}

    def inspect(self, updates: dict) -> dict:
        """Extra columns of the round's row from its updates (stacked, before clipping); none here."""
        return {}

    def round(self, r: Round) -> dict:
        cfg = self.cfg
        *_, lr, updates = self.local_updates(r, cfg.batch_sampling)
        extra = self.inspect(updates)
        noise_gen = r.torch_generator()
        if cfg.clip == "median":
            bound = server.median_bounds(updates)
        elif cfg.clip == "adaptive":
            bound = self.state["bound"]
        else:
            bound = math.inf if cfg.clip is None else cfg.clip       # None: nothing clipped
        clipped, norms = server.clip_updates(updates, bound, per_layer=cfg.per_layer, inplace=True)
        denominator = cfg.sampler.denominator(self.K)                # None: the realised count is public
        step = server.gaussian_mean(clipped, bound, self.z, noise_gen, denominator)
        if cfg.clip == "adaptive":
            self.state["bound"] = cfg.next_bound(norms, bound, cfg.count_noise_std, noise_gen, denominator)
        self.move(step)
        row = {"lr": lr,
               "mean_update_norm": float(torch.stack(list(norms.values())).mean()) if isinstance(norms, dict)
               else float(norms.mean()),
               "clip_bound": float(np.mean(list(bound.values()))) if isinstance(bound, dict) else float(bound),
               **extra}
        return row

    def evaluate(self, r: Round) -> dict:
        """The global model on every client's test set (every ``cfg.eval_every`` rounds)."""
        acc, loss = self.evaluate_global(self.state["global"])
        return {"acc_global": float(acc.mean()), "loss_global": float(loss.mean())}

    def stop(self, row: dict) -> bool:
        """δ has exceeded ``cfg.delta_budget``; this round's model is returned."""
        return self.cfg.delta_budget is not None and row["delta"] > self.cfg.delta_budget
