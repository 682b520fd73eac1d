"""The tables of Zheng et al. (2021) §4 and of our checks beside them, built from cached runs
(:mod:`dpfl.experiments.zheng2021`) and the published values (``published()``; docs/zheng2021.md).

Pure functions: each takes runs' metrics (one DataFrame per run, as ``dpfl.federated.loop.run``
returns) and gives a table; the notebook prints it and compares its columns with the paper's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dpfl.accounting import gdp
from dpfl.accounting import tradeoff as tf
from dpfl.experiments.zheng2021 import TARGETS, first_round

__all__ = ["TABLE2_RATIOS", "C_HALF_G1", "at_round", "mu_max", "mu_max_table", "rounds_table", "rounds_comparisons",
           "pending_rows", "rounds_offset", "offset_summary", "seed_spread", "batch_size_claim", "personalization_claim",
           "batch_size_table", "batch_size_pairs", "batch_size_ratios", "ratio_comparisons", "loss_gaps",
           "personalization_gaps", "metric_table", "exact_bracket", "tightness_row"]

#: §4's text on Table 2 (p = 0.5): B = 8 over B = 16 at the 90 % target (docs/zheng2021.md §3)
TABLE2_RATIOS = {"μ ratio": 0.83, "iterations ratio": 2.78, "examples ratio": 1.39}

#: C_{0.5}(G_1) at α = 0, 0.1, …, 1 (Fig. E.1; the verified values of docs/zheng2021.md §1)
C_HALF_G1 = (1, .7554, .6185, .5086, .4085, .3085, .2157, .1371, .0736, .0262, 0)

#: per table: the accuracy its R is counted to (Tables 1 and 2: MNIST 90 %; Table 3: CIFAR-10 52 %) and the
#: names of its accuracy, twin-accuracy, μ and best-accuracy columns (Table 2 prints no accuracies)
_TABLE = {"1": (0.90, "acc", "non-private acc", "μ_max ours at our R (GDP CLT, approx.)", "best acc ours % (rounds run)"),
          "2": (0.90, "acc", "non-private acc", "μ_max ours at our R (GDP CLT, approx.)", "best acc ours % (rounds run)"),
          "3": (0.52, "top-1", "non-private", "μ_max ours (GDP CLT, approx.)", "best ours % (rounds)")}


def at_round(metrics: pd.DataFrame, R: int, column: str = "acc_stored_local") -> float:
    """``column`` at round R (NaN when the run stopped before it)."""
    row = metrics.loc[metrics["round"] == R, column]
    return float(row.iloc[0]) if len(row) else np.nan


def mu_max(cell) -> float:
    """Theorem 2's μ_max (the GDP CLT, an approximation) at a published cell's (σ, B, n, K, R)."""
    return float(gdp.clt_mu(cell.sigma, cell.B, cell.n, cell.K * cell.R))


def mu_max_table(published: pd.DataFrame) -> pd.DataFrame:
    """:func:`mu_max` at every published cell, to 3 decimals, next to the paper's."""
    return pd.DataFrame([{"table": r.table, "dataset": r.dataset, "p": r.p, "σ": r.sigma, "B": r.B, "K": r.K,
                          "R (paper)": r.R, "μ_max paper (GDP CLT)": r.mu, "μ_max ours (GDP CLT, approx.)": round(mu_max(r), 3)}
                         for r in published.itertuples()])


def _twin(runs: dict, twins: dict | None, p: float, s: float) -> pd.DataFrame | None:
    """The non-private twin's metrics of cell (p, σ), or None where there is none (Table 2's cells)."""
    return runs.get((p, None), (None, None))[1] if twins is None else twins.get((p, s))


