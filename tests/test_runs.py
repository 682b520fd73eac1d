"""dpfl.runs: hashing, caching, atomic writes, resume, FORCE, provenance; the budgeted runner's order."""
import dataclasses
import math
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dpfl import runs
from dpfl.experiments import runner
from dpfl.federated import checkpoint

CALLS = []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cell(runner.TrainingRun):
    """A grid's run for the command-line runner's tests: its result is its name; each computation is logged in CALLS."""
    name: str

    def compute(self):
        CALLS.append(self.name)
        return {"name": self.name}


@dataclasses.dataclass(frozen=True)
class Square:
    x: float
    seed: int = 0
    fail: bool = False

    def compute(self):
        CALLS.append(self.x)
        if self.fail:
            raise RuntimeError("interrupted")
        return {"y": self.x ** 2}


@dataclasses.dataclass(frozen=True)
class Square2(Square):
    code_version = 2


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    CALLS.clear()
    monkeypatch.delenv("FORCE", raising=False)


def test_hash_is_stable_and_sensitive_to_fields_type_and_version():
    h = runs.config_hash(Square(1.0))
    assert h == runs.config_hash(Square(1.0)) and len(h) == 16
    assert h != runs.config_hash(Square(1.0, seed=1))
    assert h != runs.config_hash(Square(1))          # 1 and 1.0 are different configs
    assert h != runs.config_hash(Square2(1.0))


@dataclasses.dataclass(frozen=True)
class Located:
    x: float
    where: str = dataclasses.field(default="here", metadata={"hash": False})

    def compute(self):
        return self.x


def test_fields_marked_hash_false_do_not_change_the_hash():
    assert runs.config_hash(Located(1.0, "here")) == runs.config_hash(Located(1.0, "/elsewhere"))
    assert runs.config_hash(Located(1.0)) != runs.config_hash(Located(2.0))


def test_run_computes_once_then_reads_the_cache(tmp_path):
    cache = runs.Cache(tmp_path)
    first = runs.run(Square(3.0, seed=7), cache)
    second = runs.run(Square(3.0, seed=7), cache)
    assert first.value == second.value == {"y": 9.0}
    assert (first.cached, second.cached) == (False, True)
    assert CALLS == [3.0]
    prov = second.provenance
    assert prov["seed"] == 7 and prov["wall_time_s"] >= 0
    assert {"version", "git_commit", "device", "created", "config_hash"} <= set(prov)
    assert cache.path(Square(3.0, seed=7)).with_suffix(".json").exists()


def test_force_recomputes(tmp_path, monkeypatch):
    cache = runs.Cache(tmp_path)
    runs.run(Square(2.0), cache)
    monkeypatch.setenv("FORCE", "1")
    assert runs.run(Square(2.0), cache).cached is False
    monkeypatch.setenv("FORCE", "0")
    assert runs.run(Square(2.0), cache).cached is True
    assert runs.run(Square(2.0), cache, force=True).cached is False
    assert CALLS == [2.0, 2.0, 2.0]


def test_failed_compute_leaves_nothing_behind(tmp_path):
    cache = runs.Cache(tmp_path)
    with pytest.raises(RuntimeError):
        runs.run(Square(1.0, fail=True), cache)
    assert list(tmp_path.iterdir()) == []


def test_one_failed_run_does_not_cost_the_grid(tmp_path):
    cache = runs.Cache(tmp_path)
    grid = [Square(1.0), Square(2.0), Square(3.0, fail=True), Square(4.0)]
    with pytest.raises(runs.RunsFailed, match=r"1 of 4 runs failed.*\n.*Square-.*RuntimeError: interrupted") as err:
        runs.run_many(grid, cache, progress=False)
    assert list(err.value.failures) == [grid[2]]
    assert CALLS == [1.0, 2.0, 3.0, 4.0]                       # the run after the failure still ran
    assert [cache.load(c) is not None for c in grid] == [True, True, False, True]


@dataclasses.dataclass(frozen=True)
class Interrupted(Square):
    def compute(self):
        CALLS.append(self.x)
        if self.fail:
            raise KeyboardInterrupt
        return {"y": self.x ** 2}


