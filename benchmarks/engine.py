"""Engine benchmarks (issue: federated engine), as ratios within one run.

(a) one DP-SGD client step vs the non-private step of the same model and batch (B = 16), with
    ghost clipping (the default), with each other route to the convolutions' per-sample gradients
    (``dpfl.federated.local.CONV_ROUTES``: unfolded, a grouped forward convolution, convolutions as matrix
    products), and with full per-sample gradients; (f) one round of 100 clients with the default route vs
    each other route;
(b) one round of C clients (K DP-SGD steps each) trained by ``local_train`` vs the authors' way:
    a Python loop over clients, each with its own Opacus ``GradSampleModule`` + ``DPOptimizer``;
(c) memory per client: peak resident memory of a fresh process training a round of C clients,
    as a difference between two C (on a GPU: ``torch.cuda.max_memory_allocated``);
(e) one client-level DP round of Geyer et al.'s MLP (m clients, E = 4 epochs of b = 10 batches of 50,
    plain SGD; per-layer median clipping and noise) against a plain per-client PyTorch loop doing the
    same work (an ``nn.Module`` and ``torch.optim.SGD`` per client, the server step shared);
(g) a CPU round of 50 non-private clients in a fresh process with glibc's malloc defaults vs with freed memory
    kept (``dpfl.allocator``: no page fault per fresh large tensor), with the page faults and peak memory of each;
(h) FedHDP's validation grid, a row's three λ (Ditto's λ never moves the global model): three trainings of one λ each
    vs one training that personalises with all three (``FedHDPConfig.extra_lams``, ``FedHDPRun.together``), DP-FedAvg+Ditto
    on non-IID MNIST at Table 7's setting (500 clients, q = 0.1), 3 rounds of 5 local epochs (needs MNIST: ``DPFL_DATA``);
(i) Zheng's stored accuracy (``dpfl.federated.evaluate.accuracy``) of 50 clients' own models, each on its test set
    (MnistCNN: 200 images, CIFAR-10's CNN: 100): vmapped over chunks of 25 clients (the GPU's default) vs one client a
    call (the CPU's);
(j) a CPU round of 50 MnistCNN clients, 4 DP-SGD steps of B = 8 each (Table 2's batch): the clients side by side, one
    thread a core, each operation single-threaded (``dpfl.federated.threads``, the CPU's way) vs one client at a time
    on torch's intra-op threads (the way before it);
(k) a CPU round's work around the training in Zheng's CIFAR-10 cells: the augmentation of 100 clients × 32 steps × B = 16
    images (``dpfl.data.augment.crop_flip``) and the global evaluation (``evaluate.shared_accuracy``) of the CIFAR-10 CNN
    on 6 300 test images and of MnistCNN on 8 650 (the distinct images of 100 clients' test sets): chunks side by side,
    one thread a core (the CPU's default) vs in one piece on torch's intra-op threads (the way before);
(m) a CPU round of local training with ReLU and 2×2 max-pooling as ``dpfl.models._relu_pool`` computes them (pool, then
    ReLU; the NCHW input pooled by PyTorch's channels-last kernel) vs ReLU then ``max_pool2d`` (the way before; the
    same bits): 30 FEMNIST-CNN clients × 4 SGD steps of B = 20 with dropout (the FedHDP FEMNIST grid's local work),
    50 MnistCNN clients × 4 DP-SGD steps of B = 8, 50 CIFAR-10-CNN clients × 4 Adam steps of B = 16;
(d) kernel launches per round: the ATen operations (each one kernel launch on a GPU) and the random
    draws of one round of C clients, counted with a ``TorchDispatchMode``, against the per-tensor draw
    pattern the engine had before (8 ``randn`` for the noise + 2 × (full, bernoulli, div) for the
    dropout masks, per client and step); and a local step of Ditto's personalisation with a FedHDP grid row's three
    sets of λ (FEMNIST's CNN), in one call with a λ per client against one call per set.
Writes the head of ``benchmarks/RESULTS.md`` with the machine's details (``results.write_head``), keeping its sections (the
peers' and cluster tables, rows measured apart). Run: ``make bench``.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
from unittest import mock

import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

from dpfl.device import configure
from dpfl.federated import graphs, server, threads
from dpfl.federated.evaluate import GPU_EVAL_CHUNK, accuracy
from dpfl.federated.local import CONV_ROUTES, LocalConfig, client_generators, init_state, local_train, updates_from
from dpfl.models import CIFAR_CNN, FEMNIST_CNN, GEYER_MLP, MNIST_CNN
from dpfl.opcount import OpCounter
from dpfl.provenance import device_name, git_commit
from peers import TorchMnistCNN          # benchmarks/: the same nn.Module as the peers' Opacus clients
import results
from timing import best

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
configure(DEVICE)          # the kernels the runs use (dpfl.federated.loop): deterministic cuDNN, no TF32


def _setup(model, m, steps, batch, device=DEVICE):
    params = model.init(torch.Generator().manual_seed(0))
    stacked = {k: v.unsqueeze(0).repeat(m, *[1] * v.ndim).to(device) for k, v in params.items()}
    x = torch.randn(m, steps, batch, *model.input_shape, device=device)
    y = torch.randint(0, 10, (m, steps, batch), device=device)
    return stacked, x, y


def _one_at_a_time(fn, items, workers=None):
    """``threads.spread`` as it was before it spread work over threads: every item in the calling thread."""
    return fn(slice(0, items))


def step_ratio(model, batch=16, steps=10):
    """Seconds per client step: plain, DP with each of ``CONV_ROUTES``, with full per-sample gradients."""
    stacked, x, y = _setup(model, 1, steps, batch)
    run = lambda cfg: local_train(model, cfg, stacked, init_state(stacked, cfg), x, y, client_generators(0, 0, [0], device=DEVICE))
    out = {}
    for name, cfg in [("plain", LocalConfig()),
                      *[(r, LocalConfig(dp=True, noise_multiplier=2.0, per_sample=r)) for r in (*CONV_ROUTES, "full")]]:
        out[name] = best(lambda: run(cfg), 5, DEVICE) / steps
    return out


def opacus_loop(clients, x, y, z=2.0, clip=1.0):
    """The authors' procedure: one Opacus-wrapped model and Adam per client, clients in a loop."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    for c in range(clients):
        net = GradSampleModule(TorchMnistCNN().to(DEVICE))
        opt = DPOptimizer(torch.optim.Adam(net.parameters(), lr=1e-3), noise_multiplier=z, max_grad_norm=clip,
                          expected_batch_size=y.shape[2])
        for k in range(y.shape[1]):
            opt.zero_grad()
            F.nll_loss(net(x[c, k]), y[c, k]).backward()
            opt.step()


