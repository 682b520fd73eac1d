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
#: the GPU image's Python (3.12, x86-64, manylinux)
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] + [
    arg for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux1_x86_64") for arg in ("--platform", tag)]


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    dest = root / ".whl"
    probe = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", ".whl/x.whl"])
    if probe.returncode != 0:
        sys.exit("gpu_wheels: .whl/ is not ignored by git; first run: echo /.whl/ >> .git/info/exclude")
    pins = []
    for name in MISSING:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            sys.exit(f"gpu_wheels: {name} is not installed here; run `make venv` first (its version is the pin)")
    dest.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), *PLATFORM, *pins]
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("*.whl"))
    size = sum(p.stat().st_size for p in wheels) / 2 ** 20
    print(f"{len(wheels)} wheels in {dest} ({size:.1f} MiB); carry '.whl'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
