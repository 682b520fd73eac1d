"""Zheng, Chen, Long & Su (2021), *Federated f-Differential Privacy*: the experiments of §4.

Faithful to the authors' code (docs/zheng2021.md §2): non-IID MNIST of 100 clients × 4 label shards of
150 (200 test images per client, drawn with replacement from the test images of its labels) with
MnistCNN, per-client Adam (lr 1e-3) kept across rounds; non-IID CIFAR-10 with Dirichlet(0.5)
proportions, 500 train / 200 test per client (clients may share images), augmentation, CifarCNN
without the third ReLU, Adam lr 5e-3, weight decay 5e-4, StepLR(10, 0.99) per client epoch, the
authors' normalisation. DP-SGD with fixed-size batches, C = 1, noise N(0, 4C²σ²) on the sum;
Poisson client sampling with p; elastic averaging α = 0.1, η = 1. One local epoch (K steps) per
round. ``sigma=None`` is the non-private twin (no clipping, no noise).
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import pandas as pd

from dpfl import checks
from dpfl.accounting import gdp
from dpfl.data import FederatedDataset, load_dataset, partition
from dpfl.data.datasets import source_of
from dpfl.federated.engine import PriFedSync, RoundConfig
from dpfl.federated.local import CONV_ROUTES, LocalConfig
from dpfl.experiments.runner import TrainingRun
from dpfl.federated.sampling import PoissonClients
from dpfl.federated.schedule import LearningRate
from dpfl.models import MNIST_CNN, cifar_cnn

__all__ = ["ZhengRun", "PUBLISHED", "published", "federated_mnist", "MNIST_SHARDS", "cifar10_split", "federated_cifar10", "first_round",
           "CIFAR_NORMALISATION", "default_steps", "SETTINGS", "mnist_run", "cifar_run", "grid", "TARGETS", "cells", "twin",
           "cached_twin", "followups", "cached_cells", "computed_on", "main"]

#: The authors' CIFAR-10 normalisation (``transforms.Normalize``; docs/zheng2021.md §2).
CIFAR_NORMALISATION = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))


def default_steps(n: int, batch_size: int) -> int:
    """K = ⌈n/B⌉ local steps per round (one epoch), except the authors' hard-coded 76 for MNIST B = 8."""
    return 76 if (n, batch_size) == (600, 8) else math.ceil(n / batch_size)


#: their MNIST split: the 60 000 training images cut into label shards of 150, dealt 4 a client (so at most 100)
MNIST_SHARDS = dict(shards_per_client=4, shard_size=150, pool_size=60_000)


def federated_mnist(num_clients: int, seed: int, data_dir=None, *, shards: int = MNIST_SHARDS["shards_per_client"],
                    shard_size: int = MNIST_SHARDS["shard_size"], test_size: int = 200) -> FederatedDataset:
    """Zheng et al.'s non-IID MNIST (``prepare_mnist_non_iid``): 400 label shards of 150 dealt 4 per
    client; test images drawn with replacement from the test images of the client's labels."""
    train_set, test_set = load_dataset("mnist", "train", data_dir), load_dataset("mnist", "test", data_dir)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2021, 0]))
    clients = partition.label_shards(train_set.y.numpy(), num_clients, shards, shard_size, rng)
    tests = partition.test_sets_like(train_set.y.numpy(), test_set.y.numpy(), clients, test_size, rng)
    return FederatedDataset.from_partition(train_set, test_set, clients, tests)


def cifar10_split(train_labels, test_labels, num_clients: int, seed: int, *, beta: float = 0.5,
                  train_size: int = 500, test_size: int = 200):
    """Zheng et al.'s non-IID CIFAR-10 split (``prepare_cifar_non_iid``), from the labels alone:
    q ~ Dir(β) per client, 500 training images from Multinomial(500, q) (independently per client:
    clients may share images), 200 test images from Multinomial(200, q). Clients are drawn one after
    another, so the first k clients of a larger split are the k-client split.
    Returns (train indices, test indices, proportions q)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2021, 1]))
    clients, q = partition.dirichlet(np.asarray(train_labels), num_clients, beta, train_size, rng,
                                     return_proportions=True)
    return clients, partition.dirichlet_like(np.asarray(test_labels), q, test_size, rng), q


def federated_cifar10(num_clients: int, seed: int, data_dir=None, **split) -> tuple:
    """:func:`cifar10_split` on CIFAR-10 with the authors' normalisation: (FederatedDataset, q)."""
    train_set, test_set = load_dataset("cifar10", "train", data_dir), load_dataset("cifar10", "test", data_dir)
    clients, tests, q = cifar10_split(train_set.y.numpy(), test_set.y.numpy(), num_clients, seed, **split)
    return FederatedDataset.from_partition(train_set, test_set, clients, tests, normalisation=CIFAR_NORMALISATION), q


