"""Data sets: the embedded digits, and tiny files written in each real on-disk format, read back through
the same loaders a user's --data folder goes through."""

import gzip
import hashlib
import pickle
import shutil
import struct

import numpy as np
import pytest
import torch
import torchvision.datasets as tvd
from PIL import Image

from daic.compiler.checking.values import Built
from daic.compiler.constructors import REGISTRY
from daic.compiler.lower import lower_value
from daic.runtime.data.augment import HorizontalFlip, RandomCrop
from daic.runtime.data.tensors import DataError, NoDataFolder, batches

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


def test_an_empty_folder_says_which_files_belong_there_in_daics_words(tmp_path):
    with pytest.raises(DataError) as caught:
        loader("MNIST").load(str(tmp_path))
    message = caught.value.command_message  # as the command line prints it; str() is in Python's terms
    assert message.startswith(
        f"MNIST: no usable data under {tmp_path} (its files are not there); expected MNIST/"
    )
    assert "download=True" not in message and message.endswith("pass --download where a network is available")
    assert str(caught.value).endswith("pass download=True where a network is available")


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


@pytest.mark.parametrize("name", ["MNIST", "CIFAR10", "SVHN", "TinyImageNet"])
def test_missing_files_say_what_to_do(tmp_path, name):
    with pytest.raises(DataError, match="put the files there or pass download=True"):
        loader(name).load(str(tmp_path))
    with pytest.raises(DataError, match="pass data=DIR"):
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
    """The registry declares each data set's image shape and classes once (ImageFolder's through its
    arguments); the loader checks files against what the lowering hands it."""
    from daic.compiler.constructors import REGISTRY
    from daic.compiler.lower import LoweringError, lower_dataset
    from daic.compiler.registry import Category

    for decl in REGISTRY.of_category(Category.DATASET):
        if decl.dataset.from_args is not None:
            continue
        lowered = lower_dataset(decl)
        assert (lowered.image, lowered.classes) == (decl.dataset.shape, decl.dataset.classes), decl.name
    assert lower_dataset(REGISTRY.dataset("CIFAR100")).classes == 100
    assert lower_dataset(REGISTRY.dataset("TinyImageNet")).image == (3, 64, 64)
    assert lower_dataset(REGISTRY.dataset("Digits")).load().test_x.shape[1:] == (1, 8, 8)
    folder = loader("ImageFolder", path="d", size=24, classes=7)
    assert (folder.root, folder.image, folder.classes) == ("d", (3, 24, 24), 7)
    assert loader("ImageFolder", path="d", size=5, classes=2, grey=True).image == (1, 5, 5)
    with pytest.raises(LoweringError, match="without the arguments that give its image shape"):
        lower_dataset(REGISTRY.dataset("ImageFolder"))


# --- folders of image files ----------------------------------------------------------------------------

# Tiny ImageNet's wnids, created out of order: labels follow their sorted order.
WNIDS = ("n02", "n01", "n03")


def _picture(path, label, size=(64, 64), mode="RGB"):
    """A flat image whose red channel (its grey level, in mode L) says its label: 40 * label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, 40 * label if mode == "L" else (40 * label, 90, 160)).save(path)


def _labels_of(x):
    """The labels the pictures' red channels say (JPEG is lossy, not that lossy)."""
    return (x[:, 0].mean(dim=(1, 2)) * 255 / 40).round().long()


def _tiny_prepared(root):
    """The layout the certified-training code bases prepare: train/<wnid>/ and val/<wnid>/."""
    base = root / "tiny-imagenet-200"
    for wnid in WNIDS:
        label = sorted(WNIDS).index(wnid)
        for i in range(2):
            _picture(base / "train" / wnid / f"{wnid}_{i}.JPEG", label)
        _picture(base / "val" / wnid / f"val_{label}.JPEG", label)
    return base


