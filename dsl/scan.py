"""A total pre-pass over source text: comments, brackets and nesting depth, found without the grammar.

It never fails. The parsers use it to cut files into pieces that parse on their own (a line of a .net file,
a statement of a .dai file), to refuse absurd nesting before the grammar recurses into it, and to explain
a parse error with the bracket that was never closed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .source import LINE_BREAK

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
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
    stack: list[Bracket] = []
    chains = [0]  # operators since the last comma, per open bracket (the outermost level first)
    operators = 0  # their sum: how deep the current operator stands in the expression's tree
    too_deep: Bracket | None = None
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
            j = i + 1
            while j < end and text[j] not in '"\r\n':
                escaped = text[j] == "\\" and j + 1 < end and text[j + 1] not in "\r\n"
                j += 2 if escaped else 1
            if j >= end or text[j] != '"':
                unterminated = i if unterminated is None else unterminated
                i = j
                continue
            i = j + 1
            continue
        if ch in OPENERS:
            stack.append(Bracket(ch, i))
            chains.append(0)
            if len(stack) > MAX_DEPTH and too_deep is None:
                too_deep = stack[-1]
        elif ch in CLOSERS and stack and stack[-1].char == CLOSERS[ch]:
            stack.pop()
            operators -= chains.pop()
        elif ch in "+-*/":
            chains[-1] += 1
            operators += 1
            if operators > MAX_OPERATORS and too_deep is None:
                too_deep = Bracket(ch, i)
        elif ch == ",":
            operators -= chains[-1]
            chains[-1] = 0
        i += 1
    return Scan(tuple(comments), tuple(stack), too_deep, unterminated)
