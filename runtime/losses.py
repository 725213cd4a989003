"""Losses and certificates on network outputs of any domain.

Both rest on the same quantity: for each class j, an upper bound of y_j - y_t over the output value, where
t is the target class. On a hybrid zonotope the difference is taken term by term before bounding, so the
correlations that CorrelateAll kept up to the logits are used (tighter than subtracting intervals).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .domains import Box, HybridZonotope, Value


def _at(x: Tensor, target: Tensor) -> Tensor:
    """x[..., b, target[b]] for x of shape (..., B, C), kept as (..., B, 1)."""
    index = target.view(*([1] * (x.dim() - 2)), -1, 1).expand(*x.shape[:-1], 1)
    return x.gather(-1, index)


def margin_upper(value: Value, target: Tensor) -> Tensor:
    """(B, C): an upper bound of y_j - y_t over the value, 0 at j = t."""
    if isinstance(value, Tensor):
        upper = value - _at(value, target)
    elif isinstance(value, Box):
        upper = value.center - _at(value.center, target) + value.radius + _at(value.radius, target)
    elif isinstance(value, HybridZonotope):
        head = value.head - _at(value.head, target)
        errors = value.errors
        spread = (errors - _at(errors, target)).abs().sum(0) if errors.shape[0] else torch.zeros_like(head)
        upper = head + spread + value.beta + _at(value.beta, target)
    else:
        raise TypeError(f"not a network output: {type(value).__name__}")
    if upper.dim() != 2:
        raise ValueError(f"network outputs must be (batch, classes), got {tuple(upper.shape)}")
    return upper.scatter(1, target[:, None], 0.0)


def worst_case_loss(value: Value, target: Tensor) -> Tensor:
    """Cross-entropy on the worst-case logits of the output (IBP's loss, Table 2's Box loss), per example.

    Cross-entropy is invariant to shifting all logits, so the logits z_j = ub(y_j - y_t), z_t = 0 give the
    largest cross-entropy of any point in the value's concretization.
    """
    return F.cross_entropy(margin_upper(value, target), target, reduction="none")


def certified(value: Value, target: Tensor) -> Tensor:
    """(B,) bool: the target class provably wins, lb(y_t - y_j) > 0 for every j != t."""
    upper = margin_upper(value, target)
    others = upper.scatter(1, target[:, None], -torch.inf)
    return others.amax(1) < 0
