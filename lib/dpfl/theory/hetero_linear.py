"""FedHDP theory: heterogeneous DP in federated linear regression and point estimation.

Aldaghri, Mahdavifar & Beirami, *Federated Learning with Heterogeneous Differential Privacy*,
§3 (Lemmas 1–3, 6, 7; Theorem 8; App. A.6). **Reconstruction**: the paper's formulas were lost in
extraction; these are the re-derivations of ``docs/aldaghri_fedhdp.md`` §3, checked and in our tests
by Monte Carlo. Per coordinate (d-dimensional regression with X_kᵀX_k = nI is coordinate-wise
identical; point estimation is n = d = 1):

* global φ (flat prior); client truth φ_k = φ + ζ_k, ζ_k ~ N(0, τ²);
* local estimate x_k ~ N(φ_k, s²) (s² = β²/n for regression); update ψ_k = x_k + ξ_k with
  ξ_k ~ N(0, N_l σ_l²) for a client of privacy group l (σ_l² is the noise variance of the group
  *average*), ξ = 0 for non-private clients;
* A = τ² + s², B_l = τ² + s² + N_l σ_l², ρ = N_np/N.

Groups are given as ``counts`` (clients per group) and ``sigma2`` (σ_l² per group, 0 for the
non-private group).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from dpfl import checks

__all__ = ["simulate_rounds", "Population", "two_groups", "update_variances", "server_mse", "optimal_ratio",
           "optimal_server_mse", "hdp_fedavg_mse", "dp_fedavg_mse", "gaps", "gap_limits",
           "optimal_weights", "personalized_mse", "optimal_lambda", "bayes_mse", "simulate_round"]


@dataclasses.dataclass(frozen=True)
class Population:
    """Clients in privacy groups, with heterogeneity τ² and local-estimate variance s²."""

    counts: tuple
    sigma2: tuple
    tau2: float
    s2: float

    def __post_init__(self):
        if len(self.counts) != len(self.sigma2) or not self.counts:
            raise ValueError("counts and sigma2 must have the same (non-zero) number of groups")
        for c in self.counts:
            if isinstance(c, bool) or int(c) != c or c < 0:
                raise ValueError(f"counts must be non-negative integers; got {self.counts}")
        if sum(self.counts) < 2:
            raise ValueError(f"counts must add up to N ≥ 2 clients; got {self.counts}")
        checks.nonnegative("sigma2", np.asarray(self.sigma2, dtype=float))
        checks.nonnegative("tau2", self.tau2)
        checks.positive("s2", self.s2)

    @property
    def n(self) -> int:
        return int(sum(self.counts))

    @property
    def per_client_noise(self) -> np.ndarray:
        """V_l = N_l σ_l², the DP-noise variance one client of group l adds."""
        return np.asarray(self.counts, dtype=float) * np.asarray(self.sigma2, dtype=float)


def two_groups(N: int, rho: float, tau2: float, s2: float, sigma2_p: float, *, n_np: int | None = None) -> Population:
    """N clients, a fraction ρ (or exactly ``n_np``) of them non-private, the rest private with σ_p²."""
    N = checks.positive_int("N", N)
    checks.in_range("rho", rho, 0, 1)
    if n_np is None:
        n_np = int(round(rho * N))
    elif n_np != int(round(rho * N)):
        raise ValueError(f"n_np = {n_np} is inconsistent with rho·N = {rho * N:g}")
    if not 0 <= n_np <= N:
        raise ValueError(f"n_np must lie in [0, N]; got {n_np}")
    return Population((n_np, N - n_np), (0.0, float(sigma2_p)), tau2, s2)


def update_variances(pop: Population) -> np.ndarray:
    """B_l = τ² + s² + N_l σ_l² per group (A for the non-private group)."""
    return pop.tau2 + pop.s2 + pop.per_client_noise


def optimal_ratio(pop: Population) -> np.ndarray:
    """r_l* = B_1/B_l relative to the first (least private) group (Lemma 6; App. A.6).
    For two groups (np, p): r* = A/B = (τ² + s²)/(τ² + s² + N_p σ_p²)."""
    B = update_variances(pop)
    return B[0] / B


def server_mse(pop: Population, r) -> np.ndarray:
    """Var(φ̄ − φ) for weights proportional to r_l per client of group l (Lemma 2/6):
    (Σ_l N_l r_l² B_l)/(Σ_l N_l r_l)². For two groups pass the scalar r of the private group:
    (N_np A + r² N_p B)/(N_np + r N_p)²."""
    B = update_variances(pop)
    counts = np.asarray(pop.counts, dtype=float)
    r = np.asarray(r, dtype=float)
    if len(pop.counts) == 2 and (r.ndim == 0 or r.shape[-1] != 2):
        checks.in_range("r", r, 0, 1)
        r = np.stack([np.ones_like(r), r], axis=-1)
    num = np.sum(counts * r ** 2 * B, axis=-1)
    den = np.sum(counts * r, axis=-1) ** 2
    return num / den


def optimal_server_mse(pop: Population) -> float:
    """[Σ_l N_l/B_l]⁻¹, the server MSE at r* (eqs (29)/(78))."""
    return float(1.0 / np.sum(np.asarray(pop.counts) / update_variances(pop)))


def hdp_fedavg_mse(pop: Population) -> float:
    """HDP-FedAvg (uniform weights, r = 1): Σ_l N_l B_l / N² = (N A + N_p² σ_p²)/N² for two groups."""
    return float(np.sum(np.asarray(pop.counts) * update_variances(pop)) / pop.n ** 2)


def dp_fedavg_mse(pop: Population) -> float:
    """DP-FedAvg: every client adds the private per-client noise V_p = N_p σ_p² (the most private
    group's): (A + V_p)/N. This model of DP-FedAvg is our assumption (docs/aldaghri_fedhdp.md §3) (the only one that
    makes both Lemma 7 statements hold)."""
    return float((pop.tau2 + pop.s2 + np.max(pop.per_client_noise)) / pop.n)


def gaps(pop: Population) -> tuple:
    """Lemma 7: (HDP-FedAvg − FedHDP, DP-FedAvg − FedHDP) server MSE."""
    best = optimal_server_mse(pop)
    return hdp_fedavg_mse(pop) - best, dp_fedavg_mse(pop) - best


def gap_limits(rho: float, sigma2_p: float) -> tuple:
    """N → ∞ at fixed ρ, σ_p²: gap_HDP → (1−ρ)² σ_p², gap_DP → (1−ρ) σ_p² (Lemma 7)."""
    checks.in_range("rho", rho, 0, 1)
    checks.nonnegative("sigma2_p", sigma2_p)
    return (1 - rho) ** 2 * sigma2_p, (1 - rho) * sigma2_p


def optimal_weights(pop: Population, r=None) -> np.ndarray:
    """Per-client weight of each group: w_l = r_l / Σ_j N_j r_j (r defaults to r*)."""
    r = optimal_ratio(pop) if r is None else np.asarray(r, dtype=float)
    if len(pop.counts) == 2 and r.ndim == 0:
        r = np.array([1.0, float(r)])
    return r / np.sum(np.asarray(pop.counts) * r)


def personalized_mse(pop: Population, group: int, lam, weights=None) -> np.ndarray:
    """MSE of v_k(λ) = (x_k + λ φ̄)/(1 + λ) for a client of ``group`` (Lemma 3 / Theorem 8):
    [(1 + λw_k)² s² + λ²(w_k² V_k + (1 − w_k)² τ² + Σ_{j≠k} w_j² B_j)]/(1 + λ)²."""
    w_group = optimal_weights(pop) if weights is None else np.asarray(weights, dtype=float)
    checks.nonnegative("lam", lam)
    lam = np.asarray(lam, dtype=float)
    B = update_variances(pop)
    counts = np.asarray(pop.counts, dtype=float)
    wk, Vk = w_group[group], pop.per_client_noise[group]
    others = np.sum(counts * w_group ** 2 * B) - wk ** 2 * B[group]
    S = others + wk ** 2 * Vk + (1 - wk) ** 2 * pop.tau2
    with np.errstate(invalid="ignore"):
        out = ((1 + lam * wk) ** 2 * pop.s2 + lam ** 2 * S) / (1 + lam) ** 2
    limit = wk ** 2 * pop.s2 + S                                 # λ → ∞: the global model
    return np.where(np.isinf(lam), limit, out)


def optimal_lambda(pop: Population, group: int, weights=None) -> float:
    """λ* = s²(1 − w_k)/(Σ_{j≠k} w_j² B_j + w_k²(s² + V_k) + (1 − w_k)² τ² − w_k s²) (Thm 8).
    With r*: λ*_np = s²/τ² (Ditto) and λ*_p = s²/(τ² + w_p V_p/(1 − w_p)); ∞ when the
    denominator vanishes (e.g. no privacy and τ² = 0: FedAvg)."""
    w_group = optimal_weights(pop) if weights is None else np.asarray(weights, dtype=float)
    B = update_variances(pop)
    counts = np.asarray(pop.counts, dtype=float)
    wk, Vk = w_group[group], pop.per_client_noise[group]
    others = np.sum(counts * w_group ** 2 * B) - wk ** 2 * B[group]
    den = others + wk ** 2 * (pop.s2 + Vk) + (1 - wk) ** 2 * pop.tau2 - wk * pop.s2
    return float(np.inf) if den <= 1e-15 else float(pop.s2 * (1 - wk) / den)


def bayes_mse(pop: Population, group: int) -> float:
    """MSE of the local Bayes posterior mean of φ_k given x_k and the other clients' updates.

    φ | {ψ_j, j ≠ k} ~ N(φ̂₋ₖ, Σ₋ₖ) with Σ₋ₖ = [Σ_{j≠k} 1/B_j]⁻¹ (Lemma 1), so φ_k has prior
    N(φ̂₋ₖ, Σ₋ₖ + τ²) and likelihood x_k ~ N(φ_k, s²): MSE = [1/s² + 1/(Σ₋ₖ + τ²)]⁻¹.
    """
    B = update_variances(pop)
    precision = np.sum(np.asarray(pop.counts) / B) - 1.0 / B[group]
    sigma_minus = 1.0 / precision
    return float(1.0 / (1.0 / pop.s2 + 1.0 / (sigma_minus + pop.tau2)))


def simulate_round(pop: Population, reps: int, rng: np.random.Generator, *, d: int = 1, n: int = 1,
                   lams=(), r=None, dp_fedavg: bool = False):
    """One round of FedHDP (weights r, default r*) for ``reps`` independent populations at once.

    Linear regression with X_kᵀX_k = nI (X_k = √n × orthonormal columns), y_k = X_kφ_k + v_k,
    v_k ~ N(0, n s² I) so that the least-squares estimate has variance s²; point estimation is
    n = d = 1. Returns the squared server error per coordinate (reps,) and, for each λ in
    ``lams``, the squared personalised error of the first client of each group (reps, len(lams),
    groups). ``dp_fedavg`` makes every client add the private per-client noise, uniform weights.
    """
    reps = checks.positive_int("reps", reps)
    d, n = checks.positive_int("d", d), checks.positive_int("n", n)
    if n < d:
        raise ValueError(f"n must be at least d for X_kᵀX_k = nI; got n={n}, d={d}")
    group_of = np.repeat(np.arange(len(pop.counts)), pop.counts)
    N = group_of.size
    V = pop.per_client_noise[group_of]
    if dp_fedavg:
        V = np.full(N, np.max(pop.per_client_noise))
        w = np.full(N, 1.0 / N)
    else:
        w = optimal_weights(pop, r)[group_of]
    phi = rng.standard_normal((reps, 1, d))                       # any φ: the flat prior
    phi_k = phi + np.sqrt(pop.tau2) * rng.standard_normal((reps, N, d))
    if n == 1 and d == 1:
        x = phi_k + np.sqrt(pop.s2) * rng.standard_normal((reps, N, d))
    else:
        Q, _ = np.linalg.qr(rng.standard_normal((reps, N, n, d)))
        X = np.sqrt(n) * Q
        y = np.einsum("rknd,rkd->rkn", X, phi_k) + np.sqrt(n * pop.s2) * rng.standard_normal((reps, N, n))
        x = np.einsum("rknd,rkn->rkd", X, y) / n                  # (XᵀX)⁻¹Xᵀy
    psi = x + np.sqrt(V)[None, :, None] * rng.standard_normal((reps, N, d))
    phi_bar = np.einsum("k,rkd->rd", w, psi)
    server = np.mean((phi_bar - phi[:, 0]) ** 2, axis=-1)
    firsts = np.searchsorted(group_of, np.arange(len(pop.counts)))
    firsts = firsts[np.asarray(pop.counts) > 0]
    personal = np.empty((reps, len(lams), len(firsts)))
    for i, lam in enumerate(lams):
        v = (x[:, firsts] + lam * phi_bar[:, None, :]) / (1 + lam)
        personal[:, i] = np.mean((v - phi_k[:, firsts]) ** 2, axis=-1)
    return server, personal


def simulate_rounds(pop: Population, reps: int, rng: np.random.Generator, *, budget: int = 2_000_000, **kwargs):
    """``simulate_round`` in chunks of repetitions so that memory stays bounded (~budget floats
    per array), concatenated."""
    per_rep = pop.n * kwargs.get("n", 1) * kwargs.get("d", 1)
    size = max(1, budget // per_rep)
    parts = [simulate_round(pop, min(size, reps - start), rng, **kwargs) for start in range(0, reps, size)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
