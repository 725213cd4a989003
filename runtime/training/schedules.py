"""Schedules (paper Section 4.1): functions of the training time ``t``, the fractional epoch.

``t`` is a Python float (e.g. 0.5 after half of the first epoch), so evaluating a schedule never touches a
device. Every float parameter of a layer or goal may be a schedule; `as_schedule` turns plain numbers into
`Const` so callers can treat both alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Union

ScheduleLike = Union["Schedule", Callable[[float], float], float, int]


class Schedule:
    """Base class: a schedule is called with the fractional epoch and returns a float."""

    def __call__(self, t: float) -> float:
        raise NotImplementedError


class Const(Schedule):
    """The same value at every time."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, t: float) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"Const({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("Const", self.value))


class Lin(Schedule):
    """``start`` for the first ``hold`` epochs, then linear to ``end`` over ``steps`` epochs, then ``end``.

    The argument order is the reference implementation's (``Lin(start, end, steps, initial=0)``), which
    produced every number in the paper, not the order of the prose of Section 4.1 ("a for the first m
    epochs, then anneal over n epochs"): the paper's three-argument uses such as ``Lin(0.1, 0, 50)`` only
    make sense this way.
    """

    def __init__(self, start: float, end: float, steps: float, hold: float = 0) -> None:
        if steps < 0 or hold < 0:
            raise ValueError(f"Lin: steps and hold must be >= 0, got steps={steps}, hold={hold}")
        self.start = float(start)
        self.end = float(end)
        self.steps = float(steps)
        self.hold = float(hold)

    def __call__(self, t: float) -> float:
        if t < self.hold:
            return self.start
        if self.steps == 0:
            return self.end
        frac = min(1.0, (t - self.hold) / self.steps)
        return self.start + (self.end - self.start) * frac

    def __repr__(self) -> str:
        return f"Lin({self.start!r}, {self.end!r}, {self.steps!r}, {self.hold!r})"


class Smooth(Lin):
    """The epsilon ramp of Shi et al. (NeurIPS 2021, auto_LiRPA's SmoothedScheduler), used by every
    certified-training method since: ``start`` for ``hold`` epochs, then over ``steps`` epochs a fourth
    power for the first quarter, then linear to ``end``, the two joined with the same slope (the value at
    the quarter is 1/13 of the way)."""

    def __call__(self, t: float) -> float:
        if t < self.hold:
            return self.start
        if self.steps == 0 or t >= self.hold + self.steps:
            return self.end
        x, span, change = t - self.hold, self.steps, self.end - self.start
        if x < span / 4:
            return self.start + change * 256 / 13 * (x / span) ** 4
        return self.start + change * (1 / 13 + 16 / 13 * (x / span - 0.25))

    def __repr__(self) -> str:
        return f"Smooth({self.start!r}, {self.end!r}, {self.steps!r}, {self.hold!r})"


class Until(Schedule):
    """``first`` before ``m`` epochs, then ``second`` evaluated at ``t - m``."""

    def __init__(self, m: float, first: ScheduleLike, second: ScheduleLike) -> None:
        self.m = float(m)
        self.first = as_schedule(first)
        self.second = as_schedule(second)

    def __call__(self, t: float) -> float:
        if t < self.m:
            return self.first(t)
        return self.second(t - self.m)

    def __repr__(self) -> str:
        return f"Until({self.m!r}, {self.first!r}, {self.second!r})"


class _Callable(Schedule):
    """Adapts an arbitrary callable so that everything downstream sees a `Schedule`."""

    def __init__(self, fn: Callable[[float], float]) -> None:
        self.fn = fn

    def __call__(self, t: float) -> float:
        return float(self.fn(t))

    def __repr__(self) -> str:
        return f"Schedule({self.fn!r})"


def as_schedule(value: ScheduleLike) -> Schedule:
    """Coerces a number (-> `Const`), a `Schedule` (unchanged) or a callable of ``t`` into a `Schedule`."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, bool):
        raise TypeError("a schedule cannot be a bool")
    if isinstance(value, (int, float)):
        return Const(value)
    if callable(value):
        return _Callable(value)
    raise TypeError(f"cannot use {value!r} as a schedule")
