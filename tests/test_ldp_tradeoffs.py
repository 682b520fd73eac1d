"""dpfl.theory.ldp_tradeoffs and ldp_fedsgd (Kim et al. reconstruction)."""
import math

import numpy as np
import pytest

from dpfl.theory import ldp_tradeoffs as kim
from dpfl.experiments.kim2021 import SANITY, FedSGDExperiment
from dpfl.theory.ldp_fedsgd import make_ridge_problem, run_fedsgd

ARGS = dict(q=0.01, C=1.0, delta=1e-5, T=100)


@pytest.mark.parametrize("method, eps, rel", [
    ("proposed", 0.25, 0.01), ("ma", 0.25, 0.01), ("proposed", 1.0, 0.01), ("ma", 1.0, 0.01),
    ("ac2", 1.0, 0.02), ("ac1", 1.0, 0.02), ("ac2", 4.0, 0.02), ("ac1", 4.0, 0.02),
])
def test_details_sanity_table(method, eps, rel):
    """The reconstruction's sanity values (SANITY, docs/kim2021.md §1), which the notebook compares with too."""
    assert kim.min_noise_variance(method, eps, **ARGS)[0] == pytest.approx(SANITY[(method, eps)], rel=rel)


def test_floor_cap_and_scaling_with_C():
    assert kim.min_noise_variance("proposed", 4.0, **ARGS) == (4.0, "floor")
    sigma2, status = kim.min_noise_variance("proposed", 0.25, q=0.01, C=1.0, delta=1e-5, T=1000)
    assert math.isnan(sigma2) and status.startswith("infeasible") and "cap" in status
    # q ≥ 1/16 leaves no valid region at all: shown as infeasible, never a number
    sigma2, status = kim.min_noise_variance("proposed", 1.0, q=0.07, C=1.0, delta=1e-5, T=100)
    assert math.isnan(sigma2) and status.startswith("infeasible")
    for m in kim.METHODS[:4]:
        a = kim.min_noise_variance(m, 1.0, **ARGS)[0]
        b = kim.min_noise_variance(m, 1.0, **(ARGS | {"C": 3.0}))[0]
        assert b == pytest.approx(9 * a, rel=1e-5)


def test_exact_is_tightest_and_rdp_exact_form_below_lemma3():
    for eps in (0.25, 1.0):
        exact = kim.min_noise_variance("exact", eps, **ARGS)[0]
        assert exact <= kim.min_noise_variance("proposed", eps, **ARGS)[0]
        assert kim.min_noise_variance("proposed", eps, **ARGS, rdp_form="exact")[0] <= \
            kim.min_noise_variance("proposed", eps, **ARGS)[0]


def test_utility_and_rate_bounds_closed_forms():
    assert kim.utility_bound(100, 4.0, 1.0, 10, 0.5, 1.0) == pytest.approx(0.25 * 100 / (2 * (1 + 40)))
    # heterogeneous users: C² + d Σ pᵢ² σᵢ²
    u = kim.utility_bound(10, [1.0, 9.0], 1.0, 2, 1.0, 1.0, weights=[0.5, 0.5])
    assert u == pytest.approx(10 / (2 * (1 + 2 * (0.25 + 2.25))))
    assert kim.rate_bound(1.0, 1.0, 1) == pytest.approx(0.5 * math.log2(2 * math.pi * math.e * 2))
    T = np.array([100, 1000])
    assert np.all(np.diff(kim.utility_bound(T, 4.0, 1.0, 10, 0.5, 1.0)) > 0)


@pytest.mark.parametrize("call, name", [
    (lambda: kim.min_noise_variance("proposed", 1.0, 1.0, 1.0, 1e-5, 10), "q"),
    (lambda: kim.min_noise_variance("proposed", 1.0, 0.01, 0.0, 1e-5, 10), "C"),
    (lambda: kim.min_noise_variance("proposed", 1.0, 0.01, 1.0, 1.0, 10), "delta"),
    (lambda: kim.min_noise_variance("proposed", 1.0, 0.01, 1.0, 1e-5, 0), "T"),
    (lambda: kim.min_noise_variance("magic", 1.0, 0.01, 1.0, 1e-5, 10), "method"),
    (lambda: kim.utility_bound(10, 1.0, 1.0, 10, 2.0, 1.0), "lam"),
    (lambda: kim.rate_bound(-1.0, 1.0, 10), "sigma2"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()


def test_ridge_problem_constants_and_unclipped_gradients():
    rng = np.random.default_rng(0)
    p = make_ridge_problem(5, 100, 4, 0.1, rng)
    assert 0 < p.lam <= p.beta and p.radius > np.linalg.norm(p.w_star)
    w, messages, clipped = run_fedsgd(p, 0.0, 0.5, 200, 3, rng)
    assert clipped == 0.0 and messages.shape == (200 * 3 * 5, 4)
    assert np.all(p.loss(w) - p.f_star < 1e-3)             # noiseless SGD converges


def test_fedsgd_measured_utility_above_bound_and_deterministic():
    exp = FedSGDExperiment((0.0, 40.0), ("none", "high"), q=0.05, T=30, n_users=8, n_per_user=200, repetitions=3)
    a, b = exp.compute(), exp.compute()
    assert a.equals(b)
    assert (a["measured utility"] >= a["utility bound"]).all()
    assert a["measured utility"].iloc[0] > a["measured utility"].iloc[1]   # no noise, more utility
