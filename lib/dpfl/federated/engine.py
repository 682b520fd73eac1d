"""The round loop of Zheng et al.'s PriFedSync (Alg. 1) with DP-SGD clients (Alg. 2).

One round: sample clients → K local steps of every sampled client at once (``local_train``) →
evaluate each trained local model on its own test set (the accuracy Zheng et al.'s code stores
and averages, stale for unselected clients; details.md §1.4) → elastic averaging (η, α) →
evaluate the global model on every client's test set (and, every ``eval_every`` rounds, every
client's local model: the clean personalised metric) → account μ_max (Zheng Thm 2).

Randomness: round t's client sample and batches come from a generator seeded by (seed, t), and
client c's dropout masks and DP noise from one seeded by (seed, t, c), so an interrupted run
resumed from a checkpoint (written atomically every ``checkpoint_every`` rounds) reproduces the
uninterrupted one exactly, and the chunk size never changes the numbers.
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
from dpfl.data.augment import crop_flip
from dpfl.data.federated import FederatedDataset
from dpfl.device import configure
from dpfl.federated import checkpoint as checkpoints
from dpfl.federated import server
from dpfl.federated.evaluate import accuracy, shared_accuracy
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train, put, take
from dpfl.federated.sampling import FixedClients, PoissonClients, batch_event, round_rng
from dpfl.models import Model

__all__ = ["RoundConfig", "train"]


@dataclasses.dataclass(frozen=True)
class RoundConfig:
    """One PriFedSync run (Zheng et al. Alg. 1 with Alg. 2 clients; details.md §1.4).

    ``lr_step``/``lr_gamma``: StepLR per client epoch — a client's learning rate is
    lr·γ^⌊e/step⌋ after e local epochs of its own (one epoch = one round it took part in; 0 = constant).
    ``augment``: random crop (padding 4) + horizontal flip of every training image (CIFAR-10).
    ``stop_at``: stop after the first round whose stored local accuracy (the paper's metric) reaches it.
    """

    rounds: int
    batch_size: int
    local_steps: int
    sampler: PoissonClients | FixedClients
    local: LocalConfig
    alpha: float = 0.1
    eta: float = 1.0
    seed: int = 0
    chunk: int | None = None
    eval_every: int = 1
    checkpoint_every: int = 0
    lr_step: int = 0
    lr_gamma: float = 1.0
    augment: bool = False
    stop_at: float | None = None

    def __post_init__(self):
        checks.positive_int("rounds", self.rounds)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("local_steps", self.local_steps)
        checks.in_range("alpha", self.alpha, 0, 1)
        checks.in_range("eta", self.eta, 0, 1)
        checks.positive_int("eval_every", self.eval_every)
        checks.nonnegative_int("seed", self.seed)
        checks.nonnegative_int("checkpoint_every", self.checkpoint_every)
        checks.nonnegative("lr_step", self.lr_step)
        checks.in_range("lr_gamma", self.lr_gamma, 0, 1, lo_open=True)
        if self.stop_at is not None:
            checks.in_range("stop_at", self.stop_at, 0, 1)
        if not isinstance(self.sampler, (PoissonClients, FixedClients)):
            raise ValueError("sampler must be PoissonClients or FixedClients")


def train(model: Model, fd: FederatedDataset, cfg: RoundConfig, *, checkpoint: Path | None = None,
          progress: bool = True, device: str = "cpu") -> pd.DataFrame:
    """Run ``cfg.rounds`` rounds (or until ``cfg.stop_at``); one metrics row per round (a tidy DataFrame):
    ``acc_stored_local`` (the paper's metric), ``acc_global``/``loss_global`` (the global model on every
    client's test set), ``acc_local_all`` (every client's own model, every ``eval_every`` rounds),
    ``mu_max_clt`` (Theorem 2's μ_max: the GDP central-limit **approximation** the paper reports, from
    the accounting event of the batch sampler, ``sampling.batch_event``), the mean learning rate and
    the round's wall time.

    With ``checkpoint`` set, state (with the accountant's events) is saved there every
    ``cfg.checkpoint_every`` rounds and a run finding a checkpoint resumes from it; a checkpoint of
    another configuration is refused (``dpfl.federated.checkpoint``). ``device``: where models, batches and noise live ("cuda"
    trains every sampled client in one vmapped call; a CPU run and a GPU run draw different noise).
    """
    K = fd.num_clients
    private = cfg.local.dp and cfg.local.noise_multiplier > 0
    if tuple(fd.train_x.shape[1:]) != tuple(model.input_shape):
        raise ValueError(f"data of shape {tuple(fd.train_x.shape[1:])} do not fit {model.name} "
                         f"(expects {tuple(model.input_shape)})")
    if (fd.client_sizes < cfg.batch_size).any():
        raise ValueError(f"batch_size {cfg.batch_size} exceeds the data of some clients "
                         f"(smallest has {int(fd.client_sizes.min())})")
    if isinstance(cfg.sampler, FixedClients) and cfg.sampler.m > K:
        raise ValueError(f"m = {cfg.sampler.m} exceeds the number of clients K = {K}")

    configure(device)
    fd = fd.to(device)                              # once: each round ships only batch indices
    init = {k: v.to(device) for k, v in model.init(torch.Generator().manual_seed(int(cfg.seed))).items()}
    state = {
        "round": 0,
        "global": init,
        "local": {k: v.unsqueeze(0).repeat(K, *[1] * v.ndim) for k, v in init.items()},
        "stored_acc": torch.zeros(K, device=device),
        "epochs": torch.zeros(K, dtype=torch.long, device=device),
        "metrics": [],
    }
    state["opt"] = init_state(state["local"], cfg.local)
    n_min = int(fd.client_sizes.min())
    # Zheng's μ_max: the CLT of the busiest client's steps (the smallest client has the largest B/n)
    event = batch_event(cfg.local.noise_multiplier, cfg.batch_size, n_min) if private else None
    accountant = Accountant("gdp-clt")
    key = checkpoints.run_key(model, fd, cfg)
    saved = checkpoints.load(checkpoint, key, device)
    if saved is not None:
        state = saved
        accountant.load_state_dict(state["accountant"])
        if state["metrics"] and _reached(cfg, state["metrics"][-1]["acc_stored_local"]):
            return pd.DataFrame(state["metrics"])
    x_test, y_test, m_test = fd.test_batch(np.arange(K))
    pool_x, pool_y = fd.test_x, fd.test_y
    pool_index, pool_mask = fd.test_index(np.arange(K))

    from tqdm.auto import tqdm

    bar = tqdm(total=cfg.rounds, initial=state["round"], disable=not progress, desc="rounds", leave=False)
    for t in range(state["round"] + 1, cfg.rounds + 1):
        start = time.perf_counter()
        rng = round_rng(cfg.seed, t)
        selected = cfg.sampler.sample(K, rng, t - 1)
        x, y, _ = fd.batches(selected, cfg.batch_size, cfg.local_steps, rng)
        if cfg.augment:                             # offsets from a CPU generator: the same crops on every device
            x = crop_flip(x, torch.Generator().manual_seed(int(rng.integers(2 ** 62))), fill=fd.black)
        idx = torch.as_tensor(selected, device=device)
        params, opt = take(state["local"], idx), take(state["opt"], idx)
        lr = cfg.local.lr * cfg.lr_gamma ** (state["epochs"][idx] // cfg.lr_step).double() if cfg.lr_step else None
        params, opt = local_train(model, cfg.local, params, opt, x, y,
                                  client_generators(cfg.seed, t, selected, device=device), lr, chunk=cfg.chunk)
        state["epochs"][idx] += 1
        put(state["local"], idx, params)
        put(state["opt"], idx, opt)
        state["stored_acc"][idx] = accuracy(model, params, x_test[idx], y_test[idx], m_test[idx], stacked=True)
        done = _reached(cfg, float(state["stored_acc"].mean()))
        if private:
            accountant.compose(event, cfg.local_steps)
        state["global"], state["local"] = server.elastic(state["global"], state["local"], selected,
                                                         cfg.alpha, cfg.eta)
        acc_global, loss_global = shared_accuracy(model, state["global"], pool_x, pool_y, pool_index, pool_mask,
                                                  with_loss=True)
        row = {
            "round": t,
            "clients": int(selected.size),
            "acc_stored_local": float(state["stored_acc"].mean()),      # the paper's metric
            "acc_global": float(acc_global.mean()),
            "loss_global": float(loss_global.mean()),
            "acc_local_all": (float(accuracy(model, state["local"], x_test, y_test, m_test, stacked=True).mean())
                              if t % cfg.eval_every == 0 or t == cfg.rounds or done else np.nan),
            "lr_mean": float(lr.mean()) if lr is not None else cfg.local.lr,
            "mu_max_clt": accountant.mu() if private else np.inf if cfg.local.dp else 0.0,
            "seconds": time.perf_counter() - start,
        }
        state["metrics"].append(row)
        state["round"] = t
        bar.update(1)
        bar.set_postfix(acc=f"{row['acc_stored_local']:.3f}")
        state["accountant"] = accountant.state_dict()
        if checkpoint is not None and cfg.checkpoint_every and (t % cfg.checkpoint_every == 0 or done):
            checkpoints.save(checkpoint, key, state)
        if done:
            break
    bar.close()
    return pd.DataFrame(state["metrics"])


def _reached(cfg: RoundConfig, stored_accuracy: float) -> bool:
    """The stopping rule: the paper's metric has reached ``cfg.stop_at``."""
    return cfg.stop_at is not None and stored_accuracy >= cfg.stop_at
