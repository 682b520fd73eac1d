"""Shared fixtures: the offline data directory and an isolated dataset cache."""
import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def data_root():
    """``$DPFL_DATA`` if set, else ``../shared/data``; skips when neither holds the datasets."""
    root = Path(os.environ.get("DPFL_DATA") or SHARED_DATA)
    if not (root / "MNIST" / "raw").exists():
        pytest.skip(f"no datasets under {root} (set DPFL_DATA)")
    return root


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session decodes datasets into its own cache (never the user's)."""
    monkeypatch.setenv("DPFL_CACHE", str(tmp_path_factory.getbasetemp() / "dpfl-cache"))