def one_round(clients, steps, batch, model=MNIST_CNN, device=DEVICE):
    """(a function training one ``local_train`` round of ``clients`` clients of ``model`` on ``device`` under a
    given LocalConfig, the round's batches x, y): the workload the timers and ``profile_routes.py`` share."""
    stacked, x, y = _setup(model, clients, steps, batch, device)
    gens = lambda: client_generators(0, 0, range(clients), device=device)
    return lambda cfg: local_train(model, cfg, stacked, init_state(stacked, cfg), x, y, gens()), x, y


def _round_timer(clients, steps, batch, model=MNIST_CNN, repeats=3):
    """(best of ``repeats`` seconds of one round (:func:`one_round`) under a given LocalConfig, the round's batches x, y)."""
    train, x, y = one_round(clients, steps, batch, model)
    return lambda cfg: best(lambda: train(cfg), repeats, DEVICE), x, y


#: the per-sample routes other than the default, as rows (a) and (f) name them
ROUTE_NAMES = {"unfold": "unfolded convolutions", "grouped": "grouped convolutions",
               "matmul": "convolutions as matrix products"}


def route_times(clients, steps=2, batch=16, model=MNIST_CNN, routes=CONV_ROUTES, plain_routes=(),
                failed: dict | None = None, repeats=3) -> dict:
    """Seconds per round of ``local_train`` by each per-sample route, on one workload built once:
    {"dp": {route: seconds} for DP-SGD by ``routes``, "plain": {route: seconds} for non-private training by
    ``plain_routes``} (where only "matmul" differs from the default). With a dict ``failed``, a route other
    than the default that raises (a kernel this device lacks, memory) is left out and its error recorded
    there as {"dp" or "plain": {route: repr}}; without one, it raises."""
    timer, _, _ = _round_timer(clients, steps, batch, model, repeats)
    seconds = {"dp": {}, "plain": {}}
    for kind, dp, kind_routes in (("dp", True, routes), ("plain", False, plain_routes)):
        for r in kind_routes:
            try:
                seconds[kind][r] = timer(LocalConfig(dp=dp, noise_multiplier=2.0 if dp else 0.0, per_sample=r))
            except Exception as exc:
                if failed is None or r == "ghost":
                    raise
                failed.setdefault(kind, {})[r] = repr(exc)
    return seconds


