"""Losses on network outputs of any domain: a concrete batch of logits, or an abstract element.

Both rest on the same quantity: for each class j, an upper bound of y_j - y_t over the output value, where
t is the target class. Each domain computes it its own way (`Element.margin_upper`): a hybrid zonotope takes
the difference term by term, so the correlations that CorrelateAll kept up to the logits are used.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from daic.runtime.domains import Value
from daic.runtime.domains.element import at_target


def margin_upper(value: Value, target: Tensor) -> Tensor:
    """(B, C): an upper bound of y_j - y_t over the value, 0 at j = t."""
    if isinstance(value, Tensor):
        if value.dim() != 2:
            raise ValueError(f"network outputs must be (batch, classes), got {tuple(value.shape)}")
        return (value - at_target(value, target)).scatter(1, target[:, None], 0.0)
    return value.margin_upper(target)


def worst_case_loss(value: Value, target: Tensor) -> Tensor:
    """Cross-entropy on the worst-case logits of the output (IBP's loss, Table 2's Box loss), per example;
    on a concrete batch, plain cross-entropy."""
    if isinstance(value, Tensor):
        return F.cross_entropy(value, target, reduction="none")
    return value.worst_case_loss(target)


def certified(value: Value, target: Tensor) -> Tensor:
    """(B,) bool: the target class provably wins, lb(y_t - y_j) > 0 for every j != t."""
    upper = margin_upper(value, target)
    others = upper.scatter(1, target[:, None], -float("inf"))
    return others.amax(1) < 0
