"""The syntax tree of both languages. Every node carries its source span; spans (and the literal text of
numbers) do not take part in equality, so `parse(format(x)) == parse(x)` compares meaning, not layout."""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import NO_SPAN, Span


@dataclass(frozen=True, slots=True)
class Node:
    span: Span = field(default=NO_SPAN, compare=False, repr=False, kw_only=True)


# --- expressions (shared by .net keyword values and .dai) -------------------------------------------


@dataclass(frozen=True, slots=True)
class Number(Node):
    value: int | float
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class String(Node):
    value: str
    text: str = field(default="", compare=False)  # the literal as written, quotes and escapes included


@dataclass(frozen=True, slots=True)
class Bool(Node):
    value: bool


@dataclass(frozen=True, slots=True)
class Name(Node):
    """A possibly dotted name: `Box`, `relu`, `schemes.Baseline`."""

    parts: tuple[str, ...]

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True, slots=True)
class Keyword(Node):
    name: str
    value: Expr
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Call(Node):
    func: Name
    args: tuple[Expr, ...] = ()
    kwargs: tuple[Keyword, ...] = ()


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    items: tuple[Expr, ...] = ()


@dataclass(frozen=True, slots=True)
class BinOp(Node):
    op: str  # one of + - * /
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Neg(Node):
    operand: Expr


@dataclass(frozen=True, slots=True)
class Invalid(Node):
    """Text that stands where a value belongs but is none (`%s`, `<function relu at 0x...>`). The parser
    keeps it in the tree, reports it, and parses on, so one defect does not hide the next. `reason` is
    "placeholder" (`%s`), "repr" (`<...>`) or "number" (a literal that overflows a float)."""

    text: str
    reason: str


Expr = Number | String | Bool | Name | Call | ListExpr | BinOp | Neg | Invalid


@dataclass(frozen=True, slots=True)
class Comment(Node):
    text: str  # including the leading '#'


# --- .net ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Param(Node):
    name: str
    value: Expr
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Layer(Node):
    """One line of a network: a layer kind and its keyword parameters. Block heads such as `ParNet1`
    carry the indented lines under them as `body` (an empty tuple for a block with no lines)."""

    kind: str
    params: tuple[Param, ...] = ()
    body: tuple[Layer, ...] = ()
    kind_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True, slots=True)
class NetFile(Node):
    layers: tuple[Layer, ...] = ()
    comments: tuple[Comment, ...] = field(default=(), compare=False)


# --- .dai ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Import(Node):
    """`import stdlib.schemes` (a module of the standard library) or `import "nets/mine.dai"`."""

    target: Name | String
    alias: str | None = None


@dataclass(frozen=True, slots=True)
class Let(Node):
    name: str
    value: Expr
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Field(Node):
    name: str
    value: Expr
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Scheme(Node):
    name: str
    fields: tuple[Field, ...] = ()
    base: Name | None = None
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def get_field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


@dataclass(frozen=True, slots=True)
class Study(Node):
    """`study Name tunes Scheme { field = value ... }`: a study of the search spaces of `scheme`."""

    name: str
    scheme: Name
    fields: tuple[Field, ...] = ()
    name_span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def get_field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


Statement = Import | Let | Scheme | Study


@dataclass(frozen=True, slots=True)
class DaiFile(Node):
    statements: tuple[Statement, ...] = ()
    comments: tuple[Comment, ...] = field(default=(), compare=False)
