"""dpfl.reporting: verdicts, tables, REPORT.md."""
import json
import math

import pytest

from dpfl import reporting


def test_compare_relative_and_absolute_tolerances():
    assert reporting.compare("a", 1.009, 1.0, rel=0.01, kind="formula").ok
    assert not reporting.compare("a", 1.011, 1.0, rel=0.01, kind="formula").ok
    assert reporting.compare("a", 0.05, 0.0, abs=0.1, kind="formula").ok
    assert reporting.compare("a", 1.05, 1.0, rel=0.01, abs=0.1, kind="formula").ok          # the looser one wins
    assert not reporting.compare("a", math.nan, 1.0, rel=0.5, kind="formula").ok
    row = reporting.compare("δ(ε=1)", 2.021e-3, 2.02e-3, rel=0.01, kind="reconstruction", source="docs/kim2021.md")
    assert row.tolerance == "±0.01 rel" and row.verdict == reporting.MATCH and row.source == "docs/kim2021.md"


def test_every_row_says_its_kind_of_evidence():
    with pytest.raises(ValueError, match="kind"):
        reporting.compare("a", 1.0, 1.0, rel=0.1, kind="experiment")
    with pytest.raises(TypeError):
        reporting.claim("a", True)                                           # no default kind
    row = reporting.pending("Table 1 R", 64, needs="the paper profile on a GPU")
    assert (row.kind, row.verdict, row.ok) == ("reproduced", reporting.PENDING, False)


def test_compare_needs_a_valid_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        reporting.compare("a", 1.0, 1.0, kind="formula")
    with pytest.raises(ValueError, match="^rel"):
        reporting.compare("a", 1.0, 1.0, rel=-0.1, kind="formula")


def test_claims_and_table():
    rows = [reporting.claim("δ decreases in q", True, kind="property"), reporting.claim("x", False, kind="beyond")]
    table = reporting.comparison_table(rows)
    assert list(table.verdict) == [reporting.MATCH, reporting.DIFFERS]
    md = reporting.to_markdown(table)
    assert "✓ match" in md and "✗ differs" in md


def test_write_report_collects_every_paper(tmp_path):
    paper = tmp_path / "asoodeh2020"
    paper.mkdir()
    table = reporting.comparison_table([reporting.compare("δ", 0.1671, 0.167, rel=0.01, kind="formula"),
                                        reporting.compare("R", 120, 100, rel=0.1, kind="reduced"),
                                        reporting.pending("R at 90 %", 64, needs="a GPU")])
    table.to_csv(paper / "comparisons.csv", index=False)
    (paper / "RUN.json").write_text(json.dumps({"profile": "smoke", "wall_time_s": 3.2,
                                                "git_commit": "abc", "device": "cpu"}))
    (tmp_path / "empty").mkdir()
    zheng = tmp_path / "zheng2021"
    zheng.mkdir()
    table.to_csv(zheng / "comparisons.csv", index=False)
    (zheng / "RUN.json").write_text(json.dumps({"profile": "quick", "note": "paper requested; no GPU"}))
    text = reporting.write_report(tmp_path).read_text()
    assert "| asoodeh2020 | smoke" in text and "| 1/1 " in text and "| 0/1 " in text
    assert "| 1 pending " in text and "**All papers:** reproduced 2 pending, reduced 0/2, formula 2/2" in text
    assert "… pending" in text and "pending: needs a GPU" in text
    assert "0.1671" in text and "✗ differs" in text and "empty" not in text
    assert "quick (paper requested; no GPU)" in text and "Profile `quick` (paper requested; no GPU)" in text


def test_git_commit_sees_changes_anywhere_but_figures(tmp_path, monkeypatch):
    """A change to a notebook (outside lib/) marks the commit dirty; a regenerated figure does not."""
    import shutil
    import subprocess

    from dpfl import provenance

    repo = tmp_path / "repo"
    (repo / "lib" / "dpfl").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    (repo / "figures").mkdir()
    shutil.copy(provenance.__file__, repo / "lib" / "dpfl" / "provenance.py")
    for name in ("notebooks/a.ipynb", "figures/a.png"):
        (repo / name).write_text("0")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    monkeypatch.setattr(provenance, "__file__", str(repo / "lib" / "dpfl" / "provenance.py"))
    commit = provenance.git_commit.__wrapped__                 # uncached
    assert not commit().endswith("+dirty")
    (repo / "figures" / "a.png").write_text("1")
    assert not commit().endswith("+dirty")
    (repo / "notebooks" / "a.ipynb").write_text("1")
    assert commit().endswith("+dirty")


def test_executed_notebooks_name_no_path_of_the_machine_that_ran_them():
    """``reproduce.portable`` replaces the run's absolute paths (longest first, whole path components
    only), and nothing committed under figures/ names the staging directory or an absolute path in its
    injected parameters."""
    import json
    from pathlib import Path

    from dpfl.reproduce import portable

    paths = {"/m/repo/figures/.staging/x": "figures/x", "/m/repo": ".", "/m/data": "$DPFL_DATA", "/m": "~"}
    text = ('{"out_dir": "/m/repo/figures/.staging/x", "w": "/m/repo/lib/a.py:3: W", "d": "/m/data/mnist",'
            ' "keep": "/m/repository", "q": "\\"/m/repo\\""}')
    assert json.loads(portable(text, paths)) == {"out_dir": "figures/x", "w": "./lib/a.py:3: W",
                                                 "d": "$DPFL_DATA/mnist", "keep": "~/repository", "q": '"."'}
    for nb in Path(__file__).resolve().parents[1].glob("figures/*/*.ipynb"):
        text = nb.read_text(encoding="utf-8")
        assert ".staging" not in text, nb
        injected = [c for c in json.loads(text)["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
        for cell in injected:
            for line in cell["source"]:
                value = line.split("=", 1)[-1].strip()
                assert not value.startswith(('"/', "'/")), (nb, line)


def test_the_kernels_find_dpfl_and_the_data_through_relative_paths(tmp_path, monkeypatch):
    """``PYTHONPATH=lib`` and ``DPFL_DATA=.devdata`` (dpfl without an install, as on the GPU machine) are
    made absolute before the kernels start in ``notebooks/``: each relative entry resolves from the
    current directory, absolute and empty entries stay, and nothing is added where a variable is unset."""
    import os

    from dpfl.reproduce import absolute_paths

    monkeypatch.chdir(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join(["lib", "", "/opt/site", "../up"]), "DPFL_DATA": ".devdata",
           "DPFL_CACHE": "/abs/cache", "OTHER": "rel"}
    absolute_paths(env)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "lib"), "", "/opt/site", str(tmp_path.parent / "up")]
    assert env["DPFL_DATA"] == str(tmp_path / ".devdata")
    assert env["DPFL_CACHE"] == "/abs/cache" and env["OTHER"] == "rel"
    empty = {"DPFL_DATA": ""}
    absolute_paths(empty)
    assert empty == {"DPFL_DATA": ""}
