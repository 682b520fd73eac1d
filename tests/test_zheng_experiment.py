"""dpfl.experiments.zheng2021: the authors' settings as configs (docs/zheng2021.md §2) and the budgeted runner."""
import dataclasses
import json
import tarfile
import types

import numpy as np
import pytest

from dpfl.experiments.zheng2021 import ZhengRun, default_steps, federated_mnist, first_round
from dpfl.federated.schedule import LearningRate
from dpfl.runs import config_hash
from tests_support import device_under_test

DEVICE = device_under_test()


def test_local_steps_follow_the_authors_code():
    assert default_steps(600, 16) == 38 and default_steps(500, 16) == 32
    assert default_steps(600, 8) == 76                  # hard-coded in their config (⌈600/8⌉ = 75)


def test_configs_map_sigma_to_the_noise_multiplier_and_carry_the_cifar_schedule():
    mnist = ZhengRun("mnist", 0.5, 0.75, 16, 300).round_config()
    assert mnist.local.noise_multiplier == 1.5 and mnist.local.dp and mnist.local.lr == 1e-3
    assert mnist.local_steps == 38 and mnist.sampler.p == 0.5 and mnist.alpha == 0.1 and mnist.lr_schedule.constant
    twin = ZhengRun("mnist", 0.5, None, 16, 300).round_config()
    assert not twin.local.dp and twin.local.noise_multiplier == 0.0
    cifar = ZhengRun("cifar10", 1.0, 0.5, 16, 1000).round_config()
    assert (cifar.local.lr, cifar.local.weight_decay, cifar.lr_schedule, cifar.augment, cifar.local_steps) \
        == (5e-3, 5e-4, LearningRate(0.99, 10, per="client_epoch"), True, 32)
    # μ at the paper's R reproduces Table 1 and Table 3 cells
    assert ZhengRun("mnist", 1.0, 1.0, 16, 300).mu(93) == pytest.approx(2.711, abs=1e-3)
    assert ZhengRun("cifar10", 0.5, 0.5, 16, 1000).mu(405) == pytest.approx(37.507, abs=1e-3)
    # where the data live is not part of what is computed
    assert config_hash(ZhengRun("mnist", 1.0, 1.0, 16, 3, data_dir="/a")) == config_hash(ZhengRun("mnist", 1.0, 1.0, 16, 3))


@pytest.mark.parametrize("kwargs, name", [
    (dict(dataset="svhn"), "dataset"), (dict(p=0.0), "p"), (dict(sigma=-1.0), "sigma"), (dict(batch_size=0), "batch_size"),
])
def test_bad_input(kwargs, name):
    base = dict(dataset="mnist", p=1.0, sigma=1.0, batch_size=16, rounds=3)
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        ZhengRun(**(base | kwargs))


def test_federated_mnist_is_the_authors_split(data_root):
    fd = federated_mnist(100, seed=0, data_dir=data_root)
    assert fd.num_clients == 100 and (fd.client_sizes == 600).all()
    labels = fd.train_y.numpy()
    per_client = [np.unique(labels[ix]).size for ix in fd.clients]
    # 4 shards of one label each, except that a shard may straddle two labels (label counts are not
    # multiples of 150): at most 8 labels, mostly 3–4
    assert max(per_client) <= 8 and 2.5 <= np.mean(per_client) <= 4.5
    assert len(np.unique(np.concatenate(fd.clients))) == 60_000            # 400 shards: every image once
    test_labels = fd.test_y.numpy()
    for ix, tix in zip(fd.clients, fd.test_clients):
        assert len(tix) == 200 and set(test_labels[tix]) <= set(labels[ix])


def test_first_round():
    import pandas as pd

    m = pd.DataFrame({"round": [1, 2, 3, 4], "acc_stored_local": [0.2, 0.5, 0.45, 0.9]})
    assert first_round(m, 0.45) == 2 and first_round(m, 0.9) == 4 and first_round(m, 0.95) is None


