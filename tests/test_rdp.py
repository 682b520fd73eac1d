"""dpfl.accounting.rdp: against dp_accounting and opacus, exact PLD bounds, properties, robustness."""
import math
import warnings

import numpy as np
import pytest

from dpfl.accounting import rdp

ra = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
from dp_accounting import dp_event  # noqa: E402

GRID_Q = (0.001, 0.01, 0.1, 0.5)
GRID_SIGMA = (0.5, 0.7, 1.0, 2.0, 10.0)
INT_ORDERS = np.array([2, 3, 4, 5, 8, 16, 32, 64, 128, 256], dtype=float)
FRAC_ORDERS = np.array([1.5, 1.75, 2.5, 3.5, 7.5, 12.25], dtype=float)


@pytest.mark.parametrize("q", GRID_Q)
@pytest.mark.parametrize("sigma", GRID_SIGMA)
def test_poisson_rdp_matches_dp_accounting(q, sigma):
    ours = rdp.subsampled_gaussian(q, sigma, INT_ORDERS)
    ref = ra._compute_rdp_poisson_subsampled_gaussian(q, sigma, INT_ORDERS)
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    # Fractional orders: both sum the same series (Mironov, Talwar & Zhang 2019, §3.3); ours sums
    # all 1000 terms, dp_accounting stops early, which costs it ~1e-5 relative near α = 1.
    # Where dp_accounting's series fails to converge it returns ∞; ours stays finite.
    ours = rdp.subsampled_gaussian(q, sigma, FRAC_ORDERS)
    ref = ra._compute_rdp_poisson_subsampled_gaussian(q, sigma, FRAC_ORDERS)
    assert np.all(np.isfinite(ours))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-5)


@pytest.mark.parametrize("q, sigma, alpha, rel", [(0.1, 0.5, 1.5, 0.04), (0.01, 0.7, 2.5, 0.01), (0.5, 2.0, 7.5, 1e-5)])
def test_fractional_orders_bound_the_exact_renyi_divergence(q, sigma, alpha, rel):
    """The fractional-order series is an upper bound (it sums |C(α, i)|): compare with quadrature
    of E_{N(0,σ²)}[((1−q) + q e^{(2z−1)/(2σ²)})^α] in 40-digit arithmetic."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    q_, s_, a_ = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)
    f = lambda z: mpmath.npdf(z, 0, s_) * ((1 - q_) + q_ * mpmath.exp((2 * z - 1) / (2 * s_ ** 2))) ** a_
    exact = float(mpmath.log(mpmath.quad(f, [-mpmath.inf, -5, 0, 1, 5, 20, mpmath.inf])) / (a_ - 1))
    ours = rdp.subsampled_gaussian(q, sigma, [alpha])[0]
    assert exact <= ours <= exact * (1 + rel)


def test_poisson_rdp_matches_opacus():
    ordp = pytest.importorskip("opacus.accountants.analysis.rdp")
    for q, sigma in [(0.01, 1.0), (0.1, 0.8), (0.004, 1.3)]:
        ref = np.asarray(ordp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(INT_ORDERS)))
        np.testing.assert_allclose(rdp.subsampled_gaussian(q, sigma, INT_ORDERS), ref, rtol=1e-9)


@pytest.mark.parametrize("q", GRID_Q)
@pytest.mark.parametrize("sigma", GRID_SIGMA)
@pytest.mark.parametrize("steps", [1, 100, 10_000])
def test_epsilon_agrees_with_dp_accounting_or_is_tighter_by_the_second_branch(q, sigma, steps):
    orders = np.concatenate([INT_ORDERS, FRAC_ORDERS])
    curve = steps * ra._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    for delta in (1e-3, 1e-5, 1e-10):
        acc = ra.RdpAccountant(list(orders))
        acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
        ref = acc.get_epsilon(delta)
        ours = rdp.epsilon(curve, orders, delta, "improved")
        am1 = orders - 1
        with np.errstate(over="ignore"):
            branch2 = max(0.0, np.min(np.log1p(np.expm1(am1 * curve) / (orders * delta)) / am1))
        kl_shortcut = ref == 0   # dp_accounting returns 0 when δ² > 1 − e^{−RDP}
        if kl_shortcut:
            continue
        assert ours == pytest.approx(min(ref, branch2), rel=1e-9, abs=1e-12)
        assert ours <= ref * (1 + 1e-9)
        assert ours <= rdp.epsilon(curve, orders, delta, "classic") + 1e-12


@pytest.mark.parametrize("q, sigma, steps", [(0.001, 1.0, 1), (0.01, 0.7, 100), (0.1, 2.0, 100), (0.01, 10.0, 1)])
def test_improved_conversion_never_beats_the_exact_privacy_curve(q, sigma, steps):
    """Both branches of the improved conversion stay above the exact ε (PLD, optimistic = lower bound)."""
    pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    exact_lower = pld.from_gaussian_mechanism(sigma, sampling_prob=q, pessimistic_estimate=False,
                                              value_discretization_interval=1e-4).self_compose(steps)
    orders = rdp.DEFAULT_ORDERS
    curve = steps * rdp.subsampled_gaussian(q, sigma, orders)
    for delta in (1e-3, 1e-5, 1e-10):
        assert rdp.epsilon(curve, orders, delta) >= exact_lower.get_epsilon_for_delta(delta) * (1 - 1e-6)


def test_delta_and_epsilon_are_inverse():
    orders = rdp.DEFAULT_ORDERS
    curve = 1000 * rdp.subsampled_gaussian(0.01, 1.1, orders)
    for conversion in rdp.CONVERSIONS:
        eps = rdp.epsilon(curve, orders, 1e-6, conversion)
        assert rdp.delta(curve, orders, eps, conversion) == pytest.approx(1e-6, rel=1e-6)


def _moments_accountant_loop(q, sigma, steps, eps, max_order=32):
    """Geyer et al.'s accountant written as in Abadi et al.: δ = min_λ exp(T·α(λ) − λε)."""
    best = 1.0
    for lam in range(1, max_order + 1):
        log_moment = math.log(sum(math.comb(lam + 1, j) * q ** j * (1 - q) ** (lam + 1 - j)
                                  * math.exp(j * (j - 1) / (2 * sigma ** 2)) for j in range(lam + 2)))
        if steps * log_moment < lam * eps:
            best = min(best, math.exp(steps * log_moment - lam * eps))
    return best


