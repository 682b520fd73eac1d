"""The first command of a GPU session (``benchmarks/GPU_QUEUE.md``): is the CUDA path sound, and how fast is it?

1. the device, as recorded in provenance (``dpfl.device.describe``);
2. a smoke-sized Zheng run on CUDA twice with one seed: the metrics must be bitwise equal;
3. seconds per paper-scale round (100 clients) for MNIST at p = 1 and p = 0.25 and CIFAR-10 at p = 1,
   best of the rounds after the first (which includes CUDA/cuDNN start-up), and peak GPU memory;
4. a profile of one MNIST p = 1 round (the CUDA kernels and CPU ops that take the time);
5. the time and size of one checkpoint of a 100-client MNIST state.

    PYTHONPATH=lib python benchmarks/gpu_first.py --data-dir DIR --out OUT_DIR

Writes ``gpu_first.json``, its summary ``gpu_first.md`` and the profile table to OUT_DIR. ``--device cpu --clients 2 --local-steps 2`` runs the same
steps on a CPU at a small scale (the test suite does, so that the first GPU command cannot fail on a slip).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dpfl.device import configure, describe
from dpfl.experiments.zheng2021 import ZhengRun


def _round_seconds(run: ZhengRun) -> dict:
    cuda = run.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    metrics = run.compute()
    return {"rounds": len(metrics), "seconds_per_round": [round(s, 3) for s in metrics["seconds"]],
            "best_after_first_s": round(float(metrics["seconds"].iloc[1:].min()), 3),
            "wall_s": round(time.perf_counter() - start, 1),
            "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if cuda else None,
            "acc_stored_local": [round(a, 4) for a in metrics["acc_stored_local"]]}


#: the timed runs of the report: key, what
TIMED = [("mnist_p1", "MNIST p = 1, private"), ("mnist_p0.25", "MNIST p = 0.25, private"),
         ("cifar_p1", "CIFAR-10 p = 1, private")]


def summary(report: dict) -> str:
    """The report as Markdown: the device, whether one seed repeated the smoke run bit for bit, seconds per
    round and peak memory of each timed run, and the checkpoint's cost (``gpu_first.md`` beside the JSON)."""
    dev = report["device"]
    where = dev.get("gpu") or f"cpu ({dev.get('cpu')}, {dev.get('cores')} cores)"
    lines = [f"# gpu_first on {where}", "",
             f"torch {dev['torch']}" + (f", CUDA {dev['cuda']}, cuDNN {dev['cudnn']} (deterministic: "
                                         f"{dev['cudnn_deterministic']}), TF32 {'on' if dev['tf32'] else 'off'}"
                                         if "gpu" in dev else ""), ""]
    if "smoke_bitwise_equal" in report:
        lines += [f"A smoke run computed twice with one seed: metrics bitwise equal = {report['smoke_bitwise_equal']}.", ""]
    rows = [(what, report[key]) for key, what in TIMED if key in report]
    if rows:
        lines += ["| run | rounds | seconds per round (best after the first) | peak GPU memory (GiB) |",
                  "|:--|--:|--:|--:|"]
        lines += [f"| {what} | {r['rounds']} | {r['best_after_first_s']} | {r['peak_gpu_gib'] if r['peak_gpu_gib'] is not None else '—'} |"
                  for what, r in rows]
        lines.append("")
    if "checkpoint" in report:
        c = report["checkpoint"]
        lines += [f"A checkpoint of {c['clients']} MNIST clients (models and Adam moments): {c['gib']} GiB, "
                  f"written in {c['seconds']} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=100, help="clients of the timed runs and the checkpoint probe")
    parser.add_argument("--local-steps", type=int, default=None, help="K of the timed runs (default: the paper's)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--skip", default="", help="comma-separated steps to skip: smoke,mnist,cifar,profile,ckpt")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    device, clients = args.device, args.clients
    cuda = device.startswith("cuda")
    configure(device)
    report = {"device": describe(device)}
    print(json.dumps(report["device"]), flush=True)

    def save():
        (out / "gpu_first.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "gpu_first.md").write_text(summary(report))

    common = dict(device=device, data_dir=args.data_dir, progress=False)
    timed = dict(common, num_clients=clients, local_steps=args.local_steps)
    if "smoke" not in skip:
        smoke = ZhengRun("mnist", 1.0, 1.0, 16, rounds=3, local_steps=4, num_clients=4, **common)
        a, b = smoke.compute(), smoke.compute()
        cols = [c for c in a.columns if c != "seconds"]
        report["smoke_bitwise_equal"] = bool(a[cols].equals(b[cols]))
        report["smoke_metrics"] = a[cols].to_dict("list")
        print("smoke bitwise equal:", report["smoke_bitwise_equal"], flush=True)
        save()
    if "mnist" not in skip:
        for p in (1.0, 0.25):
            run = ZhengRun("mnist", p, 0.75, 16, rounds=args.rounds, **timed)
            report[f"mnist_p{p:g}"] = r = _round_seconds(run)
            print(f"MNIST p={p:g}:", r, flush=True)
            save()
    if "cifar" not in skip:
        run = ZhengRun("cifar10", 1.0, 0.75, 16, rounds=args.rounds, **timed)
        report["cifar_p1"] = r = _round_seconds(run)
        print("CIFAR p=1:", r, flush=True)
        save()
    if "profile" not in skip:
        from torch.profiler import ProfilerActivity, profile

        run = ZhengRun("mnist", 1.0, 0.75, 16, rounds=1, **timed)
        run.compute()                                            # warm-up
        with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
            run.compute()
        table = prof.key_averages().table(sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=25)
        cpu_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        (out / "profile_mnist_p1.txt").write_text(table + "\n\n" + cpu_table + "\n")
        print(table[-3000:], flush=True)
    if "ckpt" not in skip:
        state = {f"w{k}": torch.randn(clients, 1_199_882 // 4, device=device) for k in range(4)}
        state = {"local": state, "m": {k: v.clone() for k, v in state.items()},
                 "v": {k: v.clone() for k, v in state.items()}}
        path = Path("/tmp/dpfl_ckpt_probe.pt")
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.save(state, path)
        report["checkpoint"] = {"clients": clients, "seconds": round(time.perf_counter() - start, 2),
                                            "gib": round(path.stat().st_size / 2 ** 30, 2)}
        path.unlink()
        print("checkpoint:", report["checkpoint"], flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
