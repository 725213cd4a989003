"""Positions: code-point offsets to LSP positions and back, in each encoding a client may choose."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types as T

from daic.compiler.lsp.positions import PositionMap

LINE_ENDS = ["\r\n", "\r", "\n"]
texts = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(LINE_ENDS)), max_size=8).map("".join)


@given(text=texts, encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_positions_round_trip(text, encoding):
    positions = PositionMap.of_text(text, encoding)
    # Lines end at `\r\n`, `\r` or `\n`, as the protocol counts them.
    breaks = [(m.start(), m.end()) for m in re.finditer(r"\r\n|\r|\n", text)]
    for offset in range(len(text) + 1):
        before = [(start, end) for start, end in breaks if end <= offset]
        inside = next((start for start, end in breaks if start < offset < end), None)
        line_start = before[-1][1] if before else 0
        # Between the `\r` and the `\n` of one line break is the end of the line it ends.
        stop = inside if inside is not None else offset
        head = text[line_start:stop]
        units = {"utf-8": len(head.encode("utf-8")), "utf-16": len(head.encode("utf-16-le")) // 2}
        position = positions.position(offset)
        assert position == T.Position(len(before), units.get(encoding, len(head)))
        assert positions.offset(position) == stop


def test_a_lone_carriage_return_ends_a_line():
    positions = PositionMap.of_text("a\rb\r\nc\nd", "utf-16")
    starts = [positions.position(i) for i in (2, 5, 7)]
    assert starts == [T.Position(1, 0), T.Position(2, 0), T.Position(3, 0)]
    assert positions.offset(T.Position(1, 99)) == 3
    assert positions.end() == T.Position(3, 1)


def test_positions_past_the_end_are_clamped():
    positions = PositionMap.of_text("ab🙂\ncd", "utf-16")
    assert positions.offset(T.Position(0, 99)) == 3
    assert positions.offset(T.Position(7, 0)) == 6
    # Inside the surrogate pair of 🙂 (units 2 and 3): the character's start.
    assert positions.offset(T.Position(0, 3)) == 2
    assert positions.end() == T.Position(1, 2)
