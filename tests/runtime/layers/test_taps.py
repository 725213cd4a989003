"""TAPS: its margins lie between the centre's and IBP's, its loss is the product of the two cross-entropies
with the TAPS factor's gradient expanded, the gradient connector follows its formula, and outside training
(test time, points, the linear relaxation) the layer changes nothing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from daic.runtime import (
    TAPS,
    AbstractContext,
    BatchNorm,
    Box,
    HybridZonotope,
    Linear,
    ReLU,
    Residual,
    Sequential,
)
from daic.runtime.domains import Symbolic
from daic.runtime.domains.element import margin_others
from daic.runtime.layers import Latent
from daic.runtime.layers.normalization import fixed_statistics, measure
from daic.runtime.layers.taps import GradExpander, GradientLink
from daic.runtime.training.losses import certified, worst_case_loss

TRAIN = AbstractContext(training=True, t=1.25)
TEST = AbstractContext(training=False)


def tiny(taps: bool = True, **settings) -> Sequential:
    """Linear-ReLU-[TAPS]-Linear-ReLU-Linear in float64: a feature extractor of one layer, a classifier
    of two."""
    torch.manual_seed(0)
    layers = [Linear(4, 8), ReLU(), Linear(8, 6), ReLU(), Linear(6, 5)]
    if taps:
        layers.insert(2, TAPS(**settings))
    return Sequential(*layers).double()


def batch(n: int = 6, radius: float = 0.1):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (n,), generator=g)
    return Box(x, torch.full_like(x, radius)), y


def test_training_turns_the_box_into_a_latent_of_the_classifier():
    net = tiny()
    box, _y = batch()
    out = net.abstract(box, TRAIN)
    assert isinstance(out, Latent) and out.layers == (net[3], net[4], net[5])
    features = net[1].abstract(net[0].abstract(box, TRAIN), TRAIN)
    assert torch.equal(out.lower, features.lower()) and torch.equal(out.upper, features.upper())
    # The companion is IBP from the latent box on: the same bounds as the network without TAPS.
    plain = tiny(taps=False).abstract(box, TRAIN)
    for a, b in zip(out.bounds(), plain.bounds(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_taps_margins_lie_between_the_centre_and_ibp():
    net = tiny(steps=20, restarts=2)
    box, y = batch()
    out = net.abstract(box, TRAIN)
    taps = out.taps_margins(y)
    ibp = out.box.margin_upper(y)
    with torch.no_grad():
        centre = out.classifier((out.lower + out.upper) / 2)
        centre = centre - centre.gather(1, y[:, None])
    others = torch.ones_like(taps, dtype=torch.bool).scatter(1, y[:, None], False)
    assert torch.all(taps[~others] == 0)
    assert torch.all(taps[others] <= ibp[others] + 1e-12)
    assert torch.all(taps[others] >= centre[others] - 1e-12)
    # PGD moved off the centre: for most classes it found strictly worse points.
    assert (taps[others] > centre[others] + 1e-6).float().mean() > 0.5


def test_pivotal_points_lie_in_the_latent_box_and_are_reproducible():
    out = tiny(steps=5, restarts=3).abstract(batch()[0], TRAIN)
    y = batch()[1]
    _rows, others = margin_others(y, 5, torch.float64)
    points = out.pivotal_points(y, others)
    assert points.shape == (6, 4, 8) and not points.requires_grad
    assert torch.all(points >= out.lower.detach()[:, None]) and torch.all(
        points <= out.upper.detach()[:, None]
    )
    # Seeded by the training time: the same step draws the same starts.
    assert torch.equal(points, out.pivotal_points(y, others))


def test_loss_is_the_product_of_the_means_with_the_taps_gradient_expanded():
    scale = 3.0
    net = tiny(grad_scale=scale)
    box, y = batch()
    out = net.abstract(box, TRAIN)
    params = list(net.parameters())
    loss = worst_case_loss(out, y).mean()
    taps, ibp = out.losses(y)  # the same pivotal points: the attack is seeded by the training time
    assert loss.item() == pytest.approx(taps.mean().item() * ibp.mean().item(), rel=1e-12)
    assert torch.equal(taps, F.cross_entropy(out.taps_margins(y), y, reduction="none"))
    assert torch.equal(ibp, F.cross_entropy(out.box.margin_upper(y), y, reduction="none"))
    grads = torch.autograd.grad(loss, params, retain_graph=True)
    d_taps = torch.autograd.grad(taps.mean(), params, retain_graph=True)
    d_ibp = torch.autograd.grad(ibp.mean(), params, retain_graph=True)
    for g, dt, di in zip(grads, d_taps, d_ibp, strict=True):
        expected = scale * dt * ibp.mean() + taps.mean() * di
        torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-12)
    # The feature extractor learns from the TAPS factor too, through the gradient connector.
    assert d_taps[0].abs().sum() > 0


def test_gradient_expander_scales_only_the_gradient():
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    y = GradExpander.apply(x, 4.0)
    assert torch.equal(y, x)
    (y * torch.tensor([1.0, 3.0], dtype=torch.float64)).sum().backward()
    assert x.grad.tolist() == [4.0, 12.0]


def test_gradient_link_backward_follows_its_formula():
    # Box [0, 1] (w = 1) with c = 0.5: x moves with u above 0.5, with l below it; box [-1, 3] (w = 4) with
    # c = 0.25: within 1 of a face; a flat box (w = 0) passes nothing.
    lower = torch.tensor([0.0, 0.0, 0.0, 0.0, -1.0, -1.0, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    upper = torch.tensor([1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 2.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([0.1, 0.5, 0.8, 1.0, 2.5, -0.5, 1.0, 2.0], dtype=torch.float64)
    c = torch.tensor([0.5] * 4 + [0.25] * 4, dtype=torch.float64)
    upstream = torch.arange(1.0, 9.0, dtype=torch.float64)
    outs = [
        GradientLink.apply(lower[:4], upper[:4], x[:4], 0.5),
        GradientLink.apply(lower[4:], upper[4:], x[4:], 0.25),
    ]
    out = torch.cat(outs)
    assert torch.equal(out, x)
    (out * upstream).sum().backward()
    w = (upper - lower).detach()
    cw = c * w
    # By hand: d x / d u = max(0, x - (u - c w)) / (c w), d x / d l = max(0, l + c w - x) / (c w).
    d_upper = [0.0, 0.0, 0.6, 1.0, 0.5, 0.0, 0.0, 0.0]
    d_lower = [0.8, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0]
    assert cw.tolist()[:7] == [0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    torch.testing.assert_close(upper.grad, upstream * torch.tensor(d_upper, dtype=torch.float64))
    torch.testing.assert_close(lower.grad, upstream * torch.tensor(d_lower, dtype=torch.float64))


def test_gradient_link_sums_the_pull_of_every_class_point():
    lower = torch.zeros(1, 1, 2, dtype=torch.float64, requires_grad=True)
    upper = torch.ones(1, 1, 2, dtype=torch.float64, requires_grad=True)
    x = torch.tensor([[[1.0, 0.0], [0.75, 0.25]]], dtype=torch.float64)  # two points of one box
    GradientLink.apply(lower, upper, x, 0.5).sum().backward()
    assert upper.grad.tolist() == [[[1.0 + 0.5, 0.0]]]
    assert lower.grad.tolist() == [[[0.0, 1.0 + 0.5]]]


def test_at_test_time_and_on_points_taps_is_the_identity():
    with_taps, without = tiny(), tiny(taps=False)
    box, _y = batch()
    a, b = with_taps.abstract(box, TEST), without.abstract(box, TEST)
    assert isinstance(a, Box)
    assert torch.equal(a.center, b.center) and torch.equal(a.radius, b.radius)
    x = box.center
    assert torch.equal(with_taps(x), without(x))
    assert torch.equal(with_taps.abstract(x, TRAIN), without.abstract(x, TRAIN))


def test_the_linear_relaxation_ignores_taps_even_while_training():
    with_taps, without = tiny(), tiny(taps=False)
    box, y = batch()
    lower, upper = box.bounds()
    for ctx in (TRAIN, TEST):
        a = with_taps.abstract(Symbolic.input(lower, upper), ctx)
        b = without.abstract(Symbolic.input(lower, upper), ctx)
        assert isinstance(a, Symbolic)
        torch.testing.assert_close(a.margin_upper(y), b.margin_upper(y), rtol=0, atol=1e-12)


def test_a_latent_certifies_nothing():
    out = tiny().abstract(batch()[0], TRAIN)
    y = batch()[1]
    with pytest.raises(ValueError, match="training estimate"):
        out.margin_upper(y)
    with pytest.raises(ValueError, match="training estimate"):
        out.linear_lower(torch.zeros(6, 1, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="training estimate"):
        certified(out, y)


def test_a_hybrid_zonotope_enters_by_its_interval_bounds():
    net = tiny()
    box, y = batch()
    out = net.abstract(HybridZonotope.from_box(box), TRAIN)
    assert isinstance(out, Latent)
    lower, upper = net[1].abstract(net[0].abstract(HybridZonotope.from_box(box), TRAIN), TRAIN).bounds()
    assert torch.equal(out.lower, lower) and torch.equal(out.upper, upper)
    at_split = net[:3].abstract(HybridZonotope.from_box(box), TRAIN)  # the companion before the classifier
    assert isinstance(at_split.box, Box) and at_split.layers == ()
    torch.testing.assert_close(at_split.box.lower(), lower, rtol=0, atol=1e-15)
    torch.testing.assert_close(at_split.box.upper(), upper, rtol=0, atol=1e-15)
    assert torch.isfinite(worst_case_loss(out, y)).all()


def test_a_residual_block_after_the_split_runs_in_the_attack():
    torch.manual_seed(0)
    block = Residual([Linear(8, 8), ReLU()], None)
    net = Sequential(Linear(4, 8), ReLU(), TAPS(), block, Linear(8, 5)).double()
    box, y = batch()
    out = net.abstract(box, TRAIN)
    z = torch.rand(3, 8, dtype=torch.float64)
    torch.testing.assert_close(out.classifier(z), net[4](block(z)))
    taps, ibp = out.taps_margins(y), out.box.margin_upper(y)
    assert torch.all(taps <= ibp + 1e-12)


def test_before_start_the_layer_passes_its_input_on():
    net = tiny(start=2.0)
    box, _y = batch()
    assert isinstance(net.abstract(box, AbstractContext(training=True, t=1.5)), Box)
    assert isinstance(net.abstract(box, AbstractContext(training=True, t=2.0)), Latent)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="only_train must be True"):
        TAPS(only_train=False)
    with pytest.raises(ValueError, match="soft"):
        TAPS(soft=0)
    twice = Sequential(Linear(4, 8), TAPS(), ReLU(), TAPS(), Linear(8, 5)).double()
    with pytest.raises(ValueError, match="splits once"):
        twice.abstract(batch()[0], TRAIN)


def test_a_batch_norm_in_the_classifier_uses_the_steps_statistics():
    torch.manual_seed(0)
    net = Sequential(Linear(4, 8), ReLU(), TAPS(steps=4), Linear(8, 6), BatchNorm(6), ReLU(), Linear(6, 5))
    net = net.double().train()
    norm = net[4]
    box, y = batch()
    z = torch.rand(3, 8, dtype=torch.float64)
    # Statistics fixed (as the trainer fixes them for every pass of a step): the points take them.
    with fixed_statistics(net):
        measure(net, box.center, update=False)
        out = net.abstract(box, TRAIN)
        torch.testing.assert_close(out.classifier(z), net[6](net[5](norm(net[3](z)))))
        assert torch.all(out.taps_margins(y) <= out.box.margin_upper(y) + 1e-12)
    # None fixed: the points take the box centres' statistics, as the companion box does, and the running
    # statistics are left alone by the attack.
    running = norm.running_mean.clone(), norm.running_var.clone()
    out = net.abstract(box, TRAIN)
    loss = worst_case_loss(out, y).mean()
    assert torch.isfinite(loss)
    assert torch.equal(norm.running_mean, running[0]) and torch.equal(norm.running_var, running[1])
    assert torch.all(out.taps_margins(y) <= out.box.margin_upper(y) + 1e-12)
