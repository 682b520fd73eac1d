"""Zheng, Chen, Long & Su (2021), *Federated f-Differential Privacy*: the experiments of §4.

Faithful to the authors' code (details.md §1.4): non-IID MNIST of 100 clients × 4 label shards of
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
import os
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from dpfl import checks
from dpfl.accounting import gdp
from dpfl.data import FederatedDataset, load_dataset, partition
from dpfl.federated.engine import RoundConfig, train
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import PoissonClients
from dpfl.models import MNIST_CNN, cifar_cnn

__all__ = ["ZhengRun", "federated_mnist", "federated_cifar10", "first_round", "CIFAR_NORMALISATION",
           "default_steps"]

#: The authors' CIFAR-10 normalisation (``transforms.Normalize``; details.md §1.4).
CIFAR_NORMALISATION = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))


def default_steps(n: int, batch_size: int) -> int:
    """K = ⌈n/B⌉ local steps per round (one epoch), except the authors' hard-coded 76 for MNIST B = 8."""
    return 76 if (n, batch_size) == (600, 8) else math.ceil(n / batch_size)


def federated_mnist(num_clients: int, seed: int, data_dir=None, *, shards: int = 4, shard_size: int = 150,
                    test_size: int = 200) -> FederatedDataset:
    """Zheng et al.'s non-IID MNIST (``prepare_mnist_non_iid``): 400 label shards of 150 dealt 4 per
    client; test images drawn with replacement from the test images of the client's labels."""
    train_set, test_set = load_dataset("mnist", "train", data_dir), load_dataset("mnist", "test", data_dir)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2021, 0]))
    clients = partition.label_shards(train_set.y.numpy(), num_clients, shards, shard_size, rng)
    tests = partition.test_sets_like(train_set.y.numpy(), test_set.y.numpy(), clients, test_size, rng)
    return FederatedDataset.from_partition(train_set, test_set, clients, tests)


def federated_cifar10(num_clients: int, seed: int, data_dir=None, *, beta: float = 0.5, train_size: int = 500,
                      test_size: int = 200):
    """Zheng et al.'s non-IID CIFAR-10 (``prepare_cifar_non_iid``): q ~ Dir(β), 500 training images
    per client from Multinomial(500, q) (independently per client: clients may share images), 200
    test images from Multinomial(200, q). Returns (FederatedDataset, proportions q)."""
    train_set, test_set = load_dataset("cifar10", "train", data_dir), load_dataset("cifar10", "test", data_dir)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 2021, 1]))
    clients, q = partition.dirichlet(train_set.y.numpy(), num_clients, beta, train_size, rng, return_proportions=True)
    tests = partition.dirichlet_like(test_set.y.numpy(), q, test_size, rng)
    return FederatedDataset.from_partition(train_set, test_set, clients, tests, normalisation=CIFAR_NORMALISATION), q


def first_round(metrics: pd.DataFrame, target: float, column: str = "acc_stored_local") -> int | None:
    """The first round whose ``column`` reaches ``target`` (Tables 1–3's R), or None."""
    hit = metrics.index[metrics[column] >= target]
    return int(metrics.loc[hit[0], "round"]) if len(hit) else None


@dataclasses.dataclass(frozen=True)
class ZhengRun:
    """One run of PriFedSync with DP-SGD clients (Alg. 1–2), as in the authors' code.

    ``dataset``: "mnist" or "cifar10"; ``p``: client sampling rate; ``sigma``: Zheng's σ (noise
    std 2σC on the sum of clipped gradients; None: non-private); ``batch_size`` B and
    ``local_steps`` K (default ⌈n/B⌉, 76 for MNIST B=8); ``rounds``: the most rounds;
    ``stop_at``: stop once the paper's metric reaches it. ``data_dir``/``checkpoint_dir``/``progress``
    say where things are, not what is computed, and stay out of the config hash.
    """

    code_version: ClassVar[int] = 1

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
    seed: int = 0
    device: str = "cpu"
    data_dir: str | None = dataclasses.field(default=None, metadata={"hash": False})
    checkpoint_dir: str | None = dataclasses.field(default=None, metadata={"hash": False})
    progress: bool = dataclasses.field(default=True, metadata={"hash": False})

    def __post_init__(self):
        checks.one_of("dataset", self.dataset, ("mnist", "cifar10"))
        checks.in_range("p", self.p, 0, 1, lo_open=True)
        if self.sigma is not None:
            checks.positive("sigma", self.sigma)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("rounds", self.rounds)
        checks.positive_int("num_clients", self.num_clients)

    @property
    def n(self) -> int:
        """Training images per client."""
        return 600 if self.dataset == "mnist" else 500

    @property
    def steps(self) -> int:
        return self.local_steps or default_steps(self.n, self.batch_size)

    def mu(self, rounds: int) -> float:
        """Theorem 2's μ_max after ``rounds`` rounds (the CLT of C_{B/n}(G_{1/σ})^{⊗KR})."""
        return float(gdp.mu_dpsgd(self.sigma, self.batch_size, self.n, self.steps * rounds)) if self.sigma else math.inf

    def federated_data(self) -> FederatedDataset:
        if self.dataset == "mnist":
            return federated_mnist(self.num_clients, self.seed, self.data_dir)
        return federated_cifar10(self.num_clients, self.seed, self.data_dir)[0]

    def round_config(self) -> RoundConfig:
        private = self.sigma is not None
        if self.dataset == "mnist":
            local = LocalConfig(optimizer="adam", lr=1e-3, dp=private, clip=1.0,
                                noise_multiplier=2 * self.sigma if private else 0.0)
            schedule = {}
        else:
            local = LocalConfig(optimizer="adam", lr=5e-3, weight_decay=5e-4, dp=private, clip=1.0,
                                noise_multiplier=2 * self.sigma if private else 0.0)
            schedule = dict(lr_step=10, lr_gamma=0.99, augment=self.augment)
        return RoundConfig(rounds=self.rounds, batch_size=self.batch_size, local_steps=self.steps,
                           sampler=PoissonClients(self.p), local=local, alpha=self.alpha, eta=1.0, seed=self.seed,
                           eval_every=self.eval_every, stop_at=self.stop_at,
                           checkpoint_every=10 if self.checkpoint_dir else 0, **schedule)

    def compute(self) -> pd.DataFrame:
        """Train; one row per round (see ``dpfl.federated.engine.train``)."""
        from dpfl.runs import config_hash

        model = MNIST_CNN if self.dataset == "mnist" else cifar_cnn(self.relu3)
        checkpoint = (Path(self.checkpoint_dir) / f"ZhengRun-{config_hash(self)}.pt" if self.checkpoint_dir else None)
        if checkpoint is not None:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
        metrics = train(model, self.federated_data(), self.round_config(), checkpoint=checkpoint,
                        progress=self.progress, device=self.device)
        if checkpoint is not None and checkpoint.exists():
            checkpoint.unlink()                       # the cached result replaces it
        return metrics