def test_interrupted_grid_resumes_where_it_stopped(tmp_path):
    cache = runs.Cache(tmp_path)
    grid = [Interrupted(1.0), Interrupted(2.0), Interrupted(3.0, fail=True), Interrupted(4.0)]
    with pytest.raises(KeyboardInterrupt):                      # Ctrl-C stops the grid at once
        runs.run_many(grid, cache, progress=False)
    assert CALLS == [1.0, 2.0, 3.0]
    CALLS.clear()
    grid[2] = Interrupted(3.0)
    results = runs.run_many(grid, cache, progress=False)
    assert CALLS == [3.0, 4.0]
    assert [r.value["y"] for r in results] == [1.0, 4.0, 9.0, 16.0]
    assert [r.cached for r in results] == [True, True, False, False]


@pytest.mark.parametrize("garbage", [b"", b"not a pickle", b"\x80\x05\x95truncated"])
def test_a_corrupt_cache_entry_warns_with_its_path_and_is_recomputed(tmp_path, garbage):
    cache = runs.Cache(tmp_path)
    grid = [Square(1.0), Square(2.0)]
    runs.run_many(grid, cache, progress=False)
    cache.path(grid[0]).write_bytes(garbage)                   # was: a raw UnpicklingError naming no file
    CALLS.clear()
    with pytest.warns(runs.CorruptCacheWarning, match=str(cache.path(grid[0]))):
        results = runs.run_many(grid, cache, progress=False)
    assert CALLS == [1.0] and [r.value["y"] for r in results] == [1.0, 4.0]
    assert cache.load(grid[0]).value == {"y": 1.0}               # rewritten whole


@dataclasses.dataclass(frozen=True)
class WithSource:
    x: float
    source: str = dataclasses.field(default="official", metadata={"hash": "unless-default"})

    def compute(self):
        return self.x


def test_a_field_hashed_unless_default_keeps_old_hashes_and_separates_new_values():
    @dataclasses.dataclass(frozen=True)
    class WithSource:                                            # the same class before the field existed
        x: float

        def compute(self):
            return self.x

    WithSource.__qualname__ = "WithSource"                      # same name, module and version
    before = runs.config_hash(WithSource(1.0))
    assert runs.config_hash(globals()["WithSource"](1.0)) == before
    assert runs.config_hash(globals()["WithSource"](1.0, "jpeg")) != before


@dataclasses.dataclass(frozen=True)
class Power:
    """Runs computed together: x**k for every k of ``family`` (unhashed) in one go, logged once in CALLS."""
    x: float
    k: int
    family: tuple = dataclasses.field(default=(), metadata={"hash": False})
    miscount: bool = dataclasses.field(default=False, metadata={"hash": False})

    def compute(self):
        CALLS.append(("alone", self.k))
        return self.x ** self.k

    def together(self):
        return [self] + [dataclasses.replace(self, k=k) for k in self.family]

    def compute_together(self, configs):
        CALLS.append(("together", tuple(c.k for c in configs)))
        values = [self.x ** c.k for c in configs]
        return values[:-1] if self.miscount else values


def test_runs_computed_together_are_cached_each_under_its_own_key(tmp_path):
    """A missing run and its missing companions (``together``) are one computation; each is cached as if computed
    alone, its provenance naming the others; a cached companion is not recomputed, one without companions left is
    computed alone, and a config listed twice or as a companion is computed once."""
    cache = runs.Cache(tmp_path)
    fam = (1, 2, 3)
    runs.run(Power(2.0, 3), cache)                                        # no family: alone
    assert CALLS == [("alone", 3)]
    first = runs.run(Power(2.0, 1, fam), cache)
    assert CALLS[1:] == [("together", (1, 2))] and first.value == 2.0 and not first.cached
    second = runs.run(Power(2.0, 2, fam), cache)
    assert second.cached and second.value == 4.0 and len(CALLS) == 2
    assert first.provenance["computed_with"] == [runs.config_hash(Power(2.0, 2))]
    assert second.provenance["computed_with"] == [runs.config_hash(Power(2.0, 1))]
    assert runs.run(Power(2.0, 3, fam), cache).cached and "computed_with" not in runs.run(Power(2.0, 3), cache).provenance
    CALLS.clear()
    grid = [Power(3.0, k, fam) for k in (2, 1, 2, 3)]
    assert [r.value for r in runs.run_many(grid, runs.Cache(tmp_path / "b"), progress=False)] == [9.0, 3.0, 9.0, 27.0]
    assert CALLS == [("together", (2, 1, 3))]
    CALLS.clear()
    with ThreadPoolExecutor(2) as pool:
        out = runs.run_many([Power(5.0, k, fam) for k in fam], runs.Cache(tmp_path / "c"), executor=pool, progress=False)
    assert [r.value for r in out] == [5.0, 25.0, 125.0] and CALLS == [("together", (1, 2, 3))]


