"""What surrounds the cursor, read from tokens: the fallback that works on half-typed text.

While a line or a statement is being typed it rarely parses, and the parser (which recovers per line and
per statement) then has no tree for exactly the place the user is editing. Completion and signature help
need only a little: the brackets open at the cursor, the call each belongs to, the argument or keyword
the cursor is in, the scheme field or layer parameter whose value it is typing. This module finds that by
tokenizing the cursor's own piece of text (its line in a .net file, its statement in a .dai file; the
parser cuts files at the same places) with the lexical rules of `dsl/grammar/expr.lark`. It decides
nothing about meaning: the callee and parameter names it returns are looked up in the registry by callers.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from daic.dsl.parser import statement_pieces
from daic.dsl.source import line_around

# The terminals of expr.lark (NAME, NUMBER, STRING, comments), plus an unterminated string, which is what
# the cursor sits in while a string is being typed.
_TOKEN = re.compile(
    r"""(?P<ws>[ \t\f]+)|(?P<nl>\r\n|\r|\n)|(?P<comment>\#[^\r\n]*)"""
    r"""|(?P<string>"(?:[^"\\\r\n]|\\[^\r\n])*"?)"""
    r"""|(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"""
    r"""|(?P<punct>[()\[\]{},.=+\-*/])|(?P<other>.)""",
    re.DOTALL,
)
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_OPERATORS = {"+", "-", "*", "/"}
_WORD = re.compile(r"[A-Za-z_0-9]")


@dataclass(frozen=True)
class Token:
    kind: str  # ws, nl, comment, string, number, name, punct, other
    text: str
    start: int
    end: int


def tokens(text: str, start: int = 0, end: int | None = None) -> list[Token]:
    end = len(text) if end is None else end
    found = []
    for m in _TOKEN.finditer(text, start, end):
        found.append(Token(m.lastgroup or "other", m.group(), m.start(), m.end()))
    return found


@dataclass
class Frame:
    """A bracket open at the cursor, and where in it the cursor is."""

    opener: str  # "(", "[" or "{"
    offset: int
    callee: str | None = None  # the (dotted) name before a "(", if any
    keyword: str | None = None  # the `name=` the cursor's argument starts with, if any
    positional: int = 0  # positional arguments before the cursor's argument
    used: list[str] = field(default_factory=list)  # keywords (scheme fields) written in this bracket
    level: list[Token] = field(default_factory=list)  # this bracket's own tokens in the current argument
    body: list[Token] = field(default_factory=list)  # this bracket's own tokens, all arguments


@dataclass
class Context:
    """Where the cursor is. `where` is one of:
    "comment", "string": inside one;
    "statement": where a .dai statement keyword goes; "import": after `import`;
    "extends": where a scheme's name goes (after `extends` or `tunes`);
    "name": where a new name is being declared (after `let`, `scheme` or `study`);
    "field": where a scheme field's name goes; "layer": where a .net layer kind goes;
    "param": where a .net layer parameter's key goes; "argument": at the start of a call's argument
    (a value or a keyword name); "value": inside a value; "none": nothing can be offered (after a
    complete import, between a let's name and its `=`, ...).
    """

    offset: int
    prefix: str  # the (possibly dotted) name typed up to the cursor
    prefix_start: int
    where: str
    frames: list[Frame]  # outermost first
    statement: str | None = None  # .dai: import / let / scheme / study; .net: None
    layer: str | None = None  # .net: the layer kind of the cursor's line
    key: str | None = None  # .net: the parameter whose value the cursor is in
    used: list[str] = field(default_factory=list)  # .net: the keys written on the line

    @property
    def innermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def call(self) -> Frame | None:
        """The innermost call the cursor is in, if its callee is a name."""
        for frame in reversed(self.frames):
            if frame.opener == "(" and frame.callee:
                return frame
            if frame.opener == "{":
                return None
        return None


def piece_bounds(text: str, offset: int, language: str) -> tuple[int, int]:
    """The piece of text the parser would parse on its own around `offset`: its line in a .net file, its
    statement in a .dai file (where the parser cuts it)."""
    if language == "net":
        return line_around(text, offset)
    pieces = statement_pieces(text)
    return pieces[max(0, bisect_right([start for start, _ in pieces], offset) - 1)]


