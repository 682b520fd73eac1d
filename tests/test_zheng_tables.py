"""dpfl.experiments.zheng2021_tables: the notebook's table builders on hand-made metrics."""
import numpy as np
import pandas as pd
import pytest

from dpfl.accounting import gdp
from dpfl.accounting import tradeoff as tf
from dpfl.experiments import zheng2021_tables as zt
from dpfl.experiments.zheng2021 import ZhengRun, published


def _metrics(stored, loss=None, local=None):
    n = len(stored)
    return pd.DataFrame({"round": np.arange(1, n + 1), "acc_stored_local": stored, "acc_global": np.full(n, 0.5),
                         "loss_global": loss if loss is not None else np.ones(n),
                         "acc_local_all": local if local is not None else stored})


def test_rounds_table_reads_R_and_the_twin_at_R_next_to_the_paper():
    run, twin = ZhengRun("mnist", 1.0, 1.0, 16, 3), ZhengRun("mnist", 1.0, None, 16, 3)
    runs = {(1.0, 1.0): (run, _metrics([0.3, 0.5, 0.95])), (1.0, None): (twin, _metrics([0.6, 0.9, 0.99]))}
    row = zt.rounds_table(runs, published(), "1", 0.9).iloc[0]
    assert row["R ours (to 90%)"] == 3 and row["R paper (to 90%)"] == 93
    assert row["acc ours %"] == 95.0 and row["non-private acc ours %"] == 99.0 and row["acc paper %"] == 90.03
    assert row["μ_max ours at our R (GDP CLT, approx.)"] == round(float(gdp.clt_mu(1.0, 16, 600, 38 * 3)), 2)
    kinds = zt.rounds_comparisons(runs, published(), "1")
    assert [k for k, _ in kinds] == ["compare"] * 4
    assert kinds[0][1] == dict(quantity="Table 1 R at 90 %, p=1 σ=1", ours=3, reference=93, rel=0.2, source="Table 1")
    never = {(1.0, 1.0): (run, _metrics([0.3, 0.5, 0.6])), (1.0, None): runs[(1.0, None)]}
    assert zt.rounds_comparisons(never, published(), "1")[0][1]["holds"] is False
    # Table 3 (CIFAR-10) has the same four rows, its name of the accuracy ("top-1") and the data's label in each
    cifar = ZhengRun("cifar10", 1.0, 0.5, 16, 3)
    runs3 = {(1.0, 0.5): (cifar, _metrics([0.3, 0.5, 0.53])), (1.0, None): (twin, _metrics([0.4, 0.5, 0.6]))}
    rows3 = [kw for _, kw in zt.rounds_comparisons(runs3, published(), "3", data="JPEG copy")]
    assert [r["quantity"] for r in rows3] == [f"Table 3 {q} (JPEG copy), p=1 σ=0.5" for q in
                                              ("R at 52 %", "μ_max at our R", "top-1 at R (%)", "non-private top-1 at R (%)")]
    assert rows3[1]["ours"] == pytest.approx(float(gdp.clt_mu(0.5, 16, 500, 32 * 3))) and rows3[1]["reference"] == 26.81
    # at the paper's setting every published cell has its row: the five not computed here beside empty ones of ours
    table3 = zt.rounds_table(runs3, published(), "3", 0.52, devices={(1.0, 0.5): "cpu"}, pending=True)
    assert len(table3) == 6 and list(table3.columns) == list(zt.rounds_table(runs3, published(), "3", 0.52, devices={}).columns)
    assert table3["R paper (to 52%)"].tolist() == [468, 321, 207, 904, 671, 405]              # the paper's order
    assert table3["R ours (to 52%)"].iloc[2] == 3 and table3["R ours (to 52%)"].drop(index=2).isna().all()
    assert table3["computed on"].tolist() == ["pending"] * 2 + ["cpu"] + ["pending"] * 3
    assert list(zt.rounds_table({}, published(), "3", 0.52, pending=True).columns) == list(table3.columns)[:-1]


