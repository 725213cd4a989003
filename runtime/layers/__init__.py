"""Layers: each class holds its concrete forward and its abstract transformers (``abstract(value, ctx)``)."""

from .activation import ReLU, relu_box, relu_deepz, relu_hybrid
from .affine import Conv2D, Flatten, Linear, Normalize
from .base import AbstractLayer, AbstractMixin
from .containers import Concat, Residual, Sequential
from .correlation import CorrelateAll, CorrelateFixed, CorrelateMax, CorrelateMaxPool
from .decorrelation import Concretize, DecorrelateAll, DecorrelateMin
from .deep_loss import DeepLoss, deep_loss
from .normalization import BatchNorm
from .pooling import AvgPool2D, MaxPool2D
from .taps import TAPS, Latent

__all__ = [
    "TAPS",
    "AbstractLayer",
    "AbstractMixin",
    "AvgPool2D",
    "BatchNorm",
    "Concat",
    "Concretize",
    "Conv2D",
    "CorrelateAll",
    "CorrelateFixed",
    "CorrelateMax",
    "CorrelateMaxPool",
    "DecorrelateAll",
    "DecorrelateMin",
    "DeepLoss",
    "Flatten",
    "Latent",
    "Linear",
    "MaxPool2D",
    "Normalize",
    "ReLU",
    "Residual",
    "Sequential",
    "deep_loss",
    "relu_box",
    "relu_deepz",
    "relu_hybrid",
]
