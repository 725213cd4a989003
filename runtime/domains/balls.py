"""The input region every goal, attack and certificate starts from: the eps-ball of an image, clipped to
the data's value range, ``[max(x - eps, a), min(x + eps, b)]``. Built here only."""

from __future__ import annotations

import torch
from torch import Tensor

from daic.runtime.domains.rounding import down as round_down
from daic.runtime.domains.rounding import up as round_up


def clipped_ball(x: Tensor, epsilon: float, value_range: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """The clipped eps-balls of the images as a box in the images' float arithmetic: what training and
    attacks work in (where a rounding error of an end changes nothing that must hold)."""
    a, b = value_range
    return (x - epsilon).clamp(min=a), (x + epsilon).clamp(max=b)


def certified_balls(
    x: Tensor, epsilon: float, value_range: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The clipped eps-balls as two boxes of floats: one that contains each ball in exact arithmetic (what
    a certificate bounds), and one inside it (where a counterexample must lie): each end rounded away
    from, or into, the ball where the subtraction or addition is inexact; the clipped ends are exact."""
    a, b = value_range
    below, above = x - epsilon, x + epsilon
    outer = (round_down(below).clamp(min=a), round_up(above).clamp(max=b))
    inner_lower = torch.minimum(round_up(below).clamp(min=a), x)
    inner_upper = torch.maximum(round_down(above).clamp(max=b), x)
    return *outer, inner_lower, inner_upper
