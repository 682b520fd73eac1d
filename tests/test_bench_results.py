"""benchmarks/engine.py rewrites the head of benchmarks/RESULTS.md and keeps its ``## `` sections (the
peers' and cluster tables that ``make bench`` appends after it, rows measured apart such as a GPU's)."""
from pathlib import Path

from tests_support import benchmark_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_engine_section_is_replaced_and_every_later_section_kept(tmp_path):
    write = benchmark_script("engine").write_results
    path = tmp_path / "RESULTS.md"
    write(path, "# Engine benchmarks\n\nold table\n")
    assert path.read_text() == "# Engine benchmarks\n\nold table\n"
    with open(path, "a") as fh:                              # what run_peers.py and cluster.py append
        fh.write("\n## Peers (2026-11-23)\n\npeers table\n\n## Cluster\n\nray table\n")
    write(path, "# Engine benchmarks\n\nnew table\n\n")
    text = path.read_text()
    assert text == "# Engine benchmarks\n\nnew table\n\n## Peers (2026-11-23)\n\npeers table\n\n## Cluster\n\nray table\n"
    assert "old table" not in text


def test_the_committed_results_keep_their_sections_through_a_rewrite(tmp_path):
    committed = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    path = tmp_path / "RESULTS.md"
    path.write_text(committed)
    benchmark_script("engine").write_results(path, "# Engine benchmarks\n\nfresh\n")
    headings = [line for line in committed.splitlines() if line.startswith("## ")]
    assert headings and [line for line in path.read_text().splitlines() if line.startswith("## ")] == headings
    assert "on an NVIDIA H200" in path.read_text()           # the GPU's row (f), measured apart
