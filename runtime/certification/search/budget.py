"""A search's time: one `Budget`, made once from the user's limit and handed to every phase.

Every phase asks it: the root how long its first pass and its refinement may take (`share`), the rounds
whether another fits (`fits`, at the pace of the last one), the attacks whether one is due (`due`) and how
long it may run (`attack_until`); each phase's seconds are kept by name (`phase`) for the record."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

ATTACK_SHARE = 0.2
"""The share of a search's time that goes to attacks, each from new random starts, while it splits: on an
MNIST ConvSmall at eps 0.3, an image whose every subdomain bound stayed negative for 20 s fell to 13 of 20
attacks of different seeds, each under a second; alpha-beta-CROWN spends 100 random starts per class before
anything else instead. One attack, the root's included, takes at most this share of the search's time."""


@dataclass
class Budget:
    """The time of one search: it began at `start` and ends at `deadline` (`time.perf_counter()` values);
    `spent` holds each phase's seconds; `round_seconds` the last round's (a round starts only where that
    much still fits)."""

    start: float
    deadline: float
    spent: dict[str, float] = field(default_factory=dict)
    round_seconds: float = 0.0

    @classmethod
    def of(cls, seconds: float, until: float = math.inf) -> Budget:
        """A budget of `seconds` from now, cut at `until` (a property's limit covers its whole cascade)."""
        now = time.perf_counter()
        return cls(now, min(now + seconds, until))

    def left(self) -> float:
        """Seconds to the deadline (negative past it)."""
        return self.deadline - time.perf_counter()

    def over(self) -> bool:
        return time.perf_counter() >= self.deadline

    def share(self, fraction: float) -> float:
        """The deadline of a phase that may take `fraction` of the time left."""
        now = time.perf_counter()
        return now + fraction * max(self.deadline - now, 0.0)

    def fits(self, seconds: float | None = None) -> bool:
        """Whether `seconds` (default: the last round's) still fit before the deadline."""
        return time.perf_counter() + (self.round_seconds if seconds is None else seconds) < self.deadline

    def due(self) -> bool:
        """Whether an attack is due: attacks have had less than `ATTACK_SHARE` of the time so far."""
        return self.spent.get("attacks", 0.0) < ATTACK_SHARE * (time.perf_counter() - self.start)

    def attack_until(self) -> float:
        """The deadline of one attack: `ATTACK_SHARE` of the whole search's time, within the deadline."""
        return min(self.deadline, time.perf_counter() + ATTACK_SHARE * (self.deadline - self.start))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the seconds of the block to the phase `name`."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - began

    def record(self) -> dict[str, float]:
        """Where the time went, rounded for the record."""
        return {name: round(seconds, 3) for name, seconds in self.spent.items()}
