"""benchmarks/route.py, which picks a GPU session's ``--per-sample`` route (benchmarks/GPU_QUEUE.md), run
on a CPU at a small scale, so that no slip of the script spends device time."""
import json

import pytest
from tests_support import benchmark_script

from dpfl.federated.local import CONV_ROUTES


def test_route_chooses_the_fastest_only_by_a_margin():
    choose = benchmark_script("route").choose
    assert choose({"ghost": 1.0, "unfold": 0.5, "grouped": 0.8}) == "unfold"
    assert choose({"ghost": 1.0, "unfold": 1.2, "grouped": 0.5}) == "grouped"
    assert choose({"ghost": 1.0, "unfold": 0.95, "grouped": 0.93}) == "ghost"     # < 10 % faster: keep the default
    assert choose({"ghost": 0.5, "unfold": 1.0, "grouped": 0.9}) == "ghost"


def test_route_times_every_route_and_prints_the_choice_for_the_dataset_asked(tmp_path, capsys):
    route = benchmark_script("route")
    out = tmp_path / "not" / "yet"                  # made before the timing, not after it (2026-11-29: lost 4.5 min)
    assert route.main(["--clients", "1", "--repeats", "1", "--out", str(out), "--for", "cifar10"]) == 0
    report = json.loads((out / "route.json").read_text())
    assert report["clients"] == 1 and report["device"]
    for name in ("mnist", "cifar10"):
        r = report[name]
        seconds = {k: r[f"{k}_s"] for k in CONV_ROUTES}
        assert all(t > 0 for t in seconds.values())
        for k in CONV_ROUTES[1:]:
            assert abs(r[f"speedup_{k}"] - seconds["ghost"] / seconds[k]) < 1e-2 * r[f"speedup_{k}"]
        assert r["route"] == route.choose(seconds)
        plain = {k: r["plain"][f"{k}_s"] for k in ("ghost", "matmul")}       # the twins' non-private round
        assert all(t > 0 for t in plain.values()) and r["plain"]["route"] == route.choose(plain)
        assert abs(r["plain"]["speedup_matmul"] - plain["ghost"] / plain["matmul"]) < 1e-2 * r["plain"]["speedup_matmul"]
    assert capsys.readouterr().out.strip() == report["cifar10"]["route"]
    for bad in (["--clients", "0"], ["--repeats", "0"]):
        with pytest.raises(SystemExit):
            route.main(bad)
    assert "--repeats must be a positive integer" in capsys.readouterr().err


def test_profile_routes_writes_each_cases_costliest_operations(tmp_path):
    """benchmarks/profile_routes.py (a GPU session's optional profile of every route), on a CPU with 2
    clients: every case is profiled, its operations counted, and bad input is refused before any work."""
    profile_routes = benchmark_script("profile_routes")
    with pytest.raises(SystemExit):
        profile_routes.main(["--clients", "0", "--out", str(tmp_path / "never")])
    assert not (tmp_path / "never").exists()
    assert profile_routes.main(["--clients", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "profile_routes.json").read_text())
    cases = [f"{m} {r}" for m in ("mnist_cnn", "cifar_cnn") for r in CONV_ROUTES]
    assert report["clients"] == 2 and all(report[c]["aten_ops"] > 0 and report[c]["self_cpu_s"] > 0 for c in cases)
    text = (tmp_path / "profile_routes.txt").read_text()
    assert all(f"## {c}:" in text for c in cases) and "aten::convolution" in text


def test_a_route_that_fails_on_the_device_is_left_out(tmp_path, monkeypatch, capsys):
    """On a GPU a new route may fail (a kernel without support, memory): route.py then chooses among the
    others and says so, rather than losing every measurement; the default failing is fatal."""
    route = benchmark_script("route")

    engine = benchmark_script("engine")
    real = engine.LocalConfig

    def flaky(**kw):                                 # the matmul route has no kernel on this "device"
        if kw.get("per_sample") == "matmul":
            raise RuntimeError("no kernel for this")
        return real(**kw)

    monkeypatch.setattr(engine, "LocalConfig", flaky)
    monkeypatch.setattr(route, "route_times", engine.route_times)
    assert route.main(["--clients", "1", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "route.json").read_text())
    for name in ("mnist", "cifar10"):
        assert report[name]["failed"] == {"matmul": "RuntimeError('no kernel for this')"}
        assert "matmul_s" not in report[name] and {"ghost_s", "unfold_s", "grouped_s"} <= set(report[name])
        assert report[name]["route"] == route.choose({r: report[name][f"{r}_s"] for r in ("ghost", "unfold", "grouped")})
        assert report[name]["plain"]["failed"] == {"matmul": "RuntimeError('no kernel for this')"}
        assert report[name]["plain"]["route"] == "ghost"
    out, err = capsys.readouterr()
    assert out.strip() == report["mnist"]["route"]
    assert "dp route matmul failed" in err and "plain route matmul failed" in err
    with pytest.raises(RuntimeError):
        engine.route_times(1, routes=("ghost", "matmul"), repeats=1)       # without ``failed``, a failure raises
    monkeypatch.setattr(engine, "LocalConfig", lambda **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):                      # the default failing is fatal
        route.main(["--clients", "1", "--repeats", "1"])


def test_timings_keep_relative_precision_for_small_values():
    """A fixed number of decimals lost 1.2 % of a 0.043× speedup (a round starved by other work): route.json
    keeps significant digits instead."""
    route = benchmark_script("route")
    seconds = {"ghost": 0.0923, "unfold": 2.1239, "grouped": 0.00123456, "matmul": 0.0461}
    t = route.timings(seconds, None)
    assert t["grouped_s"] == 0.001235 and t["unfold_s"] == 2.124
    for k in ("unfold", "grouped", "matmul"):
        assert abs(t[f"speedup_{k}"] - seconds["ghost"] / seconds[k]) < 5e-3 * t[f"speedup_{k}"]
    assert t["speedup_unfold"] == 0.0435 and t["route"] == "grouped"
