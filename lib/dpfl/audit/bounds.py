"""Lower bounds on a mechanism's privacy from a distinguishing attack's scores (pure functions).

An audit runs the mechanism many times on two neighbouring inputs — with the canary ("in") and with
its neighbour ("out") — and scores each output (higher: more likely "in"). A threshold test on the
scores has a true-positive rate TPR and a false-positive rate FPR. Every (ε, δ)-DP mechanism satisfies,
for every test, TPR ≤ e^ε·FPR + δ and 1 − FPR ≤ e^ε·(1 − TPR) + δ (Kairouz, Oh & Viswanath 2015), and
every μ-GDP mechanism TPR ≤ Φ(Φ⁻¹(FPR) + μ) (Dong, Roth & Su 2022, Def. 2.5). With a one-sided
Clopper–Pearson lower bound on TPR and upper bound on FPR, each at level α/2, the rates observed
therefore give, with confidence ≥ 1 − α,

    ε ≥ max(log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo)))   and   μ ≥ Φ⁻¹(TPR_lo) − Φ⁻¹(FPR_hi).

The threshold is chosen on the first half of each score array (where that half's bound on μ is highest)
and the bound computed on the second half, so the choice does not spend the confidence (Jagielski, Ullman &
Oprea 2020, §4; jax_privacy's ``auditing.Split`` does the same). Multi-run audits of this kind are
near-tight for the Gaussian mechanism when the canary is white-box (Nasr et al. 2023); docs/audits.md.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from dpfl import checks

__all__ = ["clopper_pearson_lower", "clopper_pearson_upper", "epsilon_from_rates", "mu_from_rates", "audit_scores"]


def clopper_pearson_lower(k, n: int, alpha: float):
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial rate from k successes in n trials
    (k a number or an array)."""
    k = np.asarray(k)
    out = np.where(k > 0, stats.beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)
    return float(out) if out.ndim == 0 else out


def clopper_pearson_upper(k, n: int, alpha: float):
    """One-sided (1 − α) Clopper–Pearson upper bound on a binomial rate from k successes in n trials
    (k a number or an array)."""
    k = np.asarray(k)
    out = np.where(k < n, stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)
    return float(out) if out.ndim == 0 else out


def epsilon_from_rates(tpr: float, fpr: float, delta: float) -> float:
    """The smallest ε an (ε, δ)-DP mechanism needs for a test with these rates (0 if none)."""
    out = 0.0
    if tpr > delta and fpr > 0:
        out = max(out, math.log((tpr - delta) / fpr))
    if 1 - fpr > delta and tpr < 1:
        out = max(out, math.log((1 - fpr - delta) / (1 - tpr)))
    return out


def mu_from_rates(tpr: float, fpr: float) -> float:
    """The smallest μ a μ-GDP mechanism needs for a test with these rates (0 if none)."""
    if tpr <= 0 or fpr >= 1:
        return 0.0
    return max(0.0, float(stats.norm.ppf(tpr) - stats.norm.ppf(fpr)))


def _counts_at_or_above(scores, thresholds):
    return scores.size - np.searchsorted(np.sort(scores), thresholds, side="left")


def audit_scores(in_scores, out_scores, delta: float, alpha: float = 0.05) -> dict:
    """Lower bounds on ε (at δ) and on μ from the attack scores of the "in" and "out" runs, each
    holding with confidence ≥ 1 − α (module docstring). Returns ``eps_lo``, ``mu_lo``, the threshold,
    the bounded rates ``tpr_lo``/``fpr_hi`` and the counts used."""
    in_scores, out_scores = np.asarray(in_scores, dtype=float), np.asarray(out_scores, dtype=float)
    checks.in_range("delta", delta, 0, 1, hi_open=True)
    checks.in_range("alpha", alpha, 0, 1, lo_open=True, hi_open=True)
    if in_scores.size < 20 or out_scores.size < 20:
        raise ValueError(f"need at least 20 scores per side; got {in_scores.size} in and {out_scores.size} out")
    hi, ho = in_scores.size // 2, out_scores.size // 2
    pick_in, pick_out, test_in, test_out = in_scores[:hi], out_scores[:ho], in_scores[hi:], out_scores[ho:]
    candidates = np.unique(np.concatenate([pick_in, pick_out]))
    # the threshold where the first half's own bound on μ is highest: no tail is chosen for luck
    first = stats.norm.ppf(clopper_pearson_lower(_counts_at_or_above(pick_in, candidates), hi, alpha / 2)) \
        - stats.norm.ppf(clopper_pearson_upper(_counts_at_or_above(pick_out, candidates), ho, alpha / 2))
    threshold = float(candidates[np.nanargmax(np.where(np.isfinite(first), first, -np.inf))])
    k_in, k_out = (int(_counts_at_or_above(v, threshold)) for v in (test_in, test_out))
    tpr_lo = clopper_pearson_lower(k_in, test_in.size, alpha / 2)
    fpr_hi = clopper_pearson_upper(k_out, test_out.size, alpha / 2)
    return {"eps_lo": epsilon_from_rates(tpr_lo, fpr_hi, delta), "mu_lo": mu_from_rates(tpr_lo, fpr_hi),
            "threshold": threshold, "tpr_lo": tpr_lo, "fpr_hi": fpr_hi, "n_in": int(test_in.size),
            "n_out": int(test_out.size), "confidence": 1 - alpha}
