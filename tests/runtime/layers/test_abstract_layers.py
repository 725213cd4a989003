"""Abstract layers (paper Section 3): hand-computed examples and exactness properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from daic.runtime import (
    AbstractContext,
    Box,
    Concretize,
    CorrelateAll,
    CorrelateFixed,
    CorrelateMax,
    CorrelateMaxPool,
    DecorrelateAll,
    DecorrelateMin,
    DeepLoss,
    HybridZonotope,
    Linear,
    ReLU,
    Sequential,
    trace,
)
from tests.runtime.helpers import DEVICES, HYPOTHESIS

TRAIN = AbstractContext(training=True)
TEST = AbstractContext(training=False)


def linear(weight: list[list[float]]) -> Linear:
    w = torch.tensor(weight)
    layer = Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(w)
    return layer


# --------------------------------------------------------------------------------------------------
# the paper's toy network (Section 3.4, Figure "Our analysis on an example toy network")


def test_toy_network_of_the_paper():
    # theta_1 maps the input box [-1, 1]^3 to the box h4..h6 = <0, 0.75>, <0, 1.25>, <0, 0.5>.
    theta1 = linear([[0.75, 0, 0], [0, 1.25, 0], [0, 0, 0.5]])
    x = HybridZonotope.from_bounds(-torch.ones(1, 3), torch.ones(1, 3))
    h = theta1.abstract(x, TRAIN)
    torch.testing.assert_close(h.beta, torch.tensor([[0.75, 1.25, 0.5]]))
    assert h.m == 0

    # CorrelateMax_2: x4 and x5 have the largest upper bounds.
    h = CorrelateMax(2).abstract(h, TRAIN)
    torch.testing.assert_close(h.head, torch.zeros(1, 3))
    torch.testing.assert_close(h.beta, torch.tensor([[0.0, 0.0, 0.5]]))
    torch.testing.assert_close(h.errors[:, 0, :], torch.tensor([[0.75, 0.0, 0.0], [0.0, 1.25, 0.0]]))

    # theta_2 chosen so that h7..h9 = <0, 0, (1, -1)>, <0, 0, (1, 0.5)>, <0, 0, (0, 0)> as in the figure.
    theta2 = linear([[1 / 0.75, -1 / 1.25, 0], [1 / 0.75, 0.5 / 1.25, 0], [0, 0, 0]])
    h = theta2.abstract(h, TRAIN)
    torch.testing.assert_close(h.beta, torch.zeros(1, 3))
    torch.testing.assert_close(h.errors[:, 0, :], torch.tensor([[1.0, 1.0, 0.0], [-1.0, 0.5, 0.0]]))

    # DecorrelateMin_1 removes the second term (absolute sum 1.5 < 2):
    # h7..h9 = <0, 1, (1)>, <0, 0.5, (1)>, <0, 0, (0)>.
    ids_before = h.ids.clone()
    h = DecorrelateMin(1).abstract(h, TRAIN)
    assert h.m == 1
    torch.testing.assert_close(h.beta, torch.tensor([[1.0, 0.5, 0.0]]))
    torch.testing.assert_close(h.errors[:, 0, :], torch.tensor([[1.0, 1.0, 0.0]]))
    assert h.ids[0, 0] == ids_before[0, 0]
    # (The figure's last step, theta_3 giving h10..h12, is not an affine image of h7..h9 -- x10 would need a
    # correlated coefficient 1 with beta 0 from inputs whose betas are 1 and 0.5 -- so it is not checked.)


# --------------------------------------------------------------------------------------------------
# index sets and ordering


def test_correlate_fixed_index_set():
    assert CorrelateFixed.positions(3, 10).tolist() == [0, 3, 6]
    assert CorrelateFixed.positions(4, 10).tolist() == [0, 2, 5, 7]
    assert CorrelateFixed.positions(5, 5).tolist() == [0, 1, 2, 3, 4]
    assert CorrelateFixed.positions(50, 5).tolist() == [0, 1, 2, 3, 4]  # k clamped to the layer size
    x = HybridZonotope(torch.zeros(2, 2, 5), torch.rand(2, 2, 5) + 0.1)
    out = CorrelateFixed(4).abstract(x, TRAIN)
    assert out.m == 4
    for t, i in enumerate([0, 2, 5, 7]):
        expected = torch.zeros(2, 10)
        expected[:, i] = x.beta.reshape(2, 10)[:, i]
        torch.testing.assert_close(out.errors[t].reshape(2, 10), expected)
        assert bool((out.beta.reshape(2, 10)[:, i] == 0).all())


def test_correlate_max_picks_per_sample_and_orders_by_index():
    head = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    beta = torch.tensor([[1.0, 4.0, 2.0, 3.0], [5.0, 1.0, 1.5, 0.5]])
    out = CorrelateMax(2).abstract(HybridZonotope(head, beta), TRAIN)
    # sample 0: top-2 upper bounds at indices 1 and 3; sample 1: at 0 and 2 (terms ordered by index).
    torch.testing.assert_close(out.errors[:, 0], torch.tensor([[0.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]]))
    torch.testing.assert_close(out.errors[:, 1], torch.tensor([[5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.5, 0.0]]))
    torch.testing.assert_close(out.beta, torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 0.5]]))
    big = CorrelateMax(100).abstract(HybridZonotope(head, beta), TRAIN)  # k clamped
    assert big.m == 4 and bool((big.beta == 0).all())


def test_correlate_all_is_one_term_per_neuron_keeping_old_terms():
    x = HybridZonotope(torch.zeros(1, 3), torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 1, 3))
    out = CorrelateAll().abstract(x, TRAIN)
    assert out.m == 4
    torch.testing.assert_close(out.errors[0], x.errors[0])
    torch.testing.assert_close(out.errors[1:, 0], torch.diag(torch.tensor([1.0, 2.0, 3.0])))
    assert torch.equal(out.ids[0], x.ids[0])


def test_correlate_maxpool_2d_and_3d():
    beta = torch.tensor(
        [[1.0, 2.0, 0.0, 1.0], [3.0, 0.5, 4.0, 2.0], [0.0, 0.0, 1.0, 1.0], [0.2, 0.1, 3.0, 5.0]]
    )
    x = HybridZonotope(torch.zeros(1, 1, 4, 4), beta.reshape(1, 1, 4, 4))
    out = CorrelateMaxPool([2, 2]).abstract(x, TRAIN)
    # window maxima of beta: (1,0)=3, (1,2)=4, (3,0)=0.2, (3,3)=5 -> flat 4, 6, 12, 15 in index order.
    chosen = [4, 6, 12, 15]
    assert out.m == 4
    for t, i in enumerate(chosen):
        assert out.errors[t, 0].flatten().nonzero().flatten().tolist() == [i]
        assert out.errors[t, 0].flatten()[i] == beta.flatten()[i]
    torch.testing.assert_close(out.total_error(), x.total_error())
    # first_layer: pooled on the head instead (window maxima at flat 0, 6, 8, 15).
    head = torch.tensor([[5.0, 1, 0, 2], [3, 0, 7, 1], [9, 8, 0, 0], [1, 2, 3, 4]]).reshape(1, 1, 4, 4)
    y = CorrelateMaxPool([2, 2], first_layer=True).abstract(
        HybridZonotope(head, torch.ones_like(head)), TRAIN
    )
    assert [int(e.flatten().nonzero()[0]) for e in y.errors[:, 0]] == [0, 6, 8, 15]
    # 3-D kernel over (C, H, W): one window per 2x2x2 block.
    z = HybridZonotope(torch.zeros(1, 2, 2, 2), torch.arange(8.0).reshape(1, 2, 2, 2))
    w = CorrelateMaxPool([2, 2, 2]).abstract(z, TRAIN)
    assert w.m == 1 and w.errors[0, 0].flatten().tolist() == [0.0] * 7 + [7.0]
    # Overlapping windows sharing a maximum: one live term, the repeat is an empty slot.
    o = CorrelateMaxPool([2, 2], stride=1).abstract(
        HybridZonotope(torch.zeros(1, 1, 3, 3), torch.eye(3)[None, None] * 9 + 1), TRAIN
    )
    torch.testing.assert_close(o.total_error(), torch.eye(3)[None, None] * 9 + 1)


def test_decorrelate_min_keeps_the_largest_terms_in_order():
    # Term magnitudes per sample: sample 0: [3, 1, 5, 2]; sample 1: [1, 4, 2, 6].
    mags = torch.tensor([[3.0, 1.0], [1.0, 4.0], [5.0, 2.0], [2.0, 6.0]])
    errors = torch.zeros(4, 2, 2)
    errors[:, :, 0] = mags * torch.tensor([1.0, -1.0])
    x = HybridZonotope(torch.zeros(2, 2), torch.full((2, 2), 0.5), errors)
    out = DecorrelateMin(2).abstract(x, TRAIN)
    assert out.m == 2
    # sample 0 keeps terms 0 and 2 (3, 5) in that order; sample 1 keeps terms 1 and 3 (4, 6).
    assert out.errors[:, 0, 0].tolist() == [3.0, 5.0]
    assert out.errors[:, 1, 0].tolist() == [-4.0, -6.0]
    assert out.ids[:, 0].tolist() == x.ids[[0, 2], 0].tolist()
    assert out.ids[:, 1].tolist() == x.ids[[1, 3], 1].tolist()
    torch.testing.assert_close(out.beta, torch.tensor([[0.5 + 1 + 2, 0.5], [0.5 + 1 + 2, 0.5]]))
    # num_to_keep=False removes k terms instead.
    removed = DecorrelateMin(1, num_to_keep=False).abstract(x, TRAIN)
    assert removed.m == 3 and removed.errors[:, 0, 0].tolist() == [3.0, 5.0, 2.0]
    # k >= m keeps everything; keeping 0 is DecorrelateAll.
    assert DecorrelateMin(9).abstract(x, TRAIN) is x
    assert DecorrelateMin(5, num_to_keep=False).abstract(x, TRAIN).m == 0


def test_decorrelate_all_and_concretize():
    x = HybridZonotope(torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[[1.0, -2.0]], [[0.5, 0.0]]]))
    out = DecorrelateAll().abstract(x, TRAIN)
    assert out.m == 0 and Concretize is DecorrelateAll
    torch.testing.assert_close(out.beta, torch.tensor([[2.5, 3.0]]))


# --------------------------------------------------------------------------------------------------
# only_train, points and boxes


@pytest.mark.parametrize(
    "layer",
    [
        CorrelateAll(only_train=True),
        CorrelateFixed(2, only_train=True),
        CorrelateMax(2, only_train=True),
        CorrelateMaxPool([1, 2], only_train=True),
        DecorrelateAll(only_train=True),
        DecorrelateMin(1, only_train=True),
        DeepLoss(1.0, only_train=True),
    ],
)
def test_only_train_layers_are_skipped_at_test_time_and_points_pass(layer):
    x = HybridZonotope(torch.zeros(2, 1, 2, 2), torch.rand(2, 1, 2, 2), torch.randn(3, 2, 1, 2, 2))
    ctx = AbstractContext(training=False)
    assert layer.abstract(x, ctx) is x and layer.step_loss(x, ctx) is None
    t = torch.randn(2, 1, 2, 2)
    assert layer.abstract(t, TRAIN) is t and layer(t) is t
    box = Box(t, t.abs())
    ctx = AbstractContext(training=True)
    assert layer.abstract(box, ctx) is box
    layer.only_train = False
    ctx = AbstractContext(training=False)
    assert layer.abstract(x, ctx) is not x or isinstance(layer, DeepLoss)


# --------------------------------------------------------------------------------------------------
# exactness properties


@st.composite
def zonotopes(draw) -> HybridZonotope:
    b, c, h, w = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.integers(2, 4)),
        draw(st.integers(2, 4)),
    )
    m = draw(st.integers(0, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    head = torch.randn((b, c, h, w), generator=g, dtype=torch.float64)
    beta = torch.rand((b, c, h, w), generator=g, dtype=torch.float64)
    errors = torch.randn((m, b, c, h, w), generator=g, dtype=torch.float64)
    return HybridZonotope(head, beta, errors)


CORRELATIONS = [
    CorrelateAll(),
    CorrelateFixed(1),
    CorrelateFixed(7),
    CorrelateMax(3),
    CorrelateMax(1000),
    CorrelateMaxPool([2, 2]),
    CorrelateMaxPool([2, 2], stride=1),
    CorrelateMaxPool([1, 2, 2], first_layer=True),
]


def assert_tighter_or_equal(tight: tuple, loose: tuple, tol: float = 1e-9) -> None:
    assert bool((tight[0] >= loose[0] - tol).all()) and bool((tight[1] <= loose[1] + tol).all())


@settings(max_examples=40, **HYPOTHESIS)
@given(x=zonotopes(), seed=st.integers(0, 1000))
def test_correlation_keeps_bounds_and_tightens_later_layers(x, seed):
    torch.manual_seed(seed)
    n = x.numel
    after = Sequential(Linear(n, 5), Linear(5, 4)).double()
    after_relu = Sequential(Linear(n, 5), ReLU(), Linear(5, 3)).double()
    for layer in CORRELATIONS:
        y = layer.abstract(x, TRAIN)
        assert y.head is x.head
        assert bool((y.beta >= 0).all())
        for u, v in zip(y.bounds(), x.bounds(), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-12)
        one = after[0]
        # One affine layer: the same bounds; two: equal or tighter.
        for u, v in zip(one.abstract(y, TRAIN).bounds(), one.abstract(x, TRAIN).bounds(), strict=True):
            torch.testing.assert_close(u, v)
        assert_tighter_or_equal(after.abstract(y, TRAIN).bounds(), after.abstract(x, TRAIN).bounds())
        # Hybrid ReLU depends only on the bounds, so tightening carries through it.
        assert_tighter_or_equal(
            after_relu.abstract(y, TRAIN).bounds(), after_relu.abstract(x, TRAIN).bounds()
        )


@settings(max_examples=40, **HYPOTHESIS)
@given(x=zonotopes(), k=st.integers(0, 6), seed=st.integers(0, 1000))
def test_decorrelation_keeps_bounds_and_loosens_later_layers(x, k, seed):
    torch.manual_seed(seed)
    after = Sequential(Linear(x.numel, 5), Linear(5, 4)).double()
    for layer in (DecorrelateAll(), DecorrelateMin(k), DecorrelateMin(k, num_to_keep=False)):
        y = layer.abstract(x, TRAIN)
        for u, v in zip(y.bounds(), x.bounds(), strict=True):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-12)
        assert_tighter_or_equal(after.abstract(x, TRAIN).bounds(), after.abstract(y, TRAIN).bounds())
    torch.testing.assert_close(DecorrelateAll().abstract(x, TRAIN).beta, x.total_error())


def test_correlation_can_be_strictly_tighter():
    # y = (x1 + x2) + (x1 - x2) = 2 x1: with correlated inputs the bound is 2, as a box it is 4.
    net = Sequential(linear([[1.0, 1.0], [1.0, -1.0]]), linear([[1.0, 1.0]]))
    box = HybridZonotope.from_bounds(-torch.ones(1, 2), torch.ones(1, 2))
    assert net.abstract(box, TRAIN).upper().item() == pytest.approx(4.0)
    assert net.abstract(CorrelateAll().abstract(box, TRAIN), TRAIN).upper().item() == pytest.approx(2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_abstract_layers_run_on_the_value_device(device):
    x = HybridZonotope(torch.zeros(2, 3, 4, 4, device=device), torch.rand(2, 3, 4, 4, device=device))
    ctx = AbstractContext(training=True)
    run = trace(Sequential(*CORRELATIONS, DecorrelateMin(2), DecorrelateAll(), DeepLoss(0.5)), x, ctx)
    for _layer, value in run.visits:
        assert value.errors.device.type == device and value.ids.device.type == device
    assert run.output.errors.device.type == device
    (loss,) = run.step_losses(ctx)
    assert loss.device.type == device