def test_a_computation_together_that_miscounts_fails_every_run_it_was_for(tmp_path):
    cache = runs.Cache(tmp_path)
    with pytest.raises(RuntimeError, match="returned 1 values for 2 configs"):
        runs.run(Power(2.0, 1, (1, 2), miscount=True), cache)
    with pytest.raises(runs.RunsFailed) as failed:
        runs.run_many([Power(2.0, k, (1, 2), miscount=True) for k in (1, 2)], cache, progress=False)
    assert len(failed.value.failures) == 2
    assert not list(tmp_path.glob("*.pkl"))


def test_run_many_with_an_executor(tmp_path):
    cache = runs.Cache(tmp_path)
    with ThreadPoolExecutor(2) as pool:
        results = runs.run_many([Square(float(i)) for i in range(5)], cache, executor=pool, progress=False)
    assert [r.value["y"] for r in results] == [0.0, 1.0, 4.0, 9.0, 16.0]
    assert all(cache.load(Square(float(i))) for i in range(5))


def test_bad_configs_are_rejected():
    @dataclasses.dataclass
    class Mutable:
        x: int = 0

        def compute(self):
            return 0

    @dataclasses.dataclass(frozen=True)
    class NoCompute:
        x: int = 0

    with pytest.raises(ValueError, match="frozen"):
        runs.config_hash(Mutable())
    with pytest.raises(ValueError, match="compute"):
        runs.config_hash(NoCompute())
    with pytest.raises(ValueError, match="dataclass"):
        runs.run({"x": 1})


def test_atomic_writes_get_ordinary_permissions(tmp_path):
    from dpfl.io import write_text

    path = write_text(tmp_path / "a.txt", "x")
    assert path.stat().st_mode & 0o044 == 0o044          # group/other may read, as with open()
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_results_only_computes_nothing_and_lists_what_is_missing(tmp_path, monkeypatch):
    """Render from results computed elsewhere (a GPU) without ever starting a run on this machine."""
    cache = runs.Cache(tmp_path)
    runs.run(Square(1.0), cache)
    CALLS.clear()
    monkeypatch.setenv("RESULTS_ONLY", "1")
    assert runs.run(Square(1.0), cache).value == {"y": 1.0}                     # cached: read
    with pytest.raises(runs.MissingRuns, match=r"2 run\(s\) are not in (.|\n)*Square-.*'x': '2.0'") as err:
        runs.run_many([Square(1.0), Square(2.0), Square(3.0)], cache, progress=False)
    assert err.value.missing == [Square(2.0), Square(3.0)] and CALLS == []     # before any work
    with pytest.raises(runs.MissingRuns):
        runs.run(Square(2.0), cache)
    assert CALLS == [] and not cache.path(Square(2.0)).exists()


@dataclasses.dataclass(frozen=True)
class Resumed:
    stretches: int

    def compute(self):
        import pandas as pd

        table = pd.DataFrame({"round": [1, 2], "seconds": [5.0, 6.0]})
        table.attrs["segments"] = [{"first_round": k + 1, "git_commit": "abc", "started": None}
                                   for k in range(self.stretches)]
        return table


def test_a_training_runs_placement_is_every_field_outside_its_hash_and_nothing_else():
    """What a run calls for inherits its placement (``followups``): every unhashed field, never the seed."""
    cell = Cell(name="a", device="cpu", data_dir="/d", checkpoint_dir="/c", whole=True, progress=False, seed=3)
    assert cell.placement() == dict(device="cpu", data_dir="/d", checkpoint_dir="/c", deadline=None, whole=True,
                                    progress=False)
    moved = Cell(name="a", seed=3, **dict(cell.placement(), device="cpu", data_dir="/e"))
    assert runs.config_hash(moved) == runs.config_hash(cell) != runs.config_hash(Cell(name="a", seed=4))