def round_ratio(clients, steps=2, batch=16):
    """Seconds per round: ``local_train`` with DP-SGD, and the per-client Opacus loop on the same batches."""
    timer, x, y = _round_timer(clients, steps, batch)
    return timer(LocalConfig(dp=True, noise_multiplier=2.0)), best(lambda: opacus_loop(clients, x, y), 3, DEVICE)


def _server_step(updates: dict, z: float = 1.0) -> dict:
    bounds = server.median_bounds(updates)
    clipped, _ = server.clip_updates(updates, bounds, per_layer=True)
    return server.gaussian_mean(clipped, bounds, z, torch.Generator(device=DEVICE).manual_seed(0))


def plain_geyer_loop(global_: dict, x, y, lr=0.1) -> dict:
    """The same round written as one would in plain PyTorch: a model and an optimiser per client."""
    updates = {k: [] for k in global_}
    for c in range(y.shape[0]):
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, 600, bias=False), nn.ReLU(), nn.Linear(600, 100, bias=False),
                            nn.ReLU(), nn.Linear(100, 10, bias=False)).to(DEVICE)
        with torch.no_grad():
            for layer, k in zip((net[1], net[3], net[5]), global_):
                layer.weight.copy_(global_[k])
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        for k in range(y.shape[1]):
            opt.zero_grad()
            F.cross_entropy(net(x[c, k]), y[c, k]).backward()
            opt.step()
        for layer, k in zip((net[1], net[3], net[5]), global_):
            updates[k].append(layer.weight.detach() - global_[k])
    return _server_step({k: torch.stack(v) for k, v in updates.items()})


def geyer_round_ratio(clients: int, epochs: int = 4, batches: int = 10, batch: int = 50):
    """Seconds of one client-level DP round of Geyer's MLP: ours (``updates_from`` + the server step) and
    the plain per-client loop, on the same batches."""
    g0 = {k: v.to(DEVICE) for k, v in GEYER_MLP.init(torch.Generator().manual_seed(0)).items()}
    x = torch.rand(clients, epochs * batches, batch, 1, 28, 28, device=DEVICE)
    y = torch.randint(0, 10, (clients, epochs * batches, batch), device=DEVICE)
    cfg = LocalConfig(optimizer="sgd", lr=0.1)
    ours = best(lambda: _server_step(updates_from(GEYER_MLP, cfg, g0, x, y, client_generators(0, 0, range(clients),
                                                                                             device=DEVICE), 0.1)),
                device=DEVICE)
    theirs = best(lambda: plain_geyer_loop(g0, x, y), device=DEVICE)
    return ours, theirs


