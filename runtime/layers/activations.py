"""The activation family's members beside ReLU: each declares its function, its interval image and its linear
relaxation (`activation.Activation`), and every domain, alpha-CROWN and branch and bound follow from them.

The relaxations' lines hold in exact arithmetic for the floats they are given as: their slopes may be any
floats, and each intercept is moved out by a bound of what the rounding of the values it was computed from
can cost (`_room`), so that a certificate stays a proof of the network computed exactly."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime.domains.coeffs import Dense
from daic.runtime.domains.rounding import Rounding, rounds_outward, unit
from daic.runtime.layers.activation import Activation, Lines


def _room(*magnitudes: Tensor) -> Tensor | float:
    """What the rounding of a line's intercept, computed from values of these magnitudes (each within a
    few units in the last place of exact), can cost: generously 16 units of their sum, and the smallest
    normal for underflow. Zero when not rounding outward."""
    if not rounds_outward():
        return 0.0
    total = sum(m.abs() for m in magnitudes)
    return 16 * unit(total.dtype) * total + torch.finfo(total.dtype).tiny


class LeakyReLU(Activation):
    """``x`` for ``x >= 0``, ``negative_slope * x`` below (a slope in [0, 1)). Piecewise linear: its split
    at zero makes it exact, and alpha-CROWN optimises its lower lines through the origin, of slopes in
    ``[negative_slope, 1]``."""

    splittable = True
    lower_through_origin = True

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        if not 0.0 <= negative_slope < 1.0:
            raise ValueError(f"LeakyReLU: negative_slope is in [0, 1), not {negative_slope}")
        self.negative_slope = float(negative_slope)
        self.slopes = (self.negative_slope, 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def relaxation(self, lower: Tensor, upper: Tensor) -> Lines:
        a, one = torch.full_like(lower, self.negative_slope), torch.ones_like(lower)
        low, high = self(lower), self(upper)
        crossing = (lower < 0) & (upper > 0)
        width = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        chord = torch.where(crossing, (high - low) / width, torch.where(upper <= 0, a, one))
        # The chord lies above the (convex) function: its intercept at the ends, the larger, moved out.
        ub = torch.maximum(high - chord * upper, low - chord * lower) + _room(high, chord * upper, low)
        ub = torch.where(crossing, ub, torch.zeros_like(ub))
        # Below: slope 1 or a through the origin, the one of smaller area (as CROWN's ReLU).
        ls = torch.where(crossing, torch.where(upper > -lower, one, a), chord)
        return Lines(ls, torch.zeros_like(ls), chord, ub, ~crossing)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope:g}"


class Abs(Activation):
    """``|x|``. Piecewise linear: its split at zero makes it exact; below, alpha-CROWN optimises lines
    through the origin of slopes in [-1, 1]."""

    splittable = True
    slopes = (-1.0, 1.0)
    lower_through_origin = True

    def forward(self, x: Tensor) -> Tensor:
        return x.abs()

    def interval(self, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        crossing = (lower < 0) & (upper > 0)
        low = torch.where(crossing, torch.zeros_like(lower), torch.minimum(lower.abs(), upper.abs()))
        return low, torch.maximum(lower.abs(), upper.abs())

    def relaxation(self, lower: Tensor, upper: Tensor) -> Lines:
        crossing = (lower < 0) & (upper > 0)
        one = torch.ones_like(lower)
        sign = torch.where(upper <= 0, -one, one)
        width = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        chord = torch.where(crossing, (upper + lower) / width, sign)
        # The chord from (l, -l) to (u, u) lies above |x| on [l, u]: its intercept at the ends, moved out.
        ub = torch.maximum(upper - chord * upper, -lower - chord * lower) + _room(upper, lower, chord * upper)
        ub = torch.where(crossing, ub, torch.zeros_like(ub))
        ls = torch.where(crossing, torch.where(upper > -lower, one, -one), sign)
        return Lines(ls, torch.zeros_like(ls), chord, ub, ~crossing)


class HardTanh(Activation):
    """``x`` clipped to [-1, 1]. Piecewise linear with two corners: branch and bound does not split it, and
    cuts its subdomains' input boxes instead (on a box where every neuron keeps to one piece, the network is
    affine and CROWN exact)."""

    bounded_output = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x)

    def interval(self, lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
        return self(lower), self(upper)  # monotone and exact: clipping rounds nothing

    def relaxation(self, lower: Tensor, upper: Tensor) -> Lines:
        one, zero = torch.ones_like(lower), torch.zeros_like(lower)
        low, high = self(lower), self(upper)
        flat = (upper <= -1) | (lower >= 1)
        inside = (lower >= -1) & (upper <= 1)
        exact = flat | inside
        width = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        chord = (high - low) / width
        room = _room(high, low, chord * upper, chord * lower)
        # Crossing only -1 (convex there): the chord above, below slope 1 or 0 (the smaller area); crossing
        # only 1 (concave): the chord below, above slope 1 or 0; crossing both: the constants -1 and 1.
        low_corner = (lower < -1) & (upper > -1) & (upper <= 1)
        high_corner = (lower >= -1) & (lower < 1) & (upper > 1)
        chord_up = torch.maximum(high - chord * upper, low - chord * lower) + room
        chord_down = torch.minimum(high - chord * upper, low - chord * lower) - room
        steep_low = (upper + 1) > (-1 - lower)  # slope 1 below has the smaller area
        steep_high = (1 - lower) > (upper - 1)
        ls = torch.where(inside, one, zero)
        lb = torch.where(lower >= 1, one, -one)
        lb = torch.where(inside, zero, lb)
        us, ub = ls.clone(), torch.where(upper <= -1, -one, one)
        ub = torch.where(inside, zero, ub)
        ls = torch.where(low_corner & steep_low, one, ls)
        lb = torch.where(low_corner & steep_low, zero, lb)
        us = torch.where(low_corner, chord, us)
        ub = torch.where(low_corner, chord_up, ub)
        ls = torch.where(high_corner, chord, ls)
        lb = torch.where(high_corner, chord_down, lb)
        us = torch.where(high_corner & steep_high, one, us)
        ub = torch.where(high_corner & steep_high, zero, ub)
        return Lines(ls, lb, us, ub, exact)


class _Sigmoidal(Activation):
    """An S-shaped activation (increasing, convex below zero and concave above, its derivative largest at
    zero): the chord on the convex or concave side and the tangent at the middle on the other (CROWN's);
    across zero, the parallel lines of the least slope at the ends (DeepZ's; the function minus such a line
    is nondecreasing). Smooth: branch and bound splits it at zero (each side then convex or concave, relaxed
    by a chord and a tangent) and cuts its subdomains' input boxes, its leaves' and wherever the halves bound
    better than a split: the lines approach the function as the boxes shrink.

    alpha-CROWN optimises where the tangent touches, per row and neuron (a fraction of the way from the
    lower bound to the upper; CROWN's is the middle): any tangent of a convex piece lies below it, and of a
    concave piece above, so every fraction gives sound lines."""

    bounded_output = 1.0
    splittable = True
    piecewise_linear = False

    def derivative(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    @property
    def initial_slopes(self):
        """alpha-CROWN's parameters here are tangent points, a fraction of each interval: the middle."""
        return lambda node: torch.full_like(node.parents[0].bounds()[0], 0.5)

    def back_symbolic(self, coeffs, node, how):
        lower, upper = node.parents[0].bounds()
        fraction = how.lower_slope(node, coeffs, self.initial_slopes(node))
        if fraction is None:  # CROWN's lines (the tangents at the middle), per neuron
            return super().back_symbolic(coeffs, node, how)
        # Used within [0, 1] whatever the optimiser left, the gradient passed straight through.
        fraction = fraction + (fraction.clamp(0, 1) - fraction).detach()
        lines = self.relaxation(coeffs.per_row(lower), coeffs.per_row(upper), fraction)
        moved, constant = coeffs.relaxed_per_row(lines.ls, lines.lb, lines.us, lines.ub)
        split = how.split_term(node)
        if split is not None:  # beta-CROWN's split constraints, as the family's
            moved = moved + Dense(split)
        return moved, constant

    def rounding(self, x) -> Rounding:
        """The family's, with the constants of a tangent anywhere in the interval allowed for: a tangent's
        intercept ``f(t) - f'(t) t`` is within ``1 + max |x f'(x)|``, below 1.5 for both members (``x f'(x)``
        peaks at 0.224 for Sigmoid, 0.448 for Tanh), whatever the interval; its room adds a few units of
        the interval's reach."""
        family = super().rounding(x)

        def intercepts() -> float:
            lower, upper = x.bounds()
            reach = float(torch.maximum(lower.abs(), upper.abs()).max().detach())
            return max(family.largest_back_constant(), 1.5 + 64 * unit(lower.dtype) * (3 + 2 * reach))

        return Rounding(constant=family.constant, back_constant=intercepts)

    def relaxation(self, lower: Tensor, upper: Tensor, fraction: Tensor | None = None) -> Lines:
        """The lines on ``[lower, upper]``, the tangent at ``fraction`` of the interval (None: the middle)."""
        low, high = self(lower), self(upper)
        width = (upper - lower).clamp(min=torch.finfo(lower.dtype).tiny)
        chord = torch.where(upper > lower, (high - low) / width, self.derivative(lower))
        middle = (lower + upper) / 2 if fraction is None else lower + fraction * (upper - lower)
        middle = torch.minimum(torch.maximum(middle, lower), upper)  # inside, whatever the rounding
        tangent = self.derivative(middle)
        at_middle = self(middle)
        # Values of a bounded function err by a few units of its bound, its derivative too (1 - tanh^2
        # cancels): every room has an absolute part as well as its relative one.
        one = torch.ones_like(lower)
        span = _room(width * tangent, width)
        chord_room = _room(high, low, chord * upper, chord * lower, one)
        tangent_room = _room(at_middle, tangent * middle, one) + span
        # Chord intercepts: the larger of the two ends' (above a convex piece), the smaller (below concave).
        chord_up = torch.maximum(high - chord * upper, low - chord * lower) + chord_room
        chord_down = torch.minimum(high - chord * upper, low - chord * lower) - chord_room
        tangent_line = at_middle - tangent * middle
        # Across zero: slope a little below the least derivative at the ends, so that it stays below the
        # exact derivative everywhere on the interval whatever the derivative's rounding.
        u = unit(lower.dtype) if rounds_outward() else 0.0
        least = torch.minimum(self.derivative(lower), self.derivative(upper)) * (1 - 64 * u) - 16 * u
        parallel_room = _room(low, high, least * lower, least * upper, one)
        convex, concave = upper <= 0, lower >= 0
        ls = torch.where(convex, tangent, torch.where(concave, chord, least))
        lb = torch.where(
            convex,
            tangent_line - tangent_room,
            torch.where(concave, chord_down, low - least * lower - parallel_room),
        )
        us = torch.where(convex, chord, torch.where(concave, tangent, least))
        ub = torch.where(
            convex,
            chord_up,
            torch.where(concave, tangent_line + tangent_room, high - least * upper + parallel_room),
        )
        return Lines(ls, lb, us, ub, torch.zeros_like(lower, dtype=torch.bool))


class Sigmoid(_Sigmoidal):
    """``1 / (1 + exp(-x))``."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(x)

    def derivative(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(x)
        return s * (1 - s)


class Tanh(_Sigmoidal):
    """``tanh(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x)

    def derivative(self, x: Tensor) -> Tensor:
        return 1 - torch.tanh(x) ** 2
