"""dpfl.accounting.hockey_stick: closed forms, an independent library, loop references, limits."""
import itertools

import numpy as np
import pytest
from scipy.stats import norm

from dpfl.accounting import hockey_stick as hs
from dpfl.experiments.asoodeh2020 import FIG2, FIG2_VALUES



@pytest.mark.parametrize("r", [0.1, 0.25, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0, 2.0, 5.0])
def test_theta_matches_dp_accounting_gaussian_pld(eps, r):
    """θ_ε(r) is the δ(ε) of the Gaussian mechanism with sensitivity r and σ = 1."""
    pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    ref = pld.from_gaussian_mechanism(standard_deviation=1.0, sensitivity=r,
                                      value_discretization_interval=1e-4).get_delta_for_epsilon(eps)
    assert hs.theta(eps, r) == pytest.approx(ref, rel=1e-6, abs=1e-15)


def test_theta_matches_balle_wang_formula_and_tv():
    eps, r = np.meshgrid([0.0, 0.3, 1.0, 3.0], [0.2, 1.0, 2.5])
    naive = norm.cdf(r / 2 - eps / r) - np.exp(eps) * norm.cdf(-r / 2 - eps / r)
    np.testing.assert_allclose(hs.theta(eps, r), naive, rtol=1e-10)
    # ε = 0: total variation between N(r, 1) and N(0, 1) is 2Φ(r/2) − 1.
    np.testing.assert_allclose(hs.theta(0.0, r[:, 0]), 2 * norm.cdf(r[:, 0] / 2) - 1, rtol=1e-12)


def test_theta_limits_monotonicity_and_complement():
    assert hs.theta(1.0, 0.0) == 0.0 and hs.theta(1.0, np.inf) == 1.0
    r = np.linspace(0.01, 20, 500)
    assert np.all(np.diff(hs.theta(0.7, r)) >= 0)                # non-decreasing in r …
    assert np.all(np.diff(hs.theta(0.7, r[r < 8])) > 0)          # … strictly, until it rounds to 1
    assert np.all(np.diff(hs.theta(np.linspace(0, 5, 200), 1.3)) < 0)  # decreasing in ε
    np.testing.assert_allclose(hs.theta(0.7, r) + hs.theta_complement(0.7, r), 1.0, atol=1e-14)


@pytest.mark.parametrize("eps, r", [(34.5, 1.0), (3.0, 0.05), (0.01, 0.001), (1e-6, 12.0)])
def test_theta_keeps_relative_precision_in_the_tails(eps, r):
    """Against 50-digit arithmetic, where δ is tiny (≈1e-255) or the two terms nearly cancel."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    Q = lambda t: mpmath.erfc(t / mpmath.sqrt(2)) / 2
    e, rr = mpmath.mpf(eps), mpmath.mpf(r)
    exact = Q(e / rr - rr / 2) - mpmath.exp(e) * Q(e / rr + rr / 2)
    assert hs.theta(eps, r) == pytest.approx(float(exact), rel=1e-9)
    assert hs.theta_complement(eps, r) == pytest.approx(float(1 - exact), rel=1e-9)


def test_gaussian_hockey_stick_depends_only_on_distance():
    m1, m2 = np.array([1.0, 2.0, -1.0]), np.array([0.0, 0.0, 1.0])
    d = np.linalg.norm(m1 - m2)
    assert hs.gaussian_hockey_stick(m1, m2, 2.0, 0.5) == pytest.approx(hs.theta(0.5, d / 2.0))
    assert hs.gaussian_hockey_stick(m2, m1, 2.0, 0.5) == pytest.approx(hs.theta(0.5, d / 2.0))


def _hockey_stick_by_subsets(p, q, eps):
    """sup_A p(A) − e^ε q(A) by enumerating every subset (eq. 2): the loop reference."""
    best = 0.0
    for k in range(len(p) + 1):
        for subset in itertools.combinations(range(len(p)), k):
            idx = list(subset)
            best = max(best, p[idx].sum() - np.exp(eps) * q[idx].sum())
    return best


def test_discrete_hockey_stick_equals_sup_over_subsets():
    rng = np.random.default_rng(1)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        for eps in (0.0, 0.3, 1.0):
            assert hs.hockey_stick(p, q, eps) == pytest.approx(_hockey_stick_by_subsets(p, q, eps), abs=1e-14)


def test_contraction_coefficient_vectorised_equals_loop():
    rng = np.random.default_rng(2)
    K = rng.dirichlet(np.ones(7), size=5)
    eps = np.array([0.0, 0.4, 1.5])
    loop = [max(hs.hockey_stick(K[a], K[b], e) for a in range(5) for b in range(5)) for e in eps]
    np.testing.assert_allclose(hs.contraction_coefficient(K, eps), loop, rtol=1e-14)


def test_contraction_ratio_never_exceeds_two_point_value():
    """Theorem 1's upper bound, on random kernels and random input pairs."""
    rng = np.random.default_rng(3)
    for _ in range(10):
        K = rng.dirichlet(np.full(5, 0.5), size=4)
        mu, nu = rng.dirichlet(np.full(4, 0.3), size=(2, 5000))
        for eps in (0.0, 0.5, 1.0):
            ratios = hs.contraction_ratio(K, mu, nu, eps)
            assert np.nanmax(ratios) <= hs.contraction_coefficient(K, eps) + 1e-9


