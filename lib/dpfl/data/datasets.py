"""The papers' datasets as in-memory tensors, read offline first and checksum-verified.

``load_dataset(name, split, root)`` looks in ``root``, else ``$DPFL_DATA``, else
``~/.cache/dpfl/data``, using torchvision's on-disk layouts:

* ``mnist`` / ``fashion_mnist``: ``MNIST/raw/*.gz`` / ``FashionMNIST/raw/*.gz`` (the official
  files, md5 as in torchvision);
* ``cifar10``: the official ``cifar-10-batches-py/`` (md5-checked); if absent, the lossy
  ImageFolder archive ``cifar10_jpeg/cifar10-images-jpeg.tar.gz`` — then ``.source`` is
  "CIFAR-10 (JPEG copy)" and a warning says why;
* ``femnist``: TFF's ``fed_emnist_{train,test}.h5`` when present, else the LEAF writer subset
  ``femnist/femnist_184writers.npz``; ``.source`` says which and how many writers.

Where files are missing and a network exists, torchvision downloads MNIST, Fashion-MNIST and
CIFAR-10 into the cache directory; without one the error says which files are missing, where they
were looked for and how to provide them. Decoded arrays are cached (``$DPFL_CACHE`` or
``~/.cache/dpfl``) as ``.npz``, written atomically and keyed by the source files' checksums, so a
second load is fast; ``root`` may be read-only.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import pickle
import tarfile
import warnings
from pathlib import Path

import numpy as np
import torch

from dpfl import checks
from dpfl.io import atomic_path

__all__ = ["Dataset", "load_dataset", "source_of", "DATASETS", "NORMALISATION", "data_root", "cache_dir",
           "DatasetMissing"]

DATASETS = ("mnist", "fashion_mnist", "cifar10", "femnist")

#: Per-channel (mean, std) used to normalise pixels in [0, 1] (the papers' code).
NORMALISATION = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "femnist": ((0.0,), (1.0,)),
}

# torchvision's constants (torchvision/datasets/mnist.py, cifar.py).
_IDX_FILES = {
    "mnist": ("MNIST", {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}),
    "fashion_mnist": ("FashionMNIST", {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}),
}
_CIFAR_BATCHES = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f", "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751", "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb", "test_batch": "40351d587109b95175f43aff81a1287e",
}
_CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_CIFAR_JPEG = ("cifar10_jpeg/cifar10-images-jpeg.tar.gz", "703a80af77751658d3bb1ef59c92bbaf")
_FEMNIST_LEAF = ("femnist/femnist_184writers.npz", "979a3f2d7cefe4ecf60d32796cbb3c7c")
_FEMNIST_TFF = ("femnist/fed_emnist_train.h5", "femnist/fed_emnist_test.h5")


class DatasetMissing(FileNotFoundError):
    """Raised when a dataset's files are absent and cannot be downloaded."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A dataset split in memory: uint8 images ``x`` (N×H×W or N×H×W×C), int64 labels ``y``."""

    name: str
    split: str
    x: torch.Tensor
    y: torch.Tensor
    source: str
    num_classes: int
    writer: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def to_float(self, normalisation=None) -> torch.Tensor:
        """Pixels scaled to [0, 1] and normalised per channel, channels first (N×C×H×W).
        ``normalisation``: (mean, std) per channel; default :data:`NORMALISATION` of the dataset."""
        x = self.x.float() / 255.0
        x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
        mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in (normalisation or NORMALISATION[self.name]))
        return (x - mean) / std


def data_root(root=None) -> Path:
    """``root``, else ``$DPFL_DATA``, else ``~/.cache/dpfl/data``."""
    return Path(root or os.environ.get("DPFL_DATA") or Path.home() / ".cache" / "dpfl" / "data").expanduser()


def cache_dir() -> Path:
    """Writable directory for decoded arrays: ``$DPFL_CACHE/data`` or ``~/.cache/dpfl/data-cache``."""
    base = os.environ.get("DPFL_CACHE")
    return Path(base) / "data" if base else Path.home() / ".cache" / "dpfl" / "data-cache"


def md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, expected: str, verify: bool = True) -> str:
    """The file's md5 (computed once: it also keys the cache); checked against ``expected``."""
    got = md5(path)
    if verify and got != expected:
        raise ValueError(f"checksum mismatch for {path}: md5 {got}, expected {expected} "
                         "(the file is corrupted or not the official one; replace it)")
    return got


