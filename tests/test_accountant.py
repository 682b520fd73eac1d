"""dpfl.accounting.accountant and .calibrate."""
import json

import numpy as np
import pytest

from dpfl.accounting import calibrate, gdp, rdp
from dpfl.accounting.accountant import Accountant, GaussianEvent, NonPrivateEvent, SampledGaussianEvent


def test_methods_agree_with_the_pure_functions():
    ev = SampledGaussianEvent(1.0, 16 / 600, "without_replacement")
    acc = Accountant("gdp-clt").compose(ev, 38 * 93)
    assert acc.mu() == pytest.approx(gdp.clt_mu(1.0, 16, 600, 38 * 93), rel=1e-12)
    pois = SampledGaussianEvent(1.1, 0.01)
    acc = Accountant("rdp").compose(pois, 500).compose(pois, 500)
    curve = 1000 * rdp.subsampled_gaussian(0.01, 1.1, rdp.DEFAULT_ORDERS)
    assert acc.epsilon(1e-5) == pytest.approx(rdp.epsilon(curve, rdp.DEFAULT_ORDERS, 1e-5), rel=1e-12)
    assert acc.events == [(pois, 1000)]                                  # repeated events merge
    assert Accountant("rdp-classic").compose(pois, 1000).epsilon(1e-5) >= acc.epsilon(1e-5)
    f = Accountant("fdp").compose(GaussianEvent(2.0), 4)
    assert f.epsilon(1e-5) == pytest.approx(gdp.epsilon(1.0, 1e-5), abs=1e-3)   # G_{1/2}^{⊗4} = G_1


def test_exact_fdp_is_never_looser_than_rdp_for_the_same_mechanism():
    ev = SampledGaussianEvent(0.8, 0.05, "without_replacement")
    fdp = Accountant("fdp").compose(ev, 200).epsilon(1e-5)
    assert fdp <= Accountant("rdp").compose(ev, 200).epsilon(1e-5)


def test_delta_epsilon_roundtrip_for_every_method():
    for method in ("rdp", "rdp-classic", "gdp-clt", "fdp"):
        sampling = "without_replacement" if method == "fdp" else "poisson"
        acc = Accountant(method).compose(SampledGaussianEvent(1.0, 0.02, sampling), 300)
        eps = acc.epsilon(1e-6)
        assert acc.delta(eps) == pytest.approx(1e-6, rel=1e-3)
        assert Accountant(method).epsilon(1e-6) == 0.0


def test_a_non_private_release_leaves_no_guarantee_in_every_method():
    """A NonPrivateEvent (training without noise) composed with anything reports ε = ∞, δ(ε) = 1 and
    μ = ∞ — never the 0 of an empty accountant, which would claim perfect privacy — as dp_accounting
    does for its NonPrivateDpEvent; and it survives a resume."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant

    theirs = RdpAccountant()
    theirs.compose(dp_accounting.GaussianDpEvent(2.0))
    theirs.compose(dp_accounting.NonPrivateDpEvent())
    for method in ("rdp", "rdp-classic", "gdp-clt", "fdp"):
        acc = Accountant(method).compose(GaussianEvent(2.0)).compose(NonPrivateEvent())
        assert not acc.private and Accountant(method).compose(GaussianEvent(2.0)).private
        assert acc.epsilon(1e-5) == theirs.get_epsilon(1e-5) == np.inf
        assert acc.delta(1.0) == theirs.get_delta(1.0) == 1.0
        resumed = Accountant().load_state_dict(json.loads(json.dumps(acc.state_dict())))
        assert resumed.epsilon(1e-5) == np.inf and resumed.events == acc.events
    assert Accountant("gdp-clt").compose(NonPrivateEvent()).mu() == np.inf
    with pytest.raises(ValueError, match="no trade-off function"):
        Accountant("fdp").compose(NonPrivateEvent()).tradeoff()


def test_state_dict_resumes_exactly():
    acc = Accountant("rdp").compose(SampledGaussianEvent(1.0, 0.01), 100).compose(GaussianEvent(3.0), 2)
    state = json.loads(json.dumps(acc.state_dict()))                     # JSON-able
    resumed = Accountant().load_state_dict(state).compose(SampledGaussianEvent(1.0, 0.01), 50)
    direct = (Accountant("rdp").compose(SampledGaussianEvent(1.0, 0.01), 100).compose(GaussianEvent(3.0), 2)
              .compose(SampledGaussianEvent(1.0, 0.01), 50))
    assert resumed.epsilon(1e-5) == direct.epsilon(1e-5)


def test_mu_only_for_gdp_and_bad_events():
    with pytest.raises(ValueError, match="^mu is defined"):
        Accountant("rdp").mu()
    with pytest.raises(ValueError, match="^method"):
        Accountant("prv")
    with pytest.raises(ValueError, match="^event"):
        Accountant().compose(("gaussian", 1.0))
    with pytest.raises(ValueError, match="^count"):
        Accountant().compose(GaussianEvent(1.0), 0)
    with pytest.raises(ValueError, match="^sigma"):
        GaussianEvent(0.0)
    with pytest.raises(ValueError, match="^sampling"):
        SampledGaussianEvent(1.0, 0.1, "shuffle")


def test_dpsgd_sigma_matches_dp_accounting_calibration():
    mc = pytest.importorskip("dp_accounting.mechanism_calibration")
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as ra

    q, steps, eps, delta = 0.01, 10_000, 2.0, 1e-5
    ours = calibrate.dpsgd_sigma(eps, delta, q, steps)
    ref = mc.calibrate_dp_mechanism(
        lambda: ra.RdpAccountant(list(rdp.DEFAULT_ORDERS)),
        lambda s: dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), steps),
        eps, delta, mc.LowerEndpointAndGuess(0.3, 1.0), tol=1e-6)
    assert ours == pytest.approx(ref, rel=1e-4)
    acc = lambda s: Accountant().compose(SampledGaussianEvent(s, q), steps).epsilon(delta)
    assert acc(ours) <= eps < acc(ours * (1 - 1e-5))


def test_largest_steps_and_smallest_sigma_on_closed_forms():
    # GDP: μ = √T/σ ≤ 1 ⇔ T ≤ σ²
    assert calibrate.largest_steps(lambda t: np.sqrt(t) / 3.0, 1.0) == 9
    assert calibrate.largest_steps(lambda t: 10.0, 1.0) == 0
    s = calibrate.smallest_sigma(lambda s: 2.0 / s, 0.5)
    assert s == pytest.approx(4.0, rel=1e-6)
    with pytest.raises(ValueError, match="not reached"):
        calibrate.smallest_sigma(lambda s: 5.0, 1.0, max_sigma=100)
    with pytest.raises(ValueError, match="^target_eps"):
        calibrate.smallest_sigma(lambda s: 1.0 / s, 0.0)
