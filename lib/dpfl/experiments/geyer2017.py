"""Geyer, Klein & Nabi (2017), *Differentially Private Federated Learning: A Client Level Perspective*
(arXiv:1712.07557): the experiments of §4–6, as the authors' code runs them (docs/geyer2017.md).

Data: MNIST sorted by label, shards of 250 of the first 50 000 training images, 2 per client (500
images; the paper says 600: ``split="paper"`` takes shards of 300 of all 60 000 and the test set);
accuracy on the 10 000 held-out images (50 000–60 000, their validation set), dealt to the clients in
equal disjoint slices so that the mean over clients is the accuracy on all of them. Model: FC
784-600-100-10 without biases; plain SGD, lr 0.1·0.1^(s/27 000) by global step s; E epochs over the
client's data in b batches. Server: m_t of K without replacement, per-layer clipping at the round's
median norm (not privatised), N(0, σ²S²) per layer on the sum, divided by m_t. Accounting: their
code's moments accountant (Poisson at q = m_t/K, orders 1…32, 3 accumulations per round, ε = 8),
stopping once δ > δ′ and returning that model; next to it, in every row, δ of the mechanism as run
(``ClientLevelDP``: m_t of K without replacement, replace-one, the 3 layers' noise as one Gaussian).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant, NonPrivateEvent, SampledGaussianEvent
from dpfl.data import FederatedDataset, load_dataset, partition
from dpfl.data.datasets import Dataset
from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
from dpfl.federated.local import LocalConfig
from dpfl.experiments.runner import TrainingRun
from dpfl.federated.loop import Privacy, Round
from dpfl.federated.sampling import FixedClients
from dpfl.federated.schedule import LearningRate
from dpfl.models import GEYER_MLP

__all__ = ["EPS", "DELTA_BUDGET", "PUBLISHED", "published", "paper_accountant", "paper_round", "GeyerConfig", "GeyerDP",
           "spread", "median_shift", "federated_mnist", "paper_stop_round", "ramp", "GeyerRun", "outcome", "best", "SETTINGS",
           "dp_grid", "cached_grid", "nondp_run", "same_ratio_runs", "grid", "main"]

#: ε of every run (the paper, §4, after Abadi et al.)
EPS = 8.0
#: δ′ per number of clients K (§4): training stops once δ exceeds it
DELTA_BUDGET = {100: 1e-3, 1000: 1e-5, 10000: 1e-6}
#: Table 1 (arXiv:1712.07557): setting, K, δ′, ACC, CR (communication rounds), CC = Σ_t m_t
PUBLISHED = (("non-dp", 100, None, 0.97, 380, 38000), ("dp", 100, 1e-3, 0.78, 11, 550),
             ("dp", 1000, 1e-5, 0.92, 54, 11880), ("dp", 10000, 1e-6, 0.96, 412, 209500))
#: the code's orders of the moments accountant: λ = 1…32 are RDP orders α = λ + 1
PAPER_ORDERS = np.arange(2, 34)


def paper_accountant() -> Accountant:
    """Their code's moments accountant: RDP at orders 2…33, the classic conversion (Abadi et al.)."""
    return Accountant("rdp-classic", orders=PAPER_ORDERS)


def paper_round(sigma: float, q: float, accumulations: int = 3) -> tuple:
    """How their code charges one round: ``accumulations`` Poisson-subsampled Gaussians at rate q and
    multiplier σ (one per weight matrix) — an (event, count) pair for ``Accountant.compose``; σ = 0 (their
    non-dp runs) is a ``NonPrivateEvent``: no guarantee."""
    if checks.nonnegative("sigma", sigma) == 0:
        return NonPrivateEvent(), 1
    return SampledGaussianEvent(sigma, q, "poisson"), accumulations
#: the held-out images (their validation set) and the images per shard, as in the code
HELD_OUT = 10_000