def test_paper_grid_is_the_authors():
    from dpfl.experiments.zheng2021 import grid

    runs = grid("paper")
    assert len(runs) == 23                          # 9 + 3 twins + 3 B=8; 6 CIFAR-10 + 2 twins
    rounds = {(r.dataset, r.p, r.sigma, r.batch_size): r.rounds for r in runs}
    assert rounds[("mnist", 0.25, 1.0, 16)] == 500 and rounds[("mnist", 0.25, 0.75, 16)] == 600
    assert rounds[("mnist", 1.0, 0.9, 16)] == 300 and rounds[("cifar10", 0.5, 0.5, 16)] == 1000
    assert {r.steps for r in runs if r.dataset == "mnist"} == {38, 76} and all(r.num_clients == 100 for r in runs)
    # Table 2: B = 8 at p = 0.5 for every σ; quick compares B at p = 1, each B = 8 run with its B = 16 twin
    assert sorted((r.p, r.sigma) for r in runs if r.batch_size == 8) == [(0.5, 0.75), (0.5, 0.9), (0.5, 1.0)]
    quick = {(r.dataset, r.p, r.sigma, r.batch_size) for r in grid("quick")}
    assert ("mnist", 1.0, 0.75, 8) in quick and ("mnist", 1.0, 0.75, 16) in quick
    assert not any(B == 8 and p != 1.0 for _, p, _, B in quick)


#: the smoke grid's non-private twins (MNIST and CIFAR-10), its two fastest runs: the runner's tests compute
#: these alone; the notebook's smoke test (tests/test_notebooks.py) computes and reads the whole grid
TWINS = "σ=None"


def _twins(zheng2021, data_root) -> list:
    configs = [c for c in zheng2021.grid("smoke", seed=0, device=DEVICE, data_dir=str(data_root)) if c.sigma is None]
    assert {c.dataset for c in configs} == {"mnist", "cifar10"}
    return configs


def test_grid_runner_fills_a_cache_within_its_budget(data_root, tmp_path, capsys):
    from dpfl.experiments import zheng2021
    from dpfl.runs import Cache

    cache = tmp_path / "cache"
    args = ["--profile", "smoke", "--device", DEVICE, "--data-dir", str(data_root), "--cache", str(cache), "--only", TWINS]
    assert zheng2021.main(args + ["--budget", "-1"]) == 3                  # no time: nothing starts
    assert not list(cache.glob("*.pkl"))
    assert zheng2021.main(args) == 0
    configs = _twins(zheng2021, data_root)
    assert all(Cache(cache).load(c) is not None for c in configs)          # what the notebook will read
    assert len(list(cache.glob("*.pkl"))) == len(configs)                  # and nothing else: --only is obeyed
    assert zheng2021.main(args) == 0 and "0 run(s) missing" in capsys.readouterr().out


def test_only_naming_a_cached_twin_reports_it_cached(data_root, capsys, monkeypatch):
    """A finished twin's own command again (2026-12-03: ``cpu_background.sh "cifar10 p=0.5 σ=None"`` after it
    landed): ``--only`` names the cached twin, so the call lists it as cached and exits 0 ("nothing left"), not 2
    ("names no run", which it said while ``followups`` named only missing twins). Read from the committed cache."""
    from pathlib import Path

    from dpfl.experiments import zheng2021

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    argv = ["--profile", "cells", "--only", "cifar10 p=0.5 σ=None", "--list", "--device", "cpu",
            "--data-dir", str(data_root), "--checkpoints", "no-checkpoints-here"]
    assert zheng2021.main(argv) == 0
    out = capsys.readouterr().out
    assert "0 run(s) missing" in out and "cached   ZhengRun-1657a8819ce40525: " in out

