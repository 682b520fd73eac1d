"""A paper's grid of training runs computed into a cache within a time budget, from the command line —
for time-limited GPU commands (10 minutes each) and for long CPU jobs that resume across sessions:
each call adds the runs it finishes, and the next call (or the notebook) reads them from the cache.

``python -m dpfl.experiments.<paper> --profile paper --device cuda --budget 540 --cache C --whole-runs
--bundle $OUT/runs.tar.gz``. ``--whole-runs``: give a run up as soon as it cannot finish within the
budget and go on to the next (on a machine whose disk goes away, a partial run is lost with its
checkpoint). ``--bundle``: the cache entries this call computed, in one archive (``tar -xzf`` it in
the cache). ``--only S``: the runs whose name contains S, with what they call for, and the follow-ups of cached runs
(a cell's non-private twin, say) whose name contains S; repeated (``--only S1 --only S2``), those that any of them
names, in the grid's order (one process taking several units of a grid in turn, beside another taking the others). ``--checkpoints DIR``: where a run that
stops unfinished keeps its checkpoint, to resume from there on the next call. ``<cache>/progress.json`` says what is done,
what is missing and what stopped the call. ``--list``: print what is cached and what is missing (with the
checkpoint a missing run would resume from, its rounds done, the time left at its last pace and its progress metric
against the target that stops it), compute nothing. Exit status 0 when every run is cached, 3 when some are left.
On a CPU the process keeps the memory it frees for reuse (``dpfl.allocator``: rounds 1.15–1.3× faster).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import numbers
import os
import statistics
import tarfile
import time
from pathlib import Path
from typing import Callable, ClassVar

import torch

from dpfl import checks, runs
from dpfl.allocator import keep_freed_memory
from dpfl.federated.loop import CannotFinish, Interrupted, Stopped, run
from dpfl.io import atomic_path

__all__ = ["TrainingRun", "main"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """The base of a paper's training-run config: where a run happens and how it may be cut short —
    ``device``, ``data_dir``, ``checkpoint_dir``, a ``deadline`` (``time.time()``: the loop checkpoints
    and raises ``Interrupted`` instead of starting a round that would end later), ``whole`` (with a
    deadline, give the run up, ``CannotFinish``, once its rounds left cannot end before it) and
    ``progress``. None of them changes what is computed, so all stay out of the config hash (:meth:`placement`
    lists them): a result computed on a GPU is read on a CPU machine, its device recorded in the provenance.
    ``seed``, the one field here that is part of the hash, makes a run repeatable on one device."""

    #: with a ``checkpoint_dir``, a run saves its state every this many seconds of wall time
    checkpoint_seconds: ClassVar[float] = 120.0

    device: str = dataclasses.field(default="cpu", metadata={"hash": False})
    data_dir: str | None = dataclasses.field(default=None, metadata={"hash": False})
    checkpoint_dir: str | None = dataclasses.field(default=None, metadata={"hash": False})
    deadline: float | None = dataclasses.field(default=None, metadata={"hash": False})
    whole: bool = dataclasses.field(default=False, metadata={"hash": False})
    progress: bool = dataclasses.field(default=True, metadata={"hash": False})
    seed: int = 0

    def __post_init__(self):
        """What every run checks before any work: its ``device`` (a name runs can go to, ``"auto"`` resolved)
        and its ``seed``. A subclass checks the rest of its fields after calling this."""
        checks.device("device", self.device)
        checks.nonnegative_int("seed", self.seed)

    def placement(self) -> dict:
        """Where and how this run happens, the fields outside its hash: what a run it calls for inherits."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(TrainingRun) if f.metadata.get("hash") is False}

    def checkpoint_path(self, companions=()) -> Path | None:
        """Where this run keeps its state while unfinished: ``<checkpoint_dir>/<Class>-<hash>.pt``, or None;
        computed with ``companions`` (``dpfl.runs``: runs computed together), ``<Class>-<hash>+<their hash>.pt``."""
        if not self.checkpoint_dir:
            return None
        name = f"{type(self).__name__}-{runs.config_hash(self)}"
        if companions:
            name += "+" + hashlib.sha256(" ".join(runs.config_hash(c) for c in companions).encode()).hexdigest()[:8]
        return Path(self.checkpoint_dir) / f"{name}.pt"

    def train(self, algorithm, fd, companions=()):
        """``dpfl.federated.loop.run`` with this run's placement, checkpointing to
        :meth:`checkpoint_path` (removed once the run finishes: the cached result replaces it)."""
        checkpoint = self.checkpoint_path(companions)
        if checkpoint is not None:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
        metrics = run(algorithm, fd, checkpoint=checkpoint, checkpoint_seconds=self.checkpoint_seconds,
                      deadline=self.deadline, whole=self.whole, progress=self.progress, device=self.device)
        if checkpoint is not None and checkpoint.exists():
            checkpoint.unlink()
        return metrics