def test_batch_size_ratios_use_each_runs_steps():
    c8, c16 = ZhengRun("mnist", 0.5, 1.0, 8, 4), ZhengRun("mnist", 0.5, 1.0, 16, 4)
    pairs = {(1.0, 8): (c8, _metrics([0.5, 0.6, 0.7, 0.95])), (1.0, 16): (c16, _metrics([0.5, 0.95, 0.97, 0.98]))}
    ratio = zt.batch_size_ratios(pairs, 0.9).iloc[0]
    assert ratio["iterations ratio"] == pytest.approx(76 * 4 / (38 * 2))
    assert ratio["examples ratio"] == pytest.approx(8 * 76 * 4 / (16 * 38 * 2))
    assert ratio["μ ratio"] == pytest.approx(c8.mu(4) / c16.mu(2))
    table = zt.batch_size_table(pairs, published(), 0.9)
    assert table["R paper (to 90%)"].tolist() == [266, 194] and table["K·R ours"].tolist() == [304, 76]
    gaps = zt.loss_gaps({(1.0, 8): (c8, _metrics([0.1] * 4, loss=[2.0, 1.5, 1.2, 1.0])),
                         (1.0, 16): (c16, _metrics([0.1] * 4, loss=[1.5, 1.0, 1.0, 0.5]))})
    np.testing.assert_allclose(gaps[1.0], [0.5, 0.5, 0.2, 0.5])
    with pytest.raises(ValueError, match="same rounds"):
        zt.loss_gaps({(1.0, 8): (c8, _metrics([0.1] * 4)), (1.0, 16): (c16, _metrics([0.1] * 3))})


def test_metric_table_and_personalisation_gaps():
    m = _metrics([0.2, 0.5, 0.9], local=[0.1, 0.5, 0.95])
    row = zt.metric_table({(1.0, 1.0, 16): m}, 0.9).iloc[0]
    assert row["stored − clean, all rounds (pp)"] == pytest.approx(100 * (0.1 + 0.0 - 0.05) / 3)
    assert (row["R ours (stored)"], row["R ours (clean)"]) == (3, 3)
    assert zt.personalization_gaps({1.0: _metrics([0.1] * 4, local=[0.5, 0.6, 0.7, 0.9])})[1.0] == pytest.approx(0.3)


def test_exact_bracket_decides_the_side_of_the_clt():
    step = tf.subsample(tf.gaussian(1.0), 16 / 600)
    clt = gdp.epsilon(gdp.clt_mu(1.0, 16, 600, 38 * 20), 1e-5)
    low, high, h = zt.exact_bracket(step, 38 * 20, clt)
    assert low <= high and (not low <= clt <= high or h < 2e-6)
    assert clt > high                          # Theorem 2's CLT over-states ε here (the notebook's claim)


def test_pending_rows_leave_out_the_cells_computed_at_the_papers_setting():
    needs = "a GPU"
    run, twin = ZhengRun("mnist", 1.0, 0.75, 16, 3), _metrics([0.6, 0.9, 0.99])
    every = zt.pending_rows(published(), {}, needs)
    assert len(every) == len(published()) + len(zt.TABLE2_RATIOS) == 21
    assert every[2] == dict(quantity="Table 1 mnist p=1 σ=0.75 B=16: R to 90 % and accuracies at R",
                            reference="R = 64; accuracy 90.10 %, non-private 98.55 %", needs=needs, source="Table 1",
                            kind="reproduced")
    assert every[9]["quantity"] == "Table 2 mnist p=0.5 σ=1 B=8: R to 90 %"             # Table 2 prints no accuracies
    assert every[12]["quantity"].startswith("Table 3 cifar10 p=1 σ=1 B=16: R to 52 %")
    reached = _metrics([0.5, 0.8, 0.91])
    with_twin = zt.pending_rows(published(), {"1": {(1.0, 0.75): (run, reached, twin)}}, needs)
    assert [r for r in every if r not in with_twin] == [every[2]] and len(with_twin) == 20
    without_twin = zt.pending_rows(published(), {"1": {(1.0, 0.75): (run, reached, None)}}, needs)
    assert len(without_twin) == 21 and without_twin[2]["quantity"] == "Table 1 mnist p=1 σ=0.75 B=16: non-private accuracy at R"
    assert without_twin[2]["reference"] == "98.55 %" and "twin" in without_twin[2]["needs"]
    never = zt.pending_rows(published(), {"1": {(1.0, 0.75): (run, _metrics([0.5, 0.6, 0.7]), None)}}, needs)
    assert len(never) == 20          # a failed claim in its own comparisons, and no twin runs for it
    # a Table 2 cell has no twin to wait for (the paper prints none); the ratios go once computed
    b8 = {"2": {(0.5, 0.75): (ZhengRun("mnist", 0.5, 0.75, 8, 3), reached, None)}}
    table2 = zt.pending_rows(published(), b8, needs)
    assert [r for r in every if r not in table2] == [every[11]] and len(table2) == 20
    assert len(zt.pending_rows(published(), b8, needs, ratios_done=True)) == 17
    assert zt.pending_rows(published(), {"1": {(0.5, 0.75): (run, reached, twin)}}, needs) != table2   # keyed by table
    # Table 3 on a stand-in copy of CIFAR-10 can only be "reduced", so its pending rows say so; the rest are unchanged
    stand_in = zt.pending_rows(published(), {}, needs, kinds={"3": "reduced"})
    assert [r["kind"] for r in stand_in] == ["reduced" if r["source"] == "Table 3" else "reproduced" for r in every]
    assert sum(r["kind"] == "reduced" for r in stand_in) == 6


