"""A counterexample holds where it is checked: float32 numbers inside the box, misclassified in exact
arithmetic and by the network's float32 copy. Networks whose margin at a single-point box is a tie below
float64's resolution, or which float32 decides the other way, are no counterexample."""

from __future__ import annotations

import pytest
import torch

from daic.runtime import Linear, ReLU, Sequential
from daic.runtime.certification.certify import certify
from daic.runtime.certification.verification import BoxBound
from daic.runtime.certification.witness import float32_inside, output_bounds

torch.set_num_threads(1)


def offset_network(offset: float, other: float = 0.0) -> Sequential:
    """At x = 1: y_0 = relu(x + offset) - 1 = offset exactly, y_1 = `other`; both are float32 weights. In
    float64 (offset below 2^-53) or float32 (below 2^-24), x + offset rounds to 1 and y_0 to 0."""
    net = Sequential(Linear(1, 1), ReLU(), Linear(1, 2))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.fill_(offset)
        net[2].weight.copy_(torch.tensor([[1.0], [0.0]]))
        net[2].bias.copy_(torch.tensor([-1.0, other]))
    return net.double()


def outcome_at_one(net: Sequential):
    x = torch.ones(1, 1, dtype=torch.float64)
    (outcome,) = certify(net, [BoxBound()], x, torch.zeros(1, dtype=torch.long), 0.0, (0.0, 2.0))
    return outcome


@pytest.mark.parametrize("offset", [2.0**-70, -(2.0**-70), 2.0**-60])
def test_a_tie_below_float64s_resolution_is_no_counterexample(offset):
    # Float64 computes the margin y_0 - y_1 as 0 (a misclassification); exactly it is `offset`. Where it is
    # positive the image is classified; where negative, intervals cannot tell it from a tie: neither is
    # answered falsified.
    net = offset_network(offset)
    with torch.no_grad():
        assert float(net(torch.ones(1, 1, dtype=torch.float64))[0, 0]) == 0.0
    assert outcome_at_one(net).status == "unknown"


def test_a_clear_misclassification_is_a_counterexample():
    outcome = outcome_at_one(offset_network(-(2.0**-10)))
    assert (outcome.status, outcome.by) == ("falsified", "clean")
    assert outcome.margin == pytest.approx(-(2.0**-10))


def test_a_misclassification_float32_does_not_see_is_no_counterexample():
    # Exactly and in float64 the margin is -2^-30 + 2^-31 < 0; float32 rounds 1 - 2^-30 to 1, so y_0 = 0 and
    # the margin is 2^-31 > 0: a checker running the network in float32 would reject the point.
    net = offset_network(-(2.0**-30), -(2.0**-31))
    with torch.no_grad():
        assert float(net.float()(torch.ones(1, 1))[0, 0]) == 0.0
    assert outcome_at_one(net.double()).status == "unknown"


def test_float32_points_are_the_nearest_inside_the_box_or_none():
    lower = torch.tensor([[0.1, 0.3, 1.0 + 2.0**-30]], dtype=torch.float64)
    upper = torch.tensor([[0.2, 0.3, 1.0 + 2.0**-29]], dtype=torch.float64)
    near, inside = float32_inside(torch.tensor([[0.05, 0.3, 1.0]], dtype=torch.float64), lower, upper)
    assert not bool(inside[0])  # 0.3 is no float32 number, nor anything between 1 + 2^-30 and 1 + 2^-29
    near, inside = float32_inside(torch.tensor([[0.05, 0.25]], dtype=torch.float64), lower[:, :2],
                                  torch.tensor([[0.2, 0.31]], dtype=torch.float64))  # fmt: skip
    assert bool(inside[0]) and torch.equal(near, near.float().double())
    assert float(near[0, 0]) >= 0.1 and float(near[0, 0]) == float(torch.tensor(0.1).float())


def test_output_bounds_contain_the_exact_outputs_at_a_point():
    net = offset_network(2.0**-70)
    low, high = output_bounds(net, torch.ones(1, 1, dtype=torch.float64))
    assert float(low[0, 0]) <= 2.0**-70 <= float(high[0, 0])
    assert float(high[0, 0] - low[0, 0]) < 1e-14
