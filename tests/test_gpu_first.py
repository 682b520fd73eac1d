"""benchmarks/gpu_first.py, the first command of a GPU session (benchmarks/GPU_QUEUE.md), run on a CPU at a
small scale: every step it takes on the GPU runs here through the same code, so that no slip of the script
can spend the GPU session's first minutes."""
import json

from tests_support import benchmark_script


def test_gpu_first_runs_every_step_on_a_cpu(data_root, tmp_path):
    gpu_first = benchmark_script("gpu_first")
    assert gpu_first.main(["--device", "cpu", "--clients", "2", "--local-steps", "2", "--rounds", "2", "--skip", "cifar",
                           "--data-dir", str(data_root), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_first.json").read_text())
    assert report["device"]["cores"] >= 1 and "torch" in report["device"]
    assert report["smoke_bitwise_equal"] is True and len(report["smoke_metrics"]["round"]) == 3
    for p in ("1", "0.25"):
        r = report[f"mnist_p{p}"]
        assert r["rounds"] == 2 and 0 < r["best_after_first_s"] <= max(r["seconds_per_round"]) and r["peak_gpu_gib"] is None
    assert report["checkpoint"]["clients"] == 2 and report["checkpoint"]["gib"] > 0
    assert "Self CPU time total" in (tmp_path / "profile_mnist_p1.txt").read_text()
    assert "cifar_p1" not in report
    md = (tmp_path / "gpu_first.md").read_text()
    assert "bitwise equal = True" in md and "CIFAR-10" not in md
    for p in ("1", "0.25"):
        assert f"| MNIST p = {p}, private | 2 | {report[f'mnist_p{p}']['best_after_first_s']} | — |" in md