@pytest.mark.parametrize("q, sigma, steps", [(0.3, 1.0, 33), (0.5, 1.77, 33), (0.22, 2.12, 162), (0.05, 1.0, 500)])
def test_moments_accountant_equals_the_abadi_loop(q, sigma, steps):
    for eps in (1.0, 8.0):
        assert rdp.moments_accountant_delta(q, sigma, steps, eps) == pytest.approx(
            _moments_accountant_loop(q, sigma, steps, eps), rel=1e-9)


def test_without_replacement_bound_is_above_dp_accountings_tighter_theorem():
    for q, sigma in [(0.01, 0.7), (0.01, 5.0), (0.1, 1.0), (0.1, 5.0)]:
        ours = rdp.subsampled_gaussian(q, sigma, INT_ORDERS, "without_replacement")
        ref = ra._compute_rdp_sample_wor_gaussian(q, sigma, INT_ORDERS)
        assert np.all(ours >= ref * (1 - 1e-9))
        assert ours[0] == pytest.approx(ref[0], rel=1e-9)     # α = 2: both theorems agree
    # and it is not looser than the un-subsampled Gaussian
    assert np.all(rdp.subsampled_gaussian(0.1, 1.0, INT_ORDERS, "without_replacement")
                  <= rdp.gaussian(1.0, INT_ORDERS) * 4)


def test_monotonicity_and_robustness():
    orders = rdp.DEFAULT_ORDERS
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no warnings anywhere on this grid
        sigmas = np.geomspace(0.3, 100, 25)
        eps_sigma = [rdp.epsilon(1000 * rdp.subsampled_gaussian(0.01, s, orders), orders, 1e-5) for s in sigmas]
        assert np.all(np.diff(eps_sigma) <= 1e-12)
        steps = np.unique(np.geomspace(1, 10 ** 6, 20).astype(int))
        curve = rdp.subsampled_gaussian(0.01, 1.0, orders)
        eps_steps = [rdp.epsilon(t * curve, orders, 1e-5) for t in steps]
        assert np.all(np.diff(eps_steps) >= -1e-12)
        for delta in (1e-15, 1e-10, 1e-3):
            for s in (0.3, 1.0, 100.0):
                e = rdp.epsilon(10 ** 6 * rdp.subsampled_gaussian(0.5, s, orders), orders, delta)
                assert math.isfinite(e) and e >= 0
        deltas = [rdp.delta(1000 * curve, orders, e) for e in np.geomspace(0.01, 100, 30)]
        assert np.all(np.isfinite(deltas)) and np.all(np.diff(deltas) <= 1e-15)


@pytest.mark.parametrize("call, name", [
    (lambda: rdp.gaussian(0.0), "sigma"), (lambda: rdp.subsampled_gaussian(0.0, 1.0), "q"),
    (lambda: rdp.subsampled_gaussian(1.1, 1.0), "q"), (lambda: rdp.subsampled_gaussian(0.1, 1.0, [1.0]), "orders"),
    (lambda: rdp.subsampled_gaussian(0.1, 1.0, sampling="shuffle"), "sampling"),
    (lambda: rdp.epsilon([1.0], [2.0], 0.0), "delta"), (lambda: rdp.epsilon([1.0], [2.0], 1.0), "delta"),
    (lambda: rdp.epsilon([1.0], [2.0], 1e-5, "magic"), "conversion"), (lambda: rdp.delta([1.0], [2.0], -1.0), "eps"),
    (lambda: rdp.moments_accountant_delta(0.1, 1.0, 0, 1.0), "steps"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