_NAME_RUN = re.compile(r"(?<![A-Za-z_0-9.])[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*")


def word_at(text: str, offset: int) -> tuple[int, int]:
    """The (possibly dotted) name touching `offset`, as (start, end); (offset, offset) if none."""
    line_start, line_end = line_around(text, offset)
    for m in _NAME_RUN.finditer(text, line_start, line_end):
        if m.start() <= offset <= m.end():
            return m.start(), m.end()
        if m.start() > offset:
            break
    return offset, offset


def _name_before(text: str, dot: int) -> bool:
    return dot > 0 and bool(_WORD.match(text[dot - 1]))


def _callee(level: list[Token]) -> str | None:
    """`a.b` if the tokens end with a dotted name (the name a "(" calls)."""
    parts: list[str] = []
    i = len(level) - 1
    while i >= 0 and level[i].kind == "name":
        parts.append(level[i].text)
        if i >= 1 and level[i - 1].text == ".":
            i -= 2
        else:
            break
    return ".".join(reversed(parts)) or None


def _keyword(level: list[Token]) -> str | None:
    if len(level) >= 2 and level[0].kind == "name" and level[1].text == "=":
        return level[0].text
    return None


def _ends_value(level: list[Token]) -> bool:
    """Whether the tokens so far end a complete value (so that what follows starts something new)."""
    if not level:
        return False
    last = level[-1]
    return last.kind in ("name", "number", "string") or last.text in (")", "]", "}")


def _inside(tok: Token, offset: int) -> bool:
    """Whether the cursor is inside a comment or a string (an unclosed string runs to its line's end)."""
    if tok.kind == "comment":
        return tok.start < offset <= tok.end
    closed = len(tok.text) >= 2 and tok.text.endswith('"')
    return tok.start < offset < tok.end or (not closed and offset == tok.end)


def context(text: str, offset: int, language: str) -> Context:
    """Where the cursor at `offset` stands in its piece of the source (a statement, a field, a layer's
    parameter, a value, a comment or string) and the name being typed before it."""
    offset = max(0, min(offset, len(text)))
    start, stop = piece_bounds(text, offset, language)
    prefix_start = _name_start(text, offset, start)
    stack: list[Frame] = []
    top: list[Token] = []  # the piece's tokens outside every bracket
    snapshot: list[Frame] | None = None  # the frames open at the cursor, as they were there
    top_before: list[Token] = []
    inside: str | None = None
    for tok in tokens(text, start, stop):
        if snapshot is None and tok.start >= prefix_start:
            snapshot = _snapshot(stack)
            top_before = list(top)
        if tok.kind in ("comment", "string") and _inside(tok, offset):
            inside = tok.kind
        if tok.kind in ("ws", "nl", "comment"):
            continue
        _feed(stack, top, tok)
    if snapshot is None:
        snapshot, top_before = _snapshot(stack), list(top)

    ctx = Context(offset, text[prefix_start:offset], prefix_start, "value", snapshot)
    if inside is not None:
        ctx.where = inside
        return ctx
    if language == "net":
        return _net_context(ctx, top_before, top)
    at_line_start = prefix_start == 0 or text[prefix_start - 1] in "\r\n"
    if at_line_start and not snapshot:
        # The parser starts a statement at a line that begins with a keyword: a name typed at column 1
        # outside every bracket is the next statement's keyword.
        ctx.where = "statement"
        return ctx
    return _dai_context(ctx, top_before)


def _name_start(text: str, offset: int, start: int) -> int:
    """Where the (possibly dotted) name that ends at the cursor begins, not before the piece's `start`; the
    cursor itself inside a number (nothing is being named)."""
    prefix_start = offset
    while prefix_start > start and (
        _WORD.match(text[prefix_start - 1])
        or (text[prefix_start - 1] == "." and _name_before(text, prefix_start - 1))
    ):
        prefix_start -= 1
    if prefix_start < offset and text[prefix_start].isdigit():
        return offset
    return prefix_start


def _snapshot(stack: list[Frame]) -> list[Frame]:
    """Copies of the open frames (what comes after the cursor may still add to their `used` lists)."""
    return [
        Frame(
            f.opener,
            f.offset,
            f.callee,
            _keyword(f.level) if f.opener == "(" else None,
            f.positional,
            f.used,  # shared on purpose: keywords written after the cursor count as given too
            list(f.level),
            f.body,
        )
        for f in stack
    ]


