"""Vectorised evaluation: many models on many clients' test sets at once."""
from __future__ import annotations

import torch
from torch.func import vmap

from dpfl import checks
from dpfl.federated import threads
from dpfl.models import Model

__all__ = ["GPU_EVAL_CHUNK", "GPU_SHARED_CHUNK", "CPU_SHARED_CHUNK", "accuracy", "accuracy_cache", "refresh_accuracy",
           "shared_accuracy", "used_images"]


#: clients per vmapped evaluation on a GPU (:func:`accuracy`)
GPU_EVAL_CHUNK = 25
#: images per forward pass of :func:`shared_accuracy` on a GPU and on a CPU
GPU_SHARED_CHUNK, CPU_SHARED_CHUNK = 2000, 500


def accuracy(model: Model, params: dict, x, y, mask, *, stacked: bool, chunk: int | None = None) -> torch.Tensor:
    """Accuracy of each client's test set (x: (m, n, …), y/mask: (m, n)).

    ``stacked=True``: ``params`` carry a client axis (each client's own model); otherwise one model
    (e.g. the global one) is evaluated on every client. ``chunk``: clients per vmapped call, by default
    :data:`GPU_EVAL_CHUNK` on a GPU and one on a CPU, where a convolution vmapped over many clients' models is
    slower than one per client (as in ``local.local_train``): Zheng's stored accuracy of 50 clients took 5.3 s by
    chunks of 25 and 2.1 s one by one for MnistCNN (200 images each), 2.0 s and 0.8 s for the CIFAR-10 CNN (100
    each) on a 2-core CPU (``make bench``, row (i); ``benchmarks/RESULTS.md``). MnistCNN's log-probabilities are
    bitwise the same by either chunk there, the CIFAR-10 CNN's equal up to round-off. On a CPU whole chunks are
    spread over one thread a core (``dpfl.federated.threads``). Returns (m,) accuracies; NaN for a client whose
    model gives a non-finite log-probability on its set (a diverged model: the arg-max of NaNs is class 0, which
    scored FEMNIST's diverged Ditto models as 7.45 % accurate until 2026-12-07).
    """
    if chunk is None:
        chunk = GPU_EVAL_CHUNK if x.is_cuda else 1
    chunk = checks.positive_int("chunk", chunk)
    def one(p, xc, yc, mc):
        logp = model.forward(p, xc, None)
        acc = ((logp.argmax(-1) == yc) & mc).sum() / mc.sum().clamp(min=1)
        finite = (torch.isfinite(logp).all(-1) | ~mc).all()
        return torch.where(finite, acc, torch.full_like(acc, float("nan")))

    fn = vmap(one, in_dims=(0 if stacked else None, 0, 0, 0))
    m = y.shape[0]
    out = torch.empty(m, device=y.device)

    def evaluate(slices):                               # one thread's run of chunks
        with torch.no_grad():                           # per thread
            for sl in slices:
                out[sl] = fn({k: v[sl] for k, v in params.items()} if stacked else params, x[sl], y[sl], mask[sl])

    threads.by_chunks(evaluate, m, chunk, side_by_side=not x.is_cuda)
    return out


def accuracy_cache(clients: int, device) -> dict:
    """What :func:`refresh_accuracy` keeps in an algorithm's state (and so in its checkpoints): each
    client's accuracy at the last evaluation (``acc``) and which clients' models moved since
    (``stale``: all, at first)."""
    return {"acc": torch.zeros(clients, device=device), "stale": torch.ones(clients, dtype=torch.bool, device=device)}


def refresh_accuracy(model: Model, params: dict, test: tuple, cache: dict) -> torch.Tensor:
    """Every client's accuracy with its own model (``params`` stacked over the K clients; ``test``:
    ``FederatedDataset.test_batch`` of all K), recomputing only the clients ``cache["stale"]`` marks
    (:func:`accuracy_cache`) and clearing the marks; returns ``cache["acc"]``, updated in place.

    For algorithms whose round moves only the sampled clients' models (PriFedSync's elastic averaging,
    Ditto): the others' accuracies have not changed since the last evaluation. :func:`accuracy` treats
    each client separately, so which clients share a call does not matter: on a CPU the result
    equals a full evaluation bit for bit (``tests/test_engine.py``); on a GPU, where cuDNN may pick
    another algorithm for another number of clients, up to round-off."""
    acc, stale = cache["acc"], cache["stale"]
    ix = stale.nonzero().squeeze(1)
    if ix.numel():
        acc[ix] = accuracy(model, {k: v[ix] for k, v in params.items()}, *(t[ix] for t in test), stacked=True)
        stale.zero_()
    return acc


def used_images(index, mask) -> torch.Tensor:
    """The distinct pool images the clients' test sets use (compute once per run: it syncs a GPU)."""
    return torch.unique(index[mask])


def shared_accuracy(model: Model, params: dict, x, y, index, mask, *, used=None, chunk: int | None = None,
                    with_loss: bool = False):
    """Accuracy of one model on each client's test set, where the sets index a shared pool
    (x: (N, …), y: (N,), index/mask: (m, n)): every distinct image is classified once — Zheng et
    al.'s MNIST clients draw their 200 test images with replacement from the same 10 000.
    ``with_loss``: also return each client's mean negative log-likelihood; ``used``:
    :func:`used_images` of (index, mask), when the caller keeps it. ``chunk``: images per forward pass, by default
    :data:`GPU_SHARED_CHUNK` on a GPU and :data:`CPU_SHARED_CHUNK` on a CPU, where whole chunks are spread over one
    thread a core (``dpfl.federated.threads``): a global evaluation in Zheng's cells on a 2-core CPU took 1.2–1.3 s by
    chunks of 2 000 on two intra-op threads for the CIFAR-10 CNN (≈ 6 300 images), 0.8–0.9 s so, and 3.4 → 2.8–3.0 s
    for MnistCNN (≈ 8 650 images). For a given chunk the numbers are the same bit for bit whatever the core count;
    across chunks they are equal up to round-off (which may flip a near-tie's prediction), bit for bit where the CPU's
    kernels do not depend on the batch size (an AVX-512 Xeon's did below 16 images; ``tests/test_engine.py``; ``make bench``,
    row (k)). NaN for a client one of whose images gets a non-finite log-probability (a diverged model)."""
    used = used_images(index, mask) if used is None else used
    if chunk is None:
        chunk = GPU_SHARED_CHUNK if x.is_cuda else CPU_SHARED_CHUNK
    chunk = checks.positive_int("chunk", chunk)
    correct = torch.zeros(y.shape[0], dtype=torch.bool, device=y.device)
    finite = torch.ones(y.shape[0], dtype=torch.bool, device=y.device)
    nll = torch.zeros(y.shape[0], device=y.device)

    def evaluate(slices):                               # one thread's run of chunks
        with torch.no_grad():                           # per thread
            for sl in slices:
                ix = used[sl]
                logp = model.forward(params, x[ix], None)
                correct[ix] = logp.argmax(-1) == y[ix]
                finite[ix] = torch.isfinite(logp).all(-1)
                nll[ix] = -logp.gather(-1, y[ix].unsqueeze(-1)).squeeze(-1).to(nll.dtype)

    threads.by_chunks(evaluate, used.numel(), chunk, side_by_side=not x.is_cuda)
    count = mask.sum(1).clamp(min=1)
    acc = (correct[index] & mask).sum(1) / count
    acc = acc.masked_fill((~finite[index] & mask).any(1), float("nan"))    # a diverged model: no accuracy
    if not with_loss:
        return acc
    return acc, (nll[index] * mask).sum(1) / count
