"""Outward rounding: certificates that hold in exact arithmetic, against networks built to exploit
rounding to nearest, and at no cost in certificates on ordinary networks."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from daic.runtime import BatchNorm, Box, HybridZonotope, Linear, ReLU, Sequential
from daic.runtime.certification.certify import Attack, certify
from daic.runtime.certification.verification import BoxBound, CROWNBound, HBoxBound
from daic.runtime.domains import Symbolic
from daic.runtime.domains.balls import certified_balls
from daic.runtime.domains.rounding import outward_rounding

DOMAINS = [BoxBound(), HBoxBound(), CROWNBound(), CROWNBound("box")]


WEIGHTS = ([[-2.0], [1.0]], [[-2.0, 1.0], [-3.0, -3.0]], [[0.0, 3.0], [1.0, -2.0]])
BIASES = ([-(2.0**52), 2.0**52], [-(2.0**52), 2.0**52], [0.5, 0.0])


def absorbing_network() -> Sequential:
    """Biases of 2^52 absorb the input: at x = 0.5 float64 computes the logits (0.5, 0), and bounds
    rounded to nearest claim a margin of 0.4 over [0.4, 0.6]; in exact arithmetic the second logit is x
    there, so x = 0.55 is class 1. (Found by a random search over small integer networks for ones that
    rounding to nearest lets every domain certify.)"""
    layers = []
    for weight, bias in zip(WEIGHTS, BIASES, strict=True):
        layer = Linear(len(weight[0]), len(weight))
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            layer.bias.copy_(torch.tensor(bias))
        layers.append(layer)
    return Sequential(layers[0], ReLU(), layers[1], ReLU(), layers[2]).double()


def exact_logits(point: Fraction) -> list[Fraction]:
    values = [point]
    for depth, (weight, bias) in enumerate(zip(WEIGHTS, BIASES, strict=True)):
        values = [
            sum(Fraction(w) * v for w, v in zip(row, values, strict=True)) + Fraction(b)
            for row, b in zip(weight, bias, strict=True)
        ]
        if depth < len(WEIGHTS) - 1:
            values = [max(v, Fraction(0)) for v in values]
    return values


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: d.label)
def test_a_network_that_rounding_hides_is_not_certified(domain):
    net = absorbing_network()
    x, y = torch.tensor([[0.5]], dtype=torch.float64), torch.tensor([0])
    assert net(x).tolist() == [[0.5, 0.0]]  # what float64 computes at the centre
    assert exact_logits(Fraction(11, 20)) == [Fraction(1, 2), Fraction(11, 20)]  # the truth: class 1 at 0.55
    (nearest,) = certify(net, [domain], x, y, 0.1, (0.0, 1.0), outward=False)
    assert nearest.status == "verified"  # the trap works: rounding to nearest "certifies" it
    (outcome,) = certify(net, [domain], x, y, 0.1, (0.0, 1.0))
    assert outcome.status == "unknown" and outcome.margin < -1


def test_the_input_box_contains_the_clipped_ball_in_exact_arithmetic():
    """The box [0.01, 0.03] kept as centre and radius leaves out its lower corner by 1.7e-18 when both are
    rounded to nearest; the outward box (and every domain's element made from it) contains it."""
    x = torch.tensor([[0.02]], dtype=torch.float64)
    eps = 0.01
    exact_lower = Fraction(0.02) - Fraction(eps)
    exact_upper = Fraction(0.02) + Fraction(eps)
    nearest = Box.from_bounds(x - eps, x + eps)
    assert Fraction(float(nearest.center)) - Fraction(float(nearest.radius)) > exact_lower
    lower, upper, inner_lower, inner_upper = certified_balls(x, eps, (0.0, 1.0))
    assert Fraction(float(lower)) <= exact_lower and Fraction(float(upper)) >= exact_upper
    assert exact_lower <= Fraction(float(inner_lower)) <= Fraction(float(inner_upper)) <= exact_upper
    with outward_rounding():
        for element in (Box.from_bounds(lower, upper), HybridZonotope.from_bounds(lower, upper)):
            centre = Fraction(float(element.centre()))
            radius = Fraction(float(element.radius if isinstance(element, Box) else element.beta))
            assert centre - radius <= exact_lower and centre + radius >= exact_upper
        analysis = Symbolic.input(lower, upper).analysis
        centre, radius = Fraction(float(analysis.center)), Fraction(float(analysis.radius))
        assert centre - radius <= exact_lower and centre + radius >= exact_upper


@pytest.mark.parametrize("batch_norm", [False, True], ids=["plain", "batchnorm"])
def test_ordinary_networks_keep_their_certificates(batch_norm):
    """On a network trained to be certified, outward rounding loses no certificate (its margins move by
    far less than they are), and the bounds it reports stay below the nearest-rounded ones; with
    BatchNorm, whose scale and shift are computed from its statistics, too."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.25, 0.3], [0.7, 0.35], [0.5, 0.75]], dtype=torch.float64)
    labels = torch.randint(0, 3, (300,), generator=generator)
    points = centres[labels] + 0.08 * torch.randn(300, 2, generator=generator, dtype=torch.float64)
    norm = [BatchNorm(16)] if batch_norm else []
    net = Sequential(Linear(2, 16), *norm, ReLU(), Linear(16, 16), ReLU(), Linear(16, 3)).double()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.03)
    for _ in range(200):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(points), labels).backward()
        optimizer.step()
    net.eval()
    x, y = points[:100], net(points[:100]).argmax(1)
    for domain in DOMAINS:
        steps = [Attack(), domain]
        nearest = certify(net, steps, x, y, 0.05, (0.0, 1.0), outward=False)
        outward = certify(net, steps, x, y, 0.05, (0.0, 1.0))
        assert [o.status for o in outward] == [o.status for o in nearest], domain.label
        assert sum(o.status == "verified" for o in outward) > 10
        for a, b in zip(outward, nearest, strict=True):
            if a.status == "verified":
                assert a.margin <= b.margin and b.margin - a.margin < 1e-9 * (1 + abs(b.margin))
