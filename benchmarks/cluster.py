"""``make bench``, cluster section: a grid of 8 short real training runs (PriFedSync on non-IID MNIST,
6 clients × 3 rounds × 10 DP-SGD steps, seeds 0–7), computed one after another in this process
(``dpfl.runs.run_many``) against the same grid as Ray tasks on a local cluster of two worker CPUs
(``executor=RayExecutor("local", num_cpus=2)``, one CPU per run). Each side twice into a fresh cache,
the faster kept; the cluster's start is timed apart (a running cluster is joined in a second). On a
2-core machine the gain is bounded by the cores: the serial grid already uses both (torch's threads),
the cluster runs two single-threaded runs at once. Writes a table as the cluster section of ``benchmarks/RESULTS.md`` (``results.write_section``).
"""
from __future__ import annotations

import datetime
import os
import tempfile
import time

import pandas as pd
import torch

from dpfl import runs
from dpfl.experiments.zheng2021 import ZhengRun
from dpfl.provenance import device_name, git_commit
import results                            # benchmarks/


def grid(data_dir) -> list:
    return [ZhengRun("mnist", 1.0, 1.0, 16, 3, local_steps=10, num_clients=6, seed=s, data_dir=data_dir,
                     progress=False) for s in range(8)]


def best_of(executor, configs, repeat: int = 2) -> tuple[float, list]:
    best, values = float("inf"), None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as root:
            start = time.perf_counter()
            results = runs.run_many(configs, runs.Cache(root), executor=executor, progress=False)
            best = min(best, time.perf_counter() - start)
            values = [r.value.drop(columns="seconds") for r in results]
    return best, values


def main():
    from dpfl.cluster import RayExecutor

    configs = grid(os.environ.get("DPFL_DATA"))
    runs.run(configs[0], runs.Cache(tempfile.mkdtemp()))                 # warm-up: data decoded, code imported
    serial, serial_values = best_of(None, configs)
    start = time.perf_counter()
    cluster = RayExecutor("local", num_cpus=2)
    started = time.perf_counter() - start
    on_ray, ray_values = best_of(cluster, configs)
    cluster.shutdown()
    same = all(a.equals(b) for a, b in zip(serial_values, ray_values))
    table = pd.DataFrame([("serial run_many (this process, torch's threads)", serial, 1.0),
                          ("Ray, local cluster of 2 worker CPUs, one CPU per run", on_ray, serial / on_ray)],
                         columns=["8 runs of PriFedSync (6 clients × 3 rounds × 10 DP-SGD steps)", "seconds (best of 2)",
                                  "speed-up vs serial"])
    text = (f"## Cluster: a grid of 8 runs, serial vs Ray ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)\n\n"
            f"commit {git_commit()[:12]}, {device_name()}, torch {torch.__version__} ({torch.get_num_threads()} threads "
            f"serially), ray {__import__('ray').__version__}. Starting the local cluster took {started:.1f} s (not "
            f"in the table). Results equal to the serial grid's bit for bit: {same}.\n\n"
            + table.to_markdown(index=False, floatfmt=".3g") + "\n")
    print(text)
    results.write_section(text, "## Cluster")


if __name__ == "__main__":
    main()
