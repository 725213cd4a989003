"""What the cursor's place expects, from the registry: the parameter of the enclosing call (by keyword or
position, with the checker's choice among a constructor's positional forms), the scheme field, or the
.net layer parameter, and the type each declares."""

from __future__ import annotations

from dataclasses import dataclass

from daic.compiler.checking.elaborate import Elaborator
from daic.compiler.constructors import REGISTRY, SCHEME_DECL
from daic.compiler.lsp.cursor import Context, Frame, field_of
from daic.compiler.registry import BLOCK_CATEGORIES, LAYER_CATEGORIES, Constructor, Param
from daic.compiler.types import ANY, ListOf, OneOf, Type

_ELABORATOR = Elaborator(REGISTRY, [])


def constructors(name: str) -> list[Constructor]:
    """Declarations callable by `name` in an expression (layers and the scheme are not)."""
    return [d for d in REGISTRY.lookup(name) if d.category not in (*LAYER_CATEGORIES, *BLOCK_CATEGORIES)]


def block_decl(ctx: Context) -> Constructor:
    """The declaration of the fields of the block (`scheme`, `study`) the cursor is in."""
    return REGISTRY.block(ctx.statement or "") or SCHEME_DECL


def positional_form(decl: Constructor, count: int) -> tuple[str, ...]:
    """The parameter names that `count` positional arguments bind to, as the checker chooses them."""
    return _ELABORATOR.positional_form(decl, count)


@dataclass(frozen=True)
class Slot:
    """A parameter the cursor's argument binds to: `index` is the parameter's place in `decl.params`."""

    decl: Constructor
    param: Param | None
    index: int | None


def call_slots(frame: Frame) -> list[Slot]:
    """For each declaration of the frame's callee: the parameter the cursor's argument binds to."""
    slots = []
    for decl in constructors(frame.callee or ""):
        if frame.keyword is not None:
            name: str | None = frame.keyword
        else:
            form = positional_form(decl, frame.positional + 1)
            name = form[frame.positional] if frame.positional < len(form) else None
        param = decl.param(name) if name else None
        index = decl.params.index(param) if param is not None else None
        slots.append(Slot(decl, param, index))
    return slots


def layer_decl(kind: str | None) -> Constructor | None:
    return REGISTRY.layer(kind) if kind else None


def expected_params(ctx: Context) -> list[Param] | None:
    """The parameters whose value the cursor is typing; None when nothing says (anything may go)."""
    for frame in reversed(ctx.frames):
        if frame.opener == "(":
            if frame.callee is None:
                continue  # grouping parentheses: the value belongs to what is outside them
            return [s.param for s in call_slots(frame) if s.param is not None] or None
        if frame.opener == "{":
            name = field_of(frame)
            param = block_decl(ctx).param(name) if name else None
            return [param] if param else None
    decl = layer_decl(ctx.layer)
    if decl is not None and ctx.key:
        param = decl.param(ctx.key)
        return [param] if param else None
    return None


def _lists(ctx: Context) -> int:
    """How many list brackets lie between the cursor and the parameter that expects the value."""
    count = 0
    for frame in reversed(ctx.frames):
        if frame.opener == "[":
            count += 1
        elif frame.opener == "{" or (frame.opener == "(" and frame.callee):
            break
    return count


def _item(kind: Type) -> Type | None:
    if isinstance(kind, ListOf):
        return kind.item
    if isinstance(kind, OneOf):
        items = [o.item for o in kind.options if isinstance(o, ListOf)]
        return items[0] if items else None
    return ANY if kind == ANY else None


def expected_types(ctx: Context) -> list[Type] | None:
    """The types a value at the cursor may have; None when unknown."""
    params = expected_params(ctx)
    if params is None:
        return None
    kinds: list[Type] = []
    for param in params:
        kind: Type | None = param.type
        for _ in range(_lists(ctx)):
            kind = _item(kind) if kind is not None else None
        if kind is not None and kind not in kinds:
            kinds.append(kind)
    return kinds
