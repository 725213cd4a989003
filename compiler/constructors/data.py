"""Data sets and augmentations. Each data set states its facts (input shape C,H,W, classes, value range)
once: shape inference reads them, and the lowering hands them to the runtime's loader, which checks the
files it reads against them. A generic data set (ImageFolder) states them through its arguments."""

from __future__ import annotations

from collections.abc import Mapping

from daic.compiler.registry import Category, Constructor, DatasetFacts, Param, Shape
from daic.compiler.types import BOOL, DATASET, INT, STR, TRANSFORM, ListOf

# Where each constructor's runtime class lives.
SETS = "daic.runtime.data.sets:"
FILES = "daic.runtime.data.image_files:"
AUGMENTATIONS = "daic.runtime.data.augment:"

AUGMENT = Param("augment", ListOf(TRANSFORM), (), "Augmentations applied to training images.")
ROOT = Param("root", STR, None, "Folder holding the data set's files (the CLI's --data overrides it).")
SUBSET = Param(
    "subset", INT, None, "Use only the first N training and N/5 test images (for quick runs).", low=1
)


def _dataset(name, doc, channels, side, classes, *, embedded=False, where=SETS):
    params = (AUGMENT, SUBSET) if embedded else (AUGMENT, ROOT, SUBSET)
    facts = DatasetFacts((channels, side, side), classes)
    return Constructor(name, Category.DATASET, DATASET, params, doc, where + name, dataset=facts)


def _image_folder_facts(args: Mapping[str, object]) -> tuple[Shape, int] | None:
    """ImageFolder's (C, H, W) and classes, from its checked arguments; None where one is unknown (the
    checker reported why)."""
    size, classes, grey = args.get("size"), args.get("classes"), args.get("grey", False)
    if not (type(size) is int and type(classes) is int and type(grey) is bool):
        return None
    return (1 if grey else 3, size, size), classes


IMAGE_FOLDER = Constructor(
    "ImageFolder",
    Category.DATASET,
    DATASET,
    (
        Param(
            "path",
            STR,
            doc="Folder holding train/ and test/ (or val/), each with one folder of images per class; "
            "relative to the working directory, as --data is (which overrides it).",
            lower_as="root",
        ),
        Param("size", INT, doc="Height and width the images are resized to.", low=1),
        Param("classes", INT, doc="Number of classes: the class folders under train/.", low=1),
        Param("grey", BOOL, False, "Read the images as grey (1 channel) rather than colour (3)."),
        AUGMENT,
        SUBSET,
    ),
    "Any data set of image files, read as torchvision's ImageFolder reads them: `path/train/<class>/` and "
    "`path/test/<class>/` (or `val/`), labels in the sorted order of the training class folders. Each "
    "image is stretched to `size` x `size` (bilinear) and scaled to [0, 1]; its shape is [size, size, 3] "
    "([size, size, 1] with grey=True). The class folders found must number `classes`.",
    FILES + "ImageFolder",
    dataset=DatasetFacts((), 0, from_args=_image_folder_facts),
)


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
    _dataset(
        "TinyImageNet",
        "Tiny ImageNet, 64x64 colour, 200 classes, from --data DIR: DIR/tiny-imagenet-200/train/<wnid>/ "
        "and its val/ split as the test set, either as the certified-training code bases prepare it "
        "(val/<wnid>/) or as the download unpacks it (val/images/ with val_annotations.txt); --download "
        "fetches tiny-imagenet-200.zip (248 MB). Labels in sorted wnid order. Held in memory as float32: "
        "4.9 GB for the 100,000 training images. The images stay in [0, 1]; the network normalises them, "
        "as the CNN7 papers do with a first layer `Normalize mean=[0.4802, 0.4481, 0.3975] "
        "std=[0.2302, 0.2265, 0.2262]` (stdlib/nets/tinyimagenet_cnn7.net).",
        3,
        64,
        200,
        where=FILES,
    ),
    IMAGE_FOLDER,
    Constructor(
        "RandomCrop",
        Category.TRANSFORM,
        TRANSFORM,
        (
            Param("size", INT, doc="Output height and width.", low=1),
            Param("padding", INT, 4, "Zero padding added before cropping.", low=0),
        ),
        "Pads the image and crops a random window of the original size (the paper used padding 4).",
        AUGMENTATIONS + "RandomCrop",
    ),
    Constructor(
        "HorizontalFlip",
        Category.TRANSFORM,
        TRANSFORM,
        (),
        "Flips the image left to right with probability 1/2.",
        AUGMENTATIONS + "HorizontalFlip",
    ),
]
