"""PriFedSync (Zheng et al. 2021, Alg. 1) with DP-SGD clients (Alg. 2), as one algorithm of the
round loop (:mod:`dpfl.federated.loop`).

One round: the sampled clients run K local steps at once (``local_train``) → each trained local
model is evaluated on its own test set (the accuracy Zheng et al.'s code stores and averages, stale
for unselected clients; docs/zheng2021.md §2) → elastic averaging (η, α) → the global model is evaluated
on every client's test set (and, every ``eval_every`` rounds, every client's local model: the clean
personalised metric). Accounting: the batch sampler's event (``sampling.batch_event``) K times per
round into the GDP central-limit accountant: Theorem 2's μ_max, an approximation; a run without
noise composes a ``NonPrivateEvent`` (μ_max = ∞: no guarantee).

Randomness: round t's client sample and batches come from a generator seeded by (seed, t), and
client c's dropout masks and DP noise from one seeded by (seed, t, c), so a resumed run reproduces
the uninterrupted one exactly, and the chunk size never changes the numbers.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant
from dpfl.data.augment import crop_flip
from dpfl.data.federated import FederatedDataset
from dpfl.federated import server
from dpfl.federated.evaluate import accuracy, accuracy_cache, refresh_accuracy
from dpfl.federated.local import client_generators, init_state, local_train, put, take
from dpfl.federated.loop import Algorithm, LoopConfig, Privacy, Round
from dpfl.federated.sampling import batch_event

__all__ = ["RoundConfig", "PriFedSync"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundConfig(LoopConfig):
    """One PriFedSync run (Zheng et al. Alg. 1 with Alg. 2 clients; docs/zheng2021.md §2): the loop's
    settings (:class:`~dpfl.federated.loop.LoopConfig`; Zheng's CIFAR-10 code: ``lr_schedule =
    LearningRate(0.99, 10, per="client_epoch")``, a StepLR per client epoch) and elastic averaging's
    ``alpha``, ``eta``. ``augment``: random crop (padding 4) + horizontal flip of every training image
    (CIFAR-10). ``stop_at``: stop after the first round whose stored local accuracy (the paper's
    metric) reaches it. ``eval_every`` (the loop's): how often every client's local model is evaluated.
    """

    alpha: float = 0.1
    eta: float = 1.0
    augment: bool = False
    stop_at: float | None = None

    def __post_init__(self):
        super().__post_init__()
        checks.in_range("alpha", self.alpha, 0, 1)
        checks.in_range("eta", self.eta, 0, 1)
        if self.stop_at is not None:
            checks.in_range("stop_at", self.stop_at, 0, 1)


class PriFedSync(Algorithm):
    """The algorithm's state (global model, every client's local model and optimiser state, stored
    accuracies, local epochs) and its round; run it with :func:`dpfl.federated.loop.run`, which gives
    one row per round: ``acc_stored_local`` (the paper's metric), ``acc_global``/``loss_global`` (the
    global model on every client's test set), ``acc_local_all`` (every client's own model, every
    ``eval_every`` rounds), ``mu_max_clt`` (Theorem 2's μ_max: the GDP central-limit
    **approximation** the paper reports; ∞ for a run without noise), the mean learning rate and the round's wall time. On
    "cuda" every sampled client trains in one vmapped call; a CPU run and a GPU run draw different
    noise."""

    progress_metric = "acc_stored_local"

    def setup(self, fd: FederatedDataset, device: str) -> None:
        super().setup(fd, device)
        cfg, K = self.cfg, fd.num_clients
        init = self.initial_params(device)
        self.state = {
            "global": init,
            "local": {k: v.unsqueeze(0).repeat(K, *[1] * v.ndim) for k, v in init.items()},
            "stored_acc": torch.zeros(K, device=device),
            "epochs": torch.zeros(K, dtype=torch.long, device=device),
            "local_acc": accuracy_cache(K, device),        # evaluate() recomputes the moved local models only
        }
        self.state["opt"] = init_state(self.state["local"], cfg.local)
        self.test = fd.test_batch(np.arange(K))
        # Zheng's μ_max: the CLT of the busiest client's steps (the smallest client has the largest B/n);
        # without DP-SGD's noise the event is a NonPrivateEvent (μ = ∞)
        self.event = batch_event(cfg.local.noise_multiplier if cfg.local.dp else 0.0, cfg.batch_size,
                                 int(fd.client_sizes.min()))

    def accountants(self) -> list[Privacy]:
        return [Privacy("record", Accountant("gdp-clt"), lambda a: {"mu_max_clt": a.mu()})]

    def events(self, r: Round) -> dict:
        return {"record": [(self.event, self.cfg.local_steps)]}

    def round(self, r: Round) -> dict:
        cfg, fd, model, state = self.cfg, self.fd, self.model, self.state
        x_test, y_test, m_test = self.test
        x, y, _ = fd.batches(r.selected, cfg.batch_size, cfg.local_steps, r.rng)
        if cfg.augment:                             # offsets from a CPU generator: the same crops on every device
            x = crop_flip(x, r.torch_generator("cpu"), fill=fd.black)
        idx = torch.as_tensor(r.selected, device=r.device)
        params, opt = take(state["local"], idx), take(state["opt"], idx)
        sched = cfg.lr_schedule
        lr = None if sched.constant else sched(cfg.local.lr, sched.count(r.t, cfg.local_steps, state["epochs"][idx]))
        params, opt = local_train(model, cfg.local, params, opt, x, y,
                                  client_generators(cfg.seed, r.t, r.selected, device=r.device), lr, chunk=cfg.chunk)
        state["epochs"][idx] += 1
        put(state["local"], idx, params)
        put(state["opt"], idx, opt)
        state["stored_acc"][idx] = accuracy(model, params, x_test[idx], y_test[idx], m_test[idx], stacked=True)
        stored = float(state["stored_acc"].mean())
        state["global"], state["local"] = server.elastic(state["global"], state["local"], r.selected,
                                                         cfg.alpha, cfg.eta)
        state["local_acc"]["stale"][idx] = True                      # their local models moved
        acc_global, loss_global = self.evaluate_global(state["global"])
        return {
            "acc_stored_local": stored,                                  # the paper's metric
            "acc_global": float(acc_global.mean()),
            "loss_global": float(loss_global.mean()),
            "lr_mean": float(torch.as_tensor(lr).mean()) if lr is not None else cfg.local.lr,
        }

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint written before ``local_acc`` existed loads with every client to evaluate."""
        state.setdefault("local_acc", accuracy_cache(self.K, self.test[0].device))
        self.state = state

    def evaluate(self, r: Round) -> dict:
        """Every client's own model on its test set: the clean personalised metric — recomputed for
        the clients whose local model moved since the last evaluation (``refresh_accuracy``: the same
        numbers as evaluating all, half the work at p = 0.5)."""
        acc = refresh_accuracy(self.model, self.state["local"], self.test, self.state["local_acc"])
        return {"acc_local_all": float(acc.mean())}

    def stop(self, row: dict) -> bool:
        """The paper's metric has reached ``cfg.stop_at``."""
        return self.cfg.stop_at is not None and row["acc_stored_local"] >= self.cfg.stop_at