def published() -> pd.DataFrame:
    """:data:`PUBLISHED` as a table, with the implied mean m = CC/CR (100, 50, 220, 508.5)."""
    table = pd.DataFrame(PUBLISHED, columns=["setting", "K", "delta_budget", "acc", "rounds", "cc"])
    table["mean_m"] = table.cc / table.rounds
    return table


def spread(updates: dict) -> tuple[float, float]:
    """The paper's §3 quantities of one round's updates Δw^k (stacked, (m, …)): between-clients
    variance V_c = (1/P) Σ_ij (1/m) Σ_k (Δw^k_ij − μ_ij)² and update scale U_s = (1/P) Σ_ij μ_ij²,
    μ = the mean update, P the number of weights (pooled over the layers)."""
    total = sum(v[0].numel() for v in updates.values())
    m = next(iter(updates.values())).shape[0]
    # Σ_k (Δ^k − μ)² per weight, summed: Σ_k ‖Δ^k‖² − m‖μ‖² (one pass over the stack)
    scale = sum(float(v.mean(dim=0).double().pow(2).sum()) for v in updates.values())
    squares = sum(float(v.double().pow(2).sum()) for v in updates.values())
    return max(squares / m - scale, 0.0) / total, scale / total


def median_shift(updates: dict) -> float:
    """How far one client can move the round's median clip bound: the largest relative gap, over the
    layers, between the median norm and its neighbouring order statistics (replacing one client moves
    the median at most to one of them). Zero would mean the bound reveals nothing."""
    shifts = []
    for v in updates.values():
        norms = torch.sort(v.flatten(1).norm(dim=1)).values.double()
        m = norms.numel()
        if m < 3:
            return math.inf
        k = (m - 1) // 2                   # torch's median: the lower middle value
        med = norms[k]
        shifts.append(float(torch.maximum(med - norms[k - 1], norms[k + 1] - med) / med))
    return max(shifts)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeyerConfig(ClientDPConfig):
    """:class:`ClientDPConfig` read as Geyer et al.'s code reads it: ``accumulations`` moments-accountant
    steps per round (3: one per weight matrix), the run stopping on ``stop_on`` ("paper": their
    accountant; "guarantee": the ``delta`` column); ``diagnostics``: V_c and U_s of every round."""

    accumulations: int = 3
    stop_on: str = "paper"
    diagnostics: bool = False

    def __post_init__(self):
        super().__post_init__()
        check_accounting(self.stop_on, self.accumulations)


def check_accounting(stop_on: str, accumulations: int) -> None:
    """Raise ValueError, naming the parameter, unless ``stop_on`` is "paper" or "guarantee" and
    ``accumulations`` a positive integer (:class:`GeyerConfig`; :class:`GeyerRun` checks them when built)."""
    checks.one_of("stop_on", stop_on, ("paper", "guarantee"))
    checks.positive_int("accumulations", accumulations)


def over_budget(row, stop_on: str, delta_budget: float | None) -> bool:
    """Whether a round's row has δ of ``stop_on``'s accounting ("paper" or "guarantee") above δ′."""
    return delta_budget is not None and bool(row["delta_paper" if stop_on == "paper" else "delta"] > delta_budget)


class GeyerDP(ClientLevelDP):
    """Client-level DP-FedAvg with the paper's accounting beside the mechanism's: each row also holds
    ``delta_paper`` (Abadi's moments accountant as their code runs it: Poisson at q_t = m_t/K,
    multiplier z, ``accumulations`` per round, orders 2…33, the classic conversion) and
    ``median_shift``; with ``diagnostics``, V_c and U_s."""

    def accountants(self) -> list[Privacy]:
        return super().accountants() + [Privacy("paper", paper_accountant(),
                                                lambda a: {"delta_paper": a.delta(self.cfg.target_eps)})]

    def events(self, r: Round) -> dict:
        cfg, events = self.cfg, super().events(r)
        q = cfg.sampler.rate(self.K, r.t - 1)
        events["paper"] = [paper_round(cfg.noise_multiplier, q, cfg.accumulations)]
        return events

    def inspect(self, updates: dict) -> dict:
        row = {"median_shift": median_shift(updates)}
        if self.cfg.diagnostics:
            row["V_c"], row["U_s"] = spread(updates)
        return row

    def stop(self, row: dict) -> bool:
        """δ of ``stop_on``'s accounting has exceeded δ′ (their code returns this model: the first
        whose δ exceeds the budget)."""
        return over_budget(row, self.cfg.stop_on, self.cfg.delta_budget)


