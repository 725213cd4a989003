"""Abstract domains: a concrete point is a plain tensor; `Box`; `HybridZonotope` (paper Section 2)."""

from __future__ import annotations

import torch
from torch import Tensor

from .box import Box
from .term_ids import DEAD, dropping_dead_terms, drops_dead_terms, fresh_ids
from .zonotope import HybridZonotope

Value = Tensor | Box | HybridZonotope
"""What flows through a network: a batch of points, a batch of boxes or a batch of hybrid zonotopes."""


def lower_upper(value: Value) -> tuple[Tensor, Tensor]:
    """Interval concretization of any value (a point is its own lower and upper bound)."""
    if isinstance(value, Tensor):
        return value, value
    return value.bounds()


def add_values(a: Value, b: Value) -> Value:
    """The sum of two branches' values (a residual connection), terms aligned by identity."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a + b
    if isinstance(a, Box) and isinstance(b, Box):
        return a + b
    return as_zonotope(a) + as_zonotope(b)


def cat_values(values: list[Value], dim: int = 1) -> Value:
    """Concatenation of branches' values along feature dimension ``dim`` (1 = channels in NCHW)."""
    if all(isinstance(v, Tensor) for v in values):
        return torch.cat(values, dim)  # type: ignore[arg-type]
    if all(isinstance(v, Box) for v in values):
        return Box.cat(values, dim)  # type: ignore[arg-type]
    return HybridZonotope.cat([as_zonotope(v) for v in values], dim)


def as_zonotope(value: Value) -> HybridZonotope:
    if isinstance(value, HybridZonotope):
        return value
    if isinstance(value, Box):
        return HybridZonotope.from_box(value)
    if isinstance(value, Tensor):
        return HybridZonotope(value)
    raise TypeError(f"not a domain value: {type(value).__name__}")


__all__ = [
    "DEAD",
    "Box",
    "HybridZonotope",
    "Value",
    "add_values",
    "as_zonotope",
    "cat_values",
    "dropping_dead_terms",
    "drops_dead_terms",
    "fresh_ids",
    "lower_upper",
]
