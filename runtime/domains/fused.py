"""Hand-written gradients for the hot spots of hybrid-zonotope training.

The correlated terms ``(m, B, *F)`` are the largest tensors of an abstract pass, and on them the elementwise
passes, not the convolutions, set the pace. These functions compute the same values and gradients as the
composed PyTorch ops (the tests compare both) with fewer full-size temporaries.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class _AbsSumTerms(torch.autograd.Function):
    """``errors.abs().sum(0)``; backward ``sign(errors) * grad`` in one buffer."""

    @staticmethod
    def forward(ctx, errors: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(errors)
        return errors.abs().sum(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (errors,) = ctx.saved_tensors
        return torch.sign(errors).mul_(grad)


CHUNK_BYTES = 8 * 2**20
"""Size of the term chunks that gradient-free passes work through: small enough that the temporaries stay
in the allocator's reuse range (a fresh multi-GB temporary costs more in page faults than its arithmetic)."""


def term_chunks(errors: Tensor) -> range:
    """Starts of the chunks of ``errors``' leading (term) axis that hold about `CHUNK_BYTES` each."""
    per_term = max(1, errors[0].numel() * errors.element_size()) if errors.shape[0] else 1
    return range(0, errors.shape[0], max(1, CHUNK_BYTES // per_term))


def abs_sum_terms(errors: Tensor) -> Tensor:
    """Sum over the term axis of the absolute coefficients: ``(m, B, *F) -> (B, *F)``."""
    if torch.is_grad_enabled() and errors.requires_grad:
        return _AbsSumTerms.apply(errors)
    # Without a gradient, chunk by chunk: no temporary as large as ``errors`` (certification's are GBs).
    step = term_chunks(errors).step
    total = errors[:step].abs().sum(0)
    for start in range(step, errors.shape[0], step):
        total += errors[start : start + step].abs().sum(0)
    return total


class _SplitTerms(torch.autograd.Function):
    """Gathers the kept terms and sums the absolute values of the removed ones (DecorrelateMin).

    ``kept`` is ``(k, B)`` term indices per sample, ``removed`` the ``(m, B)`` 0/1 mask of the others.
    Backward: the removed terms get ``sign(e) * grad_sum``, the kept ones ``grad_kept``; the two sets are
    disjoint, so the kept gradient is written in place rather than accumulated into a zero buffer.
    """

    @staticmethod
    def forward(ctx, errors: Tensor, kept: Tensor, removed: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        batch_idx = torch.arange(errors.shape[1], device=errors.device)[None, :].expand_as(kept)
        mask = removed.reshape(*removed.shape, *([1] * (errors.dim() - 2)))
        removed_sum = errors.abs().mul_(mask).sum(0)
        ctx.save_for_backward(errors, kept, mask)
        return errors[kept, batch_idx], removed_sum

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_kept: Tensor | None, grad_sum: Tensor | None):  # type: ignore[override]
        errors, kept, mask = ctx.saved_tensors
        # sign(e) * grad on the removed terms; 0 on the kept ones (overwritten below).
        grad = torch.zeros_like(errors) if grad_sum is None else torch.sign(errors).mul_(grad_sum).mul_(mask)
        if grad_kept is not None:
            batch_idx = torch.arange(errors.shape[1], device=errors.device)[None, :].expand_as(kept)
            grad.index_put_((kept, batch_idx), grad_kept)
        return grad, None, None


def split_terms(errors: Tensor, kept: Tensor, removed: Tensor) -> tuple[Tensor, Tensor]:
    """``(errors[kept], sum of |errors| over the removed terms)``; see `_SplitTerms`."""
    return _SplitTerms.apply(errors, kept, removed)
