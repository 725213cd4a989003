"""The context an abstract forward pass runs in."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

RELU_VARIANTS = ("hybrid", "deepz")


@dataclass
class AbstractContext:
    """Passed to every layer's ``abstract(value, ctx)``.

    - ``training``: abstract layers with ``only_train=True`` act only when this is set (at test and
      verification time they are skipped).
    - ``t``: training time as a fractional epoch, the argument of every schedule (DeepLoss's weight).
    - ``relu``: the hybrid-zonotope ReLU transformer, ``"hybrid"`` (the reference DiffAI transformer) or
      ``"deepz"`` (the minimal-area zonotope relaxation). Boxes always use the exact interval ReLU.
    - ``losses``: DeepLoss appends its weighted loss terms here; the training loop adds them to its loss.
    - ``relu_inputs``: when a list, each ReLU appends its input: a box, or for a hybrid zonotope without
      correlated terms the box of its head and beta, else the element (the warm-up regularisers read them).
    """

    training: bool = False
    t: float = 0.0
    relu: str = "hybrid"
    losses: list[Tensor] = field(default_factory=list)
    relu_inputs: list | None = None

    def __post_init__(self) -> None:
        if self.relu not in RELU_VARIANTS:
            raise ValueError(f"AbstractContext.relu must be one of {RELU_VARIANTS}, got {self.relu!r}")
