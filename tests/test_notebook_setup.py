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


def test_missing_data_dir_when_needed(tmp_path, monkeypatch):
    monkeypatch.delenv("DPFL_DATA", raising=False)
    with pytest.raises(ValueError, match="^data_dir is not set"):
        setup("x", profile="smoke", out_dir=tmp_path, needs_data=True)
    monkeypatch.setenv("DPFL_DATA", str(tmp_path))
    assert setup("x", profile="smoke", out_dir=tmp_path / "o", needs_data=True).data_dir == tmp_path


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
