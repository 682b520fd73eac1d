"""Every paper notebook: committed clean, parameterised, and run at profile="smoke"."""
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from dpfl import reproduce
from tests_support import shared_root

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PARAMETERS = {"profile", "device", "seed", "data_dir", "out_dir"}
NEEDS_DATA = {"zheng2021", "geyer2017"}


def test_every_notebook_is_registered():
    assert NOTEBOOKS, "no notebooks found"
    assert {p.name for p in NOTEBOOKS} <= set(reproduce.NOTEBOOKS.values())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_committed_without_outputs_and_with_parameters(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them (executed copies go to figures/)"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell must be tagged 'parameters'"
    assigned = {line.split("=")[0].strip() for line in tagged[0].source.splitlines()
                if "=" in line and not line.lstrip().startswith("#")}
    assert PARAMETERS <= assigned


@pytest.mark.notebook
@pytest.mark.parametrize("paper", [p for p, f in reproduce.NOTEBOOKS.items()
                                   if (ROOT / "notebooks" / f).exists()])
def test_notebook_smoke_run_asserts_its_numbers(paper, tmp_path):
    data_dir = shared_root() if paper in NEEDS_DATA else None          # skips when the datasets are absent
    record = reproduce.run_notebook(paper, profile="smoke", notebooks_dir=ROOT / "notebooks",
                                    figures_dir=tmp_path, data_dir=data_dir, log=lambda *_: None)
    out = tmp_path / paper
    assert record["profile"] == "smoke" and (out / "RUN.json").exists()
    assert (out / reproduce.NOTEBOOKS[paper]).exists()
    table = pd.read_csv(out / "comparisons.csv")
    assert len(table) > 0
    computed = table[table.verdict != "pending"]                       # pending: paper-scale cells not run
    assert (computed.verdict == "match").all(), computed[computed.verdict != "match"].to_string()
    assert table.kind.isin(["reproduced", "reduced", "formula", "reconstruction", "property", "beyond"]).all()
    pending = table[table.verdict == "pending"]
    assert (pending.kind == "reproduced").all() and pending.note.str.startswith("pending: needs").all()
    assert list(out.glob("*.png")) and list(out.glob("*.pdf")) and list(out.glob("*.md"))


def test_failing_cell_is_named(tmp_path):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'quick'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("assert x == 2, 'x is not 2'")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nbdir / reproduce.NOTEBOOKS["geyer2017"])
    with pytest.raises(reproduce.NotebookFailed, match=r"cell 3 .*AssertionError: x is not 2"):
        reproduce.run_notebook("geyer2017", profile="smoke", notebooks_dir=nbdir,
                               figures_dir=tmp_path / "figures", log=lambda *_: None)
    out = tmp_path / "figures" / "geyer2017"
    assert (out / "geyer2017_client_level.failed.ipynb").exists()
    assert not (out / "geyer2017_client_level.ipynb").exists()


def test_cli_rejects_unknown_papers_and_profiles():
    run = lambda *a: subprocess.run([sys.executable, "-m", "dpfl.reproduce", *a], cwd=ROOT,
                                    capture_output=True, text=True)
    assert run("nope").returncode == 2
    assert "invalid choice" in run("--profile", "full").stderr


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in ["reproduce", "quick", "test", "bench", "lab", "clean", *reproduce.NOTEBOOKS]:
        assert f"  {target} " in out


def test_ci_script_calls_make_test():
    text = (ROOT / ".ci" / "run").read_text()
    assert "make test" in text and "DPFL_DATA" in text


def test_gpu_scale_notebooks_run_quick_on_a_cpu_unless_insisted():
    assert reproduce.effective_profile("zheng2021", "paper", "cpu") == "quick"
    assert reproduce.effective_profile("zheng2021", "paper", "cpu", cpu_paper=True) == "paper"
    assert reproduce.effective_profile("zheng2021", "smoke", "cpu") == "smoke"
    assert reproduce.effective_profile("asoodeh2020", "paper", "cpu") == "paper"      # numerics only
