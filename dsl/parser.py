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
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast as A
from . import diagnostics as D
from .scan import CLOSERS, MAX_DEPTH, MAX_OPERATORS, OPENERS, scan
from .source import LineIndex, Origin, Span, body_start

Tree_ = A.NetFile | A.DaiFile


@dataclass
class _Piece:
    """A piece of a text parsed on its own (a .dai statement, a .net line): its nodes, what parsing it
    reported, its comments. Their spans count from the piece's origin."""

    nodes: tuple
    diagnostics: tuple[D.Diagnostic, ...]
    comments: tuple[A.Comment, ...]
    origin: Origin


class Pieces:
    """The pieces of one document's last parse, by text. The next parse of the document (the language
    server's, after an edit) takes each piece whose text it finds again and moves its origin to where the
    piece now is, instead of parsing it again. Only pieces without diagnostics are kept: a message may name
    a position (`the ( at 3:9 is never closed`) that moving the piece would not update."""

    def __init__(self) -> None:
        self._by_text: dict[tuple[str, int], list[_Piece]] = {}

    def take(self, text: tuple[str, int], offset: int, line: int) -> _Piece | None:
        found = self._by_text.get(text)
        if not found:
            return None
        piece = found.pop()
        piece.origin.move(offset, line)
        return piece

    def keep(self, text: tuple[str, int], piece: _Piece) -> None:
        if not piece.diagnostics:
            self._by_text.setdefault(text, []).append(piece)


@dataclass(frozen=True)
class ParseResult:
    tree: Tree_
    diagnostics: tuple[D.Diagnostic, ...]
    index: LineIndex
    pieces: Pieces = field(default_factory=Pieces, compare=False)  # for the next parse of the same document

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


# --- grammars -----------------------------------------------------------------------------------------


@cache
def _lark(language: str) -> Lark:
    folder = resources.files(__package__) / "grammar"
    text = (folder / f"{language}.lark").read_text() + "\n" + (folder / "expr.lark").read_text()
    return Lark(text, parser="lalr", lexer="contextual", maybe_placeholders=True)


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
    "STUDY": "`study`",
    "TUNES": "`tunes`",
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


@dataclass
class _Window:
    """The text of one piece, from the start of its first line, and the origin its spans count from."""

    text: str  # the whole text
    start: int
    end: int
    line: int  # the line it starts on

    def __post_init__(self) -> None:
        self.index = LineIndex(self.text[self.start : self.end])
        self.origin = Origin(self.start, self.line - 1)

    def span(self, start: int, end: int) -> Span:
        """The span of text[start:end] (offsets into the whole text), counted from the origin."""
        return self.index.span(start - self.start, end - self.start, self.origin)

    def position(self, offset: int) -> tuple[int, int]:
        line, column = self.index.position(offset - self.start)
        return line + self.origin.line, column


