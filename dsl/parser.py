"""Parsers for `.net` and `.dai` files: text in, a syntax tree and diagnostics out, never an exception.

Both languages are parsed in pieces that stand alone (a `.net` file line by line, a `.dai` file statement
by statement), each with one LALR grammar from `grammar/`. A broken piece becomes a diagnostic and the
pieces around it still parse, so a file with three defects reports three, and an editor still gets a tree
for the rest of the text.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast as A
from . import diagnostics as D
from .scan import CLOSERS, MAX_DEPTH, MAX_OPERATORS, OPENERS, scan
from .source import LineIndex, Span, body_start

Tree_ = A.NetFile | A.DaiFile


@dataclass(frozen=True)
class ParseResult:
    tree: Tree_
    diagnostics: tuple[D.Diagnostic, ...]
    index: LineIndex

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


# --- grammars -----------------------------------------------------------------------------------------


@cache
def _lark(language: str) -> Lark:
    folder = resources.files(__package__) / "grammar"
    text = (folder / f"{language}.lark").read_text() + "\n" + (folder / "expr.lark").read_text()
    return Lark(text, parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True)


# Human names for the terminals an error message may list as expected.
_TERMINAL_NAMES = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "TRUE": "`True`",
    "FALSE": "`False`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "COMMA": "`,`",
    "EQUAL": "`=`",
    "DOT": "`.`",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "STAR": "`*`",
    "SLASH": "`/`",
    "IMPORT": "`import`",
    "LET": "`let`",
    "SCHEME": "`scheme`",
    "EXTENDS": "`extends`",
    "AS": "`as`",
}


def _describe_expected(expected: set[str], what: str) -> str:
    names = sorted({_TERMINAL_NAMES[t] for t in expected if t in _TERMINAL_NAMES})
    if "$END" in expected:
        names.append(f"the end of {what}")
    # Operators are always acceptable after a value; listing them buries what is missing.
    if len(names) > 4:
        names = [n for n in names if n not in {"`+`", "`-`", "`*`", "`/`", "`.`"}]
    if not names:
        return ""
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


# --- tree to AST --------------------------------------------------------------------------------------


class _Builder(Transformer):
    """Turns lark's tree for one piece into AST nodes with absolute spans."""

    def __init__(self, index: LineIndex, base: int) -> None:
        super().__init__()
        self.index = index
        self.base = base
        self.diagnostics: list[D.Diagnostic] = []

    def _span(self, start: int, end: int) -> Span:
        return self.index.span(self.base + start, self.base + end)

    def _tok(self, tok: Token) -> Span:
        return self._span(tok.start_pos, tok.end_pos)

    def _meta(self, meta) -> Span:
        return self._span(meta.start_pos, meta.end_pos)

    @staticmethod
    def _nodes(children: list) -> list:
        return [c for c in children if c is not None and not isinstance(c, Token)]

    # expressions
    def number(self, children: list) -> A.Expr:
        (tok,) = children
        text = str(tok)
        value: int | float = float(text) if any(c in text for c in ".eE") else int(text)
        if isinstance(value, float) and not math.isfinite(value):
            return A.Invalid(text, "number", span=self._tok(tok))
        return A.Number(value, text, span=self._tok(tok))

    def string(self, children: list) -> A.String:
        (tok,) = children
        body = str(tok)[1:-1]
        for match in re.finditer(r"\\(.)", body):
            if match.group(1) not in _ESCAPES:
                # Silently dropping the backslash turned `"nets\resnet.net"` into another path.
                start = self.base + tok.start_pos + 1 + match.start()
                self.diagnostics.append(
                    D.error(
                        D.UNKNOWN_ESCAPE,
                        f"`\\{match.group(1)}` is no escape in a string",
                        self.index.span(start, start + 2),
                        hint="write paths with `/`; a backslash itself is `\\\\`",
                    )
                )
        value = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)
        return A.String(value, str(tok), span=self._tok(tok))

    def true(self, children: list) -> A.Bool:
        return A.Bool(True, span=self._tok(children[0]))

    def false(self, children: list) -> A.Bool:
        return A.Bool(False, span=self._tok(children[0]))

    def invalid(self, children: list) -> A.Invalid:
        (tok,) = children
        reason = "placeholder" if tok.type == "PLACEHOLDER" else "repr"
        return A.Invalid(str(tok), reason, span=self._tok(tok))

    @v_args(meta=True)
    def name(self, meta, children: list) -> A.Name:
        parts = tuple(str(t) for t in children if isinstance(t, Token) and t.type == "NAME")
        return A.Name(parts, span=self._meta(meta))

    @v_args(meta=True)
    def paren(self, meta, children: list) -> A.Expr:
        # Parentheses only group; the formatter puts back the ones precedence needs.
        return self._nodes(children)[0]

    @v_args(meta=True)
    def binop(self, meta, children: list) -> A.BinOp:
        left, op, right = children
        return A.BinOp(str(op), left, right, span=self._meta(meta))

    @v_args(meta=True)
    def neg(self, meta, children: list) -> A.Expr:
        operand = children[1]
        if isinstance(operand, A.Number):
            # A negative literal is one number, as a reader sees it.
            return A.Number(-operand.value, "-" + operand.text, span=self._meta(meta))
        return A.Neg(operand, span=self._meta(meta))

    @v_args(meta=True)
    def keyword(self, meta, children: list) -> A.Keyword:
        name, _eq, value = children
        return A.Keyword(str(name), value, self._tok(name), span=self._meta(meta))

    def args(self, children: list) -> list:
        return self._nodes(children)

    @v_args(meta=True)
    def call(self, meta, children: list) -> A.Call:
        func = children[0]
        items = next((c for c in children[1:] if isinstance(c, list)), [])
        args = [item for item in items if not isinstance(item, A.Keyword)]
        kwargs = [item for item in items if isinstance(item, A.Keyword)]
        misplaced = [a for a in args if kwargs and a.span.start > kwargs[0].span.start]
        if misplaced:
            # One mistake, however many arguments it moved: the checker then binds none of them.
            many = len(misplaced) > 1
            self.diagnostics.append(
                D.error(
                    D.POSITIONAL_AFTER_KEYWORD,
                    f"positional argument{'s' if many else ''} after the keyword argument `{kwargs[0].name}`",
                    misplaced[0].span.cover(misplaced[-1].span),
                    hint=f"put positional arguments first, or name {'these' if many else 'this one'} too",
                )
            )
        return A.Call(func, tuple(args), tuple(kwargs), span=self._meta(meta))

    @v_args(meta=True)
    def list(self, meta, children: list) -> A.ListExpr:
        return A.ListExpr(tuple(self._nodes(children)), span=self._meta(meta))

    # .net
    @v_args(meta=True)
    def param(self, meta, children: list) -> A.Param:
        name, _eq, value = children
        return A.Param(str(name), value, self._tok(name), span=self._meta(meta))

    @v_args(meta=True)
    def layer_line(self, meta, children: list) -> A.Layer:
        kind = children[0]
        params = tuple(c for c in children[1:] if isinstance(c, A.Param))
        return A.Layer(str(kind), params, (), self._tok(kind), span=self._meta(meta))

    def start(self, children: list) -> list:
        return self._nodes(children)

    # .dai
    @v_args(meta=True)
    def import_stmt(self, meta, children: list) -> A.Import:
        target = children[1]
        if isinstance(target, Token):
            target = self.string([target])
        alias = next((str(t) for t in children[2:] if isinstance(t, Token) and t.type == "NAME"), None)
        return A.Import(target, alias, span=self._meta(meta))

    @v_args(meta=True)
    def let_stmt(self, meta, children: list) -> A.Let:
        _let, name, _eq, value = children
        return A.Let(str(name), value, self._tok(name), span=self._meta(meta))

    @v_args(meta=True)
    def field(self, meta, children: list) -> A.Field:
        name, _eq, value = children
        return A.Field(str(name), value, self._tok(name), span=self._meta(meta))

    @v_args(meta=True)
    def scheme(self, meta, children: list) -> A.Scheme:
        name = children[1]
        base = next((c for c in children[2:] if isinstance(c, A.Name)), None)
        fields = tuple(c for c in children if isinstance(c, A.Field))
        return A.Scheme(str(name), fields, base, self._tok(name), span=self._meta(meta))