def rounds_table(runs: dict, published: pd.DataFrame, table: str, target: float, data: str | None = None,
                 twins: dict | None = None, devices: dict | None = None, pending: bool = False) -> pd.DataFrame:
    """Table 1 or 2 (MNIST; Table 2's B = 8 cells) or Table 3 (CIFAR-10): per (p, σ), the first round R whose stored accuracy
    reaches ``target``, μ_max at R, the accuracy at R and the non-private twin's at the same R, each
    next to the paper's. ``runs``: {(p, σ): (ZhengRun, metrics)} with σ = None the twin of each p,
    unless ``twins`` gives each cell's: {(p, σ): metrics or None} (e.g. ``zheng2021.cached_cells``).
    ``devices``: {(p, σ): what computed it} (``zheng2021.computed_on``), a last column. ``pending``: also a row
    for each of the table's published cells not in ``runs``, the paper's numbers beside empty ones of ours and
    "pending" (the paper's setting: a reader sees every cell of the paper's table, computed or not)."""
    goal, acc, nonprivate, mu, best = _TABLE[table]
    rows = []
    for (p, s), (config, metrics) in runs.items():
        if s is None:
            continue
        twin = _twin(runs, twins, p, s)
        R = first_round(metrics, target)
        ref = published.query("table == @table and p == @p and sigma == @s")
        ref = ref.iloc[0] if len(ref) else None
        paper = (lambda col: None if ref is None else ref[col])
        rows.append({**({"data": data} if data else {}), "p": p, "σ": s, f"R ours (to {target:.0%})": R,
                     f"R paper (to {goal:.0%})": None if ref is None else int(ref.R),
                     mu: round(config.mu(R), 2) if R else np.nan,
                     "μ_max paper (GDP CLT)": paper("mu"),
                     f"{acc} ours %": round(100 * at_round(metrics, R), 2) if R else np.nan,
                     f"{acc} paper %": paper("acc"),
                     f"{nonprivate} ours %": round(100 * at_round(twin, R), 2) if R and twin is not None else np.nan,
                     f"{nonprivate} paper %": paper("nonprivate_acc"),
                     best: f"{100 * metrics.acc_stored_local.max():.1f} ({len(metrics)})",
                     **({"computed on": devices.get((p, s))} if devices is not None else {})})
    if pending:
        refs = list(published.query("table == @table").itertuples())
        for ref in refs:
            if (ref.p, ref.sigma) not in runs:
                rows.append({**({"data": data} if data else {}), "p": ref.p, "σ": ref.sigma,
                             f"R ours (to {target:.0%})": None, f"R paper (to {goal:.0%})": int(ref.R), mu: None,
                             "μ_max paper (GDP CLT)": ref.mu, f"{acc} ours %": None, f"{acc} paper %": ref.acc,
                             f"{nonprivate} ours %": None, f"{nonprivate} paper %": ref.nonprivate_acc, best: "pending",
                             **({"computed on": "pending"} if devices is not None else {})})
        order = [(ref.p, ref.sigma) for ref in refs]               # the paper's order of its cells
        rows.sort(key=lambda row: order.index((row["p"], row["σ"])) if (row["p"], row["σ"]) in order else len(order))
    return pd.DataFrame(rows)


def rounds_comparisons(runs: dict, published: pd.DataFrame, table: str, data: str = "", twins: dict | None = None) -> list:
    """At the paper's scale, Table ``table``'s cells as comparisons: (kind of record, keyword arguments
    for ``Notebook.compare`` or ``Notebook.claim``) — R within ±20 %, μ_max at our R (the GDP CLT), accuracy and
    the twin's accuracy within 2 pp (where the paper prints them and the twin is there); a cell that never
    reaches the target is a failed claim. ``twins`` as in :func:`rounds_table`."""
    goal, what = _TABLE[table][0], ("top-1" if table == "3" else "accuracy")
    tag, source = (f" ({data})" if data else ""), f"Table {table}"
    out = []
    for (p, s), (config, metrics) in runs.items():
        ref = published.query("table == @table and p == @p and sigma == @s")
        if s is None or not len(ref):
            continue
        ref, R, cell = ref.iloc[0], first_round(metrics, goal), f"p={p:g} σ={s:g}"
        if R is None:
            out.append(("claim", dict(statement=f"{source}, {cell}: the target {100 * goal:.0f} % is reached", holds=False,
                                      source=source, note=f"best {100 * metrics.acc_stored_local.max():.1f} % in "
                                                          f"{len(metrics)} rounds")))
            continue
        twin = _twin(runs, twins, p, s)
        out.append(("compare", dict(quantity=f"{source} R at {100 * goal:.0f} %{tag}, {cell}", ours=R, reference=ref.R, rel=0.2)))
        out.append(("compare", dict(quantity=f"{source} μ_max at our R{tag}, {cell}", ours=config.mu(R), reference=ref.mu,
                                    rel=0.2, note="consistent with R within ±20 % (μ ∝ √R)")))
        if np.isnan(ref.acc):                                        # Table 2 prints R and μ alone
            continue
        out.append(("compare", dict(quantity=f"{source} {what} at R (%){tag}, {cell}", ours=100 * at_round(metrics, R),
                                    reference=ref.acc, abs=2)))
        if twin is not None:
            out.append(("compare", dict(quantity=f"{source} non-private {what} at R (%){tag}, {cell}",
                                        ours=100 * at_round(twin, R), reference=ref.nonprivate_acc, abs=2)))
    for _, kwargs in out:
        kwargs.setdefault("source", source)
    return out


