"""dpfl.federated.loop: the one round loop of PriFedSync, client-level DP-FedAvg and FedHDP —
checkpoint → kill → resume bit-identical, the deadline, time-based checkpoints, device placement."""
import dataclasses
import time

import numpy as np
import pandas as pd
import pytest
import torch

from dpfl.data.federated import FederatedDataset
from dpfl.federated import loop
from dpfl.experiments.geyer2017 import GeyerConfig, GeyerDP
from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
from dpfl.federated.engine import PriFedSync, RoundConfig
from dpfl.federated.fedhdp import FedHDP, FedHDPConfig
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import FixedClients, PoissonClients
from dpfl.models import GEYER_MLP
from tests_support import device_under_test

DEVICE = device_under_test()


def _data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(160, 1, 28, 28, generator=g), torch.randint(0, 10, (160,), generator=g)
    clients = [np.arange(i, 160, 4) for i in range(4)]
    return FederatedDataset(x, y, x, y, clients, clients, "random")


SGD = LocalConfig(optimizer="sgd", lr=0.1)
#: each algorithm: (its class, its constructor's keyword arguments for a run of R rounds)
ALGORITHMS = {
    "prifedsync": (PriFedSync, lambda R, every: dict(cfg=RoundConfig(
        rounds=R, batch_size=8, local_steps=2, sampler=PoissonClients(0.7), checkpoint_every=every,
        local=LocalConfig(optimizer="adam", lr=1e-3, dp=True, clip=1.0, noise_multiplier=1.0)))),
    "client_dp": (ClientLevelDP, lambda R, every: dict(cfg=ClientDPConfig(
        rounds=R, batch_size=8, local_steps=2, sampler=FixedClients(3), local=SGD, noise_multiplier=1.0,
        clip="adaptive", per_layer=False, count_noise_std=2.0, checkpoint_every=every))),
    "geyer": (GeyerDP, lambda R, every: dict(cfg=GeyerConfig(
        rounds=R, batch_size=8, local_steps=2, sampler=FixedClients(3), local=SGD, noise_multiplier=1.0,
        batch_sampling="shuffle", diagnostics=True, checkpoint_every=every))),
    "fedhdp": (FedHDP, lambda R, every: dict(groups=np.array([0, 1, 1, 0]), cfg=FedHDPConfig(
        rounds=R, batch_size=8, local_steps=2, sampler=PoissonClients(0.8), local=SGD, checkpoint_every=every,
        noise_multipliers=(0.0, 1.0), ratios=(1.0, 0.5), lams=(0.1, 0.1), personal_lr=0.05, count_noise_frac=1.0))),
}
PRIVACY_COLUMNS = {"prifedsync": ["mu_max_clt"], "client_dp": ["delta"], "geyer": ["delta", "delta_paper"], "fedhdp": ["eps_1"]}


def _run(name, rounds=5, every=0, **kwargs):
    cls, make = ALGORITHMS[name]
    return loop.run(cls(GEYER_MLP, **make(rounds, every)), _data(), progress=False, device=DEVICE, **kwargs)


def _same(a, b):
    cols = [c for c in a.columns if c != "seconds"]
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)


@pytest.mark.parametrize("cadence", ["rounds", "seconds"])
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_checkpoint_kill_resume_is_bit_identical(name, cadence, tmp_path, monkeypatch):
    full = _run(name)
    assert full[PRIVACY_COLUMNS[name]].notna().all().all()            # the loop composed and read the events
    cls = ALGORITHMS[name][0]
    original = cls.round

    def killed_in_round_4(self, r):
        if r.t == 4:
            raise KeyboardInterrupt("killed")
        return original(self, r)

    ckpt = tmp_path / "run.pt"
    every, seconds = (1, None) if cadence == "rounds" else (0, 1e-9)
    monkeypatch.setattr(cls, "round", killed_in_round_4)
    with pytest.raises(KeyboardInterrupt):
        _run(name, every=every, checkpoint=ckpt, checkpoint_seconds=seconds)
    monkeypatch.setattr(cls, "round", original)
    assert len(torch.load(ckpt, weights_only=False)["rows"]) == 3      # rounds 1–3 survived the kill
    _same(full, _run(name, every=every, checkpoint=ckpt, checkpoint_seconds=seconds))


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_the_deadline_saves_and_stops_and_the_run_resumes(name, tmp_path):
    ckpt = tmp_path / "run.pt"
    _run(name, rounds=2, every=1, checkpoint=ckpt)                         # two rounds ran, then …
    with pytest.raises(loop.Interrupted, match=r"before round 3 of 5.*holds rounds 1–2"):
        _run(name, every=1, checkpoint=ckpt, deadline=time.time() - 1)   # … no time for a third
    saved = torch.load(ckpt, weights_only=False)                           # what `--list` reports of it
    assert saved["progress_metric"] and all(saved["progress_metric"] in row for row in saved["rows"])
    resumed = _run(name, every=1, checkpoint=ckpt, deadline=time.time() + 3600)
    _same(_run(name), resumed)


