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
