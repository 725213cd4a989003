"""Semantic tokens: what each word of a source is, as the checker sees it, for the editor to colour.

The text's tokens (`cursor.tokens`, the lexer's rules) give every comment, string, number, operator and
keyword; the syntax tree and the checker's answers give the names their roles: a let (read-only; from the
standard library or not), a scheme or a study, a constructor or a layer kind of the registry, a keyword
argument, a scheme field or layer parameter, an import's module. A name the checker could not resolve
gets no token, so that the editor's plain colour marks it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from lsprotocol import types as T

from daic.compiler.checking.program import in_stdlib
from daic.compiler.constructors import REGISTRY
from daic.compiler.lsp.cursor import tokens
from daic.compiler.lsp.documents import Analysis
from daic.dsl import ast as A
from daic.dsl.parser import KEYWORDS

TYPES = (
    "namespace",
    "class",
    "function",
    "variable",
    "parameter",
    "property",
    "keyword",
    "string",
    "number",
    "operator",
    "comment",
)
MODIFIERS = ("declaration", "readonly", "defaultLibrary")
LEGEND = T.SemanticTokensLegend(token_types=list(TYPES), token_modifiers=list(MODIFIERS))
_LEXICAL = {"comment": "comment", "string": "string", "number": "number"}
_PART = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")

Role = tuple[str, tuple[str, ...]]  # a token type and its modifiers


def semantic_tokens(analysis: Analysis) -> T.SemanticTokens:
    roles = dict(_roles(analysis))
    positions = analysis.positions
    data: list[int] = []
    line = character = 0
    for token in tokens(analysis.text):
        role = _role(token, roles)
        if role is None:
            continue
        start, end = positions.position(token.start), positions.position(token.end)
        if start.line != end.line:
            continue  # the protocol's tokens lie on one line; no daic token spans two
        kind, modifiers = role
        delta = start.character - character if start.line == line else start.character
        bits = sum(1 << MODIFIERS.index(m) for m in modifiers)
        data += [start.line - line, delta, end.character - start.character, TYPES.index(kind), bits]
        line, character = start.line, start.character
    return T.SemanticTokens(data=data)


def _role(token, roles: dict[int, Role]) -> Role | None:
    if token.kind in _LEXICAL:
        return _LEXICAL[token.kind], ()
    if token.kind == "name":
        return roles.get(token.start) or (("keyword", ()) if token.text in KEYWORDS else None)
    if token.kind == "punct" and token.text in "+-*/":
        return "operator", ()
    return None


def _roles(analysis: Analysis) -> Iterator[tuple[int, Role]]:
    """The role of each name the tree holds, by the offset it starts at."""
    tree = analysis.tree
    if isinstance(tree, A.NetFile):
        yield from _net_roles(tree.layers)
    elif isinstance(tree, A.DaiFile) and analysis.module is not None:
        yield from _DaiRoles(analysis).statements(tree.statements)


def _net_roles(layers) -> Iterator[tuple[int, Role]]:
    for layer in layers:
        if REGISTRY.layer(layer.kind) is not None or REGISTRY.block(layer.kind) is not None:
            yield layer.kind_span.start, ("function", ("defaultLibrary",))
        for param in layer.params:
            yield param.name_span.start, ("parameter", ())
            yield from _constructors(param.value)
        yield from _net_roles(layer.body)


def _constructors(expr) -> Iterator[tuple[int, Role]]:
    """A .net value's names (there they can only be the registry's) and keyword arguments."""
    for node in _written(expr):
        if isinstance(node, A.Keyword):
            yield node.name_span.start, ("parameter", ())
        elif REGISTRY.lookup(node.dotted):
            yield node.span.start, ("function", ("defaultLibrary",))


def _written(expr) -> Iterator[A.Name | A.Keyword]:
    """The names (a call's callee too) and keyword arguments of an expression, in the order written."""
    if isinstance(expr, A.Name):
        yield expr
    elif isinstance(expr, A.Call):
        yield expr.func
        for arg in expr.args:
            yield from _written(arg)
        for keyword in expr.kwargs:
            yield keyword
            yield from _written(keyword.value)
    elif isinstance(expr, A.ListExpr):
        for item in expr.items:
            yield from _written(item)
    elif isinstance(expr, A.BinOp):
        yield from _written(expr.left)
        yield from _written(expr.right)
    elif isinstance(expr, A.Neg):
        yield from _written(expr.operand)


class _DaiRoles:
    """The roles of a checked .dai module's names."""

    def __init__(self, analysis: Analysis) -> None:
        self.text = analysis.text
        self.references = {r.name.span.start: r for r in analysis.module.references}

    def statements(self, statements) -> Iterator[tuple[int, Role]]:
        for statement in statements:
            if isinstance(statement, A.Import):
                yield from self._import(statement)
                continue
            if isinstance(statement, A.Let):
                yield statement.name_span.start, ("variable", ("declaration", "readonly"))
                yield from self.expr(statement.value)
                continue
            yield statement.name_span.start, ("class", ("declaration",))
            named = statement.scheme if isinstance(statement, A.Study) else statement.base
            if named is not None:
                yield from self.name(named)
            for field in statement.fields:
                yield field.name_span.start, ("property", ())
                yield from self.expr(field.value)

    def _import(self, statement: A.Import) -> Iterator[tuple[int, Role]]:
        if isinstance(statement.target, A.Name):
            for part in _PART.finditer(self.text, statement.target.span.start, statement.target.span.end):
                yield part.start(), ("namespace", ())
        if statement.alias is not None:  # the name after `as`, the statement's last
            yield statement.span.end - len(statement.alias), ("namespace", ())

    def expr(self, expr) -> Iterator[tuple[int, Role]]:
        for node in _written(expr):
            if isinstance(node, A.Keyword):
                yield node.name_span.start, ("parameter", ())
            else:
                yield from self.name(node)

    def name(self, name: A.Name) -> Iterator[tuple[int, Role]]:
        parts = list(_PART.finditer(self.text, name.span.start, name.span.end))
        for part in parts[:-1]:
            yield part.start(), ("namespace", ())
        role = self._resolved(name)
        if role is not None and parts:
            yield parts[-1].start(), role

    def _resolved(self, name: A.Name) -> Role | None:
        reference = self.references.get(name.span.start)
        if reference is not None:
            library = ("defaultLibrary",) if in_stdlib(reference.module.path) else ()
            if reference.let is not None:
                return "variable", ("readonly", *library)
            return "class", library
        if REGISTRY.lookup(name.dotted):
            return "function", ("defaultLibrary",)
        return None
