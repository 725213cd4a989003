"""Random networks of every layer kind and abstract layer, for the soundness tests of every domain.

Shapes are tracked as (C, H, W) in the convolutional part and (n,) in the dense part. Weights are drawn by
`randomize` at a scale where many ReLUs cross zero. Every member of the activation family is drawn where
a ReLU may stand.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from torch import nn

from daic.runtime import (
    Abs,
    AvgPool2D,
    BatchNorm,
    Concat,
    Conv2D,
    CorrelateAll,
    CorrelateFixed,
    CorrelateMax,
    CorrelateMaxPool,
    DecorrelateAll,
    DecorrelateMin,
    DeepLoss,
    Flatten,
    HardTanh,
    LeakyReLU,
    Lin,
    Linear,
    MaxPool2D,
    Normalize,
    Regroup,
    ReLU,
    Residual,
    Sequential,
    Sigmoid,
    Tanh,
)

ACTIVATIONS = (ReLU, lambda: LeakyReLU(0.1), Abs, HardTanh, Sigmoid, Tanh)
"""The activation family, ReLU first (hypothesis shrinks towards it)."""


@st.composite
def activations(draw) -> nn.Module:
    return draw(st.sampled_from(ACTIVATIONS))()


@st.composite
def abstract_layers(draw, shape: tuple[int, ...]) -> nn.Module:
    only_train = draw(st.booleans())
    kinds = ["all", "fixed", "max", "decorr_all", "decorr_min", "deep"]
    if len(shape) == 3 and shape[1] >= 2 and shape[2] >= 2:
        kinds.append("maxpool")
    kind = draw(st.sampled_from(kinds))
    if kind == "all":
        return CorrelateAll(only_train=only_train)
    if kind == "fixed":
        return CorrelateFixed(draw(st.integers(0, 40)), only_train=only_train)
    if kind == "max":
        return CorrelateMax(draw(st.integers(0, 40)), only_train=only_train)
    if kind == "decorr_all":
        return DecorrelateAll(only_train=only_train)
    if kind == "decorr_min":
        return DecorrelateMin(draw(st.integers(0, 6)), num_to_keep=draw(st.booleans()), only_train=only_train)
    if kind == "deep":
        return DeepLoss(draw(st.sampled_from([0.5, Lin(0, 1, 2, 1)])), only_train=only_train)
    c, h, w = shape
    if draw(st.booleans()) and c >= 1:
        kernel = (draw(st.integers(1, c)), draw(st.integers(1, min(2, h))), draw(st.integers(1, min(2, w))))
    else:
        kernel = (draw(st.integers(1, min(3, h))), draw(st.integers(1, min(3, w))))
    stride = draw(st.integers(1, 2))
    return CorrelateMaxPool(kernel, stride, first_layer=draw(st.booleans()), only_train=only_train)


@st.composite
def same_shape_branch(draw, c: int, shape: tuple[int, int, int], adds: bool | None) -> list[nn.Module]:
    """A residual branch keeping ``(C, H, W)``: abstract layers, ReLUs and shape-preserving convs.

    ``adds`` forces a correlation layer (True) or a DecorrelateMin (False) at its start.
    """
    layers: list[nn.Module] = []
    if adds is True:
        layers.append(CorrelateMax(draw(st.integers(1, 6)), only_train=False))
    elif adds is False:
        layers.append(DecorrelateMin(draw(st.integers(0, 3)), only_train=False))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["conv3", "conv1", "relu", "abstract"]))
        if kind == "conv3":
            layers.append(Conv2D(c, c, 3, padding=1))
        elif kind == "conv1":
            layers.append(Conv2D(c, c, 1))
        elif kind == "relu":
            layers.append(draw(activations()))
        else:
            layers.append(draw(abstract_layers(shape)))
    return layers


@st.composite
def networks(draw) -> tuple[Sequential, tuple[int, int, int]]:
    c = draw(st.integers(1, 3))
    h = draw(st.integers(3, 6))
    w = draw(st.integers(3, 6))
    in_shape = (c, h, w)
    layers: list[nn.Module] = []
    if draw(st.booleans()):
        mean = draw(st.lists(st.floats(-1, 1), min_size=c, max_size=c))
        magnitude = draw(st.lists(st.floats(0.2, 2), min_size=c, max_size=c))
        sign = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=c, max_size=c))
        std = [s * v for s, v in zip(sign, magnitude, strict=True)]
        layers.append(Normalize(mean, std))
    for _ in range(draw(st.integers(1, 5))):
        kinds = [
            "conv",
            "relu",
            "avgpool",
            "maxpool",
            "abstract",
            "residual",
            "concat",
            "batchnorm",
            "regroup",
        ]
        kind = draw(st.sampled_from(kinds))
        if kind == "conv":
            out = draw(st.integers(1, 3))
            k = draw(st.integers(1, min(3, h, w)))
            s = draw(st.integers(1, 2))
            p = draw(st.integers(0, 1))
            layers.append(Conv2D(c, out, k, stride=s, padding=p))
            c, h, w = out, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif kind == "relu":
            layers.append(draw(activations()))
        elif kind == "batchnorm":
            layers.append(BatchNorm(c))
        elif kind == "regroup":  # rows and columns swapped, or every channel's values dealt across channels
            if draw(st.booleans()):
                layers.append(Regroup([w, h, c], view=(c, h, w), axes=(0, 2, 1), in_shape=(c, h, w)))
                h, w = w, h
            else:
                layers.append(Regroup([h, w, c], view=(c, h * w), axes=(1, 0), in_shape=(c, h, w)))
        elif kind == "avgpool" and min(h, w) >= 2:
            k = draw(st.integers(1, 2))
            p = draw(st.integers(0, k // 2))
            layers.append(AvgPool2D(k, stride=draw(st.integers(1, 2)), padding=p))
            s = layers[-1].stride[0]
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif kind == "maxpool" and min(h, w) >= 2:
            k = draw(st.integers(1, 3 if min(h, w) >= 3 else 2))
            s = draw(st.integers(1, 2))
            p = draw(st.integers(0, k // 2))
            layers.append(MaxPool2D(k, stride=s, padding=p))
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        elif kind == "abstract":
            layers.append(draw(abstract_layers((c, h, w))))
        elif kind == "residual":
            add_first = draw(st.sampled_from([True, False, None]))
            other = None if add_first is None else not add_first
            b1 = draw(same_shape_branch(c, (c, h, w), add_first))
            b2 = draw(same_shape_branch(c, (c, h, w), other))
            layers.append(Residual(b1, b2))
        elif kind == "concat":
            add_first = draw(st.booleans())
            b1 = draw(same_shape_branch(c, (c, h, w), add_first))
            b2 = draw(same_shape_branch(c, (c, h, w), not add_first))
            extra = draw(st.integers(1, 2))
            b2.append(Conv2D(c, extra, 1))
            layers.append(Concat(b1, b2, dim=1))
            c = c + extra
    n = c * h * w
    hidden = draw(st.integers(1, 6))
    layers.append(Linear(n, hidden))
    if draw(st.booleans()):
        layers.append(BatchNorm(hidden))
    layers.append(draw(activations()))
    if draw(st.booleans()):
        layers.append(draw(abstract_layers((hidden,))))
    if draw(st.booleans()):
        layers.append(Flatten())
    layers.append(Linear(hidden, draw(st.integers(1, 4))))
    return Sequential(*layers), in_shape


def randomize(net: nn.Module, seed: int) -> None:
    """Weights of a moderate scale and biases large enough that many ReLUs cross zero. BatchNorm layers get
    random statistics and are put in eval mode, so that every pass uses the same (running) statistics."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (Conv2D, Linear)):
                fan_in = module.weight[0].numel()
                w = (
                    torch.randn(module.weight.shape, generator=g, dtype=torch.float64)
                    * 1.5
                    / math.sqrt(fan_in)
                )
                module.weight.copy_(w)
                module.bias.copy_(torch.randn(module.bias.shape, generator=g, dtype=torch.float64) * 0.3)
            if isinstance(module, BatchNorm):
                n = module.features
                module.weight.copy_(torch.randn(n, generator=g, dtype=torch.float64) * 1.5)
                module.bias.copy_(torch.randn(n, generator=g, dtype=torch.float64) * 0.3)
                module.running_mean.copy_(torch.randn(n, generator=g, dtype=torch.float64) * 0.3)
                module.running_var.copy_(torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.1)
                module.eval()