def _fresh_round(clients: int, steps: int = 2, batch: int = 16, *, dp: bool = True, device: str = DEVICE,
                 keep: bool = False, repeat: int = 0) -> dict:
    """One round of ``clients`` MnistCNN clients (``steps`` Adam steps of ``batch``, DP-SGD or plain) in a
    fresh process, ``keep``: with ``dpfl.allocator.keep_freed_memory``. Returns the peak memory (MiB), and
    with ``repeat`` the best seconds of that many rounds after a warm-up and the minor page faults of the
    best one.

    Peak memory on a CPU: the process's high-water mark VmHWM (``ru_maxrss`` is inherited across
    fork/exec on Linux, so it reports the parent's peak); on a GPU ``max_memory_allocated``."""
    code = f"""
import json, resource, time, torch
from dpfl.allocator import keep_freed_memory
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train
from dpfl.models import MNIST_CNN
if {keep}:
    keep_freed_memory()
dev = "{device}"
p = MNIST_CNN.init(torch.Generator().manual_seed(0))
st = {{k: v.unsqueeze(0).repeat({clients}, *[1] * v.ndim).to(dev) for k, v in p.items()}}
x = torch.randn({clients}, {steps}, {batch}, 1, 28, 28, device=dev)
y = torch.randint(0, 10, ({clients}, {steps}, {batch}), device=dev)
cfg = LocalConfig(dp={dp}, noise_multiplier=2.0 if {dp} else 0.0)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds = []                                    # the first one warms up
for _ in range(1 + {repeat}):
    start, f0 = time.perf_counter(), faults()
    local_train(MNIST_CNN, cfg, st, init_state(st, cfg), x, y, client_generators(0, 0, range({clients}), device=dev))
    rounds.append((time.perf_counter() - start, faults() - f0))
best = min(rounds[1:], default=(None, None))
peak = (torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda"
        else int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024)
print(json.dumps(dict(peak_mib=peak, seconds=best[0], faults=best[1])))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def allocator_ratio(clients: int = 50, steps: int = 4, batch: int = 16) -> tuple:
    """(g) A CPU round of ``clients`` non-private MnistCNN clients (a cell's twin) in fresh processes: with
    glibc's defaults and with freed memory kept (``dpfl.allocator``), best of 3 rounds each."""
    return tuple(_fresh_round(clients, steps, batch, dp=False, device="cpu", keep=keep, repeat=3) for keep in (False, True))


def shared_lambda_ratio(rounds: int = 3, epochs: int = 5, lams=(0.05, 0.2, 1.0)) -> tuple:
    """(h) Seconds of one training per λ of ``lams`` (summed) and of one training personalising with all of them."""
    from dpfl.experiments import aldaghri_fedhdp_fl as fl
    from dpfl.federated.loop import run

    one = fl.FedHDPRun(dataset="noniid_mnist", algorithm="DP-FedAvg+Ditto", lam_np=lams[0], lam_p=lams[0], rounds=rounds,
                       epochs=epochs, progress=False, device=DEVICE)
    fed = one.federation()
    alone = [dataclasses.replace(one, lam_np=lam, lam_p=lam) for lam in lams]
    train = lambda algorithm: run(algorithm, fed.data, progress=False, device=DEVICE)
    separate = sum(best(lambda c=c: train(c.algorithm_for(fed)), repeat=2, device=DEVICE) for c in alone)
    together = best(lambda: train(one.algorithm_for(fed, tuple((lam,) for lam in lams[1:]))), repeat=2, device=DEVICE)
    return together, separate


def eval_chunk_times(model, clients: int = 50) -> dict:
    """(i) Seconds of one stored-accuracy evaluation of ``clients`` models by chunk (GPU_EVAL_CHUNK and 1)."""
    images = 200 if model is MNIST_CNN else 100
    stacked, x, _ = _setup(model, clients, 1, images)
    params = {k: v + 0.01 * torch.randn_like(v) for k, v in stacked.items()}         # distinct models
    x, y = x[:, 0], torch.randint(0, 10, (clients, images), device=DEVICE)
    mask = torch.ones_like(y, dtype=torch.bool)
    return {chunk: best(lambda: accuracy(model, params, x, y, mask, stacked=True, chunk=chunk), device=DEVICE)
            for chunk in (GPU_EVAL_CHUNK, 1)}


def side_by_side_times(clients: int = 50, steps: int = 4, batch: int = 8) -> dict:
    """(j) Seconds of a CPU ``local_train`` round with the clients spread over threads and one at a time."""
    train, _, _ = one_round(clients, steps, batch, MNIST_CNN, device="cpu")
    go = lambda: train(LocalConfig(dp=True, noise_multiplier=2.0))
    times = {"side by side": best(go)}
    with mock.patch.object(threads, "spread", _one_at_a_time):
        times["one at a time"] = best(go)
    return times


def around_training_times() -> dict:
    """(k) Seconds of a CIFAR-10 round's crop_flip and of shared_accuracy on a CPU: {what: (before, now, images a
    call before)}; before: chunks of 2 000 images (shared_accuracy) or all images at once (crop_flip) in the calling
    thread, on torch's intra-op threads."""
    from dpfl.data.augment import crop_flip
    from dpfl.federated.evaluate import shared_accuracy

    g = torch.Generator().manual_seed(0)
    images = torch.randn(100, 32, 16, 3, 32, 32, generator=g)
    fill = torch.tensor([-1.99, -1.98, -1.71])

    def global_evaluation(model, shape, n):            # one model on n distinct pool images, 50 a client
        params, pool, labels = model.init(g), torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)
        index = torch.arange(n).view(-1, 50)
        mask = torch.ones_like(index, dtype=torch.bool)
        return lambda chunk=None: shared_accuracy(model, params, pool, labels, index, mask, chunk=chunk, with_loss=True)

    cases = {"crop_flip, 51 200 CIFAR-10 images": (lambda chunk=None: crop_flip(images, torch.Generator(), fill=fill,
                                                                                 chunk=chunk), 51200),
             **{f"shared_accuracy, {model.name}, {n} images": (global_evaluation(model, shape, n), 2000)
                for model, shape, n in ((CIFAR_CNN, (3, 32, 32), 6300), (MNIST_CNN, (1, 28, 28), 8650))}}
    times = {}
    for what, (go, before) in cases.items():
        side = best(go)
        with mock.patch.object(threads, "spread", _one_at_a_time):                       # the chunks in turn, as before
            times[what] = (best(lambda: go(chunk=before)), side, before)
    return times


