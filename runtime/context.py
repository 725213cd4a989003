"""The context an abstract forward pass runs in."""

from __future__ import annotations

from dataclasses import dataclass

RELU_VARIANTS = ("hybrid", "deepz")


@dataclass(frozen=True)
class AbstractContext:
    """Passed to every layer's ``abstract(value, ctx)``.

    - ``training``: abstract layers with ``only_train=True`` act only when this is set (at test and
      verification time they are skipped).
    - ``t``: training time as a fractional epoch, the argument of every schedule (DeepLoss's weight).
    - ``relu``: the hybrid-zonotope ReLU transformer, ``"hybrid"`` (the reference DiffAI transformer) or
      ``"deepz"`` (the minimal-area zonotope relaxation). Boxes always use the exact interval ReLU.

    It holds settings only: what a pass yields besides its output (a layer's step loss, the bounds that
    reached each ReLU) is read from the pass itself (`layers.base.trace`), never collected here.
    """

    training: bool = False
    t: float = 0.0
    relu: str = "hybrid"

    def __post_init__(self) -> None:
        if self.relu not in RELU_VARIANTS:
            raise ValueError(f"AbstractContext.relu must be one of {RELU_VARIANTS}, got {self.relu!r}")
