"""DeepLoss (paper Section 3.3): a provability loss on an intermediate layer's interval concretization."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Value
from daic.runtime.layers.base import AbstractLayer
from daic.runtime.training.schedules import ScheduleLike, as_schedule

Activation = Callable[[Tensor], Tensor]

# The positive activations f a DeepLoss may use, by the names the language gives them.
relu, softplus, elu = F.relu, F.softplus, F.elu
_ACTIVATIONS: dict[str, Activation] = {"relu": relu, "softplus": softplus, "elu": elu}


def deep_loss(lower: Tensor, upper: Tensor, act: Activation = F.relu) -> Tensor:
    """``L_deep`` per sample, averaged over the batch; ``lower`` and ``upper`` are ``(B, n)``.

    For each neuron ``i``:
    ``L_lb,i = max{act(u_j - l_i) | l_j <= l_i}`` and ``L_ub,i = max{act(u_i - l_j) | u_i <= u_j}``
    (``j = i`` included), ``L_deep = 1/(2n) * sum_i (L_lb,i + L_ub,i)``. ``act`` must be non-decreasing, so
    the max moves inside: ``L_lb,i = act(max{u_j | l_j <= l_i} - l_i)``. That max is a running maximum of
    ``u`` in the order of increasing ``l``, read at the *last* position whose ``l`` equals ``l_i`` (ties all
    count, as the condition is ``<=``); ``L_ub`` is the mirror image with a running minimum. Sort, cummax and
    searchsorted make it O(n log n) in time and O(n) in memory.
    """
    if lower.dim() != 2 or lower.shape != upper.shape:
        raise ValueError("deep_loss expects lower and upper of the same shape (B, n)")
    n = lower.shape[1]
    lower, upper = lower.contiguous(), upper.contiguous()

    by_lower, order = lower.sort(dim=1)
    running_max_upper = upper.gather(1, order).cummax(dim=1).values
    last_tie = torch.searchsorted(by_lower, lower, right=True) - 1
    loss_lb = act(running_max_upper.gather(1, last_tie) - lower)

    by_upper, order = upper.sort(dim=1)
    running_min_lower = lower.gather(1, order).flip(1).cummin(dim=1).values.flip(1)
    first_tie = torch.searchsorted(by_upper, upper, right=False)
    loss_ub = act(upper - running_min_lower.gather(1, first_tie))

    return ((loss_lb + loss_ub).sum(dim=1) / (2 * n)).mean()


class DeepLoss(AbstractLayer):
    """Adds ``weight(t) * L_deep`` of its input to a training step's loss (`step_loss`, which the trainer
    reads from the pass's trace); the value passes through unchanged.

    ``weight`` is a schedule of the fractional epoch (a number is a constant). ``act`` is ``relu`` (the
    paper's choice), another non-decreasing activation, or its name. The reference implementation mixed the
    final loss as ``(1 - w) * loss + w * L_deep``; here the layer only contributes ``w * L_deep``, and the
    training loop decides how to combine it.
    """

    def __init__(
        self, weight: ScheduleLike = 0.01, act: Activation | str = "relu", only_train: bool = False
    ) -> None:
        super().__init__(only_train)
        self.weight = as_schedule(weight)
        if isinstance(act, str):
            if act not in _ACTIVATIONS:
                raise ValueError(f"DeepLoss: unknown activation {act!r}; known: {sorted(_ACTIVATIONS)}")
            act = _ACTIVATIONS[act]
        self.act = act

    def abstract(self, x: Value, ctx: AbstractContext) -> Value:
        """The value itself, in every domain: the layer only adds to the step's loss."""
        return x

    def step_loss(self, x: Value, ctx: AbstractContext) -> Tensor | None:
        """The weighted loss of the value's interval bounds, in any domain (None on points, at test time
        for a training-only layer, and while the weight is 0)."""
        if isinstance(x, Tensor) or (self.only_train and not ctx.training):
            return None
        w = self.weight(ctx.t)
        if w == 0.0:
            return None
        lower, upper = x.bounds()
        return w * deep_loss(lower.flatten(1), upper.flatten(1), self.act)

    def extra_repr(self) -> str:
        act = getattr(self.act, "__name__", self.act)
        return f"weight={self.weight!r}, act={act}, only_train={self.only_train}"
