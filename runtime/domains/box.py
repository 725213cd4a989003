"""The Box (interval) domain: a center and a non-negative radius per neuron, batch first."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class Box:
    """The set ``{center + radius * b | b in [-1, 1]^shape}``; ``center`` and ``radius`` are ``(B, *F)``."""

    __slots__ = ("center", "radius")

    def __init__(self, center: Tensor, radius: Tensor) -> None:
        if center.shape != radius.shape:
            raise ValueError(f"Box: center {tuple(center.shape)} and radius {tuple(radius.shape)} differ")
        self.center = center
        self.radius = radius

    @classmethod
    def from_bounds(cls, lower: Tensor, upper: Tensor) -> Box:
        return cls((upper + lower) / 2, (upper - lower) / 2)

    @property
    def shape(self) -> torch.Size:
        return self.center.shape

    @property
    def batch(self) -> int:
        return self.center.shape[0]

    @property
    def device(self) -> torch.device:
        return self.center.device

    @property
    def dtype(self) -> torch.dtype:
        return self.center.dtype

    def lower(self) -> Tensor:
        return self.center - self.radius

    def upper(self) -> Tensor:
        return self.center + self.radius

    def bounds(self) -> tuple[Tensor, Tensor]:
        return self.lower(), self.upper()

    def __add__(self, other: Box) -> Box:
        if not isinstance(other, Box):
            return NotImplemented
        return Box(self.center + other.center, self.radius + other.radius)

    @staticmethod
    def cat(values: Sequence[Box], dim: int = 1) -> Box:
        """Concatenates along feature dimension ``dim`` (batch is dimension 0, as for tensors)."""
        return Box(torch.cat([v.center for v in values], dim), torch.cat([v.radius for v in values], dim))

    def __repr__(self) -> str:
        return f"Box(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"
