"""Source text and positions: spans on every node, line tables for renderers and editors."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Span:
    """A region of a source file. Lines and columns count from 1 (columns in code points); `end_column`
    is exclusive. `start`/`end` are 0-based code-point offsets into the text."""

    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int

    def cover(self, other: Span) -> Span:
        """The smallest span holding both."""
        first = self if self.start <= other.start else other
        last = self if self.end >= other.end else other
        return Span(first.line, first.column, last.end_line, last.end_column, first.start, last.end)


NO_SPAN = Span(1, 1, 1, 1, 0, 0)


class LineIndex:
    """Maps offsets to (line, column) and back for one text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a 0-based offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        return line + 1, offset - self.starts[line] + 1

    def offset(self, line: int, column: int) -> int:
        """0-based offset of a 1-based (line, column), clamped to the text."""
        if line < 1:
            return 0
        if line > len(self.starts):
            return len(self.text)
        start = self.starts[line - 1]
        stop = self.starts[line] - 1 if line < len(self.starts) else len(self.text)
        return min(start + max(column, 1) - 1, stop)

    def span(self, start: int, end: int) -> Span:
        line, col = self.position(start)
        end_line, end_col = self.position(end)
        return Span(line, col, end_line, end_col, start, end)

    def line_text(self, line: int) -> str:
        if not 1 <= line <= len(self.starts):
            return ""
        start = self.starts[line - 1]
        stop = self.starts[line] - 1 if line < len(self.starts) else len(self.text)
        return self.text[start:stop]

    @property
    def line_count(self) -> int:
        return len(self.starts)