def test_a_resumed_training_run_records_its_stretches_in_the_provenance(tmp_path):
    cache = runs.Cache(tmp_path)
    resumed = runs.run(Resumed(2), cache).provenance
    assert [s["first_round"] for s in resumed["segments"]] == [1, 2]
    assert "segments" not in runs.run(Resumed(1), cache).provenance       # one stretch: nothing to add
    assert runs.run(Resumed(2), cache).provenance["segments"] == resumed["segments"]   # and it is kept in the cache


def test_a_cpu_result_names_the_cpu_model_and_simd_level_its_round_off_depends_on():
    """Random draws are the same on any x86-64 CPU, kernels (and so round-off) follow the SIMD level:
    two CPU results are one device's only where these agree (dpfl.device's docstring)."""
    from dpfl.provenance import provenance

    info = provenance(device="cpu")["device_info"]
    assert info["simd"] == torch.backends.cpu.get_cpu_capability() and info["simd"] in ("DEFAULT", "VSX", "Z VECTOR",
                                                                                        "NO AVX", "AVX2", "AVX512", "SVE256")
    try:
        with open("/proc/cpuinfo") as f:
            models = {line.split(":", 1)[1].strip() for line in f if line.startswith("model name")}
    except OSError:
        pytest.skip("no /proc/cpuinfo here")
    assert info["cpu_model"] in models if models else info["cpu_model"] is not None


@dataclasses.dataclass(frozen=True)
class Metrics:
    """A result like a training run's: a DataFrame whose columns (and one column) are strings."""
    storage: str

    def compute(self):
        import pandas as pd
        table = pd.DataFrame({"round": [1, 2], "note": ["a", "b"]})
        table.columns = table.columns.astype(pd.StringDtype(self.storage))
        table["note"] = table["note"].astype(pd.StringDtype(self.storage))
        table.attrs["segments"] = [{"first_round": 1}]
        return {"metrics": table, "per_client": [table.set_index("note")["round"]], "no_rows": table.iloc[:0]}


@pytest.mark.parametrize("storage", ["python", "pyarrow"])
def test_cached_results_hold_no_pandas_string_dtype(tmp_path, storage):
    """A run computed on the GPU machine (pandas backs ``str`` with pyarrow there) must load where
    pyarrow is absent, or it reads as unreadable and is recomputed: results are pickled with plain
    ``object`` strings (found when the first GPU results came back, 2026-11-24)."""
    if storage == "pyarrow":
        pytest.importorskip("pyarrow")
    cache = runs.Cache(tmp_path)
    computed = runs.run(Metrics(storage), cache).value
    raw = cache.path(Metrics(storage)).read_bytes()
    assert b"pyarrow" not in raw and b"StringDtype" not in raw and b"StringArray" not in raw
    stored = cache.load(Metrics(storage)).value
    table, series = stored["metrics"], stored["per_client"][0]
    assert table.columns.dtype == object and table["note"].dtype == object and series.index.dtype == object
    assert stored["no_rows"]["note"].dtype == object                 # a run stopped before its first row
    assert table.attrs == {"segments": [{"first_round": 1}]}
    assert table.astype(str).equals(computed["metrics"].astype(str))


@dataclasses.dataclass(frozen=True)
class Step:
    name: str

    def compute(self):
        CALLS.append(self.name)
        return {"name": self.name}


def test_the_runner_computes_a_runs_follow_ups_right_after_it(tmp_path):
    """``dpfl.experiments.runner``: a budgeted call completes a result (a cell, then its twin, then
    what the twin calls for) before it starts the next run of the grid; a run already queued stays where it
    is, and a cached run's follow-ups take its place."""
    grid = lambda profile, **_: [Step("a"), Step("b"), Step("c")]
    calls_for = {"a": ["a-twin", "c"], "a-twin": ["a-twin-2"], "b": ["b-twin"]}
    followups = lambda run, value, cache: [Step(n) for n in calls_for.get(run.name, [])]
    runs.run(Step("b"), runs.Cache(tmp_path))
    CALLS.clear()
    args = ["--profile", "p", "--device", "cpu", "--cache", str(tmp_path)]
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), args, followups=followups) == 0
    assert CALLS == ["a", "a-twin", "a-twin-2", "b-twin", "c"]