def federated_mnist(num_clients: int, seed: int, data_dir=None, *, split: str = "code") -> FederatedDataset:
    """Their code's clients (``split="code"``: 2 shards of 250 of the first 50 000 training images; the
    held-out images 50 000–60 000) or the paper's text (``"paper"``: 2 shards of 300 of all 60 000; the
    test set). Pixels in [0, 1]. The held-out images are dealt in equal disjoint slices, so the mean of
    the clients' accuracies is the accuracy on all of them (``num_clients`` must divide 10 000)."""
    checks.one_of("split", split, ("code", "paper"))
    num_clients = checks.positive_int("num_clients", num_clients)
    if HELD_OUT % num_clients:
        raise ValueError(f"num_clients must divide the {HELD_OUT} held-out images (100, 1000, 10000, …); "
                         f"got {num_clients}")
    train = load_dataset("mnist", "train", data_dir)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2017, 0]))
    if split == "code":
        clients = partition.geyer_shards(train.y.numpy(), num_clients, rng)
        held = Dataset("mnist", "validation", train.x[50_000:], train.y[50_000:], train.source, train.num_classes)
    else:
        clients = partition.geyer_shards(train.y.numpy(), num_clients, rng, shard_size=300, train_size=60_000)
        held = load_dataset("mnist", "test", data_dir)
    tests = np.split(np.arange(HELD_OUT), num_clients)
    return FederatedDataset.from_partition(train, held, clients, tests, normalisation=((0.0,), (1.0,)))


def paper_stop_round(num_clients: int, m, sigma: float, delta_budget: float, *, accumulations: int = 3,
                     limit: int = 100_000) -> int:
    """The round at which their code's accountant first exceeds ``delta_budget`` (the run's CR) for
    m clients per round, or a schedule m_t (an error if it ends first), and multiplier σ."""
    schedule = (m,) * limit if isinstance(m, int) else tuple(m)
    accountant = paper_accountant()
    for t, m_t in enumerate(schedule, 1):
        accountant.compose(*paper_round(sigma, m_t / num_clients, accumulations))
        if accountant.delta(EPS) > delta_budget:
            return t
    raise ValueError(f"m, a schedule of {len(schedule)} rounds, ends before δ exceeds δ′ = {delta_budget} "
                     f"(σ = {sigma}): spell out every round's m_t (see ramp)")


def ramp(steps, num_clients: int, sigma: float, delta_budget: float | None = None, *, accumulations: int = 3) -> tuple:
    """The schedule m_t that takes ``steps`` (e.g. (20, 30, 40, 50)) and then keeps the last value until
    their accountant stops the run — every round's m_t spelled out, as a :class:`GeyerRun` needs."""
    steps = tuple(steps)
    budget = DELTA_BUDGET[num_clients] if delta_budget is None else delta_budget
    length = paper_stop_round(num_clients, steps + (steps[-1],) * 100_000, sigma, budget, accumulations=accumulations)
    return (steps + (steps[-1],) * length)[:max(length, 1)]


