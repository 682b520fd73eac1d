"""``make bench``, peer section: dpfl against pfl-research and Flower on ``benchmarks/peers.py``'s two
workloads, in one run.

Creates ``.bench/venv-pfl`` (pfl 0.6.0) and ``.bench/venv-flower`` (flwr[simulation] 1.41.0 — 1.42
needs a newer certifi than the index serves — with opacus 1.6.0), each with this machine's torch, on
first use — skipped with a message when one cannot be installed (no package index). Then the
client-level workload at m = 10, 50, 100 clients per round (dpfl evaluating as the peers do and at its
default, pfl, Flower at its default of 2 CPUs per client and at 1) and the record-level workload at
m = 10 (dpfl, Flower with Opacus clients), each setting twice in a fresh process, the faster median
kept. Writes both tables, with the machine and versions, as the peers' section of ``benchmarks/RESULTS.md``
(``results.write_section``: it replaces the previous one; on a GPU its own section, "Peers on a GPU").

A machine without a package index (the lent GPU machine) runs a peer from wheels unpacked into a folder
instead of a virtual environment: ``--site pfl=/tmp/pflsite`` runs pfl with this interpreter and that folder
first on ``PYTHONPATH`` (``benchmarks/gpu_wheels.py --peers`` fetches its wheels); given any ``--site``, only
the peers it names run beside dpfl.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import results                            # benchmarks/
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: peer → (requirements, distribution, the settings ``peers.py`` runs it with)
PEERS = {"pfl": (("pfl[pytorch]==0.6.0",), "pfl", ("pfl",)),
         "flower": (("flwr[simulation]==1.41.0", "opacus==1.6.0"), "flwr", ("flower-2", "flower-1", "flower-records-1"))}
#: the two workloads: the settings each runs at which cohort sizes, and what its table is called
WORKLOADS = {
    "client-level": (("dpfl", "dpfl-eval1", "pfl", "flower-2", "flower-1"), (10, 50, 100), "accuracy after 6 rounds"),
    "record-level": (("dpfl-records", "flower-records-1"), (10,), "accuracy after 4 rounds"),
}
#: what a setting is called in the table
LABELS = {"dpfl": "dpfl (evaluates after the last round, as the peers here)",
          "dpfl-eval1": "dpfl (evaluates every round: its default)",
          "flower-2": "flower (default: 2 CPUs per client)", "flower-1": "flower (1 CPU per client)",
          "dpfl-records": "dpfl (PriFedSync, α = η = 1)", "flower-records-1": "flower + opacus 1.6 (1 CPU per client)"}
#: the setting every row of a workload is compared with
BASELINE = {"client-level": "dpfl", "record-level": "dpfl-records"}


def _venv(name: str, requirements: tuple) -> Path | None:
    """The peer's interpreter, creating its environment or completing it on first use; None when it
    cannot be installed (pip finds what is already installed without a package index)."""
    venv = ROOT / ".bench" / f"venv-{name}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements,
                          f"torch=={torch.__version__.split('+')[0]}"], capture_output=True, text=True)
    if pip.returncode:
        print(f"skipping {name}: pip could not install {' '.join(requirements)}:\n{pip.stderr[-600:]}")
        return None
    return python


def _measure(python, setting: str, data: Path, m: int, repeat: int = 2) -> dict:
    """The faster of ``repeat`` fresh processes' rows; ``python``: an interpreter, or (interpreter, a folder
    put first on ``PYTHONPATH``: a peer's unpacked wheels, ``--site``)."""
    python, env = _interpreter(python, str(ROOT / "lib"))
    best = None
    for _ in range(repeat):
        out = subprocess.run([str(python), str(HERE / "peers.py"), setting, str(data), str(m)], capture_output=True,
                             text=True, check=True, env=env)
        row = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
        best = row if best is None or row["s_per_round"] < best["s_per_round"] else best
    return best


def _table(workload: str, settings: dict, data: Path) -> pd.DataFrame:
    names, sizes, accuracy = WORKLOADS[workload]
    rows = []
    for m in sizes:
        results = {name: _measure(settings[name], name, data, m) for name in names if name in settings}
        base = results[BASELINE[workload]]["s_per_round"]
        for name, r in results.items():
            rows.append({"clients per round": m, "framework": LABELS.get(name, name), "s/round": r["s_per_round"],
                         "dpfl speed-up": r["s_per_round"] / base, "peak RSS (MiB)": r["peak_rss_mib"],
                         accuracy: r["accuracy"]})
    return pd.DataFrame(rows)


