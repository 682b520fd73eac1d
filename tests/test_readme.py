"""The README's Python examples run, and print what their comments say."""
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