@dataclasses.dataclass(frozen=True)
class GeyerRun(TrainingRun):
    """One run of the paper's grid: K clients, ``m`` per round (an int, or a tuple m_t whose last value
    repeats), ``sigma`` (None: non-private FedAvg, no clipping), ``batches`` b and ``epochs`` E per
    round. ``rounds``: the most (default: the round at which their accountant stops the run; a
    non-private run needs it). ``delta_budget``: δ′ (default :data:`DELTA_BUDGET` of K); ``split``: see
    :func:`federated_mnist`; ``stop_on``/``accumulations``: :class:`GeyerConfig`; where it runs:
    :class:`~dpfl.experiments.runner.TrainingRun`."""

    code_version: ClassVar[int] = 1

    num_clients: int
    m: int | tuple
    sigma: float | None
    batches: int = 10
    epochs: int = 4
    rounds: int | None = None
    delta_budget: float | None = None
    split: str = "code"
    stop_on: str = "paper"
    accumulations: int = 3
    diagnostics: bool = False

    def __post_init__(self):
        super().__post_init__()
        checks.positive_int("num_clients", self.num_clients)
        if self.num_clients % 100 or HELD_OUT % self.num_clients:
            raise ValueError(f"num_clients must be a multiple of the 100 clients of the shard split (repeated, as "
                             f"in their code) and divide the {HELD_OUT} held-out images; got {self.num_clients}")
        for m_t in self.schedule:
            checks.positive_int("m", m_t)
            if m_t > self.num_clients:
                raise ValueError(f"m must be at most num_clients = {self.num_clients}; got {m_t}")
        checks.positive_int("batches", self.batches)
        checks.positive_int("epochs", self.epochs)
        checks.one_of("split", self.split, ("code", "paper"))
        if self.images % self.batches:
            raise ValueError(f"batches must divide the {self.images} images of a client; got {self.batches}")
        check_accounting(self.stop_on, self.accumulations)
        if self.sigma is None:
            if self.rounds is None:
                raise ValueError("rounds must be given for a non-private run (sigma=None): nothing stops it")
        else:
            checks.positive("sigma", self.sigma)
            if self.delta_budget is None:
                if self.num_clients not in DELTA_BUDGET:
                    raise ValueError(f"delta_budget must be given for num_clients = {self.num_clients} "
                                     f"(the paper sets it for {sorted(DELTA_BUDGET)})")
                object.__setattr__(self, "delta_budget", DELTA_BUDGET[self.num_clients])
            checks.in_range("delta_budget", self.delta_budget, 0, 1, lo_open=True, hi_open=True)
        if self.rounds is not None:
            checks.positive_int("rounds", self.rounds)
        if not isinstance(self.m, int) and len(self.schedule) < self.max_rounds:
            raise ValueError(f"m, a schedule of {len(self.schedule)} rounds, is shorter than the run's "
                             f"{self.max_rounds} rounds: spell out every round's m_t (see ramp)")

    @property
    def schedule(self) -> tuple:
        return (self.m,) if isinstance(self.m, int) else tuple(self.m)

    @functools.cached_property
    def max_rounds(self) -> int:
        """``rounds``, or the round at which their accountant stops the run (computed once)."""
        if self.rounds is not None:
            return self.rounds
        return paper_stop_round(self.num_clients, self.m, self.sigma, self.delta_budget,
                                accumulations=self.accumulations)

    @property
    def m_label(self) -> str:
        """m, or a schedule's distinct values (20→30→40→50)."""
        distinct = [m_t for k, m_t in enumerate(self.schedule) if k == 0 or m_t != self.schedule[k - 1]]
        return "→".join(map(str, distinct))

    @property
    def label(self) -> str:
        sigma = "non-dp" if self.sigma is None else f"σ={self.sigma:g}"
        return f"K={self.num_clients} m={self.m_label} {sigma} b={self.batches} E={self.epochs}"

    @property
    def images(self) -> int:
        """Training images per client: 600 in the paper's split, 500 in their code's."""
        return 600 if self.split == "paper" else 500

    def config(self) -> GeyerConfig:
        n = self.images
        private = self.sigma is not None
        schedule = self.schedule
        return GeyerConfig(
            rounds=self.max_rounds, batch_size=n // self.batches, local_steps=self.epochs * self.batches,
            sampler=FixedClients(schedule[0], schedule if len(schedule) > 1 else ()),
            local=LocalConfig(optimizer="sgd", lr=0.1), lr_schedule=LearningRate(0.1, 27_000, per="step", smooth=True),
            batch_sampling="shuffle", noise_multiplier=self.sigma if private else 0.0,
            clip="median" if private else None, per_layer=True, target_eps=EPS,
            delta_budget=self.delta_budget, stop_on=self.stop_on, accumulations=self.accumulations,
            diagnostics=self.diagnostics, seed=self.seed)

    def compute(self) -> pd.DataFrame:
        """Train; one row per round (``GeyerDP``)."""
        fd = federated_mnist(self.num_clients, self.seed, self.data_dir, split=self.split)
        return self.train(GeyerDP(GEYER_MLP, self.config()), fd)


