"""Experiments as frozen configs, computed once and cached on disk.

An experiment is a frozen dataclass with a ``compute(self)`` method that returns its result (any
picklable value, typically a pandas DataFrame). ``run(config)`` is pure and idempotent: it returns
the cached result for the config's hash when there is one, otherwise computes it and writes it
atomically, with provenance (package version, git commit, device, wall time, seed). A grid run
with :func:`run_many` therefore resumes where it was interrupted. Set ``FORCE=1`` in the
environment (or pass ``force=True``) to recompute, or ``RESULTS_ONLY=1`` to compute nothing (a missing result
is then an error that lists it).

Runs that one computation can yield together (FedHDP's validation runs that differ only in Ditto's λ,
which never moves the shared global model) say so: their class defines ``together(self)`` (the configs
computed with this one, itself among them) and ``compute_together(self, configs)`` (their values, in
order, ``self`` first). :func:`run` then computes a missing config with every missing companion in one go,
:func:`run_many` with those its grid lists, and each is cached under its own key, as if computed alone; each
one's provenance names the others (``computed_with``) and their shared ``wall_time_s``.

A config class may set ``code_version: ClassVar[int]``; bump it when ``compute`` changes meaning,
so that old cached results are no longer matched. Fields that say where things are rather than
what is computed (a data directory, a progress flag) take ``metadata={"hash": False}`` and stay
out of the hash. A field added later whose default reproduces the old results takes
``metadata={"hash": "unless-default"}``: it enters the hash only when set to something else, so
the results cached before it existed stay matched.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Square:
...     x: float
...     def compute(self):
...         return self.x ** 2
>>> import tempfile; cache = Cache(tempfile.mkdtemp())
>>> run(Square(3.0), cache).value
9.0
>>> run(Square(3.0), cache).cached
True
"""
from __future__ import annotations

import dataclasses
import enum
import fcntl
import hashlib
import json
import os
import pickle
import time
import warnings
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Iterable, Sequence

from dpfl.io import atomic_path, write_text
from dpfl.provenance import provenance

__all__ = ["Cache", "Result", "config_hash", "jsonable", "run", "run_many", "default_cache", "CorruptCacheWarning",
           "RunsFailed", "MissingRuns", "env_flag"]


class CorruptCacheWarning(UserWarning):
    """A cached result could not be read; it is recomputed."""


class MissingRuns(RuntimeError):
    """Results-only mode (``RESULTS_ONLY=1``, or ``results_only=True``): results that are not in the
    cache are never computed; ``missing`` lists their configs."""

    def __init__(self, missing: list, cache: "Cache"):
        self.missing = missing
        lines = [f"  {cache.path(c).name}: {jsonable(c)}" for c in missing[:20]]
        more = f"\n  … and {len(missing) - 20} more" if len(missing) > 20 else ""
        super().__init__(f"results-only mode: {len(missing)} run(s) are not in {cache.root} and are not "
                         "computed (unset RESULTS_ONLY to compute them, or fetch them from the machine that "
                         "did):\n" + "\n".join(lines) + more)


class RunsFailed(RuntimeError):
    """Some runs of a grid raised; the others finished and are cached. ``failures`` maps each
    failed config to its exception."""

    def __init__(self, failures: dict, total: int):
        self.failures = failures
        lines = [f"  {type(c).__name__}-{config_hash(c)}: {type(e).__name__}: {e}" for c, e in failures.items()]
        super().__init__(f"{len(failures)} of {total} runs failed (the others are cached):\n" + "\n".join(lines))


@dataclasses.dataclass(frozen=True)
class Result:
    """A computed (or cached) experiment result."""

    config: Any
    value: Any
    provenance: dict
    cached: bool = False


def jsonable(obj):
    """A config (a frozen dataclass, and what its fields hold) as JSON-able values: floats as their
    ``repr`` (exact), fields with ``metadata={"hash": False}`` left out — what :func:`config_hash` and
    a checkpoint's run key (``dpfl.federated.checkpoint.run_key``) hash."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if _hashed(obj, f)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in sorted(obj.items())}
    if isinstance(obj, float):
        return repr(obj)  # exact, and distinguishes 1.0 from 1
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    raise TypeError(f"config field of type {type(obj).__name__} cannot be hashed; "
                    "use numbers, strings, tuples, enums or nested frozen dataclasses")


def _hashed(obj, field) -> bool:
    rule = field.metadata.get("hash", True)
    if rule == "unless-default":
        return getattr(obj, field.name) != field.default
    return bool(rule)


def _check_config(config) -> None:
    if not (dataclasses.is_dataclass(config) and not isinstance(config, type)):
        raise ValueError(f"config must be a dataclass instance; got {type(config).__name__}")
    if not type(config).__dataclass_params__.frozen:
        raise ValueError(f"config class {type(config).__name__} must be a frozen dataclass")
    if not callable(getattr(config, "compute", None)):
        raise ValueError(f"config class {type(config).__name__} must define compute(self)")


def _portable(value):
    """``value`` with every pandas string dtype (a DataFrame's columns, index or values, also inside
    dicts, lists and tuples) made plain ``object``. pandas 3 backs ``str`` with pyarrow where pyarrow is
    installed (the GPU machine's image), and such a pickle does not load where it is not (the CI and
    developers' machines): a result computed on the GPU would read as unreadable here and be recomputed."""
    import pandas as pd

    def stringy(dtype) -> bool:
        return dtype != object and pd.api.types.is_string_dtype(dtype)

    def plain(obj):                                   # an Index or a Series
        return obj.astype(object) if stringy(obj.dtype) else obj

    if isinstance(value, pd.DataFrame):
        out = value.astype({name: object for name, dtype in value.dtypes.items() if stringy(dtype)})   # keeps attrs
        out.columns, out.index = plain(out.columns), plain(out.index)
        return out
    if isinstance(value, pd.Series):
        out = plain(value).copy()
        out.index = plain(out.index)
        return out
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_portable(v) for v in value)
    return value


