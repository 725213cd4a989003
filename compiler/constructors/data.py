"""Data sets and augmentations. Each data set states its facts (input shape C,H,W, classes, value range)
once: shape inference reads them, and the lowering hands them to the runtime's loader, which checks the
files it reads against them."""

from __future__ import annotations

from ..registry import Category, Constructor, DatasetFacts, Param
from ..types import DATASET, INT, STR, TRANSFORM, ListOf

RT = "daic.runtime.data:"

AUGMENT = Param("augment", ListOf(TRANSFORM), (), "Augmentations applied to training images.")
ROOT = Param("root", STR, None, "Folder holding the data set's files (the CLI's --data overrides it).")
SUBSET = Param(
    "subset", INT, None, "Use only the first N training and N/5 test images (for quick runs).", low=1
)


def _dataset(name, doc, channels, side, classes, *, embedded=False):
    params = (AUGMENT, SUBSET) if embedded else (AUGMENT, ROOT, SUBSET)
    facts = DatasetFacts((channels, side, side), classes)
    return Constructor(name, Category.DATASET, DATASET, params, doc, RT + name, dataset=facts)


DECLARATIONS = [
    _dataset(
        "Digits",
        "scikit-learn's bundled handwritten digits, 8x8 grey images scaled to [0, 1], 10 classes; embedded, "
        "no download. A fixed split: 1,437 training and 360 test images.",
        1,
        8,
        10,
        embedded=True,
    ),
    _dataset("MNIST", "MNIST handwritten digits, 28x28 grey, 10 classes, from --data DIR.", 1, 28, 10),
    _dataset("FashionMNIST", "Fashion-MNIST, 28x28 grey, 10 classes, from --data DIR.", 1, 28, 10),
    _dataset(
        "CIFAR10", "CIFAR-10, 32x32 colour, 10 classes, from --data DIR (the paper's data set).", 3, 32, 10
    ),
    _dataset("CIFAR100", "CIFAR-100, 32x32 colour, 100 classes, from --data DIR.", 3, 32, 100),
    _dataset("SVHN", "Street View House Numbers, 32x32 colour, 10 classes, from --data DIR.", 3, 32, 10),
    Constructor(
        "RandomCrop",
        Category.TRANSFORM,
        TRANSFORM,
        (
            Param("size", INT, doc="Output height and width.", low=1),
            Param("padding", INT, 4, "Zero padding added before cropping.", low=0),
        ),
        "Pads the image and crops a random window of the original size (the paper used padding 4).",
        RT + "RandomCrop",
    ),
    Constructor(
        "HorizontalFlip",
        Category.TRANSFORM,
        TRANSFORM,
        (),
        "Flips the image left to right with probability 1/2.",
        RT + "HorizontalFlip",
    ),
]
