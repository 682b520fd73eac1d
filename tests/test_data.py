"""dpfl.data: offline loading with checksums, miniature official formats, partitions, batches."""
import gzip
import io
import pickle
import tarfile
import warnings

import numpy as np
import pytest
import torch

from dpfl.data import FederatedDataset, load_dataset, partition
from dpfl.data.datasets import DatasetMissing, cache_dir


# -- real files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, counts", [("mnist", (5923, 6742)), ("fashion_mnist", (6000, 6000))])
def test_mnist_family_loads_with_checksums(data_root, name, counts):
    train, test = load_dataset(name, "train", data_root), load_dataset(name, "test", data_root)
    assert tuple(train.x.shape) == (60000, 28, 28) and tuple(test.x.shape) == (10000, 28, 28)
    assert train.x.dtype == torch.uint8 and train.y.dtype == torch.int64
    assert tuple(train.y.bincount()[:2].tolist()) == counts and train.source == "official"
    if name == "mnist":
        assert train.y[:5].tolist() == [5, 0, 4, 1, 9] and test.y[:5].tolist() == [7, 2, 1, 0, 4]
    again = load_dataset(name, "train", data_root)                       # from the decoded cache
    assert torch.equal(again.x, train.x)
    assert list(cache_dir().glob(f"{name}-train-*.npz"))
    x = train.to_float()
    assert tuple(x.shape) == (60000, 1, 28, 28) and abs(float(x.mean())) < 0.05


def test_cifar_jpeg_copy_is_labelled_and_warned(data_root):
    if (data_root / "cifar-10-batches-py").exists():
        pytest.skip("official CIFAR-10 present")
    with pytest.warns(UserWarning, match="JPEG copy"):
        test = load_dataset("cifar10", "test", data_root)
    assert test.source == "CIFAR-10 (JPEG copy)"
    assert tuple(test.x.shape) == (10000, 32, 32, 3) and test.y.bincount().tolist() == [1000] * 10
    mean = test.x.float().mean(dim=(0, 1, 2)) / 255
    assert torch.allclose(mean, torch.tensor([0.4914, 0.4822, 0.4465]), atol=0.01)


def test_femnist_leaf_subset(data_root):
    train = load_dataset("femnist", "train", data_root)
    test = load_dataset("femnist", "test", data_root)
    assert train.source == "LEAF subset, 105 writers" and len(train) == 14708 and len(test) == 1685
    assert train.num_classes == 62 and int(train.y.max()) == 61
    clients = partition.by_writer(train.writer.numpy())
    assert len(clients) == 105 and sum(len(c) for c in clients) == 14708


# -- miniature files in the official formats, through the same code paths ------------------------