class _Builder(Transformer):
    """Turns lark's tree for one piece into AST nodes, with spans that count from the piece's origin."""

    def __init__(self, window: _Window, base: int) -> None:
        super().__init__()
        self.window = window
        self.base = base
        self.diagnostics: list[D.Diagnostic] = []
        # Each parenthesized expression's node, with the extent of its parentheses, by the node's id: what
        # contains the expression extends over them, as in the source, though the node itself (parentheses
        # only group) does not. Holding the node keeps its id from going to another node.
        self.parenthesized: dict[int, tuple[A.Node, int, int]] = {}

    def _span(self, start: int, end: int) -> Span:
        return self.window.span(self.base + start, self.base + end)

    def _tok(self, tok: Token) -> Span:
        return self._span(tok.start_pos, tok.end_pos)

    def _extent(self, children: list) -> Span:
        """The span from the first child to the last (tokens, nodes, or lists of nodes): computed here,
        cheaper than lark's propagation of positions to every tree node."""
        parts = [c for c in children if c is not None and c != []]
        first, last = parts[0], parts[-1]
        first = first[0] if isinstance(first, list) else first
        last = last[-1] if isinstance(last, list) else last
        return self.window.span(self._bounds(first)[0], self._bounds(last)[1])

    def _bounds(self, child: Token | A.Node) -> tuple[int, int]:
        if isinstance(child, Token):
            return self.base + child.start_pos, self.base + child.end_pos
        found = self.parenthesized.get(id(child))
        return found[1:] if found is not None else (child.span.start, child.span.end)

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
                        self.window.span(start, start + 2),
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

    def name(self, children: list) -> A.Name:
        parts = tuple(str(t) for t in children if isinstance(t, Token) and t.type == "NAME")
        return A.Name(parts, span=self._extent(children))

    def paren(self, children: list) -> A.Expr:
        # Parentheses only group; the formatter puts back the ones precedence needs.
        inner = self._nodes(children)[0]
        self.parenthesized[id(inner)] = (inner, self._bounds(children[0])[0], self._bounds(children[-1])[1])
        return inner

    def binop(self, children: list) -> A.BinOp:
        left, op, right = children
        return A.BinOp(str(op), left, right, span=self._extent(children))

    def neg(self, children: list) -> A.Expr:
        operand = children[1]
        if isinstance(operand, A.Number):
            # A negative literal is one number, as a reader sees it.
            return A.Number(-operand.value, "-" + operand.text, span=self._extent(children))
        return A.Neg(operand, span=self._extent(children))

    def keyword(self, children: list) -> A.Keyword:
        name, _eq, value = children
        return A.Keyword(str(name), value, self._tok(name), span=self._extent(children))

    def args(self, children: list) -> list:
        return self._nodes(children)

    def call(self, children: list) -> A.Call:
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
        return A.Call(func, tuple(args), tuple(kwargs), span=self._extent(children))

    def list(self, children: list) -> A.ListExpr:
        return A.ListExpr(tuple(self._nodes(children)), span=self._extent(children))

    # .net
    def param(self, children: list) -> A.Param:
        name, _eq, value = children
        return A.Param(str(name), value, self._tok(name), span=self._extent(children))

    def layer_line(self, children: list) -> A.Layer:
        kind = children[0]
        params = tuple(c for c in children[1:] if isinstance(c, A.Param))
        return A.Layer(str(kind), params, (), self._tok(kind), span=self._extent(children))

    def start(self, children: list) -> list:
        return self._nodes(children)

    # .dai
    def import_stmt(self, children: list) -> A.Import:
        target = children[1]
        if isinstance(target, Token):
            target = self.string([target])
        alias = next((str(t) for t in children[2:] if isinstance(t, Token) and t.type == "NAME"), None)
        return A.Import(target, alias, span=self._extent(children))

    def let_stmt(self, children: list) -> A.Let:
        _let, name, _eq, value = children
        return A.Let(str(name), value, self._tok(name), span=self._extent(children))

    def field(self, children: list) -> A.Field:
        name, _eq, value = children
        return A.Field(str(name), value, self._tok(name), span=self._extent(children))

    def scheme(self, children: list) -> A.Scheme:
        name = children[1]
        base = next((c for c in children[2:] if isinstance(c, A.Name)), None)
        fields = tuple(c for c in children if isinstance(c, A.Field))
        return A.Scheme(str(name), fields, base, self._tok(name), span=self._extent(children))

    def study(self, children: list) -> A.Study:
        name = children[1]
        scheme = next(c for c in children[2:] if isinstance(c, A.Name))
        fields = tuple(c for c in children if isinstance(c, A.Field))
        return A.Study(str(name), scheme, fields, self._tok(name), span=self._extent(children))


# --- errors -------------------------------------------------------------------------------------------


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}


def _token_text(tok: Token) -> str:
    text = str(tok)
    return text if len(text) <= 40 else text[:37] + "..."


def _syntax_error(exc: UnexpectedInput, window: _Window, base: int, what: str) -> D.Diagnostic:
    """One diagnostic for a lark error inside text[base:end] of the window."""
    text, end = window.text, window.end
    error_offset = base + (
        exc.pos_in_stream
        if isinstance(exc, UnexpectedCharacters)
        else (exc.token.start_pos if exc.token.type != "$END" else end - base)
    )
    scanned = scan(text, base, min(max(error_offset, base), end))
    unclosed_hint = None
    if scanned.unclosed:
        b = scanned.unclosed[-1]
        line, col = window.position(b.offset)
        unclosed_hint = f"the `{b.char}` at {line}:{col} is never closed"
    if isinstance(exc, UnexpectedCharacters):
        return _unexpected_character(window, base + exc.pos_in_stream, unclosed_hint)
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    expected = _describe_expected(set(exc.accepts or exc.expected), what)
    if tok.type == "$END":
        return _unexpected_end(window, base, what, expected, unclosed_hint)
    span = window.span(base + tok.start_pos, base + tok.end_pos)
    if tok.type in ("RPAR", "RSQB", "RBRACE") and not scanned.unclosed:
        return D.error(D.UNEXPECTED_TOKEN, f"`{tok}` closes nothing", span)
    message = f"unexpected `{_token_text(tok)}`"
    if expected:
        message += f"; expected {expected}"
    return D.error(D.UNEXPECTED_TOKEN, message, span, hint=unclosed_hint)