def rounds_offset(done_by_table: dict, published: pd.DataFrame) -> pd.DataFrame:
    """Our R against the paper's, over every cell computed at the paper's setting: each within ±20 % is a
    match (:func:`rounds_comparisons`), but do they lean one way? ``done_by_table``: {table: {(p, σ): (config,
    metrics, twin's metrics or None)}} (``zheng2021.cached_cells`` per table). One row per cell that reached
    its target: the paper's R, ours, their ratio, and our accuracy at the paper's R, the accuracy gap that a
    ratio of rounds stands for (NaN where our run stopped before the paper's R, having reached the target)."""
    rows = []
    for table, done in done_by_table.items():
        goal = _TABLE[table][0]
        for (p, s), (config, metrics, _) in done.items():
            ref = published.query("table == @table and p == @p and sigma == @s and B == @config.batch_size")
            R = first_round(metrics, goal)
            if not len(ref) or R is None:
                continue
            paper_R = int(ref.R.iloc[0])
            rows.append({"table": table, "dataset": config.dataset, "p": p, "σ": s, "B": config.batch_size,
                         "R paper": paper_R, "R ours": R, "R ours / paper": R / paper_R, "target %": 100 * goal,
                         "ours at the paper's R %": 100 * at_round(metrics, paper_R)})
    return pd.DataFrame(rows, columns=["table", "dataset", "p", "σ", "B", "R paper", "R ours", "R ours / paper",
                                       "target %", "ours at the paper's R %"])


def offset_summary(offset: pd.DataFrame) -> dict:
    """Of :func:`rounds_offset`'s rows: how many cells, how many with our R above the paper's, the geometric
    mean and the range of the ratios, and "gap (pp)": the mean gap of our accuracy at the paper's R below the
    target (over the cells whose run reached the paper's R)."""
    if not len(offset):
        raise ValueError("offset is empty: no cell computed at the paper's setting")
    ratio = offset["R ours / paper"]
    gap = (offset["target %"] - offset["ours at the paper's R %"]).dropna()
    return {"cells": len(offset), "above": int((ratio > 1).sum()), "geometric mean": float(np.exp(np.log(ratio).mean())),
            "lowest": float(ratio.min()), "highest": float(ratio.max()),
            "gap (pp)": float(gap.mean()) if len(gap) else np.nan}


def seed_spread(done_by_seed: dict, published: pd.DataFrame, table: str = "1") -> pd.DataFrame:
    """Our R for the cells of Table ``table`` computed at more than one seed: does a cell's R lie above the
    paper's at every seed, or does the seed move it across? (§9 of the notebook; every other cell runs at seed 0,
    one data partition and one initial model.) ``done_by_seed``: {seed: ``zheng2021.cached_cells``'s
    {(p, σ): (config, metrics, twin's metrics or None)}}. One row per cell and seed, for the cells cached at
    two seeds or more: the paper's R, ours, their ratio; a run that never reached the target has R NaN."""
    goal = _TABLE[table][0]
    seen = {}
    for seed, done in done_by_seed.items():
        for (p, s), (config, metrics, _) in done.items():
            seen.setdefault((p, s, config.batch_size), []).append((seed, first_round(metrics, goal)))
    rows = []
    for (p, s, B), runs in seen.items():
        ref = published.query("table == @table and p == @p and sigma == @s and B == @B")
        if len(runs) < 2 or not len(ref):
            continue
        paper_R = int(ref.R.iloc[0])
        rows += [{"p": p, "σ": s, "B": B, "seed": seed, "R paper": paper_R, "R ours": np.nan if R is None else R,
                  "R ours / paper": np.nan if R is None else R / paper_R} for seed, R in sorted(runs)]
    return pd.DataFrame(rows, columns=["p", "σ", "B", "seed", "R paper", "R ours", "R ours / paper"])