def _idx_gz(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def test_miniature_idx_files_and_checksum_failure(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    x = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    _idx_gz(raw / "t10k-images-idx3-ubyte.gz", x)
    _idx_gz(raw / "t10k-labels-idx1-ubyte.gz", np.array([7, 2, 1]))
    with pytest.raises(ValueError, match="checksum mismatch .*t10k-images"):
        load_dataset("mnist", "test", tmp_path)
    d = load_dataset("mnist", "test", tmp_path, verify=False)
    assert torch.equal(d.x, torch.from_numpy(x)) and d.y.tolist() == [7, 2, 1]


def test_a_corrupt_decoded_cache_warns_with_its_path_and_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("DPFL_CACHE", str(tmp_path / "cache"))
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    _idx_gz(raw / "t10k-images-idx3-ubyte.gz", np.zeros((2, 28, 28), np.uint8))
    _idx_gz(raw / "t10k-labels-idx1-ubyte.gz", np.array([4, 9]))
    load_dataset("mnist", "test", tmp_path, verify=False)
    [npz] = list((tmp_path / "cache" / "data").glob("*.npz"))
    npz.write_bytes(npz.read_bytes()[:40])                  # truncated: was a raw BadZipFile naming no file
    with pytest.warns(UserWarning, match=f"{npz}.* unreadable"):
        d = load_dataset("mnist", "test", tmp_path, verify=False)
    assert d.y.tolist() == [4, 9]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # rebuilt whole: the next load is silent
        assert load_dataset("mnist", "test", tmp_path, verify=False).y.tolist() == [4, 9]


def test_source_of_says_which_copy_a_load_would_read(tmp_path):
    from dpfl.data.datasets import source_of

    assert source_of("cifar10", tmp_path) == "official"          # nothing here: would download the official
    (tmp_path / "cifar10_jpeg").mkdir()
    (tmp_path / "cifar10_jpeg" / "cifar10-images-jpeg.tar.gz").write_bytes(b"")
    assert source_of("cifar10", tmp_path) == "CIFAR-10 (JPEG copy)"
    assert source_of("mnist", tmp_path) == "official" and source_of("femnist", tmp_path) == "LEAF subset"


def test_a_runs_cache_key_includes_the_data_source(tmp_path):
    """The JPEG copy and the official CIFAR-10 give different results: their runs must not share a
    cache entry (the device, which only says where a run computed, stays out of the key)."""
    from dpfl.experiments.zheng2021 import ZhengRun
    from dpfl.runs import config_hash

    jpeg = tmp_path / "jpeg"
    (jpeg / "cifar10_jpeg").mkdir(parents=True)
    (jpeg / "cifar10_jpeg" / "cifar10-images-jpeg.tar.gz").write_bytes(b"")
    official = tmp_path / "official"
    (official / "cifar-10-batches-py").mkdir(parents=True)
    for b in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]:
        (official / "cifar-10-batches-py" / b).write_bytes(b"")
    on = lambda root, device="cpu": ZhengRun("cifar10", 1.0, 1.0, 16, 2, data_dir=str(root), device=device)
    assert on(jpeg).data_source == "CIFAR-10 (JPEG copy)" and on(official).data_source == "official"
    assert config_hash(on(jpeg)) != config_hash(on(official))
    assert config_hash(on(jpeg, "cuda")) == config_hash(on(jpeg, "cpu"))
    mnist = ZhengRun("mnist", 1.0, 1.0, 16, 2, data_dir=str(jpeg))
    assert mnist.data_source is None                                # MNIST: official only; old keys kept


def test_miniature_cifar_pickle_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for b in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]:
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        with open(folder / b, "wb") as fh:
            pickle.dump({"data": data, "labels": [0, 1, 2, 3]}, fh)
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_dataset("cifar10", "test", tmp_path)
    d = load_dataset("cifar10", "train", tmp_path, verify=False)
    assert tuple(d.x.shape) == (20, 32, 32, 3) and d.source == "official"
    with open(folder / "data_batch_1", "rb") as fh:
        first = pickle.load(fh)["data"][0]
    assert torch.equal(d.x[0].permute(2, 0, 1).reshape(-1), torch.from_numpy(first))   # CHW → HWC