def outcome(run_: GeyerRun, metrics: pd.DataFrame) -> dict:
    """What Table 1 reports of a run: the returned model's accuracy (the last round's), CR and
    CC = Σ m_t, whether δ′ stopped it, and δ of both accountings at the end. ``diverged``: the returned model's
    outputs are not finite (its test loss is NaN); it then has no accuracy (NaN), as ``dpfl.federated.evaluate``
    scores such a model since 2026-12-07 — runs cached before read the same here (they scored it as class 0)."""
    last = metrics.iloc[-1]
    diverged = bool(np.isnan(last.loss_global))
    return {"run": run_.label, "K": run_.num_clients, "m": run_.m_label, "sigma": run_.sigma, "b": run_.batches,
            "E": run_.epochs, "acc": math.nan if diverged else float(last.acc_global), "diverged": diverged,
            "rounds": int(last["round"]),
            "cc": int(metrics.clients.sum()), "stopped": over_budget(last, run_.stop_on, run_.delta_budget),
            "delta_paper": float(last.delta_paper), "delta": float(last.delta)}


def best(outcomes: list[dict]) -> dict:
    """The paper's rule (§5): the highest accuracy (at the paper's two decimals), fewer rounds on ties; a run
    whose model diverged (accuracy NaN) is never chosen."""
    scored = [o for o in outcomes if not math.isnan(o["acc"])]
    if not scored:
        raise ValueError("no runs to choose from" if not outcomes else "every run's model diverged: none to choose")
    return min(scored, key=lambda o: (-round(o["acc"], 2), o["rounds"], -o["acc"]))


# -- the grid --------------------------------------------------------------------------------------

#: The notebook's profiles. The paper's grid is not published (§4 names only its axes: b, E, m, σ);
#: ``paper`` searches around what the accountant allows at each K (docs/geyer2017.md §5):
#: constant m and ramps m_t (their deleted ``Runner.py`` tried both), σ so
#: that CR spans the paper's. ``dp``: K → axes; ``ramps`` are the starts of m_t schedules;
#: ``nondp``: Figure 2's run (all K = 100 clients, the code's b and E); ``same_ratio``: the §6 claim's
#: one-round runs at constant σ²/m; ``large``: the K whose grids need a GPU on this scale.
SETTINGS = {
    "smoke": dict(dp={100: dict(batches=(10,), epochs=(1,), m=(50,), ramps=(), sigma=(1.0,))},
                  nondp=dict(batches=10, epochs=1, rounds=3), same_ratio=dict(m=(10, 50), sigma_at_50=1.8, seeds=1),
                  large=()),
    "quick": dict(dp={100: dict(batches=(10,), epochs=(1, 4), m=(30, 50), ramps=((20, 30, 40, 50),),
                                sigma=(1.0, 1.4, 1.8))},
                  nondp=dict(batches=10, epochs=4, rounds=40), same_ratio=dict(m=(10, 20, 30, 50), sigma_at_50=1.8,
                                                                                seeds=3),
                  large=()),
    "paper": dict(dp={100: dict(batches=(5, 10), epochs=(1, 4), m=(30, 50),
                                ramps=((20, 30, 40, 50), (20, 25, 30, 35, 40, 45, 50)),
                                sigma=(1.0, 1.2, 1.4, 1.6, 1.8, 2.0)),
                      1000: dict(batches=(10,), epochs=(1, 4), m=(100, 220), ramps=((100, 150, 200, 250, 300),),
                                 sigma=(1.8, 2.1, 2.5)),
                      10000: dict(batches=(10,), epochs=(1,), m=(500,), ramps=((300, 400, 500, 600),),
                                  sigma=(1.5, 2.0))},
                  nondp=dict(batches=10, epochs=4, rounds=380), same_ratio=dict(m=(10, 20, 30, 50), sigma_at_50=1.8,
                                                                                 seeds=5),
                  large=(1000, 10000)),
}


