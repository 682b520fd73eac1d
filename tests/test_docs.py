"""Citations resolve: the library, the notebooks and the tests cite only pages of this repository (docs/), and
every section they name exists there (a reader of a clean checkout can follow each one)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (sorted((ROOT / "lib").rglob("*.py")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
           + sorted(p for p in (ROOT / "tests").glob("*.py") if p.name != "test_docs.py"))


def test_the_library_notebooks_and_tests_cite_no_file_outside_the_repository():
    outside = [f"{p.relative_to(ROOT)}:{i}" for p in SOURCES for i, line in enumerate(p.read_text().splitlines(), 1)
               if "details.md" in line or "shared/papers" in line]
    assert not outside, outside


def test_every_cited_docs_page_and_section_exists():
    cited = {(m.group(1), m.group(2)) for p in SOURCES
             for m in re.finditer(r"docs/([\w-]+\.md)`*(?:\s*§(\d+))?", p.read_text())}
    assert cited
    for page, section in cited:
        text = (ROOT / "docs" / page).read_text()
        if section:
            assert re.search(rf"^## §{section}\b", text, flags=re.M), f"docs/{page} has no §{section}"