def config_hash(config) -> str:
    """A stable 16-hex-digit hash of the config's class, code version and field values."""
    _check_config(config)
    kind = type(config)
    payload = {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "code_version": getattr(kind, "code_version", 0),
        "fields": jsonable(config),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Cache:
    """A directory of results, one pickle per config (plus a JSON sidecar for people to read)."""

    def __init__(self, root):
        self.root = Path(root)

    def path(self, config) -> Path:
        return self.root / f"{type(config).__name__}-{config_hash(config)}.pkl"

    def load(self, config) -> Result | None:
        """The cached result, or None when absent. An unreadable entry (truncated, corrupted, or
        pickled by code that no longer exists) warns :class:`CorruptCacheWarning` with its path and
        counts as absent, so it is recomputed and overwritten."""
        path = self.path(config)
        if not path.exists():
            return None
        try:
            with path.open("rb") as fh:
                stored = pickle.load(fh)
            return Result(config, stored["value"], stored["provenance"], cached=True)
        except Exception as err:  # noqa: BLE001 — whatever unpickling raises, the entry is unusable
            warnings.warn(f"cached result {path} is unreadable ({type(err).__name__}: {err}); "
                          "recomputing it", CorruptCacheWarning, stacklevel=2)
            return None

    def store(self, result: Result, *, overwrite: bool = False) -> Result:
        """Write ``result`` (pickle and JSON sidecar, each atomically) and return what the cache now
        holds for its config. Writers of one cache — processes of one machine, or the driver of a Ray
        grid and a notebook beside it — take turns on ``<root>/.lock``, and the first result stored
        for a config stays: a later writer gets the stored one back (its own is discarded), unless
        ``overwrite`` (``FORCE=1``), so a config's pickle and sidecar always come from one run."""
        path = self.path(result.config)
        path.parent.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)            # released when the file closes
            first = None if overwrite else self.load(result.config)
            if first is not None:
                return first
            sidecar = {"config": jsonable(result.config), "provenance": result.provenance}
            write_text(path.with_suffix(".json"), json.dumps(sidecar, indent=2) + "\n")
            with atomic_path(path) as tmp, tmp.open("wb") as fh:
                pickle.dump({"value": _portable(result.value), "provenance": result.provenance}, fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
        return result

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"


def default_cache() -> Cache:
    """``$DPFL_CACHE`` if set, else ``~/.cache/dpfl/runs``."""
    root = os.environ.get("DPFL_CACHE") or Path.home() / ".cache" / "dpfl" / "runs"
    return Cache(root)


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to something other than "", 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _force_from_env() -> bool:
    return env_flag("FORCE")


def _compute(config, companions: tuple = ()) -> list[Result]:
    """Compute ``config`` (with ``companions``: its :meth:`together` configs to compute in the same go,
    see the module docstring) and record where and how long; one result per config, ``config``'s first.
    A training run resumed from a checkpoint (its table's ``attrs["segments"]``, ``dpfl.federated.loop.run``)
    also records every stretch it took (``segments``: first round, commit, start): ``wall_time_s`` and
    ``git_commit`` are then the last stretch's alone, and the table's ``seconds`` column holds every round's
    time. A config field with ``metadata={"provenance": True}`` (unhashed: how, not what, is computed) is
    recorded too."""
    configs = [config, *companions]
    start = time.perf_counter()
    values = config.compute_together(configs) if companions else [config.compute()]
    wall = time.perf_counter() - start
    if len(values) != len(configs):
        raise RuntimeError(f"{type(config).__name__}.compute_together returned {len(values)} values for "
                           f"{len(configs)} configs")
    hashes = [config_hash(c) for c in configs]
    out = []
    for c, value, key in zip(configs, values, hashes):
        segments = getattr(value, "attrs", {}).get("segments", [])
        how = {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.metadata.get("provenance")}
        shared = {"computed_with": [h for h in hashes if h != key]} if companions else {}
        record = provenance(device=getattr(c, "device", None), wall_time_s=round(wall, 4),
                            seed=getattr(c, "seed", None), config_hash=key, **how, **shared,
                            **({"segments": segments} if len(segments) > 1 else {}))
        out.append(Result(c, value, record, cached=False))
    return out


def _companions(config, wanted) -> tuple:
    """The configs of ``config.together()`` (none for a class without it) other than ``config`` for
    which ``wanted(c)`` holds, in their order."""
    together = getattr(config, "together", None)
    if together is None:
        return ()
    return tuple(c for c in dict.fromkeys(together()) if c != config and wanted(c))


def run(config, cache: Cache | None = None, *, force: bool | None = None,
        results_only: bool | None = None) -> Result:
    """Return the result of ``config.compute()``, from ``cache`` when present.

    ``force`` (default: the ``FORCE`` environment variable) recomputes and overwrites;
    ``results_only`` (default: ``RESULTS_ONLY``) never computes: a missing result raises
    :class:`MissingRuns` (to render figures from results computed elsewhere, e.g. on a GPU).
    """
    _check_config(config)
    cache = cache or default_cache()
    force = _force_from_env() if force is None else force
    if not force:
        hit = cache.load(config)
        if hit is not None:
            return hit
    if env_flag("RESULTS_ONLY") if results_only is None else results_only:
        raise MissingRuns([config], cache)
    companions = _companions(config, lambda c: force or cache.load(c) is None)
    return [cache.store(result, overwrite=force) for result in _compute(config, companions)][0]


def run_many(configs: Iterable, cache: Cache | None = None, *, executor: Executor | str | None = None,
             force: bool | None = None, results_only: bool | None = None, progress: bool = True) -> list[Result]:
    """Run a grid of configs; cached ones are reused, so an interrupted grid resumes.

    ``executor`` is any ``concurrent.futures.Executor`` (a process pool, or a cluster executor
    with the same interface), or a Ray cluster's address (``"auto"``, ``"ray://host:10001"``; ``"local"``
    starts one on this machine; :mod:`dpfl.cluster`); None takes ``$DPFL_RAY_ADDRESS`` when set, else
    computes here, one run after another. Results are written by this process as they arrive, each
    config computed once however often it is listed. A run that raises does not stop the others: they
    finish and are cached, then :class:`RunsFailed` lists every failure (an unreadable cache entry is
    recomputed, see :meth:`Cache.load`). In results-only mode (see :func:`run`) every missing result is
    listed in one :class:`MissingRuns`, before any work.
    """
    configs: Sequence = list(configs)
    for config in configs:
        _check_config(config)
    cache = cache or default_cache()
    force = _force_from_env() if force is None else force
    results: list[Result | None] = [None if force else cache.load(c) for c in configs]
    todo: dict = {}                                    # each missing config once, with every place it fills
    for i, r in enumerate(results):
        if r is None:
            todo.setdefault(config_hash(configs[i]), []).append(i)
    missing = {key: configs[places[0]] for key, places in todo.items()}
    if todo and (env_flag("RESULTS_ONLY") if results_only is None else results_only):
        raise MissingRuns(list(missing.values()), cache)
    executor = executor or os.environ.get("DPFL_RAY_ADDRESS") or None
    if isinstance(executor, str) and todo:
        from dpfl.cluster import ray_executor

        executor = ray_executor(executor)
    failures: dict = {}
    groups: dict = {}                                  # lead's key → its missing companions (module docstring)
    assigned: set = set()
    for key, config in missing.items():
        if key not in assigned:
            groups[key] = _companions(config, lambda c: (h := config_hash(c)) in missing and h not in assigned)
            assigned.update([key, *map(config_hash, groups[key])])

    def finish(key, compute):
        try:
            computed = compute()
        except Exception as err:  # noqa: BLE001 — one failed run must not cost the grid
            for config in (missing[key], *groups[key]):
                failures[config] = err
            bar.update(1 + len(groups[key]))
            return
        for result in computed:
            result = cache.store(result, overwrite=force)
            for i in todo[config_hash(result.config)]:
                results[i] = result
            bar.update(1)

    bar = _progress(len(todo), progress, f"{len(configs) - sum(map(len, todo.values()))} cached")
    try:
        if executor is None:
            for key, companions in groups.items():
                finish(key, lambda: _compute(missing[key], companions))
        else:
            from concurrent.futures import as_completed

            futures = {executor.submit(_compute, missing[key], companions): key for key, companions in groups.items()}
            for fut in as_completed(futures):
                finish(futures[fut], fut.result)
    finally:
        bar.close()
    if failures:
        raise RunsFailed(failures, len(configs))
    return results  # type: ignore[return-value]


def _progress(total: int, enabled: bool, note: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled or total == 0, desc=f"runs ({note})",
                unit="run", leave=False)