def test_miniature_cifar_jpeg_archive(tmp_path):
    from PIL import Image

    archive = tmp_path / "cifar10_jpeg" / "cifar10-images-jpeg.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        for cls in ("cat", "airplane"):
            for n in (1, 0):
                buf = io.BytesIO()
                Image.fromarray(np.full((32, 32, 3), 40 if cls == "cat" else 200, np.uint8)).save(buf, "JPEG")
                info = tarfile.TarInfo(f"cifar10-images-jpeg/test/{cls}/{n:04d}.jpg")
                info.size = len(buf.getvalue())
                tar.addfile(info, io.BytesIO(buf.getvalue()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = load_dataset("cifar10", "test", tmp_path, verify=False)
    assert d.y.tolist() == [0, 0, 3, 3] and d.source == "CIFAR-10 (JPEG copy)"   # class order, then file order
    assert abs(int(d.x[0].float().mean()) - 200) <= 3 and abs(int(d.x[-1].float().mean()) - 40) <= 3


def test_miniature_tff_h5(tmp_path):
    h5py = pytest.importorskip("h5py")
    (tmp_path / "femnist").mkdir()
    for split, n in (("train", 3), ("test", 1)):
        with h5py.File(tmp_path / "femnist" / f"fed_emnist_{split}.h5", "w") as f:
            for client, label in (("f0001_00", 5), ("f0002_01", 40)):
                g = f.create_group(f"examples/{client}")
                g["pixels"] = np.ones((n, 28, 28), np.float32)      # 1.0 = background
                g["label"] = np.full(n, label, np.int32)
    d = load_dataset("femnist", "train", tmp_path)
    assert d.source == "TFF federated EMNIST, 2 writers" and len(d) == 6
    assert int(d.x.max()) == 0 and d.y.tolist() == [5, 5, 5, 40, 40, 40] and d.writer.tolist() == [0, 0, 0, 1, 1, 1]


def test_missing_files_explain_where_and_how(tmp_path, monkeypatch):
    with pytest.raises(DatasetMissing, match=r"femnist: neither .* Looked in"):
        load_dataset("femnist", "train", tmp_path)
    monkeypatch.setattr("dpfl.data.datasets._download_torchvision", _offline_download)
    with pytest.raises(DatasetMissing, match=r"missing .*train-images.* Looked in"):
        load_dataset("mnist", "train", tmp_path)


def _offline_download(name, missing, root):
    raise DatasetMissing(f"{name}: missing {', '.join(map(str, missing))}. Looked in {root}.")


def test_bad_names():
    with pytest.raises(ValueError, match="^name"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="^split"):
        load_dataset("mnist", "valid")


# -- partitions ----------------------------------------------------------------------------------

def test_zheng_label_shards(data_root):
    labels = load_dataset("mnist", "train", data_root).y.numpy()
    test_labels = load_dataset("mnist", "test", data_root).y.numpy()
    rng = np.random.default_rng(0)
    clients = partition.label_shards(labels, 100, 4, 150, rng)
    assert len(clients) == 100 and all(len(c) == 600 for c in clients)
    assert len(np.unique(np.concatenate(clients))) == 60000                     # disjoint, complete
    # A shard of the label-sorted data may straddle two labels, so 4 shards hold ≤ 8 labels; most
    # clients hold 3–4 (measured: see the Zheng notebook).
    n_labels = np.array([len(np.unique(labels[c])) for c in clients])
    assert n_labels.max() <= 8 and np.mean((n_labels >= 3) & (n_labels <= 4)) >= 0.6
    sorted_pos = np.empty(60000, dtype=np.int64)
    sorted_pos[np.lexsort((np.arange(60000), labels))] = np.arange(60000)
    for c in clients[:10]:                                                       # exactly 4 whole shards
        assert len(np.unique(sorted_pos[c] // 150)) == 4
    tests = partition.test_sets_like(labels, test_labels, clients, 200, rng)
    assert all(len(t) == 200 and set(test_labels[t]) <= set(labels[c]) for c, t in zip(clients, tests))


def test_geyer_shards(data_root):
    labels = load_dataset("mnist", "train", data_root).y.numpy()
    rng = np.random.default_rng(1)
    clients = partition.geyer_shards(labels, 1000, rng)
    assert len(clients) == 1000 and all(len(c) == 500 for c in clients)
    # 2 shards of 250: ≤ 2 digits unless a shard straddles a label boundary (≤ 4 then)
    n_labels = np.array([len(np.unique(labels[c])) for c in clients[:100]])
    assert n_labels.max() <= 4 and np.mean(n_labels <= 2) >= 0.8
    assert np.concatenate(clients).max() < 50_000                                # validation held out
    assert np.array_equal(clients[0], clients[100])                              # replicated for K > 100


def test_dirichlet_spread_matches_the_dirichlet():
    labels = np.repeat(np.arange(10), 5000)
    rng = np.random.default_rng(2)
    clients = partition.dirichlet(labels, 200, 0.5, 500, rng)
    props = partition.label_proportions(labels, clients, 10)
    ref = np.random.default_rng(3).dirichlet(np.full(10, 0.5), size=20000).max(axis=1).mean()
    assert props.max(axis=1).mean() == pytest.approx(ref, abs=0.03)             # mean max-proportion
    assert all(len(c) == 500 for c in clients)
    overlap = len(np.concatenate(clients)) - len(np.unique(np.concatenate(clients)))
    assert overlap > 0                                                           # Zheng's overlapping clients
    disjoint = partition.dirichlet(labels, 50, 0.5, 500, rng, disjoint=True)
    assert len(np.unique(np.concatenate(disjoint))) == sum(len(c) for c in disjoint)


def test_one_label_skewed_and_by_writer():
    labels = np.repeat(np.arange(10), 100)
    rng = np.random.default_rng(4)
    clients = partition.one_label(labels, 20, 40, rng)
    assert all(len(np.unique(labels[c])) == 1 for c in clients)
    sk = partition.skewed(labels, 20, 40, chosen_clients=[0, 1], chosen_label=7, rng=rng)
    assert labels[sk[0]][0] == labels[sk[1]][0] == 7
    assert all(labels[c][0] != 7 for c in sk[2:])
    writers = np.array([2, 0, 2, 1, 0])
    assert [c.tolist() for c in partition.by_writer(writers)] == [[1, 4], [3], [0, 2]]
    assert [c.tolist() for c in partition.by_writer(writers, subset=[2])] == [[0, 2]]


def test_partitions_are_deterministic_per_seed():
    labels = np.repeat(np.arange(10), 600)
    a = partition.label_shards(labels, 10, 4, 150, np.random.default_rng(5))
    b = partition.label_shards(labels, 10, 4, 150, np.random.default_rng(5))
    c = partition.label_shards(labels, 10, 4, 150, np.random.default_rng(6))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    d1 = partition.dirichlet(labels, 5, 0.5, 100, np.random.default_rng(5))
    d2 = partition.dirichlet(labels, 5, 0.5, 100, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(d1, d2))


@pytest.mark.parametrize("call, match", [
    (lambda l: partition.label_shards(l, 100, 4, 151, np.random.default_rng(0)), "exceeds"),
    (lambda l: partition.label_shards(l, 10, 4, 7, np.random.default_rng(0)), "does not divide"),
    (lambda l: partition.dirichlet(l, 10, 0.0, 50, np.random.default_rng(0)), "^beta"),
    (lambda l: partition.dirichlet(l, 10, 0.01, 700, np.random.default_rng(0)), "only 600 exist"),
    (lambda l: partition.one_label(l, 30, 300, np.random.default_rng(0)), "exceeds"),
    (lambda l: partition.geyer_shards(l, 150, np.random.default_rng(0), train_size=6000), "multiple"),
])
def test_partition_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call(np.repeat(np.arange(10), 600))


def test_check_shards_before_any_data():
    """The check a run's config makes before loading data is label_shards' own: Zheng's MNIST split (60 000
    images in shards of 150, 4 a client) holds exactly 100 clients, and the error says so."""
    partition.check_shards(100, 4, 150, 60_000)
    with pytest.raises(ValueError, match=r"num_clients at most 100\); got num_clients = 101"):
        partition.check_shards(101, 4, 150, 60_000)
    with pytest.raises(ValueError, match="^shards_per_client"):
        partition.check_shards(10, 0, 150, 60_000)
    with pytest.raises(ValueError, match="does not divide"):
        partition.check_shards(10, 4, 7, 60_000)


# -- stacked batches ------------------------------------------------------------------------------

def _toy_federated(sizes=(5, 8, 3)):
    n = sum(sizes)
    x = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1)
    bounds = np.cumsum((0,) + sizes)
    clients = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    return FederatedDataset(x, torch.arange(n), x, torch.arange(n), clients, clients, "toy")


def test_fixed_size_batches_are_distinct_members_and_uniform():
    fd = _toy_federated()
    rng = np.random.default_rng(0)
    x, y, mask = fd.batches([0, 1, 2], batch_size=3, steps=4000, rng=rng)
    assert tuple(x.shape) == (3, 4000, 3, 1, 1, 1) and mask.all()
    for c, idx in enumerate(fd.clients):
        ys = y[c].numpy()
        assert np.isin(ys, idx).all()
        assert all(len(set(row)) == 3 for row in ys[:200])                      # without replacement
        freq = np.bincount(ys.ravel() - idx[0], minlength=len(idx)) / ys.size
        np.testing.assert_allclose(freq, 1 / len(idx), atol=0.02)               # uniform
    assert torch.equal(x[..., 0, 0, 0], y.float())


def test_shuffled_epochs_visit_every_example_once_per_epoch():
    fd = _toy_federated((10, 7, 12))
    x, y, mask = fd.batches([0, 1, 2], batch_size=3, steps=12, rng=np.random.default_rng(2), sampling="shuffle")
    assert tuple(y.shape) == (3, 12, 3) and mask.all()
    for c, idx in enumerate(fd.clients):
        per_epoch = len(idx) // 3
        ys = y[c].numpy()
        for e in range(12 // per_epoch):
            seen = ys[e * per_epoch:(e + 1) * per_epoch].ravel()
            assert len(set(seen)) == seen.size == per_epoch * 3 and np.isin(seen, idx).all()   # no repeats in an epoch
        first, second = ys[:per_epoch].ravel(), ys[per_epoch:2 * per_epoch].ravel()
        assert not np.array_equal(first, second)                                          # reshuffled


def test_poisson_batches_and_test_batch():
    fd = _toy_federated()
    x, y, mask = fd.batches([1], batch_size=2, steps=3000, rng=np.random.default_rng(1), sampling="poisson")
    assert abs(float(mask.sum(dim=-1).float().mean()) - 2.0) < 0.1             # E|batch| = B
    assert np.isin(y[mask].numpy(), fd.clients[1]).all()
    tx, ty, tmask = fd.test_batch([0, 2])
    assert tuple(tx.shape[:2]) == (2, 5) and tmask.sum(dim=1).tolist() == [5, 3]
    with pytest.raises(ValueError, match="batch_size 4 exceeds"):
        fd.batches([2], batch_size=4, steps=1, rng=np.random.default_rng(0))


def test_label_proportion_figure_helper():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpfl.data import plot_label_proportions

    labels = np.repeat(np.arange(3), 10)
    props = partition.label_proportions(labels, [np.arange(10), np.arange(5, 25), np.arange(30)], 3)
    np.testing.assert_allclose(props, [[1, 0, 0], [0.25, 0.5, 0.25], [1 / 3, 1 / 3, 1 / 3]])
    fig, ax = plt.subplots()
    plot_label_proportions(ax, props, ["a", "b", "c"], title="Fig. E.3a")
    heights = np.array([p.get_height() for p in ax.patches]).reshape(3, 3)     # classes × clients
    np.testing.assert_allclose(heights.T, props)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "c"]
    plt.close(fig)


def test_dirichlet_like_test_sets_follow_each_clients_proportions():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 1000)
    train, q = partition.dirichlet(labels, 30, 0.5, 500, rng, return_proportions=True)
    assert q.shape == (30, 10) and np.allclose(q.sum(1), 1)
    test = partition.dirichlet_like(labels, q, 200, rng)
    assert all(len(t) == 200 and len(np.unique(t)) == 200 for t in test)      # no repeats within a client
    observed = partition.label_proportions(labels, test, 10)
    # multinomial(200, q): each proportion's s.e. is sqrt(q(1−q)/200) ≤ 0.035
    assert np.abs(observed - q).max() < 5 * 0.0354
    # the train split's classes follow the same q
    assert np.abs(partition.label_proportions(labels, train, 10) - q).max() < 5 * np.sqrt(0.25 / 500)
    with pytest.raises(ValueError, match="^proportions"):
        partition.dirichlet_like(labels, q[:, :5], 200, rng)


def test_crop_flip_matches_torchvision_per_image():
    """Same offsets and flips as torchvision's RandomCrop(padding) + RandomHorizontalFlip would apply
    (reconstructed per image from the generator) and the fill where the crop leaves the image."""
    import torchvision.transforms.functional as TF

    from dpfl.data.augment import crop_flip

    x = torch.randn(2, 3, 3, 5, 6)
    fill = torch.tensor([-1.0, -2.0, -3.0])
    out = crop_flip(x, torch.Generator().manual_seed(5), pad=2, fill=fill)
    g = torch.Generator().manual_seed(5)
    n = 6
    oy, ox = torch.randint(0, 5, (n,), generator=g), torch.randint(0, 5, (n,), generator=g)
    flip = torch.rand(n, generator=g) < 0.5
    flat, got = x.reshape(n, 3, 5, 6), out.reshape(n, 3, 5, 6)
    for i in range(n):
        padded = torch.stack([TF.pad(flat[i, c:c + 1], [2], fill=float(fill[c]))[0] for c in range(3)])
        ref = TF.crop(padded, int(oy[i]), int(ox[i]), 5, 6)
        ref = TF.hflip(ref) if flip[i] else ref
        torch.testing.assert_close(got[i], ref)
    assert flip.any() and (~flip).any()
    flipped_only = crop_flip(x, torch.Generator().manual_seed(5), pad=0)            # pad 0: flips only
    assert torch.equal(flipped_only.flatten().sort().values, x.flatten().sort().values)


@pytest.mark.parametrize("threads_", [1, 2])
def test_crop_flip_in_chunks_equals_one_image_at_a_time_bit_for_bit(threads_):
    """Chunks of images cropped side by side (one thread a core) give each image what the first
    version's arithmetic gives it alone: F.pad(x − fill) + fill, the crop at its offsets, the flip — bit for bit, so
    cached CIFAR-10 runs compute again exactly."""
    import torch.nn.functional as F

    from dpfl.data.augment import crop_flip

    x = torch.randn(11, 3, 7, 6)
    fill = torch.tensor([-1.989, -1.984, -1.711])
    before = torch.get_num_threads()
    torch.set_num_threads(threads_)
    try:
        out = crop_flip(x, torch.Generator().manual_seed(9), pad=2, fill=fill, chunk=3)    # chunks of 3, 3, 3, 2
    finally:
        torch.set_num_threads(before)
    assert torch.get_num_threads() == before
    g = torch.Generator().manual_seed(9)
    oy, ox = torch.randint(0, 5, (11,), generator=g), torch.randint(0, 5, (11,), generator=g)
    flip = torch.rand(11, generator=g) < 0.5
    for i in range(11):
        padded = F.pad(x[i] - fill.view(3, 1, 1), (2, 2, 2, 2)) + fill.view(3, 1, 1)
        ref = padded[:, oy[i]:oy[i] + 7, ox[i]:ox[i] + 6]
        assert torch.equal(out[i], ref.flip(-1) if flip[i] else ref)
    assert out.is_contiguous()
    with pytest.raises(ValueError, match="^chunk"):
        crop_flip(x, torch.Generator(), chunk=0)