def load_dataset(name: str, split: str = "train", root=None, *, verify: bool = True) -> Dataset:
    """Load ``name`` ∈ {mnist, fashion_mnist, cifar10, femnist}, ``split`` ∈ {train, test}.

    ``verify=False`` skips the md5 checks (for miniature files in tests only).
    """
    checks.one_of("name", name, DATASETS)
    checks.one_of("split", split, ("train", "test"))
    root = data_root(root)
    loader = {"mnist": _load_idx, "fashion_mnist": _load_idx, "cifar10": _load_cifar10,
              "femnist": _load_femnist}[name]
    return loader(name, split, root, verify)


def source_of(name: str, root=None) -> str:
    """Which copy of ``name`` :func:`load_dataset` would read from ``root``, without reading it:
    the ``.source`` its :class:`Dataset` will carry ("official", "CIFAR-10 (JPEG copy)", or for
    FEMNIST "TFF federated EMNIST" / "LEAF subset"). Results computed on different copies differ,
    so an experiment's cache key includes this (``dpfl.experiments.zheng2021.ZhengRun``)."""
    checks.one_of("name", name, DATASETS)
    root = data_root(root)
    if name == "cifar10" and _find_cifar_batches(root) is None and (root / _CIFAR_JPEG[0]).exists():
        return "CIFAR-10 (JPEG copy)"
    if name == "femnist":
        return ("TFF federated EMNIST" if all((root / f).exists() for f in _FEMNIST_TFF) else "LEAF subset")
    return "official"


# -- cache ----------------------------------------------------------------------------------------

def _cached(key: str, build):
    """Arrays from ``cache_dir()/key.npz``, else ``build()`` written there atomically."""
    path = cache_dir() / f"{key}.npz"
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as stored:
                return {k: stored[k] for k in stored.files}
        except Exception as err:  # noqa: BLE001 — truncated or corrupted: decode the source again
            warnings.warn(f"the decoded dataset cache {path} is unreadable ({type(err).__name__}: {err}); "
                          "decoding the source files again", stacklevel=3)
    arrays = build()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    except OSError as err:                      # an unwritable cache only costs speed
        warnings.warn(f"could not write the dataset cache {path}: {err}", stacklevel=3)
    return arrays


# -- MNIST / Fashion-MNIST --------------------------------------------------------------------------

def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _load_idx(name, split, root, verify) -> Dataset:
    folder, files = _IDX_FILES[name]
    prefix = "train" if split == "train" else "t10k"
    wanted = [f"{prefix}-images-idx3-ubyte.gz", f"{prefix}-labels-idx1-ubyte.gz"]
    raw = root / folder / "raw"
    paths = [raw / f for f in wanted]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raw = _download_torchvision(name, missing, root)
        paths = [raw / f for f in wanted]
    digests = [_verify(p, files[p.name], verify) for p in paths]
    key = f"{name}-{split}-{digests[0][:8]}{digests[1][:8]}"
    arrays = _cached(key, lambda: {"x": _read_idx(paths[0]), "y": _read_idx(paths[1])})
    return Dataset(name, split, torch.from_numpy(arrays["x"].copy()), torch.from_numpy(arrays["y"].astype(np.int64)),
                   "official", 10)


def _download_torchvision(name, missing, root):
    """Download with torchvision into the cache directory, or explain how to provide the files."""
    import torchvision

    target = cache_dir() / "downloads"
    cls = {"mnist": torchvision.datasets.MNIST, "fashion_mnist": torchvision.datasets.FashionMNIST,
           "cifar10": torchvision.datasets.CIFAR10}[name]
    try:
        for train in (True, False):
            cls(str(target), train=train, download=True)
    except Exception as err:  # noqa: BLE001 — any network failure means "offline"
        names = ", ".join(str(p) for p in missing)
        raise DatasetMissing(
            f"{name}: missing {names}. Looked in {root} (set DPFL_DATA or pass root=...). "
            f"Downloading failed ({type(err).__name__}: {err}). Put the official files there in "
            f"torchvision's layout (see README, 'Data'), e.g. copy ../shared/data.") from None
    sub = {"mnist": "MNIST/raw", "fashion_mnist": "FashionMNIST/raw", "cifar10": "cifar-10-batches-py"}[name]
    return target / sub


# -- CIFAR-10 ---------------------------------------------------------------------------------------

def _find_cifar_batches(root: Path):
    for candidate in (root / "cifar-10-batches-py", root / "cifar10" / "cifar-10-batches-py"):
        if all((candidate / b).exists() for b in _CIFAR_BATCHES):
            return candidate
    return None


