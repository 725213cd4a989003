"""Layers: each class holds its concrete forward and its abstract transformers (``abstract(value, ctx)``)."""

from daic.runtime.layers.activation import Activation, Lines, ReLU, relu_box, relu_deepz, relu_hybrid
from daic.runtime.layers.activations import Abs, HardTanh, LeakyReLU, Sigmoid, Tanh
from daic.runtime.layers.affine import Conv2D, Flatten, Linear, Normalize
from daic.runtime.layers.base import AbstractLayer, AbstractMixin, Pass, trace
from daic.runtime.layers.containers import Concat, Residual, Sequential
from daic.runtime.layers.correlation import CorrelateAll, CorrelateFixed, CorrelateMax, CorrelateMaxPool
from daic.runtime.layers.decorrelation import Concretize, DecorrelateAll, DecorrelateMin
from daic.runtime.layers.deep_loss import DeepLoss, deep_loss
from daic.runtime.layers.normalization import BatchNorm
from daic.runtime.layers.pooling import AvgPool2D, MaxPool2D
from daic.runtime.layers.regroup import Regroup
from daic.runtime.layers.taps import TAPS, Latent

__all__ = [
    "TAPS",
    "Abs",
    "AbstractLayer",
    "AbstractMixin",
    "Activation",
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
    "HardTanh",
    "Latent",
    "LeakyReLU",
    "Linear",
    "Lines",
    "MaxPool2D",
    "Normalize",
    "Pass",
    "ReLU",
    "Regroup",
    "Residual",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "deep_loss",
    "relu_box",
    "relu_deepz",
    "relu_hybrid",
    "trace",
]
