"""What a goal hands the trainer: weighted parts, each saying how it is trained and what it exposes.

A `Part` is one value for the network (a point, or an abstract element) with how its output is read: the
upper bounds of ``y_j - y_t`` and the per-example loss it trains with (`Reading`; CROWN-IBP's reading mixes
two bounds of one linear relaxation). A `JointPart` is two parts trained by one loss of both outputs
(CC-IBP, Exp-IBP). The trainer calls `train` with its forward pass and adds the weighted losses: it needs
to know no kind of part. `train` hands back the passes it ran (`Trained`), whose layers' inputs the trainer
reads (DeepLoss's step losses); a part whose value is the step's epsilon box itself, through the interval
domain, says so (`eps_box`), so that the warm-up regularisers can reuse the bounds its pass met at each ReLU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from daic.runtime.domains import Element, Symbolic, Value
from daic.runtime.domains.element import margin_others, spread_margins
from daic.runtime.layers.base import Pass
from daic.runtime.training.losses import margin_upper, worst_case_loss

Forward = Callable[[Tensor | Element], Pass]
"""The trainer's pass of a value through the network: its output (logits for a point, an element for an
element) and what reached each layer."""


@dataclass(frozen=True)
class Trained:
    """What training a part on a batch gives: its mean loss and the passes it ran, in order."""

    loss: Tensor
    passes: tuple[Pass, ...]


class Reading:
    """How a part's output is read: as the output's own domain bounds it."""

    def margin_upper(self, output: Value, target: Tensor) -> Tensor:
        """(B, C): an upper bound of ``y_j - y_t`` over the output, 0 at ``j = t``."""
        return margin_upper(output, target)

    def loss(self, output: Value, target: Tensor) -> Tensor:
        """(B,): the cross-entropy of the worst-case logits (of the logits, for a point)."""
        return worst_case_loss(output, target)


@dataclass(frozen=True)
class CROWNIBPReading(Reading):
    """CROWN-IBP's bound of a linear relaxation's output (Zhang et al., ICLR 2020): the margins' lower
    bound ``beta * CROWN + (1 - beta) * IBP``, both with the specification folded into the last layers
    (the IBP term skipped at ``beta = 1``, CROWN's at 0). ``fused``: the loss is the log of one bound of
    the summed exponentials (`Symbolic.fused_loss`), one row back-substituted instead of one per class."""

    beta: float
    fused: bool = False

    def margin_upper(self, output: Symbolic, target: Tensor) -> Tensor:
        w = self.beta
        _, others = margin_others(target, output.shape[1], output.analysis.center.dtype)
        if w == 0:
            lower = output.margin_lower(target, until_nonlinear=True)
        elif w == 1:
            lower = output.margin_lower(target)
        else:
            ibp = output.margin_lower(target, until_nonlinear=True)
            lower = w * output.margin_lower(target) + (1 - w) * ibp
        return spread_margins(lower, others, output.shape[1])

    def loss(self, output: Symbolic, target: Tensor) -> Tensor:
        if self.fused:
            return output.fused_loss(target, self.beta)
        return torch.nn.functional.cross_entropy(self.margin_upper(output, target), target, reduction="none")


FOLDED_INTERVALS = CROWNIBPReading(0.0)
"""The interval bounds of the margins with the specification folded into the layers after the last ReLU:
CROWN-IBP's mixture with no CROWN in it, IBP's loss as the literature reports it (the folded `Box` goal)."""


@dataclass
class Part:
    """One value the goal trains on, its weight in the loss, how its output is read, and whether it is
    the step's epsilon box itself through the interval domain (whose ReLU inputs the warm-up regularisers
    may reuse)."""

    value: Tensor | Element
    weight: float = 1.0
    reading: Reading = field(default_factory=Reading)
    eps_box: bool = False

    def train(self, forward: Forward, target: Tensor) -> Trained:
        """The batch's mean loss of this part, and its pass."""
        run = forward(self.value)
        return Trained(self.reading.loss(run.output, target).mean(), (run,))

    def elements(self) -> list[Element]:
        """The abstract elements it propagates (none, for a point)."""
        return [self.value] if isinstance(self.value, Element) else []

    def weighted(self, factor: float) -> Part:
        return Part(self.value, self.weight * factor, self.reading, self.eps_box)

    def moved(self) -> Part:
        """The part, no longer on the step's epsilon box (a goal that changed the box handed it on)."""
        return Part(self.value, self.weight, self.reading, False)


@dataclass
class JointPart:
    """Two parts trained by one loss of both outputs, ``combine(first, second, outputs, target)`` (a
    number for the batch): the losses of De Palma et al. (ICLR 2024) that are not a weighted sum."""

    first: Part
    second: Part
    combine: Callable[[Part, Part, Value, Value, Tensor], Tensor]
    weight: float = 1.0
    eps_box = False

    def train(self, forward: Forward, target: Tensor) -> Trained:
        runs = forward(self.first.value), forward(self.second.value)
        return Trained(self.combine(self.first, self.second, runs[0].output, runs[1].output, target), runs)

    def elements(self) -> list[Element]:
        return self.first.elements() + self.second.elements()

    def weighted(self, factor: float) -> JointPart:
        return JointPart(self.first, self.second, self.combine, self.weight * factor)

    def moved(self) -> JointPart:
        return self