def _tiny_download(root):
    """The layout tiny-imagenet-200.zip unpacks to: train/<wnid>/images/ with a boxes file beside it, and
    val/images/ labelled by val/val_annotations.txt (tab-separated: file, wnid, bounding box)."""
    base = root / "tiny-imagenet-200"
    lines = []
    for wnid in WNIDS:
        label = sorted(WNIDS).index(wnid)
        for i in range(2):
            _picture(base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", label)
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text(f"{wnid}_0.JPEG\t0\t0\t63\t63\n")
        _picture(base / "val" / "images" / f"val_{label}.JPEG", label)
        lines.append(f"val_{label}.JPEG\t{wnid}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(reversed(lines)) + "\n")
    return base


def tiny(**args):
    """TinyImageNet's loader, told of the 3 classes these tiny folders hold (not the real 200)."""
    return lower_value(Built(REGISTRY.dataset("TinyImageNet"), args), classes=3)


@pytest.mark.parametrize("layout", [_tiny_prepared, _tiny_download])
def test_tiny_imagenet_layouts(tmp_path, layout):
    base = layout(tmp_path)
    data = tiny().load(str(tmp_path))
    assert data.train_x.shape == (6, 3, 64, 64) and data.test_x.shape == (3, 3, 64, 64)
    assert data.train_x.dtype == torch.float32 and data.classes == 3
    assert float(data.train_x.min()) >= 0 and float(data.train_x.max()) <= 1
    # Labels in sorted wnid order, the validation images' from their folder or the annotations.
    assert torch.equal(_labels_of(data.train_x), data.train_y)
    assert torch.equal(_labels_of(data.test_x), data.test_y)
    assert sorted(data.train_y.tolist()) == [0, 0, 1, 1, 2, 2] and sorted(data.test_y.tolist()) == [0, 1, 2]
    # The tiny-imagenet-200 folder itself is accepted as --data.
    assert torch.equal(tiny().load(str(base)).test_x, data.test_x)


def test_tiny_imagenet_layouts_give_the_same_data_in_the_same_order(tmp_path):
    prepared = tiny().load(str(_tiny_prepared(tmp_path / "a")))
    download = tiny().load(str(_tiny_download(tmp_path / "b")))
    for a, b in zip(
        (prepared.train_x, prepared.train_y, prepared.test_x, prepared.test_y),
        (download.train_x, download.train_y, download.test_x, download.test_y),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_tiny_imagenet_grey_images_become_colour_and_subset_decodes_a_few(tmp_path):
    base = _tiny_prepared(tmp_path)
    _picture(base / "train" / "n01" / "n01_grey.JPEG", 0, mode="L")
    data = tiny().load(str(tmp_path))
    assert data.train_x.shape == (7, 3, 64, 64)
    assert sum(torch.equal(x[0], x[1]) and torch.equal(x[1], x[2]) for x in data.train_x) == 1
    # The files are in a fixed shuffled order; a subset decodes only its first images.
    small = tiny(subset=4).load(str(tmp_path))
    assert torch.equal(small.train_x, data.train_x[:4]) and torch.equal(small.test_y, data.test_y[:1])


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            lambda base: _picture(base / "train" / "n04" / "n04_0.JPEG", 0),
            r"TinyImageNet: .*train holds 4 class folders \(n01, n02, n03, n04\), not the 3 of TinyImageNet",
        ),
        (
            lambda base: _picture(base / "train" / "n01" / "n01_small.JPEG", 0, size=(32, 32)),
            r"n01_small.JPEG is 32x32 pixels, not 64x64; expected tiny-imagenet-200/train/<wnid>/\*.JPEG",
        ),
        (
            lambda base: (base / "train" / "n02" / "n02_1.JPEG").write_bytes(b"not a JPEG"),
            r"TinyImageNet: cannot read .*n02_1.JPEG as an image \(cannot identify image file",
        ),
        (
            lambda base: _picture(base / "val" / "n09" / "val_9.JPEG", 0),
            r"val holds class folders that the training split lacks: n09",
        ),
        (
            lambda base: shutil.rmtree(base / "val"),
            r"TinyImageNet: no usable data under .*tiny-imagenet-200 \(no val/ folder\); expected .*; "
            r"put the files there or pass download=True",
        ),
        (
            lambda base: [p.unlink() for p in (base / "train" / "n03").iterdir()],
            r"no usable data under .*train \(Found no valid file for the classes n03\. Supported extensions",
        ),
    ],
    ids=["classes", "size", "garbage", "foreign-val-class", "no-val", "empty-class"],
)
def test_tiny_imagenet_folders_that_do_not_fit_say_what_is_wrong(tmp_path, spoil, message):
    spoil(_tiny_prepared(tmp_path))
    with pytest.raises(DataError, match=message):
        tiny().load(str(tmp_path))


