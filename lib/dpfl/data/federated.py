"""A federated dataset: per-client index arrays over shared tensors, with stacked batches.

A round trains its sampled clients at once, so batches come out stacked along a client axis:
``batches(clients, batch_size, steps, rng)`` returns x of shape (m, steps, B, C, H, W). The
default sampler draws, for every client and step, a fixed-size batch of B distinct examples
uniformly from the client's data (Zheng et al.'s sampler; the accounting event is subsampling
without replacement with q = B/n_i); ``sampling="poisson"`` includes each example independently
with probability B/n_i and returns a padding mask. Batch indices are drawn for all clients with
one vectorised call.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dpfl import checks
from dpfl.data.datasets import NORMALISATION, Dataset

__all__ = ["FederatedDataset"]


def _padded(index_lists) -> tuple:
    sizes = np.array([len(ix) for ix in index_lists])
    table = np.zeros((len(index_lists), max(int(sizes.max()), 1)), dtype=np.int64)
    for row, ix in enumerate(index_lists):
        table[row, :len(ix)] = ix
    return table, sizes


@dataclasses.dataclass
class FederatedDataset:
    """Shared train/test tensors (normalised floats) and each client's train and test indices."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    clients: list
    test_clients: list
    source: str
    black: torch.Tensor | None = None      # a black pixel after normalisation (the padding of random crops)

    def __post_init__(self):
        if len(self.clients) != len(self.test_clients):
            raise ValueError("clients and test_clients must list the same number of clients")
        if any(len(ix) == 0 for ix in self.clients):
            raise ValueError("every client needs at least one training example")
        self._train_table, self._train_sizes = _padded(self.clients)
        self._test_table, self._test_sizes = _padded(self.test_clients)

    @classmethod
    def from_partition(cls, train: Dataset, test: Dataset, clients: list, test_clients: list, *,
                       normalisation=None):
        """``normalisation``: (mean, std) per channel, default the dataset's (``NORMALISATION``)."""
        mean, std = normalisation or NORMALISATION[train.name]
        black = -torch.tensor(mean) / torch.tensor(std)
        return cls(train.to_float(normalisation), train.y, test.to_float(normalisation), test.y, list(clients),
                   list(test_clients), train.source, black)

    def to(self, device) -> "FederatedDataset":
        """The same dataset with its image and label tensors on ``device`` (moved once; each round then
        ships only the batch indices, and :meth:`batches` gathers there)."""
        if self.train_x.device == torch.device(device):
            return self
        moved = lambda t: None if t is None else t.to(device)
        return FederatedDataset(moved(self.train_x), moved(self.train_y), moved(self.test_x), moved(self.test_y),
                                self.clients, self.test_clients, self.source, moved(self.black))

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def client_sizes(self) -> np.ndarray:
        return self._train_sizes.copy()

    def _client_ids(self, client_ids) -> np.ndarray:
        """``client_ids`` as int64 after checking each lies in [0, num_clients) (a negative id
        would otherwise index from the end)."""
        raw = np.asarray(client_ids)
        if raw.dtype == bool or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
            raise ValueError(f"client_ids must be integers in [0, {self.num_clients}); got dtype {raw.dtype}")
        ids = raw.astype(np.int64).reshape(-1)
        bad = (ids < 0) | (ids >= self.num_clients)
        if bad.any():
            raise ValueError(f"client_ids must lie in [0, {self.num_clients}); got {ids[bad][:5].tolist()}")
        return ids

    def batches(self, client_ids, batch_size: int, steps: int, rng: np.random.Generator,
                sampling: str = "fixed"):
        """Stacked batches for ``steps`` local steps of each client in ``client_ids``.

        ``sampling``: "fixed" (B distinct examples, uniform, afresh each step), "poisson" (each
        example with probability B/n; padded) or "shuffle" (epochs over a random permutation).
        Returns ``(x, y, mask)`` with x of shape (m, steps, B, …), y (m, steps, B) and mask
        (m, steps, B) marking real examples (all True for fixed-size batches).
        """
        ids = self._client_ids(client_ids)
        B = checks.positive_int("batch_size", batch_size)
        steps = checks.positive_int("steps", steps)
        checks.one_of("sampling", sampling, ("fixed", "poisson", "shuffle"))
        sizes = self._train_sizes[ids]
        if (sizes < B).any():
            raise ValueError(f"batch_size {B} exceeds the data of client(s) {ids[sizes < B][:5].tolist()}")
        table = self._train_table[ids]
        n_max = table.shape[1]
        valid = np.arange(n_max)[None, None, :] < sizes[:, None, None]
        keys = np.where(valid, rng.random((ids.size, steps, n_max)), np.inf)
        if sampling == "fixed":
            pos = np.argpartition(keys, B - 1, axis=-1)[..., :B]            # B smallest keys: uniform
            mask = np.ones(pos.shape, dtype=bool)
        elif sampling == "shuffle":
            # epochs: each run of ⌊n/B⌋ steps walks through one random permutation of the client's
            # data in consecutive batches of B (the remainder is dropped), as Geyer et al.'s
            # np.split(indices, b) with B = n/b
            per_epoch = sizes // B
            epoch = np.arange(steps)[None, :] // per_epoch[:, None]
            within = np.arange(steps)[None, :] % per_epoch[:, None]
            epoch_keys = np.where(valid[:, :1, :], rng.random((ids.size, int(epoch.max()) + 1, n_max)), np.inf)
            order = np.argsort(epoch_keys, axis=-1)
            rows = np.take_along_axis(order, epoch[..., None], axis=1)             # (m, steps, n_max)
            pos = np.take_along_axis(rows, within[..., None] * B + np.arange(B)[None, None, :], axis=-1)
            mask = np.ones(pos.shape, dtype=bool)
        else:
            take = keys < (B / sizes)[:, None, None]
            width = max(int(take.sum(axis=-1).max()), 1)
            pos = np.argsort(~take, axis=-1, kind="stable")[..., :width]
            mask = np.take_along_axis(take, pos, axis=-1)
        index = np.take_along_axis(np.broadcast_to(table[:, None, :], (ids.size, steps, n_max)), pos, axis=-1)
        flat = torch.from_numpy(index.reshape(-1)).to(self.train_x.device)
        x = self.train_x[flat].reshape(*index.shape, *self.train_x.shape[1:])
        y = self.train_y[flat].reshape(index.shape)
        return x, y, torch.from_numpy(mask).to(self.train_x.device)

    def test_index(self, client_ids):
        """Each client's test indices into ``test_x``, padded: (index (m, n_max), mask (m, n_max))."""
        ids = self._client_ids(client_ids)
        sizes = self._test_sizes[ids]
        table = self._test_table[ids][:, :max(int(sizes.max()), 1)]
        mask = np.arange(table.shape[1])[None, :] < sizes[:, None]
        return torch.from_numpy(table).to(self.test_x.device), torch.from_numpy(mask).to(self.test_x.device)

    def test_batch(self, client_ids):
        """Every test example of each client, padded: (x (m, n_max, …), y (m, n_max), mask)."""
        ids = self._client_ids(client_ids)
        sizes = self._test_sizes[ids]
        table = self._test_table[ids][:, :max(int(sizes.max()), 1)]
        mask = np.arange(table.shape[1])[None, :] < sizes[:, None]
        flat = torch.from_numpy(table.reshape(-1)).to(self.test_x.device)
        x = self.test_x[flat].reshape(*table.shape, *self.test_x.shape[1:])
        return x, self.test_y[flat].reshape(table.shape), torch.from_numpy(mask).to(self.test_x.device)
