"""dpfl.experiments.geyer2017: Geyer, Klein & Nabi 2017 — data, accountant, stopping, selection rule,
Table 1 builder, the re-accounting, and bad input (the training itself: test_engine, test_loop)."""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dpfl import runs
from dpfl.accounting import rdp
from dpfl.experiments import geyer2017 as g
from dpfl.experiments import geyer2017_tables as gt
from tests_support import device_under_test

DEVICE = device_under_test()


@pytest.mark.parametrize("K, m, sigmas, rounds", [
    (100, 50, (1.748, 1.818), 11),     # inside the σ intervals recomputed from their accountant (docs/geyer2017.md §5)
    (1000, 220, (2.125, 2.1406), 54),
])
def test_their_accountant_stops_at_the_published_rounds(K, m, sigmas, rounds):
    budget = g.DELTA_BUDGET[K]
    assert [g.paper_stop_round(K, m, s, budget) for s in sigmas] == [rounds, rounds]
    assert g.paper_stop_round(K, m, sigmas[0] - 0.002, budget) < rounds < g.paper_stop_round(K, m, sigmas[1] + 0.002, budget)
    # the same δ as Abadi's moments accountant with 3 accumulations per round
    R = rounds
    assert rdp.moments_accountant_delta(m / K, sigmas[0], 3 * R, 8.0) > budget >= \
        rdp.moments_accountant_delta(m / K, sigmas[0], 3 * (R - 1), 8.0)


def test_published_table_and_the_implied_m():
    table = g.published()
    assert table.mean_m.tolist() == pytest.approx([100, 50, 220, 508.5], abs=0.01)
    rows = gt.paper_rows_settings(step=0.01)
    assert [(r["K"], r["m"], r["rounds"]) for r in rows[:2]] == [(100, 50, 11), (1000, 220, 54)]
    assert rows[2]["m"] == 508 and abs(rows[2]["rounds"] - 412) <= 4          # 412 itself needs a varying m_t
    assert rows[0]["sigma"] == pytest.approx(1.75) and rows[1]["sigma"] == pytest.approx(2.13)


def test_ramp_spells_out_every_round():
    schedule = g.ramp((20, 30, 40, 50), 100, 1.8)
    assert schedule[:5] == (20, 30, 40, 50, 50) and len(schedule) == g.paper_stop_round(100, schedule, 1.8, 1e-3) == 13
    run = g.GeyerRun(100, schedule, 1.8)
    assert run.max_rounds == 13 and run.m_label == "20→30→40→50" and run.config().sampler.size(12) == 50


def test_the_clients_and_held_out_images(data_root):
    fd = g.federated_mnist(100, 0, data_root)
    sizes = fd.client_sizes
    assert (sizes == 500).all()
    train = np.concatenate(fd.clients)
    assert train.max() < 50_000 and np.unique(train).size == 50_000          # every image once, none held out
    assert [len(t) for t in fd.test_clients] == [100] * 100
    assert np.unique(np.concatenate(fd.test_clients)).size == 10_000          # disjoint slices of all of them
    assert float(fd.train_x.min()) == 0.0 and float(fd.train_x.max()) == 1.0  # pixels in [0, 1]
    labels = [np.unique(fd.train_y[torch.as_tensor(c)].numpy()).size for c in fd.clients]
    assert np.mean(labels) <= 2.2                                             # two shards: mostly two digits
    paper = g.federated_mnist(1000, 0, data_root, split="paper")
    assert (paper.client_sizes == 600).all() and [len(t) for t in paper.test_clients[:3]] == [10, 10, 10]
    assert all((paper.clients[c] == paper.clients[c + 100]).all() for c in range(5))   # K > 100 repeats the data


def test_median_shift_and_spread_on_known_updates():
    norms = torch.tensor([1.0, 2.0, 3.0, 5.0, 9.0])
    updates = {"w": norms[:, None] * torch.tensor([[1.0, 0.0]])}
    assert g.median_shift(updates) == pytest.approx(2 / 3)            # median 3: neighbours 2 and 5
    v_c, u_s = g.spread(updates)
    assert u_s == pytest.approx(4.0 ** 2 / 2) and v_c == pytest.approx(np.var([1, 2, 3, 5, 9]) / 2)


