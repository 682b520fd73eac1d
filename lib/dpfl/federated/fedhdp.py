"""FedHDP (Aldaghri, Mahdavifar & Beirami; Alg. 2; details.md §3.2): federated learning where
each client picks its privacy level.

Clients belong to privacy groups (e.g. non-private, private). Each round the sampled clients train
from the global model w_t (non-private local SGD) and send Δ_k. Per group l: a DP-FedAvg average —
clip to the group's bound C_l (adaptive, Andrew et al.: ``server.adaptive_clip``), average, add
N(0, (z_Δ,l C_l / N_l)²) with z_Δ,l the effective multiplier that leaves room for the noised
clipped count — or, for a group with z_l = 0, the plain mean. Then ``server.two_step`` weights the
group averages by r_l N_l. Ditto personalises every participating client:
v_k ← steps on f_k(v) + λ_l/2·‖v − w_t‖². With ratios (1, 1) this is HDP-FedAvg; with every
group at the same z it is DP-FedAvg (with Ditto); r = 0 ignores the private clients.

Metrics follow the paper's: the global model on the server test set (``Acc_g``) and on each
group's local test sets (``Acc_g,l``); personalised models on their own test sets (``Acc_l,l``);
gaps Δ_g, Δ_l between the first two groups; per group the clip bound and ε(δ) by RDP accounting
of the sampled Gaussian (q = the group's expected participation rate).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant
from dpfl.data.federated import FederatedDataset
from dpfl.federated import checkpoint as checkpoints
from dpfl.federated import server
from dpfl.federated.evaluate import accuracy, shared_accuracy
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train, put, take
from dpfl.federated.personalize import ditto
from dpfl.federated.sampling import FixedClients, PoissonClients, round_rng
from dpfl.models import Model

__all__ = ["FedHDPConfig", "train_fedhdp"]


@dataclasses.dataclass(frozen=True)
class FedHDPConfig:
    """One FedHDP run. Per group l (tuples, one entry per group): ``noise_multipliers`` z_l (0 =
    non-private), ``ratios`` r_l of the two-step aggregation, ``lams`` Ditto's λ_l.
    ``lr_decay`` = (factor, every): the clients' lr × factor every ``every`` rounds (Table 7: 0.9 / 50).
    ``count_noise_frac``: σ_b = frac × the group's expected clients per round (Andrew et al.: 0.05)."""

    rounds: int
    batch_size: int
    local_steps: int
    sampler: PoissonClients | FixedClients
    local: LocalConfig
    noise_multipliers: tuple
    ratios: tuple
    lams: tuple
    personal_lr: float
    personal_steps: int | None = None
    clip_init: float = 0.1
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise_frac: float = 0.05
    lr_decay: tuple = ()
    delta: float = 1e-5
    eval_every: int = 1
    checkpoint_every: int = 0
    seed: int = 0

    def __post_init__(self):
        checks.positive_int("rounds", self.rounds)
        if self.local.dp:
            raise ValueError("local must be non-private (dp=False): FedHDP adds noise at the server, per group")
        n = len(self.noise_multipliers)
        if not (n == len(self.ratios) == len(self.lams)) or n == 0:
            raise ValueError("noise_multipliers, ratios and lams must have one entry per privacy group")
        for z in self.noise_multipliers:
            checks.nonnegative("noise_multipliers", z)
        for r in self.ratios:
            checks.in_range("ratios", r, 0, 1)
        for lam in self.lams:
            checks.nonnegative("lams", lam)
        checks.positive("personal_lr", self.personal_lr)
        checks.positive("clip_init", self.clip_init)
        checks.positive("count_noise_frac", self.count_noise_frac)
        if self.lr_decay:
            if len(self.lr_decay) != 2:
                raise ValueError(f"lr_decay must be (factor, every_rounds); got {self.lr_decay!r}")
            checks.in_range("lr_decay factor", self.lr_decay[0], 0, 1, lo_open=True)
            checks.positive_int("lr_decay every_rounds", self.lr_decay[1])
        checks.in_range("delta", self.delta, 0, 1, lo_open=True, hi_open=True)
        checks.in_range("target_quantile", self.target_quantile, 0, 1, lo_open=True, hi_open=True)
        checks.positive("clip_lr", self.clip_lr)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("local_steps", self.local_steps)
        if self.personal_steps is not None:
            checks.positive_int("personal_steps", self.personal_steps)
        checks.positive_int("eval_every", self.eval_every)
        checks.nonnegative_int("checkpoint_every", self.checkpoint_every)
        checks.nonnegative_int("seed", self.seed)


