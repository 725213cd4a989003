"""The Box (interval) domain: a center and a non-negative radius per neuron, batch first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .element import Element, at_target

if TYPE_CHECKING:
    from ..context import AbstractContext


class Box(Element):
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

    def through(self, layer: Any, ctx: AbstractContext) -> Element:
        return layer.abstract_box(self, ctx)

    def centre(self) -> Tensor:
        return self.center

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        flat = coeffs.flatten(2)
        low = torch.bmm(flat, self.center.flatten(1).unsqueeze(2)).squeeze(2)
        low = low - torch.bmm(flat.abs(), self.radius.flatten(1).unsqueeze(2)).squeeze(2)
        return low if bias is None else low + bias

    def margin_upper(self, target: Tensor) -> Tensor:
        if self.center.dim() != 2:
            raise ValueError(f"network outputs must be (batch, classes), got {tuple(self.shape)}")
        c, r = self.center, self.radius
        upper = c - at_target(c, target) + r + at_target(r, target)
        return upper.scatter(1, target[:, None], 0.0)

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
