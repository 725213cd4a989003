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
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


class DataError(Exception):
    """A data set that cannot be loaded, with a message that says what to do."""


class NoDataFolder(DataError):
    """A data set read from files was given no folder, or one that does not exist: a command-line mistake."""


@dataclass
class TensorData:
    train_x: Tensor  # float32 in [0, 1], (N, C, H, W)
    train_y: Tensor  # int64, (N,)
    test_x: Tensor
    test_y: Tensor
    classes: int
    value_range: tuple[float, float] = (0.0, 1.0)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def held_out(self, share: float) -> TensorData:
        """The training set split in two: `share` of it (drawn with seed 0, so the same images on every
        machine and run) becomes the test set, the rest the training set; the test set is not read."""
        n = len(self.train_y)
        held = min(n - 1, max(1, round(share * n)))
        # CPU: the split's own generator, where the loaded tensors are: the split is data, not training
        order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
        test, train = order[:held].sort().values, order[held:].sort().values
        return TensorData(
            self.train_x[train],
            self.train_y[train],
            self.train_x[test],
            self.train_y[test],
            self.classes,
            self.value_range,
        )


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor (random draws come from CPU generators, so that runs reproduce on any device) on the
    device without making the host wait: pinned memory is what lets the copy run asynchronously."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


# --- augmentations --------------------------------------------------------------------------------------


class RandomCrop:
    """Zero-pads by `padding` and crops a random `size` x `size` window, per image."""

    def __init__(self, size: int, padding: int = 4) -> None:
        self.size, self.padding = int(size), int(padding)

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        n, c, h, w = x.shape
        p, s = self.padding, self.size
        padded = F.pad(x, (p, p, p, p))
        top = to_device(torch.randint(0, h + 2 * p - s + 1, (n,), generator=generator), x.device)
        left = to_device(torch.randint(0, w + 2 * p - s + 1, (n,), generator=generator), x.device)
        rows = top[:, None] + torch.arange(s, device=x.device)
        cols = left[:, None] + torch.arange(s, device=x.device)
        by_rows = padded.gather(2, rows[:, None, :, None].expand(n, c, s, w + 2 * p))
        return by_rows.gather(3, cols[:, None, None, :].expand(n, c, s, s))

    def __repr__(self) -> str:
        return f"RandomCrop({self.size}, padding={self.padding})"


class HorizontalFlip:
    """Flips each image left to right with probability 1/2."""

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        flip = to_device(torch.rand(x.shape[0], generator=generator) < 0.5, x.device)
        return torch.where(flip[:, None, None, None], x.flip(3), x)

    def __repr__(self) -> str:
        return "HorizontalFlip"


def augment(x: Tensor, transforms: Sequence, generator: torch.Generator) -> Tensor:
    for transform in transforms:
        x = transform(x, generator)
    return x


# --- data sets ------------------------------------------------------------------------------------------


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


