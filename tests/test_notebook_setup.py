"""dpfl.notebook.setup: parameter checks and outputs."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from dpfl.notebook import setup  # noqa: E402


@pytest.mark.parametrize("kwargs, name", [
    (dict(profile="full"), "profile"), (dict(profile="smoke", device="gpu"), "device"),
    (dict(profile="smoke", seed=-1), "seed"), (dict(profile="smoke", seed=1.5), "seed"),
    (dict(profile="smoke", data_dir="/nonexistent/dpfl-data"), "data_dir"),
])
def test_bad_parameters_name_the_parameter(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        setup("x", out_dir=tmp_path, **kwargs)


def test_data_dir_defaults_to_dpfl_data_then_the_default_root(tmp_path, monkeypatch):
    """No DPFL_DATA is not an error (make reproduce on a fresh machine): the loaders look in the
    default root, download where a network exists and otherwise name the missing files."""
    monkeypatch.delenv("DPFL_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    nb = setup("x", profile="smoke", out_dir=tmp_path / "o")
    assert nb.data_dir == tmp_path / "home" / ".cache" / "dpfl" / "data"
    assert nb.cache_dir == (tmp_path / "o" / "cache").resolve()
    monkeypatch.setenv("DPFL_DATA", str(tmp_path))
    nb = setup("x", profile="smoke", out_dir=tmp_path / "o", cache_dir=tmp_path / "c")
    assert (nb.data_dir, nb.cache.root) == (tmp_path, (tmp_path / "c").resolve())


def test_outputs_profiles_and_generators(tmp_path):
    nb = setup("x", profile="quick", device="cpu", seed=3, out_dir=tmp_path)
    assert nb.pick(smoke=1, quick=2, paper=3) == 2
    assert nb.rng(1).random() == nb.rng(1).random() != nb.rng(2).random()
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    nb.savefig(fig, "f")
    nb.save_table(pd.DataFrame({"a": [1.5]}), "t")
    nb.compare("a", 1.0, 1.0, rel=0.1, kind="formula")
    nb.claim("b", False, kind="property")
    nb.pending("c", 64, needs="a GPU")
    table = nb.finish()
    assert list(table.verdict) == ["match", "differs", "pending"]
    assert list(table.kind) == ["formula", "property", "reproduced"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["comparisons.csv", "comparisons.md", "f.pdf", "f.png", "t.csv", "t.md"]


def test_a_missing_value_reads_as_a_dash_in_a_tables_markdown(tmp_path):
    """A cell not computed yet (NaN or None) is "—" in the ``.md`` a reader sees, not "nan", and empty in the
    ``.csv``; numbers keep their format."""
    nb = setup("x", profile="smoke", out_dir=tmp_path)
    nb.save_table(pd.DataFrame({"R": [322, 201], "twin %": [float("nan"), 58.2712], "device": [None, "cpu"]}), "t")
    rows = (tmp_path / "t.md").read_text().splitlines()[2:]
    assert [[c.strip() for c in r.strip("|").split("|")] for r in rows] == [["322", "—", "—"], ["201", "58.27", "cpu"]]
    assert "nan" not in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.csv").read_text().splitlines()[1] == "322,,"


def test_a_caveat_goes_into_the_file_name_and_the_title(tmp_path):
    """A figure or table from a reconstruction or a stand-in dataset says so in its name and title
    (issue #14: FedHDP's Fig. 5 did not; Kim's Table 1 was named like the paper's)."""
    nb = setup("x", profile="smoke", out_dir=tmp_path)
    fig, ax = plt.subplots()
    ax.set_title("Fig. 5")
    assert nb.savefig(fig, "fig5", caveat="reconstruction").name == "fig5_reconstruction.png"
    assert "[reconstruction]" in fig.get_suptitle()
    fig, ax = plt.subplots()
    ax.set_title("Fig. 4.3 — CIFAR-10 (JPEG copy)")                     # already said: left as it is
    assert nb.savefig(fig, "fig4_3", caveat="CIFAR-10 (JPEG copy)").name == "fig4_3_cifar-10-jpeg-copy.png"
    assert fig.get_suptitle() == ""
    path = nb.save_table(pd.DataFrame({"a": [1]}), "table1", caveat="reconstruction")
    assert path.name == "table1_reconstruction.csv"
    assert (tmp_path / "table1_reconstruction.md").read_text().startswith("*table1_reconstruction — reconstruction*")
    with pytest.raises(ValueError, match="caveat"):
        nb.save_table(pd.DataFrame({"a": [1]}), "t", caveat=" ")


def test_a_figure_saved_again_later_is_the_same_file(tmp_path, monkeypatch):
    """Re-rendering results (make reproduce RESULTS_ONLY=1) rewrites no figure that did not change: the PDF
    carries no creation date (matplotlib stamps SOURCE_DATE_EPOCH, else the clock, unless told not to)."""
    nb = setup("x", profile="smoke", out_dir=tmp_path)
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    files = []
    for day in ("0", "86400"):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", day)
        nb.savefig(fig, "f")
        files.append([(tmp_path / f"f.{ext}").read_bytes() for ext in ("png", "pdf")])
    assert files[0] == files[1]
