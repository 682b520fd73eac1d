"""dpfl.accounting.composition and .gaussian: dp_accounting's PLD, closed forms, orderings."""
import math

import pytest

from dpfl.accounting import composition, gaussian
from dpfl.accounting.hockey_stick import theta

pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
from dp_accounting.pld import common  # noqa: E402


@pytest.mark.parametrize("eps0, delta0, k, delta", [
    (0.1, 1e-6, 100, 1e-3), (0.5, 0.0, 50, 1e-5), (1.0, 1e-7, 10, 1e-4), (0.05, 0.0, 2000, 1e-6), (0.3, 1e-8, 300, 1e-5),
])
def test_optimal_composition_matches_dp_accounting(eps0, delta0, k, delta):
    """The PLD of the canonical (ε₀, δ₀) pair, self-composed, is the optimal composition."""
    params = common.DifferentialPrivacyParameters(eps0, delta0)
    # dp_accounting rounds losses up on a grid of width h: it bounds the exact ε from above, by
    # at most k·h; ours is the exact value.
    h = 1e-4
    ref = pld.from_privacy_parameters(params, value_discretization_interval=h).self_compose(k)
    ref_eps = ref.get_epsilon_for_delta(delta)
    ours, total_delta = composition.optimal(eps0, delta0, k, delta)
    assert total_delta == delta
    assert ref_eps - k * h <= ours <= ref_eps * (1 + 1e-7)
    assert composition.optimal_delta(eps0, delta0, k, ours) == pytest.approx(delta, rel=1e-6)


def test_optimal_delta_closed_cases():
    # one step: δ(ε) of randomized response = (e^{ε₀} − e^ε)/(1 + e^{ε₀}) for ε < ε₀
    e0, e = 1.0, 0.3
    assert composition.optimal_delta(e0, 0.0, 1, e) == pytest.approx((math.exp(e0) - math.exp(e)) / (1 + math.exp(e0)))
    assert composition.optimal_delta(e0, 0.0, 5, 5 * e0) == 0.0
    assert composition.optimal_delta(0.0, 1e-3, 10, 0.0) == pytest.approx(1 - (1 - 1e-3) ** 10)


@pytest.mark.parametrize("eps0, k", [(0.01, 1000), (0.1, 100), (0.5, 20), (1.0, 5)])
def test_optimal_le_kov_le_advanced_le_basic(eps0, k):
    delta = 1e-5
    opt = composition.optimal(eps0, 0.0, k, delta)[0]
    kov = composition.kov_bound(eps0, 0.0, k, delta)[0]
    adv = composition.advanced(eps0, 0.0, k, delta)[0]
    basic = composition.basic(eps0, 0.0, k)[0]
    assert opt <= kov + 1e-9 and opt <= basic + 1e-9
    assert kov <= basic + 1e-9
    if adv < basic:                       # where advanced composition is useful at all
        assert kov <= adv + 1e-9


def test_advanced_formula():
    eps, delta = composition.advanced(0.1, 1e-6, 100, 1e-5)
    assert eps == pytest.approx(math.sqrt(200 * math.log(1e5)) * 0.1 + 100 * 0.1 * math.expm1(0.1))
    assert delta == pytest.approx(100 * 1e-6 + 1e-5)


def test_analytic_gaussian_matches_dp_accounting_and_inverts():
    """Against dp_accounting's implementation of Balle & Wang's analytic Gaussian mechanism."""
    gm = pytest.importorskip("dp_accounting.gaussian_mechanism")
    for sigma in (0.3, 0.7, 1.0, 3.0, 30.0):
        for d in (1e-3, 1e-6, 1e-10, 1e-15):
            eps = gaussian.analytic_epsilon(sigma, d)
            assert eps == pytest.approx(gm.get_epsilon_gaussian(sigma, d), rel=1e-6, abs=1e-12)
            assert gaussian.analytic_delta(sigma, eps) == pytest.approx(d, rel=1e-6)
            assert gaussian.analytic_epsilon(2 * sigma, d, sensitivity=2.0) == pytest.approx(eps, rel=1e-9)
    for eps in (0.01, 0.5, 1.0, 8.0):
        for d in (1e-5, 1e-12):
            assert gaussian.analytic_sigma(eps, d) == pytest.approx(gm.get_sigma_gaussian(eps, d), rel=1e-6)
    s = gaussian.analytic_sigma(1.0, 1e-5)
    assert s == pytest.approx(3.7306, abs=1e-4)                 # Balle & Wang's calibration
    assert theta(1.0, 1.0 / s) == pytest.approx(1e-5, rel=1e-6)


def test_classic_gaussian_is_valid_and_looser_than_analytic():
    for eps in (0.1, 0.5, 0.9):
        for d in (1e-3, 1e-5):
            classic = gaussian.classic_sigma(eps, d)
            assert gaussian.analytic_delta(classic, eps) <= d
            assert gaussian.analytic_sigma(eps, d) <= classic
    # outside the theorem (ε ≥ 1) only on request, with the same formula
    assert gaussian.classic_sigma(2.0, 1e-5, strict=False) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 2)
    # Geyer's quoted bound: σ = √(2 ln(0.8/δ))/ε makes 0.8·exp(−(σε)²/2) = δ
    eps, d = 0.5, 1e-5
    sigma = math.sqrt(2 * math.log(0.8 / d)) / eps
    assert gaussian.classic_delta_bound(sigma, eps) == pytest.approx(d)
    assert gaussian.analytic_delta(sigma, eps) <= d


@pytest.mark.parametrize("call, name", [
    (lambda: composition.basic(-0.1, 0.0, 2), "eps0"), (lambda: composition.basic(0.1, 1.0, 2), "delta0"),
    (lambda: composition.basic(0.1, 0.0, 0), "k"), (lambda: composition.advanced(0.1, 0.0, 2, 0.0), "delta_prime"),
    (lambda: composition.optimal(0.1, 0.0, 2, 1.5), "delta"), (lambda: composition.optimal(0.1, 0.1, 10, 0.5), "delta"),
    (lambda: gaussian.classic_sigma(1.5, 1e-5), "eps"), (lambda: gaussian.classic_sigma(0.0, 1e-5, strict=False), "eps"), (lambda: gaussian.analytic_sigma(1.0, 0.0), "delta"),
    (lambda: gaussian.analytic_delta(0.0, 1.0), "sigma"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
