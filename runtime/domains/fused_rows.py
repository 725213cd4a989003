"""The two elementwise steps of back-substitution, with gradients, in as few passes as the device allows.

Rows ``A`` are ``(G, S, *F)``: group ``g``'s ``S`` rows over the neurons. Maps of the neurons are per group
(``(G, *F)``) or shared (``(1, *F)``); a lower slope may be per row (``(G, S, *F)``, alpha-CROWN).

- `relaxed_rows`: the rows through ``ls x <= f(x) <= us x + ub`` for lower bounds, ``A+ ls + A- us`` and the
  constant ``sum A- ub``;
- `bound_rows`: the least value of each row over a box, ``sum A c - |A| r``.

On the CPU both run as the fused kernels of `runtime.native` (one pass each way, forward and backward, where
the composed ops take about seven forward and ten backward: most of a CROWN-IBP step's time outside its
convolutions); elsewhere, or without a compiler, as the composed ATen ops, which give the same values up to
the order of a sum.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from daic.runtime import native


def relaxed_rows(
    A: Tensor, lower_slope: Tensor, upper_slope: Tensor, upper_bias: Tensor
) -> tuple[Tensor, Tensor]:
    """``(A+ ls + A- us, sum A- ub)``; maps ``(G or 1, *F)``, ``lower_slope`` also ``(G, S, *F)``."""
    inputs = (A, lower_slope, upper_slope, upper_bias)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in inputs)):
        fused = native.relaxed(*inputs)
        if fused is not None:
            return fused
    elif _backward_fits(*inputs):
        return _Relaxed.apply(*inputs)
    return _relaxed_aten(*inputs)


def bound_rows(A: Tensor, center: Tensor, radius: Tensor) -> Tensor:
    """``(G, S)``: ``sum A c - |A| r``; ``center`` and ``radius`` ``(G or 1, *F)``, alike."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in (A, center, radius))):
        fused = native.bound(A, center, radius)
        if fused is not None:
            return fused
    elif not (center.requires_grad or radius.requires_grad) and _walkable(A, center, radius):
        return _Bound.apply(A, center, radius)
    per_row = lambda m: m.unsqueeze(1)  # noqa: E731
    return (A * per_row(center)).flatten(2).sum(2) - (A.abs() * per_row(radius)).flatten(2).sum(2)


def _relaxed_aten(A: Tensor, ls: Tensor, us: Tensor, ub: Tensor) -> tuple[Tensor, Tensor]:
    positive = A.clamp(min=0)
    negative = A - positive
    per_row = lambda m: m if m.dim() == A.dim() else m.unsqueeze(1)  # noqa: E731
    moved = positive * per_row(ls) + negative * per_row(us)
    return moved, (negative * per_row(ub)).flatten(2).sum(2)


def _walkable(A: Tensor, *maps: Tensor) -> bool:
    """Whether the native kernels can walk the rows and maps (the layout alone: no gradient is taken)."""
    with torch.no_grad():
        return native.has("relaxed", A) and native._rows_and_maps(A, *maps) is not None


def _backward_fits(A: Tensor, ls: Tensor, us: Tensor, ub: Tensor) -> bool:
    """Whether the fused backward applies: maps per group (each group's map gradients are summed on one
    thread) and every tensor walkable alike."""
    per_row = ls.shape == A.shape
    if not all(m.shape[0] == A.shape[0] for m in (ls, us, ub)) or (per_row and ls.stride() != A.stride()):
        return False
    return _walkable(A, us, ub, *(() if per_row else (ls,)))


class _Relaxed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A: Tensor, ls: Tensor, us: Tensor, ub: Tensor):  # type: ignore[override]
        fused = native.relaxed(A, ls, us, ub)
        if fused is None:  # pragma: no cover - `relaxed_rows` checked the layout
            raise RuntimeError("the back-substitution kernel refused rows it was given")
        ctx.save_for_backward(A, ls, us, ub)
        return fused

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor | None, grad_bias: Tensor | None):  # type: ignore[override]
        A, ls, us, ub = ctx.saved_tensors
        grad_out = torch.zeros_like(A) if grad_out is None else _laid_out_like(grad_out, A)
        grad_bias = A.new_zeros(A.shape[:2]) if grad_bias is None else grad_bias.contiguous()
        grads = native.relaxed_backward(A, ls, us, ub, grad_out, grad_bias)
        if grads is not None:
            return grads
        # The composed ops' gradients (an incoming gradient the kernel cannot walk).
        positive, per_row = A > 0, ls.shape == A.shape
        spread = lambda m: m if m.dim() == A.dim() else m.unsqueeze(1)  # noqa: E731
        folded = lambda t: t if per_row else t.sum(1)  # noqa: E731
        negative = A.clamp(max=0)
        grad_A = torch.where(
            positive,
            grad_out * spread(ls),
            grad_out * spread(us) + grad_bias.view(*grad_bias.shape, *[1] * (A.dim() - 2)) * spread(ub),
        )
        grad_ls = A.clamp(min=0) * grad_out
        return (
            grad_A,
            folded(grad_ls),
            (negative * grad_out).sum(1),
            (negative * grad_bias.view(*grad_bias.shape, *[1] * (A.dim() - 2))).sum(1),
        )


def _laid_out_like(t: Tensor, like: Tensor) -> Tensor:
    """`t` with the strides of `like` (same shape), copied only if they differ."""
    return t if t.stride() == like.stride() else torch.empty_like(like).copy_(t)


class _Bound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A: Tensor, center: Tensor, radius: Tensor):  # type: ignore[override]
        ctx.save_for_backward(A, center, radius)
        return native.bound(A, center, radius)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        A, center, radius = ctx.saved_tensors
        grad = grad.contiguous()
        grad_A = native.bound_backward(A, center, radius, grad)
        if grad_A is None:  # the composed ops' gradient
            signed = torch.where(A > 0, 1.0, torch.where(A < 0, -1.0, 0.0)).to(A.dtype)
            grad_A = grad.view(*grad.shape, *[1] * (A.dim() - 2)) * (
                center.unsqueeze(1) - signed * radius.unsqueeze(1)
            )
        return grad_A, None, None
