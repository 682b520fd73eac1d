"""dpfl: reproducing five papers on differentially private federated learning."""
from importlib.metadata import PackageNotFoundError, version as _v

try:
    __version__ = _v("dpfl")
except PackageNotFoundError:          # run from a source tree with PYTHONPATH=lib (e.g. a GPU machine with no install)
    __version__ = "0.1.0+src"