@pytest.mark.parametrize("at", [2, 5])
def test_sigterm_stops_the_run_after_the_round_in_progress_and_it_resumes(at, tmp_path, monkeypatch):
    """``kill PID`` (SIGTERM) mid-round: the round finishes, a checkpoint holds every round so far (the run saves
    no other: checkpoint_every 0, no seconds) and the loop raises Stopped; resumed, the run is the uninterrupted one,
    bit for bit. At the last round too (the next call then finds every round done). Afterwards SIGTERM's handler is
    the one before the run."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():    # no handler there: the signal would kill us
        pytest.skip("SIGTERM's handler is installed from the main thread only")
    full = _run("prifedsync")
    cls = ALGORITHMS["prifedsync"][0]
    original, before = cls.round, signal.getsignal(signal.SIGTERM)

    def terminated_in_round(self, r):
        if r.t == at:
            os.kill(os.getpid(), signal.SIGTERM)                       # arrives while the round runs
        return original(self, r)

    ckpt = tmp_path / "run.pt"
    monkeypatch.setattr(cls, "round", terminated_in_round)
    with pytest.raises(loop.Stopped, match=rf"stopped after round {at} of 5 by SIGTERM; checkpoint .* holds rounds 1–{at}"):
        _run("prifedsync", checkpoint=ckpt)
    assert signal.getsignal(signal.SIGTERM) is before
    assert len(torch.load(ckpt, weights_only=False)["rows"]) == at
    monkeypatch.setattr(cls, "round", original)
    _same(full, _run("prifedsync", checkpoint=ckpt))


def test_a_resumed_run_lists_the_stretches_it_took(tmp_path):
    ckpt = tmp_path / "run.pt"
    assert [s["first_round"] for s in _run("client_dp", rounds=2, every=1, checkpoint=ckpt).attrs["segments"]] == [1]
    _run("client_dp", rounds=3, every=1, checkpoint=ckpt)                  # extended: rounds 3, then 4–5
    resumed = _run("client_dp", every=1, checkpoint=ckpt)
    segments = resumed.attrs["segments"]
    assert [s["first_round"] for s in segments] == [1, 3, 4] and all(s["git_commit"] for s in segments)
    assert segments[0]["started"] <= segments[-1]["started"]
    _same(_run("client_dp"), resumed)
    legacy = torch.load(ckpt, weights_only=False)                          # a checkpoint written before segments
    del legacy["segments"]
    torch.save(legacy, ckpt)
    again = _run("client_dp", rounds=6, every=1, checkpoint=ckpt).attrs["segments"]
    assert [(s["first_round"], s["git_commit"]) for s in again][0] == (1, "unknown") and again[1]["first_round"] == 6


def test_a_checkpoint_that_went_past_where_the_run_ends_is_refused(tmp_path):
    """The configuration's key leaves out how long a run goes (``checkpoint.EXTENSIBLE``) so that a run can be extended,
    but a state cannot be rewound: a 5-round checkpoint given to a 3-round run was returned as its 5 rows, and one that
    went on past the round where a lowered ``delta_budget`` stops the run as rounds it never had. Both are refused, and
    extending a checkpoint that stopped short of the rule still gives the fresh run's rows."""
    ckpt = tmp_path / "run.pt"
    five = _run("client_dp", rounds=5, every=1, checkpoint=ckpt)
    with pytest.raises(ValueError, match=r"holds rounds 1–5, past this run's 3 rounds"):
        _run("client_dp", rounds=3, every=1, checkpoint=ckpt)
    budget = float(five["delta"].iloc[2]) * 0.99                             # round 3 crosses it
    cls, make = ALGORITHMS["client_dp"]

    def budgeted(rounds, checkpoint=None):
        kwargs = make(rounds, 1)
        algorithm = cls(GEYER_MLP, cfg=dataclasses.replace(kwargs["cfg"], delta_budget=budget))
        return loop.run(algorithm, _data(), progress=False, device=DEVICE, checkpoint=checkpoint)

    with pytest.raises(ValueError, match=r"holds rounds 1–5, but this run stops at round 3"):
        budgeted(5, ckpt)
    short = tmp_path / "short.pt"
    _run("client_dp", rounds=2, every=1, checkpoint=short)
    assert list(budgeted(5, short)["round"]) == [1, 2, 3]
    _same(budgeted(5), budgeted(5, short))                                  # resumed at its stop: the same rows