def pending_rows(published: pd.DataFrame, done: dict, needs: str, ratios_done: bool = False,
                 kinds: dict | None = None) -> list[dict]:
    """Every published number a run below the paper's scale leaves to it, as keyword arguments of
    ``Notebook.pending``: each cell's R and accuracies, and (unless ``ratios_done``) Table 2's three
    ratios. A cell computed at the paper's setting (``done``: {table: ``zheng2021.cached_cells``'s
    {(p, σ): (config, metrics, twin's metrics or None)}}) has its own comparisons
    (:func:`rounds_comparisons`) and is left out, save its non-private accuracy while the twin is missing
    (Tables 1 and 3; Table 2 prints none). ``kinds``: {table: the kind of evidence its cells will be once
    computed}, "reproduced" where not given (Table 3 on the JPEG copy of CIFAR-10 can only be "reduced")."""
    rows, kinds = [], kinds or {}
    for r in published.itertuples():
        cell, goal = f"Table {r.table} {r.dataset} p={r.p:g} σ={r.sigma:g} B={r.B}", TARGETS[r.table]
        kind = kinds.get(r.table, "reproduced")
        hit = done.get(r.table, {}).get((r.p, r.sigma))
        if hit is not None:
            if hit[2] is None and not np.isnan(r.nonprivate_acc) and first_round(hit[1], goal) is not None:
                rows.append(dict(quantity=f"{cell}: non-private accuracy at R", reference=f"{r.nonprivate_acc:.2f} %",
                                 needs="the cell's non-private twin (python -m dpfl.experiments.zheng2021 --profile cells)",
                                 source=f"Table {r.table}", kind=kind))
            continue
        accs = "" if np.isnan(r.acc) else f"; accuracy {r.acc:.2f} %, non-private {r.nonprivate_acc:.2f} %"
        rows.append(dict(quantity=f"{cell}: R to {100 * goal:.0f} %" + (" and accuracies at R" if accs else ""),
                         reference=f"R = {r.R}{accs}", needs=needs, source=f"Table {r.table}", kind=kind))
    if ratios_done:
        return rows
    return rows + [dict(quantity=f"Table 2 mean {col} (B=8 / B=16)", reference=ref, needs=needs, source="§4, Table 2",
                        kind=kinds.get("2", "reproduced"))
                   for col, ref in TABLE2_RATIOS.items()]


def batch_size_table(pairs: dict, published: pd.DataFrame, target: float) -> pd.DataFrame:
    """Table 2: per σ and B ∈ {8, 16} (``pairs``: {(σ, B): (ZhengRun, metrics)}, all at one p), R to
    ``target``, K·R, B·K·R, μ_max at R next to the paper's, and the last round's stored accuracy,
    global accuracy and global test loss."""
    rows = []
    for (s, B), (config, metrics) in pairs.items():
        p, R, K = config.p, first_round(metrics, target), config.steps
        ref = published.query("p == @p and sigma == @s and B == @B and table in ('1', '2')")
        final = metrics.dropna(subset=["loss_global"]).iloc[-1]
        rows.append({"p": p, "σ": s, "B": B, "K": K, f"R ours (to {target:.0%})": R,
                     "K·R ours": K * R if R else np.nan, "B·K·R ours": B * K * R if R else np.nan,
                     "μ_max ours (GDP CLT, approx.)": round(config.mu(R), 2) if R else np.nan,
                     "R paper (to 90%)": int(ref.R.iloc[0]) if len(ref) else None,
                     "μ_max paper (GDP CLT)": float(ref.mu.iloc[0]) if len(ref) else None,
                     "stored acc at last round %": round(100 * metrics.acc_stored_local.iloc[-1], 1),
                     "global acc at last round %": round(100 * final.acc_global, 1),
                     "global test loss at last round": round(final.loss_global, 3)})
    return pd.DataFrame(rows)


