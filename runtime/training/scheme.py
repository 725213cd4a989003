"""A training scheme as runtime objects: what the compiler lowers a `scheme { ... }` to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from daic.runtime.certification.evaluate import Accuracy, Test, Verify
from daic.runtime.data.sets import Dataset
from daic.runtime.training.goals import Goal
from daic.runtime.training.optim import SGD, Adam, Steps
from daic.runtime.training.schedules import ScheduleLike


@dataclass
class Scheme:
    data: Dataset
    epsilon: ScheduleLike
    goal: Goal
    epochs: int
    net: str | None = None
    weights: str | None = None  # a checkpoint whose network weights training starts from
    batch: int = 50
    optimizer: SGD | Adam = field(default_factory=Adam)
    lr: Steps | None = None
    test: Sequence[Test] = field(default_factory=lambda: [Accuracy(), Verify()])
    test_every: int | None = None  # besides after the last epoch; None: only then
    relu: str = "hybrid"
    bn_stats: str = "clean"  # "clean" or "centres" (see `layers.normalization`)
    precise_bn: bool = False
    warmup_reg: float = 0.0  # Shi et al.'s lambda (see `regularisers`)
    l1: float = 0.0
    grad_clip: float | None = None
    seed: int = 0
    validation: float = 0.0  # the share of the training set tested instead of the test set
