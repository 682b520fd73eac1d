"""dpfl.reporting: verdicts, tables, REPORT.md."""
import json
import math

import pytest

from dpfl import reporting


def test_compare_relative_and_absolute_tolerances():
    assert reporting.compare("a", 1.009, 1.0, rel=0.01).ok
    assert not reporting.compare("a", 1.011, 1.0, rel=0.01).ok
    assert reporting.compare("a", 0.05, 0.0, abs=0.1).ok
    assert reporting.compare("a", 1.05, 1.0, rel=0.01, abs=0.1).ok          # the looser one wins
    assert not reporting.compare("a", math.nan, 1.0, rel=0.5).ok
    row = reporting.compare("δ(ε=1)", 2.021e-3, 2.02e-3, rel=0.01, source="details.md")
    assert row.tolerance == "±0.01 rel" and row.verdict == reporting.MATCH and row.source == "details.md"


def test_compare_needs_a_valid_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        reporting.compare("a", 1.0, 1.0)
    with pytest.raises(ValueError, match="^rel"):
        reporting.compare("a", 1.0, 1.0, rel=-0.1)


def test_claims_and_table():
    rows = [reporting.claim("δ decreases in q", True), reporting.claim("x", False)]
    table = reporting.comparison_table(rows)
    assert list(table.verdict) == [reporting.MATCH, reporting.DIFFERS]
    md = reporting.to_markdown(table)
    assert "✓ match" in md and "✗ differs" in md


def test_write_report_collects_every_paper(tmp_path):
    paper = tmp_path / "asoodeh2020"
    paper.mkdir()
    table = reporting.comparison_table([reporting.compare("δ", 0.1671, 0.167, rel=0.01),
                                        reporting.compare("R", 120, 100, rel=0.1)])
    table.to_csv(paper / "comparisons.csv", index=False)
    (paper / "RUN.json").write_text(json.dumps({"profile": "smoke", "wall_time_s": 3.2,
                                                "git_commit": "abc", "device": "cpu"}))
    (tmp_path / "empty").mkdir()
    text = reporting.write_report(tmp_path).read_text()
    assert "| asoodeh2020 | smoke     | 1/2" in text
    assert "0.1671" in text and "✗ differs" in text and "empty" not in text
