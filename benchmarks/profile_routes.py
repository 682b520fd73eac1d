"""Where a DP-SGD round's time goes with each per-sample route: ``torch.profiler`` over row (f)'s workload
(one ``local_train`` round of 100 clients, 2 DP steps of B = 16) for MnistCNN and the CIFAR-10 CNN, by each
per-sample route (``dpfl.federated.local.CONV_ROUTES``: "ghost", the default; "unfold"; "grouped"; "matmul"), under the
kernels the runs use
(``dpfl.device.configure``: deterministic cuDNN, no TF32).

    PYTHONPATH=lib python3 benchmarks/profile_routes.py [--clients 100] [--out DIR]

Writes DIR/profile_routes.txt (each case's 15 costliest operations and kernels) and DIR/profile_routes.json
({case: self CPU and self CUDA seconds, kernel launches, operations}). Why this exists: on the H200 the
unfolded route, which replaces 3 cuDNN kernels per client and sample by one batched product per layer,
measured 0.63× (MNIST) and 0.33× (CIFAR-10) the default's speed (``benchmarks/gpu/2026-11-26-2/route.json``);
the profile says which kernels each route spends its time in, so that the next change is measured, not guessed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from engine import DEVICE, one_round
from torch.profiler import ProfilerActivity, profile

from dpfl.federated.local import CONV_ROUTES, LocalConfig
from dpfl.models import CIFAR_CNN, MNIST_CNN
from dpfl.provenance import device_name


def profile_round(train, route: str):
    """(summary dict, table text) of one profiled round ``train`` (:func:`engine.one_round`) by ``route``,
    after a warm-up round."""
    cfg = LocalConfig(dp=True, noise_multiplier=2.0, per_sample=route)
    run = lambda: train(cfg)
    cuda = DEVICE == "cuda"
    run()
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key.startswith("cudaLaunchKernel"))
    summary = {"self_cpu_s": round(sum(e.self_cpu_time_total for e in events) / 1e6, 4),
               "self_cuda_s": round(sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6, 4),
               "kernel_launches": launches,
               "aten_ops": sum(e.count for e in events if e.key.startswith("aten::"))}
    table = events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=15)
    return summary, table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error(f"--clients must be a positive integer, got {args.clients}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summaries, text = {"device": device_name(DEVICE), "clients": args.clients}, []
    for model in (MNIST_CNN, CIFAR_CNN):
        train, _, _ = one_round(args.clients, 2, 16, model)      # 2 DP steps of B = 16, as row (f)
        for route in CONV_ROUTES:
            case = f"{model.name} {route}"
            try:
                summaries[case], table = profile_round(train, route)
            except Exception as exc:                 # a route that fails on this device: the others still count
                summaries[case], table = {"error": repr(exc)}, f"failed: {exc!r}"
            print(case, summaries[case], file=sys.stderr, flush=True)
            text.append(f"## {case}: {summaries[case]}\n\n{table}\n")
    (out / "profile_routes.txt").write_text("\n".join(text))
    (out / "profile_routes.json").write_text(json.dumps(summaries, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