# --- errors -------------------------------------------------------------------------------------------


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}


def _token_text(tok: Token) -> str:
    text = str(tok)
    return text if len(text) <= 40 else text[:37] + "..."


def _syntax_error(
    exc: UnexpectedInput, text: str, index: LineIndex, base: int, end: int, what: str
) -> D.Diagnostic:
    """One diagnostic for a lark error inside text[base:end]."""
    error_offset = base + (
        exc.pos_in_stream
        if isinstance(exc, UnexpectedCharacters)
        else (exc.token.start_pos if exc.token.type != "$END" else end - base)
    )
    scanned = scan(text, base, min(max(error_offset, base), end))
    unclosed_hint = None
    if scanned.unclosed:
        b = scanned.unclosed[-1]
        line, col = index.position(b.offset)
        unclosed_hint = f"the `{b.char}` at {line}:{col} is never closed"

    if isinstance(exc, UnexpectedCharacters):
        offset = base + exc.pos_in_stream
        ch = text[offset] if offset < len(text) else ""
        span = index.span(offset, offset + 1)
        if ch == '"':
            return D.error(
                D.UNTERMINATED_STRING,
                "string literal is not closed on its line",
                span,
                hint='strings are one line in double quotes: "like this"',
            )
        shown = ch if ch.isprintable() else repr(ch)[1:-1]
        message = f"unexpected character `{shown}`"
        hint = None
        if ch in CLOSERS:
            message = f"`{ch}` closes nothing"
            hint = unclosed_hint
        elif ch == "'":
            hint = 'strings use double quotes: "like this"'
        elif ch == "\t":
            hint = "use spaces"
        return D.error(D.UNEXPECTED_CHARACTER, message, span, hint=hint)

    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    expected = _describe_expected(set(exc.accepts or exc.expected), what)
    if tok.type == "$END":
        offset = end
        # Point at the last real character rather than at trailing blank lines.
        while offset > base and text[offset - 1].isspace():
            offset -= 1
        span = index.span(max(base, offset - 1), offset) if offset > base else index.span(base, base)
        message = f"unexpected end of {what}"
        if expected:
            message += f"; expected {expected}"
        return D.error(
            D.UNCLOSED_BRACKET if unclosed_hint else D.UNEXPECTED_END, message, span, hint=unclosed_hint
        )
    span = index.span(base + tok.start_pos, base + tok.end_pos)
    if tok.type in ("RPAR", "RSQB", "RBRACE") and not scanned.unclosed:
        return D.error(D.UNEXPECTED_TOKEN, f"`{tok}` closes nothing", span)
    message = f"unexpected `{_token_text(tok)}`"
    if expected:
        message += f"; expected {expected}"
    return D.error(D.UNEXPECTED_TOKEN, message, span, hint=unclosed_hint)