def _metrics(acc, delta_paper, m=50):
    R = len(acc)
    return pd.DataFrame({"round": np.arange(1, R + 1), "clients": [m] * R, "acc_global": acc,
                         "loss_global": [1.0] * R, "delta_paper": delta_paper, "delta": [1.0] * R})


def test_outcome_and_the_papers_selection_rule():
    run = g.GeyerRun(100, 50, 1.0)                                    # stops at round 3 (δ′ = 1e-3)
    o = g.outcome(run, _metrics([0.3, 0.5, 0.62], [1e-6, 5e-4, 8e-3]))
    assert (o["acc"], o["rounds"], o["cc"], o["stopped"]) == (pytest.approx(0.62), 3, 150, True)
    slower = dict(o, rounds=9, acc=0.624)                             # 0.62 at two decimals: a tie, more rounds
    better = dict(o, rounds=20, acc=0.70)
    assert g.best([slower, o]) is o and g.best([o, slower, better]) is better
    with pytest.raises(ValueError, match="no runs"):
        g.best([])
    # a run whose model diverged (NaN test loss; cached before 2026-12-07 with the class-0 share as its accuracy,
    # as three of the K = 100 grid's σ = 2 runs were) has no accuracy, is flagged, and is never chosen
    gone = _metrics([0.3, 0.5, 0.0991], [1e-6, 5e-4, 8e-3]).assign(loss_global=[2.0, 1e30, np.nan])
    d = g.outcome(run, gone)
    assert np.isnan(d["acc"]) and d["diverged"] and not o["diverged"] and d["rounds"] == 3
    assert g.best([d, o]) is o and g.best([o, d]) is o
    with pytest.raises(ValueError, match="diverged"):
        g.best([d])


def test_table1_puts_ours_next_to_the_paper_with_verdicts():
    nondp = (g.GeyerRun(100, 100, None, rounds=400), _metrics(np.linspace(0.5, 0.975, 400), [1.0] * 400, m=100))
    dp100 = {"acc": 0.79, "rounds": 12, "cc": 600, "run": "K=100 …"}
    dp1000 = {"acc": 0.85, "rounds": 80, "cc": 17600, "run": "K=1000 …"}
    t = gt.table1(nondp, {100: dp100, 1000: dp1000})
    assert t.K.tolist() == [100, 100, 1000, 10000]
    assert t.acc_verdict.tolist() == ["agrees", "agrees", "differs", "pending"]
    assert t.rounds_verdict.tolist()[1:] == ["agrees", "differs", "pending"]
    reach = gt.first_reaching(nondp[1], 0.97)
    assert t.rounds.iloc[0] == reach and t.acc.iloc[0] == pytest.approx(np.linspace(0.5, 0.975, 400)[379])
    assert t.mean_m.iloc[1] == 50 and t.paper_mean_m.iloc[2] == 220
    # a row chosen from part of its grid says so; a whole grid's does not
    t = gt.table1(nondp, {100: dp100, 1000: dp1000}, {100: (96, 96), 1000: (7, 18)})
    assert t.grid.tolist()[1:3] == ["96/96", "7/18"] and t.partial.tolist()[1:3] == [False, True]
    assert "partial grid: the best of the 7 of 18" in t.note.iloc[2] and "partial" not in t.note.iloc[1]


