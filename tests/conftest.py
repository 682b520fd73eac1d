"""Shared fixtures: the offline data directory and an isolated dataset cache."""
import pytest

from tests_support import shared_root


@pytest.fixture
def data_root():
    """``$DPFL_DATA`` if set, else ``../shared/data``; skips when neither holds the datasets."""
    return shared_root()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session decodes datasets into its own cache (never the user's)."""
    monkeypatch.setenv("DPFL_CACHE", str(tmp_path_factory.getbasetemp() / "dpfl-cache"))
