"""The README's Python examples run, and print what their comments say."""
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
REPORT = README.parent / "figures" / "REPORT.md"
KINDS = ("reproduced", "reduced", "formula", "reconstruction", "property", "beyond")


def test_readme_examples_run_and_print_what_they_claim():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python examples"
    namespace: dict = {}
    for block in blocks:
        expected = [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s*#\s*(.+)", block)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), namespace)
        assert out.getvalue().split() == " ".join(expected).split()


def _rows(text: str, header: str) -> dict:
    """A markdown table's rows after the header line that starts with ``header``: {first cell: {column: cell}}."""
    lines = text[text.index(header):].splitlines()
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells))
    return rows


def test_readme_results_table_counts_what_the_report_counts():
    """The README's results table gives, per paper and kind of evidence, the counts of figures/REPORT.md (which
    `make reproduce` writes); a row edited by hand cannot drift from the results."""
    readme, report = _rows(README.read_text(), "| paper | reproduced"), _rows(REPORT.read_text(), "| paper ")
    assert len(readme) == len(report) == 6, (list(readme), list(report))
    for label, row in readme.items():
        paper = [p for p in report if p.startswith(label.split()[0].lower())]
        assert len(paper) == 1, (label, list(report))
        assert [row[k] for k in KINDS] == [report[paper[0]][k] for k in KINDS], label


def test_the_femnist_units_the_readme_and_gpu_queue_count_are_the_cached_ones():
    """README and GPU_QUEUE.md count FedHDP's FEMNIST grid units (one training of 200 rounds per algorithm and r, at
    the paper profile's η_p) cached so far; a hand-written count must follow the cache it describes."""
    from dpfl import runs
    from dpfl.experiments import aldaghri_fedhdp_fl as fl

    cache = runs.Cache(README.parent / "figures" / "aldaghri_fedhdp" / "cache")
    units = {(c.algorithm, c.r) for c in fl.validation_grid("paper") if c.dataset == "femnist" and cache.path(c).exists()}
    n = len(units)
    text = " ".join(README.read_text().split())
    assert f"{n} of them cached" in text and f"{n} of its 8 shared trainings cached" in text
    queue = " ".join((README.parent / "benchmarks" / "GPU_QUEUE.md").read_text().split())
    assert f"so a GPU's; {n} of the 8 cached on the CPU" in queue


def test_every_relative_link_in_the_readme_and_docs_resolves():
    """A link from README.md or docs/*.md to a file in the repository names one that exists (results tables come and
    go as grids land: FEMNIST's progress table is written only while its grid runs)."""
    root = README.parent
    broken = []
    for page in [README, *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#")[0]
            if path and not target.startswith(("http://", "https://", "mailto:")) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(root)}: {target}")
    assert broken == []