def main(prog: str, grid: Callable, describe: Callable, profiles, default_cache: str, argv=None,
         followups: Callable | None = None, options: dict | None = None) -> int:
    """Parse ``argv`` and compute the missing runs of ``grid(profile, seed=, device=, data_dir=,
    checkpoint_dir=, deadline=, whole=)``, each named ``describe(run)`` in the log. ``followups(run,
    metrics, cache)``: the runs a cached run's result calls for (e.g. a non-private twin to the round a
    private run stopped at), computed right after it in the same call, before the runs queued behind it
    (a budgeted call completes a result before it starts the next), whatever ``--only`` says.
    ``options``: a paper's own command-line options, {name: (flags, ``add_argument`` keywords)}; each
    value reaches ``grid`` as the keyword ``name`` (e.g. Zheng's ``--per-sample``)."""
    from dpfl.notebook import resolve_device

    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="paper", choices=list(profiles))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=os.environ.get("DPFL_DATA"))
    parser.add_argument("--cache", default=default_cache)
    parser.add_argument("--checkpoints", help="where unfinished runs keep their checkpoints (default <cache>/checkpoints): "
                        "a directory outside the work tree outlives a fresh checkout on the same machine")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds; a run still going then checkpoints and stops (exit status 3)")
    parser.add_argument("--whole-runs", action="store_true", help="skip a run as soon as it cannot finish in the budget")
    parser.add_argument("--bundle", help="write the cache entries this call computes into this .tar.gz")
    parser.add_argument("--only", action="append", help="compute only the runs whose name contains this (a cached run's "
                        "follow-ups included), and the follow-ups of the runs it names; repeated: those any of them names")
    parser.add_argument("--list", action="store_true", help="print what is cached and what is missing, compute nothing")
    for name, (flags, kwargs) in (options or {}).items():
        parser.add_argument(*flags, dest=name, **kwargs)
    args = parser.parse_args(argv)
    only = args.only or [""]                   # no --only: every run
    if math.isnan(args.budget):                # it read as no budget at all (≤ 0: none left, nothing starts)
        parser.error(f"--budget must be a number of seconds (inf: no limit); got {args.budget}")
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        parser.error(str(exc))
    if device == "cpu":                        # hours of training: reuse freed memory (dpfl.allocator)
        keep_freed_memory()
    cache = runs.Cache(args.cache)
    deadline = time.time() + args.budget if math.isfinite(args.budget) else None
    name = lambda c: f"{cache.path(c).stem}: {describe(c)}"
    todo, cached = [], []

    def wanted(config, named: bool) -> list:   # a missing run, or what a cached one calls for, that --only names
        named = named or any(s in describe(config) for s in only)  # (a run named brings its follow-ups whatever their names)
        if not named and followups is None:    # nothing of it can be named: spare reading its result
            return []
        hit = cache.load(config)
        if hit is None:
            return [config] if named else []
        if named:
            cached.append(config)
        return [c for later in (followups(config, hit.value, cache) if followups else []) for c in wanted(later, named)]

    def want(config, at: int, named: bool = False):  # queue them at ``at``, each once
        new = []
        for c in wanted(config, named):
            if c not in todo and c not in new:
                new.append(c)
        todo[at:at] = new

    try:                                       # the runs check their settings (--seed, a grid's options) when built
        grid_runs = grid(args.profile, seed=args.seed, device=device, data_dir=args.data_dir,
                         checkpoint_dir=args.checkpoints or str(Path(args.cache) / "checkpoints"), deadline=deadline,
                         whole=args.whole_runs, **{name: getattr(args, name) for name in options or {}})
    except ValueError as exc:
        parser.error(str(exc))
    for config in grid_runs:                   # --only may name a follow-up (a cell's twin) of a cached run
        want(config, len(todo))
    unnamed = [s for s in only if not any(s in describe(c) for c in [*todo, *cached])]
    if unnamed:                  # a typo must not pass for "nothing left to do" (2026-11-28: "σ=1" for "σ=1.0")
        parser.error(f"--only {unnamed[0]!r} names no run of profile {args.profile!r}; its runs are named like "
                     f"{describe(grid_runs[0])!r} (--list without --only lists them, and the follow-ups of those "
                     "cached)" if grid_runs else f"profile {args.profile!r} has no runs")
    print(f"{args.profile}: {len(todo)} run(s) missing from {args.cache}", flush=True)
    if args.list:
        for config in dict.fromkeys(cached):
            print(f"cached   {name(config)}")
        for config in todo:
            print(f"missing  {name(config)}{_checkpoint_note(config)}")
        return 3 if todo else 0
    done, skipped, status = [], [], "finished"
    k = 0
    while k < len(todo):                       # todo grows by the follow-ups of the runs it finishes
        config, k = todo[k], k + 1
        try:                                   # the loop stops a run at the deadline, before its first round too
            result = runs.run(config, cache)
        except CannotFinish as stop:
            skipped.append(name(config))
            print(f"[{k}/{len(todo)}] skipped {name(config)}: {stop}", flush=True)
            continue
        except Interrupted as stop:
            status = str(stop) if isinstance(stop, Stopped) else f"budget of {args.budget:.0f} s reached: {stop}"
            print(f"{status}; {len(todo) - k + 1} run(s) left", flush=True)
            break
        mates = _computed_with(config, result)  # computed in the same training (dpfl.runs): done now, bundled with it
        todo[k:] = [c for c in todo[k:] if c not in mates]
        done += [config, *(c for c in mates if c not in done)]
        for c in [config, *mates]:
            want(c, k, named=True)             # their follow-ups next, before the runs queued behind them
        segments = result.provenance.get("segments")              # resumed: the time is the last stretch's
        took = f"{result.provenance['wall_time_s']:.0f} s" + (f" (rounds {segments[-1]['first_round']}–)" if segments else "")
        if mates:
            took += f", one training with {len(mates)} other run(s): " + "; ".join(name(c) for c in mates)
        print(f"[{k}/{len(todo)}] {name(config)}: {len(result.value)} rounds in {took}", flush=True)
    missing = [name(c) for c in todo if c not in done]
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    with atomic_path(Path(args.cache) / "progress.json") as tmp:
        Path(tmp).write_text(json.dumps({"profile": args.profile, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                         "computed_now": [name(c) for c in done], "skipped": skipped,
                                         "missing": missing, "status": status}, indent=1, ensure_ascii=False))
    if args.bundle:
        with atomic_path(args.bundle) as tmp, tarfile.open(tmp, "w:gz") as tar:
            for c in done:
                for path in (cache.path(c), cache.path(c).with_suffix(".json")):
                    tar.add(path, arcname=path.name)
        print(f"{len(done)} new run(s) bundled in {args.bundle}", flush=True)
    return 3 if missing else 0


