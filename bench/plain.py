"""A daic network as plain `torch.nn` modules with the same weights: what the peers are handed.

auto_LiRPA traces the module it is given, so daic's own layers (its hand-written BatchNorm, its box
transformers) would be traced as arithmetic; CTRAIN wraps auto_LiRPA. Each peer gets the network as its
own examples build one: `nn.Conv2d`, `nn.Linear`, `nn.BatchNorm2d`/`1d`, `nn.ReLU`, `nn.Flatten`, a
residual sum or concatenation as a small module. Abstract layers are left out (they change how a domain
holds a set, never the network's function). A leading `Normalize` moves into the data, as the peers'
examples normalise: auto_LiRPA bounds a normalisation by (1, C, 1, 1) constants loosely, or fails on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from daic.runtime import BatchNorm, Concat, Conv2D, Flatten, Linear, Normalize, ReLU, Residual, Sequential
from daic.runtime.layers.base import AbstractLayer
from daic.runtime.layers.pooling import AvgPool2D, MaxPool2D

Shape = tuple[int, ...]


class Sum(nn.Module):
    """``branch1(x) + branch2(x)``."""

    def __init__(self, branch1: nn.Module, branch2: nn.Module) -> None:
        super().__init__()
        self.branch1, self.branch2 = branch1, branch2

    def forward(self, x: Tensor) -> Tensor:
        return self.branch1(x) + self.branch2(x)


class Cat(nn.Module):
    """``cat([branch1(x), branch2(x)], dim)``."""

    def __init__(self, branch1: nn.Module, branch2: nn.Module, dim: int) -> None:
        super().__init__()
        self.branch1, self.branch2, self.dim = branch1, branch2, dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.branch1(x), self.branch2(x)], self.dim)


def plain_network(model: nn.Module, shape: Shape) -> tuple[nn.Module, Callable[[Tensor], Tensor]]:
    """The network as plain modules (in `model`'s mode and dtype) for inputs of `shape`, and the map of its
    inputs into what the plain network takes (the leading normalisation, or the identity)."""
    layers = list(model) if isinstance(model, Sequential) else [model]
    normalise: Callable[[Tensor], Tensor] = lambda x: x  # noqa: E731
    if layers and isinstance(layers[0], Normalize):
        first = layers.pop(0)
        normalise = lambda x: first(x)  # noqa: E731
    plain, _ = _sequence(layers, shape)
    dtype = next(model.parameters()).dtype
    return plain.to(dtype).train(model.training), normalise


def _sequence(layers: list[nn.Module], shape: Shape) -> tuple[nn.Sequential, Shape]:
    modules = []
    for layer in layers:
        module, shape = _plain(layer, shape)
        modules += [] if module is None else [module]
    return nn.Sequential(*modules), shape


def _plain(layer: nn.Module, shape: Shape) -> tuple[nn.Module | None, Shape]:
    """One layer as a plain module (None for an abstract layer), and its output's shape."""
    if isinstance(layer, Sequential):
        return _sequence(list(layer), shape)
    if isinstance(layer, (Residual, Concat)):
        first, out = _sequence(list(layer.branch1), shape)
        second, other = _sequence(list(layer.branch2), shape)
        if isinstance(layer, Residual):
            return Sum(first, second), out
        dim = layer.dim
        joined = (*out[: dim - 1], out[dim - 1] + other[dim - 1], *out[dim:])
        return Cat(first, second, dim), joined
    if isinstance(layer, AbstractLayer):
        return None, shape
    module = _module(layer, shape)
    with torch.no_grad():  # the plain module, in float32 and evaluation mode, says what it makes
        out = module.float().eval()(torch.zeros(1, *shape)).shape[1:]
    return module, tuple(out)


def _module(layer: nn.Module, shape: Shape) -> nn.Module:
    if isinstance(layer, Conv2D):
        conv = nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
                         layer.padding, bias=layer.bias is not None)  # fmt: skip
        conv.load_state_dict(layer.state_dict())
        return conv
    if isinstance(layer, Linear):
        linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
        linear.load_state_dict(layer.state_dict())
        return nn.Sequential(nn.Flatten(), linear) if len(shape) > 1 else linear
    if isinstance(layer, BatchNorm):
        kind = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
        norm = kind(layer.features, eps=layer.eps, momentum=layer.momentum)
        norm.load_state_dict(layer.state_dict())
        return norm
    if isinstance(layer, ReLU):
        return nn.ReLU()
    if isinstance(layer, Flatten):
        return nn.Flatten()
    if isinstance(layer, AvgPool2D):
        return nn.AvgPool2d(layer.kernel_size, layer.stride, layer.padding)
    if isinstance(layer, MaxPool2D):
        return nn.MaxPool2d(layer.kernel_size, layer.stride, layer.padding)
    raise TypeError(f"no plain module for {type(layer).__name__}")