def _feed(stack: list[Frame], top: list[Token], tok: Token) -> None:
    """One significant token into the bracket structure."""
    level = stack[-1].level if stack else top
    if stack:
        stack[-1].body.append(tok)
    if tok.text in _OPENERS:
        frame = Frame(tok.text, tok.start, _callee(level) if tok.text == "(" else None)
        level.append(tok)
        stack.append(frame)
        return
    if tok.text in _CLOSERS:
        match = next(
            (i for i in range(len(stack) - 1, -1, -1) if stack[i].opener == _CLOSERS[tok.text]), None
        )
        if match is not None:
            del stack[match:]
        (stack[-1].level if stack else top).append(tok)
        return
    if stack and tok.text == ",":
        frame = stack[-1]
        if frame.opener == "(" and frame.level and _keyword(frame.level) is None:
            frame.positional += 1
        frame.level = []
        return
    level.append(tok)
    if stack and tok.text == "=" and len(stack[-1].body) >= 2 and stack[-1].body[-2].kind == "name":
        stack[-1].used.append(stack[-1].body[-2].text)


def _net_context(ctx: Context, before: list[Token], line: list[Token]) -> Context:
    if before and before[0].kind == "name":
        ctx.layer = before[0].text
    ctx.used = [a.text for a, b in itertools.pairwise(line) if a.kind == "name" and b.text == "="]
    if ctx.frames:
        ctx.key = _last_key(before)
        ctx.where = "argument" if _at_argument_start(ctx.frames[-1]) else "value"
        return ctx
    if not before:
        ctx.where = "layer"
        return ctx
    if before[-1].text == "=" or before[-1].text in _OPERATORS:
        ctx.key = _last_key(before)
        ctx.where = "value"
        return ctx
    ctx.where = "param"
    return ctx


def _last_key(level: list[Token]) -> str | None:
    for a, b in zip(reversed(level[:-1]), reversed(level[1:]), strict=False):
        if b.text == "=" and a.kind == "name":
            return a.text
    return None


def _at_argument_start(frame: Frame) -> bool:
    return frame.opener == "(" and not frame.level


def _dai_context(ctx: Context, before: list[Token]) -> Context:
    keyword = before[0].text if before and before[0].kind == "name" else None
    ctx.statement = keyword if keyword in ("import", "let", "scheme", "study") else None
    frame = ctx.innermost
    if frame is not None:
        if frame.opener == "{":
            if frame.level and (
                frame.level[-1].text == "="
                or frame.level[-1].text in _OPERATORS
                or not _ends_value(frame.level)
            ):
                ctx.where = "value" if _last_key(frame.level) else "field"
            else:
                ctx.where = "field"
            return ctx
        ctx.where = "argument" if _at_argument_start(frame) else "value"
        return ctx
    if not before:
        ctx.where = "statement"
    elif ctx.statement == "import":
        ctx.where = "import" if len(before) == 1 else "none"
    elif ctx.statement == "let":
        ctx.where = (
            "value" if any(t.text == "=" for t in before) else ("name" if len(before) == 1 else "none")
        )
    elif ctx.statement in ("scheme", "study"):
        named = before[-1].text in ("extends", "tunes")
        ctx.where = "extends" if named else ("name" if len(before) == 1 else "none")
    else:
        ctx.where = "statement" if _ends_value(before) or before[-1].text == "}" else "none"
    return ctx


def field_of(frame: Frame) -> str | None:
    """The scheme field whose value the cursor is in (for a "{" frame)."""
    return _last_key(frame.level)


def previous_token(text: str, offset: int, language: str) -> Token | None:
    """The last significant token of the cursor's piece before `offset`."""
    start, _ = piece_bounds(text, offset, language)
    significant = [t for t in tokens(text, start, offset) if t.kind not in ("ws", "nl", "comment")]
    return significant[-1] if significant else None


def followed_by_equals(text: str, end: int) -> bool:
    """Whether a name ending at `end` is the left side of `=` (a keyword, field, parameter or let)."""
    rest = text[end : end + 200].lstrip(" \t\r\n")
    return rest.startswith("=")
