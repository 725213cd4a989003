"""Outward rounding: bounds that hold in exact arithmetic although every operation rounds to nearest.

Within `outward_rounding()` (what certification runs in), every domain widens what it computes by a bound
of the rounding errors made computing it, so that a certificate holds for the network computed exactly.
The bounds follow the standard model of floating point: an operation's result is the exact one times
``1 + d``, ``|d| <= u`` (``u`` the unit roundoff, 2^-53 in float64); a dot product of ``n`` terms computed
in any order is within ``gamma(n) = n u / (1 - n u)`` of the exact one, relative to the sum of the terms'
magnitudes; and products that underflow lose less than the smallest subnormal each, which the bounds
overestimate by the smallest normal number (slack kept normal: arithmetic on subnormals is a hundred times
slower on the CPU, and a radius of exactly 0 plus a subnormal would make every later operation pay it).

Layers describe their arithmetic by a `Rounding`: how many products each output sums (forward, and in
back-substitution each input coefficient), and how the magnitudes grow through the layer (each output's
sum of |weights|, and its constant). The domains turn that into a widening:

- a box's radius grows by ``gamma(n + 1) (gain M + |b|)`` and the layer's elementwise rounding, ``M`` the
  largest magnitude of the input element (``|centre| + radius``);
- a hybrid zonotope's uncorrelated ``beta`` grows alike, ``M`` a running bound of its magnitude;
- back-substitution carries, for every row, a bound of the l1 error of its coefficients, which grows by the
  layer's largest gain and by ``gamma(n)`` of the row's l1 norm, and subtracts from the bound what the
  errors can cost over the input box.

Widening by these bounds is what ERAN's sound floating-point domains do; the costs are a few passes over
each layer's neurons (not over its terms or rows), and for back-substitution one l1 norm per layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

_state = threading.local()


@contextmanager
def outward_rounding(on: bool = True) -> Iterator[None]:
    """Within it, bounds are widened by their rounding errors (see the module docstring); with
    ``on=False``, they are not (for floating-point work whose result is checked afterwards)."""
    before = getattr(_state, "on", False)
    _state.on = on
    try:
        yield
    finally:
        _state.on = before


def rounds_outward() -> bool:
    return getattr(_state, "on", False)


def rounded(before: Any, layer: Any, out: Any) -> Any:
    """`out`, which `layer` made from the value `before` (a `Box` or `HybridZonotope`), widened by the
    layer's rounding errors when rounding outward (as it is otherwise, or when the layer changed the kind
    of value). A layer that only moves values (`rounding()` is None) keeps the running magnitude."""
    if not rounds_outward() or type(out) is not type(before):
        return out
    rounding = layer.rounding(before)
    if rounding is None:
        out._magnitude = before._magnitude
        return out
    return out.widened(rounding, before.magnitude())


def unit(dtype: torch.dtype) -> float:
    """The unit roundoff ``u`` of `dtype` (half its machine epsilon)."""
    return torch.finfo(dtype).eps / 2


def gamma(n: int, dtype: torch.dtype) -> float:
    """``k u / (1 - k u)`` with ``k = n + 1``: the relative error bound of a sum of ``n`` products, with one
    more term's room. The room pays for the slack's own arithmetic: the magnitudes it multiplies are sums
    of up to ``n`` terms computed in floating point (``gamma(n) (1 + gamma(n)) <= gamma(n + 1)`` while
    ``n < 10^7``), and the few roundings of the slack itself are relative errors of ``u`` each, far
    below the room of ``1 / (n + 1)`` of it."""
    u = unit(dtype)
    k = n + 1
    if k * u >= 0.5:
        raise ArithmeticError(f"a sum of {n} terms is too long to bound its rounding in {dtype}")
    return k * u / (1 - k * u)


def underflow(n: int, dtype: torch.dtype) -> float:
    """A bound of what ``n`` products that underflow can lose together (the smallest normal each, far more
    than the smallest subnormal they can lose: see the module docstring)."""
    return (n + 1) * torch.finfo(dtype).tiny


def down(x: Tensor) -> Tensor:
    """A float below the exact value of the single operation that gave `x` (one rounding to nearest)."""
    return x - (x.abs() * (2 * unit(x.dtype)) + underflow(0, x.dtype))


def up(x: Tensor) -> Tensor:
    """A float above the exact value of the single operation that gave `x`."""
    return x + (x.abs() * (2 * unit(x.dtype)) + underflow(0, x.dtype))


def enclosing_radius(center: Tensor, lower: Tensor, upper: Tensor) -> Tensor:
    """A radius with ``center +- radius`` (exactly) containing ``[lower, upper]``: the larger distance,
    rounded up."""
    return up(torch.maximum(upper - center, center - lower))


@dataclass(frozen=True)
class Rounding:
    """A layer's arithmetic, for bounding its rounding errors (see the module docstring).

    ``terms``: products summed into each output (0: elementwise, one rounding each). ``back_terms``:
    products summed into each coefficient of the layer's input in back-substitution. ``gain``: each
    output's sum of |weights| (a tensor broadcastable to the output's features, or a number);
    ``constant``: each output's |constant| (likewise). ``back_constant``: the largest |constant| that
    back-substitution multiplies the rows by, when it is not ``constant`` (a ReLU's upper intercepts),
    computed only when asked for: forward passes never need it.
    """

    terms: int = 0
    back_terms: int = 0
    gain: Tensor | float = 1.0
    constant: Tensor | float = 0.0
    back_constant: Callable[[], Tensor | float] | None = None

    def largest_gain(self) -> float:
        return _largest(self.gain)

    def largest_constant(self) -> float:
        return _largest(self.constant)

    def largest_back_constant(self) -> float:
        return self.largest_constant() if self.back_constant is None else _largest(self.back_constant())


def _largest(value: Tensor | float) -> float:
    return float(value.detach().max()) if isinstance(value, Tensor) else float(value)


EXACT = Rounding()
"""Elementwise arithmetic: one rounding per output."""
