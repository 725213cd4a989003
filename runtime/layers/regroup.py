"""Regroup: the features put in another order or shape (a vector into an image, NHWC into NCHW, and back),
a fixed permutation that every domain follows exactly.

The input's values, in the order daic holds them (channels, rows, columns; or a vector), are read as an
array of the dimensions `view`, their axes put in the order `axes`, and the result read again as the
output's shape. Output value ``k`` is input value ``index[k]``; nothing is computed, so no rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope
from daic.runtime.domains.coeffs import Dense
from daic.runtime.layers.base import AbstractMixin

if TYPE_CHECKING:
    from daic.runtime.domains.coeffs import Coeffs
    from daic.runtime.domains.symbolic import Backward, Symbolic


class Regroup(AbstractMixin, nn.Module):
    """``shape``: the output as the listings write it ([H, W, C] or [features]); ``view``/``axes``: see
    the module docstring (default: the input's own shape, axes in order); ``in_shape``: the input's
    (C, H, W) or (N,), which the lowering passes."""

    def __init__(
        self,
        shape: Sequence[int],
        view: Sequence[int] | None = None,
        axes: Sequence[int] | None = None,
        in_shape: Sequence[int] = (),
    ) -> None:
        super().__init__()
        shape = [int(s) for s in shape]
        self.out_shape = (shape[2], shape[0], shape[1]) if len(shape) == 3 else tuple(shape)
        self.in_shape = tuple(int(s) for s in in_shape)
        self.view = tuple(int(v) for v in view) if view else self.in_shape
        self.axes = tuple(int(a) for a in axes) if axes else tuple(range(len(self.view)))
        if math.prod(self.view) != math.prod(self.in_shape) or math.prod(self.out_shape) != math.prod(
            self.view
        ):
            raise ValueError(
                f"Regroup: {self.in_shape} -> view {self.view} -> {self.out_shape} changes the count"
            )
        # CPU: the permutation is made on the host with the module, and moves with it (buffers)
        index = torch.arange(math.prod(self.in_shape)).reshape(self.view).permute(self.axes).reshape(-1)
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("inverse", torch.argsort(index), persistent=False)

    def _moved(self, x: Tensor, lead: int = 1) -> Tensor:
        """`x`, whose first `lead` dimensions are batch-like, regrouped."""
        before = x.shape[:lead]
        moved = x.reshape(*before, *self.view).permute(*range(lead), *(lead + a for a in self.axes))
        return moved.reshape(*before, *self.out_shape)

    def forward(self, x: Tensor) -> Tensor:
        return self._moved(x)

    def _affine(self, x: Tensor, with_bias: bool) -> Tensor:
        return self._moved(x)

    def rounding(self, x) -> None:
        return None

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return Box(self._moved(x.center), self._moved(x.radius))

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        errors = self._moved(x.dense_errors, 2)
        onehot = x.onehot
        if onehot is not None:  # a pending term on input value j sits at output value inverse[j]
            onehot = (self.inverse[onehot[0]], onehot[1])
        return x.replace(self._moved(x.head), self._moved(x.beta), errors, onehot)

    def back_symbolic(self, coeffs: Coeffs, node: Symbolic, how: Backward) -> tuple[Coeffs, None]:
        dense = coeffs if isinstance(coeffs, Dense) else coeffs.to_dense()
        return dense.taken(self.inverse, self.in_shape), None