#: Tables 1–3 of the paper (arXiv:2102.11158), one row per published cell: table, dataset, p, σ, B, R
#: (rounds to the target accuracy: 90 % MNIST, 52 % CIFAR-10), μ_max (Theorem 2's GDP CLT), the accuracy
#: at R and the non-private run's accuracy at R (%; Table 2 prints none).
PUBLISHED = (
    ("1", "mnist", 1.0, 1.0, 16, 93, 2.71, 90.03, 98.74), ("1", "mnist", 1.0, 0.9, 16, 83, 3.10, 90.25, 98.72),
    ("1", "mnist", 1.0, 0.75, 16, 64, 3.96, 90.10, 98.55), ("1", "mnist", 0.5, 1.0, 16, 194, 3.92, 90.02, 98.90),
    ("1", "mnist", 0.5, 0.9, 16, 176, 4.51, 90.02, 98.83), ("1", "mnist", 0.5, 0.75, 16, 127, 5.58, 90.11, 98.54),
    ("1", "mnist", 0.25, 1.0, 16, 386, 5.52, 90.00, 98.75), ("1", "mnist", 0.25, 0.9, 16, 325, 6.13, 90.00, 98.75),
    ("1", "mnist", 0.25, 0.75, 16, 245, 7.75, 90.04, 98.55),
    ("2", "mnist", 0.5, 1.0, 8, 266, 3.24, None, None), ("2", "mnist", 0.5, 0.9, 8, 229, 3.64, None, None),
    ("2", "mnist", 0.5, 0.75, 8, 191, 4.84, None, None),
    ("3", "cifar10", 1.0, 1.0, 16, 468, 6.70, 52.03, 64.72), ("3", "cifar10", 1.0, 0.75, 16, 321, 9.77, 52.22, 62.55),
    ("3", "cifar10", 1.0, 0.5, 16, 207, 26.81, 52.23, 59.61), ("3", "cifar10", 0.5, 1.0, 16, 904, 9.31, 52.07, 64.65),
    ("3", "cifar10", 0.5, 0.75, 16, 671, 14.13, 52.04, 62.53), ("3", "cifar10", 0.5, 0.5, 16, 405, 37.51, 52.01, 59.85),
)


def published() -> pd.DataFrame:
    """:data:`PUBLISHED` as a table, with n (images per client) and K (local steps per round) of each
    cell (docs/zheng2021.md §2), from which Theorem 2 gives μ_max."""
    table = pd.DataFrame(PUBLISHED, columns=["table", "dataset", "p", "sigma", "B", "R", "mu", "acc",
                                             "nonprivate_acc"]).astype({"acc": float, "nonprivate_acc": float})
    table["n"] = np.where(table.dataset == "mnist", 600, 500)
    table["K"] = [default_steps(n, B) for n, B in zip(table.n, table.B)]
    return table


def first_round(metrics: pd.DataFrame, target: float, column: str = "acc_stored_local") -> int | None:
    """The first round whose ``column`` reaches ``target`` (Tables 1–3's R), or None."""
    hit = metrics.index[metrics[column] >= target]
    return int(metrics.loc[hit[0], "round"]) if len(hit) else None