@pytest.mark.parametrize("name", ["prifedsync", "client_dp", "geyer"])
def test_a_run_without_noise_reads_no_guarantee(name):
    """Without noise every privacy column says so (μ = ∞, δ = 1), through the same accountant path as a
    private run (a ``NonPrivateEvent``): never μ = 0 or δ = 0, which would claim perfect privacy."""
    cls, make = ALGORITHMS[name]
    cfg = make(2, 0)["cfg"]
    quiet = dataclasses.replace(cfg, local=dataclasses.replace(cfg.local, noise_multiplier=0.0)) \
        if name == "prifedsync" else dataclasses.replace(cfg, noise_multiplier=0.0, clip=1.0)
    for cfg in ([quiet, dataclasses.replace(quiet, local=dataclasses.replace(quiet.local, dp=False))]
                if name == "prifedsync" else [quiet]):
        metrics = loop.run(cls(GEYER_MLP, cfg), _data(), progress=False, device=DEVICE)
        expected = np.inf if name == "prifedsync" else 1.0
        assert (metrics[PRIVACY_COLUMNS[name]] == expected).all().all(), metrics[PRIVACY_COLUMNS[name]]


class _Clock:
    """A stand-in for the loop's ``time`` module: a clock that moves only when a round says so."""

    def __init__(self):
        self.now = 1e9

    def time(self):
        return self.now

    perf_counter = time


def test_the_deadline_paces_by_the_recent_rounds_so_one_slow_round_ages_out(monkeypatch):
    """Round 1 takes 100 s (a round slowed by other work on a shared CPU), every later one 1 s. The deadline
    check's pace is the longest of the last 3 rounds, so the run stops before round 2 while that round is in
    the window and 1.5 × 100 s would pass the deadline, and runs all 20 rounds once it has aged out. (Paced by
    the longest round ever, the second run would stop before round 12, with 149 s left for 1 s rounds.)"""
    clock = _Clock()
    monkeypatch.setattr(loop, "time", clock)
    original = ClientLevelDP.round

    def timed(self, r):
        clock.now += 100.0 if r.t == 1 else 1.0
        return original(self, r)

    monkeypatch.setattr(ClientLevelDP, "round", timed)
    start = clock.now
    with pytest.raises(loop.Interrupted, match=r"before round 2 of 20:.*the last 1 took 100\.0 s"):
        _run("client_dp", rounds=20, deadline=start + 240)
    clock.now = start
    assert len(_run("client_dp", rounds=20, deadline=start + 260)) == 20


def test_a_deadline_without_a_checkpoint_still_stops_cleanly():
    with pytest.raises(loop.Interrupted, match="no checkpoint"):
        _run("prifedsync", deadline=time.time() - 1)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_keeps_its_state_on_the_device_it_was_given(name):
    """The device-generic path with the device named explicitly (``DPFL_TEST_DEVICE``, CPU in CI): every
    tensor of the state lives there."""
    cls, make = ALGORITHMS[name]
    args = make(2, 0)
    algorithm = cls(GEYER_MLP, args.pop("cfg"), *args.values())
    loop.run(algorithm, _data(), progress=False, device=DEVICE)
    tensors = []

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(algorithm.state_dict())
    assert tensors and {t.device.type for t in tensors} == {DEVICE}