def _load_cifar10(name, split, root, verify) -> Dataset:
    batches_dir = _find_cifar_batches(root)
    jpeg = root / _CIFAR_JPEG[0]
    if batches_dir is None and not jpeg.exists():
        batches_dir = _download_torchvision(name, [root / "cifar-10-batches-py", jpeg], root)
    if batches_dir is not None:
        wanted = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        digests = [_verify(batches_dir / b, _CIFAR_BATCHES[b], verify) for b in wanted]
        key = f"cifar10-{split}-" + "".join(d[:4] for d in digests)
        arrays = _cached(key, lambda: _read_cifar_batches([batches_dir / b for b in wanted]))
        source = "official"
    else:
        digest = _verify(jpeg, _CIFAR_JPEG[1], verify)
        warnings.warn("CIFAR-10: the official files are absent, so the lossy JPEG copy is used "
                      f"({jpeg}); every result on it is labelled 'CIFAR-10 (JPEG copy)' "
                      "(median PSNR ≈ 30.5 dB; its source reports 2–3 % lower accuracy for models trained on it)",
                      stacklevel=2)
        arrays = _cached(f"cifar10jpeg-{split}-{digest[:12]}", lambda: _read_cifar_jpeg(jpeg, split))
        source = "CIFAR-10 (JPEG copy)"
    return Dataset(name, split, torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"].astype(np.int64)),
                   source, 10)


def _read_cifar_batches(paths):
    xs, ys = [], []
    for p in paths:
        with open(p, "rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        xs.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        ys.append(np.asarray(batch["labels"], dtype=np.int64))
    return {"x": np.ascontiguousarray(np.concatenate(xs)), "y": np.concatenate(ys)}


def _read_cifar_jpeg(archive: Path, split: str):
    """Decode ``<top>/{split}/<class>/<NNNN>.jpg`` in class order and file-number order."""
    from PIL import Image

    members = []
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            parts = Path(m.name).parts
            if m.isfile() and len(parts) >= 3 and parts[-3] == split and parts[-1].endswith(".jpg"):
                label = _CIFAR_CLASSES.index(parts[-2])
                members.append((label, int(Path(parts[-1]).stem), tar.extractfile(m).read()))
    if not members:
        raise ValueError(f"{archive} holds no '{split}/<class>/<n>.jpg' images")
    members.sort(key=lambda t: (t[0], t[1]))
    x = np.stack([np.asarray(Image.open(io.BytesIO(blob)).convert("RGB")) for _, _, blob in members])
    return {"x": x, "y": np.array([label for label, _, _ in members], dtype=np.int64)}


# -- FEMNIST ----------------------------------------------------------------------------------------

def _load_femnist(name, split, root, verify) -> Dataset:
    tff = [root / f for f in _FEMNIST_TFF]
    if all(p.exists() for p in tff):
        arrays = _read_tff_h5(tff[0] if split == "train" else tff[1])
        source = f"TFF federated EMNIST, {len(np.unique(arrays['writer']))} writers"
    else:
        leaf = root / _FEMNIST_LEAF[0]
        if not leaf.exists():
            raise DatasetMissing(
                f"femnist: neither TFF's {', '.join(map(str, tff))} nor the LEAF subset {leaf} exist. "
                f"Looked in {root} (set DPFL_DATA or pass root=...). FEMNIST is not downloaded "
                "automatically; see README, 'Data'.")
        _verify(leaf, _FEMNIST_LEAF[1], verify)
        arrays = _read_leaf_npz(leaf, split)
        source = f"LEAF subset, {len(np.unique(arrays['writer']))} writers"
    return Dataset(name, split, torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"].astype(np.int64)),
                   source, 62, writer=torch.from_numpy(arrays["writer"].astype(np.int64)))


def _read_leaf_npz(path: Path, split: str):
    """Writers with both splits only (the 105 'complete' writers of the subset); 0 = background."""
    with np.load(path, allow_pickle=False) as d:
        keep = d["writer_has_train"][d["writer"]] & (d["split"] == (0 if split == "train" else 1))
        return {"x": d["x"][keep], "y": d["y"][keep].astype(np.int64), "writer": d["writer"][keep].astype(np.int64)}


def _read_tff_h5(path: Path):
    """TFF layout: ``examples/<client>/{pixels (float32, 1.0 = background), label}``; stored here
    as uint8 with 0 = background, like the LEAF subset."""
    import h5py

    xs, ys, ws = [], [], []
    with h5py.File(path, "r") as f:
        for w, client in enumerate(sorted(f["examples"])):
            group = f["examples"][client]
            pixels = np.asarray(group["pixels"], dtype=np.float32)
            xs.append(np.round(255 * (1.0 - pixels)).astype(np.uint8))
            ys.append(np.asarray(group["label"], dtype=np.int64))
            ws.append(np.full(len(ys[-1]), w, dtype=np.int64))
    return {"x": np.concatenate(xs), "y": np.concatenate(ys), "writer": np.concatenate(ws)}