def batch_size_ratios(pairs: dict, target: float) -> pd.DataFrame:
    """§4's ratios B = 8 / B = 16 per σ where both reach ``target``: μ at R, iterations K·R, examples B·K·R."""
    rows = []
    for s in dict.fromkeys(s for s, _ in pairs):
        (c8, m8), (c16, m16) = pairs[(s, 8)], pairs[(s, 16)]
        R8, R16 = first_round(m8, target), first_round(m16, target)
        if R8 and R16:
            rows.append({"σ": s, "μ ratio": c8.mu(R8) / c16.mu(R16), "iterations ratio": c8.steps * R8 / (c16.steps * R16),
                         "examples ratio": 8 * c8.steps * R8 / (16 * c16.steps * R16)})
    return pd.DataFrame(rows)


def batch_size_pairs(b8: dict, b16: dict) -> dict:
    """Table 2's pairs from the cells computed at the paper's setting: {(σ, B): (config, metrics)} for
    every σ with a B = 8 cell in ``b8`` (``cached_cells(cache, "2")``) and its B = 16 partner at the same
    p in ``b16`` (``cached_cells(cache, "1")``), for :func:`batch_size_ratios`."""
    pairs = {}
    for (p, s), (c8, m8, _) in sorted(b8.items(), reverse=True):
        if (p, s) in b16:
            c16, m16, _ = b16[(p, s)]
            pairs[(s, 8)], pairs[(s, 16)] = (c8, m8), (c16, m16)
    return pairs


def batch_size_claim(pairs: dict, target: float, setting: str) -> dict:
    """§4's statement that B = 8 needs more rounds than B = 16 to reach ``target`` (Table 2 against Table 1: 191 /
    229 / 266 against 127 / 176 / 194 at p = 0.5), as keyword arguments of ``Notebook.claim``, for the σ that
    ``pairs`` ({(σ, B): (config, metrics)}, :func:`batch_size_pairs`) holds at both batch sizes. A run that never
    reaches the target has R None: a B = 8 run that never does needs more rounds than any B = 16 run that does;
    a B = 16 run that never does fails the claim. ``setting``: how the runs were made, in the statement."""
    sigmas = sorted({s for s, B in pairs if (s, 8) in pairs and (s, 16) in pairs}, reverse=True)
    if not sigmas:
        raise ValueError("pairs holds no σ at both B = 8 and B = 16")
    R = {(s, B): first_round(pairs[(s, B)][1], target) for s in sigmas for B in (8, 16)}
    holds = all(R[s, 16] is not None and (R[s, 8] is None or R[s, 8] > R[s, 16]) for s in sigmas)
    return dict(statement=f"B = 8 needs more rounds than B = 16 to reach {target:.0%} ({setting}, σ = "
                          + ", ".join(f"{s:g}" for s in sigmas) + ")", holds=holds, source="Table 2, §4",
                note="; ".join(f"σ={s:g}: R = {R[s, 8]} (B = 8) vs {R[s, 16]} (B = 16)" for s in sigmas))


def ratio_comparisons(ratios: pd.DataFrame) -> list[dict]:
    """§4's three Table 2 ratios (:data:`TABLE2_RATIOS`: means over σ of B = 8 / B = 16) as keyword
    arguments of ``Notebook.compare``, within ±20 %, from :func:`batch_size_ratios`' rows."""
    return [dict(quantity=f"Table 2 mean {col} (B=8 / B=16)", ours=float(ratios[col].mean()), reference=ref, rel=0.2,
                 source="§4, Table 2", note=f"mean over σ = {', '.join(f'{s:g}' for s in ratios['σ'])}")
            for col, ref in TABLE2_RATIOS.items()]


def loss_gaps(pairs: dict) -> dict:
    """Per σ: B = 8 minus B = 16, the global model's test loss at each evaluated round (the two runs
    must be evaluated at the same rounds)."""
    gaps = {}
    for s in dict.fromkeys(s for s, _ in pairs):
        l8, l16 = (pairs[(s, B)][1].dropna(subset=["loss_global"]).set_index("round").loss_global for B in (8, 16))
        if not l8.index.equals(l16.index):
            raise ValueError("the B = 8 and B = 16 runs must be evaluated at the same rounds")
        gaps[s] = l8 - l16
    return gaps


