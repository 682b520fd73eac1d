"""Which DP-SGD per-sample route a Zheng run should take on this machine: row (f) of ``make bench``
(one ``local_train`` round of 100 clients, 2 DP steps of B = 16, best of 3) for MnistCNN and the
CIFAR-10 CNN, by each of ``dpfl.federated.local.CONV_ROUTES``: the default (ghost clipping, the
convolutions by ``vmap(grad)``), unfolded convolutions, a grouped forward convolution, and convolutions
computed as matrix products (docs/per-sample-gradients.md §2).

    PYTHONPATH=lib python3 benchmarks/route.py [--for cifar10] [--out DIR]   # prints e.g. "grouped", writes DIR/route.json

Prints the route for the dataset named by ``--for`` (MNIST by default): the fastest route where it is at
least 10 % faster than the default, else "ghost" (every route computes the same run up to round-off:
``ZhengRun.per_sample``). A GPU session passes it on as ``--per-sample``. route.json also times a
non-private round (the non-private twins) by the default and by "matmul", the one route that changes it
(``LocalConfig.per_sample``), under "plain": a twin runs by matmul only when ``--per-sample`` says matmul,
so where "plain" chooses matmul and the DP route is another, run the twins in a call of their own.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine import DEVICE, route_times

from dpfl.models import CIFAR_CNN, MNIST_CNN
from dpfl.provenance import device_name

#: how much faster than the default another route must be to be chosen
MARGIN = 1.1


def choose(seconds: dict) -> str:
    """The fastest route of {route: seconds} if it beats "ghost" by ``MARGIN``, else "ghost"."""
    fastest = min(seconds, key=seconds.get)
    return fastest if seconds["ghost"] >= MARGIN * seconds[fastest] else "ghost"


def timings(seconds: dict, failed: dict | None) -> dict:
    """route.json's entry for one kind of round: each route's seconds, its speedup over the default,
    the routes that failed, and the choice. Seconds to 4 significant digits and speedups to 3, so that a
    small value (a GPU's milliseconds, a starved round's 0.04×) keeps its relative precision."""
    return {**{f"{r}_s": float(f"{t:.4g}") for r, t in seconds.items()},
            **{f"speedup_{r}": float(f"{seconds['ghost'] / t:.3g}") for r, t in seconds.items() if r != "ghost"},
            **({"failed": failed} if failed else {}), "route": choose(seconds)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="a directory for route.json (made if missing, before any timing)")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="each timing is the best of this many rounds")
    parser.add_argument("--for", dest="dataset", choices=["mnist", "cifar10"], default="mnist",
                        help="the dataset whose route is printed")
    args = parser.parse_args(argv)
    for name in ("clients", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = {}
    for name, model in (("mnist", MNIST_CNN), ("cifar10", CIFAR_CNN)):
        failed = {}                                  # a route that fails on this device is left out, not fatal
        seconds = route_times(args.clients, model=model, plain_routes=("ghost", "matmul"), failed=failed,
                              repeats=args.repeats)  # plain: the twins' non-private rounds, where only matmul differs
        for kind, routes in failed.items():
            for r, error in routes.items():
                print(f"{name}: {kind} route {r} failed: {error}", file=sys.stderr)
        rows[name] = {**timings(seconds["dp"], failed.get("dp")), "plain": timings(seconds["plain"], failed.get("plain"))}
        print(f"{name}: " + ", ".join(f"{r} {t:.3f} s" for r, t in seconds["dp"].items())
              + f" per DP round of {args.clients} clients: {rows[name]['route']}; non-private: "
              + ", ".join(f"{r} {t:.3f} s" for r, t in seconds["plain"].items()) + f": {rows[name]['plain']['route']}",
              file=sys.stderr)
    if args.out:
        Path(args.out, "route.json").write_text(json.dumps({"device": device_name(DEVICE), "clients": args.clients,
                                                            **rows}, indent=1) + "\n")
    print(rows[args.dataset]["route"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
