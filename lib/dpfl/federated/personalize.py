"""Personalised models: Zheng et al.'s helper interpolation and Ditto.

* :func:`interpolate` — Zheng et al.'s personalised helper (Alg. 1, eq. 2.1):
  h = (1 − α)·w_local + α·w_global (``server.elastic`` applies it to the sampled clients).
* :func:`ditto` — Ditto (Li, Hu, Beirami & Smith 2021; FedHDP's personalisation, docs/aldaghri_fedhdp.md §2):
  each participating client also keeps a personal model v_k and takes local steps on
  f_k(v) + λ/2·‖v − w‖², w the global model it received this round. v_k never leaves the client,
  so it needs no noise; it has its own learning rate.
"""
from __future__ import annotations

import numpy as np

from dpfl import checks
from dpfl.federated.local import LocalConfig, init_state, local_train
from dpfl.models import Model

__all__ = ["interpolate", "ditto"]


def interpolate(local: dict, global_: dict, alpha: float) -> dict:
    """(1 − α)·local + α·global, parameter by parameter (local may carry a client axis)."""
    checks.in_range("alpha", alpha, 0, 1)
    return {k: (1 - alpha) * v + alpha * global_[k] for k, v in local.items()}


def ditto(model: Model, personal: dict, global_: dict, x, y, generators: list, *, lam, lr,
          optimizer: str = "sgd", chunk: int | None = None) -> dict:
    """Ditto's personal update for the participating clients (stacked ``personal``, (m, …)):
    K steps of ``optimizer`` on the local loss plus λ/2·‖v − global‖² (non-private; see module doc).
    ``lam`` and ``lr`` (η_p): one value, or one per client (m,), so clients with different λ or η_p train in
    one call (``dpfl.experiments.aldaghri_fedhdp_lr`` probes η_p so)."""
    m = y.shape[0]
    lams, lrs = (_per_client(name, value, m) for name, value in (("lam", lam), ("lr", lr)))
    checks.nonnegative("lam", float(lams.min(initial=0.0)))
    checks.positive("lr", float(lrs.min(initial=1.0)))
    cfg = LocalConfig(optimizer=optimizer, lr=float(lrs[0]) if m else 1.0)
    new, _ = local_train(model, cfg, personal, init_state(personal, cfg), x, y, generators, lrs, chunk=chunk,
                         anchor=global_, prox=lams)
    return new


def _per_client(name: str, value, m: int) -> np.ndarray:
    """``value`` (one number, or one per client) as an (m,) float64 array."""
    values = np.asarray(value, dtype=np.float64)
    values = np.full(m, float(values)) if values.ndim == 0 else values
    if values.shape != (m,):
        raise ValueError(f"{name} must be one value or one per client ({m}); got shape {values.shape}")
    return values
