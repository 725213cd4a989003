"""Positions between the compiler and the client: code-point offsets on one side, LSP positions on the other.

The compiler counts columns in code points; an LSP position counts `character` in the code units of the
encoding agreed at initialisation (UTF-16 unless the client offers another). A character outside the Basic
Multilingual Plane is one code point, two UTF-16 units and four UTF-8 bytes, so every conversion goes
through the line's text. Lines are split by `daic.dsl.source.LINE_BREAK` (`\\r\\n`, `\\r` or `\\n`, as the
protocol counts them), the rule the parser and `LineIndex` follow, so the compiler's spans and the client's
lines agree.
"""

from __future__ import annotations

from lsprotocol import types as T

from daic.dsl.source import LineIndex, Span

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == UTF16:
        return 2 if code > 0xFFFF else 1
    if encoding == UTF8:
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    return 1


class PositionMap:
    """Converts between 0-based code-point offsets into one text and LSP positions in one encoding."""

    def __init__(self, index: LineIndex, encoding: str = UTF16) -> None:
        self.index = index
        # An lsprotocol PositionEncodingKind is a str enum; its value is the protocol's name.
        self.encoding = str(getattr(encoding, "value", encoding) or UTF16)
        # Most sources are ASCII, where every encoding counts code points: skip the per-character walk.
        self.ascii = index.text.isascii()

    @classmethod
    def of_text(cls, text: str, encoding: str = UTF16) -> PositionMap:
        return cls(LineIndex(text), encoding)

    def position(self, offset: int) -> T.Position:
        """The LSP position of a code-point offset (clamped to the text)."""
        line, column = self.index.position(offset)
        start = self.index.starts[line - 1]
        head = self.index.text[start : start + column - 1]
        if self.encoding == UTF32 or self.ascii or head.isascii():
            return T.Position(line - 1, len(head))
        return T.Position(line - 1, sum(_units(c, self.encoding) for c in head))

    def offset(self, position: T.Position) -> int:
        """The code-point offset of an LSP position. Past the end of its line (or of the text) it is
        clamped, as the protocol asks; inside a surrogate pair or a UTF-8 sequence it rounds down."""
        if position.line < 0:
            return 0
        if position.line >= self.index.line_count:
            return len(self.index.text)
        start, stop = self.index.bounds[position.line]
        wanted = max(position.character, 0)
        if self.encoding == UTF32 or self.ascii:
            return min(start + wanted, stop)
        units = 0
        offset = start
        while offset < stop:
            step = _units(self.index.text[offset], self.encoding)
            if units + step > wanted:
                break
            units += step
            offset += 1
        return offset

    def range(self, start: int, end: int) -> T.Range:
        return T.Range(self.position(start), self.position(end))

    def span_range(self, span: Span) -> T.Range:
        return self.range(span.start, span.end)

    def end(self) -> T.Position:
        return self.position(len(self.index.text))
