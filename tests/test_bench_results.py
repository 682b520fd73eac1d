"""benchmarks/results.py: each of ``make bench``'s scripts rewrites its own part of benchmarks/RESULTS.md
and keeps the others (the head is engine.py's, ``## Peers`` run_peers.py's, ``## Cluster`` cluster.py's;
sections no script writes, such as rows measured on a GPU, are kept by all)."""
from pathlib import Path

import pytest
from tests_support import benchmark_script

ROOT = Path(__file__).resolve().parents[1]
results = benchmark_script("results")


def _headings(path):
    return [line for line in path.read_text().splitlines() if line.startswith("## ")]


def test_each_writer_replaces_its_own_part_and_keeps_the_others(tmp_path):
    path = tmp_path / "RESULTS.md"
    results.write_head("# Engine benchmarks\n\nold table\n", path)
    assert path.read_text() == "# Engine benchmarks\n\nold table\n"
    path.write_text(path.read_text() + "\n## Measured apart\n\non a GPU\n")
    for _ in range(2):                                       # make bench twice: no part repeats
        results.write_head("# Engine benchmarks\n\nnew table\n\n", path)
        results.write_section("## Peers: dpfl vs pfl (today)\n\npeers table\n", "## Peers", path)
        results.write_section("## Cluster: a grid (today)\n\nray table\n", "## Cluster", path)
    assert path.read_text() == ("# Engine benchmarks\n\nnew table\n\n## Measured apart\n\non a GPU\n\n"
                                "## Peers: dpfl vs pfl (today)\n\npeers table\n\n## Cluster: a grid (today)\n\nray table\n")
    results.write_section("## Peers: dpfl vs pfl, flower (later)\n\nnewer\n", "## Peers", path)
    assert _headings(path) == ["## Measured apart", "## Cluster: a grid (today)", "## Peers: dpfl vs pfl, flower (later)"]
    assert "peers table" not in path.read_text()
    with pytest.raises(ValueError, match="owner"):
        results.write_section("## Cluster: x\n", "## Peers", path)


def test_the_committed_results_keep_their_sections_through_a_new_head(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text((ROOT / "benchmarks" / "RESULTS.md").read_text())
    before = _headings(path)
    results.write_head("# Engine benchmarks\n\nfresh\n", path)
    assert before and _headings(path) == before
    assert "on an NVIDIA H200" in path.read_text()           # the GPU's row (f), measured apart


def test_run_peers_runs_a_peer_from_its_unpacked_wheels_where_there_is_no_index(tmp_path, monkeypatch):
    """``run_peers.py --site pfl=DIR`` (the GPU machine: no package index): pfl runs with this interpreter and
    DIR first on ``PYTHONPATH`` (its dp-accounting < 0.6 before the tests' newer one); a bad value is refused
    with the accepted form before any work; the GPU's section has an owner of its own, so ``make bench`` on a
    CPU keeps it (and the GPU run keeps the CPU's)."""
    run_peers = benchmark_script("run_peers")
    monkeypatch.setenv("PYTHONPATH", "/image/site")
    python, env = run_peers._interpreter(("/usr/bin/python3", str(tmp_path)), "/repo/lib")
    assert python == "/usr/bin/python3" and env["PYTHONPATH"].split(":") == [str(tmp_path), "/repo/lib", "/image/site"]
    assert run_peers._sites([f"pfl={tmp_path}"]) == {"pfl": str(tmp_path)}
    for bad, message in [("pfl", "NAME=DIR"), (f"jax={tmp_path}", "NAME=DIR"), ("pfl=/no/such/folder", "not a folder")]:
        with pytest.raises(SystemExit, match=message):
            run_peers.main(["--site", bad])
    path = tmp_path / "RESULTS.md"
    results.write_section("## Peers: dpfl vs pfl (CPU)\n\ncpu\n", "## Peers:", path)
    results.write_section("## Peers on a GPU: dpfl vs pfl (H200)\n\ngpu\n", "## Peers on a GPU", path)
    results.write_section("## Peers: dpfl vs pfl (CPU, later)\n\ncpu2\n", "## Peers:", path)
    assert _headings(path) == ["## Peers on a GPU: dpfl vs pfl (H200)", "## Peers: dpfl vs pfl (CPU, later)"]