def _unexpected_character(window: _Window, offset: int, unclosed_hint: str | None) -> D.Diagnostic:
    """A character no token starts with: an unclosed string, a stray closer, a quote or tab of habit."""
    text = window.text
    ch = text[offset] if offset < len(text) else ""
    span = window.span(offset, offset + 1)
    if ch == '"':
        hint = 'strings are one line in double quotes: "like this"'
        return D.error(D.UNTERMINATED_STRING, "string literal is not closed on its line", span, hint=hint)
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


def _unexpected_end(
    window: _Window, base: int, what: str, expected: str, unclosed_hint: str | None
) -> D.Diagnostic:
    """The text ended before the grammar was done: reported at its last real character."""
    text, offset = window.text, window.end
    # Point at the last real character rather than at trailing blank lines.
    while offset > base and text[offset - 1].isspace():
        offset -= 1
    span = window.span(max(base, offset - 1), offset) if offset > base else window.span(base, base)
    message = f"unexpected end of {what}"
    if expected:
        message += f"; expected {expected}"
    return D.error(
        D.UNCLOSED_BRACKET if unclosed_hint else D.UNEXPECTED_END, message, span, hint=unclosed_hint
    )


def _parse_piece(language: str, window: _Window, base: int, what: str) -> _Piece:
    """Parse text[base:end] of the window with one grammar (`base` is past the indentation or a
    byte-order mark that begins the window)."""
    text, end = window.text, window.end
    scanned = scan(text, base, end)
    comments = tuple(A.Comment(text[s:e].rstrip(), span=window.span(s, e)) for s, e in scanned.comments)
    if scanned.too_deep is not None:
        b = scanned.too_deep
        message = (
            f"brackets nested more than {MAX_DEPTH} levels deep"
            if b.char in OPENERS
            else f"more than {MAX_OPERATORS} operators in one chain"
        )
        span = window.span(b.offset, b.offset + 1)
        problem = D.error(D.NESTING_TOO_DEEP, message, span, hint="name the inner parts with `let`")
        return _Piece((), (problem,), comments, window.origin)
    builder = _Builder(window, base)
    try:
        tree = _parse_tree(language, text[base:end])
    except UnexpectedInput as exc:
        return _Piece((), (_syntax_error(exc, window, base, what),), comments, window.origin)
    nodes = tuple(builder.transform(tree))
    return _Piece(nodes, (*builder.diagnostics, *_invalid_values(nodes)), comments, window.origin)


@dataclass
class _Pieces:
    """Parsing one text piece by piece: each piece is taken from the last parse of the document when that
    had one of the same text (`reuse`), else parsed; every piece is kept for the next parse."""

    language: str
    text: str
    index: LineIndex
    reuse: Pieces
    kept: Pieces = field(default_factory=Pieces)

    def piece(self, start: int, end: int, base: int, what: str) -> _Piece:
        """The piece text[start:end], starting a line, parsed from `base` (past a byte-order mark or
        indentation); `what` names it in messages ("the line")."""
        # The same text parsed from another point (a byte-order mark skipped at the start of the file
        # only) is another piece.
        key = (self.text[start:end], base - start)
        line = self.index.position(start)[0]
        piece = self.reuse.take(key, start, line - 1)
        if piece is None:
            piece = _parse_piece(self.language, _Window(self.text, start, end, line), base, what)
        self.kept.keep(key, piece)
        return piece


@lru_cache(maxsize=1024)
def _parse_tree(language: str, piece: str) -> Tree:
    """lark's tree for one piece. Cached by text (positions in it are relative to the piece), so that a
    line that recurs, such as a `ReLU` in every block, parses once. (An editor's unchanged pieces are
    reused whole, through `Pieces`.)"""
    return _lark(language).parse(piece)


def _comments(text: str, index: LineIndex, start: int, end: int) -> list[A.Comment]:
    """The comments of text[start:end], a line not parsed (only a comment, or wrongly indented)."""
    return [A.Comment(text[s:e].rstrip(), span=index.span(s, e)) for s, e in scan(text, start, end).comments]


# --- .net ---------------------------------------------------------------------------------------------


def parse_net(text: str, reuse: Pieces | None = None) -> ParseResult:
    """Parse a `.net` file: one layer per line; lines indented under a block head form its body. `reuse`:
    the pieces of this document's last parse."""
    lines = _NetLines(text, reuse or Pieces())
    first = body_start(text)
    for line_start, stop in lines.index.bounds:
        start = max(line_start, first)
        line = text[start:stop]
        if not line.strip():
            continue
        if line.strip().startswith("#"):
            lines.comments.extend(_comments(text, lines.index, start, stop))
            continue
        lines.read(line_start, start, stop)
    return lines.result()