def test_table_2_cells_at_the_papers_setting_give_R_mu_and_the_ratios():
    """Table 2's B = 8 cells read like Table 1's (R and μ_max at R; the paper prints no accuracies), and
    §4's ratios come from each B = 8 cell and Table 1's B = 16 cell at the same (p, σ)."""
    c8 = {s: ZhengRun("mnist", 0.5, s, 8, 4) for s in (1.0, 0.9, 0.75)}
    c16 = {s: ZhengRun("mnist", 0.5, s, 16, 4) for s in (1.0, 0.9, 0.75)}
    b8 = {(0.5, s): (c8[s], _metrics([0.5, 0.6, 0.7, 0.95]), None) for s in c8}
    b16 = {(0.5, s): (c16[s], _metrics([0.5, 0.95]), _metrics([0.9, 0.99])) for s in (1.0, 0.75)}
    kinds = zt.rounds_comparisons({k: v[:2] for k, v in b8.items()}, published(), "2")
    assert [k for k, _ in kinds] == ["compare"] * 6                     # R and μ_max per cell, no accuracy
    assert kinds[0][1] == dict(quantity="Table 2 R at 90 %, p=0.5 σ=1", ours=4, reference=266, rel=0.2, source="Table 2")
    assert kinds[1][1]["ours"] == pytest.approx(c8[1.0].mu(4)) and kinds[1][1]["reference"] == 3.24
    row = zt.rounds_table({k: v[:2] for k, v in b8.items()}, published(), "2", 0.9).iloc[2]
    assert (row["σ"], row["R ours (to 90%)"], row["R paper (to 90%)"]) == (0.75, 4, 191) and np.isnan(row["acc paper %"])
    pairs = zt.batch_size_pairs(b8, b16)                                 # σ = 0.9 has no B = 16 partner yet
    assert list(pairs) == [(1.0, 8), (1.0, 16), (0.75, 8), (0.75, 16)]
    ratios = zt.batch_size_ratios(pairs, 0.9)
    assert ratios["iterations ratio"].tolist() == pytest.approx([76 * 4 / (38 * 2)] * 2)
    rows = zt.ratio_comparisons(ratios)
    assert [r["quantity"] for r in rows] == [f"Table 2 mean {c} (B=8 / B=16)" for c in zt.TABLE2_RATIOS]
    assert rows[1]["ours"] == pytest.approx(4.0) and rows[1]["reference"] == 2.78 and rows[1]["rel"] == 0.2
    assert rows[0]["note"] == "mean over σ = 1, 0.75"


