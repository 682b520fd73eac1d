"""Helpers shared by test modules (kept out of conftest so module-scoped fixtures can use them)."""
import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_root() -> Path:
    root = Path(os.environ.get("DPFL_DATA") or SHARED_DATA)
    if not (root / "MNIST" / "raw").exists():
        pytest.skip(f"no datasets under {root} (set DPFL_DATA)")
    return root


def device_under_test() -> str:
    """Where the engine's device-generic tests run: ``$DPFL_TEST_DEVICE`` ("cpu", the default, or
    "cuda"). CI runs them on the CPU; a GPU session runs the same tests with ``DPFL_TEST_DEVICE=cuda``
    (``benchmarks/GPU_QUEUE.md``). Asking for CUDA where there is none is an error, not a skip."""
    import torch

    device = os.environ.get("DPFL_TEST_DEVICE", "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"DPFL_TEST_DEVICE must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("DPFL_TEST_DEVICE=cuda but torch sees no CUDA device")
    return device


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` imported as a module, with ``benchmarks/`` on the path for its siblings
    (``timing.py``, ``engine.py``), as when it runs as a script."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