def test_the_budgeted_runner_stops_at_its_deadline(data_root, tmp_path, capsys):
    """A time-limited GPU command: a run that cannot finish checkpoints and stops with exit status 3
    (before, ``--budget`` was checked only between runs, and the run was killed with its rounds)."""
    from dpfl.experiments import zheng2021

    code = zheng2021.main(["--profile", "smoke", "--device", DEVICE, "--budget", "0.001", "--cache", str(tmp_path),
                           "--data-dir", str(data_root)])
    assert code == 3 and "budget of 0 s reached: stopped before round 1" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.pkl"))                       # nothing half-finished was cached
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["computed_now"] == [] and len(progress["missing"]) == len(zheng2021.grid("smoke"))
    assert progress["status"].startswith("budget of 0 s reached")


def test_the_runner_stopped_by_sigterm_keeps_its_rounds_and_says_so(data_root, tmp_path, capsys, monkeypatch):
    """``kill PID`` of a background run: the round in progress finishes, its checkpoint holds rounds 1–1, the call
    exits 3 with "stopped after round 1" in progress.json (not "budget reached"), and the next call finishes the run
    from round 2, caching it."""
    import os
    import signal
    import threading

    from dpfl.experiments import zheng2021
    from dpfl.federated.engine import PriFedSync

    if threading.current_thread() is not threading.main_thread():    # no handler there: the signal would kill us
        pytest.skip("SIGTERM's handler is installed from the main thread only")
    original = PriFedSync.round

    def terminated(self, r):
        if r.t == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, r)

    args = ["--profile", "smoke", "--device", DEVICE, "--data-dir", str(data_root), "--cache", str(tmp_path),
            "--only", "mnist p=1 σ=1.0 B=16"]
    monkeypatch.setattr(PriFedSync, "round", terminated)
    assert zheng2021.main(args) == 3
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["status"].startswith("stopped after round 1 of 2 by SIGTERM; checkpoint ") and not list(tmp_path.glob("*.pkl"))
    monkeypatch.setattr(PriFedSync, "round", original)
    assert zheng2021.main(args) == 0 and len(list(tmp_path.glob("*.pkl"))) == 1
    assert "(rounds 2–)" in capsys.readouterr().out                      # resumed, not recomputed


def test_the_budgeted_runner_bundles_what_it_computed(data_root, tmp_path):
    """``--bundle``: the new cache entries in one archive, which fills another cache."""
    from dpfl.experiments import zheng2021
    from dpfl.runs import Cache

    args = ["--profile", "smoke", "--device", DEVICE, "--data-dir", str(data_root), "--whole-runs", "--only", TWINS]
    assert zheng2021.main(args + ["--cache", str(tmp_path / "a"), "--bundle", str(tmp_path / "new.tar.gz")]) == 0
    configs = _twins(zheng2021, data_root)
    with tarfile.open(tmp_path / "new.tar.gz") as tar:
        assert len(tar.getnames()) == 2 * len(configs)
        tar.extractall(tmp_path / "b", filter="data")
    assert all(Cache(tmp_path / "b").load(c) is not None for c in configs)
    assert json.loads((tmp_path / "a" / "progress.json").read_text())["missing"] == []


def test_the_budgeted_runner_keeps_checkpoints_where_it_is_told(data_root, tmp_path, monkeypatch):
    """``--checkpoints DIR``: the runs checkpoint there (e.g. outside the work tree, which a fresh
    checkout replaces); by default beside the cache."""
    from dpfl import runs
    from dpfl.experiments import zheng2021
    from dpfl.federated.loop import Interrupted

    seen = []

    def stop(config, cache):
        seen.append(config.checkpoint_dir)
        raise Interrupted("stopped for the test")

    monkeypatch.setattr(runs, "run", stop)
    args = ["--profile", "smoke", "--device", DEVICE, "--data-dir", str(data_root), "--cache", str(tmp_path / "c")]
    assert zheng2021.main(args + ["--checkpoints", str(tmp_path / "elsewhere")]) == 3
    assert zheng2021.main(args) == 3
    assert seen == [str(tmp_path / "elsewhere"), str(tmp_path / "c" / "checkpoints")]