def test_the_runners_list_computes_nothing_and_names_each_missing_runs_checkpoint(tmp_path, capsys):
    """``--list``: what is cached (a cached run's follow-ups included) and what is missing, with the checkpoint a
    missing run would resume from; nothing is computed or written, and the exit status says whether runs are left."""
    ckpts = tmp_path / "ckpt"
    grid = lambda profile, checkpoint_dir, **_: [Cell(name=n, checkpoint_dir=checkpoint_dir) for n in "abc"]
    followups = lambda run, value, cache: [dataclasses.replace(run, name=run.name + "-twin")] if run.name == "b" else []
    cache = tmp_path / "cache"
    runs.run(Cell(name="b"), runs.Cache(cache))
    Cell(name="c", checkpoint_dir=str(ckpts)).checkpoint_path().parent.mkdir()
    Cell(name="c", checkpoint_dir=str(ckpts)).checkpoint_path().write_bytes(b"x" * 2**21)
    CALLS.clear()
    args = ["--profile", "p", "--device", "cpu", "--cache", str(cache), "--checkpoints", str(ckpts), "--list"]
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(cache), args, followups=followups) == 3
    lines = capsys.readouterr().out.splitlines()[1:]
    assert CALLS == [] and not (cache / "progress.json").exists()
    assert [line.split()[0] + " " + line.split(": ")[1].split(" (")[0] for line in lines] == [
        "cached b", "missing a", "missing b-twin", "missing c"]
    assert re.search(r"\(checkpoint \S+/ckpt/Cell-[0-9a-f]+\.pt, 2 MiB, written \d{4}-\d\d-\d\d \d\d:\d\d; "
                     r"unreadable \(\w+\)\)$", lines[-1])                  # 2 MiB of "x": a resume would fail on it
    assert "checkpoint" not in "".join(lines[:-1])
    runs.run(Cell(name="b-twin"), runs.Cache(cache))
    for n in "ac":
        runs.run(Cell(name=n), runs.Cache(cache))
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(cache), args, followups=followups) == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Long(runner.TrainingRun):
    """A run of ``rounds`` rounds at most, for ``--list``'s progress line; ``stop_at``: a target that may end it sooner."""
    rounds: int
    stop_at: float | None = None

    def compute(self):
        return {}


@pytest.mark.parametrize("stop_at, rest", [(None, "of 419 done, 44 s a round (the median of its last stretch), ≈ 4.9 h to go; "
                                                  "acc 0.4496 at round 19, 0.2696 on average over its last 19 evaluations"),
                                           (0.52, "of at most 419 done, 44 s a round (the median of its last stretch), "
                                                  "≈ 4.9 h to go at most; acc 0.4496 at round 19, 0.2696 on average over its last 19 "
                                                  "evaluations (stops at ≥ 0.52)")])
def test_the_runners_list_says_how_far_each_checkpoint_has_come(tmp_path, capsys, stop_at, rest):
    """``--list`` reads a checkpoint's rounds (memory-mapped, its tensors left unread) and tells how long the rest takes at
    its last stretch's median pace: 20 of 419 rounds, a resumed stretch of 44 s rounds after 15 s ones (another
    machine) → 399 × 44 s ≈ 4.9 h, not 399 × 15 s; then the algorithm's progress metric at the last round that
    evaluated it (round 20 did not: NaN), its mean over the last (up to 25) evaluations — 0.02·10 + 0.0696 over rounds
    1–19 — and the target it stops at."""
    config = Long(rounds=419, stop_at=stop_at, checkpoint_dir=str(tmp_path / "ckpt"))
    rows = [{"round": k, "seconds": 15.0 if k <= 10 else 44.0, "acc": 0.02 * k + 0.0696} for k in range(1, 21)]
    rows[10]["seconds"] = 300.0                                  # a slow round (the resumed stretch's first) moves no median
    rows[19]["acc"] = math.nan
    config.checkpoint_path().parent.mkdir()
    checkpoint.save(config.checkpoint_path(), "key", {"rows": rows, "algorithm": {"big": torch.zeros(10)},
                                                      "segments": [{"first_round": 1}, {"first_round": 11}],
                                                      "progress_metric": "acc"})
    args = ["--profile", "p", "--cache", str(tmp_path / "cache"), "--checkpoints", str(tmp_path / "ckpt"), "--list"]
    assert runner.main("t", lambda profile, checkpoint_dir, **_: [dataclasses.replace(config, checkpoint_dir=checkpoint_dir)],
                       lambda r: "long", ["p"], str(tmp_path / "cache"), args) == 3
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"; rounds 1–20 {rest})")
    checkpoint.save(config.checkpoint_path(), "key", {"rows": rows, "algorithm": {}, "segments": [{"first_round": 1}]})
    assert runner._progress(config.checkpoint_path(), config).endswith("to go" + " at most" * (stop_at is not None))
    checkpoint.save(config.checkpoint_path(), "key", {"rows": [], "algorithm": {}, "segments": [{"first_round": 1}]})
    assert runner._progress(config.checkpoint_path(), config) == "no round done yet"