@dataclasses.dataclass(frozen=True)
class ZhengRun(TrainingRun):
    """One run of PriFedSync with DP-SGD clients (Alg. 1–2), as in the authors' code.

    ``dataset``: "mnist" or "cifar10"; ``p``: client sampling rate; ``sigma``: Zheng's σ (noise
    std 2σC on the sum of clipped gradients; None: non-private); ``batch_size`` B and
    ``local_steps`` K (default ⌈n/B⌉, 76 for MNIST B=8); ``rounds``: the most rounds;
    ``stop_at``: stop once the paper's metric reaches it. ``device``/``data_dir``/``checkpoint_dir``/``progress``
    say where things are, not what is computed, and stay out of the config hash: a result computed on a
    GPU is read on a CPU machine, its device recorded in the provenance.
    """

    #: 2: one noise draw and one dropout draw per client and step (other random streams than 1);
    #: 3: client generators seeded from SeedSequence spawn keys instead of Python's hash()
    code_version: ClassVar[int] = 3

    dataset: str
    p: float
    sigma: float | None
    batch_size: int
    rounds: int
    local_steps: int | None = None
    num_clients: int = 100
    stop_at: float | None = None
    alpha: float = 0.1
    relu3: bool = False
    augment: bool = True
    eval_every: int = 1
    #: which copy of the data (``dpfl.data.datasets.source_of``), found from ``data_dir`` when not given:
    #: CIFAR-10's official files and its JPEG copy give different results, so it is part of the hash
    #: (MNIST has only the official files: None, as before the field existed)
    data_source: str | None = dataclasses.field(default=None, metadata={"hash": "unless-default"})
    #: how DP-SGD gets per-sample gradients (``LocalConfig.per_sample``): "ghost" (the default), "unfold",
    #: "grouped" or "matmul" (fewer kernel launches: the GPU's candidate routes; ``benchmarks/route.py``
    #: picks one; docs/per-sample-gradients.md §2); "matmul" computes a non-private twin's convolutions as
    #: matrix products too. They compute the same clipped sums and gradients
    #: up to float round-off (tests/test_local.py, float64 against a per-sample loop and Opacus), so, like
    #: ``device``, it stays out of the hash and is recorded in the provenance
    #: (a run resumed with another route records the last stretch's)
    per_sample: str = dataclasses.field(default="ghost", metadata={"hash": False, "provenance": True})

    def __post_init__(self):
        super().__post_init__()
        checks.one_of("dataset", self.dataset, ("mnist", "cifar10"))
        checks.in_range("p", self.p, 0, 1, lo_open=True)
        if self.sigma is not None:
            checks.positive("sigma", self.sigma)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("rounds", self.rounds)
        checks.positive_int("num_clients", self.num_clients)
        if self.local_steps is not None:                # 0 would read as "the default K"
            checks.positive_int("local_steps", self.local_steps)
        checks.one_of("per_sample", self.per_sample, CONV_ROUTES)
        if self.dataset == "mnist":
            partition.check_shards(self.num_clients, **MNIST_SHARDS)
        self.round_config()                     # local_steps, alpha, stop_at, eval_every: checked before any work
        if self.dataset == "cifar10" and self.data_source is None:
            object.__setattr__(self, "data_source", source_of("cifar10", self.data_dir))

    @property
    def n(self) -> int:
        """Training images per client."""
        return 600 if self.dataset == "mnist" else 500

    @property
    def steps(self) -> int:
        return self.local_steps or default_steps(self.n, self.batch_size)

    def mu(self, rounds: int) -> float:
        """Theorem 2's μ_max after ``rounds`` rounds (the CLT of C_{B/n}(G_{1/σ})^{⊗KR})."""
        return float(gdp.clt_mu(self.sigma, self.batch_size, self.n, self.steps * rounds)) if self.sigma else math.inf

    def federated_data(self) -> FederatedDataset:
        if self.dataset == "mnist":
            return federated_mnist(self.num_clients, self.seed, self.data_dir)
        fd = federated_cifar10(self.num_clients, self.seed, self.data_dir)[0]
        if fd.source != self.data_source:
            raise ValueError(f"data_source is {self.data_source!r} but {self.data_dir} holds {fd.source!r}; "
                             "leave data_source unset to take what data_dir holds")
        return fd

    def round_config(self) -> RoundConfig:
        private = self.sigma is not None
        if self.dataset == "mnist":
            local = LocalConfig(optimizer="adam", lr=1e-3, dp=private, clip=1.0,
                                noise_multiplier=2 * self.sigma if private else 0.0, per_sample=self.per_sample)
            schedule = {}
        else:
            local = LocalConfig(optimizer="adam", lr=5e-3, weight_decay=5e-4, dp=private, clip=1.0,
                                noise_multiplier=2 * self.sigma if private else 0.0, per_sample=self.per_sample)
            schedule = dict(lr_schedule=LearningRate(0.99, 10, per="client_epoch"), augment=self.augment)
        return RoundConfig(rounds=self.rounds, batch_size=self.batch_size, local_steps=self.steps,
                           sampler=PoissonClients(self.p), local=local, alpha=self.alpha, eta=1.0, seed=self.seed,
                           eval_every=self.eval_every, stop_at=self.stop_at, **schedule)

    def compute(self) -> pd.DataFrame:
        """Train; one row per round (see ``dpfl.federated.engine.PriFedSync``). A paper-scale MNIST
        checkpoint holds 100 clients' models and Adam states: ≈ 1.4 GB (CIFAR-10 ≈ 0.15 GB)."""
        model = MNIST_CNN if self.dataset == "mnist" else cifar_cnn(self.relu3)
        return self.train(PriFedSync(model, self.round_config()), self.federated_data())


