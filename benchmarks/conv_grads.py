"""Per-sample weight gradients of a convolution, three ways: is the engine's route the GPU's bottleneck?

The profile of one Zheng MNIST round on an H100 (``benchmarks/gpu/2026-11-24-h100/profile_mnist_p1.txt``)
spends 61 % of its CUDA time in ``convolution_backward``: ``dpfl.federated.local`` takes per-sample
gradients of the convolutions by ``vmap(grad)`` over the samples inside ``vmap`` over the clients, which
PyTorch lowers to one convolution with m·B groups, and cuDNN runs its weight gradient as one small
kernel per group (60 800 launches per round). The alternative: unfold each sample's input (im2col) and
take every per-sample weight gradient as one batched matrix product, g_i · unfold(a_i)ᵀ
(Opacus' ``GradSampleModule`` does this for ``nn.Conv2d``); or take them all as one *forward* convolution
with m·B groups, each sample's output gradients the kernels of its group (Rochette et al. 2019), which
cuDNN need not split by group. The last two are the engine's own functions (``LocalConfig.per_sample`` =
"unfold", "grouped"). This script times the three for MnistCNN's two convolutions at m clients × B
samples, checks they agree, and writes ``conv_grads.json``: the ratios say which route a GPU should take.

    PYTHONPATH=lib python benchmarks/conv_grads.py --out OUT_DIR [--device cuda] [--clients 100]

``tests/test_conv_grads.py`` runs it on a CPU at 2 clients.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from dpfl.device import configure, describe
from dpfl.federated import local
from timing import best                  # benchmarks/

#: MnistCNN's convolutions (``dpfl.models.MNIST_CNN``): name, in channels, out channels, input side
LAYERS = [("conv1", 1, 32, 28), ("conv2", 32, 64, 26)]


def by_vmap(weight, a, g):
    """The engine's route: grad of ⟨conv(a_i, W_c), g_i⟩ w.r.t. W_c, vmapped over samples then clients.
    ``weight`` (m, out, in, k, k); ``a`` (m, B, in, H, W); ``g`` (m, B, out, H', W'). Returns (m, B, out, in, k, k)."""
    def one(w, ai, gi):
        return (F.conv2d(ai[None], w)[0] * gi).sum()

    return vmap(vmap(grad(one), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))(weight, a, g)


def _engine_route(conv_grads):
    """One of the engine's per-layer routes (``dpfl.federated.local``), vmapped over the clients as in a
    round; returns (m, B, out, in, k, k)."""
    def route(weight, a, g):
        grads, _ = vmap(conv_grads)(a, g)                                        # (m, B, out, in·k²)
        return grads.reshape(*grads.shape[:2], *weight.shape[1:])
    return route


#: Unfolded: every sample's weight gradient g_i · unfold(a_i)ᵀ in one batched matrix product
by_unfold = _engine_route(local._conv_grads_unfolded)
#: Grouped: one forward convolution with m·B groups, each sample's output gradients its group's kernels
by_grouped = _engine_route(local._conv_grads_grouped)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    configure(args.device)                                  # the engine's kernels: deterministic, no TF32
    gen = torch.Generator().manual_seed(0)
    report = {"device": describe(args.device), "clients": args.clients, "batch": args.batch, "layers": {}}
    for name, c_in, c_out, side in LAYERS:
        m, b = args.clients, args.batch
        w = torch.randn(m, c_out, c_in, 3, 3, generator=gen).to(args.device)
        a = torch.randn(m, b, c_in, side, side, generator=gen).to(args.device)
        g = torch.randn(m, b, c_out, side - 2, side - 2, generator=gen).to(args.device)
        ours = by_vmap(w, a, g)
        row = {"vmap_s": round(best(lambda: by_vmap(w, a, g), args.repeats, args.device), 5), "max_rel_error": 0.0}
        for route, fn in (("unfold", by_unfold), ("grouped", by_grouped)):
            err = float((ours - fn(w, a, g)).abs().max() / ours.abs().max())
            if err > 1e-4:
                raise AssertionError(f"{name}: the {route} route disagrees with vmap (max relative error {err:.2e})")
            row[f"{route}_s"] = round(best(lambda: fn(w, a, g), args.repeats, args.device), 5)
            row[f"vmap_over_{route}"] = round(row["vmap_s"] / row[f"{route}_s"], 2)
            row["max_rel_error"] = max(row["max_rel_error"], err)
        report["layers"][name] = row
        print(name, report["layers"][name], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "conv_grads.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
