"""benchmarks/route.py, which picks a GPU session's ``--per-sample`` route (benchmarks/GPU_QUEUE.md), run
on a CPU at a small scale, so that no slip of the script spends device time."""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_route_times_both_routes_and_prints_the_faster_for_mnist(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))             # its sibling engine.py, as when run as a script
    spec = importlib.util.spec_from_file_location("route", ROOT / "benchmarks" / "route.py")
    route = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(route)
    assert route.main(["--clients", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "route.json").read_text())
    assert report["clients"] == 2 and report["device"]
    for name in ("mnist", "cifar10"):
        r = report[name]
        assert r["ghost_s"] > 0 and r["unfold_s"] > 0 and abs(r["speedup"] - r["ghost_s"] / r["unfold_s"]) < 1e-2
    assert report["mnist_route"] == ("unfold" if report["mnist"]["speedup"] >= 1.1 else "ghost")
    assert capsys.readouterr().out.strip() == report["mnist_route"]


def test_profile_routes_writes_each_cases_costliest_operations(tmp_path):
    """benchmarks/profile_routes.py (a GPU session's optional profile of both routes), on a CPU with 2
    clients: every case is profiled, its operations counted, and bad input is refused before any work."""
    import pytest

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("profile_routes", ROOT / "benchmarks" / "profile_routes.py")
    profile_routes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile_routes)
    with pytest.raises(SystemExit):
        profile_routes.main(["--clients", "0", "--out", str(tmp_path / "never")])
    assert not (tmp_path / "never").exists()
    assert profile_routes.main(["--clients", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "profile_routes.json").read_text())
    cases = [f"{m} {r}" for m in ("mnist_cnn", "cifar_cnn") for r in ("ghost", "unfold")]
    assert report["clients"] == 2 and all(report[c]["aten_ops"] > 0 and report[c]["self_cpu_s"] > 0 for c in cases)
    text = (tmp_path / "profile_routes.txt").read_text()
    assert all(f"## {c}:" in text for c in cases) and "aten::convolution" in text
