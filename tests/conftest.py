"""Shared fixtures: the offline data directory and an isolated dataset cache."""
import os

import numpy as np
import pytest

from dpfl.data import FederatedDataset, load_dataset, partition
from tests_support import SHARED_DATA, shared_root


@pytest.fixture
def data_root():
    """``$DPFL_DATA`` if set, else ``../shared/data``; skips when neither holds the datasets."""
    return shared_root()


@pytest.fixture(scope="session", autouse=True)
def _offline_data_by_default():
    """Where ``$DPFL_DATA`` is unset, point it at ``../shared/data`` (``tests_support.SHARED_DATA``) for the whole
    session, so that library code reading the default root (``fl.federation`` without ``data_dir``) finds the same
    datasets as the tests that ask ``shared_root()``; a plain ``make test`` beside ``../shared`` then needs no network
    (2026-11-28: without it, 11 FedHDP tests tried to download MNIST)."""
    if os.environ.get("DPFL_DATA") or not SHARED_DATA.exists():
        yield
        return
    os.environ["DPFL_DATA"] = str(SHARED_DATA)
    yield
    del os.environ["DPFL_DATA"]


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Each test starts from one state of torch's global generator: a test that draws from it (``torch.randn``
    without a generator) sees the same numbers whichever tests a pytest-xdist worker ran before it, so a
    round-off tolerance that holds once holds every time (2026-11-26: an Opacus comparison failed once on
    such inputs)."""
    import torch

    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session decodes datasets into its own cache (never the user's)."""
    monkeypatch.setenv("DPFL_CACHE", str(tmp_path_factory.getbasetemp() / "dpfl-cache"))


@pytest.fixture(scope="module")
def mnist_shards():
    """8 clients of Zheng et al.'s kind (4 label shards of 150), 100 test images each."""
    root = shared_root()
    train_set, test_set = load_dataset("mnist", "train", root), load_dataset("mnist", "test", root)
    rng = np.random.default_rng(0)
    clients = partition.label_shards(train_set.y.numpy(), 8, 4, 150, rng)
    tests = partition.test_sets_like(train_set.y.numpy(), test_set.y.numpy(), clients, 100, rng)
    return FederatedDataset.from_partition(train_set, test_set, clients, tests)
