"""What every abstract domain's value offers: the interface layers, goals and certificates talk to.

A domain is a class of values (`Box`, `HybridZonotope`, `Symbolic`) that

- runs a layer: ``value.through(layer, ctx)`` calls the layer's method for this domain (``abstract_box``,
  ``abstract_hz``, ...), so that a layer holds its transformer for every domain and adding a domain adds
  one method per layer and touches no dispatch site;
- sums and concatenates branches (``a + b``, ``type(a).cat(values, dim)``);
- concretizes: interval ``bounds()``, and the least value of linear functions of its neurons
  (``linear_lower``), which bounds the margins ``y_t - y_j`` with the specification applied to the
  value itself or folded into the last layer;
- gives a training loss (``worst_case_loss``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:
    from daic.runtime.context import AbstractContext


class Element:
    """Base class of the abstract values; a batch of ``B`` elements, each over the features ``F``."""

    __slots__ = ()

    def through(self, layer: Any, ctx: AbstractContext) -> Element:
        """The value after ``layer``."""
        raise NotImplementedError

    def bounds(self) -> tuple[Tensor, Tensor]:
        """Interval concretization: ``(lower, upper)``, each ``(B, *F)``."""
        raise NotImplementedError

    def centre(self) -> Tensor:
        """``(B, *F)``: the centre of the interval concretization."""
        lower, upper = self.bounds()
        return (lower + upper) / 2

    def linear_lower(self, coeffs: Tensor, bias: Tensor | None = None) -> Tensor:
        """``(B, S)``: for each row ``s``, a lower bound of ``sum_f coeffs[b, s, f] * v[f] + bias[b, s]`` over
        the element's points ``v``; ``coeffs`` is ``(B, S, *F)``."""
        raise NotImplementedError

    def margin_upper(self, target: Tensor) -> Tensor:
        """``(B, C)``: an upper bound of ``y_j - y_t`` for every class ``j`` (0 at ``j = t``)."""
        like = self.bounds()[0]
        rows, others = margin_others(target, like.shape[1], like.dtype)
        return spread_margins(self.linear_lower(rows), others, like.shape[1])

    def worst_case_loss(self, target: Tensor) -> Tensor:
        """Cross-entropy on the worst-case logits, per example (Table 2's loss for abstract goals).

        Cross-entropy is invariant to shifting all logits, so the logits ``z_j = ub(y_j - y_t)``, ``z_t = 0``
        give the largest cross-entropy of any point in the element.
        """
        return F.cross_entropy(self.margin_upper(target), target, reduction="none")

    @staticmethod
    def cat(values: Sequence[Element], dim: int = 1) -> Element:
        raise NotImplementedError


def margin_others(target: Tensor, classes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The specification of the margins: ``rows`` ``(B, C - 1, C)``, row ``k`` being ``e_t - e_j`` for the
    ``k``-th class ``j != t`` (the margin ``y_t - y_j``), and those classes ``others`` ``(B, C - 1)``."""
    b = target.shape[0]
    keep = torch.ones((b, classes), dtype=torch.bool, device=target.device)
    keep = keep.scatter(1, target[:, None], False)
    others = torch.arange(classes, device=target.device).expand(b, classes)[keep].view(b, classes - 1)
    eye = torch.eye(classes, dtype=dtype, device=target.device)
    return eye[target].unsqueeze(1) - eye[others], others


def spread_margins(lower: Tensor, others: Tensor, classes: int) -> Tensor:
    """``(B, C)`` upper bounds of ``y_j - y_t`` (0 at ``t``) from lower bounds ``(B, C - 1)`` of the margins
    ``y_t - y_j`` of the classes ``others``."""
    upper = lower.new_zeros((lower.shape[0], classes))
    return upper.scatter(1, others, -lower)


def at_target(x: Tensor, target: Tensor) -> Tensor:
    """``x[..., b, target[b]]`` for ``x`` of shape ``(..., B, C)``, kept as ``(..., B, 1)``."""
    index = target.view(*([1] * (x.dim() - 2)), -1, 1).expand(*x.shape[:-1], 1)
    return x.gather(-1, index)