def test_every_committed_result_reads_the_privacy_its_run_has():
    """The committed cache: a private run's μ_max (GDP CLT) is finite and grows with the rounds, a
    non-private run's is ∞ — the four cached before the NonPrivateEvent read 0 and are amended, saying so."""
    import pickle
    from pathlib import Path

    sidecars = sorted((Path(__file__).parents[1] / "figures" / "zheng2021" / "cache").glob("ZhengRun-*.json"))
    assert sidecars
    for sidecar in sidecars:
        meta = json.loads(sidecar.read_text())
        mu = pickle.loads(sidecar.with_suffix(".pkl").read_bytes())["value"]["mu_max_clt"].to_numpy()
        if meta["config"]["sigma"] is None:
            assert np.isinf(mu).all(), sidecar.name
            assert [a["now"] for a in meta["provenance"].get("amended", [])] in ([], ["inf"])
        else:
            assert np.isfinite(mu).all() and (np.diff(mu) > 0).all(), sidecar.name


def test_a_cell_runs_to_its_target_then_its_twin_to_the_same_round(data_root, tmp_path, monkeypatch, capsys):
    """``--profile cells``: a published cell at the paper's setting, stopped at its target, then (a
    follow-up in the same call) its non-private twin to the round it stopped at; the notebook reads both
    with ``cached_cells``. Here the paper's setting is the smoke profile's and the target one that
    round 1 reaches."""
    from dpfl.experiments import zheng2021 as z
    from dpfl.experiments import zheng2021_tables as zt
    from dpfl.runs import Cache

    monkeypatch.setitem(z.SETTINGS, "paper", z.SETTINGS["smoke"])
    monkeypatch.setitem(z.TARGETS, "1", 0.05)
    cache = Cache(tmp_path)
    args = ["--profile", "cells", "--only", "mnist p=1 σ=0.75 B=16", "--device", DEVICE, "--data-dir", str(data_root),
            "--cache", str(tmp_path)]
    assert z.main(args) == 0
    out = capsys.readouterr().out
    assert "1 run(s) missing" in out and "[2/2]" in out and "σ=None" in out          # the twin followed
    cell = next(c for c in z.cells("1", data_dir=str(data_root), device=DEVICE) if (c.p, c.sigma) == (1.0, 0.75))
    metrics = cache.load(cell).value
    assert len(metrics) == 1 and cell.stop_at == 0.05 and cell.rounds == 2     # stopped at its target
    twin = cache.load(z.twin(cell, 1)).value
    assert len(twin) == 1 and "mu_max_clt" in twin and np.isinf(twin.mu_max_clt).all()    # no noise: no guarantee
    assert z.main(args) == 0 and "0 run(s) missing" in capsys.readouterr().out  # nothing left, twin included
    done = z.cached_cells(cache, "1", data_dir=str(data_root))
    assert list(done) == [(1.0, 0.75)] and done[(1.0, 0.75)][2].equals(twin)
    table = zt.rounds_table({k: v[:2] for k, v in done.items()}, z.published(), "1", 0.05,
                            twins={k: v[2] for k, v in done.items()})
    row = table.iloc[0]
    assert row["R ours (to 5%)"] == 1 and row["R paper (to 90%)"] == 64
    assert row["non-private acc ours %"] == round(100 * twin.acc_stored_local.iloc[0], 2)
    # a longer twin's first rounds are the shorter one's (on one device: CPU and CUDA draw other random
    # streams): any cached twin with ≥ R rounds serves a cell
    longer = z.twin(cell, 2).compute()
    assert longer.acc_stored_local.iloc[0] == twin.acc_stored_local.iloc[0]
    assert longer.acc_global.iloc[0] == twin.acc_global.iloc[0]
    # the table names the device of each cell and, where another computed it, of its twin
    on = z.computed_on(cache, done)
    assert on == {(1.0, 0.75): cache.load(cell).provenance["device"]}
    stored = cache.load(z.twin(cell, 1))
    cache.store(dataclasses.replace(stored, provenance={**stored.provenance, "device": "cuda (GPU)"}), overwrite=True)
    assert z.computed_on(cache, done) == {(1.0, 0.75): f"{on[(1.0, 0.75)]}; twin cuda (GPU)"}
    hit = cache.load(cell)
    cache.store(dataclasses.replace(hit, provenance={**hit.provenance, "per_sample": "unfold"}), overwrite=True)
    assert z.computed_on(cache, done) == {(1.0, 0.75): f"{on[(1.0, 0.75)]}; twin cuda (GPU); unfold route"}
    assert zt.rounds_table({k: v[:2] for k, v in done.items()}, z.published(), "1", 0.05, twins={k: v[2] for k, v in done.items()},
                           devices=on).iloc[0]["computed on"] == on[(1.0, 0.75)]


