"""The targeted margin attack of certification: a trajectory towards every other class finds the
counterexample only a corner reaches, which a cross-entropy attack that follows the likeliest wrong class
misses; what it returns is a point of the box and that point's least margin."""

from __future__ import annotations

import torch
from torch import nn

from daic.runtime.certification.attacks import margin_attack, pgd
from daic.runtime.certification.certify import least_margins


def corner_network() -> nn.Module:
    """Three classes of one input x in [0, 1]: y0 = 1; y1 = 0.9 - 20 x, the likeliest wrong class below
    x = 0.5 but never above y0; y2 = -20 + 21.5 x, above y0 only for x > 21 / 21.5 (the corner)."""
    net = nn.Linear(1, 3).double()
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.0], [-20.0], [21.5]]))
        net.bias.copy_(torch.tensor([1.0, 0.9, -20.0]))
    return net


def test_a_trajectory_per_class_finds_the_corner_that_cross_entropy_misses():
    net = corner_network()
    lower, upper = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    target = torch.zeros(1, dtype=torch.long)
    missed = 0
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        point, margin = margin_attack(net, lower, upper, target, steps=20, restarts=1, generator=generator)
        assert float(point) > 21 / 21.5 and float(margin) < 0
        assert float(margin) == float(least_margins(net, point, target))
        crossed = pgd(net, lower, upper, target, 20, None, 1, torch.Generator().manual_seed(seed))
        missed += int(net(crossed).argmax(1) == 0)
    # Uniform starts below x = 0.5 follow class 1 down to x = 0: about half of them.
    assert 5 <= missed <= 15


def test_a_robust_batch_gets_points_of_its_boxes_and_their_least_margins():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 5)).double()
    x = torch.rand(6, 4, dtype=torch.float64)
    target = net(x).argmax(1)
    lower, upper = x - 1e-4, x + 1e-4
    # Seven trajectories a pass, of the 24 (six images, four other classes each): passes cut across images.
    points, margins = margin_attack(
        net, lower, upper, target, 10, 1, torch.Generator().manual_seed(1), chunk=7
    )
    assert points.shape == x.shape and bool(((points >= lower) & (points <= upper)).all())
    torch.testing.assert_close(margins, least_margins(net, points, target))
    assert bool((margins > 0).all())  # a box this small holds no counterexample
