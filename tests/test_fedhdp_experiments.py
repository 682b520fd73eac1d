"""FedHDP's experiments (experiments.aldaghri_fedhdp_fl): the datasets as §5.1 describes them, the four
rows as configurations of one engine, the paper's selection rule and the paired headline comparisons."""
import dataclasses

import numpy as np
import torch
import pandas as pd
import pytest

from dpfl import runs
from dpfl.experiments import aldaghri_fedhdp_fl as fl
from dpfl.federated.loop import run

SMALL = dict(clients=100, samples=40, validation=10, test=20)


@pytest.fixture(scope="module")
def noniid():
    return {e: fl.federation("noniid_mnist", e, **SMALL) for e in ("validation", "test")}


def test_noniid_mnist_clients_hold_one_digit_and_five_percent_opt_out(noniid):
    fed = noniid["test"]
    fd = fed.data
    assert (fed.cohorts == 0).sum() == 5 and set(np.unique(fed.cohorts)) == {0, 1}
    for k in range(fd.num_clients):
        train_digits = np.unique(fd.train_y[fd.clients[k]].numpy())
        assert train_digits.size == 1
        assert set(np.unique(fd.test_y[fd.test_clients[k]].numpy())) == set(train_digits)   # MNIST test images of it
        assert len(fd.clients[k]) == SMALL["samples"] - SMALL["validation"]
    assert fed.server_test[0].shape[0] == 10_000                          # the whole MNIST test set


def test_validation_is_held_out_of_training_and_the_same_clients_opt_out(noniid):
    val, test = noniid["validation"], noniid["test"]
    np.testing.assert_array_equal(val.cohorts, test.cohorts)
    for k in range(val.data.num_clients):
        fit, held = set(val.data.clients[k].tolist()), set(val.data.test_clients[k].tolist())
        assert not fit & held and len(held) == SMALL["validation"]
        assert fit == set(test.data.clients[k].tolist())                  # the same training images
    assert val.server_test is None                                         # the union of the validation sets


def test_skewed_split_gives_every_opting_out_client_the_chosen_digit():
    fed = fl.federation("skewed_mnist", "validation", **SMALL)
    digits = np.array([np.unique(fed.data.train_y[ix].numpy())[0] for ix in fed.data.clients])
    assert (digits[fed.cohorts == 0] == fl.SKEWED_DIGIT).all()
    assert (digits[fed.cohorts == 1] != fl.SKEWED_DIGIT).all()


def test_writer_stand_ins_keep_digits_only_for_fmnist():
    fed = fl.federation("fmnist", "test")
    assert fed.data.train_y[np.concatenate(fed.data.clients)].max() < 10
    assert "LEAF" in fed.source and "digits only" in fed.source
    assert fed.data.client_sizes.min() >= 0.8 * 40 - 1


def _run(algorithm, fed, **kw):
    cfg = fl.FedHDPRun(dataset="noniid_mnist", algorithm=algorithm, lam_np=0.5, lam_p=0.5, rounds=2, epochs=1, q=0.3,
                       data=tuple(sorted(SMALL.items())), progress=False, **kw)
    return cfg, run(cfg.algorithm_for(fed), fed.data, progress=False)


def test_fedhdp_at_r_equal_1_is_hdp_fedavg_bit_for_bit(noniid):
    _, hdp = _run("HDP-FedAvg+Ditto", noniid["validation"])
    _, fed1 = _run("FedHDP", noniid["validation"], r=1.0)
    pd.testing.assert_frame_equal(hdp.drop(columns="seconds"), fed1.drop(columns="seconds"))


def test_the_rows_configure_the_mechanisms_the_paper_describes(noniid):
    fed = noniid["validation"]
    dp = fl.FedHDPRun(dataset="noniid_mnist", algorithm="DP-FedAvg+Ditto", lam_np=0.1, lam_p=0.2).algorithm_for(fed)
    assert dp.cfg.noise_multipliers == (1.5,) and (dp.groups == 0).all()          # one group, everyone private
    assert dp.cfg.lams == (0.2,)
    hdp = fl.FedHDPRun(dataset="noniid_mnist", algorithm="HDP-FedAvg+Ditto", lam_np=0.1, lam_p=0.2).algorithm_for(fed)
    assert hdp.cfg.noise_multipliers == (0.0, 1.5) and hdp.cfg.ratios == (1.0, 1.0)
    np.testing.assert_array_equal(hdp.groups, fed.cohorts)
    fedhdp = fl.FedHDPRun(dataset="noniid_mnist", algorithm="FedHDP", r=0.25, lam_np=0.1, lam_p=0.2).algorithm_for(fed)
    assert fedhdp.cfg.ratios == (1.0, 0.25) and fedhdp.cfg.lams == (0.1, 0.2)
    nonp = fl.FedHDPRun(dataset="noniid_mnist", algorithm="Non-Private+Ditto", lam_np=0.1, lam_p=0.2).algorithm_for(fed)
    assert nonp.cfg.noise_multipliers == (0.0,)


def test_outcome_reports_each_cohort_and_the_private_clients_epsilon(noniid):
    cfg, metrics = _run("DP-FedAvg+Ditto", noniid["validation"])
    out = fl.outcome(cfg, metrics)
    assert 0 <= out["Acc_g,np"] <= 100 and 0 <= out["Acc_g,p"] <= 100      # one group, two cohorts reported
    assert out["Δ_l"] == pytest.approx(out["Acc_l,np"] - out["Acc_l,p"])
    assert np.isfinite(out["ε_p"]) and out["ε_p"] > 0
    cfg, metrics = _run("Non-Private+Ditto", noniid["validation"])
    assert np.isnan(fl.outcome(cfg, metrics)["ε_p"])


