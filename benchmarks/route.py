"""Which DP-SGD per-sample route a Zheng run should take on this machine: row (f) of ``make bench``
(one ``local_train`` round of 100 clients, 2 DP steps of B = 16, best of 3) for MnistCNN and the
CIFAR-10 CNN, with the default route (ghost clipping) and with unfolded convolutions.

    PYTHONPATH=lib python3 benchmarks/route.py [--out DIR]    # prints e.g. "unfold", writes DIR/route.json

Prints the route for MNIST: "unfold" where it is at least 10 % faster, else "ghost" (the two compute the
same run up to round-off: ``ZhengRun.per_sample``). A GPU session passes it on as ``--per-sample``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine import DEVICE, route_ratio

from dpfl.models import CIFAR_CNN, MNIST_CNN
from dpfl.provenance import device_name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="a directory for route.json")
    parser.add_argument("--clients", type=int, default=100)
    args = parser.parse_args(argv)
    rows = {}
    for name, model in (("mnist", MNIST_CNN), ("cifar10", CIFAR_CNN)):
        ghost, unfold = route_ratio(args.clients, model=model)
        rows[name] = {"ghost_s": round(ghost, 4), "unfold_s": round(unfold, 4), "speedup": round(ghost / unfold, 3)}
        print(f"{name}: ghost {ghost:.3f} s, unfold {unfold:.3f} s per round of {args.clients} clients: "
              f"{ghost / unfold:.2f}×", file=sys.stderr)
    choice = "unfold" if rows["mnist"]["speedup"] >= 1.1 else "ghost"
    if args.out:
        Path(args.out, "route.json").write_text(json.dumps({"device": device_name(DEVICE), "clients": args.clients,
                                                            **rows, "mnist_route": choice}, indent=1) + "\n")
    print(choice)
    return 0


if __name__ == "__main__":
    sys.exit(main())
