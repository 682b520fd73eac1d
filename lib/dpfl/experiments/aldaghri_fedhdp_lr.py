"""Ditto's personal learning rate η_p on FEMNIST (FedHDP §5, Table 7; docs/aldaghri_fedhdp.md §5).

Table 7 gives FEMNIST η_p = 2.0 (the row's label was lost; reading it as η_p is our inference, docs §1), a hundred
times the clients' lr 0.02 for the same CNN. With it our FEMNIST runs' personal models diverged (2026-12-07: in a
grid unit's checkpoint after 16 rounds, 15, 81 and 100 of the 100 writers' models at λ = 0.05, 0.2 and 1 held NaN),
and their accuracy was read as the arg-max of NaNs. The paper tuned its hyper-parameters on the non-private
baseline (§5); :class:`PersonalLrProbe` tunes η_p so, cheaply:

1. a global model trained by Non-Private+Ditto for ``anchor_rounds`` rounds at Table 7's setting (validation split)
   is the point w that Ditto's proximal term pulls toward;
2. ``clients`` writers, drawn once, train personal models from the run's initial weights, as in a run, for
   ``participations`` rounds' worth of Ditto steps (Table 7's epochs) toward that w, at every η_p of ``lrs`` and
   λ of ``lams`` — all in one call (a λ and an η_p per client), the same batches and dropout masks for each;
3. each model is scored on its writer's validation set: accuracy (NaN once it has diverged) and whether it
   stayed finite.

:func:`choose` takes the η_p whose models stay finite at every λ of the grid and score best at their best λ. The
fixed anchor stands in for the moving one of a run: a proxy for the tuning, labelled so where it prints.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from dpfl import checks
from dpfl.experiments import aldaghri_fedhdp_fl as fl
from dpfl.experiments.runner import TrainingRun
from dpfl.federated.evaluate import accuracy
from dpfl.federated.local import client_generators
from dpfl.federated.personalize import ditto

__all__ = ["PersonalLrProbe", "choose"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PersonalLrProbe(TrainingRun):
    """The probe of the module doc on ``dataset`` at ``profile``'s sizes (its q, data and epochs); ``lrs``:
    the η_p tried, Table 7's first; ``lams``: Ditto's λ grid (:data:`~dpfl.experiments.aldaghri_fedhdp_fl.SETTINGS`)."""

    code_version: ClassVar[int] = 1

    dataset: str = "femnist"
    profile: str = "paper"
    anchor_rounds: int = 30
    lrs: tuple = (2.0, 1.0, 0.5, 0.2, 0.1, 0.05, 0.02)
    lams: tuple = (0.05, 0.2, 1.0)
    clients: int = 30
    participations: int = 3

    def __post_init__(self):
        super().__post_init__()
        checks.one_of("dataset", self.dataset, tuple(fl.DATASETS))
        checks.one_of("profile", self.profile, tuple(fl.SETTINGS))
        checks.positive_int("anchor_rounds", self.anchor_rounds)
        checks.positive_int("clients", self.clients)
        checks.positive_int("participations", self.participations)
        if not self.lrs or not self.lams:
            raise ValueError("lrs and lams must each hold at least one value")
        for lr in self.lrs:
            checks.positive("lrs", lr)
        for lam in self.lams:
            checks.nonnegative("lams", lam)

    def anchor(self) -> fl.FedHDPRun:
        """The Non-Private+Ditto run whose global model is the anchor (Table 7's η_p: it does not move w)."""
        common = fl._common(self.profile, self.dataset, **self.placement())
        common.pop("personal_lr", None)
        return fl.FedHDPRun(algorithm="Non-Private+Ditto", lam_np=self.lams[0], lam_p=self.lams[0], seed=self.seed,
                            **common | {"rounds": self.anchor_rounds})

    def compute(self) -> pd.DataFrame:
        """One row per (η_p, λ): ``finite`` (the share of the writers' models without a NaN or ±∞),
        ``accuracy`` (their mean validation accuracy, NaN if any diverged), ``anchor accuracy`` (w's, the same
        writers) and the anchor's ``Acc_g``."""
        run = self.anchor()
        fed = run.federation()
        algorithm = run.algorithm_for(fed)
        metrics = run.train(algorithm, fed.data)
        device, cfg, fd = self.device, algorithm.cfg, fed.data.to(self.device)
        w = algorithm.state["global"]
        ids = np.sort(np.random.default_rng(self.seed).choice(fd.num_clients, min(self.clients, fd.num_clients),
                                                              replace=False))
        combos = [(lr, lam) for lr in self.lrs for lam in self.lams]
        n, m = len(combos), len(ids)
        init = algorithm.initial_params(device)
        personal = {k: v.unsqueeze(0).repeat(n * m, *[1] * v.ndim) for k, v in init.items()}
        lrs, lams = (np.repeat([c[j] for c in combos], m) for j in (0, 1))
        rng = np.random.default_rng([self.seed, 1])
        tile = lambda t: t.repeat(n, *[1] * (t.ndim - 1))                       # every (η_p, λ), the same data
        for p in tqdm(range(self.participations), desc="η_p probe", disable=not self.progress, leave=False):
            x, y, _ = fd.batches(ids, cfg.batch_size, cfg.local_steps, rng)
            gens = client_generators(self.seed, p, np.tile(ids, n), device=device)   # one stream a writer
            personal = ditto(algorithm.model, personal, w, tile(x), tile(y), gens, lam=lams, lr=lrs, chunk=cfg.chunk)
        test = fd.test_batch(ids)
        acc = accuracy(algorithm.model, personal, *map(tile, test), stacked=True).reshape(n, m).cpu().numpy()
        finite = torch.stack([torch.isfinite(v.reshape(n * m, -1)).all(1) for v in personal.values()]).all(0)
        finite = finite.reshape(n, m).cpu().numpy()
        base = accuracy(algorithm.model, w, *test, stacked=False).cpu().numpy()
        return pd.DataFrame({"η_p": [c[0] for c in combos], "λ": [c[1] for c in combos],
                             "finite": finite.mean(1), "accuracy": acc.mean(1),
                             "anchor accuracy": base.mean(), "anchor Acc_g": float(metrics["acc_g"].iloc[-1])})


def choose(table: pd.DataFrame) -> float:
    """The η_p whose personal models stay finite at every λ of ``table`` (:meth:`PersonalLrProbe.compute`)
    and whose best λ scores best; raises if none stays finite."""
    stable = table.groupby("η_p").filter(lambda g: (g["finite"] == 1).all())
    if stable.empty:
        raise ValueError("no η_p of the probe kept every personal model finite: try smaller ones")
    return float(stable.groupby("η_p")["accuracy"].max().idxmax())
