"""Abstract domains: a concrete point is a plain tensor; `Box`; `HybridZonotope` (paper Section 2);
`Symbolic`, the linear relaxations back-substituted by CROWN. Each abstract value is an `Element`."""

from __future__ import annotations

import torch
from torch import Tensor

from daic.runtime.domains.box import Box
from daic.runtime.domains.element import Element
from daic.runtime.domains.symbolic import Symbolic
from daic.runtime.domains.term_ids import DEAD, dropping_dead_terms, drops_dead_terms, fresh_ids
from daic.runtime.domains.zonotope import HybridZonotope

Value = Tensor | Element
"""What flows through a network: a batch of points, or a batch of one domain's elements."""


def lower_upper(value: Value) -> tuple[Tensor, Tensor]:
    """Interval concretization of any value (a point is its own lower and upper bound)."""
    if isinstance(value, Tensor):
        return value, value
    return value.bounds()


def add_values(a: Value, b: Value) -> Value:
    """The sum of two branches' values (a residual connection), terms aligned by identity."""
    if type(a) is type(b) or (isinstance(a, Tensor) and isinstance(b, Tensor)):
        return a + b
    return as_zonotope(a) + as_zonotope(b)


def cat_values(values: list[Value], dim: int = 1) -> Value:
    """Concatenation of branches' values along feature dimension ``dim`` (1 = channels in NCHW)."""
    if all(isinstance(v, Tensor) for v in values):
        return torch.cat(values, dim)  # type: ignore[arg-type]
    if all(type(v) is type(values[0]) for v in values):
        return type(values[0]).cat(values, dim)  # type: ignore[union-attr]
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
    "Element",
    "HybridZonotope",
    "Symbolic",
    "Value",
    "add_values",
    "as_zonotope",
    "cat_values",
    "dropping_dead_terms",
    "drops_dead_terms",
    "fresh_ids",
    "lower_upper",
]