class _NetLines:
    """The lines of a `.net` file read one at a time into nested blocks, by their indentation."""

    def __init__(self, text: str, reuse: Pieces) -> None:
        self.text, self.index = text, LineIndex(text)
        self.pieces = _Pieces("net", text, self.index, reuse)
        self.comments: list[A.Comment] = []
        self.diagnostics: list[D.Diagnostic] = []
        self.root: list[A.Layer] = []
        # Each open block: (its indentation, the list collecting its lines, the head layer or None for root).
        self.stack: list[tuple[str, list[A.Layer], A.Layer | None]] = [("", self.root, None)]
        self.finished: dict[int, tuple[A.Layer, ...]] = {}
        self.indent_style: str | None = None
        self.last: A.Layer | None = None  # the layer on the line before, which an indented line would join
        self.previous_failed = False

    def read(self, line_start: int, start: int, stop: int) -> None:
        """One line that holds a layer: placed in its block by its indentation, then parsed."""
        line = self.text[start:stop]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if indent and not self._consistent(indent, start):
            self._drop(start, stop)
            return
        placed = (
            self._deeper(indent, start)
            if len(indent) > len(self.stack[-1][0])
            else self._level(indent, start)
        )
        if not placed:
            self._drop(start, stop)
            return
        piece = self.pieces.piece(line_start, stop, start, "the line")
        self.diagnostics.extend(piece.diagnostics)
        self.comments.extend(piece.comments)
        self.last = piece.nodes[0] if piece.nodes else None
        self.previous_failed = self.last is None
        if self.last is not None:
            self.stack[-1][1].append(self.last)

    def result(self) -> ParseResult:
        while len(self.stack) > 1:
            self._close_block()
        layers = tuple(_attach_bodies(layer, self.finished) for layer in self.root)
        tree = A.NetFile(layers, tuple(self.comments), span=self.index.span(0, len(self.text)))
        return ParseResult(tree, tuple(self.diagnostics), self.index, self.pieces.kept)

    def _consistent(self, indent: str, start: int) -> bool:
        """Whether the indentation keeps to one of tabs or spaces, as the file's first indented line did."""
        style = "tabs" if indent.strip(" ") == indent and "\t" in indent else "spaces"
        mixed = " " in indent and "\t" in indent
        if mixed or (self.indent_style is not None and style != self.indent_style):
            self._error(
                D.MIXED_INDENTATION,
                "indentation mixes tabs and spaces",
                start,
                indent,
                "indent with 4 spaces",
            )
            self.last, self.previous_failed = None, True
            return False
        self.indent_style = self.indent_style or style
        return True

    def _deeper(self, indent: str, start: int) -> bool:
        """A line indented further than its block opens a block under the line before it."""
        if self.last is None and not self.previous_failed:
            hint = "only the lines of a block such as ParNet1 or SkipNet2 are indented under it"
            self._error(D.INDENTATION, "unexpected indentation", start, indent, hint)
            return False
        if self.last is not None and len(self.stack) > MAX_DEPTH:
            # Deeper down, the block holding this line was dropped (and reported) already.
            if len(self.stack) == MAX_DEPTH + 1:
                hint = "no network needs this depth; is the file generated with a wrong indent?"
                self._error(
                    D.NESTING_TOO_DEEP,
                    f"blocks nested more than {MAX_DEPTH} levels deep",
                    start,
                    indent,
                    hint,
                )
            self.last = None
        # Under a line that failed to parse, the block still nests (head None) and is dropped quietly.
        self.stack.append((indent, [], self.last))
        return True

    def _level(self, indent: str, start: int) -> bool:
        """A line indented as far as its block or less closes the blocks it leaves, and must match one."""
        levels = " or ".join(str(len(level[0])) for level in self.stack)
        while len(indent) < len(self.stack[-1][0]):
            self._close_block()
        if indent == self.stack[-1][0]:
            return True
        hint = f"indent as far as one of the enclosing blocks: {levels} characters"
        self._error(D.INDENTATION, "this indentation matches no enclosing block", start, indent, hint)
        self.last, self.previous_failed = None, True
        return False

    def _close_block(self) -> None:
        _indent, children, head = self.stack.pop()
        if head is not None:
            self.finished[id(head)] = tuple(children)

    def _drop(self, start: int, stop: int) -> None:
        """A line not parsed: only its comments are kept."""
        self.comments.extend(_comments(self.text, self.index, start, stop))

    def _error(self, code: str, message: str, start: int, indent: str, hint: str) -> None:
        span = self.index.span(start, start + len(indent))
        self.diagnostics.append(D.error(code, message, span, hint=hint))