def test_the_progress_metrics_average_covers_its_last_25_evaluations_only():
    """Rounds 1–30 with the metric = the round (round 30 unevaluated): the mean of rounds 5–29 is 17."""
    rows = [{"round": k, "acc": float(k) if k < 30 else None} for k in range(1, 31)]
    assert runner._metric_note(rows, "acc", None) == "; acc 29 at round 29, 17 on average over its last 25 evaluations"
    assert runner._metric_note(rows[:1], "acc", 0.5) == "; acc 1 at round 1 (stops at ≥ 0.5)"
    assert runner._metric_note(rows, None, 0.5) == ""


@pytest.mark.parametrize("option, message", [
    (["--budget", "nan"], "--budget must be a number of seconds (inf: no limit); got nan"),       # read as no budget
    (["--device", "tpu"], "device must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'; got 'tpu'"),
    (["--seed", "-1"], "seed must be a non-negative integer (>= 0); got -1"),                    # the runs' own check
])
def test_the_runners_bad_options_are_usage_errors_before_any_work(tmp_path, capsys, option, message):
    """A bad option stops the runner with a usage error naming it (exit 2), not a traceback or a silent no-limit
    budget (NaN); nothing computed, no cache made. (A budget ≤ 0 is no error: none left, nothing starts.)"""
    grid = lambda profile, **common: [Cell(name="a", **common)]
    cache = tmp_path / "cache"
    CALLS.clear()
    with pytest.raises(SystemExit) as stop:
        runner.main("t", grid, lambda r: r.name, ["p"], str(cache), ["--profile", "p", "--cache", str(cache), *option])
    assert stop.value.code == 2 and CALLS == [] and not cache.exists()
    assert capsys.readouterr().err.strip().endswith(f"error: {message}")


def test_an_only_that_names_no_run_is_an_error_before_any_work(tmp_path, capsys):
    """``--only`` matching nothing used to read as "0 run(s) missing", exit 0: a typo ("σ=1" for "σ=1.0", found in
    GPU_QUEUE.md on 2026-11-28) would have spent a GPU call on nothing. It is a usage error naming the option and
    an example of the runs' names; a filter matching only cached runs is no error."""
    grid = lambda profile, **_: [Cell(name=n) for n in ("p=1 σ=1.0", "p=1 σ=0.5")]
    cache = tmp_path / "cache"
    CALLS.clear()
    with pytest.raises(SystemExit) as stop:
        runner.main("t", grid, lambda r: r.name, ["p"], str(cache), ["--profile", "p", "--cache", str(cache), "--only", "σ=1 "])
    assert stop.value.code == 2 and CALLS == [] and not cache.exists()
    assert "--only 'σ=1 ' names no run of profile 'p'; its runs are named like 'p=1 σ=1.0'" in capsys.readouterr().err
    runs.run(Cell(name="p=1 σ=1.0"), runs.Cache(cache))
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(cache), ["--profile", "p", "--cache", str(cache),
                                                                       "--only", "σ=1.0", "--list"]) == 0


