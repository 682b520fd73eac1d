"""dpfl.cluster and dpfl.runs.run_many on a real local Ray cluster: the same results as the serial grid,
bit for bit; a killed worker's run retried; a failing run retried a bounded number of times, then
reported; and the cache safe with several writers."""
import dataclasses
import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from dpfl import runs

ray = pytest.importorskip("ray", reason="Ray is the optional extra dpfl[cluster]; make test installs it")
#: make test runs these after the rest, on an otherwise idle machine: Ray gives a local node a fixed 30 s
#: to start, which a 2-core machine busy with two test workers can miss
pytestmark = pytest.mark.cluster


@dataclasses.dataclass(frozen=True)
class KillsItsWorkerOnce:
    """Kills the worker process that computes it the first time (a marker file says it did)."""

    marker: str

    def compute(self):
        if not Path(self.marker).exists():
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return "survived"


@dataclasses.dataclass(frozen=True)
class AlwaysFails:
    """Raises on every attempt, counting them in ``log``."""

    log: str

    def compute(self):
        with open(self.log, "a") as fh:
            fh.write("x")
        raise RuntimeError("this run always fails")


@dataclasses.dataclass(frozen=True)
class Stored:
    """A config whose computed value is whatever ``value`` was when it was computed (for the race)."""

    name: str

    def compute(self):
        return None


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two worker CPUs, started inside the test session; this module's configs
    travel to the workers by value (the workers cannot import the tests)."""
    from dpfl.cluster import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    executor = RayExecutor("local", num_cpus=2, retries=2)
    yield executor
    executor.shutdown()


def test_a_grid_on_ray_equals_the_serial_grid_bit_for_bit(cluster, data_root, tmp_path):
    """Two real Zheng smoke runs (one DP, its non-private twin) and a Monte Carlo sweep of Asoodeh's
    Algorithm 1, computed as Ray tasks with one CPU each, equal the serial run_many's, and each result's
    provenance names the host and device that computed it."""
    from dpfl.experiments import zheng2021
    from dpfl.experiments.asoodeh2020 import Algorithm1MonteCarlo

    smoke = zheng2021.grid("smoke", data_dir=str(data_root))
    grid = [smoke[0], smoke[1]] + [Algorithm1MonteCarlo(q=q, n_samples=4000) for q in (0.1, 0.5)]
    assert smoke[0].sigma is not None and smoke[1].sigma is None
    on_ray = runs.run_many(grid, runs.Cache(tmp_path / "ray"), executor=cluster, progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # as a task of one CPU: a CPU convolution's sums follow the thread count
    try:
        serial = runs.run_many(grid, runs.Cache(tmp_path / "serial"), progress=False)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(on_ray, serial):
        values = [r.value.drop(columns="seconds", errors="ignore") for r in (a, b)]
        assert values[0].equals(values[1]), a.config
        assert a.provenance["host"] and a.provenance["device"].startswith("cpu")
    again = runs.run_many(grid, runs.Cache(tmp_path / "ray"), executor=cluster, progress=False)
    assert all(r.cached for r in again)                               # a rerun resumes from the cache


def test_a_killed_worker_is_retried(cluster, tmp_path):
    marker = tmp_path / "killed"
    (result,) = runs.run_many([KillsItsWorkerOnce(str(marker))], runs.Cache(tmp_path), executor=cluster, progress=False)
    assert result.value == "survived" and marker.exists()            # the first worker died, the retry finished


def test_a_failing_run_is_retried_then_reported_and_the_others_finish(cluster, tmp_path):
    from dpfl.experiments.asoodeh2020 import Algorithm1MonteCarlo

    log = tmp_path / "attempts"
    fine = Algorithm1MonteCarlo(q=0.2, n_samples=2000)
    with pytest.raises(runs.RunsFailed, match="1 of 2 runs failed") as failed:
        runs.run_many([AlwaysFails(str(log)), fine], runs.Cache(tmp_path), executor=cluster, progress=False)
    assert log.read_text() == "xxx"                                  # 1 + retries=2 attempts, then the error
    assert "this run always fails" in str(failed.value.failures[AlwaysFails(str(log))])
    assert runs.Cache(tmp_path).load(fine) is not None               # the other run finished and is cached


def test_an_address_string_selects_the_cluster(cluster, tmp_path, monkeypatch):
    """``executor="auto"`` or ``$DPFL_RAY_ADDRESS`` (what ``reproduce --ray`` sets) reach the connected cluster."""
    from dpfl.cluster import ray_executor
    from dpfl.experiments.asoodeh2020 import Algorithm1MonteCarlo

    monkeypatch.setenv("DPFL_RAY_ADDRESS", "auto")
    (result,) = runs.run_many([Algorithm1MonteCarlo(q=0.25, n_samples=2000)], runs.Cache(tmp_path), progress=False)
    assert not result.cached and ray_executor("auto")._owner is False   # used the connection already open


def _store(root, value, barrier, out):
    barrier.wait()
    kept = runs.Cache(root).store(runs.Result(Stored("race"), value, {"writer": value}, cached=False))
    out.put((value, kept.value))


def test_concurrent_writers_keep_the_first_result_whole(tmp_path):
    """Eight processes store different results for one config at once: one is kept, pickle and sidecar
    from the same writer, and every writer is handed the kept one."""
    import json

    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_store, args=(tmp_path, k, barrier, out)) for k in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    handed = [out.get(timeout=5) for _ in procs]
    cache = runs.Cache(tmp_path)
    kept = cache.load(Stored("race"))
    assert {h[1] for h in handed} == {kept.value}
    sidecar = json.loads(cache.path(Stored("race")).with_suffix(".json").read_text())
    assert sidecar["provenance"]["writer"] == kept.value == kept.provenance["writer"]
    forced = cache.store(runs.Result(Stored("race"), 99, {"writer": 99}, cached=False), overwrite=True)
    assert forced.value == 99 and cache.load(Stored("race")).value == 99


def test_a_grid_listing_a_config_twice_computes_it_once(tmp_path):
    log = tmp_path / "attempts"
    with pytest.raises(runs.RunsFailed, match="1 of 3 runs failed"):
        runs.run_many([AlwaysFails(str(log))] * 3, runs.Cache(tmp_path), progress=False)
    assert log.read_text() == "x"


@pytest.mark.parametrize("kwargs, name", [(dict(address=""), "address"), (dict(retries=-1), "retries"),
                                          (dict(cpus_per_run=0), "cpus_per_run")])
def test_bad_input(kwargs, name):
    from dpfl.cluster import RayExecutor

    with pytest.raises(ValueError, match=rf"^{name}\b"):
        RayExecutor(**kwargs)


def test_resources_follow_the_device():
    from dpfl.cluster import resources
    from dpfl.experiments.zheng2021 import ZhengRun

    assert resources(ZhengRun("mnist", 1.0, 1.0, 16, 3, device="cuda")) == {"num_gpus": 1, "num_cpus": 1}
    assert resources(ZhengRun("mnist", 1.0, 1.0, 16, 3, device="cpu"), 4) == {"num_cpus": 4}
    assert resources(Stored("x")) == {"num_cpus": 1}
