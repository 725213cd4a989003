"""The types of the languages. Int <: Float <: Schedule: any float parameter takes a schedule, as the paper
says, and any int is a float. Lists are covariant; `OneOf` is a union (a kernel size is an Int or a list)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Type:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ListOf(Type):
    item: Type = None  # type: ignore[assignment]

    def __init__(self, item: Type) -> None:
        object.__setattr__(self, "name", f"List[{item}]")
        object.__setattr__(self, "item", item)


@dataclass(frozen=True)
class OneOf(Type):
    options: tuple[Type, ...] = ()

    def __init__(self, *options: Type) -> None:
        object.__setattr__(self, "name", " or ".join(str(o) for o in options))
        object.__setattr__(self, "options", options)


INT = Type("Int")
FLOAT = Type("Float")
SCHEDULE = Type("Schedule")
BOOL = Type("Bool")
STR = Type("Str")
GOAL = Type("Goal")
DATASET = Type("Dataset")
TRANSFORM = Type("Transform")
OPTIMIZER = Type("Optimizer")
LR_SCHEDULE = Type("LrSchedule")
TEST = Type("Test")
DOMAIN = Type("Domain")
ACTIVATION = Type("Activation")
LAYER = Type("Layer")
SCHEME = Type("Scheme")
SAMPLER = Type("Sampler")
PRUNER = Type("Pruner")
STUDY = Type("Study")
ANY = Type("Any")  # what an expression has when an error already made its type unknowable

_NUMERIC_CHAIN = (INT, FLOAT, SCHEDULE)


def is_subtype(sub: Type, sup: Type) -> bool:
    if sub in (sup, ANY) or sup == ANY:
        return True
    if isinstance(sup, OneOf):
        return any(is_subtype(sub, option) for option in sup.options)
    if isinstance(sub, OneOf):
        return all(is_subtype(option, sup) for option in sub.options)
    if isinstance(sub, ListOf) and isinstance(sup, ListOf):
        return is_subtype(sub.item, sup.item)
    if sub in _NUMERIC_CHAIN and sup in _NUMERIC_CHAIN:
        return _NUMERIC_CHAIN.index(sub) <= _NUMERIC_CHAIN.index(sup)
    return False


def article(t: Type) -> str:
    """`a Goal`, `an Int`: for messages."""
    text = str(t)
    return ("an " if text[:1] in "AEIOU" else "a ") + text
