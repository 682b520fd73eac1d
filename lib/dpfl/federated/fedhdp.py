"""FedHDP (Aldaghri, Mahdavifar & Beirami; Alg. 2; docs/aldaghri_fedhdp.md §2): federated learning where
each client picks its privacy level.

Clients belong to privacy groups (e.g. non-private, private). Each round the sampled clients train
from the global model w_t (non-private local SGD) and send Δ_k, clipped (Alg. 2: clients send "their
clipped updates along with their clipping indicator"). Per group l, a DP-FedAvg average: clip to the
group's bound C_l (adaptive, Andrew et al.: ``server.adaptive_clip``), average, add
N(0, (z_Δ,l C_l / N_l)²) with z_Δ,l the effective multiplier that leaves room for the noised
clipped count. A group with z_l = 0 runs the same average without noise and with an exact count
(TFF's ``gaussian_adaptive`` at noise 0; the paper's Non-Private baseline is DP-FedAvg without
noise). Then ``server.two_step`` weights the group averages by r_l N_l. Under Poisson sampling a
private group's N_l is its expected count (the sampler's ``denominator``), never the realised one,
which is private (docs/privacy-accounting.md).
Ditto personalises every participating client:
v_k ← steps on f_k(v) + λ_l/2·‖v − w_t‖². With ratios (1, 1) this is HDP-FedAvg; with every
group at the same z it is DP-FedAvg (with Ditto); r = 0 ignores the private clients.
λ never moves the global model, so one run can personalise with several λ at once (``extra_lams``):
each set of λ keeps its own personal models and starts its steps from the same generator states, so
its columns are those a run with that λ alone would give, bit for bit on a CPU. All sets (and groups) train
in one ``local_train`` call, with a λ per client: on a GPU a round's launches do not grow with the sets.

Metrics follow the paper's: the global model on the server test set (``Acc_g``) and on each
group's local test sets (``Acc_g,l``); personalised models on their own test sets (``Acc_l,l``);
gaps Δ_g, Δ_l between the first two groups; per group the clip bound and ε(δ) by RDP accounting
of the sampled Gaussian (q = the group's expected participation rate). One algorithm of the round
loop (:mod:`dpfl.federated.loop`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant
from dpfl.data.federated import FederatedDataset
from dpfl.federated import server
from dpfl.federated.evaluate import accuracy_cache, refresh_accuracy
from dpfl.federated.local import put, take
from dpfl.federated.personalize import ditto
from dpfl.federated.client_dp import ServerDP, ServerDPConfig
from dpfl.federated.loop import Privacy, Round
from dpfl.models import Model

__all__ = ["FedHDPConfig", "FedHDP", "group_noise"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FedHDPConfig(ServerDPConfig):
    """One FedHDP run. Per group l (tuples, one entry per group): ``noise_multipliers`` z_l (0 =
    non-private), ``ratios`` r_l of the two-step aggregation, ``lams`` Ditto's λ_l.
    ``lr_schedule``: the clients' learning rate (Table 7: ``LearningRate(0.9, 50, per="round")``).
    ``count_noise_frac``: σ_b = frac × the group's expected clients per round (Andrew et al.: 0.05).
    ``extra_lams``: further sets of Ditto's λ (each one entry per group), personalised beside ``lams``
    from the same global model; the row's columns of set j (from 1) end in ``@j`` (``acc_l_0@1``)."""

    noise_multipliers: tuple
    ratios: tuple
    lams: tuple
    personal_lr: float
    personal_steps: int | None = None
    count_noise_frac: float = 0.05
    delta: float = 1e-5
    extra_lams: tuple = dataclasses.field(default=(), metadata={"hash": "unless-default"})  # keys as before it

    def __post_init__(self):
        super().__post_init__()
        n = len(self.noise_multipliers)
        if not (n == len(self.ratios) == len(self.lams)) or n == 0:
            raise ValueError("noise_multipliers, ratios and lams must have one entry per privacy group")
        for z in self.noise_multipliers:
            checks.nonnegative("noise_multipliers", z)
        for r in self.ratios:
            checks.in_range("ratios", r, 0, 1)
        for lams in (self.lams, *self.extra_lams):
            if len(lams) != n:
                raise ValueError(f"each set of extra_lams needs one λ per privacy group ({n}); got {lams!r}")
            for lam in lams:
                checks.nonnegative("lams", lam)
        checks.positive("personal_lr", self.personal_lr)
        checks.positive("count_noise_frac", self.count_noise_frac)
        checks.in_range("delta", self.delta, 0, 1, lo_open=True, hi_open=True)
        if self.personal_steps is not None:
            checks.positive_int("personal_steps", self.personal_steps)