def test_a_repeated_only_computes_the_runs_any_of_them_names_in_the_grids_order(tmp_path, capsys):
    """``--only S1 --only S2``: one process takes several units of a grid in turn (GPU_QUEUE.md: two processes side
    by side, each with its own units), in the grid's order whatever the options' order; each is checked on its
    own, so one typo among them is a usage error naming it, before any work."""
    grid = lambda profile, **_: [Cell(name=n) for n in ("r=0.1 λ=1", "r=0.25 λ=1", "r=0.5 λ=1", "r=0.75 λ=1")]
    args = ["--profile", "p", "--device", "cpu", "--cache", str(tmp_path)]
    CALLS.clear()
    with pytest.raises(SystemExit) as stop:
        runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), [*args, "--only", "r=0.5 ", "--only", "r=0.2 "])
    assert stop.value.code == 2 and CALLS == []
    assert "--only 'r=0.2 ' names no run of profile 'p'" in capsys.readouterr().err
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), [*args, "--only", "r=0.5 ", "--only", "r=0.1 "]) == 0
    assert CALLS == ["r=0.1 λ=1", "r=0.5 λ=1"]
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), [*args, "--list"]) == 3
    assert [line.split(": ")[1] for line in capsys.readouterr().out.splitlines() if line.startswith("missing")] == [
        "r=0.25 λ=1", "r=0.75 λ=1"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mate(runner.TrainingRun):
    """A runner's run that one training computes with the other members of its ``family`` (unhashed)."""
    name: str
    family: tuple = dataclasses.field(default=(), metadata={"hash": False})

    def compute(self):
        CALLS.append(self.name)
        return [self.name]

    def together(self):
        return [self] + [dataclasses.replace(self, name=n) for n in self.family if n != self.name]

    def compute_together(self, configs):
        CALLS.append("+".join(c.name for c in configs))
        return [[c.name] for c in configs]


def test_the_runner_counts_and_bundles_runs_computed_in_one_training_at_once(tmp_path, capsys):
    """Runs computed with another (``dpfl.runs``: ``together``) are done when it is: the runner counts them right
    after it, before the next training, so a budget that ends the call there still bundles them, whether or not
    the grid (or ``--only``) lists them; nothing is computed twice."""
    import json
    import tarfile

    grid = lambda profile, **_: [Mate(name=n, family=("a1", "a2", "a3")) for n in ("a1", "b", "a2")]
    args = ["--profile", "p", "--device", "cpu", "--cache", str(tmp_path), "--bundle", str(tmp_path / "new.tar.gz")]
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), args) == 0
    assert CALLS == ["a1+a2+a3", "b"]
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert [n.split(": ")[1] for n in progress["computed_now"]] == ["a1", "a2", "a3", "b"]
    with tarfile.open(tmp_path / "new.tar.gz") as tar:
        assert len([m for m in tar.getnames() if m.endswith(".pkl")]) == 4
    assert "one training with 2 other run(s)" in capsys.readouterr().out


def test_an_only_may_name_the_follow_up_of_a_cached_run(tmp_path, capsys):
    """``--only`` naming a cached run's follow-up (a Zheng cell's non-private twin, which ``--list`` shows by its
    own name) computes it and nothing else; before 2026-12-02 it matched the grid's runs only, so GPU_QUEUE.md's
    ``--only "cifar10 p=0.5 σ=None"`` was a usage error. A follow-up of a run not yet cached is named by nothing."""
    grid = lambda profile, **_: [Step("a"), Step("b")]
    calls_for = {"a": ["a σ=None"], "b": ["b σ=None"]}
    followups = lambda run, value, cache: [Step(n) for n in calls_for.get(run.name, [])]
    args = ["--profile", "p", "--device", "cpu", "--cache", str(tmp_path), "--only", "σ=None"]
    with pytest.raises(SystemExit) as stop:
        runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), args, followups=followups)
    assert stop.value.code == 2 and "and the follow-ups of those cached" in capsys.readouterr().err
    for n in "ab":
        runs.run(Step(n), runs.Cache(tmp_path))
    CALLS.clear()
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), [*args[:-1], "b σ", "--list"],
                       followups=followups) == 3
    assert capsys.readouterr().out.splitlines()[1:] == [f"missing  {runs.Cache(tmp_path).path(Step('b σ=None')).stem}"
                                                        ": b σ=None"] and CALLS == []
    assert runner.main("t", grid, lambda r: r.name, ["p"], str(tmp_path), args, followups=followups) == 0
    assert CALLS == ["a σ=None", "b σ=None"]