def pool_times() -> dict:
    """(m) Seconds of a CPU ``local_train`` round per model, with ``models._relu_pool`` and with ReLU then
    ``max_pool2d``: {label: (now, before)}."""
    import dpfl.models

    cases = {"30 FEMNIST-CNN clients × 4 SGD steps of B=20 with dropout": (FEMNIST_CNN, 30, 20, LocalConfig(optimizer="sgd", lr=0.02)),
             "50 MnistCNN clients × 4 DP-SGD steps of B=8": (MNIST_CNN, 50, 8, LocalConfig(dp=True, noise_multiplier=2.0)),
             "50 CIFAR-10-CNN clients × 4 Adam steps of B=16": (CIFAR_CNN, 50, 16, LocalConfig())}
    times = {}
    for what, (model, clients, batch, cfg) in cases.items():
        train, _, _ = one_round(clients, 4, batch, model, device="cpu")
        go = lambda: train(cfg)
        mine = best(go)
        with mock.patch.object(dpfl.models, "_relu_pool", lambda h: F.max_pool2d(F.relu(h), 2)):
            times[what] = (mine, best(go))
    return times


def launches_per_round(clients=10, steps=2, batch=16) -> dict:
    """ATen ops and random draws of one DP-SGD round of ``clients`` MnistCNN clients, now and with the
    previous per-tensor draws (replayed: the same shapes drawn tensor by tensor)."""
    cfg = LocalConfig(dp=True, noise_multiplier=2.0)
    stacked, x, y = _setup(MNIST_CNN, clients, steps, batch)
    with OpCounter() as now:
        local_train(MNIST_CNN, cfg, stacked, init_state(stacked, cfg), x, y,
                    client_generators(0, 0, range(clients), device=DEVICE), chunk=clients)   # the GPU path
    shapes = [v.shape[1:] for v in stacked.values()]
    with OpCounter() as before:                                 # the old draws of one round, replayed
        for g in client_generators(0, 0, range(clients), device=DEVICE):
            for _ in range(steps):
                for shape in shapes:
                    torch.randn(shape, generator=g, device=DEVICE)
                for _ in range(2):                               # the two dropout masks
                    keep = torch.full((batch, 192), 0.75, device=DEVICE)
                    torch.bernoulli(keep, generator=g).div(0.75)
    old_total = now.ops - now.draws + before.ops                   # the rest of the round is unchanged
    return {"ops_now": now.ops, "rng_now": now.draws, "ops_before": old_total, "rng_before": before.draws}


