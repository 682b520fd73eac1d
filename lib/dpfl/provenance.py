"""Where a result came from: package version, git commit, device, time."""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import dpfl


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the checkout this package runs from, with ``+dirty`` if it has local changes
    outside ``figures/`` (regenerated outputs are not code). ``"unknown"`` outside a git checkout.
    """
    root = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                ":(top,exclude)figures"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def device_name(device=None) -> str:
    """``device`` (or, if None, the accelerator when torch is loaded and sees one), named with its model."""
    torch = sys.modules.get("torch")
    kind = str(device) if device is not None else None
    if torch is not None and torch.cuda.is_available() and (kind is None or kind.startswith("cuda")):
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def provenance(*, device=None, **extra) -> dict:
    """A JSON-able record of the environment a result was computed in, plus ``extra`` fields.
    With ``device`` (where the result was computed), also what its numbers depend on there
    (``dpfl.device.describe``: GPU model, SM count, CUDA/cuDNN versions, precision flags)."""
    record = {
        "package": "dpfl",
        "version": dpfl.__version__,
        "git_commit": git_commit(),
        "device": device_name(device),
        "python": platform.python_version(),
        "host": platform.node(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if device is not None:
        from dpfl.device import describe

        record["device_info"] = describe(device)
    record.update(extra)
    return record
