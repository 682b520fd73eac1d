"""Privacy accounting for the five papers: pure NumPy/SciPy functions, no torch.

One module per way of counting privacy; each function cites the paper and equation it follows and
states its neighbouring relation and sampling scheme:

* :mod:`~dpfl.accounting.hockey_stick` — E_ε divergence and its contraction (Asoodeh & Calmon 2020);
* :mod:`~dpfl.accounting.gdp` — μ-GDP and the CLT accountants (Zheng et al. 2021; Bu et al. 2020);
* :mod:`~dpfl.accounting.tradeoff` — f-DP: G_μ, C_p, federated amplification, numerical composition;
* :mod:`~dpfl.accounting.rdp` — Rényi DP, the moments accountant, RDP → (ε, δ) conversions;
* :mod:`~dpfl.accounting.composition` — basic, advanced and optimal composition of (ε, δ)-DP;
* :mod:`~dpfl.accounting.gaussian` — classic and analytic Gaussian mechanism calibration;
* :mod:`~dpfl.accounting.calibrate` — smallest σ / largest number of steps meeting a target;
* :mod:`~dpfl.accounting.accountant` — a stateful accountant over these, for training loops.
"""
from dpfl.accounting import (accountant, calibrate, composition, gaussian, gdp, hockey_stick, rdp,
                             tradeoff)

__all__ = ["accountant", "calibrate", "composition", "gaussian", "gdp", "hockey_stick", "rdp", "tradeoff"]