def test_table1_at_the_implied_setting_takes_the_grid_sigma_nearest_the_implied_one():
    implied = pd.DataFrame([{"K": 100, "m": 50, "sigma": 1.75}, {"K": 1000, "m": 220, "sigma": 2.13},
                            {"K": 10000, "m": 508, "sigma": 1.54}])

    def o(K, m, sigma, E, acc, rounds):
        return {"run": f"K={K} m={m} σ={sigma} E={E}", "K": K, "m": m, "sigma": sigma, "acc": acc, "rounds": rounds,
                "cc": rounds * int(m.split("→")[-1])}

    outcomes = [o(1000, "220", 2.5, 4, 0.9245, 78),           # the best at m = 220, but σ is not the implied one
                o(1000, "220", 2.1, 1, 0.8978, 52), o(1000, "220", 2.1, 4, 0.9115, 52),
                o(1000, "100", 2.1, 4, 0.95, 179),             # another m
                o(1000, "100→300", 2.1, 4, 0.96, 60),          # a ramp
                o(100, "50", 1.6, 1, 0.80, 9), o(100, "50", 1.8, 1, 0.7765, 11), o(100, "50", 1.8, 4, 0.7765, 12),
                o(10000, "500", 1.5, 1, 0.9551, 393), o(10000, "500", 2.0, 1, 0.9668, 817),
                o(10000, "300→400→500→600", 1.5, 1, 0.97, 269)]   # no m = 508: the nearest constant m, 500
    t = gt.at_implied_setting(outcomes, implied).set_index("K")
    assert t.index.tolist() == [100, 1000, 10000]
    assert t.loc[1000, ["m", "implied_m", "sigma", "acc", "rounds", "cc", "runs"]].tolist() == [220, 220, 2.1, 0.9115, 52,
                                                                                               11440, 2]
    assert t.loc[1000, ["paper_acc", "paper_rounds", "paper_cc"]].tolist() == [0.92, 54, 11880]
    assert t.loc[100, ["sigma", "rounds", "paper_acc", "paper_rounds"]].tolist() == [1.8, 11, 0.78, 11]   # fewer rounds on ties
    assert t.loc[10000, ["m", "implied_m", "sigma", "acc", "rounds", "cc"]].tolist() == [500, 508, 1.5, 0.9551, 393, 196500]
    assert t.loc[10000, ["paper_acc", "paper_rounds", "paper_cc"]].tolist() == [0.96, 412, 209500]
    # an m further than 5 % from the implied one is not its setting: the K is left out
    far = [o(10000, "450", 1.5, 1, 0.95, 300)] + outcomes[:8]
    assert gt.at_implied_setting(far, implied).K.tolist() == [100, 1000]
    assert gt.at_implied_setting(far, implied, m_tolerance=0.12).K.tolist() == [100, 1000, 10000]
    with pytest.raises(ValueError, match="m_tolerance"):
        gt.at_implied_setting(outcomes, implied, m_tolerance=-0.1)


@pytest.mark.parametrize("K, best_run, acc, rounds, rounds_verdict, implied_acc, implied_rounds", [
    (1000, "K=1000 m=100 σ=1.8 b=10 E=4", 0.9385, 179, "differs", 0.9115, 52),
    (10000, "K=10000 m=500 σ=2 b=10 E=1", 0.9668, 817, "differs", 0.9551, 393)])
def test_table1_rows_from_the_committed_paper_grids(K, best_run, acc, rounds, rounds_verdict, implied_acc, implied_rounds):
    """Table 1's K = 1000 and 10 000 rows as the notebook derives them from the committed cache of each whole
    grid (trained on a CPU; no smoke run trains them): the paper's rule's best model next to the paper's row,
    and the best model at the grid's setting nearest the one the row implies."""
    cache = runs.Cache(Path(__file__).resolve().parents[1] / "figures" / "geyer2017" / "cache")
    results, size = g.cached_grid(cache, "paper", K)                   # what the notebook reads on a CPU
    assert len(results) == size, [c.label for c in g.dp_grid("paper", K) if cache.load(c) is None]
    outcomes = [g.outcome(c, metrics) for c, metrics in results]
    top, paper = g.best(outcomes), g.published().set_index(["setting", "K"]).loc[("dp", K)]
    assert top["run"] == best_run and round(top["acc"], 4) == acc and top["rounds"] == rounds
    assert gt.verdict(top["acc"], paper.acc, absolute=0.02) == "agrees"
    assert gt.verdict(top["rounds"], paper.rounds, relative=0.2) == rounds_verdict
    implied = gt.at_implied_setting(outcomes, pd.DataFrame(gt.paper_rows_settings())).set_index("K").loc[K]
    assert round(implied.acc, 4) == implied_acc and implied.rounds == implied_rounds
    assert abs(implied.acc - implied.paper_acc) <= 0.02


def test_reaccounting_the_published_k100_row():
    table = gt.reaccount(100, (50,) * 11, 1.75, 1e-3).set_index("accounting")
    theirs = table.iloc[0]
    assert theirs.delta_at_eps8 == pytest.approx(rdp.moments_accountant_delta(0.5, 1.75, 33, 8.0), rel=1e-9)
    assert theirs.rounds_allowed == 10                                # their code runs one more: CR = 11
    # the mechanism as run (one Gaussian of three layers, replace-one) spends far more
    as_run = table.loc["as run: m of K, replace-one (σ/(2√3)), RDP"]
    assert as_run.delta_at_eps8 > 0.1 and as_run.rounds_allowed < theirs.rounds_allowed
    fdp = table.loc["as run: m of K, replace-one (σ/(2√3)), f-DP"]
    assert fdp.delta_at_eps8 <= as_run.delta_at_eps8 and fdp.rounds_allowed >= as_run.rounds_allowed


