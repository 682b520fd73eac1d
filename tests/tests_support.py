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
