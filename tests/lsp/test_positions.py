"""Positions: code-point offsets to LSP positions and back, in each encoding a client may choose."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types as T

from daic.compiler.lsp.positions import PositionMap


@given(text=st.text(max_size=40), encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_positions_round_trip(text, encoding):
    positions = PositionMap.of_text(text, encoding)
    for offset in range(len(text) + 1):
        head = text[text.rfind("\n", 0, offset) + 1 : offset]
        units = {"utf-8": len(head.encode("utf-8")), "utf-16": len(head.encode("utf-16-le")) // 2}
        position = positions.position(offset)
        assert position == T.Position(text.count("\n", 0, offset), units.get(encoding, len(head)))
        assert positions.offset(position) == offset


def test_positions_past_the_end_are_clamped():
    positions = PositionMap.of_text("ab🙂\ncd", "utf-16")
    assert positions.offset(T.Position(0, 99)) == 3
    assert positions.offset(T.Position(7, 0)) == 6
    # Inside the surrogate pair of 🙂 (units 2 and 3): the character's start.
    assert positions.offset(T.Position(0, 3)) == 2
    assert positions.end() == T.Position(1, 2)
