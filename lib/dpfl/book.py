"""The book: a static site of the executed notebooks in ``figures/``, built without executing them.

    python -m dpfl.book                      # (make book) → build/book/_build/html/index.html
    python -m dpfl.book --check              # … and check every internal link and image

The landing page is ``figures/REPORT.md`` (paper vs ours, every row); each paper has a page with
every figure and table of its ``figures/<paper>/`` directory and a link to its executed notebook,
which follows it in the navigation: every table and figure is two clicks from the landing page.
Jupyter Book 1 (Sphinx, MyST-NB) builds it offline from PyPI packages alone; Jupyter Book 2
(mystmd) fetches its site theme from api.mystmd.org at build time, which no machine here reaches
(docs/teaching.md, "The book").
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dpfl.io import write_text
from dpfl.reproduce import NOTEBOOKS

__all__ = ["stage", "build", "broken_links", "main"]

#: a table longer than this shows its first rows and links to its CSV
MAX_ROWS = 120
#: the theme's templates and the sources' copies: not pages of the book
_NOT_PAGES = ("_static", "_sources")


_GREEK = {r"\varepsilon": "ε", r"\epsilon": "ε", r"\delta": "δ", r"\mu": "μ", r"\sigma": "σ"}


def _title(notebook: Path) -> str:
    """The notebook's first heading, its inline maths as plain text (navigation links show no maths)."""
    first = json.loads(notebook.read_text())["cells"][0]
    title = "".join(first["source"]).splitlines()[0].lstrip("# ").strip()
    plain = lambda m: functools.reduce(lambda t, kv: t.replace(*kv), _GREEK.items(), m.group(1))
    return re.sub(r"\$([^$]+)\$", plain, title)


def _caption(path: Path) -> str:
    return path.stem.replace("_", " ")


def _table(md: Path, paper_dir: Path) -> str:
    lines = md.read_text().rstrip("\n").splitlines()
    if not lines:
        return "*No rows yet* (the runs it reads have not been computed: see REPORT.md's pending rows)."
    csv = md.with_suffix(".csv")
    if len(lines) - 2 <= MAX_ROWS:
        return "\n".join(lines)
    link = f"{{download}}`all {len(lines) - 2} rows as CSV <{csv.name}>`" if csv.exists() else f"{len(lines) - 2} rows"
    return "\n".join(lines[:MAX_ROWS + 2]) + f"\n\nThe first {MAX_ROWS} rows; {link}."


def _paper_page(paper: str, paper_dir: Path, notebook: Path) -> str:
    figures = sorted(paper_dir.glob("*.png"))
    tables = sorted(p for p in paper_dir.glob("*.md") if p.stem != "comparisons")
    run = json.loads((paper_dir / "RUN.json").read_text()) if (paper_dir / "RUN.json").exists() else {}
    out = [f"# {_title(notebook)}: figures and tables", "",
           f"Profile `{run.get('profile', '?')}`, commit `{str(run.get('git_commit', '?'))[:12]}`, "
           f"{run.get('device', '?')}. The executed notebook: [{notebook.stem}]({notebook.stem}.ipynb) "
           f"(the next page). Paper versus ours: [comparisons](#comparisons).", ""]
    if figures:
        out += ["## Figures", ""]
        for fig in figures:
            out += [f"### {_caption(fig)}", "", f"![{_caption(fig)}]({fig.name})", ""]
    if tables:
        out += ["## Tables", ""]
        for md in tables:
            out += [f"### {_caption(md)}", "", _table(md, paper_dir), ""]
    if (paper_dir / "comparisons.md").exists():
        out += ["(comparisons)=", "## Paper versus ours", "", _table(paper_dir / "comparisons.md", paper_dir), ""]
    return "\n".join(out)