def group_noise(cfg: FedHDPConfig, sizes) -> tuple[list[float], list[float]]:
    """Per privacy group of ``sizes`` clients: the std σ_b of the noise on its clipped count (σ_b =
    ``count_noise_frac`` × its expected clients per round) and its update's effective multiplier z_Δ
    (``server.effective_noise_multiplier``); both 0 for a group without noise, whose count is exact."""
    K = sum(sizes)
    count_std = [cfg.count_noise_frac * max(cfg.sampler.rate(K) * n, 1e-9) if z > 0 else 0.0
                 for z, n in zip(cfg.noise_multipliers, sizes)]
    z_update = [server.effective_noise_multiplier(z, s) if z > 0 else 0.0
                for z, s in zip(cfg.noise_multipliers, count_std)]
    return count_std, z_update


class FedHDP(ServerDP):
    """The algorithm's state (global model, every client's personal model, each group's clip bound)
    and its round; run it with :func:`dpfl.federated.loop.run` (one row per round).
    ``groups``: each client's privacy group (0, 1, …); ``server_test``: (x, y) of the server test
    set for ``acc_g`` (default: the union of the clients' test sets); ``cohorts``: each client's
    cohort in the metrics ``acc_g_<c>``, ``acc_l_<c>`` (default: its group) — the baselines that put
    every client in one group (DP-FedAvg, Non-Private) still report the clients who would opt out."""

    progress_metric = "acc_g"

    def __init__(self, model: Model, cfg: FedHDPConfig, groups, server_test=None, cohorts=None):
        super().__init__(model, cfg)
        self.server_test = server_test
        self.groups = np.asarray(groups, dtype=np.int64)
        self.cohorts = self.groups if cohorts is None else np.asarray(cohorts, dtype=np.int64)
        self.L = len(cfg.noise_multipliers)

    def setup(self, fd: FederatedDataset, device: str) -> None:
        super().setup(fd, device)
        cfg, K, L, groups = self.cfg, fd.num_clients, self.L, self.groups
        if groups.shape != (K,) or groups.min() < 0 or groups.max() >= L:
            raise ValueError(f"groups must give each of the {K} clients a group in 0..{L - 1}")
        if self.cohorts.shape != (K,) or self.cohorts.min() < 0:
            raise ValueError(f"cohorts must give each of the {K} clients a cohort 0, 1, …")
        self.sizes = [int((groups == l).sum()) for l in range(L)]
        self.count_std, self.z_update = group_noise(cfg, self.sizes)
        init = self.initial_params(device)
        stack = lambda: {k: v.unsqueeze(0).repeat(K, *[1] * v.ndim) for k, v in init.items()}
        self.state = {"global": init, "personal": stack(), "bounds": [cfg.clip_init] * L, "groups": groups,
                      "personal_acc": accuracy_cache(K, device)}      # evaluate() recomputes the moved models only
        if cfg.extra_lams:                                            # the further sets of λ (``extra_lams``)
            self.state["variants"] = [{"personal": stack(), "personal_acc": accuracy_cache(K, device)}
                                      for _ in cfg.extra_lams]
        self.test = fd.test_batch(np.arange(K))
        if self.server_test is None:
            self.server_x, self.server_y = fd.test_x[self.used], fd.test_y[self.used]
        else:
            self.server_x, self.server_y = (v.to(device) for v in self.server_test)
        self.members = [torch.as_tensor(self.cohorts == c, device=device) for c in range(self.cohorts.max() + 1)]

    def accountants(self) -> list[Privacy]:
        delta = self.cfg.delta
        return [Privacy(f"group{l}", Accountant("rdp"), lambda a, l=l: {f"eps_{l}": a.epsilon(delta)})
                for l, z in enumerate(self.cfg.noise_multipliers) if z > 0]

    def events(self, r: Round) -> dict:
        cfg = self.cfg
        return {f"group{l}": [(cfg.sampler.event(z, self.K, r.t - 1), 1)]
                for l, z in enumerate(cfg.noise_multipliers) if z > 0}

    def round(self, r: Round) -> dict:
        x, y, gens, lr, updates = self.local_updates(r)
        anchor = self.state["global"]                         # the w_t the clients received
        row = {"lr": lr} | self.aggregate(r, updates)
        self.personalise(r, x, y, gens, anchor)
        return row | self._evaluate_global()

    def aggregate(self, r: Round, updates: dict) -> dict:
        """Per group, the DP-FedAvg average of its clipped updates, then ``server.two_step``; each
        group's clip bound moves (adaptive clipping). Returns the row's clip bounds (and what
        :meth:`inspect_group` adds)."""
        cfg, state, groups = self.cfg, self.state, self.groups[r.selected]
        noise_gen = r.torch_generator()
        means, counts, row = [], [], {}
        for l in range(self.L):
            members = torch.as_tensor(np.flatnonzero(groups == l), device=r.device)
            private = cfg.noise_multipliers[l] > 0
            # a private group's noised sum is divided by a public number (Poisson: its expected count) and
            # released even when empty: neither its weight nor its presence may depend on who took part
            denominator = cfg.sampler.denominator(self.sizes[l]) if private else None
            counts.append(int(members.numel()) if denominator is None else denominator)
            if members.numel() == 0 and denominator is None:
                means.append({k: torch.zeros_like(v) for k, v in state["global"].items()})
                continue
            bound = state["bounds"][l]
            clipped, norms = server.clip_updates({k: v[members] for k, v in updates.items()}, bound, inplace=True)
            means.append(server.gaussian_mean(clipped, bound, self.z_update[l], noise_gen, denominator))
            row[f"clip_{l}"] = bound
            row |= self.inspect_group(l, clipped, self.z_update[l] * bound / counts[-1])
            state["bounds"][l] = cfg.next_bound(norms, bound, self.count_std[l], noise_gen, denominator)
        if any(c * ratio > 0 for c, ratio in zip(counts, cfg.ratios)):
            self.move(server.two_step(means, counts, cfg.ratios))
        return row

    def _variants(self) -> list[tuple[str, tuple, dict]]:
        """Each set of Ditto's λ with its columns' suffix and its part of the state (personal models,
        accuracy cache): ``cfg.lams`` first (no suffix), then ``cfg.extra_lams`` (``@1``, ``@2``, …)."""
        extra = zip(self.cfg.extra_lams, self.state.get("variants", []))
        return [("", self.cfg.lams, self.state)] + [(f"@{j}", lams, part) for j, (lams, part) in enumerate(extra, 1)]

    def personalise(self, r: Round, x, y, gens: list, anchor: dict) -> None:
        """Ditto: every participating client's personal model takes steps pulled toward the w_t
        (``anchor``) it received, with its group's λ. Every group and every set of λ train in one call
        (a client once per set, with the per-client λ): each set's copy of a client draws from a replica of
        its generator's state, so the sets see the same masks, as runs with one set each would."""
        cfg, groups, m = self.cfg, self.groups[r.selected], len(gens)
        steps = cfg.personal_steps or cfg.local_steps
        variants = self._variants()
        idx = torch.as_tensor(r.selected, device=r.device)
        personal = {k: torch.cat([part["personal"][k][idx] for _, _, part in variants]) for k in anchor}
        lams = np.concatenate([np.asarray(set_, dtype=np.float64)[groups] for _, set_, _ in variants])
        replicas = [torch.Generator(g.device) for _ in variants[1:] for g in gens]
        for copy, g in zip(replicas, gens * (len(variants) - 1)):
            copy.set_state(g.get_state())
        repeat = lambda t: t[:, :steps].repeat(len(variants), *[1] * (t.ndim - 1))
        new = ditto(self.model, personal, anchor, repeat(x), repeat(y), gens + replicas, lam=lams,
                    lr=cfg.personal_lr, chunk=cfg.chunk)
        for j, (_, _, part) in enumerate(variants):
            put(part["personal"], idx, take(new, slice(j * m, (j + 1) * m)))
            part["personal_acc"]["stale"][idx] = True

    def inspect_group(self, group: int, updates: dict, noise_std: float) -> dict:
        """Extra columns of the round's row from group ``group``'s updates as the server averages them
        (stacked, clipped) and the std ``noise_std`` of the noise added to their
        mean, per coordinate (0 for a non-private group); none here. A paper's reading of the run
        subclasses it (``dpfl.experiments.aldaghri_fedhdp_fl``: the variances behind r*)."""
        return {}

    def _evaluate_global(self) -> dict:
        """The global model, every round: on the server test set and on each cohort's test sets."""
        model, state = self.model, self.state
        acc_g, loss_g = self.evaluate_global(state["global"])
        row = {"loss_g": float(loss_g.mean())}
        with torch.no_grad():
            logp = model.forward(state["global"], self.server_x, None)
            row["acc_g"] = float((logp.argmax(-1) == self.server_y).float().mean()) if logp.isfinite().all() else math.nan
        for l, members in enumerate(self.members):
            row[f"acc_g_{l}"] = float(acc_g[members].mean())
        if len(self.members) >= 2:
            row["delta_g"] = row["acc_g_0"] - row["acc_g_1"]
        return row

    def evaluate(self, r: Round) -> dict:
        """Every client's personal model on its own test set, by cohort (every ``cfg.eval_every`` rounds),
        for each set of λ; ``diverged_l_<c>``: how many of cohort c's personal models have diverged (a
        non-finite output), whose accuracy is then NaN (so is the cohort's mean: no accuracy is claimed)."""
        row = {}
        for suffix, _, part in self._variants():
            acc_l = refresh_accuracy(self.model, part["personal"], self.test, part["personal_acc"])
            row |= {f"acc_l_{l}{suffix}": float(acc_l[members].mean()) for l, members in enumerate(self.members)}
            row |= {f"diverged_l_{l}{suffix}": float(acc_l[members].isnan().sum())    # float: NaN between evaluations
                    for l, members in enumerate(self.members)}
            if len(self.members) >= 2:
                row[f"delta_l{suffix}"] = row[f"acc_l_0{suffix}"] - row[f"acc_l_1{suffix}"]
        return row

    def load_state_dict(self, state: dict) -> None:
        if not np.array_equal(state["groups"], self.groups):
            raise ValueError("the checkpoint was written with other privacy groups")
        state.setdefault("personal_acc", accuracy_cache(self.K, self.test[0].device))
        self.state = state