def test_bad_loop_arguments_are_named():
    algorithm = PriFedSync(GEYER_MLP, ALGORITHMS["prifedsync"][1](2, 0)["cfg"])
    with pytest.raises(ValueError, match="checkpoint_seconds"):
        loop.run(algorithm, _data(), checkpoint_seconds=0)
    base = dict(rounds=2, batch_size=8, local_steps=2, sampler=PoissonClients(1.0), local=SGD)
    for kwargs, name in [(dict(rounds=0), "rounds"), (dict(checkpoint_every=-1), "checkpoint_every"),
                         (dict(chunk=0), "chunk"), (dict(sampler=0.5), "sampler"), (dict(local=None), "local"),
                         (dict(lr_schedule=(0.9, 50)), "lr_schedule")]:
        with pytest.raises(ValueError, match=name):
            loop.LoopConfig(**{**base, **kwargs})


def test_a_killed_save_leaves_no_temporary_file_behind(tmp_path):
    """SIGKILL inside torch.save skips the atomic writer's cleanup; the next run deletes what it left."""
    ckpt = tmp_path / "run.pt"
    stale = tmp_path / ".run.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    _run("prifedsync", rounds=2, every=1, checkpoint=ckpt)
    assert not stale.exists() and ckpt.exists()


def test_checkpoint_sizes_are_what_the_state_holds():
    """A PriFedSync checkpoint holds every client's model and Adam moments: K × P × 3 floats (Zheng's
    MNIST at K = 100: 100 × 1 199 882 × 3 × 4 bytes ≈ 1.44 GB; CIFAR-10 ≈ 0.15 GB)."""
    from dpfl.models import CIFAR_CNN, MNIST_CNN

    params = {m.name: sum(v.numel() for v in m.init(torch.Generator().manual_seed(0)).values())
              for m in (MNIST_CNN, CIFAR_CNN)}
    sizes = {name: 100 * p * 3 * 4 / 1e9 for name, p in params.items()}
    assert sizes[MNIST_CNN.name] == pytest.approx(1.44, abs=0.01)
    assert sizes[CIFAR_CNN.name] == pytest.approx(0.15, abs=0.02)
    algorithm = PriFedSync(GEYER_MLP, ALGORITHMS["prifedsync"][1](1, 0)["cfg"])
    loop.run(algorithm, _data(), progress=False)
    P = sum(v.numel() for v in GEYER_MLP.init(torch.Generator().manual_seed(0)).values())
    K = 4
    assert sum(v.numel() for v in _tensors(algorithm.state["local"])) == K * P          # every client's model
    assert sum(v.numel() for v in _tensors(algorithm.state["opt"])) == 2 * K * P + K    # Adam's m, v and step


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def test_a_whole_run_that_cannot_finish_is_given_up_after_its_second_round(tmp_path):
    """``whole=True``: after round 2 (the first past the warm-up) the loop knows its pace; 99 998 more rounds cannot
    end before a deadline 30 s away (at ≥ 1 ms a round), so it stops there (checkpointed) instead of computing rounds
    a departing machine would strand."""
    ckpt = tmp_path / "run.pt"
    with pytest.raises(loop.CannotFinish, match="gave up after round 2 of 100000"):
        _run("client_dp", rounds=100_000, checkpoint=ckpt, deadline=time.time() + 30, whole=True)
    assert len(torch.load(ckpt, weights_only=False)["rows"]) == 2
    assert len(_run("client_dp", rounds=4, checkpoint=ckpt, deadline=time.time() + 30, whole=True)) == 4


@pytest.mark.parametrize("start", [1, 6])
def test_a_whole_run_is_not_given_up_for_its_warm_up_round(start, tmp_path, monkeypatch):
    """A stretch's first round is a warm-up (on a GPU, kernel choice: the cached H200 runs' took up to 2.5× their
    median round). Here it takes 4 s and the others well under 1 s (0.04–0.4 s on a loaded 2-core CPU): 19 more rounds
    at its pace (76 s) would pass a deadline 40 s away, at the later rounds' pace they do not, so the run finishes —
    from round 1, or resumed at round 6 from a checkpoint (a new stretch, whose first round warms up again)."""
    ckpt = tmp_path / "run.pt"
    cls = ALGORITHMS["client_dp"][0]
    original = cls.round

    def killed_at_start(self, r):
        if r.t == start:
            raise KeyboardInterrupt("killed")
        return original(self, r)

    def warm_up_at_start(self, r):
        if r.t == start:
            time.sleep(4.0)
        return original(self, r)

    if start > 1:                                            # a checkpoint of rounds 1 … start − 1
        monkeypatch.setattr(cls, "round", killed_at_start)
        with pytest.raises(KeyboardInterrupt):
            _run("client_dp", rounds=20, every=1, checkpoint=ckpt)
    monkeypatch.setattr(cls, "round", warm_up_at_start)
    table = _run("client_dp", rounds=20, checkpoint=ckpt, deadline=time.time() + 40, whole=True)
    assert len(table) == 20 and table["seconds"].iloc[start - 1] >= 4.0