def test_plot_paper_cells_draws_one_panel_per_p_one_colour_per_sigma_and_the_papers_R():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from dpfl.experiments import zheng2021_plots as zp

    cell = lambda p, s: ZhengRun("mnist", p, s, 16, 4)
    twin = _metrics([0.9, 0.97, 0.98, 0.99, 0.99, 0.99])                  # longer than its cells: cut to round 4
    done = {(1.0, 1.0): (cell(1.0, 1.0), _metrics([0.3, 0.6, 0.8, 0.91]), twin),
            (1.0, 0.75): (cell(1.0, 0.75), _metrics([0.4, 0.92]), twin),
            (0.25, 1.0): (cell(0.25, 1.0), _metrics([0.2, 0.5, 0.91]), None)}
    fig = zp.plot_paper_cells(done, published(), "1", 0.9)
    first, second = fig.axes
    assert (first.get_title(), second.get_title()) == ("p = 1", "p = 0.25")
    lines = {line.get_label(): line for line in first.get_lines()}
    assert to_hex(lines["σ = 1: stored local"].get_color()) == zp.SIGMA_COLORS[1.0].lower()
    assert to_hex(lines["σ = 0.75: stored local"].get_color()) == zp.SIGMA_COLORS[0.75].lower()
    assert list(lines["σ = 1: paper's R = 93"].get_xdata()) == [93, 93]             # Table 1's published R
    assert list(lines["σ = 0.75: paper's R = 64"].get_xdata()) == [64, 64]
    assert list(lines["non-private twin"].get_xdata()) == [1, 2, 3, 4]               # to the last round of its cells
    assert "non-private twin" not in {line.get_label() for line in second.get_lines()}
    # the legend: one entry per σ, naming the paper's R, and the twin (the title says what each line style is)
    assert [t.get_text() for t in first.get_legend().get_texts()] == [
        "σ = 1 (paper's R = 93)", "σ = 0.75 (paper's R = 64)", "non-private twin"]
    plt.close(fig)
    single = zp.plot_paper_cells({(0.5, 0.75): (cell(0.5, 0.75), _metrics([0.4, 0.92]), None)}, published(), "2")
    single.canvas.draw()                                   # one panel: the title wraps inside the figure's width
    assert single.get_suptitle().count("\n") >= 1
    assert single._suptitle.get_window_extent().width <= single.bbox.width
    plt.close(single)
    with pytest.raises(ValueError, match="done is empty"):
        zp.plot_paper_cells({}, published())
    with pytest.raises(ValueError, match=r"σ = \[0\.8\]"):
        zp.plot_paper_cells({(1.0, 0.8): done[(1.0, 1.0)]}, published())


def test_personalization_claim_holds_only_where_personalized_beats_global_at_every_sigma():
    above = _metrics([0.5] * 4, local=[0.6, np.nan, 0.7, 0.9])          # global 0.5: +10, +20, +40 pp at rounds 1, 3, 4
    below = _metrics([0.5] * 2, local=[0.9, 0.4])                        # second half: −10 pp
    claim = zt.personalization_claim({1.0: above}, "Fig. 4.1 here")
    assert claim == dict(statement="Fig. 4.1 here: personalized models beat the global model (mean over the second half "
                                   "of the evaluated rounds)", holds=True, note="σ=1: +30.0 pp to round 4")
    assert not zt.personalization_claim({1.0: above, 0.75: below}, "x")["holds"]
    both = zt.personalization_claim({0.5: above, None: above}, "x")         # the non-private run, by name
    assert both["holds"] and both["note"] == "σ=0.5: +30.0 pp to round 4, non-private: +30.0 pp to round 4"
    assert not zt.personalization_claim({0.5: above, None: below}, "x")["holds"]
    with pytest.raises(ValueError, match="curves is empty"):
        zt.personalization_claim({}, "x")


def test_plot_personalized_vs_global_draws_both_curves_per_sigma_at_the_evaluated_rounds():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from dpfl.experiments import zheng2021_plots as zp

    evaluated = _metrics([0.3, 0.6, 0.8, 0.91], local=[np.nan, 0.62, np.nan, 0.93])   # evaluated at rounds 2 and 4
    fig = zp.plot_personalized_vs_global({0.75: evaluated, None: _metrics([0.9, 0.95])}, "Fig. 4.1", "setting")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"σ = 0.75, personalized", "σ = 0.75, global", "non-private, personalized", "non-private, global"}
    assert list(lines["σ = 0.75, personalized"].get_xdata()) == [2, 4]
    assert list(lines["σ = 0.75, personalized"].get_ydata()) == pytest.approx([62, 93])
    assert list(lines["σ = 0.75, global"].get_ydata()) == pytest.approx([50, 50])             # the same rounds
    assert to_hex(lines["σ = 0.75, global"].get_color()) == zp.SIGMA_COLORS[0.75].lower()
    assert to_hex(lines["non-private, personalized"].get_color()) == "#000000"
    assert ax.get_title() == "Fig. 4.1" and [t.get_text() for t in ax.texts] == ["setting"]
    fig.canvas.draw()                                        # the legend sits beside the axes, inside the figure
    legend = ax.get_legend().get_window_extent()
    assert ax.get_window_extent().x1 < legend.x0 and legend.x1 <= fig.bbox.x1
    plt.close(fig)
    with pytest.raises(ValueError, match="curves is empty"):
        zp.plot_personalized_vs_global({}, "t")
    with pytest.raises(ValueError, match=r"σ = \[0\.8\]"):
        zp.plot_personalized_vs_global({0.8: evaluated}, "t")


