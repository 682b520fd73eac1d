"""What every paper notebook does first: validate its parameters and set up its outputs.

A notebook's parameters cell (tagged ``parameters`` for papermill) holds ``profile``, ``device``,
``seed``, ``data_dir``, ``out_dir`` and ``cache_dir``; the next cell calls :func:`setup`, which
checks them and returns a :class:`Notebook` that writes figures, tables and the paper-vs-ours
comparisons into ``out_dir`` (``figures/<paper-id>/``) and cached runs into ``cache_dir``
(default ``out_dir/cache``; ``dpfl.reproduce`` writes a run into a staging directory and keeps
the cache in ``figures/<paper-id>/cache``, so that a failed run changes no figure).

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


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when torch sees a GPU, else ``"cpu"``; other names are checked."""
    checks.device("device", device, auto=True)
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
    data_dir: Path
    cache_dir: Path
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
        return runs.Cache(self.cache_dir)

    def run(self, config) -> runs.Result:
        """``dpfl.runs.run`` into this notebook's cache."""
        return runs.run(config, self.cache)

    def run_many(self, configs, **kwargs) -> list[runs.Result]:
        """``dpfl.runs.run_many`` into this notebook's cache."""
        return runs.run_many(configs, self.cache, **kwargs)

    # -- outputs ------------------------------------------------------------------------------
    def savefig(self, fig, name: str, *, caveat: str | None = None) -> Path:
        """Write ``fig`` as ``<name>.png`` and ``<name>.pdf`` into ``out_dir``, atomically.

        ``caveat``: what the figure rests on instead of the paper's own setting — ``"reconstruction"``
        (a lost formula or parameter re-derived) or a stand-in dataset's label (``Dataset.source``,
        e.g. "CIFAR-10 (JPEG copy)"). It is added to the file name (``<name>_<caveat>``) and, unless a
        title already says it, to the figure's title, so the figure cannot pass for the paper's."""
        name = _with_caveat(name, caveat)
        if caveat and not any(caveat in t for t in _titles(fig)):
            current = fig.get_suptitle()
            fig.suptitle(f"{current} [{caveat}]" if current else f"[{caveat}]")
        for ext, metadata in (("png", None), ("pdf", {"CreationDate": None})):   # no date: a re-render is byte-identical
            with atomic_path(self.out_dir / f"{name}.{ext}") as tmp:
                fig.savefig(tmp, format=ext, metadata=metadata)
        return self.out_dir / f"{name}.png"

    def save_table(self, table, name: str, *, caveat: str | None = None, floatfmt: str = ".4g") -> Path:
        """Write a DataFrame as ``<name>.csv`` and ``<name>.md`` into ``out_dir``, atomically;
        ``caveat`` as in :meth:`savefig` (file name, and a caption line in the ``.md``). A missing value
        (NaN, None: e.g. a twin not yet computed) reads "—" in the ``.md`` and stays empty in the ``.csv``."""
        name = _with_caveat(name, caveat)
        with atomic_path(self.out_dir / f"{name}.csv") as tmp:
            table.to_csv(tmp, index=False)
        caption = f"*{name} — {caveat}*\n\n" if caveat else ""
        shown = table.astype(object).where(table.notna(), None)      # tabulate's missingval sees None, not NaN
        write_text(self.out_dir / f"{name}.md",
                   caption + shown.to_markdown(index=False, floatfmt=floatfmt, missingval="—") + "\n")
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


def _with_caveat(name: str, caveat: str | None) -> str:
    if caveat is None:
        return name
    if not isinstance(caveat, str) or not caveat.strip():
        raise ValueError(f"caveat must be a non-empty string or None; got {caveat!r}")
    return f"{name}_{re.sub(r'[^a-z0-9]+', '-', caveat.lower()).strip('-')}"


def _titles(fig) -> list[str]:
    return [fig.get_suptitle()] + [ax.get_title(loc) for ax in fig.axes for loc in ("center", "left", "right")]


def setup(paper: str, *, profile: str, device: str = "auto", seed: int = 0, data_dir=None,
          out_dir=None, cache_dir=None) -> Notebook:
    """Check a notebook's parameters and return its :class:`Notebook`.

    ``data_dir`` defaults to ``$DPFL_DATA``, else ``~/.cache/dpfl/data`` (``dpfl.data.data_root``:
    the loaders download there where a network exists and otherwise name the missing files); a
    directory that is given but missing is an error. ``out_dir`` defaults to ``../figures/<paper>``
    (right when the notebook runs from ``notebooks/``), ``cache_dir`` to ``out_dir/cache``.
    """
    from dpfl.data.datasets import data_root

    checks.one_of("profile", profile, PROFILES)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    device = resolve_device(device)
    given = data_dir or os.environ.get("DPFL_DATA") or None
    if given is not None and not Path(given).expanduser().is_dir():
        raise ValueError(f"data_dir {str(given)!r} is not an existing directory; point "
                         "DPFL_DATA (or the data_dir parameter) at the datasets folder")
    out = Path(out_dir) if out_dir else Path("..") / "figures" / paper
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(cache_dir) if cache_dir else out / "cache"
    reporting.apply_plot_style()
    return Notebook(paper, profile, int(seed), device, out.resolve(), data_root(given), cache.resolve())
