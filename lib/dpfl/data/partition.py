"""Federated partitions: pure functions of (labels, parameters, generator) → one index array per client.

* :func:`label_shards` — McMahan et al. 2017's pathological non-IID split (Zheng et al.: 400 shards
  of 150, 4 per client; Geyer et al.: :func:`geyer_shards`);
* :func:`test_sets_like` — per-client test sets drawn from the test images of the client's own
  labels, with replacement (Zheng et al.'s MNIST code);
* :func:`dirichlet` — Hsu et al. 2019's Dirichlet label mix (Zheng et al.'s CIFAR-10: clients may
  overlap, as in their code; ``disjoint=True`` for the usual variant);
* :func:`one_label` and :func:`skewed` — FedHDP's one-label clients and its skewed variant;
* :func:`by_writer` — FEMNIST's natural split.
"""
from __future__ import annotations

import numpy as np

from dpfl import checks

__all__ = ["check_shards", "label_shards", "geyer_shards", "test_sets_like", "dirichlet", "dirichlet_like", "one_label", "skewed",
           "by_writer", "label_proportions"]


def _labels(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError("labels must be a non-empty 1-D array")
    return labels.astype(np.int64)


def check_shards(num_clients: int, shards_per_client: int, shard_size: int, pool_size: int) -> None:
    """Raise ValueError, naming the parameter, unless :func:`label_shards` can deal ``shards_per_client``
    shards of ``shard_size`` to each of ``num_clients`` from ``pool_size`` samples cut into whole shards
    (a run's config calls it before loading any data)."""
    checks.positive_int("num_clients", num_clients)
    checks.positive_int("shards_per_client", shards_per_client)
    checks.positive_int("shard_size", shard_size)
    if num_clients * shards_per_client * shard_size > pool_size:
        raise ValueError(f"num_clients·shards_per_client·shard_size = {num_clients * shards_per_client * shard_size} "
                         f"exceeds the {pool_size} available samples (num_clients at most "
                         f"{pool_size // (shards_per_client * shard_size)}); got num_clients = {num_clients}")
    if pool_size % shard_size:
        raise ValueError(f"shard_size {shard_size} does not divide the {pool_size} samples into whole shards")


def label_shards(labels, num_clients: int, shards_per_client: int, shard_size: int,
                 rng: np.random.Generator, *, indices=None) -> list:
    """Sort by label, cut into shards of ``shard_size``, deal ``shards_per_client`` random shards
    to each of ``num_clients`` (McMahan et al. 2017, §3). ``indices`` restricts the pool (e.g.
    Geyer's first 50 000 images); ties are broken by index so the sort is deterministic."""
    labels = _labels(labels)
    pool = np.arange(labels.size) if indices is None else np.asarray(indices, dtype=np.int64)
    check_shards(num_clients, shards_per_client, shard_size, pool.size)
    num_shards = num_clients * shards_per_client
    order = pool[np.lexsort((pool, labels[pool]))]
    shards = order.reshape(-1, shard_size)
    chosen = rng.permutation(shards.shape[0])[:num_shards].reshape(num_clients, shards_per_client)
    return [np.sort(shards[c].reshape(-1)) for c in chosen]


def geyer_shards(labels, num_clients: int, rng: np.random.Generator, *, shard_size: int = 250,
                 shards_per_client: int = 2, train_size: int = 50_000) -> list:
    """Geyer et al.'s split (their code, docs/geyer2017.md §2): shards of 250 from the first 50 000
    training images (the rest is their validation set), 2 per client — 500 per client, where the
    paper says 600 (use ``shard_size=300`` for that). For K > 100 clients the 100-client split is
    replicated K/100 times (so clients share data, as in their code)."""
    labels = _labels(labels)
    num_clients = checks.positive_int("num_clients", num_clients)
    train_size = checks.positive_int("train_size", train_size)
    if labels.size < train_size:
        raise ValueError(f"labels holds {labels.size} images; geyer_shards takes the first train_size = "
                         f"{train_size} (pass the whole training set, or a smaller train_size)")
    base = min(num_clients, train_size // (checks.positive_int("shard_size", shard_size)
                                            * checks.positive_int("shards_per_client", shards_per_client)))
    if base < 1:
        raise ValueError(f"train_size = {train_size} holds no client's {shards_per_client} shards of {shard_size}")
    if num_clients % base:
        raise ValueError(f"num_clients must be a multiple of {base} for the replicated split; got {num_clients}")
    parts = label_shards(labels, base, shards_per_client, shard_size, rng, indices=np.arange(train_size))
    return [parts[c % base] for c in range(num_clients)]


def test_sets_like(train_labels, test_labels, clients: list, size: int, rng: np.random.Generator) -> list:
    """For each client, ``size`` test indices drawn with replacement from the test images whose
    label the client holds (Zheng et al.'s MNIST code)."""
    train_labels, test_labels = _labels(train_labels), _labels(test_labels)
    size = checks.positive_int("size", size)
    out = []
    for idx in clients:
        pool = np.flatnonzero(np.isin(test_labels, np.unique(train_labels[idx])))
        out.append(np.sort(rng.choice(pool, size=size, replace=True)))
    return out


