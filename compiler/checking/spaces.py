"""Search spaces as checked values: what `Range(0.1, 0.8)` or `Choice([Box, CROWNIBP])` elaborates to, and
the walks over a scheme's values that find them and put chosen values in their place.

A space is one parameter of a study however often it is used: a let that holds one hands every use the same
`Space` object, so a study draws it once. Two spaces written apart are two parameters, even if equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from daic.compiler.registry import Constructor
from daic.compiler.types import Type
from daic.dsl import ast as A
from daic.dsl.source import Span


@dataclass(frozen=True, eq=False)
class Space:
    """A search space: `options` are a range's (low, high) or a Choice's values; `type` is what the space
    ranges over. Compared by identity: each written space is its own parameter."""

    decl: Constructor
    options: tuple[object, ...]
    type: Type
    step: int = 1
    span: Span | None = field(default=None, repr=False)  # the space as written (its call)
    parts: tuple[A.Expr, ...] = field(default=(), repr=False)  # each option (or end) as written
    label: str | None = None  # the let that names it, if one does

    @property
    def is_choice(self) -> bool:
        """Whether it chooses among listed values, not from a range."""
        return self.decl.space.choice

    def places(self, used: A.Expr) -> tuple[A.Expr, ...]:
        """Where to report on each option: where it is written, when the space is written at `used`; at
        `used` when a let brings it there (its options are written in another place, maybe another file)."""
        return self.parts if self.span is used.span else (used,) * len(self.options)

    def __repr__(self) -> str:
        shown = ", ".join(repr(o) for o in self.options)
        return f"{self.decl.name}({'[' + shown + ']' if self.is_choice else shown})"


def walk(
    value: object, field_name: str, visit: Callable[[Space, str], None], where: str | None = None
) -> None:
    """Calls `visit(space, name)` for every space in `value` (a checked value: numbers, strings, tuples,
    `Built`s) and in each Choice's options, outermost first. `value` is the field `field_name`'s, or lies
    at `where` in it; a space is named by the constructor and parameter holding it (`goal.SmallBox.ratio`),
    or `optimizer.lr` where the field's own value holds it, or the field's name where it is the value."""
    from daic.compiler.checking.values import Built

    if isinstance(value, Space):
        visit(value, where or field_name)
        if value.is_choice:
            for option in value.options:
                walk(option, field_name, visit, where)
    elif isinstance(value, tuple):
        for item in value:
            walk(item, field_name, visit, where)
    elif isinstance(value, Built):
        holder = "" if where is None else f".{value.decl.name}"
        for name, arg in value.args.items():
            walk(arg, field_name, visit, f"{field_name}{holder}.{name}")


def named_spaces(fields: Mapping[str, object]) -> list[tuple[str, Space]]:
    """Every distinct space in a block's field values, outermost first, each with the name a study gives
    its parameter: the let's that holds it, else where it stands; a name met twice gets `#2`, `#3`, ..."""
    found: list[tuple[str, Space]] = []

    def visit(space: Space, where: str) -> None:
        if any(space is s for _, s in found):
            return
        name = space.label or where
        taken = {n for n, _ in found}
        count = 1
        while (name if count == 1 else f"{name}#{count}") in taken:
            count += 1
        found.append((name if count == 1 else f"{name}#{count}", space))

    for field_name, value in fields.items():
        walk(value, field_name, visit)
    return found


def spaces_in(value: object) -> list[Space]:
    """Every distinct space in `value`, outermost first."""
    found: list[Space] = []

    def visit(space: Space, where: str) -> None:
        if not any(space is s for s in found):
            found.append(space)

    walk(value, "", visit)
    return found


def resolve(value: object, choose: Callable[[Space], object]) -> object:
    """`value` with each space replaced by `choose(space)` (which may hold spaces of its own: a Choice's
    option, resolved in turn)."""
    from daic.compiler.checking.values import Built

    if isinstance(value, Space):
        return resolve(choose(value), choose)
    if isinstance(value, tuple):
        return tuple(resolve(v, choose) for v in value)
    if isinstance(value, Built):
        args = {name: resolve(arg, choose) for name, arg in value.args.items()}
        return replace(value, args=MappingProxyType(args))
    return value
