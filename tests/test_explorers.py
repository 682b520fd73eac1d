"""dpfl.explorers: each explorer's numbers are the library's (closed forms, published values, the
accountants), and the ipywidgets glue calls them when a slider moves, or draws a static figure headless."""
import math
import warnings

import matplotlib
import numpy as np
import pytest

from dpfl.accounting import gdp
from dpfl.accounting import hockey_stick as hs
from dpfl.accounting import tradeoff as tf
from dpfl.experiments import aldaghri_fedhdp as fh
from dpfl.experiments import asoodeh2020 as ac
from dpfl.experiments import geyer2017 as gx
from dpfl.experiments import geyer2017_tables as gt
from dpfl.explorers import Control, Explorer, Reading, show, widget
from dpfl.explorers import aldaghri_fedhdp, asoodeh2020, geyer2017, kim2021, zheng2021
from dpfl.theory import ldp_tradeoffs as kim

matplotlib.use("Agg")
ALL = (zheng2021, asoodeh2020, kim2021, geyer2017, aldaghri_fedhdp)
EPS_COL = "ε at δ = 1e-05"


@pytest.mark.parametrize("sigma, p, B, rounds", [(0.75, 1.0, 16, 64), (1.0, 0.5, 16, 25), (1.5, 0.25, 8, 10)])
def test_zheng_reads_the_clt_and_the_exact_composition(sigma, p, B, rounds):
    r = zheng2021.EXPLORER(sigma=sigma, p=p, B=B, rounds=rounds)
    eps = dict(zip(r.table.accounting, r.table[EPS_COL]))
    K = 76 if B == 8 else math.ceil(600 / B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gdp.ApproximationWarning)
        mu = gdp.clt_mu(sigma, B, 600, K * rounds)
    assert f"μ_max = {mu:.3f}" in r.note and f"K = {K} steps" in r.note
    assert eps[zheng2021.CLT] == pytest.approx(float(gdp.epsilon(mu, 1e-5)), rel=1e-12)
    step = tf.subsample(tf.gaussian(1 / sigma), B / 600)
    assert eps[zheng2021.HIGH] == pytest.approx(tf.epsilon(tf.compose_n(step, K * rounds, h=zheng2021.H), 1e-5), rel=1e-12)
    assert eps[zheng2021.LOW] < eps[zheng2021.HIGH]
    assert eps[zheng2021.WITH_P] <= eps[zheng2021.HIGH]
    if p == 1.0:
        assert eps[zheng2021.WITH_P] == eps[zheng2021.HIGH]


def test_zheng_client_sampling_tightens_where_a_rounds_tv_exceeds_p_squared():
    # σ = 0.5, B = 8: a round's TV is near 1 ≫ p² = 0.01, so Lemma 3.8 cuts ε (notebook §8's finding)
    eps = dict(zip(*zheng2021.EXPLORER(sigma=0.5, p=0.1, B=8, rounds=500).table[["accounting", EPS_COL]].values.T))
    assert eps[zheng2021.WITH_P] < 0.5 * eps[zheng2021.HIGH]


def test_zheng_defaults_give_table_1s_mu_max():
    # Table 1, MNIST p = 1, σ = 0.75, B = 16, R = 64: μ_max = 3.96 (the paper's number)
    assert "μ_max = 3.963" in zheng2021.EXPLORER().note


@pytest.mark.parametrize("q", [0.1, 0.2])
def test_asoodeh_reads_theorem_2_at_figure_2(q):
    r = asoodeh2020.EXPLORER(q=q)          # the defaults are Fig. 2's σ = 1.5, n = 100, η = 0.5
    at = r.table.set_index("ε")
    for eps in (0.0, 1.0):
        if (q, eps) in ac.FIG2_VALUES:
            assert at.loc[eps, "δ Theorem 2 (last iterate)"] == pytest.approx(ac.FIG2_VALUES[(q, eps)], rel=0.01)
        every = float(hs.all_iterates_delta(eps, q, 100, 1.5))
        assert at.loc[eps, "δ all iterates (ours)"] == every
        assert at.loc[eps, "hiding factor"] <= 1.0
    assert np.array_equal(r.curves["proof"], hs.last_iterate_delta(asoodeh2020.EPS, q, 100, 1.5, 0.5, variant="proof"))


@pytest.mark.parametrize("eps, T, q", [(1.0, 100, 0.01), (0.316, 1000, 0.01), (4.642, 10, 0.05)])
def test_kim_reads_min_noise_variance_and_the_bounds(eps, T, q):
    t = kim2021.EXPLORER(eps=eps, T=T, q=q).table.set_index("method")
    for m in kim.PAPER_METHODS:
        s2, status = kim.min_noise_variance(m, eps, q, 1.0, 1e-5, T)
        row = t.loc[kim2021.LABELS[m]]
        assert (row["status"], np.isnan(s2)) == (status, np.isnan(row["σ²"]))
        if np.isfinite(s2):
            assert row["σ²"] == s2
            assert row["utility bound U(T)"] == pytest.approx(float(kim.utility_bound(T, np.full(100, s2), 1.0, 100, 0.5, 1.0)[()]))
            assert row["rate bound (bits/symbol)"] == pytest.approx(float(kim.rate_bound(s2, 1.0, 100)))