def _computed_with(config, result) -> list:
    """The configs computed in the same go as ``config``'s fresh ``result`` (``dpfl.runs``: ``together``), by
    the hashes its provenance names; none for a result read from the cache."""
    hashes = set(result.provenance.get("computed_with", ())) if not result.cached else set()
    together = getattr(config, "together", None)
    return [c for c in together() if runs.config_hash(c) in hashes] if hashes and together else []


def _checkpoint_note(config) -> str:
    """`` (checkpoint PATH, N MiB, written DATE; PROGRESS)`` when ``config`` has a checkpoint to resume from, else
    ``""``; PROGRESS is :func:`_progress`'s."""
    path = config.checkpoint_path() if isinstance(config, TrainingRun) else None
    if path is not None and not path.exists():                  # or one of a computation with companions
        path = next(iter(sorted(path.parent.glob(f"{path.stem}+*.pt"))), path)
    if path is None or not path.exists():
        return ""
    stat = path.stat()
    written = time.strftime("%Y-%m-%d %H:%M", time.localtime(stat.st_mtime))
    return f" (checkpoint {path}, {stat.st_size / 2**20:.0f} MiB, written {written}; {_progress(path, config)})"


def _progress(path, config) -> str:
    """How far the checkpoint at ``path`` has come and how long the rest may take where it last ran: "rounds 1–N of
    (at most, if it stops at a target) R done, S s a round (the median of its last stretch), ≈ H h to go; METRIC V at
    round M (stops at ≥ TARGET)", or "unreadable (ERROR)". METRIC is the algorithm's progress metric (the one a
    target stops the run on: Zheng's stored accuracy), its last value; a checkpoint written before it was saved
    (2026-12-02) gives none. Memory-mapped: its tensors (1.4 GB for Zheng's 100 MNIST clients) are not read."""
    try:
        saved = torch.load(path, mmap=True, weights_only=False, map_location="cpu")
        rows, stretches = saved["rows"], saved.get("segments") or [{"first_round": 1}]
    except Exception as exc:                   # a resume would fail on it too: say so rather than hide it
        return f"unreadable ({type(exc).__name__})"
    if not rows:
        return "no round done yet"
    last = [row["seconds"] for row in rows if row["round"] >= stretches[-1]["first_round"]] or \
        [row["seconds"] for row in rows]
    pace, done, total = statistics.median(last), rows[-1]["round"], getattr(config, "rounds", None)
    target = getattr(config, "stop_at", None)
    if total is None:
        text = f"rounds 1–{done} done, {pace:.0f} s a round (the median of its last stretch)"
    else:
        bound = " at most" if target is not None else ""
        text = (f"rounds 1–{done} of{bound} {total} done, {pace:.0f} s a round (the median of its last stretch), "
                f"≈ {max(total - done, 0) * pace / 3600:.1f} h to go{bound}")
    return text + _metric_note(rows, saved.get("progress_metric"), target)


def _metric_note(rows, metric, target, window: int = 25) -> str:
    """``"; METRIC V at round M, A on average over its last N evaluations"`` (the last round that evaluated it, and
    the mean of up to ``window`` evaluations: a noisy metric's one round says little of the trend), with
    ``" (stops at ≥ TARGET)"`` for a run with a target, or ``""`` when no row has the metric."""
    seen = [row for row in rows if metric and isinstance(row.get(metric), numbers.Real) and math.isfinite(row[metric])]
    if not seen:
        return ""
    recent = [row[metric] for row in seen[-window:]]
    trend = f", {statistics.fmean(recent):.4g} on average over its last {len(recent)} evaluations" if len(recent) > 1 else ""
    stop = f" (stops at ≥ {target:.4g})" if target is not None else ""
    return f"; {metric} {seen[-1][metric]:.4g} at round {seen[-1]['round']}{trend}{stop}"
