"""dpfl.theory.contraction_search and projected_noisy_gd (Asoodeh & Calmon numerical checks)."""
import numpy as np
import pytest

from dpfl.accounting import hockey_stick as hs
from dpfl.experiments.asoodeh2020 import Algorithm1MonteCarlo, Theorem1Check
from dpfl.theory.contraction_search import random_kernel, search_ratio
from dpfl.theory.projected_noisy_gd import empirical_hockey_stick, simulate_last_iterate


def test_theorem1_search_never_exceeds_and_reaches_two_point():
    table = Theorem1Check(n_kernels=3, n_pairs=1_000, eps=(0.0, 0.5), seed=5).compute()
    found = table.filter(like="random_max").max(axis=1).combine(table.refined_max, max)
    assert (found - table.two_point).max() <= 1e-9
    assert (table.two_point - table.refined_max).max() <= 1e-6


def test_search_ratio_flat_inputs_stay_below_sharp_inputs():
    rng = np.random.default_rng(0)
    K = random_kernel(4, 6, rng)
    by_alpha, refined = search_ratio(K, 0.3, rng, n_pairs=4_000)
    assert by_alpha[1.0] < by_alpha[0.03] <= refined + 1e-15


def test_simulation_without_projection_is_gaussian():
    """ρ huge: W_T = −η Σ_t mean(batch_t) − noise, i.e. N(−η·T·mean(x), T·η²σ²/m)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 20)
    w = simulate_last_iterate(x, 0.25, sigma=1.0, eta=0.5, rho=1e9, n_samples=200_000, rng=rng)
    T, m = 4, 5
    assert w.mean() == pytest.approx(-0.5 * T * x.mean(), abs=4 * np.sqrt(T * 0.25 / m / 200_000))
    assert w.var() == pytest.approx(T * 0.25 / m, rel=0.02)


def test_simulation_is_deterministic_given_the_generator():
    x = np.linspace(-1, 1, 10)
    a = simulate_last_iterate(x, 0.5, 1.0, 0.5, 1.0, 1000, np.random.default_rng(7))
    b = simulate_last_iterate(x, 0.5, 1.0, 0.5, 1.0, 1000, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)


def test_empirical_hockey_stick_on_known_distributions():
    rng = np.random.default_rng(2)
    a = np.clip(rng.normal(0.3, 0.5, 400_000), -1, 1)
    b = np.clip(rng.normal(0.0, 0.5, 400_000), -1, 1)
    # Projection is post-processing, so E_ε ≤ θ_ε(0.3/0.5); fine bins recover most of it.
    est = empirical_hockey_stick(a, b, 0.0, rho=1.0, bins=200)
    assert est == pytest.approx(hs.theta(0.0, 0.6), abs=0.01)
    assert empirical_hockey_stick(a, a, np.array([0.0, 1.0]), rho=1.0).max() == 0.0


def test_monte_carlo_stays_below_theorem2():
    table = Algorithm1MonteCarlo(q=0.1, n_samples=20_000, eps=(0.0, 0.25)).compute()
    assert np.all(table.empirical <= table.theorem2)
    assert table.empirical.iloc[0] > table.noise_floor.iloc[0]   # a real signal above the bias


def test_simulation_rejects_q_that_does_not_divide_n():
    with pytest.raises(ValueError, match="^q"):
        simulate_last_iterate(np.zeros(100), 0.3, 1.0, 0.5, 1.0, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="^n_samples"):
        simulate_last_iterate(np.zeros(100), 0.1, 1.0, 0.5, 1.0, 0, np.random.default_rng(0))
