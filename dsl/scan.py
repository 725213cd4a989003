"""A total pre-pass over source text: comments, brackets and nesting depth, found without the grammar.

It never fails. The parsers use it to cut files into pieces that parse on their own (a line of a .net file,
a statement of a .dai file), to refuse absurd nesting before the grammar recurses into it, and to explain
a parse error with the bracket that was never closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import LINE_BREAK

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
NESTING = "()[]{}+-*/,"
"""The characters that open or close a bracket, chain an operator, or end a chain (what `_Nesting` reads)."""
MAX_DEPTH = 64
MAX_OPERATORS = 200
"""Operators that may stand in one chain (`1 + 1 + ...`, `- - 1`), counted along the open brackets: each
one is a level of the tree that the parser's tree transformer and the checker recurse into (Python stops
them at about 480 such levels), and no real expression comes near it."""


@dataclass(frozen=True)
class Bracket:
    char: str
    offset: int


@dataclass(frozen=True)
class Scan:
    comments: tuple[tuple[int, int], ...]  # (start, end) offsets of each `#` comment
    unclosed: tuple[Bracket, ...]  # openers never closed, outermost first
    too_deep: Bracket | None  # the first opener past MAX_DEPTH, or operator past MAX_OPERATORS
    unterminated_string: int | None  # offset of a `"` whose line ends before its closing quote


def scan(text: str, start: int = 0, end: int | None = None) -> Scan:
    """Scan text[start:end] for comments, bracket balance and depth. Offsets are into `text`."""
    end = len(text) if end is None else end
    comments: list[tuple[int, int]] = []
    nesting = _Nesting()
    unterminated: int | None = None
    i = start
    while i < end:
        ch = text[i]
        if ch == "#":
            found = LINE_BREAK.search(text, i, end)
            stop = found.start() if found else end
            comments.append((i, stop))
            i = stop
            continue
        if ch == '"':
            after, closed = _string_end(text, i, end)
            if not closed and unterminated is None:
                unterminated = i
            i = after
            continue
        if ch in NESTING:
            nesting.read(ch, i)
        i += 1
    return Scan(tuple(comments), tuple(nesting.stack), nesting.too_deep, unterminated)


def _string_end(text: str, i: int, end: int) -> tuple[int, bool]:
    """Where the string whose quote is at `i` ends: after its closing quote (True), or where its line or
    the text ends first (False)."""
    j = i + 1
    while j < end and text[j] not in '"\r\n':
        escaped = text[j] == "\\" and j + 1 < end and text[j + 1] not in "\r\n"
        j += 2 if escaped else 1
    if j >= end or text[j] != '"':
        return j, False
    return j + 1, True


@dataclass
class _Nesting:
    """The open brackets, and the operators of the expression being read counted along them: `chains`
    holds the operators since the last comma per open bracket (the outermost level first), `operators`
    their sum, how deep the current operator stands in the expression's tree."""

    stack: list[Bracket] = field(default_factory=list)
    chains: list[int] = field(default_factory=lambda: [0])
    operators: int = 0
    too_deep: Bracket | None = None

    def read(self, ch: str, i: int) -> None:
        """One character outside comments and strings."""
        if ch in OPENERS:
            self.stack.append(Bracket(ch, i))
            self.chains.append(0)
            if len(self.stack) > MAX_DEPTH and self.too_deep is None:
                self.too_deep = self.stack[-1]
        elif ch in CLOSERS and self.stack and self.stack[-1].char == CLOSERS[ch]:
            self.stack.pop()
            self.operators -= self.chains.pop()
        elif ch in "+-*/":
            self.chains[-1] += 1
            self.operators += 1
            if self.operators > MAX_OPERATORS and self.too_deep is None:
                self.too_deep = Bracket(ch, i)
        elif ch == ",":
            self.operators -= self.chains[-1]
            self.chains[-1] = 0
