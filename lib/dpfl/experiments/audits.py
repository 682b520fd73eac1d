"""The audits notebook's runs (``notebooks/audits.ipynb``; docs/audits.md): each canary audit of
``dpfl.audit.canaries`` as a cached config, and the grid of each profile — the mechanisms as built over
a range of noise multipliers, and the planted bugs at one of them."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from dpfl import checks
from dpfl.audit.canaries import (BUGS, adaptive_clip_audit, client_level_audit, dp_sgd_audit, fedhdp_audit,
                                 sampled_dp_sgd_audit)

__all__ = ["MECHANISMS", "SETTINGS", "AuditRun", "grid"]

#: name → (the audit, its keyword arguments, its family in ``BUGS``): (a) DP-SGD; (b) client level, whole model
#: and per layer (L = 4); (c) Geyer's per-layer median bound (L = 4); (d) FedHDP, the canary in the private or the
#: opted-out group; (e) a Poisson-sampled round, the other clients aligned against the canary; (f) adaptive
#: clipping's mean and count, half the other clients under the bound or all of them (the old count's worst case);
#: (g) DP-SGD with sampled batches, every step observed, against the (ε, δ) its RDP accounting claims
MECHANISMS = {"dp_sgd": (dp_sgd_audit, {}, "dp_sgd"), "client_level": (client_level_audit, {}, "client_level"),
              "client_level_per_layer": (client_level_audit, {"per_layer": True, "layers": 4}, "client_level"),
              "geyer_median": (client_level_audit, {"median": True, "layers": 4}, "client_level"),
              "client_level_poisson": (client_level_audit, {"poisson": True}, "client_level"),
              "fedhdp_private": (fedhdp_audit, {"group": 1}, "fedhdp"),
              "fedhdp_opted_out": (fedhdp_audit, {"group": 0}, "fedhdp"),
              "adaptive_clip": (adaptive_clip_audit, {}, "adaptive"),
              "adaptive_clip_skewed": (adaptive_clip_audit, {"below": 1.0}, "adaptive"),
              "dp_sgd_sampled": (sampled_dp_sgd_audit, {}, "sampled_dp_sgd")}

#: runs a side per audit and the noise multipliers z of each profile (the bugs at ``bug_z``; (g)'s at
#: ``sampled_bug_z``, where its claimed ε is small enough for the runs to exceed)
SETTINGS = {
    "smoke": dict(trials=600, z=(2.0,), client_z=(1.0,), bug_z=2.0, client_bug_z=1.0, sampled_bug_z=4.0),
    "quick": dict(trials=2000, z=(1.0, 2.0, 4.0, 8.0), client_z=(0.5, 1.0, 2.0, 4.0), bug_z=2.0, client_bug_z=1.0,
                  sampled_bug_z=4.0),
    "paper": dict(trials=5000, z=(0.5, 1.0, 2.0, 4.0, 8.0), client_z=(0.5, 1.0, 2.0, 4.0, 8.0), bug_z=2.0,
                  client_bug_z=1.0, sampled_bug_z=4.0),
}


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """One canary audit: ``mechanism`` (a key of :data:`MECHANISMS`), noise multiplier ``z``, ``trials``
    runs a side, an optional planted ``bug``; its result is the audit's row (claim next to bounds)."""

    #: 2: the other clients' updates of norm ≈ S per tensor (were ≈ 16·S); audit (c). 3: FedHDP's private
    #: mean divided by the group's expected count, as the engine now does; audits (e) and (f). 4: FedHDP's
    #: opted-out group clipped, as the engine now does (Alg. 2); audit (d)
    code_version: ClassVar[int] = 4

    mechanism: str
    z: float
    trials: int
    bug: str | None = None
    seed: int = 0

    def __post_init__(self):
        checks.one_of("mechanism", self.mechanism, MECHANISMS)
        checks.positive("z", self.z)
        checks.positive_int("trials", self.trials)
        checks.one_of("bug", self.bug, BUGS[MECHANISMS[self.mechanism][2]])
        if self.bug == "one-layer-accounting" and self.mechanism not in ("client_level_per_layer", "geyer_median"):
            raise ValueError("bug 'one-layer-accounting' needs mechanism 'client_level_per_layer' or 'geyer_median'")
        if self.bug == "realised-denominator" and self.mechanism != "client_level_poisson":
            raise ValueError("bug 'realised-denominator' needs mechanism 'client_level_poisson'")

    def compute(self) -> dict:
        audit, kwargs, _ = MECHANISMS[self.mechanism]
        return audit(self.z, trials=self.trials, bug=self.bug, seed=self.seed, **kwargs)


def grid(profile: str, seed: int = 0) -> list[AuditRun]:
    """The profile's audits: every mechanism as built at each z, then each planted bug."""
    checks.one_of("profile", profile, SETTINGS)
    S = SETTINGS[profile]
    runs = [AuditRun(m, z, S["trials"], seed=seed) for m in ("dp_sgd", "dp_sgd_sampled") for z in S["z"]]
    runs += [AuditRun(m, z, S["trials"], seed=seed) for m in ("client_level", "client_level_per_layer", "geyer_median",
                                                               "client_level_poisson", "fedhdp_private", "adaptive_clip")
             for z in S["client_z"]]
    runs += [AuditRun(m, S["client_bug_z"], S["trials"], seed=seed) for m in ("fedhdp_opted_out", "adaptive_clip_skewed")]
    runs += [AuditRun("dp_sgd", S["bug_z"], S["trials"], bug, seed) for bug in BUGS["dp_sgd"][1:]]
    runs += [AuditRun("client_level", S["client_bug_z"], S["trials"], bug, seed) for bug in ("noise/10", "no-clip")]
    runs += [AuditRun("client_level_per_layer", S["client_bug_z"], S["trials"], "one-layer-accounting", seed)]
    runs += [AuditRun("client_level_poisson", S["client_bug_z"], S["trials"], "realised-denominator", seed)]
    runs += [AuditRun("fedhdp_private", S["client_bug_z"], S["trials"], "noise/10", seed)]
    runs += [AuditRun("adaptive_clip_skewed", S["client_bug_z"], S["trials"], "realised-count", seed)]
    runs += [AuditRun("dp_sgd_sampled", S["sampled_bug_z"], S["trials"], "noise/10", seed)]
    return runs
