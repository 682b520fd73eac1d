"""Zheng et al. 2021 explorer: (σ, p, B, rounds) → μ_max and ε(δ), the GDP CLT against the exact composition.

One client of Zheng's Algorithm 2 runs K = ⌈n/B⌉ DP-SGD steps per round (n = 600 MNIST images, 76
at B = 8 as in their code), each C_{B/n}(G_{1/σ})-DP under replace-one neighbours with batches
drawn without replacement. Theorem 2's μ_max is the central-limit Gaussian of the K·R steps — an
approximation, labelled so. Next to it: the exact composition on a loss grid of step h (the
pessimistic grid an upper bound on ε, the optimistic one a lower value; ``tradeoff.compose_n``),
and the same with Lemma 3.8's client sampling at rate p per round (``tradeoff.federated_amplify``).
docs/zheng2021.md §1–2; arXiv:2102.11158 Theorem 2, Lemma 3.8. Cached per setting.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pandas as pd

from dpfl.accounting import gdp
from dpfl.accounting import tradeoff as tf
from dpfl.experiments.zheng2021 import default_steps
from dpfl.explorers import Control, Explorer, Reading

__all__ = ["EXPLORER", "compute", "DELTAS"]

N_MNIST = 600
#: the δ at which the table reads ε (the paper's), and the δ grid of the curves
DELTA = 1e-5
DELTAS = tuple(np.geomspace(1e-9, 1e-2, 15))
#: the loss grid's step: ε's bracket stays within a few % at the defaults, a setting answers in < 1 s
H = 1e-3

CLT, LOW, HIGH, WITH_P = ("GDP CLT, Theorem 2's μ_max (approximation)", "exact ⊗KR, optimistic grid (lower value)",
                          "exact ⊗KR, pessimistic grid (upper bound)", "exact, Lemma 3.8's client sampling (upper bound)")


@functools.lru_cache(maxsize=256)
def _curves(sigma: float, p: float, B: int, rounds: int, n: int, h: float) -> dict:
    K = default_steps(n, B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gdp.ApproximationWarning)     # labelled in the table instead
        mu = float(gdp.clt_mu(sigma, B, n, K * rounds))
    step = tf.subsample(tf.gaussian(1.0 / sigma), B / n)
    low = tf.compose_n(step, K * rounds, h=h, pessimistic=False)
    high = tf.compose_n(step, K * rounds, h=h)
    per_round = tf.compose_n(step, K, h=h)
    eps = lambda f: np.array([tf.epsilon(f, d) for d in DELTAS])
    upper = eps(high)
    # with client sampling: rounds composed on their own grid; both are upper bounds, so the smaller holds
    sampled = np.minimum(eps(tf.compose_n(tf.federated_amplify(per_round, p), rounds, h=h)), upper) if p < 1 else upper
    return {"K": K, "mu": mu, CLT: np.array([float(gdp.epsilon(mu, d)) for d in DELTAS]),
            LOW: eps(low), HIGH: upper, WITH_P: sampled}


def compute(sigma: float, p: float, B: int, rounds: int, *, n: int = N_MNIST, h: float = H) -> Reading:
    """μ_max (CLT) and ε at δ = 1e-5 and over :data:`DELTAS` for one client after ``rounds`` rounds."""
    c = _curves(float(sigma), float(p), int(B), int(rounds), int(n), float(h))
    at = DELTAS.index(min(DELTAS, key=lambda d: abs(np.log(d / DELTA))))
    table = pd.DataFrame([{"accounting": name, f"ε at δ = {DELTAS[at]:.0e}": float(c[name][at]),
                           "a guarantee?": "no (CLT)" if name == CLT else "no (lower value)" if name == LOW else "yes"}
                          for name in (CLT, LOW, HIGH, WITH_P)])
    note = (f"K = {c['K']} steps per round, K·R = {c['K'] * rounds} steps; μ_max = {c['mu']:.3f} (GDP CLT, an "
            f"approximation: it can understate ε). Loss grid h = {h:g}.")
    return Reading(table, {"deltas": np.array(DELTAS), **{k: c[k] for k in (CLT, LOW, HIGH, WITH_P)}}, note)


def draw(reading: Reading, fig) -> None:
    ax = fig.subplots()
    d = reading.curves["deltas"]
    ax.fill_between(d, reading.curves[LOW], reading.curves[HIGH], color="C0", alpha=0.25, label="exact ⊗KR (bracket)")
    ax.plot(d, reading.curves[HIGH], color="C0")
    ax.plot(d, reading.curves[WITH_P], color="C2", ls="-.", label="exact, with client sampling p")
    ax.plot(d, reading.curves[CLT], color="C3", ls="--", label="GDP CLT μ_max (approx.)")
    ax.set(xscale="log", xlabel="δ", ylabel="ε", title="ε(δ) of one client: CLT vs exact composition")
    ax.legend(fontsize=8)


EXPLORER = Explorer(
    "Zheng et al. 2021 — μ_max and ε(δ) of one client (MNIST, n = 600)",
    (Control("sigma", "σ (Zheng's)", (0.5, 0.6, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0), 0.75),
     Control("p", "client sampling p", (0.1, 0.25, 0.5, 0.75, 1.0), 1.0),
     Control("B", "batch size B", (8, 16, 32, 64), 16),
     Control("rounds", "rounds R", (10, 25, 50, 64, 93, 127, 200, 300, 500), 64)),
    compute, draw)