def test_tiny_imagenet_annotations_must_name_training_classes(tmp_path):
    base = _tiny_download(tmp_path)
    with open(base / "val" / "val_annotations.txt", "a") as handle:
        handle.write("val_7.JPEG\tn07\t0\t0\t63\t63\n")
    with pytest.raises(DataError, match=r"line 4 of .*val_annotations.txt names no class of the training"):
        tiny().load(str(tmp_path))


def test_tiny_imagenet_checks_the_real_class_count(tmp_path):
    _tiny_prepared(tmp_path)
    with pytest.raises(
        DataError, match=r"holds 3 class folders \(n01, n02, n03\), not the 200 of TinyImageNet"
    ):
        loader("TinyImageNet").load(str(tmp_path))


def _image_folder(root, test="test", classes=("dog", "cat")):
    """Images of several sizes (and a palette PNG), in train/<class>/ and test/<class>/."""
    for split, n in (("train", 3), (test, 2)):
        for name in classes:
            label = sorted(classes).index(name)
            for i in range(n):
                _picture(root / split / name / f"{i}.png", label, size=(20 + 7 * i, 30))
    Image.new("P", (9, 9), 0).save(root / "train" / classes[0] / "palette.png")
    return root


def test_image_folder_resizes_and_labels_by_sorted_class_folders(tmp_path):
    _image_folder(tmp_path)
    data = loader("ImageFolder", path=str(tmp_path), size=16, classes=2).load()
    assert data.train_x.shape == (7, 3, 16, 16) and data.test_x.shape == (4, 3, 16, 16)
    assert float(data.train_x.min()) >= 0 and float(data.train_x.max()) <= 1
    assert torch.equal(_labels_of(data.test_x), data.test_y)  # cat 0, dog 1
    assert sorted(data.test_y.tolist()) == [0, 0, 1, 1]
    grey = loader("ImageFolder", path=str(tmp_path), size=8, classes=2, grey=True).load()
    assert grey.train_x.shape == (7, 1, 8, 8)
    # --data replaces the scheme's path, as it does every data set's root.
    assert loader("ImageFolder", path="elsewhere", size=16, classes=2).load(str(tmp_path)).classes == 2


def test_image_folder_takes_val_for_test(tmp_path):
    _image_folder(tmp_path, test="val")
    assert loader("ImageFolder", path=str(tmp_path), size=4, classes=2).load().test_x.shape == (4, 3, 4, 4)


@pytest.mark.parametrize(
    ("spoil", "args", "message"),
    [
        (
            lambda root: None,
            {"classes": 3},
            r"ImageFolder: .*train holds 2 class folders \(cat, dog\), not the 3 its `classes` declares "
            r"\(write classes=2 to use them all\)",
        ),
        (
            lambda root: shutil.rmtree(root / "test"),
            {},
            r"ImageFolder: no usable data under .* \(no test/ or val/ folder\); expected "
            r"train/<class>/<image> and test/<class>/<image> \(or val/\), image files such as .jpg or .png$",
        ),
        (
            lambda root: shutil.rmtree(root / "train"),
            {},
            r"ImageFolder: no usable data under .* \(no train/ folder\)",
        ),
        (
            lambda root: (root / "train" / "cat" / "3.png").write_bytes(b"\x89PNG cut short"),
            {},
            r"ImageFolder: cannot read .*3.png as an image",
        ),
    ],
    ids=["classes", "no-test", "no-train", "garbage"],
)
def test_image_folders_that_do_not_fit_say_what_is_wrong(tmp_path, spoil, args, message):
    spoil(_image_folder(tmp_path))
    with pytest.raises(DataError, match=message):
        loader("ImageFolder", **{"path": str(tmp_path), "size": 16, "classes": 2, **args}).load()


def test_image_folder_that_is_not_there(tmp_path):
    with pytest.raises(NoDataFolder, match=r"ImageFolder: the data folder .*nowhere does not exist"):
        loader("ImageFolder", path=str(tmp_path / "nowhere"), size=16, classes=2).load()
