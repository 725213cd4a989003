"""Data sets, held in memory as tensors, and augmentations applied to whole batches at once.

`Digits` (scikit-learn's bundled handwritten digits) needs no download and is the default. The others are
read with torchvision from a folder (`root`), in their usual on-disk formats, and fetched only when asked
(`download=True`); `TinyImageNet` and `ImageFolder` are folders of image files, one folder per class.
Every image is scaled to [0, 1], the value range the goals clip the input box to. Reading whole data sets
into tensors keeps batching and augmentation vectorised (no per-image Python).
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from daic.runtime.data.tensors import DataError, NoDataFolder, TensorData


class Dataset:
    """A data set as a scheme names it; `load` reads it. Its image shape (C, H, W) and class count are the
    compiler's declaration, handed over by the lowering; the files read are checked against them."""

    name = ""

    def __init__(
        self,
        augment: Sequence = (),
        root: str | None = None,
        subset: int | None = None,
        *,
        image: Sequence[int],
        classes: int,
    ) -> None:
        self.augment = list(augment)
        self.root = root
        self.subset = subset
        self.image, self.classes = tuple(image), int(classes)

    def load(self, root: str | None = None, download: bool = False) -> TensorData:
        data = self._read(root or self.root, download)
        if self.subset:
            n_test = max(1, self.subset // 5)
            data = TensorData(
                data.train_x[: self.subset],
                data.train_y[: self.subset],
                data.test_x[:n_test],
                data.test_y[:n_test],
                data.classes,
            )
        return data

    def _read(self, root: str | None, download: bool) -> TensorData:
        raise NotImplementedError

    def _check(self, data: TensorData, folder: Path) -> None:
        """Files that read but hold other data (another set's images, labels that do not match) would
        otherwise fail mid-epoch, after the run folder was made."""
        for split, x, y in (("training", data.train_x, data.train_y), ("test", data.test_x, data.test_y)):
            problem = None
            if tuple(x.shape[1:]) != self.image:
                problem = f"images of shape {list(x.shape[1:])} (C, H, W), not {list(self.image)}"
            elif len(y) != len(x):
                problem = f"{len(x)} images but {len(y)} labels"
            elif len(y) and not (int(y.min()) >= 0 and int(y.max()) < self.classes):
                problem = f"labels from {int(y.min())} to {int(y.max())}, not 0 to {self.classes - 1}"
            if problem:
                raise DataError(f"{self.name}: the {split} files under {folder} hold {problem}")

    def __repr__(self) -> str:
        return f"{self.name}(augment={self.augment}, subset={self.subset})"


class Digits(Dataset):
    """scikit-learn's digits: 1,797 8x8 images (values 0-16, scaled to [0, 1]); a fixed split of 1,437
    training and 360 test images (shuffled with seed 0, the same on every machine)."""

    name = "Digits"

    def __init__(
        self, augment: Sequence = (), subset: int | None = None, *, image: Sequence[int], classes: int
    ) -> None:
        super().__init__(augment, None, subset, image=image, classes=classes)

    def _read(self, root: str | None, download: bool) -> TensorData:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        images = torch.tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0
        labels = torch.tensor(bunch.target, dtype=torch.int64)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
        images, labels = images[order], labels[order]
        return TensorData(images[360:], labels[360:], images[:360], labels[:360], self.classes)


def data_folder(root: str | None, name: str) -> Path:
    if root is None:
        raise NoDataFolder(
            f"{name} is read from a folder: pass --data DIR (and --download to fetch it there)"
        )
    path = Path(root).expanduser()
    if not path.is_dir():
        raise NoDataFolder(f"{name}: the data folder {path} does not exist")
    return path


def _to_images(array, layout: str) -> Tensor:
    """uint8 images to float32 (N, C, H, W) in [0, 1]."""
    # CPU: a data set is read and held on the host; batches move to the device as they are used
    tensor = torch.as_tensor(np.asarray(array))
    if layout == "NHW":
        tensor = tensor[:, None]
    elif layout == "NHWC":
        tensor = tensor.permute(0, 3, 1, 2)
    return tensor.contiguous().to(torch.float32) / 255.0


def _unpack_gz(folder: Path) -> None:
    """MNIST-style folders often hold only the .gz files; torchvision reads the unpacked ones."""
    if not folder.is_dir():
        return
    for packed in folder.glob("*-ubyte.gz"):
        target = packed.with_suffix("")
        if target.exists() and target.stat().st_mtime >= packed.stat().st_mtime:
            continue  # unpacked before (a newer .gz, say a replaced truncated one, is unpacked again)
        partial = target.with_name(target.name + ".partial")
        try:
            with gzip.open(packed, "rb") as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(partial, target)  # whole or not at all: a cut .gz leaves no stale file behind
        finally:
            partial.unlink(missing_ok=True)


# What torchvision (and gzip) raise for missing, truncated or foreign files; its MNIST reader asserts.
UNREADABLE = (
    RuntimeError,
    OSError,
    ValueError,
    KeyError,
    IndexError,
    EOFError,
    AssertionError,
    zlib.error,
    pickle.UnpicklingError,
)


def _missing(name: str, folder: Path, expected: str, exc: Exception) -> DataError:
    # torchvision's readers fail on foreign or damaged files with bare assertions: say what that means.
    reason = str(exc).strip() or f"the files there do not read as {name}'s: damaged, or another data set's"
    if "download=True" in reason:  # torchvision's words for absent files, naming its own API's argument
        reason = "its files are not there"
    return DataError(
        f"{name}: no usable data under {folder} ({reason}); expected {expected}; "
        "put the files there or pass --download where a network is available"
    )


class _Torchvision(Dataset):
    """A data set torchvision reads from `root`: its two splits as tensors."""

    layout = ""  # how the class stores images: "NHW", "NHWC" or "NCHW"
    expected = ""  # the files, for the message when they are missing

    def _splits(self, folder: Path, download: bool) -> tuple[object, object]:
        from torchvision import datasets

        cls = getattr(datasets, self.name)
        return cls(str(folder), train=True, download=download), cls(
            str(folder), train=False, download=download
        )

    @staticmethod
    def _labels(split) -> Tensor:
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        return torch.as_tensor(np.asarray(split.targets), dtype=torch.int64)

    def _read(self, root: str | None, download: bool) -> TensorData:
        folder = data_folder(root, self.name)
        try:
            train, test = self._splits(folder, download)
            data = TensorData(
                _to_images(train.data, self.layout),
                self._labels(train),
                _to_images(test.data, self.layout),
                self._labels(test),
                self.classes,
            )
        except UNREADABLE as exc:
            raise _missing(self.name, folder, self.expected, exc) from None
        self._check(data, folder)
        return data


class _MnistLike(_Torchvision):
    layout = "NHW"

    @property
    def expected(self) -> str:
        return f"{self.name}/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte[.gz]"

    def _splits(self, folder: Path, download: bool) -> tuple[object, object]:
        _unpack_gz(folder / self.name / "raw")
        return super()._splits(folder, download)


class MNIST(_MnistLike):
    name = "MNIST"


class FashionMNIST(_MnistLike):
    name = "FashionMNIST"


class CIFAR10(_Torchvision):
    name, layout = "CIFAR10", "NHWC"
    expected = "cifar-10-batches-py/ as unpacked from the python tarball"


class CIFAR100(_Torchvision):
    name, layout = "CIFAR100", "NHWC"
    expected = "cifar-100-python/ as unpacked from the python tarball"


class SVHN(_Torchvision):
    name, layout = "SVHN", "NCHW"
    expected = "train_32x32.mat and test_32x32.mat"

    def _splits(self, folder: Path, download: bool) -> tuple[object, object]:
        from torchvision import datasets

        return (
            datasets.SVHN(str(folder), split="train", download=download),
            datasets.SVHN(str(folder), split="test", download=download),
        )

    @staticmethod
    def _labels(split) -> Tensor:
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        return torch.as_tensor(np.asarray(split.labels), dtype=torch.int64)
