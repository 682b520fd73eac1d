"""dpfl.theory.hetero_linear (FedHDP theory, reconstruction): the values of docs/aldaghri_fedhdp.md §3, Monte Carlo, limits."""
import numpy as np
import pytest

from dpfl.experiments.aldaghri_fedhdp import CHECK_POINT, CHECK_POINT_VALUES as REF, MonteCarloCheck
from dpfl.theory import hetero_linear as hl

BASE = CHECK_POINT


def test_details_check_values():
    pop = hl.two_groups(**BASE)
    assert hl.optimal_server_mse(pop) == pytest.approx(REF["server MSE, FedHDP (r*)"], abs=1e-5)
    assert hl.hdp_fedavg_mse(pop) == pytest.approx(REF["server MSE, HDP-FedAvg"], abs=1e-5)
    assert hl.dp_fedavg_mse(pop) == pytest.approx(REF["server MSE, DP-FedAvg"], abs=1e-5)
    assert hl.optimal_lambda(pop, 0) == pytest.approx(REF["λ*_np"])
    assert hl.optimal_lambda(pop, 1) == pytest.approx(REF["λ*_p"], abs=0.01)
    g_hdp, g_dp = hl.gaps(hl.two_groups(**(BASE | {"N": 100_000})))
    assert (g_hdp, g_dp) == (pytest.approx(REF["gap_HDP at N = 1e5"], abs=1e-5), pytest.approx(REF["gap_DP at N = 1e5"], abs=1e-5))
    assert hl.gap_limits(0.05, 0.05) == (pytest.approx(0.045125), pytest.approx(0.0475))


def test_server_mse_minimised_at_r_star_and_multilevel_ratios():
    pop = hl.two_groups(**BASE)
    rs = np.linspace(0.001, 1, 5000)
    assert rs[np.argmin(hl.server_mse(pop, rs))] == pytest.approx(hl.optimal_ratio(pop)[1], abs=2e-4)
    assert hl.server_mse(pop, hl.optimal_ratio(pop)[1]) == pytest.approx(hl.optimal_server_mse(pop))
    three = hl.Population((10, 30, 60), (0.0, 0.02, 0.1), 0.2, 0.3)
    B = hl.update_variances(three)
    np.testing.assert_allclose(hl.optimal_ratio(three), B[0] / B)
    assert hl.server_mse(three, hl.optimal_ratio(three)) == pytest.approx(hl.optimal_server_mse(three))


def test_optimal_lambda_is_the_argmin_of_the_client_mse():
    pop = hl.Population((10, 30, 60), (0.0, 0.02, 0.1), 0.2, 0.3)
    lams = np.geomspace(1e-3, 1e3, 20001)
    for g in range(3):
        assert lams[np.argmin(hl.personalized_mse(pop, g, lams))] == pytest.approx(hl.optimal_lambda(pop, g), rel=2e-3)


def test_monte_carlo_matches_closed_forms_for_regression_and_point_estimation():
    for kwargs in (dict(), dict(d=3, n=6)):
        table = MonteCarloCheck((5, 95), (0.0, 0.05), 0.1, 0.5, reps=3000, seed=1, **kwargs).compute()
        assert (table["z"].abs() <= 4).all(), table.to_string()


def test_bayes_and_special_cases():
    pop = hl.two_groups(**BASE)
    assert hl.personalized_mse(pop, 0, hl.optimal_lambda(pop, 0)) == pytest.approx(hl.bayes_mse(pop, 0), rel=1e-12)
    assert hl.personalized_mse(pop, 1, hl.optimal_lambda(pop, 1)) > hl.bayes_mse(pop, 1)
    assert hl.optimal_lambda(hl.Population((50,), (0.0,), 0.0, 0.5), 0) == np.inf
    assert hl.optimal_lambda(hl.Population((50,), (0.04,), 0.2, 0.5), 0) == pytest.approx(0.5 / (0.2 + 2.0 / 49))


@pytest.mark.parametrize("call, name", [
    (lambda: hl.two_groups(100, 1.5, 0.1, 0.5, 0.05), "rho"),
    (lambda: hl.two_groups(100, 0.05, -0.1, 0.5, 0.05), "tau2"),
    (lambda: hl.two_groups(100, 0.05, 0.1, 0.0, 0.05), "s2"),
    (lambda: hl.two_groups(100, 0.05, 0.1, 0.5, -1.0), "sigma2"),
    (lambda: hl.two_groups(100, 0.05, 0.1, 0.5, 0.05, n_np=20), "n_np"),
    (lambda: hl.server_mse(hl.two_groups(100, 0.05, 0.1, 0.5, 0.05), 1.5), "r"),
    (lambda: hl.Population((5, 95), (0.0,), 0.1, 0.5), "counts"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
