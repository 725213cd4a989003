"""The Box (interval) domain: a center and a non-negative radius per neuron, batch first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from daic.runtime.domains.element import Element, at_target
from daic.runtime.domains.rounding import (
    Rounding,
    enclosing_radius,
    gamma,
    rounded,
    rounds_outward,
    underflow,
    unit,
)
from daic.runtime.domains.rounding import down as round_down
from daic.runtime.domains.rounding import up as round_up

if TYPE_CHECKING:
    from daic.runtime.context import AbstractContext


class Box(Element):
    """The set ``{center + radius * b | b in [-1, 1]^shape}``; ``center`` and ``radius`` are ``(B, *F)``."""

    __slots__ = ("_magnitude", "center", "radius")

    def __init__(self, center: Tensor, radius: Tensor) -> None:
        if center.shape != radius.shape:
            raise ValueError(f"Box: center {tuple(center.shape)} and radius {tuple(radius.shape)} differ")
        self.center = center
        self.radius = radius
        self._magnitude: Tensor | None = None  # outward rounding's running bound (see `magnitude`)

    @classmethod
    def from_bounds(cls, lower: Tensor, upper: Tensor) -> Box:
        center = (upper + lower) / 2
        if rounds_outward():
            return cls(center, enclosing_radius(center, lower, upper))
        return cls(center, (upper - lower) / 2)

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
        low = self.center - self.radius
        return round_down(low) if rounds_outward() else low

    def upper(self) -> Tensor:
        high = self.center + self.radius
        return round_up(high) if rounds_outward() else high

    def bounds(self) -> tuple[Tensor, Tensor]:
        return self.lower(), self.upper()

    def through(self, layer: Any, ctx: AbstractContext) -> Element:
        return rounded(self, layer, layer.abstract_box(self, ctx))

    def magnitude(self) -> Tensor:
        """``(B,)``: a bound of the largest ``|centre| + radius`` of each element (kept from `widened`,
        else computed)."""
        if self._magnitude is None:
            self._magnitude = round_up((self.center.abs() + self.radius).flatten(1).amax(1))
        return self._magnitude

    def widened(self, rounding: Rounding, magnitude: Tensor) -> Box:
        """The box with its radius grown by the rounding errors of the layer that made it, from an input
        of the given magnitude (see `rounding`): the layer's sums' ``gamma(n) (gain M + |b|)``, and 4u of
        ``|centre| + radius`` for its elementwise roundings. The factors 6u and ``1 + 4u`` (rather than 4u
        and 1) cover the roundings of this very sum of non-negative terms, so no pass rounds it up after."""
        dtype, u = self.dtype, unit(self.dtype)
        m = magnitude.view(-1, *[1] * (self.center.dim() - 1))
        slack = gamma(rounding.terms, dtype) * (rounding.gain * m + rounding.constant) + underflow(
            rounding.terms, dtype
        )
        if rounding.terms == 0:
            # Elementwise (ReLU, max pooling): each output's |centre| + radius is at most gain M + |b| (what
            # gain and constant mean), a few roundings aside; that bound stands in for the elements' own,
            # which saves the passes that find them.
            bound = (rounding.largest_gain() * magnitude + rounding.largest_constant()) * (1 + 8 * u)
            reach = bound + underflow(0, dtype)
            extra = reach.view_as(m) * (6 * u) + slack * (1 + 4 * u) + underflow(0, dtype)
            radius = torch.add(extra, self.radius, alpha=1 + 4 * u)
        else:
            size = self.center.abs().add_(self.radius)
            reach = size.flatten(1).amax(1)
            radius = (
                size.mul_(6 * u)
                .add_(self.radius, alpha=1 + 4 * u)
                .add_(slack * (1 + 4 * u) + underflow(0, dtype))
            )
        out = Box(self.center, radius)
        out._magnitude = round_up((reach + slack.flatten(1).amax(1)) * (1 + 12 * u))
        return out

    def centre(self) -> Tensor:
        return self.center

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        flat = coeffs.flatten(2)
        low = torch.bmm(flat, self.center.flatten(1).unsqueeze(2)).squeeze(2)
        low = low - torch.bmm(flat.abs(), self.radius.flatten(1).unsqueeze(2)).squeeze(2)
        if rounds_outward():
            size = (self.center.abs() + self.radius).flatten(1).unsqueeze(2)
            error = gamma(flat.shape[2] + 1, self.dtype) * torch.bmm(flat.abs(), size).squeeze(2)
            low = round_down(low - round_up(error + underflow(flat.shape[2], self.dtype)))
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
        total = Box(self.center + other.center, self.radius + other.radius)
        if rounds_outward():  # elementwise: each sum's |centre| + radius is at most the two magnitudes'
            total = total.widened(Rounding(), self.magnitude() + other.magnitude())
        return total

    @staticmethod
    def cat(values: Sequence[Box], dim: int = 1) -> Box:
        """Concatenates along feature dimension ``dim`` (batch is dimension 0, as for tensors)."""
        return Box(torch.cat([v.center for v in values], dim), torch.cat([v.radius for v in values], dim))

    def __repr__(self) -> str:
        return f"Box(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"
