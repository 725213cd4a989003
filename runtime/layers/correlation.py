"""Correlation layers (paper Section 3.1): move uncorrelated error into new correlated terms.

Each chooses a set ``P`` of neurons (flat indices per sample) and calls `HybridZonotope.correlate`, which
creates one term per ``i`` in ``P`` holding ``h_B,i`` at neuron ``i`` (term ``t = |P_<i|``) and zeroes
``h_B,i``. The concretization does not change. Boxes and points pass through unchanged (a box has no place
for correlated terms). ``k`` larger than the layer is clamped to its size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from daic.runtime.context import AbstractContext
from daic.runtime.domains import HybridZonotope
from daic.runtime.layers.base import AbstractLayer


class CorrelateAll(AbstractLayer):
    """``P`` = every neuron: ``p`` new terms."""

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        n = x.numel
        positions = torch.arange(n, device=x.device)[:, None].expand(n, x.batch)
        return x.correlate(positions)


class CorrelateFixed(AbstractLayer):
    """``P = {floor(i * p / k) | 0 <= i < k}``: ``k`` neurons spread evenly over the flattened layer."""

    def __init__(self, k: int, only_train: bool = False) -> None:
        super().__init__(only_train)
        if k < 0:
            raise ValueError(f"CorrelateFixed: k must be >= 0, got {k}")
        self.k = int(k)

    @staticmethod
    def positions(k: int, p: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The index set for ``k`` terms over ``p`` neurons, ascending (``k`` clamped to ``p``)."""
        k = min(k, p)
        # Made on the value's device: a host-to-device copy would wait for the device's queue.
        return torch.div(torch.arange(k, dtype=torch.int64, device=device) * p, k, rounding_mode="floor")

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        pos = self.positions(self.k, x.numel, x.device)
        return x.correlate(pos[:, None].expand(pos.shape[0], x.batch))

    def extra_repr(self) -> str:
        return f"k={self.k}, only_train={self.only_train}"


class CorrelateMax(AbstractLayer):
    """``P`` = the ``k`` neurons with the largest interval upper bound, chosen per sample."""

    def __init__(self, k: int, only_train: bool = False) -> None:
        super().__init__(only_train)
        if k < 0:
            raise ValueError(f"CorrelateMax: k must be >= 0, got {k}")
        self.k = int(k)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        k = min(self.k, x.numel)
        if k == 0:
            return x
        upper = x.upper().reshape(x.batch, -1)
        chosen = upper.topk(k, dim=1).indices.sort(dim=1).values  # (B, k), ascending index
        return x.correlate(chosen.T)

    def extra_repr(self) -> str:
        return f"k={self.k}, only_train={self.only_train}"


class CorrelateMaxPool(AbstractLayer):
    """``P`` = the neurons that are the maximum of some max-pooling window of ``f``.

    ``f`` is the head if ``first_layer`` (the layer is applied to the input, whose beta is the same
    everywhere) and beta otherwise. A 2-element ``kernel_size`` pools each channel's (H, W) map; a 3-element
    one ``(c, h, w)`` pools the (C, H, W) volume. The layer makes one term slot per window (a static
    number): when overlapping windows share their maximum, the repeated slot stays empty (all zeros).
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        first_layer: bool = False,
        only_train: bool = False,
    ) -> None:
        super().__init__(only_train)
        kernel = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if len(kernel) not in (2, 3):
            raise ValueError(f"CorrelateMaxPool: kernel_size must have 2 or 3 entries, got {kernel}")
        if stride is None:
            stride = kernel
        stride = (stride,) * len(kernel) if isinstance(stride, int) else tuple(stride)
        if len(stride) != len(kernel):
            raise ValueError(f"CorrelateMaxPool: stride {stride} does not match kernel {kernel}")
        self.kernel_size = tuple(int(v) for v in kernel)
        self.stride = tuple(int(v) for v in stride)
        self.first_layer = bool(first_layer)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if x.head.dim() != 4:
            raise ValueError(f"CorrelateMaxPool needs (B, C, H, W) values, got {tuple(x.shape)}")
        b, c, h, w = x.shape
        f = x.head if self.first_layer else x.beta
        if len(self.kernel_size) == 2:
            _, idx = F.max_pool2d(f, self.kernel_size, self.stride, return_indices=True)
            # max_pool2d's indices are flat within one channel's map.
            channel = torch.arange(c, device=x.device).reshape(1, c, 1, 1) * (h * w)
            positions = (idx + channel).reshape(b, -1)
        else:
            _, idx = F.max_pool3d(f.unsqueeze(1), self.kernel_size, self.stride, return_indices=True)
            positions = idx.reshape(b, -1)
        if positions.shape[1] == 0:
            return x
        positions = positions.sort(dim=1).values
        first = torch.ones_like(positions, dtype=torch.bool)
        first[:, 1:] = positions[:, 1:] != positions[:, :-1]
        return x.correlate(positions.T, live=first.T)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, first_layer={self.first_layer}, "
            f"only_train={self.only_train}"
        )