def _parse_piece(language: str, text: str, index: LineIndex, base: int, end: int, what: str):
    """Parse text[base:end] with one grammar. Returns (nodes or None, diagnostics)."""
    scanned = scan(text, base, end)
    if scanned.too_deep is not None:
        b = scanned.too_deep
        message = (
            f"brackets nested more than {MAX_DEPTH} levels deep"
            if b.char in OPENERS
            else f"more than {MAX_OPERATORS} operators in one chain"
        )
        span = index.span(b.offset, b.offset + 1)
        return None, [D.error(D.NESTING_TOO_DEEP, message, span, hint="name the inner parts with `let`")]
    builder = _Builder(index, base)
    try:
        tree = _parse_tree(language, text[base:end])
    except UnexpectedInput as exc:
        return None, [_syntax_error(exc, text, index, base, end, what)]
    nodes = builder.transform(tree)
    return nodes, builder.diagnostics


@lru_cache(maxsize=8192)
def _parse_tree(language: str, piece: str) -> Tree:
    """lark's tree for one piece. Cached by text: positions in it are relative to the piece, so a line that
    recurs (a `ReLU` in every block, or the unchanged lines of a file an editor re-checks) parses once."""
    return _lark(language).parse(piece)


def _comments(text: str, index: LineIndex) -> tuple[A.Comment, ...]:
    return tuple(A.Comment(text[s:e].rstrip(), span=index.span(s, e)) for s, e in scan(text).comments)


# --- .net ---------------------------------------------------------------------------------------------


