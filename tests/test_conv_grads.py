"""benchmarks/conv_grads.py: the three routes to per-sample convolution weight gradients equal a plain
per-sample autograd loop, and the script runs every step on a CPU at 2 clients (it is a GPU-session
command, benchmarks/GPU_QUEUE.md)."""
import json

import torch
import torch.nn.functional as F
from tests_support import benchmark_script

conv_grads = benchmark_script("conv_grads")


def test_every_route_equals_a_per_sample_autograd_loop():
    gen = torch.Generator().manual_seed(3)
    m, batch, c_in, c_out, side = 2, 3, 4, 5, 9
    w = torch.randn(m, c_out, c_in, 3, 3, generator=gen, dtype=torch.float64)
    a = torch.randn(m, batch, c_in, side, side, generator=gen, dtype=torch.float64)
    g = torch.randn(m, batch, c_out, side - 2, side - 2, generator=gen, dtype=torch.float64)
    loop = torch.empty(m, batch, c_out, c_in, 3, 3, dtype=torch.float64)
    for c in range(m):
        for i in range(batch):
            wc = w[c].clone().requires_grad_(True)
            (F.conv2d(a[c, i:i + 1], wc)[0] * g[c, i]).sum().backward()
            loop[c, i] = wc.grad
    torch.testing.assert_close(conv_grads.by_vmap(w, a, g), loop, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(conv_grads.by_unfold(w, a, g), loop, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(conv_grads.by_grouped(w, a, g), loop, rtol=1e-10, atol=1e-12)


def test_the_script_runs_on_a_cpu(tmp_path):
    assert conv_grads.main(["--device", "cpu", "--clients", "2", "--batch", "2", "--repeats", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "conv_grads.json").read_text())
    assert set(report["layers"]) == {"conv1", "conv2"}
    for layer in report["layers"].values():
        assert layer["vmap_s"] > 0 and layer["unfold_s"] > 0 and layer["grouped_s"] > 0 and layer["max_rel_error"] < 1e-4
        assert abs(layer["vmap_over_grouped"] - layer["vmap_s"] / layer["grouped_s"]) < 0.01 * layer["vmap_over_grouped"] + 0.01