@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_rounds_host_syncs_do_not_grow_with_its_local_steps(name):
    """GPU readiness, checked on any device: no local step reads a value back to the host or sizes an output by the
    data (``opcount.SYNC_OPS``), each of which would drain the queue of kernels in a launch-bound GPU loop — so two
    rounds of 2 and of 6 local steps make the same number of syncs, for the MLP and for the FEMNIST CNN (its clients
    and Ditto's personal steps: FedHDP). At 2026-12-03's code: 8–70 syncs in two rounds, whatever the steps."""
    from dpfl.models import FEMNIST_CNN
    from dpfl.opcount import OpCounter

    cls, make = ALGORITHMS[name]
    for model in (GEYER_MLP, FEMNIST_CNN):
        syncs = []
        for steps in (2, 6):
            kwargs = make(2, 0)
            kwargs["cfg"] = dataclasses.replace(kwargs["cfg"], local_steps=steps)
            with OpCounter() as count:
                loop.run(cls(model, **kwargs), _data(), progress=False, device=DEVICE)
            syncs.append(count.syncs)
        assert syncs[0] == syncs[1] and 0 < syncs[0] < 100, (model.name, syncs)

#: each algorithm's columns that the loop's evaluation cadence (``eval_every``) governs
EVALUATED = {"prifedsync": ["acc_local_all"], "client_dp": ["acc_global", "loss_global"],
             "geyer": ["acc_global", "loss_global"],
             "fedhdp": ["acc_l_0", "acc_l_1", "delta_l", "diverged_l_0", "diverged_l_1"]}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_eval_every_evaluates_on_its_rounds_and_the_last_and_changes_nothing_else(name):
    # Geyer's bound is the median update norm: at σ = 1 on this random data it feeds back and the model has
    # diverged by round 4, whose accuracy is then NaN (no accuracy for a diverged model) — no evaluation to see
    cls, make = ALGORITHMS[name]
    quiet = {"noise_multiplier": 0.05} if name == "geyer" else {}

    def run_(**changes):
        kwargs = make(7, 0)
        kwargs["cfg"] = dataclasses.replace(kwargs["cfg"], **quiet, **changes)
        return loop.run(cls(GEYER_MLP, **kwargs), _data(), progress=False, device=DEVICE)

    every_round, sparse = run_(), run_(eval_every=3)
    assert every_round[EVALUATED[name]].notna().all().all()
    cols = EVALUATED[name]
    assert sparse[cols[0]].notna().tolist() == [t in (3, 6, 7) for t in range(1, 8)]
    evaluated = sparse[cols[0]].notna()
    pd.testing.assert_frame_equal(sparse.loc[evaluated, cols], every_round.loc[evaluated, cols], check_exact=True)
    rest = [c for c in every_round.columns if c not in cols and c != "seconds"]
    pd.testing.assert_frame_equal(sparse[rest], every_round[rest], check_exact=True)


def test_the_round_that_stops_a_run_is_evaluated():
    cfg = ClientDPConfig(rounds=50, batch_size=8, local_steps=2, sampler=FixedClients(3), local=SGD, noise_multiplier=3.0,
                         clip=1.0, per_layer=False, delta_budget=1e-3, eval_every=100)
    rows = loop.run(ClientLevelDP(GEYER_MLP, cfg), _data(), progress=False)
    assert rows.delta.iloc[-1] > 1e-3 >= rows.delta.iloc[-2]       # stopped by the budget, before round 50
    assert len(rows) < 50
    assert rows.acc_global.notna().tolist() == [False] * (len(rows) - 1) + [True]