def test_table_2_cells_have_no_twin_to_follow():
    """Table 2 prints no non-private accuracy: its cells call for no twin."""
    import pandas as pd

    from dpfl.experiments import zheng2021 as z

    reached = pd.DataFrame({"round": [1, 2], "acc_stored_local": [0.5, 0.95]})
    (b8,) = [c for c in z.cells("2") if c.sigma == 0.75]
    (b16,) = [c for c in z.cells("1") if (c.p, c.sigma) == (0.5, 0.75)]
    assert b8.batch_size == 8 and z.followups(b8, reached, None) == []
    assert [t.rounds for t in z.followups(b16, reached, _EmptyCache())] == [2]
    assert z.followups(dataclasses.replace(b16, stop_at=None), reached, _EmptyCache()) == []


class _EmptyCache:
    def load(self, config):
        return None


def test_one_twin_serves_every_cell_of_its_p():
    """A twin has no σ: the cells of one table and p share it, so the longest R's twin, once cached, serves the
    cells with a shorter R (``cached_twin`` takes the shortest cached twin with ≥ R rounds) and their follow-ups
    ask for nothing more. Table 3's p = 1 cells (R 207 / 321 / 468 in the paper) thus need one twin, not three."""
    import pandas as pd

    from dpfl.experiments import zheng2021 as z

    for table in z.TARGETS:
        by_p = {}
        for cell in z.cells(table):
            by_p.setdefault(cell.p, set()).add(z.twin(cell, 300))
        assert all(len(twins) == 1 for twins in by_p.values()), table
    p1 = [c for c in z.cells("3") if c.p == 1.0]
    assert sorted(c.sigma for c in p1) == [0.5, 0.75, 1.0]
    longer = z.twin(p1[0], 470)

    class OneTwin:                                          # a cache holding the 470-round twin alone
        def load(self, config):
            return types.SimpleNamespace(config=config, value="metrics") if config == longer else None

    reached = pd.DataFrame({"round": [320, 321], "acc_stored_local": [0.51, 0.53]})
    for cell in p1:
        assert z.cached_twin(OneTwin(), cell, 321).value == "metrics"
        assert z.followups(cell, reached, OneTwin()) == [longer]          # the cached twin that serves it, no other
        assert [t.rounds for t in z.followups(cell, reached, _EmptyCache())] == [321]
    assert z.cached_twin(OneTwin(), p1[0], 471) is None                # a twin shorter than R serves no cell


