"""Speed and memory benchmarks, reported as ratios against a baseline measured in the same run.

    make bench            # or: python benchmarks/run.py

Absolute times depend on the machine; the ratios (vectorised versus the plain loop a reader might
write) are what we track. Nothing here is asserted: correctness lives in tests/.
"""
from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pandas as pd
from scipy.stats import norm

from dpfl.accounting import hockey_stick as hs
from dpfl.accounting import rdp, tradeoff


def best_time(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def peak_memory(fn) -> int:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def theta_loop(eps, r):
    return [norm.sf(e / x - x / 2) - math.exp(e) * norm.sf(e / x + x / 2) for e, x in zip(eps, r)]


def contraction_loop(K, eps):
    n = K.shape[0]
    return max(sum(max(a - math.exp(eps) * b, 0.0) for a, b in zip(K[i], K[j]))
               for i in range(n) for j in range(n))


def accounting_rows():
    """ε for 10⁵ Poisson-subsampled Gaussian steps (q = 0.01, σ = 1, δ = 1e-5), against
    dp_accounting in the same run: its RDP accountant (same orders) and its PLD (same grid)."""
    try:
        from dp_accounting import dp_event
        from dp_accounting.pld import privacy_loss_distribution as pld
        from dp_accounting.rdp import rdp_privacy_accountant as ra
    except ImportError:
        print("dp_accounting not installed: accounting baselines skipped")
        return []
    q, sigma, steps, delta = 0.01, 1.0, 100_000, 1e-5
    orders = rdp.DEFAULT_ORDERS

    def theirs_rdp():
        acc = ra.RdpAccountant(list(orders))
        acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
        return acc.get_epsilon(delta)

    ours_rdp = lambda: rdp.epsilon(steps * rdp.subsampled_gaussian(q, sigma, orders), orders, delta)
    theirs_pld = lambda: pld.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-4) \
        .self_compose(steps).get_epsilon_for_delta(delta)
    ours_pld = lambda: tradeoff.epsilon(tradeoff.compose_n(
        tradeoff.subsample(tradeoff.gaussian(1 / sigma), q), steps, h=1e-4), delta)
    print(f"ε at 10⁵ steps: RDP ours {ours_rdp():.4f} / dp_accounting {theirs_rdp():.4f}; "
          f"numerical composition ours (C_q, replace-one) {ours_pld():.3f} / dp_accounting PLD "
          f"(Poisson, add/remove) {theirs_pld():.3f} — different neighbouring relations, same grid h = 1e-4")
    return [
        ("ε, 10⁵ subsampled-Gaussian steps, RDP", "dp_accounting RdpAccountant",
         best_time(theirs_rdp), best_time(ours_rdp)),
        ("ε, 10⁵ steps, numerical composition (h = 1e-4)", "dp_accounting PLD",
         best_time(theirs_pld, repeat=2), best_time(ours_pld, repeat=2)),
    ]


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []

    n = 200_000
    eps, r = rng.uniform(0, 3, n), rng.uniform(0.05, 5, n)
    m = 2_000
    t_vec = best_time(lambda: hs.theta(eps, r)) / n
    t_loop = best_time(lambda: theta_loop(eps[:m], r[:m]), repeat=3) / m
    rows.append(("θ_ε(r), per point", "scalar scipy loop", t_loop, t_vec))

    K = rng.dirichlet(np.ones(60), size=40)
    t_vec = best_time(lambda: hs.contraction_coefficient(K, 0.5))
    t_loop = best_time(lambda: contraction_loop(K, 0.5), repeat=3)
    rows.append(("η_ε(K), 40×60 kernel", "Python double loop", t_loop, t_vec))

    grid = np.linspace(0, 3, 601)
    t_vec = best_time(lambda: hs.last_iterate_delta(grid, 0.1, 100, 1.5))
    t_loop = best_time(lambda: [hs.last_iterate_delta(e, 0.1, 100, 1.5) for e in grid], repeat=3)
    rows.append(("Theorem 2 on 601 ε", "one call per ε", t_loop, t_vec))

    rows += accounting_rows()

    table = pd.DataFrame(rows, columns=["what", "baseline", "baseline (s)", "dpfl (s)"])
    table["speed-up (×)"] = table["baseline (s)"] / table["dpfl (s)"]
    print(table.to_markdown(index=False, floatfmt=".3g"))

    big = rng.dirichlet(np.ones(200), size=50)
    peak = peak_memory(lambda: hs.contraction_coefficient(big, np.array([0.0, 0.5, 1.0])))
    dense = 3 * 50 * 50 * 200 * 8
    print(f"\npeak memory of η_ε(K) for a 50×200 kernel at 3 ε: {peak / 2**20:.1f} MiB "
          f"({peak / dense:.2f}× the 3·50·50·200 float64 pair tensor it materialises)")


if __name__ == "__main__":
    main()
