"""Data sets: the embedded digits, and tiny files written in each real on-disk format, read back through
the same loaders a user's --data folder goes through."""

import gzip
import hashlib
import pickle
import struct

import numpy as np
import pytest
import torch
import torchvision.datasets as tvd

from daic.compiler.constructors import REGISTRY
from daic.compiler.elaborate import Built
from daic.compiler.lower import lower_value
from daic.runtime.data import DataError, HorizontalFlip, RandomCrop, batches

RNG = np.random.default_rng(0)


def loader(name, **args):
    """The runtime loader of a data set as the lowering builds it: with the registry's facts."""
    return lower_value(Built(REGISTRY.dataset(name), args))


def test_digits_is_embedded_and_split_the_same_way_everywhere():
    data = loader("Digits").load()
    assert data.train_x.shape == (1437, 1, 8, 8) and data.test_x.shape == (360, 1, 8, 8)
    assert (
        data.train_x.dtype == torch.float32
        and float(data.train_x.min()) == 0
        and float(data.train_x.max()) == 1
    )
    assert data.classes == 10 and set(data.test_y.tolist()) == set(range(10))
    again = loader("Digits").load()
    assert torch.equal(data.test_x, again.test_x)
    small = loader("Digits", subset=100).load()
    assert (len(small.train_y), len(small.test_y)) == (100, 20)


def _idx(path, array, gz):
    header = struct.pack(">I", 0x800 + array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST"])
@pytest.mark.parametrize("gz", [False, True])
def test_mnist_formats(tmp_path, name, gz):
    raw = tmp_path / name / "raw"
    for split, n in (("train", 12), ("t10k", 5)):
        _idx(raw / f"{split}-images-idx3-ubyte", RNG.integers(0, 256, (n, 28, 28)), gz)
        _idx(raw / f"{split}-labels-idx1-ubyte", RNG.integers(0, 10, (n,)), gz)
    data = loader(name).load(str(tmp_path))
    assert data.train_x.shape == (12, 1, 28, 28) and data.test_x.shape == (5, 1, 28, 28)
    assert float(data.train_x.min()) >= 0 and float(data.train_x.max()) <= 1
    assert data.train_y.dtype == torch.int64


def _mnist_files(root, images=(28, 28), labels=10, counts=(12, 5), gz=False):
    raw = root / "MNIST" / "raw"
    for split, n in zip(("train", "t10k"), counts, strict=True):
        _idx(raw / f"{split}-images-idx3-ubyte", RNG.integers(0, 256, (n, *images)), gz)
        _idx(raw / f"{split}-labels-idx1-ubyte", RNG.integers(0, labels, (n,)), gz)
    return raw


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"images": (10, 10)},
            r"training files under .* hold images of shape \[1, 10, 10\] \(C, H, W\), not \[1, 28, 28\]",
        ),
        ({"labels": 200}, r"hold labels from \d+ to \d+, not 0 to 9"),
    ],
    ids=["shape", "labels"],
)
def test_files_of_other_data_are_refused_before_training(tmp_path, files, message):
    _mnist_files(tmp_path, **files)
    with pytest.raises(DataError, match=message):
        loader("MNIST").load(str(tmp_path))


def test_garbage_and_cut_files_say_what_to_do(tmp_path):
    raw = _mnist_files(tmp_path)
    (raw / "train-images-idx3-ubyte").write_bytes(RNG.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    with pytest.raises(DataError, match="MNIST: no usable data under"):
        loader("MNIST").load(str(tmp_path))


def test_a_cut_gz_leaves_nothing_stale_behind(tmp_path):
    raw = _mnist_files(tmp_path, gz=True)
    packed = raw / "train-images-idx3-ubyte.gz"
    whole = packed.read_bytes()
    packed.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="MNIST: no usable data under"):
        loader("MNIST").load(str(tmp_path))
    assert not (raw / "train-images-idx3-ubyte").exists()
    assert [p.name for p in raw.glob("*.partial")] == []
    packed.write_bytes(whole)  # the user puts the whole file back
    assert loader("MNIST").load(str(tmp_path)).train_x.shape == (12, 1, 28, 28)


