"""Checkpoints that can only be resumed by the run that wrote them.

A round loop's state holds the privacy spent so far (the accountant's events), so resuming it under
another configuration would apply the new configuration's noise to rounds that ran with the old one
(2 rounds at z = 0.5 resumed at z = 8 once reported μ = 0.19 for rounds that compose to ≈ 2065).
Every checkpoint therefore carries the hash of what determines the run — model, round configuration
and the federated data's partition — and :func:`load` refuses one whose hash differs.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from dpfl.io import atomic_path
from dpfl.runs import jsonable

__all__ = ["EXTENSIBLE", "run_key", "load", "save"]


#: Fields that say how long a run goes on, how often it saves or evaluates, not what its rounds compute
#: (training, noise, privacy spent): a run may be resumed with other values (e.g. extended from 2 to 5
#: rounds, or evaluated more often from here on).
EXTENSIBLE = ("rounds", "checkpoint_every", "stop_at", "delta_budget", "eval_every")


def run_key(model, fd, cfg) -> str:
    """A 16-hex-digit hash of the model's name, the (frozen dataclass) config ``cfg`` (less the
    :data:`EXTENSIBLE` fields) and the data: its source, tensor shapes and every client's train and
    test indices."""
    data = hashlib.sha256()
    for part in (fd.clients, fd.test_clients):
        for ix in part:
            data.update(np.asarray(ix, dtype=np.int64).tobytes())
            data.update(b"|")
    config = {k: v for k, v in jsonable(cfg).items() if k not in EXTENSIBLE}
    payload = {"model": model.name, "config": config, "data": {
        "source": fd.source, "train": list(fd.train_x.shape), "test": list(fd.test_x.shape),
        "clients": data.hexdigest()}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def load(path, key: str, device="cpu") -> dict | None:
    """The state saved at ``path`` (None if there is none), provided it was written under ``key``.

    Temporary files a killed save left beside it (``.<name>.*.tmp``, up to a checkpoint's size:
    ≈ 1.4 GB for Zheng's 100 MNIST clients) are deleted first."""
    if path is None:
        return None
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    if not path.exists():
        return None
    state = torch.load(path, weights_only=False, map_location=device)
    found = state.get("run_key") if isinstance(state, dict) else None
    if found != key:
        raise ValueError(f"checkpoint {path} was written by another run (key {found}, this run {key}): its "
                         "rounds and privacy spent belong to that configuration; delete it or use another path")
    return state


def save(path, key: str, state: dict) -> None:
    """Write ``state`` (with ``run_key`` = ``key``) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        torch.save({**state, "run_key": key}, tmp)
