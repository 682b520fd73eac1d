"""A grid's runs as Ray tasks: the ``concurrent.futures.Executor`` that ``dpfl.runs.run_many`` sends
them to when given a Ray address (``executor="auto"``, ``$DPFL_RAY_ADDRESS``, ``make reproduce
RAY_ADDRESS=…``).

Each run is one Ray task that declares what it needs from the config it computes: a GPU (and one CPU)
for a run whose ``device`` is CUDA, ``cpus_per_run`` CPUs otherwise (Ray then gives the task as many
OpenMP threads; a result is bit-identical to a serial run's at that thread count — CPU convolutions
sum in an order that depends on it). A task whose worker dies (killed, out of memory, its node lost) or whose run raises is
retried up to ``retries`` times (Ray's ``max_retries`` and ``retry_exceptions``), then its last error is
the run's failure in ``run_many``'s ``RunsFailed``. Results travel back to the driver, which alone writes
the cache (``dpfl.runs.Cache.store``: the first result stored for a config stays), so workers need no
shared disk; each result's provenance names the host and device that computed it. Workers import
``dpfl`` themselves: install it on every node (README, "On a Ray cluster").

Ray is an optional dependency: ``pip install 'dpfl[cluster]'``. Model: Ray's task API
(https://docs.ray.io/en/latest/ray-core/tasks.html) and its task fault tolerance
(https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html).
"""
from __future__ import annotations

import functools
from concurrent.futures import Executor, Future

from dpfl import checks

__all__ = ["RayExecutor", "ray_executor", "resources"]


def resources(config, cpus_per_run: int = 1) -> dict:
    """What one run asks of the cluster: ``{"num_gpus": 1, "num_cpus": 1}`` when ``config.device`` is
    CUDA, else ``{"num_cpus": cpus_per_run}`` (a config without a ``device``, e.g. an accounting sweep,
    runs on CPUs)."""
    device = str(getattr(config, "device", "cpu") or "cpu")
    return {"num_gpus": 1, "num_cpus": 1} if device.startswith("cuda") else {"num_cpus": cpus_per_run}


class RayExecutor(Executor):
    """Submits calls ``fn(config, …)`` as Ray tasks (see the module docstring). ``address``: a running
    cluster's (``"auto"``, ``"ray://host:10001"``), or ``"local"`` to start one on this machine with
    ``num_cpus`` CPUs (default: all). It connects on creation unless Ray already is (then it uses that
    connection and leaves it open on :meth:`shutdown`)."""

    def __init__(self, address: str = "auto", *, retries: int = 2, cpus_per_run: int = 1,
                 num_cpus: int | None = None):
        try:
            import ray
        except ImportError as err:
            raise ImportError("a Ray executor needs Ray: pip install 'dpfl[cluster]'") from err
        if not isinstance(address, str) or not address:
            raise ValueError(f"address must be a Ray address ('auto', 'ray://host:port') or 'local'; got {address!r}")
        self.retries = checks.nonnegative_int("retries", retries)
        self.cpus_per_run = checks.positive_int("cpus_per_run", cpus_per_run)
        if num_cpus is not None:
            checks.positive_int("num_cpus", num_cpus)
        self._ray, self._owner = ray, not ray.is_initialized()
        if self._owner:
            self._connect(None if address == "local" else address, num_cpus)
        self._tasks: dict = {}

    def _connect(self, address: str | None, num_cpus: int | None, attempts: int = 3) -> None:
        """``ray.init``; a local cluster whose node misses Ray's fixed 30 s start-up window (a loaded
        machine: seen on a 2-core one running two other jobs) is stopped and started again."""
        for attempt in range(1, attempts + 1):
            try:
                self._ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                return
            except Exception as err:  # noqa: BLE001 — Ray raises a bare Exception for this
                if address is not None or "timed out during startup" not in str(err) or attempt == attempts:
                    raise
                self._ray.shutdown()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """``fn(*args, **kwargs)`` as a Ray task; its resources from ``args[0]`` (:func:`resources`)."""
        if fn not in self._tasks:
            self._tasks[fn] = self._ray.remote(max_retries=self.retries, retry_exceptions=True)(fn)
        task = self._tasks[fn].options(**resources(args[0] if args else None, self.cpus_per_run))
        return task.remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Disconnect from the cluster (stopping it if this executor started it), unless the
        connection was there before."""
        if self._owner and self._ray.is_initialized():
            self._ray.shutdown()


@functools.lru_cache(maxsize=None)
def ray_executor(address: str) -> RayExecutor:
    """One :class:`RayExecutor` per address and process, kept for every grid the process runs (a
    notebook runs several; connecting takes seconds)."""
    return RayExecutor(address)
