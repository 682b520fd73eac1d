"""A real browser reads the book: headless Chromium (Debian's ``chromium``) driven by Playwright loads
pages of the built site from a localhost server, checks that every image loaded (naturalWidth > 0)
and that the tables are there, and saves a screenshot of each page.

    python -m dpfl.book_browser build/book/_build/html --pages index.html zheng2021/index.html \\
        --screenshots figures/book-screenshots
"""
from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path

__all__ = ["CHROMIUM", "find_chromium", "render", "main"]

CHROMIUM = "/usr/bin/chromium"
#: as root on a machine with a closed network (docs/teaching.md, "The book")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def find_chromium() -> str | None:
    """The Chromium executable: Debian's, or one on PATH; None when there is none."""
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium") or shutil.which("chromium-browser")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def render(html_dir, pages, screenshots=None, *, width: int = 1100, height: int = 800) -> list[dict]:
    """Load each of ``pages`` (paths relative to ``html_dir``) in headless Chromium; per page: the
    title, the number of images and tables, the images that did not load, and the screenshot's path
    (a ``width``×``height`` PNG in ``screenshots`` when given)."""
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError("no Chromium: install Debian's package (apt-get install chromium); `make book` does")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    results = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": width, "height": height})
            for name in pages:
                page.goto(base + name, wait_until="load")
                images = page.evaluate("""() => Array.from(document.images).map(i => {
                    i.scrollIntoView(); return {src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}; })""")
                if not all(i["ok"] for i in images):      # lazy images: give them a moment once scrolled to
                    page.wait_for_timeout(1000)
                    images = page.evaluate("() => Array.from(document.images).map(i => "
                                           "({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))")
                page.evaluate("() => window.scrollTo(0, 0)")
                shot = None
                if screenshots is not None:
                    Path(screenshots).mkdir(parents=True, exist_ok=True)
                    shot = Path(screenshots) / (name.replace("/", "_").removesuffix(".html") + ".png")
                    page.screenshot(path=str(shot))
                results.append({"page": name, "title": page.title(), "images": len(images),
                                "not_loaded": [i["src"] for i in images if not i["ok"]],
                                "tables": page.locator("table").count(), "screenshot": shot})
            browser.close()
    finally:
        server.shutdown()
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpfl.book_browser", description=__doc__.split("\n\n")[0])
    ap.add_argument("html_dir")
    ap.add_argument("--pages", nargs="+", default=["index.html", "zheng2021/index.html"])
    ap.add_argument("--screenshots", default=None)
    args = ap.parse_args(argv)
    bad = 0
    for r in render(args.html_dir, args.pages, args.screenshots):
        ok = not r["not_loaded"] and r["tables"] > 0
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {r['page']}: {r['images']} images ({len(r['not_loaded'])} not loaded), "
              f"{r['tables']} tables, title {r['title']!r}" + (f" → {r['screenshot']}" if r["screenshot"] else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
