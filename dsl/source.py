"""Source text and positions: spans on every node, line tables for renderers and editors."""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import total_ordering


class Origin:
    """Where a piece of a text begins: its offset, and the lines before it. The spans of the piece's syntax
    tree count from it, so that when an edit elsewhere moves the piece, moving its origin moves them all,
    and the language server reuses the tree instead of parsing the piece again."""

    __slots__ = ("line", "offset")

    def __init__(self, offset: int = 0, line: int = 0) -> None:
        self.offset = offset
        self.line = line

    def move(self, offset: int, line: int) -> None:
        self.offset = offset
        self.line = line


FIXED = Origin()  # the origin of spans counted from the start of the text; it never moves


@total_ordering
class Span:
    """A region of a source file. Lines and columns count from 1 (columns in code points); `end_column`
    is exclusive. `start`/`end` are 0-based code-point offsets into the text. Lines and offsets are
    counted from the span's `origin` (a piece's start; the text's start by default): read through their
    properties, they are the text's."""

    __slots__ = ("_end", "_end_line", "_line", "_start", "column", "end_column", "origin")

    def __init__(
        self,
        line: int,
        column: int,
        end_line: int,
        end_column: int,
        start: int,
        end: int,
        origin: Origin = FIXED,
    ) -> None:
        self._line, self.column, self._end_line, self.end_column = line, column, end_line, end_column
        self._start, self._end, self.origin = start, end, origin

    @property
    def line(self) -> int:
        return self._line + self.origin.line

    @property
    def end_line(self) -> int:
        return self._end_line + self.origin.line

    @property
    def start(self) -> int:
        return self._start + self.origin.offset

    @property
    def end(self) -> int:
        return self._end + self.origin.offset

    def _key(self) -> tuple[int, int, int, int, int, int]:
        return (self.line, self.column, self.end_line, self.end_column, self.start, self.end)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Span) and self._key() == other._key()

    def __lt__(self, other: Span) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        line, column, end_line, end_column, start, end = self._key()
        return f"Span({line=}, {column=}, {end_line=}, {end_column=}, {start=}, {end=})"

    def cover(self, other: Span) -> Span:
        """The smallest span holding both (moving with their origin when they share one)."""
        first = self if self.start <= other.start else other
        last = self if self.end >= other.end else other
        if first.origin is last.origin:
            return Span(
                first._line,
                first.column,
                last._end_line,
                last.end_column,
                first._start,
                last._end,
                first.origin,
            )
        return Span(first.line, first.column, last.end_line, last.end_column, first.start, last.end)


NO_SPAN = Span(1, 1, 1, 1, 0, 0)


LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""What ends a line, as the Language Server Protocol counts them: `\\r\\n`, a lone `\\r` or `\\n`. The parser
(where comments and lines end), the positions of spans and of the editor, and the formatter all split lines
by this one rule, so that they never disagree about which line a character is on."""


def line_bounds(text: str) -> list[tuple[int, int]]:
    """(start, stop) offsets of each line, its line break excluded. A text has at least one line; one
    that ends with a break has an empty last line."""
    bounds = []
    start = 0
    for match in LINE_BREAK.finditer(text):
        bounds.append((start, match.start()))
        start = match.end()
    bounds.append((start, len(text)))
    return bounds


def line_around(text: str, offset: int) -> tuple[int, int]:
    """(start, stop) of the line that holds `offset`, its line break excluded."""
    start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    found = LINE_BREAK.search(text, offset)
    return start, found.start() if found else len(text)


BOM = "\ufeff"


def body_start(text: str) -> int:
    """Where the source begins: after a byte-order mark, which editors may keep at the start of a text."""
    return len(BOM) if text.startswith(BOM) else 0


class LineIndex:
    """Maps offsets to (line, column) and back for one text, with lines split by `LINE_BREAK`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.bounds = line_bounds(text)
        self.starts = [start for start, _ in self.bounds]

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a 0-based offset; one inside a line break is at the end of its line."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        start, stop = self.bounds[line]
        return line + 1, min(offset, stop) - start + 1

    def offset(self, line: int, column: int) -> int:
        """0-based offset of a 1-based (line, column), clamped to the text and to the line's end."""
        if line < 1:
            return 0
        if line > len(self.bounds):
            return len(self.text)
        start, stop = self.bounds[line - 1]
        return min(start + max(column, 1) - 1, stop)

    def span(self, start: int, end: int, origin: Origin = FIXED) -> Span:
        """The span from `start` to `end` in this index's text, counted from `origin` when this text is a
        piece of a larger one that begins there."""
        line, col = self.position(start)
        end_line, end_col = self.position(end)
        return Span(line, col, end_line, end_col, start, end, origin)

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its line break ("" past the last line)."""
        if not 1 <= line <= len(self.bounds):
            return ""
        start, stop = self.bounds[line - 1]
        return self.text[start:stop]

    @property
    def line_count(self) -> int:
        return len(self.bounds)
