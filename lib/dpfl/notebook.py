"""What every paper notebook does first: validate its parameters and set up its outputs.

A notebook's parameters cell (tagged ``parameters`` for papermill) holds ``profile``, ``device``,
``seed``, ``data_dir`` and ``out_dir``; the next cell calls :func:`setup`, which checks them and
returns a :class:`Notebook` that writes figures, tables, cached runs and the paper-vs-ours
comparisons into ``out_dir`` (``figures/<paper-id>/``).

Profiles: ``smoke`` (seconds on a 2-core CPU; what CI runs), ``quick`` (at most ~15 minutes on a
laptop CPU), ``paper`` (the paper's full settings).
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from dpfl import checks, reporting, runs
from dpfl.io import atomic_path, write_text

__all__ = ["PROFILES", "Notebook", "setup", "resolve_device"]

PROFILES = ("smoke", "quick", "paper")
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when torch sees a GPU, else ``"cpu"``; other names are checked."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"device must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'; got {device!r}")
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass
class Notebook:
    """One paper notebook's run: its parameters and where its outputs go."""

    paper: str
    profile: str
    seed: int
    device: str
    out_dir: Path
    data_dir: Path | None
    comparisons: list = dataclasses.field(default_factory=list)

    # -- parameters ---------------------------------------------------------------------------
    def pick(self, *, smoke: Any, quick: Any, paper: Any) -> Any:
        """The value for the current profile."""
        return {"smoke": smoke, "quick": quick, "paper": paper}[self.profile]

    def rng(self, *keys: int) -> np.random.Generator:
        """An independent generator for one named stream, derived from the notebook's seed."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, *keys]))

    # -- cached experiments -------------------------------------------------------------------
    @property
    def cache(self) -> runs.Cache:
        return runs.Cache(self.out_dir / "cache")

    def run(self, config) -> runs.Result:
        """``dpfl.runs.run`` into this notebook's cache."""
        return runs.run(config, self.cache)

    def run_many(self, configs, **kwargs) -> list[runs.Result]:
        """``dpfl.runs.run_many`` into this notebook's cache."""
        return runs.run_many(configs, self.cache, **kwargs)

    # -- outputs ------------------------------------------------------------------------------
    def savefig(self, fig, name: str) -> Path:
        """Write ``fig`` as ``<name>.png`` and ``<name>.pdf`` into ``out_dir``, atomically."""
        for ext in ("png", "pdf"):
            with atomic_path(self.out_dir / f"{name}.{ext}") as tmp:
                fig.savefig(tmp, format=ext)
        return self.out_dir / f"{name}.png"

    def save_table(self, table, name: str, *, floatfmt: str = ".4g") -> Path:
        """Write a DataFrame as ``<name>.csv`` and ``<name>.md`` into ``out_dir``, atomically."""
        with atomic_path(self.out_dir / f"{name}.csv") as tmp:
            table.to_csv(tmp, index=False)
        write_text(self.out_dir / f"{name}.md", table.to_markdown(index=False, floatfmt=floatfmt) + "\n")
        return self.out_dir / f"{name}.csv"

    # -- paper versus ours --------------------------------------------------------------------
    def compare(self, quantity: str, ours: float, reference: float, **kwargs) -> reporting.Comparison:
        """Record a reproduced number next to its reference (see ``dpfl.reporting.compare``)."""
        row = reporting.compare(quantity, ours, reference, **kwargs)
        self.comparisons.append(row)
        return row

    def claim(self, statement: str, holds: bool, **kwargs) -> reporting.Comparison:
        """Record whether a qualitative statement holds (see ``dpfl.reporting.claim``)."""
        row = reporting.claim(statement, bool(holds), **kwargs)
        self.comparisons.append(row)
        return row

    def pending(self, quantity: str, reference, **kwargs) -> reporting.Comparison:
        """Record a paper number this run did not compute (see ``dpfl.reporting.pending``)."""
        row = reporting.pending(quantity, reference, **kwargs)
        self.comparisons.append(row)
        return row

    def finish(self):
        """Write ``comparisons.csv``/``.md`` and return the comparison table for display."""
        table = reporting.comparison_table(self.comparisons)
        with atomic_path(self.out_dir / "comparisons.csv") as tmp:
            table.to_csv(tmp, index=False)
        write_text(self.out_dir / "comparisons.md", reporting.to_markdown(table) + "\n")
        return table


def setup(paper: str, *, profile: str, device: str = "auto", seed: int = 0, data_dir=None,
          out_dir=None, needs_data: bool = False) -> Notebook:
    """Check a notebook's parameters and return its :class:`Notebook`.

    ``data_dir`` defaults to ``$DPFL_DATA``; a directory that is given but missing is an error,
    and so is no directory at all when ``needs_data``. ``out_dir`` defaults to
    ``../figures/<paper>`` (right when the notebook runs from ``notebooks/``).
    """
    checks.one_of("profile", profile, PROFILES)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    device = resolve_device(device)
    data_dir = data_dir or os.environ.get("DPFL_DATA") or None
    if data_dir is not None:
        data_dir = Path(data_dir).expanduser()
        if not data_dir.is_dir():
            raise ValueError(f"data_dir {str(data_dir)!r} is not an existing directory; point "
                             "DPFL_DATA (or the data_dir parameter) at the datasets folder")
    elif needs_data:
        raise ValueError("data_dir is not set: this notebook needs datasets; set DPFL_DATA or "
                         "pass data_dir (see README, 'Data')")
    out = Path(out_dir) if out_dir else Path("..") / "figures" / paper
    out.mkdir(parents=True, exist_ok=True)
    reporting.apply_plot_style()
    return Notebook(paper, profile, int(seed), device, out.resolve(), data_dir)