def _sites(pairs: list) -> dict:
    """``--site`` values NAME=DIR as {peer: folder}, each checked before any work."""
    sites = {}
    for pair in pairs:
        name, _, folder = pair.partition("=")
        if name not in PEERS or not folder:
            raise SystemExit(f"--site must be NAME=DIR with NAME one of {sorted(PEERS)}; got {pair!r}")
        if not Path(folder).is_dir():
            raise SystemExit(f"--site {pair}: {folder} is not a folder (unpack the peer's wheels there first)")
        sites[name] = folder
    return sites


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", action="append", default=[], metavar="NAME=DIR",
                        help="run peer NAME from unpacked wheels in DIR with this interpreter, not a venv "
                             "(no package index: the GPU machine); only the peers named run")
    sites = _sites(parser.parse_args(argv).site)
    data = ROOT / ".bench" / "peers.npz"
    data.parent.mkdir(exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "peers.py"), "prepare", str(data)], check=True)
    pythons = {}
    settings = {"dpfl": sys.executable, "dpfl-eval1": sys.executable, "dpfl-records": sys.executable}
    for name, (requirements, _, runs) in PEERS.items():
        if sites:                                 # no package index: the peers named, from their wheels
            found = (sys.executable, sites[name]) if name in sites else None
        else:
            found = _venv(name, requirements)
        if found is not None:
            pythons[name] = found
            settings.update({run: found for run in runs})
    client, record = _table("client-level", settings, data), _table("record-level", settings, data)
    versions = {name: _version(p, PEERS[name][1]) for name, p in pythons.items()}
    cuda = torch.cuda.is_available()
    machine = (f"{torch.cuda.get_device_name()} (dpfl and the peers train on CUDA), host " if cuda else "") + \
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    owner = "## Peers on a GPU" if cuda else "## Peers:"
    text = (owner + (":" if cuda else "") + " dpfl vs " + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
            + f"\n\n{machine}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads per process. \"dpfl speed-up\" is the row's s/round over dpfl's (> 1: dpfl "
            "is faster); each s/round is the faster of two fresh processes' median over the rounds after the first.\n\n"
            "**Client-level DP-FedAvg** (`benchmarks/peers.py`): Geyer's MLP without biases, MNIST label shards, K = 100 "
            "clients of 600, one local epoch of 10 batches of 60, SGD 0.1, whole-model clipping S = 1, noise multiplier 1, "
            "m clients without replacement, 6 rounds. dpfl also accounts two ways every round (the RDP guarantee); the "
            "peers do not." + (" Flower: its simulation runtime (Ray), FedAvg wrapped in DifferentialPrivacyServerSideFixedClipping, "
            "each worker loading the data once; its peak RSS sums the driver and every Ray process." if "flower" in pythons else "")
            + "\n\n"
            + client.to_markdown(index=False, floatfmt=".3g")
            + "\n\n**Record-level DP-SGD in the clients**: Zheng's MnistCNN, per-sample clipping C = 1, noise multiplier 2, "
            "batches of 16, 37 steps with Adam 1e-3, FedAvg of all m clients every round, 4 rounds, accuracy on 2000 test "
            "images. Flower's clients run Opacus (a fresh Adam each round); dpfl's keep their Adam moments (Zheng's code).\n\n"
            + record.to_markdown(index=False, floatfmt=".3g") + "\n")
    print(text)
    results.write_section(text, owner)


def _interpreter(python, *paths: str) -> tuple:
    """(interpreter, environment) of ``python`` — an interpreter, or (interpreter, a peer's site folder):
    ``PYTHONPATH`` is the site folder, then ``paths``, then this process's."""
    python, site = python if isinstance(python, tuple) else (python, None)
    path = os.pathsep.join(p for p in (site, *paths, os.environ.get("PYTHONPATH")) if p)
    return python, {**os.environ, "PYTHONPATH": path}


def _version(python, distribution: str) -> str:
    """``distribution``'s version as ``python`` (see :func:`_interpreter`) sees it."""
    python, env = _interpreter(python)
    return subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version('{distribution}'))"],
                          capture_output=True, text=True, env=env).stdout.strip()


if __name__ == "__main__":
    main()