def test_femnist_stand_in_trains_the_cnn_end_to_end():
    # the LEAF subset (a stand-in for TFF's FEMNIST): one client per writer with ≥ 40 images, 62 classes, 5 % opt
    # out; one FedHDP round of the CNN runs and reports both cohorts and the private clients' ε
    cfg = fl.FedHDPRun(dataset="femnist", algorithm="FedHDP", r=0.5, lam_np=0.5, lam_p=0.5, rounds=1, epochs=1, q=0.1,
                       data=(("least", 40),), progress=False)
    fed = cfg.federation()
    assert "LEAF" in fed.source and fed.data.client_sizes.min() >= 0.8 * 40 - 1
    assert int(fed.data.train_y.max()) >= 36 and int((fed.cohorts == 0).sum()) == round(0.05 * len(fed.cohorts))
    out = fl.outcome(cfg, cfg.train(cfg.algorithm_for(fed), fed.data))
    assert all(0 <= out[k] <= 100 for k in ("Acc_g", "Acc_g,np", "Acc_g,p", "Acc_l,np", "Acc_l,p"))
    assert np.isfinite(out["ε_p"]) and out["ε_p"] > 0


def test_the_smoothed_outcome_averages_the_last_evaluations():
    cfg = fl.FedHDPRun(dataset="noniid_mnist", algorithm="FedHDP", r=0.5, lam_np=0.1, lam_p=0.1, rounds=8)
    metrics = pd.DataFrame({"round": range(1, 9), "acc_g": np.linspace(0.1, 0.8, 8), "acc_g_0": 0.5, "acc_g_1": 0.4,
                            "acc_l_0": [np.nan] * 3 + [0.6, np.nan, np.nan, np.nan, 0.9], "acc_l_1": 0.3,
                            "delta_g": 0.1, "delta_l": [np.nan] * 3 + [0.3, np.nan, np.nan, np.nan, 0.6],
                            "eps_1": np.arange(1.0, 9.0)})
    final, half = fl.outcome(cfg, metrics), fl.outcome(cfg, metrics, tail=0.5)
    assert final["Acc_g"] == pytest.approx(80.0) and final["Acc_l,np"] == pytest.approx(90.0)
    assert half["Acc_g"] == pytest.approx(100 * np.mean([0.5, 0.6, 0.7, 0.8]))       # rounds 5–8
    assert half["Acc_l,np"] == pytest.approx(90.0)                                    # its one evaluation there
    assert fl.outcome(cfg, metrics, tail=0.75)["Acc_l,np"] == pytest.approx(75.0)     # rounds 3–8: 0.6 and 0.9
    assert half["ε_p"] == final["ε_p"] == 8.0                                         # ε: the final one
    with pytest.raises(ValueError, match="tail"):
        fl.outcome(cfg, metrics, tail=1.0)


def test_bad_input_is_refused_before_any_work():
    with pytest.raises(ValueError, match="r applies to FedHDP only"):
        fl.FedHDPRun(dataset="noniid_mnist", algorithm="DP-FedAvg+Ditto", lam_np=0.1, lam_p=0.1, r=0.5)
    with pytest.raises(ValueError, match="dataset"):
        fl.FedHDPRun(dataset="cifar", algorithm="FedHDP", lam_np=0.1, lam_p=0.1)
    with pytest.raises(ValueError, match="algorithm"):
        fl.FedHDPRun(dataset="femnist", algorithm="FedAvg", lam_np=0.1, lam_p=0.1)


def test_selection_picks_r_by_global_accuracy_then_each_cohorts_lambda():
    rows = []
    for r, acc_g in ((0.0, 60.0), (0.5, 70.0)):
        for lam, np_acc, p_acc in ((0.1, 80.0, 50.0), (1.0, 75.0, 55.0)):
            rows.append(dict(dataset="d", algorithm="FedHDP", r=r, lam_np=lam, lam_p=lam, **{
                "Acc_g": acc_g, "Acc_l,np": np_acc + r, "Acc_l,p": p_acc}))
    chosen = fl.select(pd.DataFrame(rows)).iloc[0]
    assert (chosen.r, chosen.lam_np, chosen.lam_p) == (0.5, 0.1, 1.0)


def test_headlines_pair_seeds_and_give_the_standard_error():
    rows = [dict(dataset="d", algorithm=a, seed=s, Acc_g=g, **{"Δ_l": 1.0 + s})
            for s, (g_dp, g_fed) in enumerate(((50.0, 53.0), (40.0, 45.0), (60.0, 61.0)))
            for a, g in (("DP-FedAvg+Ditto", g_dp), ("FedHDP", g_fed))]
    heads = fl.headlines(pd.DataFrame(rows)).set_index("comparison")
    assert heads.loc["gain", "ours"] == pytest.approx(3.0)
    assert heads.loc["gain", "s.e."] == pytest.approx(np.std([3.0, 5.0, 1.0], ddof=1) / np.sqrt(3))
    assert heads.loc["gap", "ours"] == pytest.approx(2.0) and heads.loc["gain", "paper (up to)"] == 9.27


def test_every_profile_builds_runs_whose_data_arguments_fit_the_datasets():
    for profile in fl.SETTINGS:
        for config in fl.validation_grid(profile):
            assert set(dict(config.data)) <= {"clients", "samples", "validation", "test", "least"}
    smoke = fl.validation_grid("smoke")[0]
    assert smoke.federation().data.num_clients == fl.SETTINGS["smoke"]["mnist"]["clients"]


