"""dpfl.accounting.gdp: Zheng et al.'s published μ values, opacus, closed forms."""
import numpy as np
import pytest

from dpfl.accounting import gdp
from dpfl.experiments.zheng2021 import published

# Tables 1–3 (dpfl.experiments.zheng2021.PUBLISHED): (table, σ, B, n, K, R, published μ_max)
ZHENG_MU = [(r.table, r.sigma, r.B, r.n, r.K, r.R, r.mu) for r in published().itertuples()]


@pytest.mark.parametrize("table, sigma, B, n, K, R, mu", ZHENG_MU)
def test_clt_mu_reproduces_zheng_tables(table, sigma, B, n, K, R, mu):
    assert gdp.clt_mu(sigma, B, n, K * R) == pytest.approx(mu, abs=0.01)


def test_poisson_clt_does_not_reproduce_the_tables():
    """docs/zheng2021.md §1: the Poisson CLT gives 2.08 instead of 2.71 — the tables use the WOR form."""
    assert gdp.clt_mu_poisson(1.0, 16 / 600, 38 * 93) == pytest.approx(2.08, abs=0.01)


@pytest.mark.parametrize("sigma, q, steps", [(1.0, 0.01, 1000), (0.7, 0.05, 300), (2.0, 0.001, 10 ** 6)])
def test_poisson_mu_and_epsilon_match_opacus(sigma, q, steps):
    ogdp = pytest.importorskip("opacus.accountants.analysis.gdp")
    mu = gdp.clt_mu_poisson(sigma, q, steps)
    assert mu == pytest.approx(ogdp.compute_mu_poisson(steps=steps, noise_multiplier=sigma, sample_rate=q), rel=1e-12)
    eps_ref = ogdp.compute_eps_poisson(steps=steps, noise_multiplier=sigma, sample_rate=q, delta=1e-5)
    assert gdp.epsilon(mu, 1e-5) == pytest.approx(eps_ref, rel=1e-6)


def test_epsilon_inverts_delta_and_matches_details_table():
    # docs/zheng2021.md §1: GDP → (ε, δ) at δ = 1e-5 (a conversion, not the paper's numbers).
    for mu, eps in [(2.71, 14.6), (3.92, 23.7), (5.52, 38.0), (9.31, 82.2)]:
        assert gdp.epsilon(mu, 1e-5) == pytest.approx(eps, abs=0.06)
    eps = gdp.epsilon(np.array([0.5, 1.0, 3.0]), 1e-6)
    np.testing.assert_allclose(gdp.delta(np.array([0.5, 1.0, 3.0]), eps), 1e-6, rtol=1e-8)


def test_composition_and_federated_mu():
    assert gdp.compose(3.0, 4.0) == pytest.approx(5.0)
    mu1 = gdp.clt_mu(1.0, 16, 600, 38 * 50)
    mu2 = gdp.clt_mu(1.0, 16, 600, 38 * 50)
    assert gdp.compose(mu1, mu2) == pytest.approx(gdp.clt_mu(1.0, 16, 600, 38 * 100), rel=1e-12)
    assert gdp.strong_federated_mu(2.0, 101) == pytest.approx(20.0)


def test_monotone_in_sigma_and_steps():
    sig = np.linspace(0.3, 100, 200)
    assert np.all(np.diff(gdp.clt_mu(sig, 16, 600, 1000)) < 0)
    assert np.all(np.diff(gdp.clt_mu(1.0, 16, 600, np.arange(1, 10 ** 6, 1000))) > 0)


@pytest.mark.parametrize("call, name", [
    (lambda: gdp.clt_mu(0.0, 16, 600, 10), "sigma"), (lambda: gdp.clt_mu(1.0, 700, 600, 10), "batch_size"),
    (lambda: gdp.clt_mu(1.0, 16, 600, 0), "steps"), (lambda: gdp.clt_mu_poisson(1.0, 1.5, 10), "q"),
    (lambda: gdp.epsilon(1.0, 1.0), "delta"), (lambda: gdp.delta(1.0, -1.0), "eps"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
