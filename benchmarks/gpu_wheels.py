"""Download, as wheels into ``.whl/``, what the test suite needs and the GPU machine's image lacks.

The GPU machine has no network (``benchmarks/GPU_QUEUE.md``); its image holds torch, numpy, pandas,
scipy, matplotlib, pytest, pytest-xdist, hypothesis and pyarrow, but not papermill and the Jupyter
kernel the notebook tests execute with, nor dp-accounting and Opacus. This script fetches those
(and what they need that the image lacks: the list below, read against the image's package list of
2026-11-17) at the versions installed in this checkout's ``.venv``, so the GPU runs the tests with
what CI runs them with. Run it here, where pip reaches an index:

    .venv/bin/python benchmarks/gpu_wheels.py          # then carry ".whl" and, in the command,
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=lib:/tmp/site

``.whl/`` must be ignored by git (``.git/info/exclude``): wheels never enter the repository.

``--peers`` fetches instead, into ``.whl-pfl/``, pfl-research 0.6.0 and what it needs that the image lacks
(pip resolves them for the image's Python; numpy and scipy, which the image has, are left out) for
``make bench``'s peer rows on the GPU. pfl wants dp-accounting < 0.6, older than the tests' pin, so it gets
a folder of its own: ``python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pflsite
.whl-pfl/*.whl && python3 benchmarks/run_peers.py --site pfl=/tmp/pflsite``.
"""
from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

#: the dependency closure of papermill, ipykernel, dp-accounting and Opacus minus the image's packages
MISSING = ["asttokens", "cffi", "comm", "debugpy", "dm-tree", "dp-accounting", "entrypoints", "executing",
           "fastjsonschema", "importlib-metadata", "ipykernel", "ipython", "ipython-pygments-lexers", "jedi",
           "jsonschema", "jsonschema-specifications", "jupyter-client", "jupyter-core", "matplotlib-inline",
           "nbclient", "nbformat", "nest-asyncio2", "opacus", "papermill", "parso", "pexpect", "platformdirs",
           "prompt-toolkit", "ptyprocess", "pure-eval", "pycparser", "pyzmq", "referencing", "rpds-py",
           "stack-data", "tenacity", "tornado", "traitlets", "tzdata", "wcwidth"]
#: ``--peers``: the peer ``benchmarks/run_peers.py`` runs on the GPU, and what the image has of its closure
PEER, PEER_ON_IMAGE = "pfl==0.6.0", ("numpy", "scipy")
#: the GPU image's Python (3.12, x86-64, manylinux)
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] + [
    arg for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux1_x86_64") for arg in ("--platform", tag)]


def main(argv=None) -> int:
    peers = "--peers" in (sys.argv[1:] if argv is None else argv)
    root = Path(__file__).resolve().parents[1]
    folder = ".whl-pfl" if peers else ".whl"
    dest = root / folder
    probe = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", f"{folder}/x.whl"])
    if probe.returncode != 0:
        sys.exit(f"gpu_wheels: {folder}/ is not ignored by git; first run: echo /{folder}/ >> .git/info/exclude")
    if peers:
        dest.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *PLATFORM, PEER], check=True)
        for wheel in dest.glob("*.whl"):
            if wheel.name.split("-")[0].lower() in PEER_ON_IMAGE:
                wheel.unlink()
        return _report(dest, folder)
    pins = []
    for name in MISSING:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            sys.exit(f"gpu_wheels: {name} is not installed here; run `make venv` first (its version is the pin)")
    dest.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), *PLATFORM, *pins]
    subprocess.run(cmd, check=True)
    return _report(dest, folder)


def _report(dest: Path, folder: str) -> int:
    wheels = sorted(dest.glob("*.whl"))
    size = sum(p.stat().st_size for p in wheels) / 2 ** 20
    print(f"{len(wheels)} wheels in {dest} ({size:.1f} MiB); carry '{folder}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