def _attach_bodies(layer: A.Layer, bodies: dict[int, tuple[A.Layer, ...]]) -> A.Layer:
    body = bodies.get(id(layer))
    if body is None:
        return layer
    children = tuple(_attach_bodies(child, bodies) for child in body)
    return A.Layer(layer.kind, layer.params, children, layer.kind_span, span=layer.span)


# --- .dai ---------------------------------------------------------------------------------------------

# The words of the grammars' keyword terminals (dai.lark's, and expr.lark's literals): no name is one.
KEYWORDS = frozenset({"import", "let", "scheme", "study", "extends", "tunes", "as", "True", "False"})
STATEMENT_START = re.compile(r"(import|let|scheme|study)\b")  # a line that begins one starts a statement


def statement_pieces(text: str, index: LineIndex | None = None) -> list[tuple[int, int]]:
    """Cut a .dai file before each line that begins, at column 1, with a statement keyword."""
    index = index or LineIndex(text)
    first = body_start(text)
    starts = [max(start, first) for start, _ in index.bounds]
    cuts = [start for start in starts if STATEMENT_START.match(text, start)]
    if not cuts or cuts[0] != first:
        cuts.insert(0, first)
    cuts.append(len(text))
    return [(a, b) for a, b in itertools.pairwise(cuts)]


def parse_dai(text: str, reuse: Pieces | None = None) -> ParseResult:
    """Parse a `.dai` file: `import`, `let`, `scheme` and `study` statements. `reuse`: the pieces of this
    document's last parse."""
    index = LineIndex(text)
    pieces = _Pieces("dai", text, index, reuse or Pieces())
    diagnostics: list[D.Diagnostic] = []
    statements: list[A.Statement] = []
    comments: list[A.Comment] = []
    first = body_start(text)
    for start, stop in statement_pieces(text, index):
        # The first piece starts at the text's start, before a byte-order mark.
        window_start = 0 if start == first else start
        piece = pieces.piece(window_start, stop, start, "the file" if stop == len(text) else "the statement")
        diagnostics.extend(_explain_stray(d) for d in piece.diagnostics)
        statements.extend(piece.nodes)
        comments.extend(piece.comments)
    tree = A.DaiFile(tuple(statements), tuple(comments), span=index.span(0, len(text)))
    return ParseResult(tree, tuple(diagnostics), index, pieces.kept)


def _explain_stray(diagnostic: D.Diagnostic) -> D.Diagnostic:
    """A file that starts with an expression gets told what a .dai file holds."""
    if diagnostic.code is D.UNEXPECTED_TOKEN and "expected `import`, `let`" in diagnostic.message:
        return D.Diagnostic(
            diagnostic.code,
            diagnostic.severity,
            diagnostic.message,
            diagnostic.span,
            hint="a .dai file holds `import`, `let`, `scheme` and `study` statements, "
            "e.g. `let goal = Mix(Point, Box, 0.5)`",
        )
    return diagnostic


# --- values that are not values -----------------------------------------------------------------------

_INTENDED = {
    # Known printing bugs of the paper's listings, with the value the paper's text gives.
    ("DeepLoss", "bw"): "Section 5.2 (Combo) gives bw=Until(90, Lin(0, 0.2, 50, 40), 0)",
}


def _invalid_values(nodes: tuple[A.Layer | A.Statement, ...]) -> list[D.Diagnostic]:
    """Values that are no values in one piece's layer or statements."""
    found: list[D.Diagnostic] = []
    for node in nodes:
        if isinstance(node, A.Layer):
            for param in node.params:
                found.extend(_report_invalid(param.value, _INTENDED.get((node.kind, param.name))))
        elif isinstance(node, A.Scheme | A.Study):
            for f in node.fields:
                found.extend(_report_invalid(f.value, None))
        elif isinstance(node, A.Let):
            found.extend(_report_invalid(node.value, None))
    return found


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


def parse(text: str, language: str, reuse: Pieces | None = None) -> ParseResult:
    """Parse `text` as `language` ("net" or "dai"), reusing the pieces of the document's last parse."""
    if language == "net":
        return parse_net(text, reuse)
    if language == "dai":
        return parse_dai(text, reuse)
    raise ValueError(f"unknown language {language!r}")