def test_batch_size_claim_holds_only_where_B8_needs_more_rounds_than_B16_at_every_sigma():
    run = lambda s, B, stored: (ZhengRun("mnist", 0.5, s, B, len(stored)), _metrics(stored))
    pairs = {(1.0, 8): run(1.0, 8, [0.5, 0.8, 0.91]), (1.0, 16): run(1.0, 16, [0.6, 0.92]),
             (0.75, 8): run(0.75, 8, [0.5, 0.95]), (0.75, 16): run(0.75, 16, [0.95])}
    claim = zt.batch_size_claim(pairs, 0.9, "here")
    assert claim == dict(statement="B = 8 needs more rounds than B = 16 to reach 90% (here, σ = 1, 0.75)", holds=True,
                         source="Table 2, §4", note="σ=1: R = 3 (B = 8) vs 2 (B = 16); σ=0.75: R = 2 (B = 8) vs 1 (B = 16)")
    pairs[(0.75, 8)] = run(0.75, 8, [0.95])                               # equal R: B = 8 does not need more
    assert not zt.batch_size_claim(pairs, 0.9, "here")["holds"]
    pairs[(0.75, 8)] = run(0.75, 8, [0.5])                                # B = 8 never reaches it: more rounds
    assert zt.batch_size_claim(pairs, 0.9, "here")["holds"]
    pairs[(0.75, 16)] = run(0.75, 16, [0.5, 0.6])                         # B = 16 never reaches it: no evidence
    assert not zt.batch_size_claim(pairs, 0.9, "here")["holds"]
    partial = {k: v for k, v in pairs.items() if k != (1.0, 16)}         # σ = 1 has no B = 16 partner: left out
    assert "σ = 0.75)" in zt.batch_size_claim(partial, 0.9, "here")["statement"]
    with pytest.raises(ValueError, match="no σ at both"):
        zt.batch_size_claim({(1.0, 8): pairs[(1.0, 8)]}, 0.9, "here")


def test_plot_batch_sizes_draws_B8_dashed_and_B16_solid_in_the_sigmas_colour_on_both_panels():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from dpfl.experiments import zheng2021_plots as zp

    b8 = _metrics([0.2, 0.5, 0.7, 0.91], loss=[2.0, np.nan, 1.5, 1.2])             # the loss evaluated at 3 rounds
    pairs = {(0.75, 8): (ZhengRun("mnist", 0.5, 0.75, 8, 4), b8),
             (0.75, 16): (ZhengRun("mnist", 0.5, 0.75, 16, 2), _metrics([0.6, 0.92]))}
    fig = zp.plot_batch_sizes(pairs, "Fig. 4.2", "setting")
    accuracy, loss = fig.axes
    for ax, rounds8 in ((accuracy, [1, 2, 3, 4]), (loss, [1, 3, 4])):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == {"σ = 0.75, B = 8", "σ = 0.75, B = 16"}
        assert list(lines["σ = 0.75, B = 8"].get_xdata()) == rounds8
        assert (lines["σ = 0.75, B = 8"].get_linestyle(), lines["σ = 0.75, B = 16"].get_linestyle()) == ("--", "-")
        assert to_hex(lines["σ = 0.75, B = 8"].get_color()) == zp.SIGMA_COLORS[0.75].lower()
    assert list(lines["σ = 0.75, B = 8"].get_ydata()) == pytest.approx([2.0, 1.5, 1.2])
    assert accuracy.get_title() == "Fig. 4.2" and [t.get_text() for t in accuracy.texts] == ["setting"]
    plt.close(fig)
    with pytest.raises(ValueError, match="pairs is empty"):
        zp.plot_batch_sizes({}, "t")
    with pytest.raises(ValueError, match=r"σ = \[0\.8\]"):
        zp.plot_batch_sizes({(0.8, 8): pairs[(0.75, 8)]}, "t")