@pytest.mark.parametrize("make, param", [
    (lambda: g.GeyerRun(150, 50, 1.0), "num_clients"),                # not a multiple of the shard split
    (lambda: g.GeyerRun(100, 120, 1.0), "m"),                         # m_t > K
    (lambda: g.GeyerRun(100, 50, 0.0), "sigma"),                      # σ ≤ 0 for a DP run
    (lambda: g.GeyerRun(100, 50, -1.0), "sigma"),
    (lambda: g.GeyerRun(100, 50, 1.0, delta_budget=1.5), "delta_budget"),
    (lambda: g.GeyerRun(100, 50, 1.0, delta_budget=0.0), "delta_budget"),
    (lambda: g.GeyerRun(100, (20, 30, 40), 1.8), "m, a schedule"),   # shorter than the rounds run
    (lambda: g.GeyerRun(100, 100, None), "rounds"),                   # nothing stops a non-private run
    (lambda: g.GeyerRun(100, 50, 1.0, split="x"), "split"),
    (lambda: g.GeyerRun(100, 50, 1.0, batches=7).config(), "batches"),
])
def test_bad_input_is_refused_before_training(make, param):
    with pytest.raises(ValueError, match=f"^{param}"):
        make()


def test_grid_profiles():
    smoke, paper = g.grid("smoke"), g.grid("paper")
    assert len(smoke) == 4 and len(paper) == 1 + 96 + 18 + 4 + 20
    assert {r.num_clients for r in paper} == {100, 1000, 10000}
    same = g.same_ratio_runs("paper")
    assert {round(r.sigma ** 2 / r.schedule[0], 4) for r in same} == {round(1.8 ** 2 / 50, 4)}
    assert math.isclose(max(r.sigma for r in same), 1.8)


def test_ramp_vs_constant_pairs_each_ramp_with_its_final_m():
    base = dict(K=100, b=10, E=4, cc=0)
    outcomes = [dict(base, m="20→30→40→50", sigma=1.8, acc=0.80, rounds=13), dict(base, m="50", sigma=1.8, acc=0.78, rounds=11),
                dict(base, m="30", sigma=1.8, acc=0.7, rounds=30), dict(base, m="20→30→40→50", sigma=1.0, acc=0.5, rounds=4)]
    table = gt.ramp_vs_constant(outcomes)
    assert len(table) == 1 and table.gain.iloc[0] == pytest.approx(0.02) and table.constant_m.iloc[0] == "50"


def test_same_ratio_table_and_phases():
    runs = [g.GeyerRun(100, m, s, rounds=1, seed=seed) for seed in (0, 1) for m, s in ((10, 0.8), (50, 1.8))]
    accs = {(10, 0): 0.30, (10, 1): 0.34, (50, 0): 0.31, (50, 1): 0.33}
    table = gt.same_ratio_table([(r, pd.DataFrame({"acc_global": [accs[r.schedule[0], r.seed]]})) for r in runs])
    assert table.m.tolist() == [10, 50] and table.acc_after_round_1.tolist() == pytest.approx([0.32, 0.32])
    assert table.rounds_allowed.iloc[0] > table.rounds_allowed.iloc[1]         # less privacy per round at m = 10 …
    assert table.eps_of_the_round.iloc[0] > table.eps_of_the_round.iloc[1]    # … though one round alone has larger ε
    assert table.rounds_allowed.iloc[1] == 10                                   # σ = 1.8 at m = 50: CR 11
    rounds = np.arange(1, 41)
    metrics = pd.DataFrame({"round": rounds, "V_c": 1e-3 * np.minimum(rounds, 20), "U_s": 1.0 / rounds ** 2})
    ph = gt.phases(metrics)
    assert ph["V_c_early"] == pytest.approx(3e-3) and ph["V_c_late"] == pytest.approx(2e-2)
    assert ph["U_s_early"] / ph["U_s_late"] > 100 and ph["V_c_peak_round"] == 20 and ph["ratio_late"] > ph["ratio_early"]