def ditto_launches_per_step(clients=10, lams=(0.05, 0.2, 1.0), batch=20) -> dict:
    """ATen ops of one local step of Ditto's personalisation (FEMNIST's CNN, SGD, every client in one vmapped call:
    the GPU path) for ``clients`` clients and the sets of λ a FedHDP grid row trains together: in one call with a λ per
    client (what ``FedHDP.personalise`` does) and as one call per set (what it did before 2026-12-03); per step,
    from calls of 2 and 4 steps."""
    from dpfl.federated.personalize import ditto

    def ops(steps: int, sets) -> int:
        total = 0
        for lam in sets:                              # lam: one per client of the call
            stacked, x, y = _setup(FEMNIST_CNN, len(lam), steps, batch)
            with OpCounter() as count:
                ditto(FEMNIST_CNN, stacked, {k: v[0] for k, v in stacked.items()}, x, y,
                      client_generators(0, 0, range(len(lam)), device=DEVICE), lam=lam, lr=0.1, chunk=len(lam))
            total += count.ops
        return total

    one_call = [[lam for lam in lams for _ in range(clients)]]
    per_set = [[lam] * clients for lam in lams]
    return {name: (ops(4, sets) - ops(2, sets)) / 2 for name, sets in (("one call", one_call), ("per set", per_set))}


def graph_times(model, clients, steps, batch, cfg) -> dict:
    """Seconds of one ``local_train`` call (best of 3) with eager steps and with each chunk's steps replayed as a
    CUDA graph (``dpfl.federated.graphs``; a GPU only)."""
    train, _, _ = one_round(clients, steps, batch, model)
    out = {}
    for name, flag in (("eager", "0"), ("graphs", "1")):
        with mock.patch.dict(os.environ, {graphs.FLAG: flag}):
            out[name] = best(lambda: train(cfg), 3, DEVICE)
    return out


