"""Concrete layers and their Box / hybrid zonotope transformers on explicit values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from daic.runtime import (
    AbstractContext,
    AvgPool2D,
    Box,
    Concat,
    Conv2D,
    Flatten,
    HybridZonotope,
    Linear,
    MaxPool2D,
    Normalize,
    ReLU,
    Residual,
    Sequential,
)
from tests.runtime.helpers import DEVICES

CTX = AbstractContext()


def affine_layers() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        Normalize([0.1, -0.2], [0.5, -2.0]),
        Conv2D(2, 3, 3, stride=2, padding=1),
        Conv2D(2, 3, [2, 1], stride=[1, 2], padding=[1, 0], bias=False),
        AvgPool2D(2, padding=1),
        AvgPool2D(3, stride=1, padding=1),
        Flatten(),
        Linear(2 * 5 * 5, 4),
    ]


def test_concrete_layers_are_the_usual_pytorch_ops():
    x = torch.randn(3, 2, 5, 5)
    norm, conv, conv2, avg, avg3, flat, lin = affine_layers()
    mean, std = torch.tensor([0.1, -0.2]).view(1, 2, 1, 1), torch.tensor([0.5, -2.0]).view(1, 2, 1, 1)
    torch.testing.assert_close(norm(x), (x - mean) / std)
    torch.testing.assert_close(conv(x), F.conv2d(x, conv.weight, conv.bias, 2, 1))
    assert conv2.bias is None and conv2(x).shape == (3, 3, 6, 3)
    torch.testing.assert_close(avg(x), F.avg_pool2d(x, 2, 2, 1))
    torch.testing.assert_close(avg3(x), F.avg_pool2d(x, 3, 1, 1))
    assert avg(torch.zeros(1, 1, 32, 32)).shape == (1, 1, 17, 17)  # the DenseNet transition shape
    torch.testing.assert_close(lin(x), F.linear(x.flatten(1), lin.weight, lin.bias))
    assert flat(x).shape == (3, 50)
    torch.testing.assert_close(ReLU()(x), x.clamp(min=0))
    torch.testing.assert_close(MaxPool2D(2)(x), F.max_pool2d(x, 2))


@pytest.mark.parametrize("device", DEVICES)
def test_box_and_zonotope_without_terms_agree_through_affine_layers(device):
    g = torch.Generator().manual_seed(1)
    center = torch.randn((3, 2, 5, 5), generator=g).to(device)
    radius = torch.rand((3, 2, 5, 5), generator=g).to(device)
    for layer in affine_layers():
        layer = layer.to(device)
        box = layer.abstract(Box(center, radius), CTX)
        hz = layer.abstract(HybridZonotope(center, radius), CTX)
        assert isinstance(box, Box) and isinstance(hz, HybridZonotope) and hz.m == 0
        assert torch.equal(box.center, hz.head) and torch.equal(box.radius, hz.beta)
        # The center goes through the layer itself; the radius through |W| (non-negative).
        torch.testing.assert_close(box.center, layer(center))
        assert bool((box.radius >= 0).all())


@pytest.mark.parametrize("device", DEVICES)
def test_affine_layers_are_exact_on_zonotopes(device):
    """An affine map of a zonotope: head through the layer, each term through the linear part."""
    g = torch.Generator().manual_seed(2)
    head = torch.randn((3, 2, 5, 5), generator=g).to(device)
    errors = torch.randn((4, 3, 2, 5, 5), generator=g).to(device)
    x = HybridZonotope(head, torch.zeros_like(head), errors)
    for layer in affine_layers():
        layer = layer.to(device)
        out = layer.abstract(x, CTX)
        torch.testing.assert_close(out.head, layer(head))
        zero = layer(torch.zeros_like(head))
        for j in range(4):
            torch.testing.assert_close(out.errors[j], layer(errors[j]) - zero, atol=1e-5, rtol=1e-5)
        assert out.ids is x.ids


def test_box_relu_is_relu_on_the_bounds():
    box = Box.from_bounds(torch.tensor([[-2.0, 0.5, -3.0]]), torch.tensor([[1.0, 2.0, -1.0]]))
    out = ReLU().abstract(box, CTX)
    torch.testing.assert_close(out.lower(), torch.tensor([[0.0, 0.5, 0.0]]))
    torch.testing.assert_close(out.upper(), torch.tensor([[1.0, 2.0, 0.0]]))


def explicit_hz() -> HybridZonotope:
    # bounds: [0.5, 3.5] (positive), [-1, 2] (crossing), [-4.5, -1.5] (negative)
    head = torch.tensor([[2.0, 0.5, -3.0]])
    beta = torch.tensor([[0.5, 0.5, 0.5]])
    errors = torch.tensor([[[1.0, 1.0, 1.0]]])
    return HybridZonotope(head, beta, errors)


def test_hybrid_relu_on_explicit_values():
    x = explicit_hz()
    out = ReLU().abstract(x, AbstractContext(relu="hybrid"))
    torch.testing.assert_close(out.head, torch.tensor([[2.0, 1.0, 0.0]]))
    torch.testing.assert_close(out.beta, torch.tensor([[0.5, 1.0, 0.0]]))
    torch.testing.assert_close(out.errors, torch.tensor([[[1.0, 0.0, 0.0]]]))
    assert out.ids is x.ids


def test_deepz_relu_on_explicit_values():
    x = explicit_hz()
    out = ReLU().abstract(x, AbstractContext(relu="deepz"))
    lam, mu = 2 / 3, 1 / 3  # u / (u - l) = 2 / 3; -lam * l / 2 = 1 / 3
    torch.testing.assert_close(out.head, torch.tensor([[2.0, lam * 0.5 + mu, 0.0]]))
    torch.testing.assert_close(out.beta, torch.tensor([[0.5, lam * 0.5 + mu, 0.0]]))
    torch.testing.assert_close(out.errors, torch.tensor([[[1.0, lam, 0.0]]]))
    lo, hi = out.bounds()
    torch.testing.assert_close(hi[0, 1], torch.tensor(2.0))  # the upper line meets relu at u
    torch.testing.assert_close(lo[0, 1], torch.tensor(-lam * 1.0 + 0.0))  # lam * l


def test_relu_gradients_are_finite_at_degenerate_bounds():
    """Neurons with l = u (zero width) must not produce NaN gradients through the unselected branch."""
    head = torch.tensor([[0.0, 1.0, -1.0, 0.5]], requires_grad=True)
    beta = torch.tensor([[0.0, 0.0, 0.0, 1.0]], requires_grad=True)
    for relu in ("hybrid", "deepz"):
        out = ReLU().abstract(HybridZonotope(head, beta), AbstractContext(relu=relu))
        head.grad = beta.grad = None
        out.upper().sum().backward()
        assert bool(torch.isfinite(head.grad).all()) and bool(torch.isfinite(beta.grad).all())


def test_maxpool_box_takes_max_of_bounds():
    lo = torch.tensor([[[[0.0, 1.0], [-1.0, 0.5]]]])
    box = Box.from_bounds(lo, lo + torch.tensor([[[[3.0, 0.5, 0.5, 0.5]]]]).reshape(1, 1, 2, 2))
    out = MaxPool2D(2).abstract(box, CTX)
    torch.testing.assert_close(out.lower(), torch.tensor([[[[1.0]]]]))
    torch.testing.assert_close(out.upper(), torch.tensor([[[[3.0]]]]))


def test_maxpool_zonotope_keeps_a_dominating_element_exactly():
    # Window 1 (left 2x2): element (0,0) has lower bound 5 >= every other upper bound -> copied exactly.
    # Window 2 (right 2x2): overlapping intervals -> box of [max lower, max upper], no terms.
    head = torch.tensor([[[[6.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.5]]]])
    errors = torch.zeros((2, 1, 1, 2, 4))
    errors[0, 0, 0, 0, 0] = 1.0
    errors[1, 0, 0, 0, 2] = 1.0
    errors[1, 0, 0, 1, 3] = -1.0
    x = HybridZonotope(head, torch.zeros_like(head), errors)
    out = MaxPool2D(2).abstract(x, CTX)
    assert out.shape == (1, 1, 1, 2) and out.ids is x.ids
    torch.testing.assert_close(out.head, torch.tensor([[[[6.0, 1.0]]]]))
    torch.testing.assert_close(out.errors[:, 0, 0, 0, 0], torch.tensor([1.0, 0.0]))
    # Right window: bounds [0, 2] (element (0,2) in [0, 2], (1,3) in [-0.5, 1.5]).
    torch.testing.assert_close(out.errors[:, 0, 0, 0, 1], torch.tensor([0.0, 0.0]))
    torch.testing.assert_close(out.bounds()[0][0, 0, 0, 1], torch.tensor(0.0))
    torch.testing.assert_close(out.bounds()[1][0, 0, 0, 1], torch.tensor(2.0))


def test_containers_compute_the_concrete_sum_and_concatenation():
    torch.manual_seed(0)
    a, b = Conv2D(2, 2, 1), Conv2D(2, 3, 3, padding=1)
    x = torch.randn(2, 2, 4, 4)
    torch.testing.assert_close(Residual([a], None)(x), a(x) + x)
    torch.testing.assert_close(Residual(None, None)(x), 2 * x)
    torch.testing.assert_close(Concat([a], [b], dim=1)(x), torch.cat([a(x), b(x)], 1))
    net = Sequential(Residual([a, ReLU()], [Conv2D(2, 2, 3, padding=1)]), Concat(None, [b]))
    assert net(x).shape == (2, 5, 4, 4)
    # Concrete values through abstract(): the same as the forward pass.
    torch.testing.assert_close(net.abstract(x, CTX), net(x))


def test_concrete_network_is_a_plain_exportable_model():
    from daic.runtime import CorrelateMax, DecorrelateMin, DeepLoss

    net = Sequential(
        Normalize([0.5], [0.25]),
        CorrelateMax(4),
        Conv2D(1, 2, 3, padding=1),
        ReLU(),
        DecorrelateMin(2),
        DeepLoss(0.1),
        Residual([Conv2D(2, 2, 1)], None),
        MaxPool2D(2),
        AvgPool2D(2, padding=0),
        Linear(2, 3),
    ).eval()
    x = torch.randn(2, 1, 4, 4)
    exported = torch.export.export(net, (x,))
    torch.testing.assert_close(exported.module()(x), net(x))


def test_layers_respect_dtype():
    net = Sequential(Conv2D(1, 2, 3), ReLU(), Linear(2, 2)).double()
    x = HybridZonotope.exact_from_bounds(torch.zeros(1, 1, 3, 3, dtype=torch.float64), torch.ones(1, 1, 3, 3))
    out = net.abstract(x, CTX)
    assert out.dtype == torch.float64 and out.errors.dtype == torch.float64


def test_box_relu_hand_written_gradient_matches_autograd():
    g = torch.Generator().manual_seed(3)
    center = torch.randn((4, 50), generator=g, dtype=torch.float64)
    radius = torch.rand((4, 50), generator=g, dtype=torch.float64)
    weights = torch.randn((2, 4, 50), generator=g, dtype=torch.float64)

    def composed(c, r):
        lo, hi = F.relu(c - r), F.relu(c + r)
        return (hi + lo) / 2, (hi - lo) / 2

    def fast(c, r):
        out = ReLU().abstract(Box(c, r), CTX)
        return out.center, out.radius

    for which in ((0, 1), (0,), (1,)):  # both outputs used, or only one (the other's gradient is None)
        grads = []
        for fn in (fast, composed):
            c, r = center.clone().requires_grad_(), radius.clone().requires_grad_()
            outs = fn(c, r)
            loss = sum((outs[i] * weights[i]).sum() for i in which)
            grads.append(torch.autograd.grad(loss, (c, r)))
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b)
    c, r = center[:1, :6].clone().requires_grad_(), radius[:1, :6].clone().requires_grad_()
    assert torch.autograd.gradcheck(fast, (c, r))


def test_residual_blocks_keep_the_term_slots_of_their_input():
    """Conv and ReLU keep the slots (same ids), so a residual sum adds position-wise: no slot growth."""
    torch.manual_seed(0)
    from daic.runtime import CorrelateMax

    block = Residual([Conv2D(2, 2, 1)], [Conv2D(2, 2, 3, padding=1), ReLU(), Conv2D(2, 2, 3, padding=1)])
    net = Sequential(CorrelateMax(6), Conv2D(1, 2, 3, padding=1), ReLU(), block, ReLU(), block)
    x = HybridZonotope.from_bounds(torch.zeros(3, 1, 5, 5), torch.ones(3, 1, 5, 5))
    out = net.abstract(x, AbstractContext(training=True))
    assert out.m == 6
