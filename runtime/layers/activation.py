"""ReLU and its abstract transformers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..context import AbstractContext
from ..domains import Box, HybridZonotope
from .base import AbstractMixin


class _BoxReLU(torch.autograd.Function):
    """(center, radius) -> the box of relu on the bounds, in fewer memory passes than composed ops.

    Forward: ``u = relu(c + r)``, ``l = relu(c - r)``, ``r' = (u - l) / 2``, ``c' = l + r'``.
    Backward, by cases: an active neuron (``l > 0``) passes ``(g_c', g_r')`` through; a crossing one
    (``u > 0 >= l``, output ``[0, u]``) sends ``(g_c' + g_r') / 2`` to both ``c`` and ``r``; a dead one
    nothing. The box ReLU is a hot spot of interval training, hence the hand-written gradient.
    """

    @staticmethod
    def forward(ctx, center: Tensor, radius: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        upper = torch.add(center, radius).relu_()
        lower = torch.sub(center, radius).relu_()
        new_radius = torch.sub(upper, lower).mul_(0.5)
        new_center = torch.add(lower, new_radius)
        ctx.save_for_backward(upper, lower)
        return new_center, new_radius

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_center: Tensor | None, grad_radius: Tensor | None):  # type: ignore[override]
        upper, lower = ctx.saved_tensors
        if grad_center is None:
            grad_center = torch.zeros_like(upper)
        if grad_radius is None:
            grad_radius = torch.zeros_like(upper)
        # Both saved bounds are relu'd (>= 0), so sign() is a 0/1 mask: 1 where the bound is > 0.
        active = torch.sign(lower)
        crossing = torch.sign(upper).sub_(active)
        shared = torch.add(grad_center, grad_radius).mul_(crossing).mul_(0.5)
        return torch.addcmul(shared, grad_center, active), torch.addcmul(shared, grad_radius, active)


def relu_box(x: Box) -> Box:
    """Exact interval ReLU: ReLU is monotone, so it maps the bounds."""
    center, radius = _BoxReLU.apply(x.center, x.radius)
    return Box(center, radius)


def _relu_masks(lower: Tensor, upper: Tensor) -> tuple[Tensor, Tensor]:
    """0/1 float masks ``keep`` (``l >= 0``) and ``cross`` (``l < 0 < u``).

    Transformers blend with these by multiplication rather than ``torch.where``: on the CPU a bool-mask
    ``where`` is an order of magnitude slower than a multiply. (Bounds are finite, so ``0 * bound`` is 0.)
    """
    keep = (lower >= 0).to(lower.dtype)
    cross = (upper > 0).to(lower.dtype).sub_(keep).clamp_(min=0)
    return keep, cross


def relu_hybrid(x: HybridZonotope) -> HybridZonotope:
    """The reference DiffAI hybrid-zonotope ReLU.

    With ``[l, u]`` the interval concretization: a neuron with ``l >= 0`` is kept as it is; one with
    ``u <= 0`` becomes 0; a crossing one (``l < 0 < u``) becomes the box ``[0, u]``: head = beta = u / 2, its
    correlated coefficients zeroed. The term slots (and ids) are unchanged.
    """
    lower, upper = x.bounds()
    keep, cross = _relu_masks(lower, upper)
    half_u = upper * 0.5
    head = torch.addcmul(x.head * keep, half_u, cross)
    beta = torch.addcmul(x.beta * keep, half_u, cross)
    errors = x.errors * keep if x.m else x.errors
    return x.replace(head, beta, errors)


def relu_deepz(x: HybridZonotope) -> HybridZonotope:
    """The minimal-area zonotope ReLU (DeepZ), with the fresh term folded into the uncorrelated beta.

    For a crossing neuron ``lambda = u / (u - l)``, ``mu = -lambda * l / 2``: ``relu(x)`` lies between
    ``lambda * x`` and ``lambda * x - lambda * l``, i.e. in ``lambda * x + mu +- mu``. Head, beta and
    errors are scaled by ``lambda``; ``mu`` is added to head and to beta (``lambda * beta * b1 + mu * b2``
    over independent ``b1, b2`` is exactly ``(lambda * beta + mu) * b``). Kept neurons have ``lambda = 1``,
    dead ones ``lambda = 0``.
    """
    lower, upper = x.bounds()
    keep, cross = _relu_masks(lower, upper)
    # Width 1 where the neuron does not cross keeps u / width finite there (and its gradient not NaN).
    width = torch.addcmul(1 - cross, upper - lower, cross)
    lam = torch.addcmul(keep, upper / width, cross)
    mu = (lam * lower) * (cross * -0.5)
    head = lam * x.head + mu
    beta = lam * x.beta + mu
    errors = x.errors * lam if x.m else x.errors
    return x.replace(head, beta, errors)


class ReLU(AbstractMixin, nn.Module):
    """ReLU; on hybrid zonotopes the transformer is chosen by ``ctx.relu`` (``"hybrid"`` or ``"deepz"``)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def abstract_box(self, x: Box, ctx: AbstractContext) -> Box:
        return relu_box(x)

    def abstract_hz(self, x: HybridZonotope, ctx: AbstractContext) -> HybridZonotope:
        if ctx.relu == "deepz":
            return relu_deepz(x)
        return relu_hybrid(x)
