"""Argument validation shared by the whole package.

Every public function checks its inputs with these helpers so that bad input fails early with a
``ValueError`` naming the parameter and the accepted range, never deep inside NumPy.
"""
from __future__ import annotations

import numbers
import re
from typing import Iterable

import numpy as np


def _describe(lo, hi, lo_open, hi_open, finite=True) -> str:
    left = "(" if lo_open or (lo is None and finite) else "["
    right = ")" if hi_open or (hi is None and finite) else "]"
    lo_s = "-inf" if lo is None else f"{lo:g}"
    hi_s = "inf" if hi is None else f"{hi:g}"
    return f"{left}{lo_s}, {hi_s}{right}"


def in_range(name: str, value, lo=None, hi=None, *, lo_open: bool = False, hi_open: bool = False,
             finite: bool = True):
    """Return ``value`` (scalar or array) after checking that every entry lies in the interval.

    Raises ``ValueError`` naming ``name`` and the interval otherwise. NaN is always rejected and
    ±inf too unless ``finite=False`` (σ = ∞ or ε = ∞ are limits, not settings a run can have).
    """
    if np.asarray(value).dtype == bool:
        raise ValueError(f"{name} must be a number, not a boolean; got {value!r}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {value!r}") from None
    bad = np.isnan(arr)
    if finite:
        bad |= np.isinf(arr)
    if lo is not None:
        bad |= arr <= lo if lo_open else arr < lo
    if hi is not None:
        bad |= arr >= hi if hi_open else arr > hi
    if np.any(bad):
        shown = value if arr.ndim == 0 else arr[bad].ravel()[:3].tolist()
        raise ValueError(
            f"{name} must lie in {_describe(lo, hi, lo_open, hi_open, finite)}; got {shown}"
        )
    return value


def positive(name: str, value, *, finite: bool = True):
    """Check ``value > 0`` (entrywise; finite unless ``finite=False``)."""
    return in_range(name, value, 0, None, lo_open=True, finite=finite)


def nonnegative(name: str, value, *, finite: bool = True):
    """Check ``value >= 0`` (entrywise; finite unless ``finite=False``)."""
    return in_range(name, value, 0, None, finite=finite)


def counts(name: str, value):
    """Check that every entry of ``value`` (scalar or array) is a whole number >= 1 and return it.

    Integral floats (3.0) pass, as step counts often come out of arithmetic; fractions, booleans,
    NaN and ±inf are rejected with the parameter's name."""
    in_range(name, value, 1, None)                  # also rejects booleans
    arr = np.asarray(value, dtype=float)
    if np.any(arr != np.round(arr)):
        shown = value if arr.ndim == 0 else arr[arr != np.round(arr)].ravel()[:3].tolist()
        raise ValueError(f"{name} must be a positive integer (>= 1); got {shown}")
    return value


def positive_int(name: str, value) -> int:
    """Check that ``value`` is an integer >= 1 (bools are rejected) and return it as ``int``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1); got {value!r}")
    return int(value)


def nonnegative_int(name: str, value) -> int:
    """Check that ``value`` is an integer >= 0 (bools are rejected) and return it as ``int``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer (>= 0); got {value!r}")
    return int(value)


def one_of(name: str, value, choices: Iterable):
    """Check that ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def device(name: str, value, *, auto: bool = False) -> str:
    """Check that ``value`` names a device runs can go to: ``"cpu"``, ``"mps"``, ``"cuda"`` or ``"cuda:N"`` (and
    ``"auto"`` where ``auto``: a choice made later, by ``dpfl.notebook.resolve_device``)."""
    if not isinstance(value, str) or not (_DEVICE.match(value) or (auto and value == "auto")):
        names = "'auto', " * auto + "'cpu', 'mps', 'cuda' or 'cuda:N'"
        raise ValueError(f"{name} must be {names}; got {value!r}")
    return value
