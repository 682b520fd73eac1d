"""Every accountant over the issue's robustness box: finite, monotone, no warnings.

ε ∈ [0.01, 100], δ down to 1e-15, steps up to 10⁶, σ from 0.3 to 100.
"""
import warnings

import numpy as np
import pytest

from dpfl.accounting import composition, gaussian, gdp, rdp, tradeoff

SIGMAS = (0.3, 1.0, 10.0, 100.0)
DELTAS = (1e-15, 1e-10, 1e-5, 1e-2)
EPSILONS = np.geomspace(0.01, 100, 25)


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", gdp.ApproximationWarning)     # the CLT's label, not a numerical fault
        yield


@pytest.mark.parametrize("sigma", SIGMAS)
def test_gdp_box(sigma):
    mus = gdp.clt_mu(sigma, 16, 600, np.array([1, 100, 10 ** 4, 10 ** 6]))
    for mu in mus:
        eps = [gdp.epsilon(mu, d) for d in DELTAS]
        assert np.all(np.isfinite(eps)) and np.all(np.diff(eps) <= 0)
        d = gdp.delta(mu, EPSILONS)
        assert np.all(np.isfinite(d)) and np.all(np.diff(d) <= 0)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_rdp_box(sigma):
    orders = rdp.DEFAULT_ORDERS
    for sampling in rdp.SAMPLINGS:
        curve = rdp.subsampled_gaussian(0.01, sigma, orders, sampling)
        for steps in (1, 10 ** 6):
            eps = [rdp.epsilon(steps * curve, orders, d) for d in DELTAS]
            assert np.all(np.isfinite(eps)) and np.all(np.diff(eps) <= 1e-12)
            d = [rdp.delta(steps * curve, orders, e) for e in EPSILONS]
            assert np.all(np.isfinite(d)) and np.all(np.diff(d) <= 1e-15)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_tradeoff_box(sigma):
    f = tradeoff.subsample(tradeoff.gaussian(1 / sigma), 0.01)
    d = tradeoff.to_epsilon_delta(f, EPSILONS)
    assert np.all(np.isfinite(d)) and np.all(np.diff(d) <= 1e-15)
    for d_target in DELTAS:
        assert np.isfinite(tradeoff.epsilon(f, d_target))
    composed = tradeoff.compose_n(f, 10 ** 4, h=1e-3)
    eps = [tradeoff.epsilon(composed, d_target) for d_target in DELTAS]
    assert np.all(np.isfinite(eps)) and np.all(np.diff(eps) <= 1e-12)


def test_composition_and_gaussian_box():
    for eps0 in (0.01, 0.1, 1.0):
        for d in (1e-15, 1e-5):
            e = [composition.optimal(eps0, 0.0, k, d)[0] for k in (1, 10, 1000)]
            assert np.all(np.isfinite(e)) and np.all(np.diff(e) >= 0)
    for sigma in SIGMAS:
        eps = [gaussian.analytic_epsilon(sigma, d) for d in DELTAS]
        assert np.all(np.isfinite(eps)) and np.all(np.diff(eps) <= 0)
