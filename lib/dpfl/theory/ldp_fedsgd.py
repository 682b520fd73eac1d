"""FedSGD with local DP on a strongly convex problem: checks Kim et al.'s bounds empirically.

Federated ridge regression, F(w) = (1/n) Σⱼ ½(xⱼᵀw − yⱼ)² + (ρ/2)‖w‖², strongly convex with
λ = λ_min(H) and smooth with β = λ_max(H), H = XᵀX/n + ρI, both computed from the data. N users;
each round user i samples each of its points with probability q, computes the mean gradient of
its local loss on the sample, clips it to C and sends g̃ᵢ + N(0, σ²I); the server takes
ĝ = Σᵢ pᵢ(g̃ᵢ + nᵢ), pᵢ = |D̃ᵢ|/|D̃| (Kim et al. eq. (3)), and steps w ← proj_D(w − ĝ/(λt))
(Rakhlin, Shamir & Sridharan 2012). The ball radius D contains w*, and C is at least the largest
gradient norm on that ball, so clipping never biases the gradient: the setting of the utility
bound U(T) ≥ λ²T/(2β(C² + dΣpᵢ²σ²)). Vectorised over repetitions and users.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from dpfl import checks

__all__ = ["RidgeProblem", "make_ridge_problem", "run_fedsgd"]


@dataclasses.dataclass(frozen=True)
class RidgeProblem:
    X: np.ndarray            # (N, n_i, d) features per user
    y: np.ndarray            # (N, n_i)
    ridge: float
    w_star: np.ndarray
    f_star: float
    lam: float
    beta: float
    radius: float
    clip: float

    def loss(self, w):
        """F(w) for one or many parameter vectors (leading axes)."""
        resid = np.einsum("nkd,...d->...nk", self.X, w) - self.y
        return 0.5 * np.mean(resid ** 2, axis=(-2, -1)) + 0.5 * self.ridge * np.sum(w ** 2, axis=-1)


def make_ridge_problem(n_users: int, n_per_user: int, d: int, ridge: float, rng: np.random.Generator,
                       noise: float = 0.1) -> RidgeProblem:
    """Features uniform on the unit sphere, y = xᵀw₀ + noise with ‖w₀‖ = 1; D = 2‖w*‖ and C the
    largest gradient norm over the D-ball (a bound over all points, so clipping never binds)."""
    checks.positive_int("n_users", n_users)
    checks.positive_int("n_per_user", n_per_user)
    checks.positive_int("d", d)
    checks.positive("ridge", ridge)
    X = rng.standard_normal((n_users, n_per_user, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    w0 = rng.standard_normal(d)
    w0 /= np.linalg.norm(w0)
    y = X @ w0 + noise * rng.standard_normal((n_users, n_per_user))
    flat_X, flat_y = X.reshape(-1, d), y.reshape(-1)
    H = flat_X.T @ flat_X / flat_X.shape[0] + ridge * np.eye(d)
    w_star = np.linalg.solve(H, flat_X.T @ flat_y / flat_X.shape[0])
    eig = np.linalg.eigvalsh(H)
    radius = 2 * float(np.linalg.norm(w_star))
    # ‖x(xᵀw − y) + ρw‖ ≤ ‖x‖(‖x‖D + |y|) + ρD with ‖x‖ = 1
    clip = float(radius + np.abs(flat_y).max() + ridge * radius)
    problem = RidgeProblem(X, y, ridge, w_star, 0.0, float(eig[0]), float(eig[-1]), radius, clip)
    return dataclasses.replace(problem, f_star=float(problem.loss(w_star)))


def run_fedsgd(problem: RidgeProblem, sigma2: float, q: float, T: int, repetitions: int,
               rng: np.random.Generator):
    """Run T rounds for ``repetitions`` independent runs at once.

    Returns (final parameters (R, d), every noisy message sent (T·R·N, d), fraction of user
    gradients that were clipped).
    """
    checks.nonnegative("sigma2", sigma2)
    checks.in_range("q", q, 0, 1, lo_open=True)
    T = checks.positive_int("T", T)
    R = checks.positive_int("repetitions", repetitions)
    N, n_i, d = problem.X.shape
    w = np.zeros((R, d))
    sigma = float(np.sqrt(sigma2))
    messages, clipped = [], 0
    for t in range(1, T + 1):
        mask = rng.random((R, N, n_i)) < q
        counts = mask.sum(axis=-1)                                         # |D̃ᵢ|
        resid = np.einsum("nkd,rd->rnk", problem.X, w) - problem.y
        grads = np.einsum("rnk,nkd->rnd", mask * resid, problem.X) / np.maximum(counts, 1)[..., None]
        grads += problem.ridge * w[:, None, :]
        grads = np.where(counts[..., None] > 0, grads, 0.0)
        norms = np.linalg.norm(grads, axis=-1, keepdims=True)
        clipped += int((norms > problem.clip).sum())
        grads = grads / np.maximum(1.0, norms / problem.clip)
        noisy = grads + sigma * rng.standard_normal(grads.shape)
        messages.append(noisy.reshape(-1, d))
        weights = counts / np.maximum(counts.sum(axis=-1, keepdims=True), 1)   # pᵢ = |D̃ᵢ|/|D̃|
        step = np.einsum("rn,rnd->rd", weights, noisy)
        w = w - step / (problem.lam * t)
        norm_w = np.linalg.norm(w, axis=-1, keepdims=True)
        w = w / np.maximum(1.0, norm_w / problem.radius)                    # proj onto the D-ball
    return w, np.concatenate(messages), clipped / (T * R * N)