def test_iid_clients_are_random_disjoint_samples_and_not_in_the_papers_grid():
    fed = fl.federation("iid_mnist", "validation", **SMALL)
    fd = fed.data
    every = np.concatenate([fd.clients[k] for k in range(fd.num_clients)] + list(fd.test_clients))
    assert np.unique(every).size == every.size                             # disjoint, validation held out
    assert np.mean([np.unique(fd.train_y[ix].numpy()).size for ix in fd.clients]) > 8   # many digits per client
    assert "iid_mnist" not in fl.SETTINGS["paper"]["datasets"] and fl.PAPER_DATASETS == fl.SETTINGS["paper"]["datasets"]


def test_the_variance_probe_measures_what_the_theory_calls_a_and_b_and_changes_nothing(noniid):
    fed = noniid["validation"]
    cfg, plain = _run("FedHDP", fed, r=0.5)
    probe = fl.RatioProbe(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    algorithm = cfg.algorithm_for(fed)
    probed_algorithm = fl._Variances(algorithm.model, algorithm.cfg, algorithm.groups, server_test=algorithm.server_test,
                                     cohorts=algorithm.cohorts)
    probed = run(probed_algorithm, fed.data, progress=False)
    pd.testing.assert_frame_equal(probed[plain.columns].drop(columns="seconds"), plain.drop(columns="seconds"))
    assert "var_1" in probed and probe.algorithm == "FedHDP"
    # the hook against a plain loop: within-group variance (trace) plus the mean's noise spread over n clients
    rng = np.random.default_rng(0)
    updates = {"a": torch.as_tensor(rng.normal(size=(5, 3, 2))), "b": torch.as_tensor(rng.normal(size=(5, 4)))}
    flat = np.concatenate([updates["a"].numpy().reshape(5, -1), updates["b"].numpy()], axis=1)
    expected = sum(np.sum((flat[k] - flat.mean(0)) ** 2) for k in range(5)) / 4 + 5 * 10 * 0.3 ** 2
    assert probed_algorithm.inspect_group(1, updates, 0.3)["var_1"] == pytest.approx(expected, rel=1e-12)
    assert probed_algorithm.inspect_group(0, {k: v[:1] for k, v in updates.items()}, 0.0) == {}
    with pytest.raises(ValueError, match="RatioProbe runs FedHDP"):
        fl.RatioProbe(dataset="noniid_mnist", algorithm="DP-FedAvg+Ditto", lam_np=0.5, lam_p=0.5)
    with pytest.raises(ValueError, match="RatioProbe trains alone"):             # a shared training has no variances
        fl.RatioProbe(dataset="noniid_mnist", algorithm="FedHDP", lam_np=0.5, lam_p=0.5, sweep=((0.5, 0.5), (1.0, 1.0)))


def test_measured_ratio_is_a_over_b_over_the_rounds_that_measured_both_and_its_claims_follow():
    metrics = pd.DataFrame({"round": [1, 2, 3, 4], "var_0": [1.0, np.nan, 2.0, 3.0], "var_1": [10.0, 5.0, 10.0, 10.0]})
    m = fl.measured_ratio(metrics)
    assert m["rounds measured"] == 3 and m["r* (median)"] == pytest.approx(0.2)
    assert m["r* q25"] == pytest.approx(0.15) and m["r* q75"] == pytest.approx(0.25)
    assert fl.measured_ratio(metrics.drop(columns="var_0"))["rounds measured"] == 0
    selected = pd.DataFrame([{"dataset": "iid_mnist", "algorithm": "FedHDP", "r": 0.0}])
    config = fl.RatioProbe(dataset="iid_mnist", algorithm="FedHDP", lam_np=0.5, lam_p=0.5, r=0.0)
    table = fl.ratio_check(selected, [(config, metrics)], (0.0, 0.25, 0.5))
    assert table.loc[0, "grid value nearest r*"] == 0.25 and table.loc[0, "r (grid search)"] == 0.0
    # the claims: iid_mnist's r must be the grid value nearest r*, a non-IID dataset's must exceed it; an
    # unmeasured row makes no claim
    rows = pd.concat([table, table.assign(dataset="skewed_mnist", **{"r (grid search)": 0.5}),
                      table.assign(dataset="fmnist", **{"rounds measured": 0})], ignore_index=True)
    claims = fl.ratio_claims(rows)
    assert [(c["statement"].split()[0], c["holds"]) for c in claims] == [("iid_mnist", False), ("skewed_mnist", True)]
    assert "measured r* = 0.2 (IQR 0.15–0.25)" in claims[0]["note"]
    empty = fl.ratio_section("quick", lambda config: None)                  # nothing cached: no row, nothing computed
    assert empty.empty and list(empty.columns) == list(table.columns)       # ... and the columns a probe's row has


def test_section_6_reads_quick_in_results_only_mode_on_a_gpu_too(monkeypatch):
    """On the H200 (2026-11-28) the committed figures did not regenerate with ``RESULTS_ONLY=1``: with a GPU the
    notebook chose the paper grid, whose runs are not cached, where a CPU reads ``quick``'s. Results-only computes
    nothing on any device, so it reads what a CPU reads."""
    from dpfl.experiments import aldaghri_fedhdp_fl as fl

    missing = lambda config: False
    assert fl.profile_here("paper", missing, cuda=True, results_only=False) == "paper"
    assert fl.profile_here("paper", missing, cuda=True, results_only=True) == "quick"
    assert fl.profile_here("paper", missing, cuda=False, results_only=False) == "quick"
    assert fl.profile_here("paper", lambda config: True, cuda=True, results_only=True) == "paper"
    monkeypatch.setenv("RESULTS_ONLY", "1")
    assert fl.profile_here("paper", missing, cuda=True) == "quick"


def test_the_cli_computes_each_datasets_final_runs_and_probes_once_its_grid_is_cached(tmp_path, capsys):
    """A budgeted CLI call (a GPU's, or a long CPU job's) leaves section 6 nothing to compute: after the grids
    (validation and iid_mnist's ratio grid) it trains each dataset's selected final runs and its ratio probe
    (``fl.followups``), which results-only mode then reads; a dataset's grid not yet complete calls for none."""

    cache = runs.Cache(tmp_path)
    grid = fl.cli_grid("smoke")
    assert fl.followups(grid[0], None, cache) == []                               # nothing cached yet
    assert fl.main(["--profile", "smoke", "--device", "cpu", "--cache", str(tmp_path)]) == 0
    for dataset in ("noniid_mnist", "iid_mnist"):
        runs_ = [c for c in grid if c.dataset == dataset]
        chosen = fl.select(pd.DataFrame([fl.outcome(c, cache.load(c).value) for c in runs_]))
        probes = fl.ratio_probes(chosen, "smoke")
        finals = [] if dataset == "iid_mnist" else fl.final_runs(chosen, "smoke")
        quiet = [] if dataset == "iid_mnist" else fl.quiet_grid("smoke", dataset)
        assert len(probes) == 1 and len(finals) == (0 if dataset == "iid_mnist" else 8)
        assert len(quiet) == (0 if dataset == "iid_mnist" else 3) and all(c.z == 0.15 for c in quiet)
        assert all(cache.load(c) is not None for c in finals + probes + quiet), dataset
    assert fl.main(["--profile", "smoke", "--cache", str(tmp_path), "--list"]) == 0   # nothing missing
    assert "smoke: 0 run(s) missing" in capsys.readouterr().out
    section = fl.cached_section("smoke", cache.load)                    # what the notebook reads at the paper's setting
    assert list(section) == ["noniid_mnist"]
    chosen, test = section["noniid_mnist"]
    assert len(test) == 8 and set(test.algorithm) == set(fl.ALGORITHMS) and (test.evaluation == "test").all()
    verdicts = fl.claims(fl.summary(test), fl.headlines(test))               # the notebook's loop body, sans notebook
    assert len(verdicts) == 2 * 2 + 2 * 3 + 1 and {c["source"] for c in verdicts} == {"paper §5.2", "abstract"}
    assert fl.cached_section("smoke", runs.Cache(tmp_path / "empty").load) == {}
    assert fl.grid_progress("smoke", cache.load, section).empty                  # every dataset shown: no progress rows
    nothing = fl.grid_progress("smoke", runs.Cache(tmp_path / "empty").load, {})
    assert len(nothing) == len(fl.validation_grid("smoke")) == 5 and not nothing.cached.any()
    hidden = fl.validation_grid("smoke")[-1]                            # a grid one run short selects nothing ...
    partial = fl.grid_progress("smoke", lambda c: None if c == hidden else cache.load(c), {})
    assert list(partial.cached) == [True] * 4 + [False]                 # ... and shows the four cached ones
    done = partial[partial.cached]
    assert list(done["Acc_g"]) == [fl.outcome(c, cache.load(c).value)["Acc_g"] for c in fl.validation_grid("smoke")[:4]]
    assert (done[["diverged_l,np", "diverged_l,p"]].to_numpy() == 0).all()
    quiet = fl.quiet_section("smoke", cache.load)                        # the quiet probe next to the same runs at z
    assert list(quiet.noise) == ["Table 7's z", "z / 10"] and list(quiet.z) == [1.5, 0.15]
    assert quiet["noise / signal"].iloc[1] < quiet["noise / signal"].iloc[0] / 5
    assert quiet["ε_p"].iloc[1] > 10 * quiet["ε_p"].iloc[0] > 0                     # quieter noise, far less privacy
    assert (quiet.gain == quiet["FedHDP best Acc_g"] - quiet["DP-FedAvg+Ditto Acc_g"]).all()
    none = fl.quiet_section("smoke", runs.Cache(tmp_path / "empty").load)
    assert none.empty and list(none.columns) == list(quiet.columns)                  # the notebook groups it by dataset


def test_the_claims_of_section_5_2_hold_or_fail_on_the_numbers():
    """fl.claims: each §5.2 claim is decided by the tables' numbers (FedHDP within its s.e. of a baseline
    counts as ≥; a gain must exceed its s.e., and may exceed the abstract's "up to" by at most 2 pp beyond it)."""
    rows = []
    for algorithm, acc in (("DP-FedAvg+Ditto", 80.0), ("HDP-FedAvg+Ditto", 85.0), ("FedHDP", 84.0)):
        row = {"dataset": "d", "algorithm": algorithm, "Acc_g": acc, "Acc_l,p": acc, "Acc_l,np": acc}
        rows.append({**row, **{f"{m} s.e.": 0.5 for m in ("Acc_g", "Acc_l,p", "Acc_l,np")}})
    heads = pd.DataFrame([{"dataset": "d", "comparison": "gain", "ours": 4.0, "s.e.": 1.0},
                          {"dataset": "d", "comparison": "gap", "ours": 0.5, "s.e.": 1.0},
                          {"dataset": "e", "comparison": "gain", "ours": 12.5, "s.e.": 1.0},      # 9.27 + 2 < 12.5 − 1
                          {"dataset": "e", "comparison": "gap", "ours": 6.0, "s.e.": 1.0}])       # 3.49 + 2 ≥ 6 − 1
    rows += [{**row, "dataset": "e"} for row in rows]
    got = {c["statement"]: c["holds"] for c in fl.claims(pd.DataFrame(rows), heads)}
    assert got["FedHDP's Acc_g gain over DP-FedAvg+Ditto > 0 beyond its s.e. on d"]
    assert not got["Δ_l = Acc_l,np − Acc_l,p under FedHDP > 0 beyond its s.e. on d"]
    assert got["d: FedHDP ≥ DP-FedAvg+Ditto in Acc_g"] and not got["d: FedHDP ≥ HDP-FedAvg+Ditto in Acc_g"]
    notes = {c["statement"]: c["note"] for c in fl.claims(pd.DataFrame(rows), heads)}
    assert notes["d: FedHDP ≥ HDP-FedAvg+Ditto in Acc_g"].startswith("84.00 ± 0.50 vs 85.00")
    assert got["d: opting out helps the clients who opt out (Acc_l,np, FedHDP vs all private)"]
    assert got["FedHDP's Acc_g gain over DP-FedAvg+Ditto on d ≤ the abstract's 'up to' 9.27 pp (+2)"]
    assert not got["FedHDP's Acc_g gain over DP-FedAvg+Ditto on e ≤ the abstract's 'up to' 9.27 pp (+2)"]
    assert got["Δ_l = Acc_l,np − Acc_l,p under FedHDP on e ≤ the abstract's 'up to' 3.49 pp (+2)"]
    assert len(got) == 2 * (2 * 2 + 2 * 3 + 1)


def test_noise_scale_is_the_closed_form_of_the_runs_own_setting():
    """fl.noise_scale against the formulas, worked by hand at smoke's sizes (100 clients, q = 0.2, z = 1.5, the
    200-wide MLP): DP-FedAvg has m_p = 20 private clients a round and σ_b = max(0.05, z / 19) · m_p = 1.5 · 20 / 19
    (the count's noise is set from the 19 private clients FedHDP would have, the same in every row), so
    z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) and noise / signal = z_Δ · √d / 20; FedHDP's private group is the 95 who do not
    opt out. A run without noise has no scale."""
    d = 784 * 200 + 200 + 200 * 10 + 10
    grid = fl.validation_grid("smoke")
    dp = next(c for c in grid if c.algorithm == "DP-FedAvg+Ditto")
    got = fl.noise_scale(dp)
    assert (got["private clients"], got["m_p"], got["d"]) == (100, 20.0, d)
    z_update = (1.5 ** -2 - (2 * 1.5 * 20 / 19) ** -2) ** -0.5
    assert got["z_Δ"] == pytest.approx(z_update, rel=1e-12) and 1.70 < z_update < 1.71
    assert got["noise / signal"] == pytest.approx(z_update * d ** 0.5 / 20, rel=1e-12)
    assert got["m_p for noise = signal"] == pytest.approx(1.5 * d ** 0.5, rel=1e-12)
    hdp = fl.noise_scale(next(c for c in grid if c.algorithm == "FedHDP"))
    assert (hdp["private clients"], hdp["m_p"]) == (95, pytest.approx(19.0))
    with pytest.raises(ValueError, match="adds no noise"):
        fl.noise_scale(next(c for c in grid if c.algorithm == "Non-Private+Ditto"))


def test_grid_gain_is_fedhdps_best_r_against_dp_fedavg():
    """fl.grid_gain: the best FedHDP row over r, minus the one DP-FedAvg+Ditto row; two DP rows are an error."""
    rows = pd.DataFrame([{"algorithm": "DP-FedAvg+Ditto", "r": np.nan, "Acc_g": 31.0},
                         {"algorithm": "FedHDP", "r": 0.0, "Acc_g": 68.0},
                         {"algorithm": "FedHDP", "r": 0.5, "Acc_g": 35.0},
                         {"algorithm": "HDP-FedAvg+Ditto", "r": np.nan, "Acc_g": 90.0}])
    assert fl.grid_gain(rows) == {"DP-FedAvg+Ditto Acc_g": 31.0, "FedHDP best Acc_g": 68.0, "best r": 0.0, "gain": 37.0}
    with pytest.raises(ValueError, match="one DP-FedAvg"):
        fl.grid_gain(pd.concat([rows, rows.iloc[:1]]))


def test_runs_that_differ_in_lambda_alone_share_one_training_bit_for_bit(tmp_path):
    """The validation grid's runs at one (algorithm, r) differ in Ditto's λ alone, which never moves the global
    model: one training personalises with every λ (``FedHDPConfig.extra_lams``) and gives each run the table it
    has trained alone, bit for bit on a CPU (every column but the wall times); a run with a checkpoint of its
    own resumes alone, and a run that differs in more than λ is refused."""
    base = fl.FedHDPRun(dataset="noniid_mnist", algorithm="FedHDP", r=0.5, lam_np=0.0, lam_p=0.0, rounds=3, epochs=1,
                        q=0.3, data=tuple(sorted(SMALL.items())), progress=False, checkpoint_dir=str(tmp_path),
                        sweep=((0.0, 0.0), (2.0, 2.0), (3.0, 3.0)))
    configs = base.together()
    assert [c.lams() for c in configs] == [(0.0, 0.0), (2.0, 2.0), (3.0, 3.0)]
    shared = base.compute_together(configs)
    alone = [dataclasses.replace(c, sweep=()).compute() for c in configs]
    for joint, single in zip(shared, alone):
        pd.testing.assert_frame_equal(joint.drop(columns="seconds"), single.drop(columns="seconds"), check_exact=True)
    personal = [tuple(table[["acc_l_0", "acc_l_1"]].dropna().to_numpy().ravel()) for table in alone]
    assert len(set(personal)) == 3                                     # each λ's own personal models, not a copy
    assert len({table["acc_g"].iloc[-1] for table in alone}) == 1      # one global model
    assert base.checkpoint_path(configs[1:]) != base.checkpoint_path() and not list(tmp_path.iterdir())
    base.checkpoint_path().write_bytes(b"")
    assert base.together() == [base]
    with pytest.raises(ValueError, match="more than λ"):
        base.compute_together([base, dataclasses.replace(base, r=0.25, lam_np=5.0, lam_p=5.0)])
    cfg = base.algorithm_for(fl.federation("noniid_mnist", "validation", **SMALL)).cfg
    with pytest.raises(ValueError, match="one λ per privacy group"):
        dataclasses.replace(cfg, extra_lams=((1.0,),))
    # checkpoints written before extra_lams existed keep their key: the field enters it only when set
    assert "extra_lams" not in runs.jsonable(cfg) and "extra_lams" in runs.jsonable(
        dataclasses.replace(cfg, extra_lams=((1.0, 1.0),)))


def test_the_committed_femnist_grid_progress():
    """The FEMNIST numbers the issue notes give for its paper grid so far, read from the committed cache (nothing is
    computed): each cached unit at the tuned η_p (validation sets, the final model, λ = 0.05, 0.2, 1), none of its
    personal models diverged, ε of the private clients at δ = 10⁻⁵ where there are any; FEMNIST is not yet a dataset
    section 6 can show."""
    from pathlib import Path

    cache = runs.Cache(Path(__file__).parents[1] / "figures" / "aldaghri_fedhdp" / "cache")
    others = tuple(d for d in fl.PAPER_DATASETS if d != "femnist")        # shown: their 72 runs are not read
    progress = fl.grid_progress("paper", cache.load, others)
    # unit ("FedHDP r=0" for FedHDP's): (Acc_g, Acc_l,np at λ = 0.05, 0.2, 1, Acc_l,p at the same λ, ε_p)
    expected = {"Non-Private+Ditto": (82.49, [74.08, 78.35, 82.91], [79.17, 82.21, 83.58], None),
                "DP-FedAvg+Ditto": (64.27, [67.42, 65.38, 65.55], [68.77, 67.91, 66.46], 38.69),
                "HDP-FedAvg+Ditto": (65.09, [66.69, 65.31, 64.55], [69.73, 69.59, 66.91], 38.69),
                "FedHDP r=0": (66.76, [68.5, 71.32, 71.83], [72.91, 73.83, 74.65], 38.69),
                "FedHDP r=0.1": (70.23, [70.16, 68.16, 65.21], [72.15, 72.78, 71.83], 38.69),
                "FedHDP r=0.25": (66.35, [68.93, 67.4, 64.68], [71.26, 70.64, 69.31], 38.69)}
    for algorithm, (acc_g, acc_np, acc_p, eps) in expected.items():
        name, _, r = algorithm.partition(" r=")
        rows = (progress.dataset == "femnist") & (progress.algorithm == name)
        if r:                                                               # FedHDP: one unit per r
            rows &= progress.r == float(r)
        unit = progress[rows].set_index("lam_np")
        assert unit.cached.all() and len(unit) == 3, algorithm
        assert unit["Acc_g"].to_numpy() == pytest.approx([acc_g] * 3, abs=0.01), algorithm   # λ never moves it
        assert unit["Acc_l,np"].to_numpy() == pytest.approx(acc_np, abs=0.01), algorithm
        assert unit["Acc_l,p"].to_numpy() == pytest.approx(acc_p, abs=0.01), algorithm
        assert (unit[["diverged_l,np", "diverged_l,p"]].to_numpy() == 0).all(), algorithm
        if eps is None:
            assert unit["ε_p"].isna().all(), algorithm
        else:
            assert unit["ε_p"].to_numpy() == pytest.approx([eps] * 3, abs=0.01), algorithm
            assert (unit["δ"] == 1e-5).all(), algorithm
            # the same ε by Google's dp_accounting: RDP of the Poisson-subsampled Gaussian, q, Table 7's z, every round
            import dp_accounting

            rdp = dp_accounting.rdp.RdpAccountant()
            event = dp_accounting.PoissonSampledDpEvent(fl.SETTINGS["paper"]["femnist"]["q"],
                                                        dp_accounting.GaussianDpEvent(fl.TABLE7["femnist"]["z"]))
            rdp.compose(event, int(unit["rounds"].iloc[0]))
            assert rdp.get_epsilon(1e-5) == pytest.approx(eps, abs=0.01), algorithm


def test_the_committed_paper_setting_numbers(data_root):
    """The numbers the issue notes and REPORT give for Table 7's setting with our sizes, read from the committed cache
    (``figures/aldaghri_fedhdp/cache``; nothing is computed): non-IID MNIST's selection, headline gain and Δ_l, its
    quiet probe; skewed MNIST's and the FMNIST stand-in's validation selection and gain, test-set gain and Δ_l;
    skewed MNIST's and the FMNIST stand-in's quiet probes; the r* = A/B measured on each selection."""
    from pathlib import Path

    cache = runs.Cache(Path(__file__).parents[1] / "figures" / "aldaghri_fedhdp" / "cache")
    section = fl.cached_section("paper", cache.load, data_dir=str(data_root))
    # dataset: (selected r, test-set gain, its s.e., Δ_l, validation gain at the grid's first λ)
    expected = {"noniid_mnist": (0.0, 35.56, 1.63, -0.78, None), "skewed_mnist": (0.1, 0.70, 3.72, -0.21, 1.12),
                "fmnist": (0.0, 54.25, 0.50, 4.17, 51.12)}
    for dataset, (r, gain, se, gap, validation_gain) in expected.items():
        chosen, test = section[dataset]
        assert float(chosen.set_index("algorithm").loc["FedHDP", "r"]) == r, dataset
        heads = fl.headlines(test).set_index("comparison")
        assert heads.loc["gain", "ours"] == pytest.approx(gain, abs=0.01), dataset
        assert heads.loc["gain", "s.e."] == pytest.approx(se, abs=0.01), dataset
        assert heads.loc["gap", "ours"] == pytest.approx(gap, abs=0.01), dataset
        if validation_gain is not None:
            grid = [c for c in fl.validation_grid("paper") if c.dataset == dataset and c.lam_np == 0.05]
            found = fl.grid_gain(pd.DataFrame([fl.outcome(c, cache.load(c).value) for c in grid]))
            assert found["best r"] == r and found["gain"] == pytest.approx(validation_gain, abs=0.01), dataset
    quiet = fl.quiet_section("paper", cache.load, data_dir=str(data_root)).set_index(["dataset", "noise"])
    assert quiet.loc[("noniid_mnist", "Table 7's z"), "gain"] == pytest.approx(37.23, abs=0.01)
    assert quiet.loc[("noniid_mnist", "z / 10"), "gain"] == pytest.approx(-0.01, abs=0.01)
    assert quiet.loc[("skewed_mnist", "Table 7's z"), "gain"] == pytest.approx(1.12, abs=0.01)
    assert quiet.loc[("skewed_mnist", "z / 10"), "gain"] == pytest.approx(0.06, abs=0.01)
    assert quiet.loc[("skewed_mnist", "z / 10"), "best r"] == 0.5
    assert quiet.loc[("fmnist", "Table 7's z"), "gain"] == pytest.approx(51.12, abs=0.01)
    assert quiet.loc[("fmnist", "z / 10"), "gain"] == pytest.approx(0.28, abs=0.01)
    assert quiet.loc[("fmnist", "z / 10"), "best r"] == 0.25
    assert quiet.loc[("fmnist", "z / 10"), "DP-FedAvg+Ditto Acc_g"] == pytest.approx(89.89, abs=0.01)
    assert quiet.loc[("fmnist", "z / 10"), ["noise / signal", "ε_p"]].tolist() == pytest.approx([5.365, 234.7], rel=1e-3)
    ratios = fl.ratio_section("paper", cache.load, data_dir=str(data_root))       # r* = A/B measured on each selection
    r_star = ratios.set_index("dataset")["r* (median)"]
    assert r_star.to_dict() == pytest.approx({"noniid_mnist": 1.973e-5, "skewed_mnist": 3.415e-6, "fmnist": 5.041e-7,
                                             "iid_mnist": 1.976e-6}, rel=1e-3)
    # the grid's r exceeds r* on skewed MNIST only; on iid_mnist it is the grid value nearest r* (0)
    assert [c["holds"] for c in fl.ratio_claims(ratios)] == [False, True, False, True]
    iid = [fl.outcome(c, cache.load(c).value)["Acc_g"] for c in fl.ratio_grid("paper", data_dir=str(data_root))]
    assert iid == pytest.approx([91.94, 61.92, 59.74, 59.26, 57.73], abs=0.01)      # r = 0, 0.1, 0.25, 0.5, 0.75


def test_personal_lr_moves_only_the_personal_models_and_a_diverged_one_is_counted(noniid):
    """η_p enters Ditto's steps alone: two runs that differ in it have the same global model bit for bit (so the
    Acc_g of FEMNIST's runs at Table 7's η_p is what the tuned η_p's runs give) and other personal models. A
    personal model that has diverged is counted (``diverged_l_<c>``) and its cohort's accuracy is NaN, not the
    share of class 0 that the arg-max of NaNs scored before 2026-12-07."""
    fed = noniid["validation"]
    tables, states = [], []
    for lr in (None, 0.05):                                  # Table 7's 0.5, and another
        cfg = fl.FedHDPRun(dataset="noniid_mnist", algorithm="FedHDP", r=0.5, lam_np=0.5, lam_p=0.5, rounds=2, epochs=1,
                           q=0.3, data=tuple(sorted(SMALL.items())), progress=False, personal_lr=lr)
        algorithm = cfg.algorithm_for(fed)
        assert algorithm.cfg.personal_lr == (lr or fl.TABLE7["mnist"]["personal_lr"])
        tables.append(run(algorithm, fed.data, progress=False))
        states.append(algorithm.state)
    shared = lambda t: t.filter(regex="^(acc_g|clip|eps|loss_g)")
    pd.testing.assert_frame_equal(shared(tables[0]), shared(tables[1]))
    assert all(torch.equal(states[0]["global"][k], states[1]["global"][k]) for k in states[0]["global"])
    assert not any(torch.equal(states[0]["personal"][k], states[1]["personal"][k]) for k in states[0]["personal"])
    assert (tables[0][["diverged_l_0", "diverged_l_1"]].dropna() == 0).all().all()
    private = int(np.flatnonzero(fed.cohorts == 1)[0])
    for v in algorithm.state["personal"].values():
        v[private].fill_(float("nan"))
    algorithm.state["personal_acc"]["stale"][private] = True
    row = algorithm.evaluate(None)
    assert row["diverged_l_1"] == 1 and row["diverged_l_0"] == 0
    assert np.isnan(row["acc_l_1"]) and np.isnan(row["delta_l"]) and np.isfinite(row["acc_l_0"])


def test_personal_lr_is_hashed_only_when_set_and_femnist_runs_at_the_probes():
    """``FedHDPRun.personal_lr`` (None: Table 7's η_p) leaves the keys of runs at Table 7's η_p as they were —
    FEMNIST's Non-Private+Ditto grid run at λ = 0.05 had key f8484db2f097ff48 before the field existed — while
    every FEMNIST run of the paper profile (grid, final runs, probes) runs at :data:`PERSONAL_LR`'s η_p, named in
    its label; the other datasets keep Table 7's. A bad η_p is refused by name."""
    table7 = fl.FedHDPRun(dataset="femnist", algorithm="Non-Private+Ditto", lam_np=0.05, lam_p=0.05, q=0.3,
                          rounds=200, data=(("least", 40),))
    assert runs.config_hash(table7) == "f8484db2f097ff48"
    lr = fl.PERSONAL_LR["femnist"]
    assert lr is not None and lr < fl.TABLE7["femnist"]["personal_lr"]
    tuned = dataclasses.replace(table7, personal_lr=lr)
    assert runs.config_hash(tuned) != runs.config_hash(table7) and f"η_p={lr:g}" in tuned.label
    grid = fl.validation_grid("paper")
    assert {c.personal_lr for c in grid if c.dataset == "femnist"} == {lr}
    assert {c.personal_lr for c in grid if c.dataset != "femnist"} == {None}
    keys = {runs.config_hash(c) for c in grid}
    assert runs.config_hash(tuned) in keys and runs.config_hash(table7) not in keys
    assert fl._profile_of(tuned) == "paper" and fl._profile_of(table7) is None
    with pytest.raises(ValueError, match="^personal_lr"):
        dataclasses.replace(table7, personal_lr=0.0)


def test_the_eta_p_probe_finds_that_table_7s_femnist_value_diverges():
    """:class:`~dpfl.experiments.aldaghri_fedhdp_lr.PersonalLrProbe` at smoke size: Table 7's η_p = 2.0 at λ = 1
    (η_p λ = 2: the proximal term alone no longer contracts) leaves some of the writers' personal models non-finite
    within 100 Ditto steps, their accuracy NaN; η_p = 0.05 keeps every one finite, so :func:`choose` takes it; with
    no η_p stable it refuses."""
    from dpfl.experiments.aldaghri_fedhdp_lr import PersonalLrProbe, choose

    probe = PersonalLrProbe(profile="smoke", anchor_rounds=1, lrs=(2.0, 0.05), lams=(1.0,), clients=4,
                            participations=50, progress=False)
    table = probe.compute().set_index("η_p")
    assert table.loc[2.0, "finite"] < 1 and np.isnan(table.loc[2.0, "accuracy"])
    assert table.loc[0.05, "finite"] == 1 and 0 <= table.loc[0.05, "accuracy"] <= 1
    assert choose(table.reset_index()) == 0.05
    synthetic = pd.DataFrame({"η_p": [1.0, 1.0, 0.1, 0.1, 0.01, 0.01], "λ": [0.1, 1.0] * 3,
                              "finite": [1.0, 0.9, 1.0, 1.0, 1.0, 1.0], "accuracy": [0.9, np.nan, 0.5, 0.6, 0.7, 0.2]})
    assert choose(synthetic) == 0.01                    # 1.0 diverges at λ = 1; 0.01's best λ beats 0.1's
    with pytest.raises(ValueError, match="no η_p"):
        choose(synthetic[synthetic["η_p"] == 1.0])
    with pytest.raises(ValueError, match="^clients"):
        PersonalLrProbe(clients=0)


def test_the_committed_eta_p_probe_chose_the_eta_p_femnist_runs_at():
    """The paper-size probe in the committed cache (``figures/aldaghri_fedhdp/cache``; nothing is computed): Table 7's
    η_p = 2.0 diverged at every λ (all but 1 of the 30 writers' models at λ = 0.05, every one at 0.2 and 1), η_p = 1.0
    at every λ too, and :func:`choose` picks the η_p that :data:`PERSONAL_LR` gives FEMNIST's runs (0.02)."""
    from pathlib import Path

    from dpfl.experiments.aldaghri_fedhdp_lr import PersonalLrProbe, choose

    cache = runs.Cache(Path(__file__).parents[1] / "figures" / "aldaghri_fedhdp" / "cache")
    table = cache.load(PersonalLrProbe()).value
    by = table.set_index(["η_p", "λ"])
    assert by.loc[(2.0, 0.05), "finite"] == pytest.approx(1 / 30) and (by.loc[2.0, "finite"].iloc[1:] == 0).all()
    assert (by.loc[1.0, "finite"] < 1).all() and (by.loc[[0.5, 0.2, 0.1, 0.05, 0.02], "finite"] == 1).all()
    assert choose(table) == fl.PERSONAL_LR["femnist"] == 0.02
    assert by.loc[(0.02, 0.2), "accuracy"] == pytest.approx(0.6611, abs=1e-4)
    assert table["anchor accuracy"].iloc[0] == pytest.approx(0.6202, abs=1e-4)