def test_the_command_line_runner_fills_the_cache_the_notebook_reads(data_root, tmp_path):
    """``python -m dpfl.experiments.geyer2017`` once keyed its runs under ``__main__.GeyerRun``, which
    the notebook (importing dpfl.experiments.geyer2017) never found."""
    import os
    import subprocess
    import sys

    from dpfl.runs import Cache

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-m", "dpfl.experiments.geyer2017", "--profile", "smoke", "--device", DEVICE,
                          "--data-dir", str(data_root), "--cache", str(tmp_path), "--only", "m=50 σ=1 "],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run = next(r for r in g.grid("smoke") if r.label.startswith("K=100 m=50 σ=1 "))
    assert Cache(tmp_path).load(run) is not None


def test_reaccounting_every_published_row():
    """The numbers the notebook's §6 reports for the published rows at their implied σ: rounds each
    accounting allows at δ′, δ at ε = 8 after CR, ε at δ′ (docs/geyer2017.md §3)."""
    tables = {r["K"]: gt.reaccount(r["K"], (r["m"],) * r["rounds"], r["sigma"], r["delta_budget"]).set_index("accounting")
              for r in gt.paper_rows_settings()}
    theirs, layers, rdp_run, fdp_run = gt.ACCOUNTINGS
    allowed = lambda name: [int(tables[K].loc[name, "rounds_allowed"]) for K in (100, 1000, 10000)]
    assert allowed(theirs) == [10, 53, 408] and allowed(fdp_run) == [1, 2, 0]
    assert allowed(layers) == [9, 41, 203] and allowed(rdp_run) == [1, 1, 0]
    delta = [tables[K].loc[fdp_run, "delta_at_eps8"] for K in (100, 1000, 10000)]
    assert delta == pytest.approx([0.45, 0.41, 0.90], abs=0.01)
    eps = [tables[K].loc[name, "eps_at_delta_budget"] for name in (theirs, fdp_run) for K in (100, 1000, 10000)]
    assert eps == pytest.approx([8.44, 8.05, 8.01, 25.2, 30.9, 61.7], abs=0.1)


def test_rounds_allowed_gives_the_same_count_from_any_start():
    name = list(gt.ACCOUNTINGS)[2]                       # as run, RDP: cheap
    exact = gt.rounds_allowed(name, 1000, (10,), 2.5, 1e-5, limit=20_000)
    assert exact > 100
    for start in (1, exact // 3, exact, exact + 1, 5 * exact):   # within, at the count, beyond it (not within)
        assert gt.rounds_allowed(name, 1000, (10,), 2.5, 1e-5, limit=20_000, start=start) == exact


def test_the_ramp_claim_and_the_diverged_runs_of_the_committed_grids():
    """§6's ramp claim as the notebook reads it from the committed grids (K = 100, 1000, 10 000; nothing is
    computed): 44 ramp/constant pairs, the ramp ahead in 30, one pair with a diverged model (no gain), a mean gain
    of +1.8 pp over the other 43 (+0.3 pp while the diverged ramp's 0.0991, the class-0 share, counted); the three
    diverged configurations are K = 100, σ = 2 ones, and none is any K's best."""
    cache = runs.Cache(Path(__file__).resolve().parents[1] / "figures" / "geyer2017" / "cache")
    outcomes = [g.outcome(c, m) for K in (100, 1000, 10000) for c, m in g.cached_grid(cache, "paper", K)[0]]
    assert len(outcomes) == 118
    ramps = gt.ramp_vs_constant(outcomes)
    assert (len(ramps), int((ramps.gain > 0).sum()), int(ramps.gain.isna().sum())) == (44, 30, 1)
    assert 100 * ramps.gain.mean() == pytest.approx(1.84, abs=0.01)
    assert (ramps.acc_ramp.max(), ramps.acc_constant.max()) == pytest.approx((0.7799, 0.7768), abs=1e-4)
    assert sorted(o["run"] for o in outcomes if o["diverged"]) == [
        "K=100 m=20→25→30→35→40→45→50 σ=2 b=10 E=4", "K=100 m=30 σ=2 b=10 E=1", "K=100 m=30 σ=2 b=10 E=4"]
    assert all(not g.best([o for o in outcomes if o["K"] == K])["diverged"] for K in (100, 1000, 10000))
