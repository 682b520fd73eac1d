"""Paper-versus-ours tables, verdicts, the shared plot style, and ``figures/REPORT.md``.

Every reproduced number is recorded as a :class:`Comparison`: the quantity, the reference value
(from the paper, or from a verified recomputation of the paper's formula when the paper's own
number is lost: ``source`` says which), our value, the tolerance, the verdict, and the **kind of
evidence** it is (:data:`KINDS`):

* ``reproduced`` — our experiment at the paper's setting and on the paper's data, vs the paper's number;
* ``reduced`` — our experiment at a smaller scale or on a stand-in dataset (e.g. the CIFAR-10 JPEG copy);
* ``formula`` — the paper's formula evaluated at the paper's inputs;
* ``reconstruction`` — against our reconstruction of a lost formula or number;
* ``property`` — a qualitative or mathematical claim checked on our results;
* ``beyond`` — ours alone, no counterpart in the paper.

A formula check is never counted as a reproduced experiment. Qualitative statements ("δ decreases
in q") are recorded with :func:`claim`; a paper-scale cell not yet run with :func:`pending`.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Iterable

import pandas as pd
from cycler import cycler

from dpfl.io import write_text

__all__ = ["Comparison", "KINDS", "PENDING", "compare", "claim", "pending", "comparison_table", "apply_plot_style",
           "PLOT_STYLE", "to_markdown", "write_report", "MATCH", "DIFFERS"]

MATCH = "match"
DIFFERS = "differs"
PENDING = "pending"
KINDS = ("reproduced", "reduced", "formula", "reconstruction", "property", "beyond")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One reproduced quantity next to its reference value."""

    quantity: str
    ours: float | str
    reference: float | str
    tolerance: str
    verdict: str
    kind: str
    source: str = "paper"
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")

    @property
    def ok(self) -> bool:
        return self.verdict == MATCH


def compare(quantity: str, ours: float, reference: float, *, kind: str, rel: float | None = None,
            abs: float | None = None, source: str = "paper", note: str = "") -> Comparison:
    """Compare ``ours`` with ``reference`` within a relative and/or absolute tolerance; ``kind``: the
    kind of evidence (:data:`KINDS`).

    Matches when ``|ours − reference| ≤ max(rel·|reference|, abs)``.
    """
    if rel is None and abs is None:
        raise ValueError("compare needs a tolerance: rel and/or abs")
    for name, tol in (("rel", rel), ("abs", abs)):
        if tol is not None and not (tol >= 0):
            raise ValueError(f"{name} must be a non-negative number; got {tol!r}")
    ours, reference = float(ours), float(reference)
    bound = max((rel or 0.0) * math.fabs(reference), abs or 0.0)
    ok = math.isfinite(ours) and math.fabs(ours - reference) <= bound
    parts = ([f"±{rel:.3g} rel"] if rel is not None else []) + ([f"±{abs:.3g}"] if abs is not None else [])
    return Comparison(quantity, ours, reference, " or ".join(parts), MATCH if ok else DIFFERS,
                      kind, source, note)


def claim(statement: str, holds: bool, *, kind: str, source: str = "paper", note: str = "") -> Comparison:
    """Record whether a qualitative statement (of the paper, or ours) holds in our results."""
    return Comparison(statement, "holds" if holds else "fails", "holds", "—",
                      MATCH if holds else DIFFERS, kind, source, note)


def pending(quantity: str, reference: float | str, *, needs: str, kind: str = "reproduced",
            source: str = "paper") -> Comparison:
    """A number the paper reports that this run did not compute, and what computing it needs."""
    return Comparison(quantity, "—", reference, "—", PENDING, kind, source, f"pending: needs {needs}")


def comparison_table(comparisons: Iterable[Comparison]) -> pd.DataFrame:
    """The comparisons as a tidy DataFrame (one row per quantity)."""
    rows = [dataclasses.asdict(c) for c in comparisons]
    columns = [f.name for f in dataclasses.fields(Comparison)]
    return pd.DataFrame(rows, columns=columns)