def train_fedhdp(model: Model, fd: FederatedDataset, groups, cfg: FedHDPConfig, *, server_test=None,
                 checkpoint: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Run FedHDP; ``groups``: each client's privacy group (0, 1, …); ``server_test``: (x, y) of
    the server test set for ``acc_g`` (default: the union of the clients' test sets). One row per
    round. With ``checkpoint``, state is saved every ``cfg.checkpoint_every`` rounds and a run that
    finds a checkpoint resumes from it."""
    K = fd.num_clients
    groups = np.asarray(groups, dtype=np.int64)
    L = len(cfg.noise_multipliers)
    if groups.shape != (K,) or groups.min() < 0 or groups.max() >= L:
        raise ValueError(f"groups must give each of the {K} clients a group in 0..{L - 1}")
    if (fd.client_sizes < cfg.batch_size).any():
        raise ValueError(f"batch_size {cfg.batch_size} exceeds the data of some clients "
                         f"(smallest has {int(fd.client_sizes.min())})")
    expected = [cfg.sampler.rate(K) * int((groups == l).sum()) for l in range(L)]
    count_std = [cfg.count_noise_frac * max(e, 1e-9) for e in expected]
    z_update = [server.effective_noise_multiplier(z, s) if z > 0 else 0.0
                for z, s in zip(cfg.noise_multipliers, count_std)]
    accountants = [Accountant("rdp") if z > 0 else None for z in cfg.noise_multipliers]
    global_ = model.init(torch.Generator().manual_seed(int(cfg.seed)))
    personal = {k: v.unsqueeze(0).repeat(K, *[1] * v.ndim) for k, v in global_.items()}
    bounds = [cfg.clip_init] * L
    x_test, y_test, m_test = fd.test_batch(np.arange(K))
    pool = fd.test_index(np.arange(K))                     # each client's test images in the shared pool
    if server_test is None:
        union = torch.unique(pool[0][pool[1]])
        server_x, server_y = fd.test_x[union], fd.test_y[union]
    else:
        server_x, server_y = server_test
    rows = []
    first = 1
    key = checkpoints.run_key(model, fd, cfg)
    saved = checkpoints.load(checkpoint, key)
    if saved is not None:
        if not np.array_equal(saved["groups"], groups):
            raise ValueError(f"checkpoint {checkpoint} was written with other privacy groups")
        global_, personal, bounds, rows, first = (saved["global"], saved["personal"], saved["bounds"], saved["rows"],
                                                  saved["round"] + 1)
        for acc, state in zip(accountants, saved["accountants"]):
            if acc is not None:
                acc.load_state_dict(state)
    from tqdm.auto import tqdm

    for t in tqdm(range(first, cfg.rounds + 1), disable=not progress, desc="rounds", leave=False):
        start = time.perf_counter()
        rng = round_rng(cfg.seed, t)
        selected = cfg.sampler.sample(K, rng, t - 1)
        m = selected.size
        x, y, _ = fd.batches(selected, cfg.batch_size, cfg.local_steps, rng)
        lr = cfg.local.lr * (cfg.lr_decay[0] ** ((t - 1) // cfg.lr_decay[1]) if cfg.lr_decay else 1.0)
        start_params = {k: v.unsqueeze(0).repeat(m, *[1] * v.ndim) for k, v in global_.items()}
        gens = client_generators(cfg.seed, t, selected)
        local, _ = local_train(model, cfg.local, start_params, init_state(start_params, cfg.local), x, y, gens,
                               [lr] * m)
        updates = {k: local[k] - global_[k] for k in global_}
        noise_gen = torch.Generator().manual_seed(int(rng.integers(2 ** 62)))
        means, counts = [], []
        row = {"round": t, "clients": int(m), "lr": lr}
        for l in range(L):
            members = torch.as_tensor(np.flatnonzero(groups[selected] == l))
            counts.append(int(members.numel()))
            if members.numel() == 0:
                means.append({k: torch.zeros_like(v) for k, v in global_.items()})
                continue
            group_updates = {k: v[members] for k, v in updates.items()}
            if cfg.noise_multipliers[l] > 0:
                clipped, norms = server.clip_updates(group_updates, bounds[l])
                means.append(server.gaussian_mean(clipped, bounds[l], z_update[l], noise_gen))
                row[f"clip_{l}"] = bounds[l]
                bounds[l], _ = server.adaptive_clip(norms, bounds[l], target_quantile=cfg.target_quantile,
                                                    lr=cfg.clip_lr, count_noise_std=count_std[l], generator=noise_gen)
            else:
                means.append(server.fedavg(group_updates))
        if any(c * r > 0 for c, r in zip(counts, cfg.ratios)):
            step = server.two_step(means, counts, cfg.ratios)
            anchor = global_
            global_ = {k: global_[k] + step[k] for k in global_}
        else:
            anchor = global_
        # Ditto: every participating client's personal model, pulled toward the w_t it received
        steps = cfg.personal_steps or cfg.local_steps
        for l in range(L):
            sel = selected[groups[selected] == l]
            if sel.size == 0:
                continue
            pos = np.flatnonzero(groups[selected] == l)
            idx = torch.as_tensor(sel)
            new = ditto(model, take(personal, idx), anchor, x[pos][:, :steps], y[pos][:, :steps],
                        [gens[i] for i in pos], lam=cfg.lams[l], lr=cfg.personal_lr)
            put(personal, idx, new)
        acc_g_clients, loss_g_clients = shared_accuracy(model, global_, fd.test_x, fd.test_y,
                                                        *pool, with_loss=True)
        row["loss_g"] = float(loss_g_clients.mean())
        with torch.no_grad():
            row["acc_g"] = float((model.forward(global_, server_x, None).argmax(-1) == server_y).float().mean())
        evaluate_personal = t % cfg.eval_every == 0 or t == cfg.rounds
        acc_l_clients = (accuracy(model, personal, x_test, y_test, m_test, stacked=True) if evaluate_personal else None)
        for l in range(L):
            members = torch.as_tensor(groups == l)
            row[f"acc_g_{l}"] = float(acc_g_clients[members].mean())
            row[f"acc_l_{l}"] = float(acc_l_clients[members].mean()) if evaluate_personal else np.nan
            if accountants[l] is not None:
                accountants[l].compose(cfg.sampler.event(cfg.noise_multipliers[l], K, t - 1))
                row[f"eps_{l}"] = accountants[l].epsilon(cfg.delta)
        if L >= 2:
            row["delta_g"] = row["acc_g_0"] - row["acc_g_1"]
            row["delta_l"] = row["acc_l_0"] - row["acc_l_1"]
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
        if checkpoint is not None and cfg.checkpoint_every and t % cfg.checkpoint_every == 0:
            checkpoints.save(checkpoint, key, {"round": t, "global": global_, "personal": personal, "bounds": bounds,
                                               "rows": rows, "groups": groups,
                                               "accountants": [a.state_dict() if a is not None else None
                                                               for a in accountants]})
    return pd.DataFrame(rows)
