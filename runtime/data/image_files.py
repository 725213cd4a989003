"""Data sets stored as folders of image files, one folder per class: TinyImageNet and any ImageFolder."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from daic.runtime.data.sets import UNREADABLE, Dataset, data_folder
from daic.runtime.data.tensors import DataError, TensorData


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
        folder = data_folder(root, self.name)
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

    def _pixels(self, path: str, mode: str) -> np.ndarray:
        """One image file as uint8 (H, W, C) in the data set's size (resized where the set allows it)."""
        from PIL import Image

        channels, height, width = self.image
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
                return np.asarray(pixels, dtype=np.uint8).reshape(height, width, channels)
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise DataError(
                f"{self.name}: cannot read {path} as an image ({exc}); expected {self.expected}"
            ) from None

    def _decode(self, paths: Sequence[str]) -> Tensor:
        """The images as one float32 (N, C, H, W) tensor in [0, 1], filled image by image: only the tensor
        is ever held whole (no second, uint8 copy of a large data set)."""
        channels, height, width = self.image
        # CPU: a data set is read and held on the host; batches move to the device as they are used
        out = torch.empty((len(paths), channels, height, width), dtype=torch.float32)
        slots = out.numpy()  # the same memory: numpy writes each image in place, without a temporary
        mode = "L" if channels == 1 else "RGB"

        def one(index: int, path: str) -> None:
            array = self._pixels(path, mode)
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
        except UNREADABLE as exc:
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
