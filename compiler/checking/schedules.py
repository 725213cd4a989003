"""When a scheme's schedules stop changing, read off its checked values (the registry's `ScheduleFacts`):
a run whose epochs end sooner trains on what the schedule is midway (a tenth of the scheme's epsilon, its
learning-rate steps skipped), which `daic check` and `daic run --epochs` say."""

from __future__ import annotations

from collections.abc import Mapping

from daic.compiler.checking.values import Built


def settles(value: object) -> float:
    """The epoch from which `value` no longer changes: a schedule's own (a ramp's hold + steps, Until's
    switch plus what follows), a value holding schedules (a goal's weights) their latest, else 0."""
    if isinstance(value, tuple):
        return max((settles(v) for v in value), default=0.0)
    if not isinstance(value, Built):
        return 0.0
    facts = value.decl.schedule
    if facts is not None:
        try:
            return float(facts.settles(value.args, settles))
        except (KeyError, TypeError):  # an argument the checker could not determine
            return 0.0
    return max((settles(v) for v in value.args.values()), default=0.0)


def unsettled(fields: Mapping[str, object], epochs: object) -> list[tuple[str, float]]:
    """The fields of a scheme whose schedules still change after `epochs`, with the epoch each settles."""
    if not isinstance(epochs, int) or isinstance(epochs, bool):
        return []
    found = [(name, settles(value)) for name, value in fields.items() if name != "epochs"]
    return [(name, end) for name, end in found if end > epochs]


def described(late: list[tuple[str, float]]) -> str:
    """`epsilon until epoch 21, lr until epoch 30`."""
    return ", ".join(f"{name} until epoch {end:g}" for name, end in late)