def _fmt(value) -> str:
    if isinstance(value, str):
        return value
    if value == 0 or 1e-3 <= math.fabs(value) < 1e4:
        return f"{value:.4g}"
    return f"{value:.3e}"


def to_markdown(table: pd.DataFrame) -> str:
    """A comparison table as Markdown, numbers formatted for reading."""
    shown = table.copy()
    for col in ("ours", "reference"):
        shown[col] = [_fmt(v) for v in shown[col]]
    shown["verdict"] = [{MATCH: "✓ ", DIFFERS: "✗ "}.get(v, "… ") + v for v in shown["verdict"]]
    return shown.to_markdown(index=False)


PLOT_STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 110,
    "savefig.dpi": 160,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": cycler(
        color=["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]),
    "legend.frameon": False,
    "font.size": 10,
}


def apply_plot_style() -> None:
    """Apply the one plot style every notebook uses (colour-blind-safe palette, light grid)."""
    import matplotlib.pyplot as plt

    plt.rcParams.update(PLOT_STYLE)


def write_report(figures_dir) -> Path:
    """Collect every ``figures/<paper>/comparisons.csv`` (and ``RUN.json``) into ``REPORT.md``."""
    figures_dir = Path(figures_dir)
    sections, summary, tables = [], [], []
    for paper_dir in sorted(p for p in figures_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        csv = paper_dir / "comparisons.csv"
        if not csv.exists():
            continue
        table = pd.read_csv(csv, keep_default_na=False)
        for col in ("ours", "reference"):
            table[col] = [_maybe_float(v) for v in table[col]]
        run = _read_json(paper_dir / "RUN.json")
        tables.append(table.assign(paper=paper_dir.name))
        summary.append({
            "paper": paper_dir.name,
            "profile": run.get("profile", "?") + (f" ({run['note']})" if run.get("note") else ""),
            **_tally(table),
            "wall time (s)": run.get("wall_time_s", "?"),
            "commit": str(run.get("git_commit", "?"))[:12],
            "device": run.get("device", "?"),
        })
        sections.append(f"## {paper_dir.name}\n\n"
                        f"Profile `{run.get('profile', '?')}`"
                        + (f" ({run['note']})" if run.get("note") else "")
                        + f", seed {run.get('seed', '?')}, "
                        f"run {run.get('created', '?')} on {run.get('device', '?')}.\n\n"
                        + to_markdown(table) + "\n")
    text = ("# dpfl — reproduced numbers next to the papers'\n\n"
            "Written by `python -m dpfl.reproduce` (`make reproduce`). Each row: a number we "
            "computed, the reference value (`source` says whether it is the paper's own number, "
            "or a recomputation of the paper's formula where the printed number was lost), the "
            "tolerance, the verdict and the kind of evidence: **reproduced** (our experiment at the paper's "
            "setting and data), **reduced** (smaller scale or a stand-in dataset), **formula** (the paper's "
            "formula at its inputs), **reconstruction** (vs our reconstruction of a lost number), "
            "**property** (a qualitative or mathematical claim), **beyond** (ours alone). Each cell counts "
            "matches/rows of that kind; *pending* rows are paper-scale cells not yet run.\n\n"
            + (pd.DataFrame(summary).to_markdown(index=False) + "\n\n**All papers:** "
               + ", ".join(f"{k} {v}" for k, v in _tally(pd.concat(tables)).items() if v != "—")
               if summary else "No results yet.")
            + "\n\n" + "\n".join(sections))
    return write_text(figures_dir / "REPORT.md", text)


def _tally(table: pd.DataFrame) -> dict:
    """Per kind: "matches/rows" (+ "k pending"), "—" where a kind has no rows."""
    kinds = table["kind"] if "kind" in table else pd.Series(["?"] * len(table))
    out = {}
    for kind in KINDS:
        rows = table[kinds == kind]
        done = rows[rows["verdict"] != PENDING]
        cell = f"{int((done['verdict'] == MATCH).sum())}/{len(done)}" if len(done) else ""
        if len(rows) > len(done):
            cell += (" + " if cell else "") + f"{len(rows) - len(done)} pending"
        out[kind] = cell or "—"
    return out


def _maybe_float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
