"""The audits notebook's runs (``notebooks/audits.ipynb``; docs/audits.md): each canary audit of
``dpfl.audit.canaries`` as a cached config, and the grid of each profile — the mechanisms as built over
a range of noise multipliers, and the planted bugs at one of them."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from dpfl import checks
from dpfl.audit.canaries import BUGS, client_level_audit, dp_sgd_audit, fedhdp_audit

__all__ = ["MECHANISMS", "SETTINGS", "AuditRun", "grid"]

#: name → (the audit, its keyword arguments): (a) DP-SGD; (b) client level, whole model and per layer (L = 4);
#: (c) Geyer's per-layer median bound (L = 4); (d) FedHDP, the canary in the private or the opted-out group
MECHANISMS = {"dp_sgd": (dp_sgd_audit, {}), "client_level": (client_level_audit, {}),
              "client_level_per_layer": (client_level_audit, {"per_layer": True, "layers": 4}),
              "geyer_median": (client_level_audit, {"median": True, "layers": 4}),
              "fedhdp_private": (fedhdp_audit, {"group": 1}), "fedhdp_opted_out": (fedhdp_audit, {"group": 0})}

#: runs a side per audit and the noise multipliers z of each profile (the bugs at ``bug_z``)
SETTINGS = {
    "smoke": dict(trials=600, z=(2.0,), client_z=(1.0,), bug_z=2.0, client_bug_z=1.0),
    "quick": dict(trials=2000, z=(1.0, 2.0, 4.0, 8.0), client_z=(0.5, 1.0, 2.0, 4.0), bug_z=2.0, client_bug_z=1.0),
    "paper": dict(trials=5000, z=(0.5, 1.0, 2.0, 4.0, 8.0), client_z=(0.5, 1.0, 2.0, 4.0, 8.0), bug_z=2.0,
                  client_bug_z=1.0),
}


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """One canary audit: ``mechanism`` (a key of :data:`MECHANISMS`), noise multiplier ``z``, ``trials``
    runs a side, an optional planted ``bug``; its result is the audit's row (claim next to bounds)."""

    #: 2: the other clients' updates of norm ≈ S per tensor (were ≈ 16·S); audit (c)
    code_version: ClassVar[int] = 2

    mechanism: str
    z: float
    trials: int
    bug: str | None = None
    seed: int = 0

    def __post_init__(self):
        checks.one_of("mechanism", self.mechanism, MECHANISMS)
        checks.positive("z", self.z)
        checks.positive_int("trials", self.trials)
        family = "dp_sgd" if self.mechanism == "dp_sgd" else "fedhdp" if self.mechanism.startswith("fedhdp") else "client_level"
        checks.one_of("bug", self.bug, BUGS[family])
        if self.bug == "one-layer-accounting" and self.mechanism not in ("client_level_per_layer", "geyer_median"):
            raise ValueError("bug 'one-layer-accounting' needs mechanism 'client_level_per_layer' or 'geyer_median'")

    def compute(self) -> dict:
        audit, kwargs = MECHANISMS[self.mechanism]
        return audit(self.z, trials=self.trials, bug=self.bug, seed=self.seed, **kwargs)


def grid(profile: str, seed: int = 0) -> list[AuditRun]:
    """The profile's audits: every mechanism as built at each z, then each planted bug."""
    checks.one_of("profile", profile, SETTINGS)
    S = SETTINGS[profile]
    runs = [AuditRun("dp_sgd", z, S["trials"], seed=seed) for z in S["z"]]
    runs += [AuditRun(m, z, S["trials"], seed=seed) for m in ("client_level", "client_level_per_layer", "geyer_median",
                                                               "fedhdp_private") for z in S["client_z"]]
    runs += [AuditRun("fedhdp_opted_out", S["client_bug_z"], S["trials"], seed=seed)]
    runs += [AuditRun("dp_sgd", S["bug_z"], S["trials"], bug, seed) for bug in BUGS["dp_sgd"][1:]]
    runs += [AuditRun("client_level", S["client_bug_z"], S["trials"], bug, seed) for bug in ("noise/10", "no-clip")]
    runs += [AuditRun("client_level_per_layer", S["client_bug_z"], S["trials"], "one-layer-accounting", seed)]
    runs += [AuditRun("fedhdp_private", S["client_bug_z"], S["trials"], "noise/10", seed)]
    return runs