def dirichlet(labels, num_clients: int, beta: float, samples_per_client: int, rng: np.random.Generator,
              *, disjoint: bool = False, return_proportions: bool = False):
    """Per client q ~ Dir(β·1) over classes, class counts ~ Multinomial(n, q), then that many
    images of each class (Hsu, Qi & Brown 2019). By default each client samples independently
    (clients may share images, as Zheng et al.'s CIFAR-10 code does); ``disjoint=True`` draws
    without replacement from a shared pool and fails when a class runs out. With
    ``return_proportions`` also returns the clients' q (num_clients × classes), from which
    :func:`dirichlet_like` draws matching test sets."""
    labels = _labels(labels)
    num_clients = checks.positive_int("num_clients", num_clients)
    checks.positive("beta", beta)
    n = checks.positive_int("samples_per_client", samples_per_client)
    classes = np.unique(labels)
    pools = {c: rng.permutation(np.flatnonzero(labels == c)) for c in classes}
    taken = {c: 0 for c in classes}
    out, proportions = [], []
    for _ in range(num_clients):
        q = rng.dirichlet(np.full(classes.size, float(beta)))
        proportions.append(q)
        counts = rng.multinomial(n, q)
        idx = []
        for c, k in zip(classes, counts):
            if k == 0:
                continue
            if disjoint:
                if taken[c] + k > pools[c].size:
                    raise ValueError(f"samples_per_client·num_clients exceeds the {pools[c].size} images "
                                     f"of class {c} available for a disjoint split")
                idx.append(pools[c][taken[c]:taken[c] + k])
                taken[c] += k
            else:
                if k > pools[c].size:
                    raise ValueError(f"a client needs {k} images of class {c}; only {pools[c].size} exist")
                idx.append(rng.choice(pools[c], size=k, replace=False))
        out.append(np.sort(np.concatenate(idx)))
    return (out, np.array(proportions)) if return_proportions else out


def dirichlet_like(labels, proportions, samples_per_client: int, rng: np.random.Generator) -> list:
    """Test sets with the clients' own class proportions: counts ~ Multinomial(n, q_i), then that
    many images of each class without replacement within the client (Zheng et al.'s CIFAR-10 test
    split: 200 per client with the client's Dirichlet q)."""
    labels = _labels(labels)
    n = checks.positive_int("samples_per_client", samples_per_client)
    classes = np.unique(labels)
    proportions = np.asarray(proportions, dtype=float)
    if proportions.ndim != 2 or proportions.shape[1] != classes.size:
        raise ValueError(f"proportions must be (clients, {classes.size}); got {proportions.shape}")
    pools = {c: np.flatnonzero(labels == c) for c in classes}
    out = []
    for q in proportions:
        counts = rng.multinomial(n, q / q.sum())
        out.append(np.sort(np.concatenate([rng.choice(pools[c], size=k, replace=False)
                                           for c, k in zip(classes, counts) if k])))
    return out


def one_label(labels, num_clients: int, samples_per_client: int, rng: np.random.Generator, *,
              client_labels=None) -> list:
    """Each client holds ``samples_per_client`` images of one label (disjoint across clients).
    Labels are dealt round-robin over a random order of the classes unless ``client_labels``
    gives one per client."""
    labels = _labels(labels)
    num_clients = checks.positive_int("num_clients", num_clients)
    n = checks.positive_int("samples_per_client", samples_per_client)
    classes = np.unique(labels)
    if client_labels is None:
        order = rng.permutation(classes)
        client_labels = [order[c % classes.size] for c in range(num_clients)]
    elif len(client_labels) != num_clients:
        raise ValueError(f"client_labels must give one label per client ({num_clients}); got {len(client_labels)}")
    pools = {c: rng.permutation(np.flatnonzero(labels == c)) for c in classes}
    used = {c: 0 for c in classes}
    out = []
    for c in client_labels:
        if c not in pools:
            raise ValueError(f"client label {c} does not occur in labels")
        if used[c] + n > pools[c].size:
            raise ValueError(f"samples_per_client·(clients with label {c}) exceeds the {pools[c].size} images of label {c}")
        out.append(np.sort(pools[c][used[c]:used[c] + n]))
        used[c] += n
    return out


def skewed(labels, num_clients: int, samples_per_client: int, chosen_clients, chosen_label: int,
           rng: np.random.Generator) -> list:
    """FedHDP's skewed non-IID split: the ``chosen_clients`` (e.g. the non-private ones) all hold
    ``chosen_label``; every other client holds one of the other labels, dealt round-robin."""
    labels = _labels(labels)
    chosen = set(int(c) for c in chosen_clients)
    others = [c for c in np.unique(labels) if c != chosen_label]
    if chosen_label not in np.unique(labels):
        raise ValueError(f"chosen_label {chosen_label} does not occur in labels")
    order = rng.permutation(others)
    k = 0
    client_labels = []
    for c in range(num_clients):
        if c in chosen:
            client_labels.append(chosen_label)
        else:
            client_labels.append(order[k % len(order)])
            k += 1
    return one_label(labels, num_clients, samples_per_client, rng, client_labels=client_labels)


def by_writer(writers, *, subset=None) -> list:
    """One client per writer (FEMNIST), in writer order; ``subset`` keeps only those writer ids."""
    writers = _labels(writers)
    ids = np.unique(writers) if subset is None else np.asarray(subset)
    missing = np.setdiff1d(ids, writers)
    if missing.size:
        raise ValueError(f"subset holds writers absent from the data: {missing[:5].tolist()}")
    order = np.argsort(writers, kind="stable")
    bounds = np.searchsorted(writers[order], ids, side="left"), np.searchsorted(writers[order], ids, side="right")
    return [np.sort(order[a:b]) for a, b in zip(*bounds)]


def label_proportions(labels, clients: list, num_classes: int) -> np.ndarray:
    """(clients × classes) matrix of each client's label proportions (for Zheng's Fig. E.3a)."""
    labels = _labels(labels)
    return np.stack([np.bincount(labels[idx], minlength=num_classes) / max(len(idx), 1) for idx in clients])
