"""Parameter initialisation for certified training.

`ibp_init_` follows the IBP initialisation of Shi et al., "Fast Certified Robust Training with Short
Warmup" (NeurIPS 2021): every weight of a Conv2D/Linear except the classifier's is drawn from
``N(0, 2*pi / fan_in**2)``. Their analysis shows this keeps the expected interval radius constant from layer
to layer at initialisation, where the usual Kaiming/Xavier schemes make interval bounds grow exponentially
with depth. As in their code the last layer keeps the standard PyTorch-style draw
(``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``), and biases start at zero (as in the IBP paper of Gowal et al.).
Their code halves the layer that consumes a residual sum; here the last affine layer of each non-empty
branch of a `Residual` is halved instead, which gives the sum the same expected radius as one branch
while keeping the rule local to the block.

Everything is drawn on the CPU from one seeded `torch.Generator` in module order and then copied to each
parameter's device and dtype, so the same seed gives the same network on every device.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from daic.runtime.layers.affine import Conv2D, Linear
from daic.runtime.layers.containers import Residual

_AFFINE = (Conv2D, Linear, nn.Conv2d, nn.Linear)


def _fan_in(weight: torch.Tensor) -> int:
    return int(weight[0].numel())


def _fill(param: torch.Tensor, values: torch.Tensor) -> None:
    with torch.no_grad():
        param.copy_(values.to(device=param.device, dtype=param.dtype))


@torch.no_grad()
def ibp_init_(net: nn.Module, seed: int | None = 0, generator: torch.Generator | None = None) -> nn.Module:
    """Re-initialises every Conv2D/Linear of ``net`` in place (see the module docstring); returns ``net``.

    Pass either ``seed`` or a ``generator`` (which then advances).
    """
    if generator is None:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(0 if seed is None else int(seed))
    layers = [m for m in net.modules() if isinstance(m, _AFFINE)]
    for i, layer in enumerate(layers):
        weight = layer.weight
        fan_in = _fan_in(weight)
        # CPU: drawn in float64 from the seed's CPU generator, the same on any device; copied into the weight
        if i < len(layers) - 1:
            std = math.sqrt(2 * math.pi) / fan_in
            values = torch.randn(weight.shape, generator=generator, dtype=torch.float64) * std
        else:
            bound = 1 / math.sqrt(fan_in)
            values = (torch.rand(weight.shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound
        _fill(weight, values)
        if layer.bias is not None:
            layer.bias.zero_()
    for block in net.modules():
        if isinstance(block, Residual):
            for branch in (block.branch1, block.branch2):
                last = [m for m in branch.modules() if isinstance(m, _AFFINE)]
                if last:
                    last[-1].weight.mul_(0.5)
    return net
