"""dpfl.audit: the bounds against exact binomial intervals and the Gaussian trade-off curve, their
coverage on simulated scores, and the canary audits of the engine in both directions — below the
claim on the mechanisms as built, above it on every planted bug."""
import numpy as np
import pytest
from scipy import stats

from dpfl.accounting import gdp
from dpfl.audit.bounds import audit_scores, clopper_pearson_lower, clopper_pearson_upper, epsilon_from_rates, mu_from_rates
from dpfl.audit.canaries import client_level_audit, dp_sgd_audit


@pytest.mark.parametrize("k, n", [(0, 50), (7, 50), (50, 50), (480, 500)])
def test_clopper_pearson_is_scipys_exact_interval(k, n):
    low, high = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="exact")
    assert clopper_pearson_lower(k, n, 0.05) == pytest.approx(low, abs=1e-12)
    assert clopper_pearson_upper(k, n, 0.05) == pytest.approx(high, abs=1e-12)


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_rates_of_the_gaussian_mechanism_give_its_mu_and_never_more_than_its_epsilon(mu):
    """At every threshold t the likelihood-ratio test of N(μ, 1) against N(0, 1) has TPR = Φ(μ − t),
    FPR = Φ(−t): μ comes back exactly, and no test implies more than the exact ε(δ) of μ-GDP."""
    for t in np.linspace(-2, mu + 4, 25):
        tpr, fpr = stats.norm.cdf(mu - t), stats.norm.cdf(-t)
        assert mu_from_rates(tpr, fpr) == pytest.approx(mu, abs=1e-9)
        for delta in (1e-5, 1e-2):
            assert epsilon_from_rates(tpr, fpr, delta) <= gdp.epsilon(mu, delta) + 1e-9


def test_the_audit_bound_covers_the_truth_and_is_tight_with_many_trials():
    mu = 1.0
    above = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        found = audit_scores(rng.normal(mu, 1, 400), rng.normal(0, 1, 400), 1e-5, alpha=0.05)
        above += found["mu_lo"] > mu or found["eps_lo"] > gdp.epsilon(mu, 1e-5)
    assert above <= 6                                  # 5 % of 40 is 2 expected; a broken bound fails most
    rng = np.random.default_rng(99)
    tight = audit_scores(rng.normal(mu, 1, 40_000), rng.normal(0, 1, 40_000), 1e-5)
    assert 0.9 * mu <= tight["mu_lo"] <= mu


def test_audit_input_is_checked():
    with pytest.raises(ValueError, match="at least 20"):
        audit_scores([1.0] * 5, [0.0] * 5, 1e-5)
    with pytest.raises(ValueError, match=r"^delta\b"):
        audit_scores([1.0] * 30, [0.0] * 30, 1.5)
    with pytest.raises(ValueError, match=r"^bug\b"):
        dp_sgd_audit(1.0, bug="typo")
    with pytest.raises(ValueError, match="per_layer"):
        client_level_audit(1.0, bug="one-layer-accounting")


@pytest.mark.parametrize("per_sample", ["ghost", "full"])
def test_dp_sgd_as_built_stays_below_its_claim_and_the_audit_is_not_loose(per_sample):
    row = dp_sgd_audit(2.0, trials=800, per_sample=per_sample)
    assert row["claimed μ"] == 1.0 and not row["exceeds claim"]
    assert 0.5 <= row["μ bound / claim"] <= 1.0          # z = 2: replace-one μ = 2/z = 1 per step


@pytest.mark.parametrize("bug", ["noise/10", "no-clip"])
def test_dp_sgd_planted_bugs_are_caught(bug):
    row = dp_sgd_audit(2.0, trials=400, bug=bug)
    assert row["exceeds claim"] and row["μ lower bound"] > 2 * row["claimed μ"]


def test_client_level_as_built_stays_below_its_claim_whole_model_and_per_layer():
    flat = client_level_audit(1.0, trials=800)
    per_layer = client_level_audit(1.0, per_layer=True, layers=4, trials=800)
    assert flat["claimed μ"] == 1.0 and per_layer["claimed μ"] == 2.0      # z/√L for L = 4 tensors
    for row in (flat, per_layer):
        assert not row["exceeds claim"] and row["μ bound / claim"] >= 0.5


@pytest.mark.parametrize("bug, per_layer", [("noise/10", False), ("no-clip", False), ("one-layer-accounting", True)])
def test_client_level_planted_bugs_are_caught(bug, per_layer):
    """``one-layer-accounting`` is the accounting bug fixed on 2026-11-22: per-layer clipping composed as
    one tensor's release. The audit sees μ above the claim it made."""
    row = client_level_audit(1.0, per_layer=per_layer, layers=4, trials=1000, bug=bug)
    assert row["exceeds claim"] and row["μ lower bound"] > row["claimed μ"]


def test_the_notebooks_grid_and_its_bad_input():
    from dpfl.experiments.audits import SETTINGS, AuditRun, grid

    for profile in SETTINGS:
        runs = grid(profile)
        bugs = [r for r in runs if r.bug]
        assert {r.bug for r in bugs} == {"noise/10", "no-clip", "one-layer-accounting", "realised-denominator",
                                         "realised-count"}
        assert len(bugs) == 9
        assert {r.mechanism for r in runs if not r.bug} == {"dp_sgd", "client_level", "client_level_per_layer", "geyer_median",
                                                            "client_level_poisson", "fedhdp_private", "fedhdp_opted_out",
                                                            "adaptive_clip", "adaptive_clip_skewed", "dp_sgd_sampled"}
    for kwargs, name in [(dict(mechanism="x"), "mechanism"), (dict(z=0.0), "z"), (dict(trials=0), "trials"),
                         (dict(bug="typo"), "bug")]:
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            AuditRun(**({"mechanism": "dp_sgd", "z": 1.0, "trials": 100} | kwargs))
    with pytest.raises(ValueError, match="client_level_per_layer"):
        AuditRun("client_level", 1.0, 100, "one-layer-accounting")
    with pytest.raises(ValueError, match="client_level_poisson"):
        AuditRun("client_level", 1.0, 100, "realised-denominator")
    with pytest.raises(ValueError, match="poisson"):
        client_level_audit(1.0, poisson=True, per_layer=True)
    with pytest.raises(ValueError, match="^bug"):
        AuditRun("adaptive_clip", 1.0, 100, "noise/10")