def personalization_gaps(curves: dict) -> dict:
    """Per σ (``curves``: {σ: metrics}): the mean of personalised − global accuracy over the second
    half of the evaluated rounds (Fig. 4.1)."""
    out = {}
    for s, m in curves.items():
        m = m.dropna(subset=["acc_local_all"])
        out[s] = float((m["acc_local_all"] - m["acc_global"]).iloc[len(m) // 2:].mean())
    return out


def personalization_claim(curves: dict, setting: str) -> dict:
    """Figs. 4.1 and 4.3's statement that the personalized models beat the global one, as keyword arguments of
    ``Notebook.claim`` (its ``source`` left to the caller): it holds when :func:`personalization_gaps` is
    positive at every σ of ``curves`` ({σ, or None for the non-private run: metrics}); the note gives each gap
    and the last round the run reached. ``setting``: the statement's opening, the figure and how its runs were made."""
    if not curves:
        raise ValueError("curves is empty: no run to compare")
    gaps = personalization_gaps(curves)
    return dict(statement=f"{setting}: personalized models beat the global model (mean over the second half of the "
                          "evaluated rounds)", holds=all(g > 0 for g in gaps.values()),
                note=", ".join(f"{'non-private' if s is None else f'σ={s:g}'}: {100 * g:+.1f} pp to round "
                               f"{int(curves[s]['round'].max())}" for s, g in gaps.items()))


def metric_table(runs: dict, target: float) -> pd.DataFrame:
    """The paper's stored accuracy against the clean one (every client's current model), per run
    (``runs``: {(p, σ, B): metrics}): their mean difference and the R each gives."""
    rows = []
    for (p, s, B), metrics in runs.items():
        m = metrics.dropna(subset=["acc_local_all"])
        rows.append({"p": p, "σ": "non-private" if s is None else s, "rounds": len(metrics),
                     "stored − clean, first 3 rounds (pp)": 100 * float((m.acc_stored_local - m.acc_local_all).head(3).mean()),
                     "stored − clean, all rounds (pp)": 100 * float((m.acc_stored_local - m.acc_local_all).mean()),
                     "R ours (stored)": first_round(metrics, target),
                     "R ours (clean)": first_round(m, target, "acc_local_all")})
    return pd.DataFrame(rows)


def exact_bracket(step, n: int, epsilon: float, delta: float = 1e-5, h: float = 1e-4, h_min: float = 2e-6):
    """ε(δ) of ``step`` composed ``n`` times, as a bracket (low, high, h): the optimistic and the
    pessimistic discretisation on a loss grid of step h (``tradeoff.compose_n``), the grid refined 4×
    at a time while the bracket still contains ``epsilon`` (e.g. the CLT's) and h ≥ ``h_min``, so that
    the bracket decides on which side ``epsilon`` lies whenever it can."""
    while True:
        low = tf.epsilon(tf.compose_n(step, n, h=h, pessimistic=False), delta)
        high = tf.epsilon(tf.compose_n(step, n, h=h), delta)
        if not (low <= epsilon <= high) or h < h_min:
            return low, high, h
        h /= 4


def tightness_row(cell, h: float = 1e-4, delta: float = 1e-5) -> dict:
    """One published cell (a row of ``published()``): Theorem 2's CLT ε(δ) against the exact
    composition's bracket; R rounds of K steps composed per round without and with Lemma 3.8's client
    sampling g_p = max(f_round, 1 − α − p²) on the same grid; the round's TV; strong federated μ (m = 100)."""
    step = tf.subsample(tf.gaussian(1 / cell.sigma), cell.B / cell.n)
    mu = mu_max(cell)
    clt = gdp.epsilon(mu, delta)
    low, high, h = exact_bracket(step, cell.K * cell.R, clt, delta, h)
    per_round = tf.compose_n(step, cell.K, h=h)
    without_p = tf.epsilon(tf.compose_n(per_round, cell.R, h=h), delta)
    with_p = (tf.epsilon(tf.compose_n(tf.federated_amplify(per_round, cell.p), cell.R, h=h), delta)
              if cell.p < 1 else without_p)
    return {"table": cell.table, "dataset": cell.dataset, "p": cell.p, "σ": cell.sigma, "B": cell.B, "R": cell.R,
            "μ_max (GDP CLT, approx.)": mu, "ε CLT (Thm 2)": clt, "ε exact, low": low, "ε exact, high": high,
            "grid h": h, "ε per round ⊗R": without_p, "ε with Lemma 3.8's p": with_p,
            "round TV = δ(0)": float(tf.to_epsilon_delta(per_round, 0.0)),
            "strong μ (m−1 = 99)": float(gdp.strong_federated_mu(mu, 100))}