def _folder(root: str | None, name: str) -> Path:
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
_UNREADABLE = (
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
        folder = _folder(root, self.name)
        try:
            train, test = self._splits(folder, download)
            data = TensorData(
                _to_images(train.data, self.layout),
                self._labels(train),
                _to_images(test.data, self.layout),
                self._labels(test),
                self.classes,
            )
        except _UNREADABLE as exc:
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


# --- folders of image files ----------------------------------------------------------------------------


def _some(names: Sequence[str], shown: int = 5) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _shuffled(samples: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The samples in a fixed shuffled order (seed 0, the same on every machine): files are found sorted by
    class, and `subset` should take some of every class, as it does from the other data sets."""
    # CPU: a data set is read and held on the host; batches move to the device as they are used
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(0))
    return [samples[i] for i in order.tolist()]


def _decoders() -> int:
    # Pillow decodes and resizes without holding the GIL, so threads read files side by side.
    return max(1, min(8, os.cpu_count() or 1))


_CHUNK = 256  # images a thread decodes per task: a task per image costs as much as a small image's decoding


class _ImageFiles(Dataset):
    """A data set of image files in one folder per class, found as torchvision's ImageFolder finds them (its
    `find_classes` and `make_dataset`): labels follow the sorted names of the training split's class
    folders, and the test split's folders are labelled by the same names."""

    expected = ""  # the layout, for messages
    remedy = ""  # what else the user can do, for messages
    resize = False  # images of another size are resized (True) or refused

    def _samples(self, folder: Path, download: bool) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """The (file, label) pairs of the training and test splits."""
        raise NotImplementedError

    def _declared(self, found: int) -> str:
        """The declared class count, for the message when `found` class folders differ from it."""
        return f"the {self.classes} of {self.name}"

    def _read(self, root: str | None, download: bool) -> TensorData:
        folder = _folder(root, self.name)
        train, test = (_shuffled(split) for split in self._samples(folder, download))
        if self.subset:  # decode only the images used (`load` cuts the others' tensors the same way)
            train, test = train[: self.subset], test[: max(1, self.subset // 5)]
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        data = TensorData(
            self._decode([path for path, _ in train]),
            torch.tensor([label for _, label in train], dtype=torch.int64),
            self._decode([path for path, _ in test]),
            torch.tensor([label for _, label in test], dtype=torch.int64),
            self.classes,
        )
        self._check(data, folder)
        return data

    def _unusable(self, where: Path, reason: str) -> DataError:
        return DataError(
            f"{self.name}: no usable data under {where} ({reason}); expected {self.expected}{self.remedy}"
        )

    def _classes(self, split: Path) -> dict[str, int]:
        """The label of each class folder of the training split, checked against the declared count."""
        from torchvision.datasets.folder import find_classes

        if not split.is_dir():
            raise self._unusable(split.parent, f"no {split.name}/ folder")
        try:
            names, class_to_idx = find_classes(str(split))
        except OSError:  # torchvision's "Couldn't find any class folder"
            raise self._unusable(split, "no class folders") from None
        if len(names) != self.classes:
            plural = "s" if len(names) != 1 else ""
            raise DataError(
                f"{self.name}: {split} holds {len(names)} class folder{plural} ({_some(names)}), not "
                f"{self._declared(len(names))}"
            )
        return class_to_idx

    def _files(
        self, split: Path, class_to_idx: Mapping[str, int], test: bool = False
    ) -> list[tuple[str, int]]:
        """The images of a split, each labelled by its class folder (searched to any depth: torchvision's
        own TinyImageNet folders hold `<wnid>/images/*.JPEG`). A test split may lack classes, but not have
        classes the training split lacks: their labels would mean nothing."""
        from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

        if test:
            foreign = sorted(d.name for d in split.iterdir() if d.is_dir() and d.name not in class_to_idx)
            if foreign:
                raise DataError(
                    f"{self.name}: {split} holds class folders that the training split lacks: "
                    f"{_some(foreign)}"
                )
        try:
            samples = make_dataset(str(split), dict(class_to_idx), IMG_EXTENSIONS, allow_empty=test)
        except OSError as exc:  # a class folder without image files: torchvision names them
            raise self._unusable(split, str(exc).strip()) from None
        if not samples:
            raise self._unusable(split, "no image files")
        return samples

    def _decode(self, paths: Sequence[str]) -> Tensor:
        """The images as one float32 (N, C, H, W) tensor in [0, 1], filled image by image: only the tensor
        is ever held whole (no second, uint8 copy of a large data set)."""
        from PIL import Image

        channels, height, width = self.image
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        out = torch.empty((len(paths), channels, height, width), dtype=torch.float32)
        slots = out.numpy()  # the same memory: numpy writes each image in place, without a temporary
        mode = "L" if channels == 1 else "RGB"

        def one(index: int, path: str) -> None:
            try:
                with Image.open(path) as image:
                    pixels = image.convert(mode)  # grey, palette and CMYK files among colour ones
                    if pixels.size != (width, height):
                        if not self.resize:
                            raise DataError(
                                f"{self.name}: {path} is {pixels.size[0]}x{pixels.size[1]} pixels, not "
                                f"{width}x{height}; expected {self.expected}"
                            )
                        pixels = pixels.resize((width, height), Image.Resampling.BILINEAR)
                    array = np.asarray(pixels, dtype=np.uint8).reshape(height, width, channels)
            except (OSError, ValueError, Image.DecompressionBombError) as exc:
                raise DataError(
                    f"{self.name}: cannot read {path} as an image ({exc}); expected {self.expected}"
                ) from None
            # x / 255 in float32, as the other data sets scale their uint8 images.
            np.divide(array.transpose(2, 0, 1), np.float32(255), out=slots[index], dtype=np.float32)

        def chunk(start: int) -> None:
            for index in range(start, min(start + _CHUNK, len(paths))):
                one(index, paths[index])

        pool = ThreadPoolExecutor(_decoders())
        try:
            for _ in pool.map(chunk, range(0, len(paths), _CHUNK)):
                pass
        finally:
            pool.shutdown(cancel_futures=True)  # after a bad file, decode no more
        return out


class TinyImageNet(_ImageFiles):
    """Tiny ImageNet: 64x64 colour images of 200 classes, 100,000 for training and the 10,000 of the
    validation split as the test set, read from `root` as the certified-training code bases prepare it
    (`tiny-imagenet-200/{train,val}/<wnid>/*.JPEG`) or as the download unpacks
    (`train/<wnid>/images/*.JPEG`, and `val/images/*.JPEG` labelled by `val/val_annotations.txt`, read in
    place); `root` may also be the `tiny-imagenet-200` folder itself. Labels are the sorted order of the
    training wnids, as torchvision's ImageFolder gives them.

    Held in memory as float32, the training images take 4.9 GB (the test images 0.5 GB).

    The images stay in [0, 1], the range the input box is clipped to; the network normalises them. The
    CNN7 papers put a `Normalize` layer first in the network, with Tiny ImageNet's mean (0.4802, 0.4481,
    0.3975) and std (0.2302, 0.2265, 0.2262) (CIFAR-10's: (0.4914, 0.4822, 0.4465) and (0.2023, 0.1994,
    0.2010); MNIST's: 0.1307 and 0.3081), as stdlib/nets/*_cnn7.net do."""

    name = "TinyImageNet"
    base = "tiny-imagenet-200"
    url = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
    md5 = "90528d7ca1a48142e341f4ef8d21d0de"
    expected = (
        "tiny-imagenet-200/train/<wnid>/*.JPEG (or <wnid>/images/*.JPEG) and tiny-imagenet-200/val/ holding "
        "<wnid>/*.JPEG or images/*.JPEG with val_annotations.txt, as unpacked from tiny-imagenet-200.zip"
    )
    remedy = "; put the files there or pass --download where a network is available"

    def _samples(self, folder: Path, download: bool) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        base = self._base(folder, download)
        class_to_idx = self._classes(base / "train")
        return self._files(base / "train", class_to_idx), self._validation(base / "val", class_to_idx)

    def _base(self, folder: Path, download: bool) -> Path:
        """The tiny-imagenet-200 folder: inside `folder`, or `folder` itself."""
        for base in (folder / self.base, folder):
            if (base / "train").is_dir():
                return base
        if not download:
            raise self._unusable(folder, f"no {self.base}/train/ there")
        from torchvision.datasets.utils import download_and_extract_archive

        try:
            download_and_extract_archive(self.url, str(folder), md5=self.md5)
        except _UNREADABLE as exc:
            raise self._unusable(folder, f"the download failed: {exc}") from None
        return folder / self.base

    def _validation(self, val: Path, class_to_idx: Mapping[str, int]) -> list[tuple[str, int]]:
        annotations = val / "val_annotations.txt"
        images = val / "images"
        # Some preparations move the files into class folders and leave an empty images/ behind.
        if annotations.is_file() and images.is_dir() and any(images.iterdir()):
            samples = self._annotated(val, annotations, class_to_idx)
        elif val.is_dir():
            samples = self._files(val, class_to_idx, test=True)
        else:
            raise self._unusable(val.parent, "no val/ folder")
        # Both layouts hold the same files under the same names (preparing moves them): in their order, a
        # test image's index names the same image in either.
        return sorted(samples, key=lambda sample: (Path(sample[0]).name, sample[1]))

    def _annotated(
        self, val: Path, annotations: Path, class_to_idx: Mapping[str, int]
    ) -> list[tuple[str, int]]:
        """The download's layout: val/images/*.JPEG, each file's wnid in the second column of
        val_annotations.txt (filename, wnid, bounding box)."""
        try:
            lines = annotations.read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError) as exc:
            raise self._unusable(val, f"cannot read val_annotations.txt: {exc}") from None
        samples = []
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2 or fields[1] not in class_to_idx:
                raise DataError(
                    f"{self.name}: line {number} of {annotations} names no class of the training split "
                    f"({line.strip()[:60]!r}); expected a file name and a wnid, tab-separated"
                )
            samples.append((str(val / "images" / fields[0]), class_to_idx[fields[1]]))
        if not samples:
            raise self._unusable(val, "val_annotations.txt names no image")
        return samples


class ImageFolder(_ImageFiles):
    """Any data set of image files: `root/train/<class>/...` and `root/test/<class>/...` (or `val/`), read
    as torchvision's ImageFolder reads them (labels in the sorted order of the training class folders),
    each image converted to colour (or grey) and stretched to `size` x `size` (bilinear, as torchvision's
    `Resize((size, size))`). Its shape and classes are the scheme's arguments, handed over as `image` and
    `classes`; the folders found are checked against them."""

    name = "ImageFolder"
    resize = True

    def __init__(
        self,
        augment: Sequence = (),
        root: str | None = None,
        subset: int | None = None,
        size: int | None = None,
        grey: bool = False,
        *,
        image: Sequence[int],
        classes: int,
    ) -> None:
        # `size` and `grey` are what `image` says, (1 if grey else 3, size, size): the lowering derives it.
        super().__init__(augment, root, subset, image=image, classes=classes)

    expected = "train/<class>/<image> and test/<class>/<image> (or val/), image files such as .jpg or .png"

    def _declared(self, found: int) -> str:
        return f"the {self.classes} its `classes` declares (write classes={found} to use them all)"

    def _samples(self, folder: Path, download: bool) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        class_to_idx = self._classes(folder / "train")
        test = next((folder / name for name in ("test", "val") if (folder / name).is_dir()), None)
        if test is None:
            raise self._unusable(folder, "no test/ or val/ folder")
        return self._files(folder / "train", class_to_idx), self._files(test, class_to_idx, test=True)

    def __repr__(self) -> str:
        shown = f"{self.root!r}, image={list(self.image)}, classes={self.classes}, subset={self.subset}"
        return f"{self.name}({shown})"


# --- batches --------------------------------------------------------------------------------------------


def batches(
    x: Tensor, y: Tensor, size: int, generator: torch.Generator | None = None, indices: Tensor | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of (x, y) in a shuffled order (when a generator is given) or in order."""
    n = len(y) if indices is None else len(indices)
    # CPU: an order of host-held images; a CUDA tensor may be indexed by it as it is
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    if indices is not None:
        order = indices[order]
    for start in range(0, n, size):
        pick = order[start : start + size]
        yield x[pick], y[pick]