def _is_blank(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def parse_net(text: str) -> ParseResult:
    """Parse a `.net` file: one layer per line; lines indented under a block head form its body."""
    index = LineIndex(text)
    diagnostics: list[D.Diagnostic] = []
    root: list[A.Layer] = []
    # Each open block: (its indentation, the list collecting its lines, the head layer or None for root).
    stack: list[tuple[str, list[A.Layer], A.Layer | None]] = [("", root, None)]
    finished: dict[int, tuple[A.Layer, ...]] = {}
    indent_style: str | None = None
    last: A.Layer | None = None  # the layer on the line before, which an indented line would belong to
    previous_failed = False

    def close_block() -> None:
        _indent, children, head = stack.pop()
        if head is not None:
            finished[id(head)] = tuple(children)

    first = body_start(text)
    for start, stop in index.bounds:
        start = max(start, first)
        line = text[start:stop]
        if _is_blank(line):
            continue
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if indent:
            style = "tabs" if indent.strip(" ") == indent and "\t" in indent else "spaces"
            mixed = " " in indent and "\t" in indent
            if mixed or (indent_style is not None and style != indent_style):
                diagnostics.append(
                    D.error(
                        D.MIXED_INDENTATION,
                        "indentation mixes tabs and spaces",
                        index.span(start, start + len(indent)),
                        hint="indent with 4 spaces",
                    )
                )
                last, previous_failed = None, True
                continue
            indent_style = indent_style or style
        current = stack[-1][0]
        if len(indent) > len(current):
            if last is None and not previous_failed:
                diagnostics.append(
                    D.error(
                        D.INDENTATION,
                        "unexpected indentation",
                        index.span(start, start + len(indent)),
                        hint="only the lines of a block such as ParNet1 or SkipNet2 are indented under it",
                    )
                )
                continue
            if last is not None and len(stack) > MAX_DEPTH:
                # Deeper down, the block holding this line was dropped (and reported) already.
                if len(stack) == MAX_DEPTH + 1:
                    diagnostics.append(
                        D.error(
                            D.NESTING_TOO_DEEP,
                            f"blocks nested more than {MAX_DEPTH} levels deep",
                            index.span(start, start + len(indent)),
                            hint="no network needs this depth; is the file generated with a wrong indent?",
                        )
                    )
                last = None
            # Under a line that failed to parse, the block still nests (head None) and is dropped quietly.
            stack.append((indent, [], last))
        else:
            levels = " or ".join(str(len(level[0])) for level in stack)
            while len(indent) < len(stack[-1][0]):
                close_block()
            if indent != stack[-1][0]:
                diagnostics.append(
                    D.error(
                        D.INDENTATION,
                        "this indentation matches no enclosing block",
                        index.span(start, start + len(indent)),
                        hint=f"indent as far as one of the enclosing blocks: {levels} characters",
                    )
                )
                last, previous_failed = None, True
                continue
        nodes, found = _parse_piece("net", text, index, start, stop, "the line")
        diagnostics.extend(found)
        last = nodes[0] if nodes else None
        previous_failed = last is None
        if last is not None:
            stack[-1][1].append(last)
    while len(stack) > 1:
        close_block()

    layers = tuple(_attach_bodies(layer, finished) for layer in root)
    tree = A.NetFile(layers, _comments(text, index), span=index.span(0, len(text)))
    diagnostics.extend(_invalid_values(tree))
    return ParseResult(tree, tuple(diagnostics), index)


def _attach_bodies(layer: A.Layer, bodies: dict[int, tuple[A.Layer, ...]]) -> A.Layer:
    body = bodies.get(id(layer))
    if body is None:
        return layer
    children = tuple(_attach_bodies(child, bodies) for child in body)
    return A.Layer(layer.kind, layer.params, children, layer.kind_span, span=layer.span)


# --- .dai ---------------------------------------------------------------------------------------------

_STATEMENT_START = re.compile(r"(import|let|scheme)\b")


def statement_pieces(text: str, index: LineIndex | None = None) -> list[tuple[int, int]]:
    """Cut a .dai file before each line that begins, at column 1, with a statement keyword."""
    index = index or LineIndex(text)
    first = body_start(text)
    starts = [max(start, first) for start, _ in index.bounds]
    cuts = [start for start in starts if _STATEMENT_START.match(text, start)]
    if not cuts or cuts[0] != first:
        cuts.insert(0, first)
    cuts.append(len(text))
    return [(a, b) for a, b in itertools.pairwise(cuts)]


def parse_dai(text: str) -> ParseResult:
    """Parse a `.dai` file: `import`, `let` and `scheme` statements."""
    index = LineIndex(text)
    diagnostics: list[D.Diagnostic] = []
    statements: list[A.Statement] = []
    for start, stop in statement_pieces(text, index):
        nodes, found = _parse_piece(
            "dai", text, index, start, stop, "the file" if stop == len(text) else "the statement"
        )
        diagnostics.extend(_explain_stray(d) for d in found)
        statements.extend(nodes or ())
    tree = A.DaiFile(tuple(statements), _comments(text, index), span=index.span(0, len(text)))
    diagnostics.extend(_invalid_values(tree))
    return ParseResult(tree, tuple(diagnostics), index)


def _explain_stray(diagnostic: D.Diagnostic) -> D.Diagnostic:
    """A file that starts with an expression gets told what a .dai file holds."""
    if diagnostic.code is D.UNEXPECTED_TOKEN and "expected `import`, `let`" in diagnostic.message:
        return D.Diagnostic(
            diagnostic.code,
            diagnostic.severity,
            diagnostic.message,
            diagnostic.span,
            hint="a .dai file holds `import`, `let` and `scheme` statements, "
            "e.g. `let goal = Mix(Point, Box, 0.5)`",
        )
    return diagnostic


# --- values that are not values -----------------------------------------------------------------------

_INTENDED = {
    # Known printing bugs of the paper's listings, with the value the paper's text gives.
    ("DeepLoss", "bw"): "Section 5.2 (Combo) gives bw=Until(90, Lin(0, 0.2, 50, 40), 0)",
}


def _invalid_values(tree: Tree_) -> list[D.Diagnostic]:
    found: list[D.Diagnostic] = []
    if isinstance(tree, A.NetFile):
        for layer in _walk_layers(tree.layers):
            for param in layer.params:
                found.extend(_report_invalid(param.value, _INTENDED.get((layer.kind, param.name))))
    else:
        for statement in tree.statements:
            values = (
                [f.value for f in statement.fields]
                if isinstance(statement, A.Scheme)
                else ([statement.value] if isinstance(statement, A.Let) else [])
            )
            for value in values:
                found.extend(_report_invalid(value, None))
    return found


def _walk_layers(layers: tuple[A.Layer, ...]) -> Iterator[A.Layer]:
    for layer in layers:
        yield layer
        yield from _walk_layers(layer.body)


def _children(expr: A.Expr) -> tuple[A.Expr, ...]:
    if isinstance(expr, A.Call):
        return expr.args + tuple(k.value for k in expr.kwargs)
    if isinstance(expr, A.ListExpr):
        return expr.items
    if isinstance(expr, A.BinOp):
        return (expr.left, expr.right)
    if isinstance(expr, A.Neg):
        return (expr.operand,)
    return ()


def _report_invalid(expr: A.Expr, intended: str | None) -> list[D.Diagnostic]:
    found: list[D.Diagnostic] = []
    work = [expr]
    while work:
        node = work.pop()
        children = _children(node)
        placeholders = [c for c in children if isinstance(c, A.Invalid) and c.reason == "placeholder"]
        if placeholders:
            # A run of placeholders in one call is one defect: the printer left the whole call unfilled.
            span = placeholders[0].span.cover(placeholders[-1].span)
            what = f"`{placeholders[0].text}`" + (
                f" ({len(placeholders)} times)" if len(placeholders) > 1 else ""
            )
            hint = "a format placeholder the paper's printer left unfilled; write the numbers it stood for"
            if intended:
                hint += f" ({intended})"
            found.append(D.error(D.NOT_A_VALUE, f"{what} is not a value", span, hint=hint))
        for child in children:
            if isinstance(child, A.Invalid) and child.reason != "placeholder":
                found.append(_invalid_leaf(child))
            elif not isinstance(child, A.Invalid):
                work.append(child)
    if isinstance(expr, A.Invalid):
        found.append(_invalid_leaf(expr))
    return sorted(found, key=lambda d: d.span.start)


def _invalid_leaf(node: A.Invalid) -> D.Diagnostic:
    if node.reason == "number":
        return D.error(D.NUMBER_OUT_OF_RANGE, f"number `{node.text}` is too large for a float", node.span)
    if node.reason == "placeholder":
        return D.error(
            D.NOT_A_VALUE,
            f"`{node.text}` is not a value",
            node.span,
            hint="a format placeholder left unfilled; write the value it stood for",
        )
    match = re.match(r"<(?:built-in )?function (\w+)", node.text)
    hint = (
        f"write the function's name: {match.group(1)}" if match else "write the value this object stood for"
    )
    return D.error(
        D.NOT_A_VALUE, f"`{node.text}` is a printed Python object, not a value", node.span, hint=hint
    )


def parse(text: str, language: str) -> ParseResult:
    """Parse `text` as `language` ("net" or "dai")."""
    if language == "net":
        return parse_net(text)
    if language == "dai":
        return parse_dai(text)
    raise ValueError(f"unknown language {language!r}")
