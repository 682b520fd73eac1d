"""FedAvg with client-level DP: Geyer, Klein & Nabi (2017), "A client level perspective"
(details.md §5.1), with the DP-FedAvg variants of McMahan et al. (fixed bound) and Andrew et al.
(adaptive clipping).

Each round the sampled clients start from the global model, train locally without record-level
noise, and send their updates; the server clips them, averages and adds Gaussian noise
(``dpfl.federated.server``); a moments accountant tracks δ at a target ε, and the run stops
once δ exceeds the budget. Randomness as in ``dpfl.federated.engine``: round t's sample, batches
and server noise from (seed, t), client c's from (seed, t, c).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant, SampledGaussianEvent
from dpfl.data.federated import FederatedDataset
from dpfl.federated import checkpoint as checkpoints
from dpfl.federated import server
from dpfl.federated.evaluate import shared_accuracy
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train
from dpfl.federated.sampling import FixedClients, PoissonClients, round_rng
from dpfl.models import Model

__all__ = ["ClientDPConfig", "train_client_dp", "spread"]


@dataclasses.dataclass(frozen=True)
class ClientDPConfig:
    """FedAvg with client-level DP (Geyer, Klein & Nabi 2017; details.md §5.1).

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
    ``lr_decay`` = (rate, steps) decays the learning rate as lr·rate^(s/steps) with s the global step
    (Geyer: (0.1, 27 000); s counts every round's local steps; constant within a round).
    """

    rounds: int
    batch_size: int
    local_steps: int
    sampler: FixedClients | PoissonClients
    local: LocalConfig
    noise_multiplier: float
    clip: float | str = "median"
    per_layer: bool = True
    target_eps: float = 8.0
    delta_budget: float | None = None
    accumulations_per_round: int = 1
    batch_sampling: str = "fixed"
    lr_decay: tuple = ()
    clip_init: float = 0.1
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise_std: float = 0.0
    seed: int = 0
    chunk: int | None = None
    checkpoint_every: int = 0
    stop_on: str = "guarantee"

    def __post_init__(self):
        checks.positive_int("rounds", self.rounds)
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
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("local_steps", self.local_steps)
        checks.nonnegative_int("seed", self.seed)
        checks.nonnegative_int("checkpoint_every", self.checkpoint_every)
        if self.chunk is not None:
            checks.positive_int("chunk", self.chunk)
        checks.in_range("target_quantile", self.target_quantile, 0, 1, lo_open=True, hi_open=True)
        checks.positive("clip_lr", self.clip_lr)
        checks.nonnegative("count_noise_std", self.count_noise_std)
        if self.local.dp:
            raise ValueError("local must be non-private (dp=False): client-level DP adds noise at the server")
        checks.positive_int("accumulations_per_round", self.accumulations_per_round)
        checks.one_of("batch_sampling", self.batch_sampling, ("fixed", "poisson", "shuffle"))
        if self.lr_decay:
            if len(self.lr_decay) != 2:
                raise ValueError(f"lr_decay must be (rate, steps); got {self.lr_decay!r}")
            checks.in_range("lr_decay", self.lr_decay[0], 0, 1, lo_open=True)
            checks.positive("lr_decay", self.lr_decay[1])
        if self.clip == "adaptive":
            checks.positive("clip_init", self.clip_init)
            if self.per_layer:
                raise ValueError("per_layer must be False with clip='adaptive' (one whole-model bound)")
            if self.noise_multiplier > 0:
                server.effective_noise_multiplier(self.noise_multiplier, self.count_noise_std)   # validates


def spread(updates: dict) -> tuple[float, float]:
    """Geyer et al.'s Fig. 2 quantities of one round's updates Δw^k (stacked, (m, …)):
    between-clients variance V_c = (1/P) Σ_ij (1/m) Σ_k (Δw^k_ij − μ_ij)² and update scale
    U_s = (1/P) Σ_ij μ_ij², μ = the mean update, P the number of weights (pooled over layers)."""
    total = sum(v[0].numel() for v in updates.values())
    var = sum(float(v.var(dim=0, unbiased=False).sum()) for v in updates.values()) / total
    scale = sum(float(v.mean(dim=0).pow(2).sum()) for v in updates.values()) / total
    return var, scale


def train_client_dp(model: Model, fd: FederatedDataset, cfg: ClientDPConfig, *, checkpoint: Path | None = None,
                    progress: bool = True) -> pd.DataFrame:
    """Run Geyer et al.'s algorithm; one metrics row per round (accuracy and loss of the global model on
    every client's test set, δ spent at ``target_eps``, clip bound, mean update norm, V_c, U_s).
    With ``checkpoint``, state is saved every ``cfg.checkpoint_every`` rounds and a run finding a
    checkpoint resumes from it (bit-identical on a CPU)."""
    K = fd.num_clients
    global_ = model.init(torch.Generator().manual_seed(int(cfg.seed)))
    pool = fd.test_index(np.arange(K))
    z = cfg.noise_multiplier
    if cfg.clip == "adaptive" and z > 0:
        z = server.effective_noise_multiplier(cfg.noise_multiplier, cfg.count_noise_std)
    adaptive_bound = cfg.clip_init
    rows = []
    first = 1
    # Two accountings, named: the guarantee (RDP of the sampler's own event, each round at its own
    # q_t) and Geyer's code's (Abadi's moments accountant: Poisson at q_t = m_t/K, multiplier z,
    # integer orders 2…33, classic conversion) — they differ when m of K are drawn without replacement.
    accountant = Accountant("rdp")
    paper = Accountant("rdp-classic", orders=np.arange(2, 34))
    key = checkpoints.run_key(model, fd, cfg)
    saved = checkpoints.load(checkpoint, key)
    if saved is not None:
        global_, adaptive_bound, rows, first = saved["global"], saved["bound"], saved["rows"], saved["round"] + 1
        accountant.load_state_dict(saved["accountant"])
        paper.load_state_dict(saved["paper_accountant"])
        if rows and _over_budget(cfg, rows[-1]):
            return pd.DataFrame(rows)
    from tqdm.auto import tqdm

    for t in tqdm(range(first, cfg.rounds + 1), disable=not progress, desc="rounds", leave=False):
        start = time.perf_counter()
        rng = round_rng(cfg.seed, t)
        selected, q = cfg.sampler.sample(K, rng, t - 1), cfg.sampler.rate(K, t - 1)
        x, y, _ = fd.batches(selected, cfg.batch_size, cfg.local_steps, rng, sampling=cfg.batch_sampling)
        m = selected.size
        lr = cfg.local.lr * (cfg.lr_decay[0] ** ((t - 1) * cfg.local_steps / cfg.lr_decay[1]) if cfg.lr_decay else 1.0)
        start_params = {k: v.unsqueeze(0).repeat(m, *[1] * v.ndim) for k, v in global_.items()}
        local, _ = local_train(model, cfg.local, start_params, init_state(start_params, cfg.local), x, y,
                               client_generators(cfg.seed, t, selected), [lr] * m, chunk=cfg.chunk)
        updates = {k: local[k] - global_[k] for k in global_}
        v_c, u_s = spread(updates)
        noise_gen = torch.Generator().manual_seed(int(rng.integers(2 ** 62)))
        if cfg.clip == "median":
            bound = server.median_bounds(updates)
        elif cfg.clip == "adaptive":
            bound = adaptive_bound
        else:
            bound = cfg.clip
        clipped, norms = server.clip_updates(updates, bound, per_layer=cfg.per_layer)
        step = server.gaussian_mean(clipped, bound, z, noise_gen, per_layer=cfg.per_layer)
        if cfg.clip == "adaptive":
            adaptive_bound, _ = server.adaptive_clip(norms, adaptive_bound, target_quantile=cfg.target_quantile,
                                                     lr=cfg.clip_lr, count_noise_std=cfg.count_noise_std,
                                                     generator=noise_gen)
        global_ = {k: global_[k] + step[k] for k in global_}
        if cfg.noise_multiplier > 0:
            accountant.compose(cfg.sampler.event(cfg.noise_multiplier, K, t - 1), cfg.accumulations_per_round)
            paper.compose(SampledGaussianEvent(cfg.noise_multiplier, q, "poisson"), cfg.accumulations_per_round)
            delta, delta_paper = accountant.delta(cfg.target_eps), paper.delta(cfg.target_eps)
        else:
            delta = delta_paper = 1.0
        mean_norm = (float(torch.stack(list(norms.values())).mean()) if isinstance(norms, dict) else float(norms.mean()))
        acc, loss = shared_accuracy(model, global_, fd.test_x, fd.test_y, *pool, with_loss=True)
        rows.append({"round": t, "clients": int(m), "q": q, "lr": lr,
                     "acc_global": float(acc.mean()), "loss_global": float(loss.mean()),
                     "delta": delta, "delta_paper": delta_paper, "mean_update_norm": mean_norm,
                     "clip_bound": (float(np.mean(list(bound.values()))) if isinstance(bound, dict) else float(bound)),
                     "V_c": v_c, "U_s": u_s, "seconds": time.perf_counter() - start})
        over = _over_budget(cfg, rows[-1])
        if checkpoint is not None and cfg.checkpoint_every and (t % cfg.checkpoint_every == 0 or over):
            checkpoints.save(checkpoint, key, {"round": t, "global": global_, "bound": adaptive_bound, "rows": rows,
                                               "accountant": accountant.state_dict(),
                                               "paper_accountant": paper.state_dict()})
        if over:
            break            # Geyer's code returns this model: the first whose δ exceeds the budget
    return pd.DataFrame(rows)


def _over_budget(cfg: ClientDPConfig, row: dict) -> bool:
    """The stopping rule: δ of ``cfg.stop_on``'s accounting has exceeded ``cfg.delta_budget``."""
    return cfg.delta_budget is not None and row["delta" if cfg.stop_on == "guarantee" else "delta_paper"] > cfg.delta_budget