def input_box(
    shape: tuple[int, ...], batch: int, seed: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    center = torch.rand((batch, *shape), generator=g, dtype=torch.float64) * 2 - 1
    radius = torch.rand((batch, *shape), generator=g, dtype=torch.float64) * 0.4
    radius = radius * (torch.rand(radius.shape, generator=g) < 0.8)  # some dimensions are exact
    return (center - radius).to(device), (center + radius).to(device)


def classifier_case(
    net: nn.Module, shape: tuple[int, ...], seed: int
) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The network randomized in float64, a box of two images, and their targets (the first and the last
    class): what the margin tests bound; None when the network has fewer than two outputs."""
    randomize(net, seed)
    net = net.double()
    lower, upper = input_box(shape, batch=2, seed=seed, device="cpu")
    classes = net(lower).shape[1]
    if classes < 2:
        return None
    return net, lower, upper, torch.tensor([0, classes - 1])


@st.composite
def branchy_networks(draw) -> tuple[Sequential, tuple[int, int, int]]:
    """Networks whose residual and concat blocks always have one branch adding terms, one removing."""
    c, h, w = draw(st.integers(1, 2)), draw(st.integers(2, 4)), draw(st.integers(2, 4))
    layers: list[nn.Module] = [CorrelateMax(draw(st.integers(1, 8)), only_train=False)]
    cc = c
    for _ in range(draw(st.integers(1, 3))):
        add_first = draw(st.booleans())
        b1 = draw(same_shape_branch(cc, (cc, h, w), add_first))
        b2 = draw(same_shape_branch(cc, (cc, h, w), not add_first))
        b1.append(Conv2D(cc, cc, 1))
        b2.append(Conv2D(cc, cc, 3, padding=1))
        if draw(st.booleans()):
            layers.append(Residual(b1, b2))
        else:
            layers.append(Concat(b1, b2, dim=1))
            cc = 2 * cc
        layers.append(draw(activations()))
    layers.append(Linear(cc * h * w, draw(st.integers(1, 4))))
    return Sequential(*layers), (c, h, w)
