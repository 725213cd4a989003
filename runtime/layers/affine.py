"""Affine layers: Normalize, Conv2D, Linear, Flatten.

An affine map ``y = W x + b`` is exact on both domains and costs two passes for a box (the center with the
bias; the radius through ``|W|`` without it) and ``m + 2`` for a hybrid zonotope (head with the bias; beta
through ``|W|``; the ``m`` terms folded into the batch, through ``W`` without the bias).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..context import AbstractContext
from ..domains import Box, HybridZonotope
from .base import AbstractMixin

AffineFn = Callable[[Tensor, bool], Tensor]
"""``fn(x, with_bias)``: the layer's affine map on a batch, with or without its constant part."""


def affine_box(x: Box, fn: AffineFn, abs_fn: Callable[[Tensor], Tensor]) -> Box:
    return Box(fn(x.center, True), abs_fn(x.radius))


def affine_hz(x: HybridZonotope, fn: AffineFn, abs_fn: Callable[[Tensor], Tensor]) -> HybridZonotope:
    head = fn(x.head, True)
    beta = abs_fn(x.beta)
    errors = x.map_errors(lambda e: fn(e, False), head.shape)
    return x.replace(head, beta, errors)


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ValueError(f"expected an int or two ints, got {v}")
    return v  # type: ignore[return-value]


class Normalize(AbstractMixin, nn.Module):
    """``(x - mean[c]) / std[c]`` per channel (dimension 1), as the paper's fixed first layer."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"Normalize: {len(mean)} means but {len(std)} stds")
        if any(s == 0 for s in std):
            raise ValueError("Normalize: std must be nonzero")
        self.register_buffer("mean", torch.tensor([float(v) for v in mean]))
        self.register_buffer("std", torch.tensor([float(v) for v in std]))

    def _per_channel(self, v: Tensor, x: Tensor) -> Tensor:
        return v.to(x.dtype).reshape(1, -1, *([1] * (x.dim() - 2)))

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        if with_bias:
            x = x - self._per_channel(self.mean, x)
        return x / self._per_channel(self.std, x)

    def _abs(self, x: Tensor) -> Tensor:
        return x / self._per_channel(self.std, x).abs()

    def forward(self, x: Tensor) -> Tensor:
        return self._affine(x, True)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, self._affine, self._abs)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        return affine_hz(x, self._affine, self._abs)

    def extra_repr(self) -> str:
        return f"mean={self.mean.tolist()}, std={self.std.tolist()}"


class Conv2D(AbstractMixin, nn.Conv2d):
    """2-D convolution, NCHW. ``filters`` is the number of output channels (the listings' name)."""

    def __init__(
        self,
        in_channels: int,
        filters: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        bias: bool = True,
    ) -> None:
        super().__init__(
            in_channels, filters, _pair(kernel_size), stride=_pair(stride), padding=_pair(padding), bias=bias
        )

    def forward(self, x: Tensor) -> Tensor:
        return self._affine(x, True)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return F.conv2d(x, self.weight, self.bias if with_bias else None, self.stride, self.padding)

    def _abs(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight.abs(), None, self.stride, self.padding)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, self._affine, self._abs)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        return affine_hz(x, self._affine, self._abs)


class Linear(AbstractMixin, nn.Linear):
    """Fully connected layer; flattens its input's feature dimensions (``out``: the listings' name)."""

    def __init__(self, in_features: int, out: int, bias: bool = True) -> None:
        super().__init__(in_features, out, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x.flatten(1), self.weight, self.bias)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return F.linear(x.flatten(1), self.weight, self.bias if with_bias else None)

    def _abs(self, x: Tensor) -> Tensor:
        return F.linear(x.flatten(1), self.weight.abs())

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return affine_box(x, self._affine, self._abs)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if x.onehot is None:
            return affine_hz(x, self._affine, self._abs)
        # Terms with a single nonzero coefficient (fresh from a correlation layer): the image of
        # value * e_i is value * W[:, i], a gathered column, instead of a full product per term.
        head = self._affine(x.head, True)
        beta = self._abs(x.beta)
        dense = x.dense_errors
        b = x.batch
        dense = F.linear(dense.reshape(dense.shape[0], b, self.in_features), self.weight)
        positions, values = x.onehot
        k = positions.shape[0]
        # index_select along the weight's own layout: its gradient is an index_add into a tensor shaped
        # like the weight (gathering from weight.t() made the accumulation a transposed copy).
        columns = self.weight.index_select(1, positions.reshape(-1))  # (out, k * B)
        gathered = columns.t().reshape(k, b, -1) * values.unsqueeze(-1)  # (k, B, out)
        return x.replace(head, beta, torch.cat([dense, gathered], dim=0))


class Flatten(AbstractMixin, nn.Module):
    """Flattens every dimension but the batch."""

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return x.flatten(1)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return Box(x.center.flatten(1), x.radius.flatten(1))

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        # Pending one-hot terms index the flattened neurons already, so they stay pending.
        return x.replace(x.head.flatten(1), x.beta.flatten(1), x.dense_errors.flatten(2), x.onehot)