def test_kim_orders_the_methods_and_adds_the_exact_one_on_request():
    t = kim2021.EXPLORER(exact="yes").table.set_index("method")["σ²"]      # ε = 1, T = 100, q = 0.01
    assert t["Proposed"] <= t["MA"] <= t["AC2"] <= t["AC1"]                 # the paper's Table 1 ordering
    assert t["exact f-DP (ours)"] <= t["Proposed"]
    assert "exact f-DP (ours)" not in kim2021.EXPLORER().table.method.values


@pytest.mark.parametrize("K, m, sigma, budget, cr", [(1000, 220, 2.13, 1e-5, 54), (100, 50, 1.75, 1e-3, 11)])
def test_geyer_gives_table_1s_rounds_and_tighter_counts(K, m, sigma, budget, cr):
    r = geyer2017.EXPLORER(K=K, m=m, sigma=sigma, delta_budget=budget)
    assert r.curves["CR"] == cr == gx.paper_stop_round(K, m, sigma, budget)        # Table 1's CR
    rounds = dict(zip(r.table.accounting, r.table["rounds within δ′"]))
    names = list(gt.ACCOUNTINGS)
    for name in names[:3]:
        assert rounds[name] == gt.rounds_allowed(name, K, (m,), sigma, budget, limit=geyer2017.LIMIT)
    # the f-DP count on the coarse pessimistic grid never exceeds the fine grid's
    assert rounds[names[3]] <= gt.rounds_allowed(names[3], K, (m,), sigma, budget)


def test_fedhdp_defaults_are_the_check_point():
    t = dict(aldaghri_fedhdp.EXPLORER().table.values)
    ref = fh.CHECK_POINT_VALUES
    assert t["server MSE, FedHDP (r*)"] == pytest.approx(ref["server MSE, FedHDP (r*)"], rel=2e-3)
    assert t["server MSE, HDP-FedAvg (r = 1)"] == pytest.approx(ref["server MSE, HDP-FedAvg"], rel=2e-3)
    assert t["server MSE, DP-FedAvg"] == pytest.approx(ref["server MSE, DP-FedAvg"], rel=2e-3)
    assert t["λ*_np (non-private clients)"] == pytest.approx(ref["λ*_np"], rel=2e-3)
    assert t["λ*_p (private clients)"] == pytest.approx(ref["λ*_p"], rel=2e-3)
    assert t["r* = A/B (private / non-private weight)"] == pytest.approx(0.6 / 5.35)   # A/B at the check point


def test_fedhdp_the_curves_minimum_is_r_star():
    r = aldaghri_fedhdp.EXPLORER(rho=0.2, sigma2_p=0.2, N=50, tau2=0.5)
    c = r.curves
    assert abs(c["rs"][np.argmin(c["server"])] - c["r_star"]) <= 0.005
    assert c["best"] <= c["server"].min() + 1e-15


@pytest.mark.parametrize("module", ALL, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_explorer_draws_its_defaults_and_offers_valid_defaults(module):
    import matplotlib.pyplot as plt
    ex = module.EXPLORER
    reading = ex()
    assert isinstance(reading, Reading) and len(reading.table) >= 3 and reading.note
    fig = plt.figure(figsize=ex.figsize)
    ex.draw(reading, fig)
    assert fig.axes and all(ax.has_data() for ax in fig.axes)
    plt.close(fig)


@pytest.mark.parametrize("module, bad, word", [(geyer2017, dict(K=100, m=220), "m must not exceed K"),
                                               (aldaghri_fedhdp, dict(N=20, rho=0.02), "both groups"),
                                               (asoodeh2020, dict(n=20, q=0.01), "q·n")])
def test_a_setting_the_method_rejects_is_named(module, bad, word):
    with pytest.raises(ValueError, match=word):
        module.EXPLORER(**bad)


def test_unknown_controls_and_defaults_outside_the_options_are_errors():
    with pytest.raises(ValueError, match="unknown control"):
        zheng2021.EXPLORER(sigmaa=1.0)
    with pytest.raises(ValueError, match="default of 'x'"):
        Control("x", "x", (1, 2), 3)


def _spy():
    calls = []
    import pandas as pd

    def compute(a, b):
        calls.append((a, b))
        return Reading(pd.DataFrame({"a": [a], "b": [b]}), {}, "spy")
    return Explorer("spy", (Control("a", "a", (1, 2, 3), 1), Control("b", "b", ("x", "y"), "x")), compute,
                    lambda r, fig: fig.subplots().plot([0, 1], [r.table.a[0]] * 2)), calls


def test_moving_a_slider_recomputes_at_its_value():
    pytest.importorskip("ipywidgets")
    ex, calls = _spy()
    box, sliders = widget(ex)
    assert calls == [(1, "x")]                       # drawn once at the defaults
    sliders["a"].value = 3
    sliders["b"].value = "y"
    assert calls == [(1, "x"), (3, "x"), (3, "y")]
    assert [s.options for s in sliders.values()] == [(1, 2, 3), ("x", "y")]


def test_headless_show_draws_the_defaults_and_says_so(capsys):
    ex, calls = _spy()
    show(ex, interactive=False)
    assert calls == [(1, "x")]
    assert "static view at the defaults (a = 1, b = x)" in capsys.readouterr().out


def test_a_rejected_setting_is_reported_not_raised_in_the_view(capsys):
    from dpfl.explorers import _render
    _render(geyer2017.EXPLORER, dict(K=100, m=508))
    assert "Not computed: m must not exceed K" in capsys.readouterr().out
