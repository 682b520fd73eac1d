"""benchmarks/GPU_QUEUE.md's commands name runs that exist: every ``--only`` it gives a runner (through
``gpu_session.sh``, ``cpu_background.sh`` or ``python -m dpfl.experiments.<paper>``) names a run of that paper's
profile, or a cached run's follow-up, against the committed caches. A GPU session has 15 minutes: twice a pasted
``--only`` named nothing (2026-11-28: "σ=1" for "σ=1.0"; 2026-12-02: a cell's twin, before the runner took
follow-ups' names), and a call would have ended in a usage error."""
import importlib
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUEUE = (ROOT / "benchmarks" / "GPU_QUEUE.md").read_text()
PAPERS = {"zheng2021", "geyer2017", "aldaghri_fedhdp_fl"}     # every paper with a runner CLI


def commands() -> list[tuple[str, str, str]]:
    """(paper module, profile, --only) of each runner command the queue gives, once each."""
    found = [("zheng2021", "cells", only) for only in re.findall(r'gpu_session\.sh \d+ \d+ \w+ "([^"]+)"', QUEUE)]
    for experiment, only in re.findall(r'(?:EXPERIMENT=(\w+) )?(?:bash )?benchmarks/cpu_background\.sh "([^"]+)"', QUEUE):
        experiment = experiment or "zheng2021"
        if only != "ONLY":                                     # the usage line's placeholder
            found.append((experiment, "cells" if experiment == "zheng2021" else "paper", only))
    for experiment, rest in re.findall(r"python3?\s+-m\s+dpfl\.experiments\.(\w+)\s+([^`|;]*)", QUEUE):   # each invocation
        words = shlex.split(rest.split("2>&1")[0])
        profile = words[words.index("--profile") + 1] if "--profile" in words else "paper"
        found += [(experiment, profile, words[k + 1]) for k, word in enumerate(words) if word == "--only"]  # each
    return list(dict.fromkeys(found))


def test_the_queue_has_commands_to_check():
    """The parser finds the queue's commands (a rewording must not leave this test checking nothing)."""
    found = commands()
    assert ("zheng2021", "cells", "p=0.25 σ=1.0 B=16") in found
    units = [f"femnist FedHDP r={r} " for r in ("0", "0.1", "0.25", "0.5", "0.75")]
    for unit in units + ["femnist Non-Private", "femnist DP-FedAvg", "femnist HDP-FedAvg"]:   # the two side-by-side
        assert ("aldaghri_fedhdp_fl", "paper", unit) in found                                # processes: four each
    assert {experiment for experiment, _, _ in found} == PAPERS


@pytest.mark.parametrize("experiment, profile, only", commands())
def test_each_only_in_the_queue_names_a_run(experiment, profile, only, data_root, monkeypatch):
    """``--list`` with the command's ``--only`` exits 0 (all cached) or 3 (runs left), not 2 (names no run), against
    the committed cache that the paper's CLI reads by default from the repository's root."""
    monkeypatch.chdir(ROOT)
    module = importlib.import_module(f"dpfl.experiments.{experiment}")
    argv = ["--profile", profile, "--only", only, "--list", "--device", "cpu", "--data-dir", str(data_root),
            "--checkpoints", str(ROOT / "no-checkpoints-here")]
    assert module.main(argv) in (0, 3)