def test_rounds_offset_sets_our_R_against_the_papers_with_the_accuracy_gap_it_stands_for():
    """§9 of the notebook: per cell, R ours / R paper and our accuracy at the paper's R; the summary's
    geometric mean, count above, range and mean gap below the target, on hand-made metrics."""
    pub = published()
    row = lambda table, p, s: pub.query("table == @table and p == @p and sigma == @s").iloc[0]
    slow, fast = row("1", 1.0, 0.75), row("3", 1.0, 0.5)          # paper R = 64 (to 90 %) and 207 (to 52 %)
    acc = np.linspace(0.5, 0.905, 80)                               # reaches 90 % at round 80: R 80 / 64
    acc[63] = 0.895                                                 # at the paper's R = 64: 89.5 %
    cifar = np.r_[np.linspace(0.1, 0.5, 149), [0.53]]               # reaches 52 % at round 150, before the paper's 207
    done = {"1": {(1.0, 0.75): (ZhengRun("mnist", 1.0, 0.75, 16, 300), _metrics(acc), None)},
            "2": {},
            "3": {(1.0, 0.5): (ZhengRun("cifar10", 1.0, 0.5, 16, 1000), _metrics(cifar), None),
                  (0.5, 0.5): (ZhengRun("cifar10", 0.5, 0.5, 16, 1000), _metrics(np.full(10, 0.3)), None)}}  # never reached
    offset = zt.rounds_offset(done, pub)
    assert list(offset["R paper"]) == [int(slow.R), int(fast.R)] and list(offset["R ours"]) == [80, 150]
    assert offset["ours at the paper's R %"].iloc[0] == pytest.approx(89.5)
    assert np.isnan(offset["ours at the paper's R %"].iloc[1])      # our run stopped before the paper's R
    lean = zt.offset_summary(offset)
    assert lean["cells"] == 2 and lean["above"] == 1
    assert lean["geometric mean"] == pytest.approx(np.sqrt(80 / 64 * 150 / 207))
    assert (lean["lowest"], lean["highest"]) == pytest.approx((150 / 207, 80 / 64))
    assert lean["gap (pp)"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="offset is empty"):
        zt.offset_summary(zt.rounds_offset({"1": {}}, pub))


def test_plot_rounds_offset_draws_one_point_per_cell():
    import matplotlib

    matplotlib.use("Agg")
    from dpfl.experiments import zheng2021_plots as zp

    offset = pd.DataFrame({"table": ["1", "2"], "dataset": ["mnist"] * 2, "p": [1.0, 0.5], "σ": [0.75, 1.0], "B": [16, 8],
                           "R paper": [64, 266], "R ours": [73, 250], "R ours / paper": [73 / 64, 250 / 266],
                           "target %": [90.0, 90.0], "ours at the paper's R %": [89.2, np.nan]})
    fig = zp.plot_rounds_offset(offset)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["T1 p=1 σ=0.75", "T2 p=0.5 σ=1 B=8"]
    assert list(np.asarray(ax.collections[-1].get_offsets())[:, 1]) == pytest.approx([73 / 64, 250 / 266])
    with pytest.raises(ValueError, match="offset is empty"):
        zp.plot_rounds_offset(offset.iloc[:0])


def test_seed_spread_lists_R_per_seed_for_the_cells_run_at_several_seeds():
    """§9: a cell cached at seeds 0 and 1 gets a row per seed (R ours, the paper's, their ratio); a cell at one
    seed alone is left out; a run that never reached 90 % has R NaN, not a number."""
    pub = published()
    cell = lambda p, s: ZhengRun("mnist", p, s, 16, 300)
    reach = lambda R: _metrics(np.r_[np.full(R - 1, 0.5), [0.91]])
    by_seed = {0: {(1.0, 0.75): (cell(1.0, 0.75), reach(73), None), (0.5, 1.0): (cell(0.5, 1.0), reach(210), None)},
               1: {(1.0, 0.75): (cell(1.0, 0.75), reach(67), None)},
               2: {(1.0, 0.75): (cell(1.0, 0.75), _metrics(np.full(20, 0.5)), None)}}
    spread = zt.seed_spread(by_seed, pub)
    assert list(spread.seed) == [0, 1, 2] and (spread.p == 1.0).all() and (spread["R paper"] == 64).all()
    assert list(spread["R ours"].iloc[:2]) == [73, 67] and np.isnan(spread["R ours"].iloc[2])
    assert spread["R ours / paper"].iloc[1] == pytest.approx(67 / 64)
    assert zt.seed_spread({0: by_seed[0]}, pub).empty