def dp_grid(profile: str, K: int, **common) -> list:
    """The DP runs at K clients: every (b, E, m or ramp, σ) of :data:`SETTINGS`."""
    axes = SETTINGS[checks.one_of("profile", profile, SETTINGS)]["dp"][K]
    runs = []
    for b in axes["batches"]:
        for E in axes["epochs"]:
            for sigma in axes["sigma"]:
                schedules = list(axes["m"]) + [ramp(start, K, sigma) for start in axes["ramps"]]
                runs += [GeyerRun(K, m, sigma, batches=b, epochs=E, **common) for m in schedules]
    return runs


def cached_grid(cache, profile: str, K: int, **common) -> tuple[list, int]:
    """The runs of :func:`dp_grid` at K that ``cache`` holds, as (config, metrics) pairs in the grid's order,
    and the grid's size (nothing is computed). Table 1's K = 1000 and 10 000 rows on a machine that does not
    train them: the notebook searches these runs, a partial grid while fewer than the size are cached."""
    configs = dp_grid(profile, K, **common)
    hits = (cache.load(c) for c in configs)
    return [(hit.config, hit.value) for hit in hits if hit is not None], len(configs)


def nondp_run(profile: str, **common) -> GeyerRun:
    """Figure 2's non-private K = 100 run (every client every round), with V_c and U_s."""
    S = SETTINGS[checks.one_of("profile", profile, SETTINGS)]["nondp"]
    return GeyerRun(100, 100, None, batches=S["batches"], epochs=S["epochs"], rounds=S["rounds"], diagnostics=True,
                    **common)


def same_ratio_runs(profile: str, **common) -> list:
    """§6's claim: one early round at (m, σ) with σ²/m constant (σ = ``sigma_at_50`` at m = 50), from the
    same initial model per seed."""
    S = SETTINGS[checks.one_of("profile", profile, SETTINGS)]["same_ratio"]
    ratio = S["sigma_at_50"] ** 2 / 50
    common = {k: v for k, v in common.items() if k != "seed"}
    return [GeyerRun(100, m, round(math.sqrt(ratio * m), 4), rounds=1, seed=seed, **common)
            for seed in range(S["seeds"]) for m in S["m"]]


def grid(profile: str, **common) -> list:
    """Every run the notebook trains at ``profile``, in its order (``common``: seed, device, data_dir,
    checkpoint_dir, progress, …)."""
    S = SETTINGS[checks.one_of("profile", profile, SETTINGS)]
    runs = [nondp_run(profile, **common)] + [r for K in S["dp"] for r in dp_grid(profile, K, **common)]
    return runs + same_ratio_runs(profile, **common)



def main(argv=None) -> int:
    """Compute the notebook's runs into a cache within a time budget (``dpfl.experiments.runner``):

        python -m dpfl.experiments.geyer2017 --profile paper --device cuda --budget 540 \\
            --only "K=1000 " --whole-runs --bundle $OUT/geyer.tar.gz
    """
    from dpfl.experiments import runner

    return runner.main("dpfl.experiments.geyer2017", grid, lambda c: c.label, SETTINGS, "figures/geyer2017/cache", argv)


if __name__ == "__main__":
    import sys

    # run the imported module's main, not this __main__ copy's: a config's cache key names its class's
    # module, and the notebook looks runs up under dpfl.experiments.geyer2017
    from dpfl.experiments import geyer2017 as module

    sys.exit(module.main())