def main():
    torch.manual_seed(0)
    rows = []
    for model in (MNIST_CNN, CIFAR_CNN):
        t = step_ratio(model)
        rows.append((f"(a) DP-SGD step / plain step, {model.name}, B=16, ghost clipping", t["plain"], t["ghost"],
                     t["ghost"] / t["plain"], "≤ 1.5×"))
        for route, how in ROUTE_NAMES.items():
            rows.append((f"(a) DP-SGD step / plain step, {model.name}, B=16, ghost clipping and {how}",
                         t["plain"], t[route], t[route] / t["plain"], "(for comparison; the GPU's choice?)"))
        rows.append((f"(a) DP-SGD step / plain step, {model.name}, B=16, full per-sample gradients", t["plain"],
                     t["full"], t["full"] / t["plain"], "(for comparison)"))
    for clients in (10, 50, 100):
        ours, theirs = round_ratio(clients)
        rows.append((f"(b) Opacus per-client loop / local_train, {clients} clients, MnistCNN, 2 DP steps of B=16",
                     ours, theirs, theirs / ours, "≥ 10× on a GPU at ≥ 50 clients; ≥ 1× on a CPU"))
    t = route_times(100, plain_routes=("ghost", "matmul"))
    for route, how in ROUTE_NAMES.items():
        rows.append((f"(f) local_train with ghost clipping / with {how} too, 100 clients, MnistCNN, 2 DP steps of "
                     "B=16", t["dp"][route], t["dp"]["ghost"], t["dp"]["ghost"] / t["dp"][route],
                     "> 1 on a GPU: make it the GPU's route"))
    p = t["plain"]
    rows.append(("(f) non-private local_train, convolutions / as matrix products, 100 clients, MnistCNN, 2 steps "
                 "of B=16 (the twins)", p["matmul"], p["ghost"], p["ghost"] / p["matmul"], "> 1 on a GPU: the twins' route"))
    for clients in (50, 220):
        ours, theirs = geyer_round_ratio(clients)
        rows.append((f"(e) plain per-client PyTorch loop / ours, one client-level DP round of Geyer's MLP, {clients} "
                     "clients × 40 SGD steps of B=50", ours, theirs, theirs / ours, "≥ 1× on a CPU, ≥ 10× on a GPU"))
    default, kept = allocator_ratio()
    rows.append(("(g) glibc's malloc defaults / freed memory kept (dpfl.allocator), a CPU round of 50 non-private "
                 "MnistCNN clients × 4 Adam steps of B=16", kept["seconds"], default["seconds"],
                 default["seconds"] / kept["seconds"], "> 1 (the CLI's long CPU runs keep it)"))
    together, separate = shared_lambda_ratio()
    rows.append(("(h) three trainings of one λ each / one training personalising with all three, FedHDP's grid row "
                 "(DP-FedAvg+Ditto, non-IID MNIST, 500 clients, q = 0.1, 3 rounds × 5 epochs)", together, separate,
                 separate / together, "> 1 (the grid's rows share their training)"))
    for model in (MNIST_CNN, CIFAR_CNN):
        t = eval_chunk_times(model)
        rows.append((f"(i) stored accuracy of 50 clients' {model.name} models, chunks of {GPU_EVAL_CHUNK} clients / one "
                     "client a call", t[1], t[GPU_EVAL_CHUNK], t[GPU_EVAL_CHUNK] / t[1],
                     "> 1 on a CPU (its default: one a call), < 1 on a GPU (its default: chunks)"))
    t = side_by_side_times()
    rows.append(("(j) a CPU round of 50 MnistCNN clients × 4 DP-SGD steps of B=8, one client at a time on torch's "
                 f"{torch.get_num_threads()} intra-op threads / side by side, one thread a core", t["side by side"],
                 t["one at a time"], t["one at a time"] / t["side by side"], "> 1 on a multi-core CPU"))
    for what, (before, now, size) in around_training_times().items():
        rows.append((f"(k) {what}: {size} images a call in turn on torch's {torch.get_num_threads()} intra-op threads / "
                     "the default chunks side by side, one thread a core", now, before, before / now,
                     "> 1 on a multi-core CPU"))
    for what, (now, before) in pool_times().items():
        rows.append((f"(m) a CPU round of {what}: ReLU then max_pool2d / pool then ReLU, the pool by the channels-last "
                     "kernel (dpfl.models._relu_pool; the same bits)", now, before, before / now, "> 1 on a CPU"))
    if DEVICE == "cuda":
        for model, clients, steps, batch, cfg, what in (
                (FEMNIST_CNN, 30, 20, 20, LocalConfig(optimizer="sgd", lr=0.02), "SGD steps of B=20 with dropout"),
                (MNIST_CNN, 100, 10, 16, LocalConfig(dp=True, noise_multiplier=1.0), "DP-SGD steps of B=16")):
            t = graph_times(model, clients, steps, batch, cfg)
            rows.append((f"(l) local_train with eager steps / replayed as a CUDA graph, {clients} {model.name} clients × "
                         f"{steps} {what}", t["graphs"], t["eager"], t["eager"] / t["graphs"],
                         "> 1 (the same bits: tests/test_cuda_graphs.py)"))
    small, large = 10, 50
    m_small, m_large = _fresh_round(small)["peak_mib"], _fresh_round(large)["peak_mib"]
    per_client = (m_large - m_small) / (large - small)
    table = pd.DataFrame(rows, columns=["what", "baseline (s)", "measured (s)", "ratio", "goal"])
    counts = launches_per_round()
    ditto_ops = ditto_launches_per_step()
    text = (f"# Engine benchmarks\n\n{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"commit {git_commit()[:12]}, {device_name()}, {platform.processor() or platform.machine()}, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads.\n\n"
            "(a): seconds per client step; the baseline is the non-private step, the ratio DP / plain. "
            "(b), (e): seconds per round; the baseline is our vectorised round, the ratio the per-client loop / "
            "ours (higher is better for us); (f): seconds per round, the baseline the other route; (g): seconds "
            "per round, the baseline the round with freed memory kept; (h): seconds of training, the baseline the shared "
            "training; (i): seconds per evaluation, the baseline one client a call; (j): seconds per CPU round, the "
            "baseline the clients side by side; (k): seconds per call, the baseline the chunks side by side; (l): seconds "
            "per call, the baseline the graph's replays (a GPU only); (m): seconds per CPU round, the baseline the pooling "
            "of dpfl.models._relu_pool.\n\n"
            + table.to_markdown(index=False, floatfmt=".3g")
            + f"\n\n(c) peak memory of a process training one round of MnistCNN clients (2 DP-SGD steps, B=16; "
              f"{'GPU max_memory_allocated' if DEVICE == 'cuda' else 'CPU peak RSS, VmHWM'}): {m_small:.0f} MiB at "
              f"{small} clients, {m_large:.0f} MiB at {large} clients → {per_client:.1f} MiB per client "
              "(parameters, Adam moments, the round's data and the result; on a CPU clients are trained one "
              "at a time, so per-sample work does not grow with C).\n"
              f"\n(g) minor page faults of that round: {default['faults']} with glibc's defaults, {kept['faults']} with "
              f"freed memory kept; the process's peak memory {default['peak_mib']:.0f} → {kept['peak_mib']:.0f} MiB.\n"
              f"\n(d) one round of 10 MnistCNN clients in one vmapped call (the GPU path), 2 DP-SGD steps of B=16: "
              f"{counts['ops_now']} ATen operations "
              f"(kernel launches on a GPU), {counts['rng_now']} of them random draws; with the previous per-tensor "
              f"draws {counts['ops_before']} operations, {counts['rng_before']} draws "
              f"(×{counts['rng_before'] / max(counts['rng_now'], 1):.0f} fewer draws, "
              f"×{counts['ops_before'] / counts['ops_now']:.2f} fewer operations). Ditto's three sets of λ for 10 "
              f"FEMNIST-CNN clients (SGD, B=20) on that path: {ditto_ops['one call']:.0f} operations a local step in one "
              f"call with a λ per client, {ditto_ops['per set']:.0f} in one call per set "
              f"(×{ditto_ops['per set'] / ditto_ops['one call']:.2f}).\n")
    print(text)
    results.write_head(text)


if __name__ == "__main__":
    main()
