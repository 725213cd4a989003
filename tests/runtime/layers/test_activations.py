"""The activation family: every member's interval image and linear relaxation hold, in exact arithmetic
(checked in 200-bit arithmetic at the floats sampled, and at the interval's ends), its lines are the
function where it declares them exact, and its transformers in every domain bound what the network
computes."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import pytest
import torch

from daic.runtime import Abs, AbstractContext, Box, HardTanh, HybridZonotope, LeakyReLU, ReLU, Sigmoid, Tanh
from daic.runtime.domains.rounding import outward_rounding

MEMBERS = [ReLU(), LeakyReLU(0.1), LeakyReLU(0.0), Abs(), HardTanh(), Sigmoid(), Tanh()]
EXACT = {
    "ReLU": lambda x: max(x, 0),
    "LeakyReLU": None,  # by its slope, below
    "Abs": abs,
    "HardTanh": lambda x: min(max(x, -1), 1),
    "Sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
    "Tanh": mpmath.tanh,
}
mpmath.mp.prec = 200


def exact_value(member, x: float):
    """``member`` at the float ``x`` in 200-bit arithmetic (exactly, for the piecewise-linear ones)."""
    if isinstance(member, LeakyReLU):
        return Fraction(x) if x >= 0 else Fraction(member.negative_slope) * Fraction(x)
    if isinstance(member, (Sigmoid, Tanh)):
        return EXACT[type(member).__name__](mpmath.mpf(x))
    return EXACT[type(member).__name__](Fraction(x))


def line(slope: float, intercept: float, x: float):
    value = Fraction(slope) * Fraction(x) + Fraction(intercept)
    return value


def intervals(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Intervals of every kind: crossing zero, -1 or 1, one-sided, wide, narrow, points, far tails."""
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(400, generator=g, dtype=torch.float64) * 3
    radius = torch.rand(400, generator=g, dtype=torch.float64) ** 3 * 4
    radius[:20] = 0.0
    centre[20:40] = torch.linspace(-40, 40, 20, dtype=torch.float64)
    return centre - radius, centre + radius


def _compare(low, value, high) -> None:
    if isinstance(value, mpmath.mpf):
        low, high = mpmath.mpf(low.numerator) / low.denominator, mpmath.mpf(high.numerator) / high.denominator
    assert low <= value <= high, (float(low), float(value), float(high))


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: repr(m))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_members_relaxation_and_image_hold_in_exact_arithmetic(member, seed):
    lower, upper = intervals(seed)
    with outward_rounding():
        lines = member.relaxation(lower, upper)
        image = member.interval(lower, upper)
    _check(member, lower, upper, lines, image, seed)
    if member.lower_through_origin:  # declared, so back-substitution drops the intercepts unread
        assert bool((lines.lb == 0).all())


@pytest.mark.parametrize("member", [Sigmoid(), Tanh()], ids=repr)
@pytest.mark.parametrize("seed", [0, 1])
def test_sigmoid_and_tanh_lines_at_every_tangent_point_alpha_crown_may_choose_hold_exactly(member, seed):
    """alpha-CROWN chooses where the tangent touches (a fraction of the way from the lower bound to the
    upper): at every fraction, ends included, the lines hold in exact arithmetic."""
    lower, upper = intervals(seed)
    fraction = torch.rand(len(lower), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    fraction[::7], fraction[1::7] = 0.0, 1.0
    with outward_rounding():
        lines = member.relaxation(lower, upper, fraction)
        image = member.interval(lower, upper)
        # Back-substitution's rounding is bounded by the largest intercept the member declares.
        declared = member.rounding(Box.from_bounds(lower, upper)).largest_back_constant()
    _check(member, lower, upper, lines, image, seed)
    assert float(torch.maximum(lines.lb.abs(), lines.ub.abs()).max()) <= declared


def _check(member, lower: torch.Tensor, upper: torch.Tensor, lines, image, seed: int) -> None:
    """Each line below or above the member at the interval's ends and at sampled floats inside it, in
    exact arithmetic; the image around it; the lines the function where declared exact."""
    image_low, image_high = image
    g = torch.Generator().manual_seed(seed + 7)
    for k in range(len(lower)):
        low, high = float(lower[k]), float(upper[k])
        inside = torch.rand(6, generator=g, dtype=torch.float64).tolist()
        points = [low, high, *(low + (high - low) * t for t in inside)]
        for x in points:
            x = min(max(x, low), high)
            value = exact_value(member, x)
            below = line(float(lines.ls[k]), float(lines.lb[k]), x)
            above = line(float(lines.us[k]), float(lines.ub[k]), x)
            _compare(below, value, above)
            _compare(Fraction(float(image_low[k])), value, Fraction(float(image_high[k])))
            if bool(lines.exact[k]):  # declared exact: both lines are the function
                assert below == above == value


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.slopes is not None], ids=repr)
def test_alpha_crowns_lines_through_the_origin_lie_below_every_optimisable_member(member):
    """Every slope of the member's range gives a lower line through the origin."""
    x = torch.linspace(-5, 5, 1001, dtype=torch.float64)
    for slope in torch.linspace(*member.slopes, 11):
        assert bool((slope * x <= member(x) + 1e-15).all())


@pytest.mark.parametrize("member", MEMBERS, ids=repr)
@pytest.mark.parametrize("relu", ["hybrid", "deepz"])
def test_every_members_box_and_hybrid_zonotope_contain_the_function(member, relu):
    g = torch.Generator().manual_seed(3)
    centre = torch.randn(2, 50, generator=g, dtype=torch.float64) * 2
    radius = torch.rand(2, 50, generator=g, dtype=torch.float64) * 2
    ctx = AbstractContext(training=False, relu=relu)
    lower, upper = centre - radius, centre + radius
    points = lower + (upper - lower) * torch.rand(300, 2, 50, generator=g, dtype=torch.float64)
    outputs = member(points)
    with outward_rounding():
        for value in (Box.from_bounds(lower, upper), HybridZonotope.exact_from_bounds(lower, upper)):
            low, high = member.abstract(value, ctx).bounds()
            assert bool(((outputs >= low) & (outputs <= high)).all()), type(value).__name__