def test_geyers_median_bound_audited_against_the_fixed_bound_claim():
    """(c): the median of the round's norms as each tensor's bound (not privatised). What the audit
    sees is recorded in the notebook; here: it runs, and stays a valid comparison (μ bound ≤ claim)."""
    row = client_level_audit(1.0, median=True, layers=4, trials=800)
    assert row["mechanism"].endswith("(Geyer's per-layer median bound)") and row["claimed μ"] == 2.0
    assert 0.3 <= row["μ bound / claim"] <= 1.0


def test_fedhdp_groups_are_audited_separately():
    """(d): the private group's canary stays below its group's claim (μ = 1/z); the opted-out group's
    (clipped like everyone's, Alg. 2; no privacy claimed) is more exposed than that claim, its only
    cover the private group's noise in the same step; noise ÷ 10 in the private group is caught."""
    from dpfl.audit.canaries import fedhdp_audit

    private, opted_out = fedhdp_audit(1.0, group=1, trials=800), fedhdp_audit(1.0, group=0, trials=800)
    assert private["claimed μ"] == 1.0 and not private["exceeds claim"] and private["μ bound / claim"] >= 0.5
    assert opted_out["claimed μ"] == float("inf") and opted_out["μ lower bound"] > private["claimed μ"]
    assert fedhdp_audit(1.0, group=1, trials=800, bug="noise/10")["exceeds claim"]


def test_a_poisson_round_is_audited_with_one_client_fewer_and_the_realised_denominator_is_caught():
    """(e): add/remove-one with the other clients aligned against the canary. Dividing by the expected
    count keeps the canary below the claim μ = 1/z; dividing by the realised count (the engine before
    2026-11-24, which FedHDP's private group and Poisson DP-FedAvg used) lets one client move the mean by
    2S/m, and the audit sees μ above the claim."""
    built = client_level_audit(1.0, poisson=True, trials=1500)
    assert built["claimed μ"] == 1.0 and not built["exceeds claim"] and built["μ bound / claim"] >= 0.6
    bug = client_level_audit(1.0, poisson=True, trials=1500, bug="realised-denominator")
    assert bug["exceeds claim"] and bug["μ lower bound"] > 1.3 * bug["claimed μ"]


def test_adaptive_clippings_mean_and_count_audited_together_and_the_old_count_is_caught():
    """(f): the noised mean and the noised fraction under the bound, scored together by their likelihood
    ratio, stay below the claim μ = 1/z with z⁻² = z_Δ⁻² + (2σ_b)⁻², whether half or all of the other
    clients are under the bound; the count before 2026-11-24 (not recentred, divided by the realised
    number of clients) moves by a whole client when all others are under the bound, and is caught."""
    from dpfl.audit.canaries import adaptive_clip_audit

    for below in (0.5, 1.0):
        built = adaptive_clip_audit(1.0, below=below, trials=1500)
        assert built["claimed μ"] == 1.0 and not built["exceeds claim"] and built["μ bound / claim"] >= 0.6
    bug = adaptive_clip_audit(1.0, below=1.0, trials=1500, bug="realised-count")
    assert bug["exceeds claim"] and bug["μ lower bound"] > 1.2 * bug["claimed μ"]
    for kwargs, name in [(dict(count_share=1.0), "count_share"), (dict(below=1.5), "below"), (dict(bug="no-clip"), "bug")]:
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            adaptive_clip_audit(1.0, **kwargs)


def test_sampled_dp_sgd_is_audited_step_by_step_against_its_rdp_claim():
    """(g): batches drawn by the engine's sampler (the canary in each step's batch with probability
    q = B/n), every step's update observed. The claim is the RDP guarantee of the steps' events (the
    CLT μ only reported); as built the audit stays below it and certifies something; noise ÷ 10 is caught.
    The score is the mixtures' log-likelihood ratio, checked against scipy's densities."""
    from dpfl.accounting.accountant import Accountant
    from dpfl.audit.canaries import _mixture_llr, sampled_dp_sgd_audit
    from dpfl.federated.sampling import batch_event

    o, z, q = np.array([[-1.3, 0.2, 2.5]]), 0.7, 0.1
    mix = lambda sign: (1 - q) * stats.norm.pdf(o, 0, z) + q * stats.norm.pdf(o, sign, z)
    assert _mixture_llr(o, z, q) == pytest.approx(np.log(mix(1) / mix(-1)).sum(-1), rel=1e-10)
    built = sampled_dp_sgd_audit(1.0, trials=1000)
    claim = Accountant("rdp").compose(batch_event(1.0, 8, 80), 10).epsilon(1e-5)
    assert built["claimed ε(δ=1e-05)"] == pytest.approx(claim) and np.isnan(built["claimed μ"])
    assert not built["exceeds claim"] and built["μ lower bound"] > 0.2
    assert sampled_dp_sgd_audit(4.0, trials=1000, bug="noise/10")["exceeds claim"]
    with pytest.raises(ValueError, match="^records"):
        sampled_dp_sgd_audit(1.0, records=8, batch_size=8)