#: The notebook's profiles. ``paper`` is the authors' grid (docs/zheng2021.md §2: 300 MNIST rounds; for
#: p = 0.25, 600 — 500 at σ = 1 (their s2.0 config); 1000 CIFAR-10 rounds); ``quick`` keeps every
#: per-client setting but trains 6 MNIST / 8 CIFAR-10 clients for 10 / 6 rounds; ``smoke`` is a few
#: steps for CI. ``rounds`` maps p (or (p, σ)) to the number of rounds. ``b8``/``b8_p``: the σ and
#: the p of the B = 8 vs B = 16 comparison (Table 2: p = 0.5; ``quick`` uses p = 1, where all 6
#: clients train every round and the two runs are paired: at p = 0.5 which ~3 clients train in a
#: round decides more than B does). ``cell_room``: a cell (:func:`cells`) may run to ``cell_room`` × the
#: paper's R where the profile's rounds stop sooner (None: never). Our R has run 0.90–1.14 × the paper's
#: over the cells computed so far (the notebook's §9), so the cap of 300 rounds (Table 2's σ = 1, B = 8:
#: R = 266) or 1000 (Table 3's p = 0.5, σ = 1: R = 904) could end a run a few rounds short of its target
#: and report a failed claim that is only a cap (docs/zheng2021.md §3). 1.25 leaves every other cell at its profile's rounds
#: (its hash, hence its cached result, unchanged; tested).
SETTINGS = {
    "smoke": dict(clients=4, rounds={1.0: 2, 0.5: 2, 0.25: 2}, steps=4, p=(1.0,), sigma=(1.0,), b8=(1.0,), b8_p=1.0,
                  target=0.9, cifar_clients=4, cifar_rounds=2, cifar_steps=3, cifar_p=(1.0,), cifar_sigma=(1.0,),
                  cifar_target=0.52, eval_every=1, cell_room=None),
    "quick": dict(clients=6, rounds={1.0: 10, 0.5: 10, 0.25: 10}, steps=None, p=(1.0, 0.5), sigma=(1.0, 0.75),
                  b8=(0.75,), b8_p=1.0, target=0.42, cifar_clients=8, cifar_rounds=6, cifar_steps=None, cifar_p=(1.0,),
                  cifar_sigma=(1.0, 0.5), cifar_target=0.35, eval_every=1, cell_room=None),
    "paper": dict(clients=100, rounds={1.0: 300, 0.5: 300, 0.25: 600, (0.25, 1.0): 500}, steps=None, p=(1.0, 0.5, 0.25),
                  sigma=(1.0, 0.9, 0.75), b8=(1.0, 0.9, 0.75), b8_p=0.5, target=0.9, cifar_clients=100, cifar_rounds=1000,
                  cifar_steps=None, cifar_p=(1.0, 0.5), cifar_sigma=(1.0, 0.75, 0.5), cifar_target=0.52,
                  eval_every=10, cell_room=1.25),
}


