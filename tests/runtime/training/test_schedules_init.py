"""Schedules (Section 4.1, reference-implementation argument order) and the seeded IBP initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from daic.runtime import (
    Const,
    Conv2D,
    Lin,
    Linear,
    ReLU,
    Residual,
    Schedule,
    Sequential,
    Until,
    as_schedule,
    ibp_init_,
)


def test_const_and_coercion():
    assert Const(0.3)(123.0) == 0.3
    assert as_schedule(2)(0.0) == 2.0 and isinstance(as_schedule(0.5), Const)
    s = Lin(0, 1, 10)
    assert as_schedule(s) is s
    assert isinstance(as_schedule(lambda t: t * 2), Schedule) and as_schedule(lambda t: t * 2)(1.5) == 3.0
    with pytest.raises(TypeError):
        as_schedule("fast")
    with pytest.raises(TypeError):
        as_schedule(True)


def test_lin_holds_then_anneals():
    s = Lin(0, 1, 150, 10)  # start for 10 epochs, then linear to 1 over 150 epochs
    assert s(0) == 0 and s(9.99) == 0 and s(10) == 0
    assert s(85) == pytest.approx(0.5)
    assert s(160) == 1 and s(1000) == 1
    down = Lin(0.1, 0, 50)  # the paper's three-argument form
    assert down(0) == pytest.approx(0.1) and down(25) == pytest.approx(0.05) and down(60) == 0
    assert Lin(0, 2, 0, 5)(5) == 2  # zero steps: a jump
    with pytest.raises(ValueError):
        Lin(0, 1, -1)


def test_until_switches_and_shifts_time():
    s = Until(90, Lin(0, 0.2, 50, 40), 0.0)  # the SkipNet-18 Combo DeepLoss weight
    assert s(30) == 0 and s(65) == pytest.approx(0.1) and s(89) == pytest.approx(0.196)
    assert s(90) == 0
    t = Until(1, 0.0, Lin(0.5, 0, 50, 3))  # ResNet-Large's first DeepLoss weight
    assert t(0.5) == 0 and t(1) == 0.5 and t(4) == 0.5 and t(29) == pytest.approx(0.25)
    assert "Until(90.0" in repr(s)


def small_net() -> Sequential:
    return Sequential(
        Conv2D(3, 8, 3, padding=1),
        ReLU(),
        Residual([Conv2D(8, 8, 1)], [Conv2D(8, 8, 3, padding=1), ReLU(), Conv2D(8, 8, 3, padding=1)]),
        ReLU(),
        Linear(8 * 6 * 6, 64),
        ReLU(),
        Linear(64, 10),
    )


def test_ibp_init_is_seeded_and_reproducible():
    a, b, c = ibp_init_(small_net(), seed=3), ibp_init_(small_net(), seed=3), ibp_init_(small_net(), seed=4)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    assert not torch.equal(a[0].weight, c[0].weight)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(
        ibp_init_(small_net(), generator=g1)[4].weight, ibp_init_(small_net(), generator=g2)[4].weight
    )


def test_ibp_init_scale():
    torch.manual_seed(0)
    net = ibp_init_(Sequential(Linear(400, 300), ReLU(), Linear(300, 200), ReLU(), Linear(200, 10)), seed=0)
    for layer, fan_in in ((net[0], 400), (net[2], 300)):
        assert layer.weight.std().item() == pytest.approx(math.sqrt(2 * math.pi) / fan_in, rel=0.05)
        assert bool((layer.bias == 0).all())
    assert net[4].weight.abs().max().item() <= 1 / math.sqrt(200)  # the classifier: U(-1/sqrt(n), 1/sqrt(n))
    # Residual branches end in halved layers.
    res = ibp_init_(small_net(), seed=0)[2]
    expected = math.sqrt(2 * math.pi) / (8 * 9) / 2
    assert res.branch2[2].weight.std().item() == pytest.approx(expected, rel=0.2)


def test_smooth_is_shi_et_als_ramp():
    """A fourth power for the first quarter of the ramp, then linear, the two joined with the same value
    (1/13 of the way) and slope, from `start` after `hold` epochs to `end`."""
    from daic.runtime.training.schedules import Smooth

    ramp = Smooth(0.0, 0.4, 20, 1)
    assert ramp(0.5) == ramp(1.0) == 0.0 and ramp(21) == ramp(40) == 0.4
    assert abs(ramp(6) - 0.4 / 13) < 1e-12 and abs(ramp(3.5) - 0.4 / 13 / 16) < 1e-12  # (1/2)^4 of it
    h = 1e-6
    slopes = [(ramp(6 - h) - ramp(6 - 2 * h)) / h, (ramp(6 + 2 * h) - ramp(6 + h)) / h]
    assert abs(slopes[0] - slopes[1]) < 1e-6 and abs(slopes[1] - 0.4 * 16 / 13 / 20) < 1e-6
    assert all(ramp(t) <= ramp(t + 0.1) for t in [i / 10 for i in range(250)])