def test_point_masses_attain_the_two_point_value():
    rng = np.random.default_rng(4)
    K = rng.dirichlet(np.ones(5), size=4)
    eye = np.eye(4)
    ratios = hs.contraction_ratio(K, eye[:, None, :], eye[None, :, :], 0.5)
    assert np.nanmax(ratios) == pytest.approx(hs.contraction_coefficient(K, 0.5), rel=1e-14)


#: the notebook's values (FIG2_VALUES) and five more far in the tail, {(q, ε): δ} (docs/asoodeh2020.md §3)
TAIL = {(0.1, 3.0): 1.40e-13, (0.2, 2.0): 1.13e-12, (0.3, 2.0): 8.2e-18, (0.3, 3.0): 2.9e-36, (0.2, 3.0): 5.2e-25}


@pytest.mark.parametrize("q, eps, known", [(q, e, v) for (q, e), v in {**FIG2_VALUES, **TAIL}.items()])
def test_theorem2_reproduces_figure2_values(q, eps, known):
    """docs/asoodeh2020.md §3: values of Theorem 2's statement at Figure 2's parameters (1 %)."""
    assert hs.last_iterate_delta(eps, q, **FIG2) == pytest.approx(known, rel=0.01)


def test_theorem2_loop_reference():
    """The closed-form geometric sum equals q·θ(r₁)·Σ_{t=1}^{T} c^{T−t} summed in a loop (integer T)."""
    for q, rho in [(0.1, 1.0), (0.2, 0.05), (0.25, 0.01)]:
        n, sigma, eta, L = 100, 1.5, 0.5, 1.0
        m, T = q * n, round(1 / q)
        for eps in (0.0, 0.5, 1.0):
            c = hs.theta(eps, 2 * rho * np.sqrt(m) / (eta * sigma))
            loop = q * hs.theta(eps, 2 * L / (np.sqrt(m) * sigma)) * sum(c ** (T - t) for t in range(1, T + 1))
            assert hs.last_iterate_delta(eps, q, n, sigma, eta, L, rho) == pytest.approx(loop, rel=1e-12)


def test_theorem2_limits_and_orderings():
    eps = np.linspace(0, 3, 31)
    d = {q: hs.last_iterate_delta(eps, q, **FIG2) for q in (0.1, 0.2, 0.3)}
    assert np.all(d[0.2] <= d[0.1]) and np.all(d[0.3] <= d[0.2])          # the text's claim
    proof = {q: hs.last_iterate_delta(eps, q, **FIG2, variant="proof") for q in (0.1, 0.2, 0.3)}
    assert np.all(proof[0.2] >= proof[0.1]) and np.all(proof[0.3] >= proof[0.2])  # the proof's slip
    for q in (0.1, 0.2, 0.3):
        all_it = hs.all_iterates_delta(eps, q, 100, 1.5)
        assert np.all(d[q] <= all_it * (1 + 1e-12))
        # ρ → 0: c → 0 and Theorem 2 tends to q·δ_all.
        tiny_rho = hs.last_iterate_delta(eps, q, 100, 1.5, 0.5, 1.0, 1e-9)
        np.testing.assert_allclose(tiny_rho, q * all_it, rtol=1e-6)
    # δ is decreasing in ε.
    assert np.all(np.diff(d[0.1]) < 0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=0.0), "sigma"), (dict(sigma=-1.0), "sigma"), (dict(q=0.0), "q"), (dict(q=1.5), "q"),
    (dict(eps=-0.1), "eps"), (dict(n=0), "n"), (dict(n=10.5), "n"), (dict(eta=0), "eta"),
    (dict(rho=-1), "rho"), (dict(lipschitz=0), "lipschitz"), (dict(variant="nope"), "variant"),
])
def test_theorem2_bad_input_names_the_parameter(kwargs, name):
    args = dict(eps=1.0, q=0.1, n=100, sigma=1.5, eta=0.5, lipschitz=1.0, rho=1.0) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        hs.last_iterate_delta(**args)


def test_bad_kernel_and_distributions():
    with pytest.raises(ValueError, match="row-stochastic"):
        hs.contraction_coefficient([[0.5, 0.4], [0.5, 0.5]], 0.1)
    with pytest.raises(ValueError, match="kernel"):
        hs.contraction_coefficient([0.5, 0.5], 0.1)
    with pytest.raises(ValueError, match="^eps"):
        hs.theta(-1.0, 1.0)
    with pytest.raises(ValueError, match="probability"):
        hs.hockey_stick([1.2, -0.2], [0.5, 0.5], 0.0)
