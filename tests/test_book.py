"""dpfl.book: the static site of the executed notebooks builds offline from figures/, holds every
paper's page with its figures and tables, has no broken internal link, and a real browser renders it."""
import re
from pathlib import Path

import pytest

from dpfl import book
from dpfl.book_browser import find_chromium, render
from dpfl.reproduce import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
PAPERS = [p for p, nb in NOTEBOOKS.items() if (FIGURES / p / nb).exists()]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return book.build(FIGURES, tmp_path_factory.mktemp("book"), ROOT / "docs")


def test_every_paper_is_committed_executed():
    assert PAPERS == list(NOTEBOOKS)


def test_the_book_holds_every_paper_page_figure_and_table(site):
    landing = (site / "index.html").read_text()
    assert "reproduced numbers next to the papers" in landing
    for paper in PAPERS:
        page = (site / paper / "index.html").read_text()
        assert f'href="{paper}/index.html"' in landing                       # one click from the landing page
        assert f'href="{Path(NOTEBOOKS[paper]).stem}.html"' in page             # its notebook, one more
        assert (site / paper / f"{Path(NOTEBOOKS[paper]).stem}.html").exists()
        for png in (FIGURES / paper).glob("*.png"):
            assert re.search(rf'<img [^>]*src="\.\./_images/{re.escape(png.name)}"', page), (paper, png.name)
        tables = [md for md in (FIGURES / paper).glob("*.md") if md.read_text().strip()]
        assert page.count("<table") >= len(tables) > 0, paper
    for doc in (ROOT / "docs").glob("*.md"):
        assert (site / "docs" / f"{doc.stem}.html").exists()


def test_the_book_has_no_broken_internal_link(site):
    assert book.broken_links(site) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "index.html").write_text('<a href="a/b.html#x">b</a><img src="missing.png"><a href="https://x.org/y">e</a>'
                                         '<a href="#top">t</a><div id="top"></div>')
    (tmp_path / "a" / "b.html").write_text('<p id="y"></p><a href="../index.html">up</a>')
    assert book.broken_links(tmp_path) == ["index.html: a/b.html#x (no such anchor)", "index.html: missing.png"]


def test_the_paper_page_shows_long_tables_in_part_and_links_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(book, "MAX_ROWS", 3)
    md = tmp_path / "t.md"
    md.write_text("| a |\n|--:|\n" + "".join(f"| {i} |\n" for i in range(10)))
    (tmp_path / "t.csv").write_text("a\n" + "".join(f"{i}\n" for i in range(10)))
    text = book._table(md, tmp_path)
    assert text.count("\n| ") == 3 and "all 10 rows as CSV <t.csv>" in text


def test_staging_without_executed_notebooks_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="make reproduce"):
        book.stage(tmp_path / "figures", tmp_path / "src", ROOT / "docs")


@pytest.mark.skipif(find_chromium() is None, reason="no Chromium: `make test` installs Debian's as root")
def test_a_real_browser_renders_the_landing_page_and_a_paper_page(site, tmp_path):
    pages = render(site, ["index.html", "zheng2021/index.html"], tmp_path)
    landing, paper = pages
    assert landing["tables"] >= 7 and not landing["not_loaded"]
    expected = len(list((FIGURES / "zheng2021").glob("*.png")))
    assert paper["images"] == expected > 0 and paper["not_loaded"] == [] and paper["tables"] > 0
    assert all(p["screenshot"].stat().st_size > 10_000 for p in pages)