def _md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def _pickle(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


def test_cifar10_format(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-10-batches-py"
    train_list = []
    for i in range(1, 6):
        _pickle(
            folder / f"data_batch_{i}",
            {
                "data": RNG.integers(0, 256, (3, 3072), dtype=np.uint8),
                "labels": RNG.integers(0, 10, 3).tolist(),
            },
        )
        train_list.append([f"data_batch_{i}", _md5(folder / f"data_batch_{i}")])
    _pickle(
        folder / "test_batch",
        {"data": RNG.integers(0, 256, (4, 3072), dtype=np.uint8), "labels": [1, 2, 3, 4]},
    )
    _pickle(folder / "batches.meta", {"label_names": [str(i) for i in range(10)]})
    # torchvision checks the official files' md5 sums; these tiny files have their own.
    monkeypatch.setattr(tvd.CIFAR10, "train_list", train_list)
    monkeypatch.setattr(tvd.CIFAR10, "test_list", [["test_batch", _md5(folder / "test_batch")]])
    monkeypatch.setattr(
        tvd.CIFAR10,
        "meta",
        {"filename": "batches.meta", "key": "label_names", "md5": _md5(folder / "batches.meta")},
    )
    data = loader("CIFAR10").load(str(tmp_path))
    assert data.train_x.shape == (15, 3, 32, 32) and data.test_x.shape == (4, 3, 32, 32)
    assert data.test_y.tolist() == [1, 2, 3, 4]


def test_cifar100_format(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-100-python"
    for name, n in (("train", 6), ("test", 2)):
        _pickle(
            folder / name,
            {
                "data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8),
                "fine_labels": RNG.integers(0, 100, n).tolist(),
            },
        )
    _pickle(folder / "meta", {"fine_label_names": [str(i) for i in range(100)]})
    monkeypatch.setattr(tvd.CIFAR100, "train_list", [["train", _md5(folder / "train")]])
    monkeypatch.setattr(tvd.CIFAR100, "test_list", [["test", _md5(folder / "test")]])
    monkeypatch.setattr(
        tvd.CIFAR100, "meta", {"filename": "meta", "key": "fine_label_names", "md5": _md5(folder / "meta")}
    )
    data = loader("CIFAR100").load(str(tmp_path))
    assert data.train_x.shape == (6, 3, 32, 32) and data.classes == 100


def test_svhn_format(tmp_path, monkeypatch):
    from scipy.io import savemat

    split_list = {}
    for split, n in (("train", 5), ("test", 3)):
        path = tmp_path / f"{split}_32x32.mat"
        savemat(
            path,
            {
                "X": RNG.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                "y": np.array([[10]] + [[1]] * (n - 1), dtype=np.uint8),
            },
        )
        split_list[split] = ["", path.name, _md5(path)]
    monkeypatch.setattr(tvd.SVHN, "split_list", split_list)
    data = loader("SVHN").load(str(tmp_path))
    assert data.train_x.shape == (5, 3, 32, 32)
    assert data.train_y.tolist()[0] == 0  # SVHN's label 10 is the digit 0


@pytest.mark.parametrize("name", ["MNIST", "CIFAR10", "SVHN"])
def test_missing_files_say_what_to_do(tmp_path, name):
    with pytest.raises(DataError, match="put the files there or pass --download"):
        loader(name).load(str(tmp_path))
    with pytest.raises(DataError, match="pass --data DIR"):
        loader(name).load(None)


def test_augmentations_and_batches():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(16, 3, 8, 8)
    crop = RandomCrop(8, padding=2)(x, g)
    assert crop.shape == x.shape
    # Each crop is a window of the zero-padded image.
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    windows = [padded[i, :, r : r + 8, c : c + 8] for i in range(16) for r in range(5) for c in range(5)]
    assert all(any(torch.equal(crop[i], w) for w in windows[25 * i : 25 * i + 25]) for i in range(16))
    flipped = HorizontalFlip()(x, g)
    assert all(torch.equal(flipped[i], x[i]) or torch.equal(flipped[i], x[i].flip(2)) for i in range(16))
    seen = torch.cat([yb for _, yb in batches(x, torch.arange(16), 5, torch.Generator().manual_seed(1))])
    assert sorted(seen.tolist()) == list(range(16)) and seen.tolist() != list(range(16))


def test_the_lowering_hands_each_data_set_its_declared_facts():
    """The registry declares each data set's image shape and classes once; the loader checks files against
    what the lowering hands it."""
    from daic.compiler.constructors import REGISTRY
    from daic.compiler.lower import lower_dataset
    from daic.compiler.registry import Category

    for decl in REGISTRY.of_category(Category.DATASET):
        loader = lower_dataset(decl)
        assert (loader.image, loader.classes) == (decl.dataset.shape, decl.dataset.classes), decl.name
    assert lower_dataset(REGISTRY.dataset("CIFAR100")).classes == 100
    assert lower_dataset(REGISTRY.dataset("Digits")).load().test_x.shape[1:] == (1, 8, 8)
