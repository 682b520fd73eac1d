"""Every paper notebook: committed clean, parameterised, and run at profile="smoke"."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from dpfl import reproduce
from dpfl.data import datasets
from tests_support import shared_root

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PARAMETERS = {"profile", "device", "seed", "data_dir", "out_dir", "cache_dir"}
NEEDS_DATA = {"zheng2021", "geyer2017", "aldaghri_fedhdp"}
#: papers whose every figure and table rests on a reconstruction of lost formulas (docs/kim2021.md, docs/aldaghri_fedhdp.md)
RECONSTRUCTIONS = {"kim2021", "aldaghri_fedhdp"}
#: the outputs of a reconstruction notebook's experiments (prefix), labelled reduced scale instead
EXPERIMENTS = {"aldaghri_fedhdp": "fedhdp_"}
#: notebooks that read the cells computed at the paper's setting whatever the profile: their smoke run gets the
#: committed cache, so that every such row (quantity prefix, count at least) is asserted there too, with its kind
#: (:func:`paper_cell_kind`)
PAPER_CELLS = {"zheng2021": (("Table 1 R at 90 %, p=", 9), ("Table 1 μ_max at our R, p=", 9),
                             ("Fig. 4.1 at the paper's setting (100 clients, p = 0.5, each cell to its R): personalized", 1),
                             ("Table 1 accuracy at R (%), p=", 9),
                             ("Table 1 non-private accuracy at R (%), p=", 9),
                             ("Table 2 R at 90 %, p=", 3), ("Table 2 μ_max at our R, p=", 3),
                             ("Table 2 mean μ ratio (B=8 / B=16)", 1), ("Table 2 mean iterations ratio (B=8 / B=16)", 1),
                             ("Table 2 mean examples ratio (B=8 / B=16)", 1),
                             ("B = 8 needs more rounds than B = 16 to reach 90% (the paper's setting", 1),
                             ("Table 3 R at 52 % (", 6), ("Table 3 μ_max at our R (", 6), ("Table 3 top-1 at R (%) (", 6),
                             ("Table 3 non-private top-1 at R (%) (", 6),
                             ("Fig. 4.3 at the paper's setting (100 clients, p = 0.5, each cell to its R", 1))}


def paper_cell_kind(quantity: str, data_dir) -> str:
    """The kind a row of a cell at the paper's setting must carry: "reproduced", save Table 3's and Fig. 4.3's
    (CIFAR-10, computed or pending) on a stand-in copy of the data (the JPEG copy: datasets.source_of), which can
    only be "reduced"."""
    cifar = quantity.startswith(("Table 3", "Fig. 4.3"))
    stand_in = cifar and datasets.source_of("cifar10", data_dir) != "official"
    return "reduced" if stand_in else "reproduced"


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
    if paper in PAPER_CELLS:
        shutil.copytree(ROOT / "figures" / paper / "cache", tmp_path / paper / "cache",
                        ignore=shutil.ignore_patterns("checkpoints"))
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
    assert pending.note.str.startswith("pending: needs").all()
    assert (pending.kind == pending.quantity.map(lambda q: paper_cell_kind(q, data_dir))).all(), pending.to_string()
    if paper in PAPER_CELLS:
        for prefix, count in PAPER_CELLS[paper]:
            cells = computed[computed.quantity.str.startswith(prefix)]
            assert len(cells) >= count and (cells.kind == paper_cell_kind(prefix, data_dir)).all(), cells.to_string()
    if paper == "zheng2021":                         # §9: the lean of our R, from the same cells' R rows
        lean_row = "Beyond the paper: our R / the paper's R, geometric mean over the "
        lean = computed[computed.quantity == lean_row + "cells computed at its setting"]
        rounds = computed[computed.quantity.str.match(r"Table \d R at \d+ %")]
        assert len(lean) == 1 and lean.kind.iloc[0] == "beyond" and len(rounds) >= 8
        ratio = pd.to_numeric(rounds.ours) / pd.to_numeric(rounds.reference)
        assert float(lean.ours.iloc[0]) == pytest.approx(float(np.exp(np.log(ratio).mean())), rel=1e-3)
        # …and per dataset (MNIST, CIFAR-10), from the cells' own R in rounds_offset.csv
        each = computed[computed.quantity.str.startswith(lean_row) & computed.quantity.str.endswith(" cells")]
        offset = pd.read_csv(out / "rounds_offset.csv")
        per_data = np.exp(np.log(offset["R ours"] / offset["R paper"]).groupby(offset.dataset).mean())
        assert len(each) == len(per_data) == 2 and (each.kind == "beyond").all(), each.to_string()
        assert sorted(each.ours.astype(float)) == pytest.approx(sorted(per_data), rel=1e-3)
        # §9's seed row: the mean of the cell's R at each cached seed, seed 0's R being Table 1's own row
        spread = pd.read_csv(out / "rounds_by_seed.csv").query("p == 1 and `σ` == 0.75").set_index("seed")
        seeds = computed[computed.quantity == "Beyond the paper: Table 1 R at 90 %, p=1 σ=0.75, mean over seeds "
                         + ", ".join(map(str, spread.index))]
        table1 = computed[computed.quantity == "Table 1 R at 90 %, p=1 σ=0.75"]
        assert len(spread) >= 2 and len(seeds) == 1 and seeds.kind.iloc[0] == "beyond", spread.to_string()
        assert float(seeds.ours.iloc[0]) == pytest.approx(spread["R ours"].mean())
        assert spread.loc[0, "R ours"] == float(table1.ours.iloc[0]) and (spread["R paper"] == 64).all()
        # Fig. 4.1 at the paper's setting: personalized − global over the second half, from the committed cells
        fig41 = computed[computed.quantity.str.startswith("Fig. 4.1 at the paper's setting")]
        assert fig41.note.tolist() == ["σ=0.75: +10.0 pp to round 133, σ=1: +8.8 pp to round 210"]
    assert list(out.glob("*.png")) and list(out.glob("*.pdf")) and list(out.glob("*.md"))
    if paper in RECONSTRUCTIONS:                      # every figure and table says it is one
        outputs = [p.name for p in out.glob("*.*") if p.suffix in (".png", ".csv") and p.stem != "comparisons"]
        experiments = [name for name in outputs if name.startswith(EXPERIMENTS.get(paper, "-"))]
        assert outputs and all("reconstruction" in name for name in outputs if name not in experiments), outputs
        assert all("reduced-scale" in name for name in experiments), experiments     # FedHDP's §5 runs say theirs


def _notebook(path, *cells):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'quick'\nout_dir = None\ncache_dir = None")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(c) for c in cells)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


WRITES = ("from pathlib import Path\n"
          "Path(out_dir, 'table.md').write_text(profile)\n"
          "Path(cache_dir).mkdir(parents=True, exist_ok=True)\n"
          "Path(cache_dir, 'run.pkl').write_text(profile)")


def test_failing_cell_is_named_and_changes_no_figure(tmp_path):
    nbdir, figures = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    source = nbdir / reproduce.NOTEBOOKS["geyer2017"]
    _notebook(source, WRITES)
    reproduce.run_notebook("geyer2017", profile="smoke", notebooks_dir=nbdir, figures_dir=figures, log=lambda *_: None)
    out = figures / "geyer2017"
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert (out / "table.md").read_text() == "smoke" and (out / "cache" / "run.pkl").exists()
    # a quick run that writes its table and cache, then fails
    _notebook(source, WRITES, "x = 1", "assert x == 2, 'x is not 2'")
    with pytest.raises(reproduce.NotebookFailed, match=r"cell 4 .*AssertionError: x is not 2(.|\n)*is unchanged"):
        reproduce.run_notebook("geyer2017", profile="quick", notebooks_dir=nbdir, figures_dir=figures,
                               log=lambda *_: None)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before                               # was: table.md of quick beside RUN.json of smoke
    assert (out / "cache" / "run.pkl").read_text() == "quick"   # the cache keeps what was computed
    assert (figures / ".staging" / "geyer2017" / "geyer2017_client_level.failed.ipynb").exists()
    # the next successful run swaps in whole and keeps the cache
    _notebook(source, WRITES)
    reproduce.run_notebook("geyer2017", profile="quick", notebooks_dir=nbdir, figures_dir=figures, log=lambda *_: None)
    assert (out / "table.md").read_text() == "quick" and (out / "cache" / "run.pkl").exists()
    assert not (figures / ".staging" / "geyer2017").exists()


def test_an_interrupted_swap_is_completed(tmp_path):
    figures = tmp_path / "figures"
    staging = figures / ".staging" / "kim2021"
    (staging.with_name("kim2021.old") / "cache").mkdir(parents=True)
    (staging.with_name("kim2021.old") / "cache" / "run.pkl").write_text("x")
    (figures / "kim2021").mkdir()                        # swapped in, but the cache not yet moved back
    reproduce.recover(figures, "kim2021")
    assert (figures / "kim2021" / "cache" / "run.pkl").read_text() == "x"
    assert not staging.with_name("kim2021.old").exists()


def test_reproduce_runs_every_notebook_and_lists_the_failures(tmp_path, capsys):
    nbdir, figures = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    _notebook(nbdir / reproduce.NOTEBOOKS["zheng2021"], "raise RuntimeError('no data here')")
    _notebook(nbdir / reproduce.NOTEBOOKS["kim2021"], WRITES)
    code = reproduce.main(["--profile", "smoke", "--notebooks-dir", str(nbdir), "--figures-dir", str(figures)])
    err = capsys.readouterr().err
    assert code == 1                                     # was: stopped at the first notebook, kim2021 never ran
    assert (figures / "kim2021" / "table.md").read_text() == "smoke"
    assert "1 of 2 notebook(s) failed" in err and "zheng2021: " in err and "RuntimeError: no data here" in err
    assert (figures / "REPORT.md").exists()


def test_cli_rejects_unknown_papers_and_profiles():
    run = lambda *a: subprocess.run([sys.executable, "-m", "dpfl.reproduce", *a], cwd=ROOT,
                                    capture_output=True, text=True)
    assert run("nope").returncode == 2
    assert "invalid choice" in run("--profile", "full").stderr
    for option, message in ((("--device", "tpu"), "--device must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'"),
                            (("--seed", "-1"), "--seed must be a non-negative integer")):   # before any notebook starts
        bad = run("asoodeh2020", "--figures-dir", "/nonexistent/figures", *option)
        assert bad.returncode == 2 and message in bad.stderr


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in ["reproduce", "quick", "test", "bench", "status", "lab", "book", "chromium", "clean", *reproduce.NOTEBOOKS]:
        assert f"  {target} " in out


def test_ci_script_calls_make_test():
    text = (ROOT / ".ci" / "run").read_text()
    assert "make test" in text and "DPFL_DATA" in text


def test_gpu_scale_notebooks_run_quick_on_a_cpu_unless_insisted():
    assert reproduce.effective_profile("zheng2021", "paper", "cpu") == "quick"
    assert reproduce.effective_profile("zheng2021", "paper", "cpu", cpu_paper=True) == "paper"
    assert reproduce.effective_profile("zheng2021", "smoke", "cpu") == "smoke"
    assert reproduce.effective_profile("asoodeh2020", "paper", "cpu") == "paper"      # numerics only


def test_results_only_renders_at_the_requested_profile(tmp_path, monkeypatch, capsys):
    """With --results-only a CPU machine renders profile paper from cached (GPU) results instead of
    falling back to quick, and a missing result fails the notebook with the list."""
    nbdir, figures = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    _notebook(nbdir / reproduce.NOTEBOOKS["zheng2021"],
              "import os\nfrom pathlib import Path\nPath(out_dir, 'env.txt').write_text(os.environ.get('RESULTS_ONLY', ''))")
    monkeypatch.setenv("RESULTS_ONLY", "")      # recorded, so the "1" that main sets is undone after the test
    code = reproduce.main(["zheng2021", "--results-only", "--device", "cpu", "--notebooks-dir", str(nbdir),
                           "--figures-dir", str(figures)])
    assert code == 0 and (figures / "zheng2021" / "env.txt").read_text() == "1"
    record = json.loads((figures / "zheng2021" / "RUN.json").read_text())
    assert record["profile"] == "paper" and record["note"].startswith("results only")


def test_ray_address_reaches_the_notebooks_kernels(tmp_path, monkeypatch):
    """``--ray ADDRESS`` (``make reproduce RAY_ADDRESS=…``): the kernels see it as ``DPFL_RAY_ADDRESS``,
    which ``dpfl.runs.run_many`` sends their grids to (tests/test_cluster.py)."""
    nbdir, figures = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    _notebook(nbdir / reproduce.NOTEBOOKS["kim2021"],
              "import os\nfrom pathlib import Path\nPath(out_dir, 'env.txt').write_text(os.environ.get('DPFL_RAY_ADDRESS', ''))")
    monkeypatch.setenv("DPFL_RAY_ADDRESS", "")   # recorded, so the address that main sets is undone after the test
    code = reproduce.main(["kim2021", "--ray", "ray://head:10001", "--profile", "smoke", "--notebooks-dir", str(nbdir),
                           "--figures-dir", str(figures)])
    assert code == 0 and (figures / "kim2021" / "env.txt").read_text() == "ray://head:10001"


def _same(committed: pd.DataFrame, regenerated: pd.DataFrame) -> list:
    """The cells where two comparison tables differ: numbers beyond 1e-9 relative (a re-rendered
    composition moves in the 13th digit), anything else as text."""
    if list(committed.columns) != list(regenerated.columns) or len(committed) != len(regenerated):
        return [("shape", committed.shape, regenerated.shape)]
    diffs = []
    for col in committed.columns:
        for i, (a, b) in enumerate(zip(committed[col].fillna(""), regenerated[col].fillna(""))):
            try:
                same = bool(np.isclose(float(a), float(b), rtol=1e-9, atol=0.0, equal_nan=True))
            except ValueError:
                same = a == b
            if not same:
                diffs.append((i, col, a, b))
    return diffs


@pytest.mark.notebook
@pytest.mark.parametrize("paper", [p for p in reproduce.NOTEBOOKS if (ROOT / "figures" / p / "RUN.json").exists()])
def test_committed_figures_regenerate_from_the_committed_caches(paper, tmp_path, monkeypatch):
    """What `make reproduce RESULTS_ONLY=1` does on a fresh clone: every committed result the
    notebook needs is in its committed cache (a pruned entry fails here, naming it), and the
    comparisons it renders are the committed ones — the code and the figures have not drifted."""
    committed = ROOT / "figures" / paper
    profile = json.loads((committed / "RUN.json").read_text())["profile"]
    shutil.copytree(committed / "cache", tmp_path / paper / "cache",
                    ignore=shutil.ignore_patterns("checkpoints"))
    monkeypatch.setenv("RESULTS_ONLY", "1")
    data_dir = shared_root() if paper in NEEDS_DATA else None
    reproduce.run_notebook(paper, profile=profile, notebooks_dir=ROOT / "notebooks", figures_dir=tmp_path,
                           data_dir=data_dir, log=lambda *_: None)
    tables = [pd.read_csv(d / "comparisons.csv", dtype=str) for d in (committed, tmp_path / paper)]
    assert _same(*tables) == []


def _synthetic_cell(config, R: int, target: float, reached: float = 0.002) -> pd.DataFrame:
    """Metrics of a test-only stand-in for a cell at the paper's setting: the stored accuracy climbs
    linearly and reaches ``target`` exactly at round R."""
    rounds = np.arange(1, R + 1)
    acc = target * rounds / R + reached * (rounds == R)
    return pd.DataFrame({"round": rounds, "acc_stored_local": acc, "acc_global": acc - 0.05, "loss_global": 2 - acc,
                         "acc_local_all": acc, "mu_max_clt": [config.mu(int(t)) if config.sigma else np.inf for t in rounds]})


@pytest.mark.notebook
def test_zheng_notebook_reads_table_2_and_3_cells_at_the_papers_setting(tmp_path):
    """The notebook's path for whatever of Tables 2 and 3 is not yet computed at the paper's setting, run on test-only
    stand-ins in a copy of the cache, so that it works on a cache that is being filled (on 2026-11-28 Table 2's σ = 0.9
    and 1 and all of Table 3 but p = 1, σ = 0.5 were missing): Table 2's missing B = 8 cells at R = 1.39 × our B = 16
    cell's (so that §4's ratios are near the paper's); a missing Table 3 cell at the paper's R, and every missing twin at
    its cell's R. Their rows leave the pending list, Table 2's ratios are compared, a real cell keeps its own device, and
    the CIFAR-10 rows on the JPEG copy are "reduced". Every cell is computed since 2026-12-03, so that the stand-in path
    still runs, the copy first loses Table 2's and Table 3's p = 0.5, σ = 1 cells (Table 3's twin stays: it is shared)."""
    from dpfl.experiments import zheng2021 as zx
    from dpfl.runs import Cache, Result

    data_dir = shared_root()
    cache = Cache(tmp_path / "zheng2021" / "cache")
    shutil.copytree(ROOT / "figures" / "zheng2021" / "cache", cache.root, ignore=shutil.ignore_patterns("checkpoints"))
    common = dict(data_dir=str(data_dir))
    for table in ("2", "3"):
        dropped = cache.path(zx.cached_cells(cache, table, **common)[(0.5, 1.0)][0])
        dropped.unlink()
        dropped.with_suffix(".json").unlink()
    table1 = zx.cached_cells(cache, "1", **common)
    real2 = zx.cached_cells(cache, "2", **common)
    synthetic = {"device": "test (synthetic stand-in)"}
    for cell in (c for c in zx.cells("2", **common) if (c.p, c.sigma) not in real2):
        R = round(1.39 * zx.first_round(table1[(cell.p, cell.sigma)][1], 0.9))
        cache.store(Result(cell, _synthetic_cell(cell, R, 0.9), synthetic))
    real3 = zx.cached_cells(cache, "3", **common)
    published3 = zx.published().query("table == '3'")
    for cell in zx.cells("3", **common):
        paper3 = published3.query("p == @cell.p and sigma == @cell.sigma").iloc[0]
        if (cell.p, cell.sigma) not in real3:          # a missing cell: at the paper's R
            R = int(paper3.R)
            cache.store(Result(cell, _synthetic_cell(cell, R, 0.52), synthetic))
        elif real3[(cell.p, cell.sigma)][2] is None:   # a real cell without its twin: the twin to our R
            R = zx.first_round(real3[(cell.p, cell.sigma)][1], 0.52)
        else:
            continue
        if zx.cached_twin(cache, cell, R) is None:     # a longer twin at the same p serves a shorter cell
            twin = zx.twin(cell, R)
            cache.store(Result(twin, _synthetic_cell(twin, R, paper3.nonprivate_acc / 100), synthetic))
    reproduce.run_notebook("zheng2021", profile="smoke", notebooks_dir=ROOT / "notebooks", figures_dir=tmp_path,
                           data_dir=data_dir, log=lambda *_: None)
    out = tmp_path / "zheng2021"
    table = pd.read_csv(out / "comparisons.csv")
    rows = lambda prefix: table[table.quantity.str.startswith(prefix)]
    for prefix in ("Table 2 R at 90 %, p=0.5 σ=", "Table 2 μ_max at our R, p=0.5 σ=", "Table 2 mean "):
        assert len(rows(prefix)) == 3 and (rows(prefix).verdict == "match").all(), rows(prefix).to_string()
        assert (rows(prefix).kind == "reproduced").all()
    assert not len(table[(table.verdict == "pending") & table.source.str.contains("Table 2")])
    cifar_rows = table[table.quantity.str.match(r"Table 3 (R at|μ_max at our R|top-1 at R|non-private top-1 at R)")]
    assert (cifar_rows.kind == "reduced").all() and cifar_rows.quantity.str.contains("JPEG copy").all(), cifar_rows
    assert len(cifar_rows) == 4 * 6 and (cifar_rows.verdict == "match").all(), cifar_rows.to_string()
    assert not len(rows("Table 3 cifar10").query("verdict == 'pending'"))   # every stand-in left the pending list
    t2 = pd.read_csv(out / "table2_batch_size_paper_cells.csv")
    assert sorted(t2["R paper (to 90%)"]) == [191, 229, 266]
    real = t2["σ"].isin([s for _, s in real2])
    assert real.sum() == len(real2) == 2 and (t2["computed on"][~real] == synthetic["device"]).all()
    assert not t2["computed on"][real].str.startswith("test").any()
    t3 = pd.read_csv(next(out.glob("table3_cifar10_paper_cells*.csv")))
    stood_in = t3["computed on"].str.startswith(synthetic["device"])        # the cell, beside its real twin
    assert t3[stood_in][["p", "σ"]].values.tolist() == [[0.5, 1.0]]
    assert t3["computed on"][stood_in].str.contains("; twin cpu").all()
    assert list(out.glob("table2_paper_cells_curves.png")) and list(out.glob("table3_paper_cells_curves*.png"))
