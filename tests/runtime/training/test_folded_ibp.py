"""The folded `Box` goal is IBP as the literature defines it: the specification matrix ``C = e_t - e_j``
times the last linear layer, bounded by the intervals of that layer's input. Checked against that formula
computed by hand (auto_LiRPA's ``compute_bounds(method="IBP", C=C)``) through a scheme's loss, on a network
with a residual block and one with BatchNorm, and against the paper's reading of the same box."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime import BatchNorm, Conv2D, CorrelateAll, Flatten, Linear, ReLU, Residual, Sequential
from daic.runtime.context import AbstractContext
from daic.runtime.data.sets import Digits
from daic.runtime.domains import Symbolic
from daic.runtime.layers.base import trace
from daic.runtime.layers.normalization import fixed_statistics, measure
from daic.runtime.training.goals import EpsBox
from daic.runtime.training.regularisers import interval_relu_inputs, warmup_regulariser
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule

EPS = 0.05


def residual_net() -> Sequential:
    torch.manual_seed(3)
    block = Residual([Conv2D(4, 4, 3, padding=1), ReLU(), Conv2D(4, 4, 3, padding=1)], None)
    return Sequential(Conv2D(1, 4, 3, padding=1), ReLU(), block, ReLU(), Flatten(), Linear(64, 10)).double()


def batchnorm_net() -> Sequential:
    torch.manual_seed(4)
    net = Sequential(
        Conv2D(1, 4, 3, stride=2, padding=1), BatchNorm(4), ReLU(), Flatten(),
        Linear(16, 12), BatchNorm(12), ReLU(), Linear(12, 10),
    ).double()  # fmt: skip
    with torch.no_grad():  # affine parameters that are not the identity, so that they count
        for bn in (net[1], net[5]):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.3, 0.3)
    return net


def batch() -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.rand(12, 1, 4, 4, generator=g, dtype=torch.float64), torch.randint(0, 10, (12,), generator=g)


def interval_layer(layer, centre: Tensor, radius: Tensor, clean: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One layer of interval bound propagation by hand; `clean` is the clean batch at the layer's input,
    whose statistics BatchNorm uses in a training step (as auto_LiRPA's does: those of the forward pass)."""
    if isinstance(layer, ReLU):
        low, up = (centre - radius).clamp(min=0), (centre + radius).clamp(min=0)
        return (low + up) / 2, (up - low) / 2, clean.clamp(min=0)
    if isinstance(layer, Flatten):
        return centre.flatten(1), radius.flatten(1), clean.flatten(1)
    if isinstance(layer, Residual):
        inner = (centre, radius, clean)
        for sub in layer.branch1:
            inner = interval_layer(sub, *inner)
        return centre + inner[0], radius + inner[1], clean + inner[2]
    if isinstance(layer, BatchNorm):
        dims = [0, *range(2, clean.dim())]
        mean, var = clean.mean(dims), clean.var(dims, unbiased=False)
        shape = (1, -1) + (1,) * (clean.dim() - 2)
        scale = (layer.weight / torch.sqrt(var + layer.eps)).view(shape)
        shift = layer.bias.view(shape) - mean.view(shape) * scale
        return centre * scale + shift, radius * scale.abs(), clean * scale + shift
    if isinstance(layer, Conv2D):
        conv = lambda x, w, b: F.conv2d(x, w, b, layer.stride, layer.padding)  # noqa: E731
        return conv(centre, layer.weight, layer.bias), conv(radius, layer.weight.abs(), None), layer(clean)
    if isinstance(layer, CorrelateAll):  # it changes how a domain holds the set, not the set
        return centre, radius, clean
    if isinstance(layer, Linear):
        return centre @ layer.weight.T + layer.bias, radius @ layer.weight.abs().T, layer(clean)
    raise AssertionError(f"no interval rule for {layer}")


def folded_ibp_loss(net: Sequential, x: Tensor, y: Tensor) -> Tensor:
    """auto_LiRPA's IBP loss with its specification matrix: the margins' lower bounds ``C W c + C b -
    |C W| r`` at the last linear layer's input box ``(c, r)``, and cross-entropy with the target's logit
    0 and class j's ``-lb_j``, as its examples train."""
    lower, upper = (x - EPS).clamp(0, 1), (x + EPS).clamp(0, 1)
    centre, radius, clean = (lower + upper) / 2, (upper - lower) / 2, x
    for layer in list(net)[:-1]:
        centre, radius, clean = interval_layer(layer, centre, radius, clean)
    last = net[-1]
    eye = torch.eye(10, dtype=x.dtype)
    spec = (eye[y].unsqueeze(1) - eye.unsqueeze(0))[eye[y] == 0].view(len(y), 9, 10)
    rows, constant = spec @ last.weight, spec @ last.bias
    low = (rows @ centre.unsqueeze(2)).squeeze(2) + constant - (rows.abs() @ radius.unsqueeze(2)).squeeze(2)
    logits = torch.cat([torch.zeros_like(low[:, :1]), -low], 1)
    return F.cross_entropy(logits, torch.zeros_like(y))


def scheme_loss(net: Sequential, goal, x: Tensor, y: Tensor, **fields) -> Tensor:
    scheme = Scheme(data=Digits(image=(1, 4, 4), classes=10), epsilon=EPS, goal=goal, epochs=1, **fields)
    return LossModule(net, scheme, (0.0, 1.0))(x, y, 0.5, torch.Generator())


@pytest.mark.parametrize("make", [residual_net, batchnorm_net])
def test_the_folded_box_loss_is_ibp_with_the_specification_matrix(make):
    net = make()
    net.train()
    x, y = batch()
    expected = folded_ibp_loss(net, x, y)
    found = scheme_loss(net, EpsBox(folded=True), x, y)
    assert torch.allclose(found, expected, rtol=1e-12, atol=0)
    # The paper's reading of the same box takes the worst-case logits, each bounded on its own: looser.
    assert scheme_loss(net, EpsBox(), x, y) > found + 1e-3
    found.backward()
    assert all(p.grad is not None for p in net.parameters())


def test_the_papers_box_folds_too_where_the_network_correlates_before_its_classifier():
    """The paper's networks end with `CorrelateAll` before the last layer: the hybrid zonotope then
    carries every neuron there as a term, and its margins are the folded ones."""
    plain = batchnorm_net()
    layers = list(plain)
    net = Sequential(*layers[:-1], CorrelateAll(only_train=False), layers[-1]).train()
    x, y = batch()
    assert torch.allclose(scheme_loss(net, EpsBox(), x, y), folded_ibp_loss(net, x, y), rtol=1e-10)


def test_a_folded_box_pass_hands_the_warmup_regularisers_its_interval_bounds():
    net = batchnorm_net().train()
    x, _ = batch()
    lower, upper = (x - EPS).clamp(0, 1), (x + EPS).clamp(0, 1)
    with fixed_statistics(net):
        measure(net, x, update=False)
        run = trace(net, Symbolic.input(lower, upper), AbstractContext(training=True))
        handed = interval_relu_inputs(run, "hybrid")
        assert handed is not None and len(handed) == 2
        found = warmup_regulariser(net, lower, upper, relu_inputs=handed)
        assert found > 0 and torch.allclose(found, warmup_regulariser(net, lower, upper), rtol=1e-12)
