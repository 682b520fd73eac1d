"""``benchmarks/RESULTS.md`` as parts with one writer each, so that ``make bench`` (and any one of its
scripts run alone) rewrites its own part and keeps the others: the head (``engine.py``'s table, up to the
first ``## `` heading) and sections, each owned by the first words of its heading (``## Peers``,
``## Cluster``); a section no script writes (rows measured apart, e.g. on a GPU) is kept by every writer."""
from __future__ import annotations

import re
from pathlib import Path

PATH = Path(__file__).with_name("RESULTS.md")


def _split(text: str) -> tuple[str, list[str]]:
    """(head, sections): each section from its ``## `` line to the next."""
    parts = re.split(r"(?m)^(?=## )", text)
    return parts[0], parts[1:]


def write_head(text: str, path: Path = PATH) -> None:
    """Replace the head of ``path`` by ``text``, keeping every section."""
    _, sections = _split(path.read_text() if path.exists() else "")
    path.write_text(text.rstrip("\n") + "\n" + "".join("\n" + s.strip("\n") + "\n" for s in sections))


def write_section(text: str, owner: str, path: Path = PATH) -> None:
    """Replace every section of ``path`` whose heading starts with ``owner`` (e.g. "## Peers") by
    ``text``, a section with such a heading, appended after the others."""
    if not text.lstrip("\n").startswith(owner):
        raise ValueError(f"the section must start with its owner's heading {owner!r}")
    head, sections = _split(path.read_text() if path.exists() else "")
    kept = [s for s in sections if not s.startswith(owner)]
    path.write_text(head.rstrip("\n") + "\n" + "".join("\n" + s.strip("\n") + "\n" for s in [*kept, text]))