def stage(figures_dir, source_dir, docs_dir="docs") -> list[str]:
    """Write the book's sources into ``source_dir`` (emptied first) from ``figures_dir``: the landing
    page, one page and one executed notebook per paper, their figures, tables and CSVs, and the
    derivations in ``docs_dir`` (which the notebooks link to as ``../docs/…``). Returns the papers
    staged (those with an executed notebook)."""
    figures_dir, source_dir, docs_dir = Path(figures_dir), Path(source_dir), Path(docs_dir)
    if source_dir.exists():
        shutil.rmtree(source_dir)
    source_dir.mkdir(parents=True)
    papers, chapters = [], []
    for paper, name in NOTEBOOKS.items():
        notebook = figures_dir / paper / name
        if not notebook.exists():
            continue
        target = source_dir / paper
        target.mkdir()
        for f in (figures_dir / paper).iterdir():
            if f.is_file() and f.suffix in (".png", ".csv", ".ipynb"):
                shutil.copy2(f, target / f.name)
        write_text(target / "index.md", _paper_page(paper, figures_dir / paper, notebook))
        papers.append(paper)
        chapters.append(f"  - file: {paper}/index\n    sections:\n      - file: {paper}/{notebook.stem}")
    if not papers:
        raise FileNotFoundError(f"no executed notebook under {figures_dir}: run `make reproduce` first")
    (source_dir / "docs").mkdir()
    for page in sorted(docs_dir.glob("*.md")):
        shutil.copy2(page, source_dir / "docs" / page.name)
        chapters.append(f"  - file: docs/{page.stem}")
    report = (figures_dir / "REPORT.md").read_text() if (figures_dir / "REPORT.md").exists() else "# dpfl\n"
    title, _, rest = report.partition("\n")
    nav = "\n".join(f"- [{_title(figures_dir / p / NOTEBOOKS[p])}]({p}/index.md)" for p in papers)
    write_text(source_dir / "index.md", f"{title}\n\n**The papers** (each page: every figure and table, then its "
               f"executed notebook):\n\n{nav}\n{rest}")
    write_text(source_dir / "_toc.yml", "format: jb-book\nroot: index\nchapters:\n" + "\n".join(chapters) + "\n")
    write_text(source_dir / "_config.yml", "\n".join([
        "title: dpfl — five papers on differentially private federated learning",
        "author: dpfl", "only_build_toc_files: true",
        "execute:", "  execute_notebooks: 'off'",
        "parse:", "  myst_enable_extensions: [dollarmath, amsmath]",
        "html:", "  use_repository_button: false", "  use_issues_button: false",
        "sphinx:", "  config:", "    html_show_copyright: false",
        "    suppress_warnings: ['myst.header', 'mystnb.unknown_mime_type']", ""]))
    return papers


def build(figures_dir="figures", out_dir="build/book", docs_dir="docs") -> Path:
    """Stage and build the book; returns the HTML directory. Raises with Sphinx's log on failure."""
    source = Path(out_dir).resolve()
    stage(figures_dir, source, docs_dir)
    cli = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run([str(cli), "build", str(source), "--builder", "html", "--keep-going"],
                          capture_output=True, text=True)
    html = source / "_build" / "html"
    if done.returncode != 0 or not (html / "index.html").exists():
        raise RuntimeError(f"jupyter-book build failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return html


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and key == "href" and a.get("rel") == "preconnect"):
                self.links.append(a[key])


def broken_links(html_dir) -> list[str]:
    """Every relative ``href``/``src`` in the site's pages whose file (or ``#fragment`` in it) does
    not exist, as ``page: link``; external links are not followed (the book is read offline)."""
    html_dir = Path(html_dir)
    pages = {p: _parse(p) for p in html_dir.rglob("*.html") if p.relative_to(html_dir).parts[0] not in _NOT_PAGES}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("data:"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)}: {link}")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(html_dir)}: {link} (no such anchor)")
    return broken


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(errors="replace"))
    return parser


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpfl.book", description=__doc__.split("\n\n")[0])
    ap.add_argument("--figures", default="figures", help="the executed notebooks, figures and REPORT.md")
    ap.add_argument("--docs", default="docs", help="the derivations the notebooks cite")
    ap.add_argument("--out", default="build/book", help="where the sources and _build/html go")
    ap.add_argument("--check", action="store_true", help="fail on a broken internal link or image")
    args = ap.parse_args(argv)
    html = build(args.figures, args.out, args.docs)
    print(f"book: {html / 'index.html'}")
    if args.check:
        broken = broken_links(html)
        for b in broken:
            print("broken:", b)
        if broken:
            return 1
        print(f"links: every internal link and image of the book's pages resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