@pytest.mark.parametrize("route, sigma", [("unfold", 1.0), ("grouped", 1.0), ("matmul", 1.0), ("matmul", None)])
def test_the_per_sample_route_changes_how_not_what(data_root, tmp_path, route, sigma):
    """``--per-sample unfold``, ``grouped`` or ``matmul`` (``ZhengRun.per_sample``, the GPU's candidate routes) trains
    the run the default route trains, up to float round-off: one hash, one cache entry, the route in the
    provenance; for a non-private twin (σ = None) too, whose convolutions only ``matmul`` changes."""
    from dpfl.experiments import zheng2021 as z
    from dpfl.runs import Cache, run

    args = ["--profile", "smoke", "--only", f"mnist p=1 σ={sigma} B=16", "--device", DEVICE, "--data-dir", str(data_root)]
    assert z.main(args + ["--cache", str(tmp_path / "u"), "--per-sample", route]) == 0
    ghost = next(c for c in z.grid("smoke", device=DEVICE, data_dir=str(data_root), progress=False)
                 if (c.dataset, c.p, c.sigma, c.batch_size) == ("mnist", 1.0, sigma, 16))
    other = Cache(tmp_path / "u").load(ghost)                   # found under the default route's hash
    assert other is not None and other.provenance["per_sample"] == route
    assert dataclasses.replace(ghost, per_sample=route).round_config().local.per_sample == route   # the engine's route
    mine = run(ghost, Cache(tmp_path / "g"))
    assert mine.provenance["per_sample"] == "ghost" and len(mine.value) == len(other.value) == ghost.rounds
    np.testing.assert_allclose(other.value.loss_global, mine.value.loss_global, rtol=1e-4)
    np.testing.assert_allclose(other.value.acc_stored_local, mine.value.acc_stored_local, atol=0.01)
    with pytest.raises(ValueError, match="per_sample"):
        dataclasses.replace(ghost, per_sample="full")


def test_paper_cells_run_past_the_profiles_rounds_only_where_the_papers_R_needs_room():
    """A cell at ``paper`` may run to ⌈1.25 × the paper's R⌉ where the profile's rounds stop sooner: exactly
    Table 2's σ = 1, B = 8 (R = 266, cap 300 → 333) and Table 3's p = 0.5, σ = 1 (R = 904, cap 1000 → 1130).
    Every other cell keeps its profile's rounds, hence its hash and its cached result; smaller profiles
    keep theirs."""
    from dpfl.experiments import zheng2021 as z

    moved = {}
    for table in z.TARGETS:
        for cell, row in zip(z.cells(table), z.published().query("table == @table").itertuples()):
            profile_run = z._cell_run(row, "paper")
            if cell.rounds != profile_run.rounds:
                moved[(table, cell.p, cell.sigma, cell.batch_size)] = (profile_run.rounds, cell.rounds)
            else:
                same = dataclasses.replace(profile_run, stop_at=z.TARGETS[table])
                assert config_hash(cell) == config_hash(same)
    assert moved == {("2", 0.5, 1.0, 8): (300, 333), ("3", 0.5, 1.0, 16): (1000, 1130)}
    assert [c.rounds for c in z.cells("2", "quick")] == [z.SETTINGS["quick"]["rounds"][0.5]] * 3


def test_a_cell_given_room_is_read_where_the_profiles_full_run_stops_short():
    """Table 2's σ = 1, B = 8 at ``paper``: a cached 300-round full run that never reaches 90 % yields to
    the cell run on to its target (333 rounds at most); a full run that reaches it is read first."""
    import pandas as pd

    from dpfl.experiments import zheng2021 as z
    from dpfl.runs import Result

    (row,) = z.published().query("table == '2' and sigma == 1.0").itertuples()
    full, cell = z._cell_run(row, "paper"), z._cell(row, "paper")
    short = pd.DataFrame({"round": range(1, 301), "acc_stored_local": np.linspace(0.5, 0.89, 300)})
    reached = pd.DataFrame({"round": range(1, 311), "acc_stored_local": np.linspace(0.5, 0.9, 310)})
    stored = {config_hash(full): Result(full, short, {}), config_hash(cell): Result(cell, reached, {})}
    cache = type("Cache", (), {"load": lambda self, c: stored.get(config_hash(c))})()
    config, metrics, twin = z.cached_cells(cache, "2")[(0.5, 1.0)]
    assert (config, z.first_round(metrics, 0.9), twin) == (cell, 310, None)
    stored[config_hash(full)] = Result(full, reached.head(300).assign(acc_stored_local=0.95), {})
    assert z.cached_cells(cache, "2")[(0.5, 1.0)][0] == full
