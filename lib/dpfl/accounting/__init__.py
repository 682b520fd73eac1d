"""Privacy accounting for the five papers: pure NumPy/SciPy functions, no torch.

Each module implements one way of counting privacy and cites the paper and equation it follows:

* :mod:`dpfl.accounting.hockey_stick` — E_ε divergence and its contraction (Asoodeh & Calmon 2020).
"""
from dpfl.accounting import hockey_stick

__all__ = ["hockey_stick"]
