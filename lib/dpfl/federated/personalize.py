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


def ditto(model: Model, personal: dict, global_: dict, x, y, generators: list, *, lam, lr: float,
          optimizer: str = "sgd", chunk: int | None = None) -> dict:
    """Ditto's personal update for the participating clients (stacked ``personal``, (m, …)):
    K steps of ``optimizer`` on the local loss plus λ/2·‖v − global‖² (non-private; see module doc).
    ``lam``: one λ, or one per client (m,), so clients with different λ train in one call."""
    m, lams = y.shape[0], np.asarray(lam, dtype=np.float64)
    lams = np.full(m, float(lams)) if lams.ndim == 0 else lams
    if lams.shape != (m,):
        raise ValueError(f"lam must be one λ or one per client ({m}); got shape {lams.shape}")
    checks.nonnegative("lam", float(lams.min(initial=0.0)))
    cfg = LocalConfig(optimizer=optimizer, lr=lr)
    new, _ = local_train(model, cfg, personal, init_state(personal, cfg), x, y, generators, chunk=chunk,
                         anchor=global_, prox=lams)
    return new
