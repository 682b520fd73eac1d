"""``make bench``, peer section: dpfl against pfl-research and Flower on ``benchmarks/peers.py``'s
workload, in one run.

Creates ``.bench/venv-pfl`` (pfl 0.6.0) and ``.bench/venv-flower`` (flwr[simulation] 1.41.0: 1.42
needs a newer certifi than the index serves), each with this machine's torch, on first use —
skipped with a message when one cannot be installed (no package index) — then, for m = 10, 50,
100 clients per round, runs each framework (Flower at its default of 2 CPUs per client and at 1,
its best here) twice in a fresh process and keeps the faster median (rounds 2–6). Appends the
table, with the machine and versions, to ``benchmarks/RESULTS.md``.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: peer → (requirement, distribution, the settings ``peers.py`` runs it with)
PEERS = {"pfl": ("pfl[pytorch]==0.6.0", "pfl", ("pfl",)),
         "flower": ("flwr[simulation]==1.41.0", "flwr", ("flower-2", "flower-1"))}
#: what a setting is called in the table
LABELS = {"flower-2": "flower (default: 2 CPUs per client)", "flower-1": "flower (1 CPU per client)"}


def _venv(name: str, requirement: str) -> Path | None:
    """The peer's interpreter, creating its environment on first use; None when it cannot be installed."""
    venv = ROOT / ".bench" / f"venv-{name}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run([str(python), "-m", "pip", "install", "-q", requirement, f"torch=={torch.__version__.split('+')[0]}"],
                             capture_output=True, text=True)
        if pip.returncode:
            print(f"skipping {name}: pip could not install {requirement}:\n{pip.stderr[-600:]}")
            subprocess.run(["rm", "-rf", str(venv)])
            return None
    return python


def _measure(python, framework: str, data: Path, m: int, repeat: int = 2) -> dict:
    best = None
    for _ in range(repeat):
        out = subprocess.run([str(python), str(HERE / "peers.py"), framework, str(data), str(m)], capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
        row = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
        best = row if best is None or row["s_per_round"] < best["s_per_round"] else best
    return best


def main():
    data = ROOT / ".bench" / "peers.npz"
    data.parent.mkdir(exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "peers.py"), "prepare", str(data)], check=True)
    pythons, settings = {"dpfl": sys.executable}, {"dpfl": sys.executable}
    for name, (requirement, _, runs) in PEERS.items():
        found = _venv(name, requirement)
        if found is not None:
            pythons[name] = found
            settings.update({run: found for run in runs})
    rows = []
    for m in (10, 50, 100):
        results = {name: _measure(python, name, data, m) for name, python in settings.items()}
        for name, r in results.items():
            rows.append({"clients per round": m, "framework": LABELS.get(name, name), "s/round": r["s_per_round"],
                         "dpfl speed-up": r["s_per_round"] / results["dpfl"]["s_per_round"],
                         "peak RSS (MiB)": r["peak_rss_mib"], "accuracy after 6 rounds": r["accuracy"]})
    table = pd.DataFrame(rows)
    versions = {name: subprocess.run([str(p), "-c", f"import importlib.metadata as m; print(m.version('{PEERS[name][1]}'))"],
                                     capture_output=True, text=True).stdout.strip() for name, p in pythons.items() if name != "dpfl"}
    text = ("\n\n## Peers: one client-level DP-FedAvg round, dpfl vs "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"\n\n{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads "
            "per process. Workload (`benchmarks/peers.py`): Geyer's MLP without biases, MNIST label shards, K = 100 clients "
            "of 600, one local epoch of 10 batches of 60, SGD 0.1, whole-model clipping S = 1, noise multiplier 1, m "
            "clients without replacement; the faster of two runs' median s/round (rounds 2–6). dpfl evaluates the global "
            "model every round and accounts two ways (RDP guarantee and Geyer's code's); pfl and Flower do neither. Flower: "
            "its simulation runtime (Ray), FedAvg wrapped in DifferentialPrivacyServerSideFixedClipping, each worker "
            "loading the data once; its peak RSS sums the driver and every Ray process. \"dpfl speed-up\" is the "
            "framework's s/round over dpfl's (> 1: dpfl is faster).\n\n"
            + table.to_markdown(index=False, floatfmt=".3g") + "\n")
    print(text)
    with open(HERE / "RESULTS.md", "a") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