def mnist_run(S: dict, p: float, sigma: float | None, B: int = 16, **common) -> ZhengRun:
    """The MNIST run of profile settings ``S`` (:data:`SETTINGS`) at (p, σ, B)."""
    rounds = S["rounds"].get((p, sigma), S["rounds"][p])
    return ZhengRun("mnist", p, sigma, B, rounds, local_steps=S["steps"] and S["steps"] * (16 // B),
                    num_clients=S["clients"], eval_every=S["eval_every"], **common)


def cifar_run(S: dict, p: float, sigma: float | None, **common) -> ZhengRun:
    """The CIFAR-10 run of profile settings ``S`` at (p, σ)."""
    return ZhengRun("cifar10", p, sigma, 16, S["cifar_rounds"], local_steps=S["cifar_steps"],
                    num_clients=S["cifar_clients"], eval_every=S["eval_every"], **common)


def grid(profile: str, **common) -> list:
    """Every run the notebook needs at ``profile``, in the order it uses them (``common``: seed,
    device, data_dir, checkpoint_dir, progress)."""
    checks.one_of("profile", profile, SETTINGS)
    S = SETTINGS[profile]
    runs = [mnist_run(S, p, s, **common) for p in S["p"] for s in S["sigma"]]
    runs += [mnist_run(S, p, None, **common) for p in S["p"]]
    runs += [mnist_run(S, S["b8_p"], s, B, **common) for s in S["b8"] for B in (8, 16)]
    runs += [cifar_run(S, p, s, **common) for p in S["cifar_p"] for s in S["cifar_sigma"]]
    runs += [cifar_run(S, p, None, **common) for p in S["cifar_p"]]
    unique = []
    for r in runs:
        if r not in unique:
            unique.append(r)
    return unique


#: the accuracy each table counts its R to (the paper's; Table 2 is Table 1's target at B = 8)
TARGETS = {"1": 0.9, "2": 0.9, "3": 0.52}


def _cell_run(cell, profile: str, **common) -> ZhengRun:
    """The ``profile``'s run of one published cell (a row of :func:`published`)."""
    S = SETTINGS[profile]
    if cell.dataset == "cifar10":
        return cifar_run(S, cell.p, cell.sigma, **common)
    return mnist_run(S, cell.p, cell.sigma, int(cell.B), **common)


def cells(table: str = "1", profile: str = "paper", **common) -> list[ZhengRun]:
    """Table ``table``'s published cells at the paper's setting (the ``profile``'s runs), each
    stopped at the round its stored accuracy reaches the table's target (:data:`TARGETS`): all a cell's
    R, μ_max at R and accuracy at R need, at a fraction of the full run's rounds (each may run to the
    profile's ``cell_room`` × the paper's R where its rounds stop sooner: :data:`SETTINGS`). The non-private
    accuracy at R comes from the cell's twin (:func:`followups`). Computed one cell at a time:
    ``python -m dpfl.experiments.zheng2021 --profile cells --only "p=1 σ=0.75"`` (on a 2-core CPU a cell took
    3–10 h before the clients trained side by side (``dpfl.federated.threads``), ≈ 2× less since; resumable from its
    checkpoint; measured times per cell: benchmarks/GPU_QUEUE.md, "CPU fallback")."""
    checks.one_of("table", table, TARGETS)
    checks.one_of("profile", profile, SETTINGS)
    rows = published().query("table == @table")
    return [_cell(c, profile, **common) for c in rows.itertuples()]


def _cell(row, profile: str, **common) -> ZhengRun:
    """The cell of one published row (:func:`cells`)."""
    return _as_cell(_cell_run(row, profile, **common), row, profile)


def _as_cell(run: ZhengRun, row, profile: str) -> ZhengRun:
    """``run`` (the ``profile``'s run of ``row``) stopped at its table's target, with the profile's room."""
    room = SETTINGS[profile]["cell_room"]
    rounds = max(run.rounds, math.ceil(room * row.R)) if room else run.rounds
    return dataclasses.replace(run, rounds=rounds, stop_at=TARGETS[row.table])


def twin(run: ZhengRun, rounds: int) -> ZhengRun:
    """``run``'s non-private twin (same data, clients, seed, no clipping or noise) for ``rounds`` rounds.
    Its first R rounds are those of any longer twin (round t draws from (seed, t) alone; tested)."""
    return dataclasses.replace(run, sigma=None, rounds=rounds, stop_at=None)


def cached_twin(cache, run: ZhengRun, R: int):
    """The shortest cached twin of ``run`` with at least R rounds (up to the ``paper`` profile's full
    twin), as a ``runs.Result``, or None."""
    S = SETTINGS["paper"]
    full = S["cifar_rounds"] if run.dataset == "cifar10" else S["rounds"][run.p]
    return next((hit for n in range(R, max(R, full) + 1) if (hit := cache.load(twin(run, n))) is not None), None)


def followups(run: ZhengRun, metrics: pd.DataFrame, cache) -> list[ZhengRun]:
    """What a cached cell (:func:`cells`) calls for: its twin to the cell's R, or the shortest cached twin
    of at least R rounds that serves it (:func:`cached_twin`), so that the runner's ``--only`` names a twin
    already computed and reports it cached; nothing where the paper prints no twin's accuracy (Table 2)."""
    dataset, p, s, B = run.dataset, run.p, run.sigma, run.batch_size
    printed = published().query("dataset == @dataset and p == @p and sigma == @s and B == @B").nonprivate_acc
    if run.stop_at is None or not printed.notna().any():         # Table 2 prints no twin
        return []
    R = first_round(metrics, run.stop_at)
    if not R:
        return []
    served = cached_twin(cache, run, R)
    return [served.config if served else twin(run, R)]


def cached_cells(cache, table: str = "1", profile: str = "paper", **common) -> dict:
    """The cells of Table ``table`` computed at the ``profile``'s setting so far, read from ``cache``
    (nothing is computed): {(p, σ): (config, metrics, twin's metrics or None)}, each from the profile's
    full run when cached and it reaches the target, else from the cell stopped at its target (:func:`cells`)."""
    checks.one_of("table", table, TARGETS)
    out = {}
    for row in published().query("table == @table").itertuples():
        full = _cell_run(row, profile, **common)
        cell = _as_cell(full, row, profile)
        hit = cache.load(full)
        if hit is None or first_round(hit.value, TARGETS[table]) is None:   # the cell may go on (cell_room)
            hit = cache.load(cell) or hit
        if hit is None:
            continue
        R = first_round(hit.value, TARGETS[table])
        pair = cached_twin(cache, cell, R) if R else None
        out[(cell.p, cell.sigma)] = (hit.config, hit.value, pair.value if pair else None)
    return out


def computed_on(cache, done: dict, table: str = "1") -> dict:
    """Which device computed each cell of ``done`` (:func:`cached_cells`) and its twin, from their
    provenance: {(p, σ): "cuda (NVIDIA H200)" or, where they differ, "cpu (…); twin cuda (…)"}. One seed
    draws other random numbers on a CPU and on a GPU (each device repeatable), so a twin from another
    device has the cell's setting but not its draws; the table says so rather than hide it. A cell
    computed with another per-sample route than the default (``ZhengRun.per_sample``) names it too (the
    cell's route: a twin's, which only "matmul" changes, is in its own provenance)."""
    out = {}
    for key, (config, metrics, twin) in done.items():
        record = cache.load(config).provenance
        cell, route = record.get("device"), record.get("per_sample", "ghost")
        R = first_round(metrics, TARGETS[table])
        pair = cached_twin(cache, config, R) if twin is not None else None
        other = pair.provenance.get("device") if pair is not None else cell
        out[key] = (cell if other == cell else f"{cell}; twin {other}") + (f"; {route} route" if route != "ghost" else "")
    return out


def main(argv=None) -> int:
    """Compute the notebook's runs into a cache within a time budget (``dpfl.experiments.runner``):

        python -m dpfl.experiments.zheng2021 --profile paper --device cuda --budget 540 \\
            --cache figures/zheng2021/cache --whole-runs --bundle $OUT/zheng.tar.gz

    ``--profile cells``: the published cells, each stopped at its target, then its twin (:func:`cells`).
    """
    from dpfl.experiments import runner

    describe = lambda c: f"{c.dataset} p={c.p:g} σ={c.sigma} B={c.batch_size}" + (f" to {c.stop_at:.0%}" if c.stop_at else "")
    runs_of = lambda profile, **common: (grid(profile, **common) if profile != "cells"
                                         else [run for table in TARGETS for run in cells(table, **common)])
    route = (["--per-sample"], dict(choices=list(CONV_ROUTES), default="ghost",
                                    help="DP-SGD's per-sample gradient route; matmul also computes the non-private twins' "
                                         "convolutions as matrix products (ZhengRun.per_sample; same results up to round-off)"))
    return runner.main("dpfl.experiments.zheng2021", runs_of, describe, [*SETTINGS, "cells"], "figures/zheng2021/cache",
                       argv, followups=followups, options={"per_sample": route})


if __name__ == "__main__":
    import sys

    # run the imported module's main, not this __main__ copy's: a config's cache key names its class's
    # module, and the notebook looks runs up under dpfl.experiments.zheng2021
    from dpfl.experiments import zheng2021 as module

    sys.exit(module.main())
